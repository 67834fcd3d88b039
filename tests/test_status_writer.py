"""The status writer never tells a pod something older than the cluster shows
(`controller.reports.StatusWriter`): an open status for a pod that left the pending set,
or whose annotation shows a status decided on a newer version of it, is dropped; one
whose write's answer shows the pod bound records no Event and leaves the pod owed its
final status; final statuses go first; each status and Event names the pod version it
was decided on."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

from controller.cache import InformerCache, Kind
from controller.decisions import Event, SetStatus
from controller.executor import each
from controller.memory import Memory
from controller.metrics import Lane
from controller.model import PodRef, ScaleUpStatus, TriggerInfo
from controller.nodes import NodeClaimInfo
from controller.reports import BATCH, StatusWriter, newer
from controller.statuses import provisioning
from intent.contract import ANNOTATION_GPUS, ANNOTATION_SCALE_UP, Phase
from intent.kube import Kube
from intent.text import gpus_for_people, usd_for_people

TRIGGERED = ScaleUpStatus(Phase.TRIGGERED, "trigger t asks", "t")
SCHEDULED = ScaleUpStatus(Phase.SCHEDULED, "scheduled on node n1", None, "c1", "n1")


class FakeKube:
    """Records status annotations and Events in order; a pod in ``bound`` answers with
    that node (it was bound before the write landed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.bound: dict[str, str] = {}

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> dict[str, Any]:
        self.calls.append(("annotate", name, annotations))
        await asyncio.sleep(0)
        meta = {"namespace": namespace, "name": name, "resourceVersion": "50"}
        meta["annotations"] = {**annotations, ANNOTATION_GPUS: "0.5"}
        return {"metadata": meta, "spec": {"nodeName": self.bound.get(name, "")}}

    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append(("event", body["involvedObject"]["name"], body))


def writer(kube: FakeKube) -> tuple[StatusWriter, InformerCache, Memory]:
    memory = Memory(lambda: 0.0)
    cache = InformerCache(lambda: 0.0, observer=memory)

    async def write(lane: Lane, coro: Any) -> Any:
        return await coro

    status_writer = StatusWriter(
        cast(Kube, kube),
        cache,
        memory,
        write=write,
        each=lambda act, items: each(act, items, 4),
        now=lambda: datetime(2026, 11, 27, tzinfo=UTC),
        instance="test",
        poke=lambda: None,
    )
    return status_writer, cache, memory


def pending(
    cache: InformerCache, name: str, version: str, status: ScaleUpStatus | None = None
) -> PodRef:
    annotations = {ANNOTATION_GPUS: "0.5"}
    if status is not None:
        annotations[ANNOTATION_SCALE_UP] = status.to_annotation()
    meta = {"namespace": "ml", "name": name, "uid": f"u-{name}", "resourceVersion": version}
    cache.apply(Kind.PENDING_PODS, "ADDED", {"metadata": {**meta, "annotations": annotations}})
    return PodRef("ml", name, f"u-{name}", version)


def told(status: ScaleUpStatus, reason: str) -> Event:
    return Event("Normal", reason, status.message)


async def test_each_status_and_event_names_the_pod_version_it_was_decided_on() -> None:
    kube = FakeKube()
    status_writer, cache, _ = writer(kube)
    ref = pending(cache, "a", "17")
    status_writer.queue([SetStatus(ref, TRIGGERED, told(TRIGGERED, "Triggered"))])
    await status_writer.flush()
    (_, _, annotations), (_, _, event) = kube.calls
    assert json.loads(annotations[ANNOTATION_SCALE_UP])["podResourceVersion"] == "17"
    assert ScaleUpStatus.from_annotation(annotations[ANNOTATION_SCALE_UP]) == ScaleUpStatus(
        Phase.TRIGGERED, "trigger t asks", "t", observed="17"
    )
    assert event["involvedObject"]["resourceVersion"] == "17"


async def test_an_open_status_for_a_pod_that_left_the_pending_set_is_dropped() -> None:
    kube = FakeKube()
    status_writer, cache, _ = writer(kube)
    ref = pending(cache, "a", "17")
    cache.apply(
        Kind.PENDING_PODS,
        "DELETED",
        {"metadata": {"namespace": "ml", "name": "a", "resourceVersion": "18"}},
    )
    status_writer.queue([SetStatus(ref, TRIGGERED, told(TRIGGERED, "Triggered"))])
    await status_writer.flush()
    assert kube.calls == [] and status_writer.dropped == 1


async def test_an_open_status_older_than_the_one_shown_is_dropped() -> None:
    kube = FakeKube()
    status_writer, cache, _ = writer(kube)
    shown = ScaleUpStatus(Phase.PROVISIONING, "claim c1", "t", "c1", observed="30")
    pending(cache, "a", "31", shown)
    old = PodRef("ml", "a", "u-a", "20")  # decided before the status shown was
    status_writer.queue([SetStatus(old, TRIGGERED, told(TRIGGERED, "Triggered"))])
    await status_writer.flush()
    assert kube.calls == [] and status_writer.dropped == 1
    same = PodRef("ml", "a", "u-a", "31")  # decided on the pod as it is: written
    status_writer.queue([SetStatus(same, TRIGGERED, None)])
    await status_writer.flush()
    assert [c[0] for c in kube.calls] == ["annotate"]


async def test_an_open_status_naming_a_trigger_deleted_since_is_dropped() -> None:
    """On a real API server a ``Provisioning`` was written 0.7 s after its trigger was
    deleted (its NodeClaim Ready), then nothing corrected it until the next decision."""
    kube = FakeKube()
    status_writer, cache, _ = writer(kube)
    trigger = {
        "metadata": {"namespace": "gpu-intent-system", "name": "gi-x", "resourceVersion": "5"}
    }
    cache.apply(Kind.TRIGGERS, "ADDED", trigger)
    status = ScaleUpStatus(Phase.PROVISIONING, "claim c1", "gpu-intent-system/gi-x", "c1")
    ref = pending(cache, "a", "17")
    status_writer.queue([SetStatus(ref, status, told(status, "Provisioning"))])
    await status_writer.flush()
    assert [c[0] for c in kube.calls] == ["annotate", "event"]  # the trigger stands: told
    cache.apply(
        Kind.TRIGGERS,
        "DELETED",
        {**trigger, "metadata": {**trigger["metadata"], "resourceVersion": "6"}},
    )
    other = pending(cache, "b", "18")
    status_writer.queue([SetStatus(other, status, told(status, "Provisioning"))])
    await status_writer.flush()
    assert [c[1] for c in kube.calls] == ["a", "a"] and status_writer.dropped == 1


async def test_an_open_status_that_landed_after_the_binding_leaves_the_pod_owed_its_final_one() -> (
    None
):
    kube = FakeKube()
    kube.bound["a"] = "n1"
    status_writer, cache, memory = writer(kube)
    ref = pending(cache, "a", "17")
    status_writer.queue([SetStatus(ref, TRIGGERED, told(TRIGGERED, "Triggered"))])
    await status_writer.flush()
    assert [c[0] for c in kube.calls] == ["annotate"]  # no Triggered Event on a bound pod
    assert status_writer.dropped == 1
    assert [(p.ref.name, p.node) for p in memory.scheduled()] == [("a", "n1")]


async def test_final_statuses_go_before_open_ones_and_their_events_after() -> None:
    kube = FakeKube()
    status_writer, cache, memory = writer(kube)
    refs = [pending(cache, f"p{i}", "5") for i in range(3 * BATCH)]
    status_writer.queue([SetStatus(r, TRIGGERED, None) for r in refs])
    done = pending(cache, "done", "6")
    memory.owe_final(("ml", "done"), {"metadata": {"name": "done", "namespace": "ml"}})
    status_writer.queue([SetStatus(done, SCHEDULED, told(SCHEDULED, "ScaleUpComplete"))])
    await status_writer.flush()
    order = [(kind, name) for kind, name, _ in kube.calls]
    assert order.index(("annotate", "done")) < BATCH  # not behind 192 open statuses
    assert order.index(("event", "done")) < 2 * BATCH + 1
    assert len([c for c in order if c[0] == "annotate"]) == 3 * BATCH + 1


def test_newer_compares_etcd_revisions_and_never_guesses() -> None:
    assert newer("31", "30") and not newer("30", "30") and not newer("9", "10")
    assert not newer(None, "3") and not newer("3", "") and not newer("abc", "1")


def test_provisioning_messages_show_gpus_with_at_most_two_decimals() -> None:
    claim = NodeClaimInfo("c1", "gpu", None, Decimal(1), {}, (), None, {}, False)
    trigger = TriggerInfo(PodRef("gpu-intent", "t1"), "gpu", "l4", (), 1, None, "c1", None, False)
    status, event = provisioning(
        claim, trigger, Decimal(7) / Decimal("10.0139"), 4, "2026-11-27T00:00:00Z"
    )
    assert "(1 GPU, 0.7 used by 4 pod(s))" in status.message
    assert event.message == status.message
    assert gpus_for_people(Decimal("0.004")) == "<0.01"
    assert [gpus_for_people(Decimal(v)) for v in ("0.125", "1.10", "3")] == ["0.13", "1.1", "3"]
    assert [usd_for_people(Decimal(v)) for v in ("5", "0.80481", "0.526")] == [
        "5.00",
        "0.8048",
        "0.526",
    ]


async def test_a_status_that_moves_on_while_queued_keeps_its_place_in_line() -> None:
    """Behind a burst, a pod whose status is decided again (``Triggered`` then
    ``Provisioning``) is written where it first queued, with the latest status; sent to
    the back at every move, it kept its first status for as long as the burst lasted."""
    kube = FakeKube()
    status_writer, cache, _ = writer(kube)
    refs = [pending(cache, f"p{i}", "5") for i in range(3 * BATCH)]
    status_writer.queue([SetStatus(r, TRIGGERED, None) for r in refs])
    moved = ScaleUpStatus(Phase.PROVISIONING, "claim c1", None, "c1")
    status_writer.queue([SetStatus(refs[0], moved, None)])
    await status_writer.flush()
    annotated = [(name, a) for kind, name, a in kube.calls if kind == "annotate"]
    assert len(annotated) == 3 * BATCH  # one write per pod: the latest status only
    first_name, first = annotated[0]
    assert first_name == "p0"
    shown = ScaleUpStatus.from_annotation(first[ANNOTATION_SCALE_UP])
    assert shown is not None and shown.phase == Phase.PROVISIONING


async def test_a_status_the_pod_shows_already_is_not_written_again() -> None:
    """The executor tells a trigger's pods ``Triggered`` once it exists; a pass planned
    before that write landed tells them the same: written once, one Event."""
    kube = FakeKube()
    status_writer, cache, _ = writer(kube)
    ref = pending(cache, "a", "17")
    status_writer.queue([SetStatus(ref, TRIGGERED, told(TRIGGERED, "Triggered"))])
    await status_writer.flush()
    assert [c[0] for c in kube.calls] == ["annotate", "event"]
    again = replace(TRIGGERED, message="trigger t asks, said again")
    status_writer.queue([SetStatus(ref, again, told(again, "Triggered"))])
    await status_writer.flush()
    assert [c[0] for c in kube.calls] == ["annotate", "event"] and status_writer.dropped == 1
    moved = ScaleUpStatus(Phase.TRIGGERED, "trigger t2 asks", "t2")
    status_writer.queue([SetStatus(ref, moved, told(moved, "Triggered"))])
    await status_writer.flush()
    assert [c[0] for c in kube.calls] == ["annotate", "event"] * 2
