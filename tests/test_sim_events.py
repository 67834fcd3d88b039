"""EventRecorder: client-go Event shape and aggregation, Karpenter-style dedupe."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sim.events import EventRecorder
from sim.store import EVENTS, NAMESPACES, NODES, PODS, Store


class Clock:
    """Fake monotonic and wall clocks advanced by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=self.t)


@pytest.fixture
def store() -> Store:
    s = Store()
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    s.create(NAMESPACES, {"metadata": {"name": "team"}})
    return s


@pytest.fixture
def clock() -> Clock:
    return Clock()


def recorder(store: Store, clock: Clock, component: str = "karpenter") -> EventRecorder:
    return EventRecorder(store, component, monotonic=clock.monotonic, now=clock.now)


def events(store: Store) -> list[dict[str, Any]]:
    return store.list(EVENTS)[0]


def test_event_shape_follows_client_go(store: Store, clock: Clock) -> None:
    pod = store.create(
        PODS, {"metadata": {"name": "web", "namespace": "team"}, "spec": {"containers": []}}
    )
    recorder(store, clock, "default-scheduler").record(
        pod, "Warning", "FailedScheduling", "0/0 nodes"
    )
    [event] = events(store)
    assert event["metadata"]["namespace"] == "team"
    assert re.fullmatch(r"web\.[0-9a-f]{16}", event["metadata"]["name"])
    assert event["involvedObject"] == {
        "kind": "Pod",
        "namespace": "team",
        "name": "web",
        "uid": pod["metadata"]["uid"],
        "apiVersion": "v1",
        "resourceVersion": pod["metadata"]["resourceVersion"],
    }
    assert event["type"] == "Warning" and event["reason"] == "FailedScheduling"
    assert event["message"] == "0/0 nodes" and event["count"] == 1
    assert event["source"] == {"component": "default-scheduler"}
    assert event["reportingComponent"] == "default-scheduler"
    assert event["reportingInstance"] == "default-scheduler"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2025-01-01T00:01:40Z"


def test_cluster_scoped_objects_get_events_in_default(store: Store, clock: Clock) -> None:
    node = store.create(NODES, {"metadata": {"name": "n1"}})
    recorder(store, clock).record(node, "Normal", "Ready", "node is ready")
    [event] = events(store)
    assert event["metadata"]["namespace"] == "default"
    assert "namespace" not in event["involvedObject"]
    assert event["involvedObject"]["kind"] == "Node"


def test_identical_events_aggregate_into_count(store: Store, clock: Clock) -> None:
    pod = store.create(PODS, {"metadata": {"name": "web", "namespace": "default"}, "spec": {}})
    rec = recorder(store, clock)
    rec.record(pod, "Warning", "FailedScheduling", "no")
    clock.t += 30
    rec.record(pod, "Warning", "FailedScheduling", "no")
    rec.record(pod, "Warning", "FailedScheduling", "other message")
    by_message = {e["message"]: e for e in events(store)}
    assert by_message["no"]["count"] == 2
    assert by_message["no"]["firstTimestamp"] == "2025-01-01T00:01:40Z"
    assert by_message["no"]["lastTimestamp"] == "2025-01-01T00:02:10Z"
    assert by_message["other message"]["count"] == 1


def test_a_deleted_event_is_recreated_on_repeat(store: Store, clock: Clock) -> None:
    pod = store.create(PODS, {"metadata": {"name": "web", "namespace": "default"}, "spec": {}})
    rec = recorder(store, clock)
    rec.record(pod, "Normal", "Nominated", "x")
    [event] = events(store)
    store.delete(EVENTS, "default", event["metadata"]["name"])
    rec.record(pod, "Normal", "Nominated", "x")
    [again] = events(store)
    assert again["count"] == 1 and again["metadata"]["name"] != event["metadata"]["name"]


def test_dedupe_drops_repeats_within_the_window(store: Store, clock: Clock) -> None:
    pod = store.create(PODS, {"metadata": {"name": "web", "namespace": "default"}, "spec": {}})
    rec = recorder(store, clock)
    rec.record(pod, "Warning", "FailedScheduling", "no fit", dedupe_seconds=300)
    clock.t += 299
    rec.record(pod, "Warning", "FailedScheduling", "no fit", dedupe_seconds=300)
    assert [e["count"] for e in events(store)] == [1]
    clock.t += 2  # the window runs from the first emission, not refreshed by drops
    rec.record(pod, "Warning", "FailedScheduling", "no fit", dedupe_seconds=300)
    assert [e["count"] for e in events(store)] == [2]


def test_dedupe_key_replaces_the_message(store: Store, clock: Clock) -> None:
    pod = store.create(PODS, {"metadata": {"name": "web", "namespace": "default"}, "spec": {}})
    rec = recorder(store, clock)
    uid = pod["metadata"]["uid"]
    rec.record(
        pod,
        "Normal",
        "Nominated",
        "Pod should schedule on: nodeclaim/a",
        dedupe_seconds=120,
        dedupe_key=uid,
    )
    rec.record(
        pod,
        "Normal",
        "Nominated",
        "Pod should schedule on: nodeclaim/b",
        dedupe_seconds=120,
        dedupe_key=uid,
    )
    assert [e["message"] for e in events(store)] == ["Pod should schedule on: nodeclaim/a"]


def test_recording_never_raises(
    store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    ghost = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "x", "namespace": "nowhere", "uid": "u"},
    }
    recorder(store, clock).record(ghost, "Warning", "FailedScheduling", "no")
    assert events(store) == []
    assert "failed" in caplog.text
