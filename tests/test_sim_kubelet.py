"""SimKubelet against a real Store: admission, start, graceful removal, pod GC, quiet when idle."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from sim.kubelet import SimKubelet
from sim.scheduler import SimScheduler
from sim.store import EVENTS, NAMESPACES, NODES, PODS, NotFound, Store


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store() -> Store:
    s = Store()
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


@pytest.fixture
def clock() -> Clock:
    return Clock()


def add_node(store: Store, name: str = "n1", ready: str = "True", **extra: str) -> None:
    store.create(
        NODES,
        {
            "metadata": {"name": name},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", **extra},
                "addresses": [{"type": "InternalIP", "address": "192.168.0.7"}],
                "conditions": [{"type": "Ready", "status": ready}],
            },
        },
    )


def add_pod(store: Store, name: str = "web", node: str | None = "n1", **spec: Any) -> None:
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "nginx"}], **spec}
    if node:
        body["nodeName"] = node
    store.create(PODS, {"metadata": {"name": name, "namespace": "default"}, "spec": body})


def get(store: Store, name: str = "web") -> dict[str, Any]:
    return store.get(PODS, "default", name)


def exists(store: Store, name: str = "web") -> bool:
    try:
        get(store, name)
    except NotFound:
        return False
    return True


def kubelet(store: Store, clock: Clock, **kwargs: float) -> SimKubelet:
    return SimKubelet(store, monotonic=clock, **kwargs)


def test_a_bound_pod_runs_after_start_seconds(store: Store, clock: Clock) -> None:
    add_node(store)
    add_pod(store, initContainers=[{"name": "setup", "image": "busybox"}])
    k = kubelet(store, clock, start_seconds=1.0)
    assert k.sync_once() == 1.0
    assert get(store)["status"] == {}
    clock.t = 0.5
    assert k.sync_once() == 0.5
    clock.t = 1.0
    assert k.sync_once() is None
    status = get(store)["status"]
    assert status["phase"] == "Running"
    assert status["hostIP"] == "192.168.0.7" and status["podIP"].startswith("10.244.")
    assert status["startTime"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    [main] = status["containerStatuses"]
    assert main["ready"] and "running" in main["state"]
    [setup] = status["initContainerStatuses"]
    assert setup["state"]["terminated"]["reason"] == "Completed"


def test_nothing_is_written_once_running(store: Store, clock: Clock) -> None:
    add_node(store)
    add_pod(store)
    add_pod(store, "pending", node=None)
    k = kubelet(store, clock, start_seconds=0.0)
    k.sync_once()
    rv = store.resource_version
    for _ in range(3):
        clock.t += 10
        assert k.sync_once() is None
    assert store.resource_version == rv
    assert get(store, "pending")["status"] == {}


def test_a_pod_waits_for_its_node_to_be_ready(store: Store, clock: Clock) -> None:
    add_node(store, ready="False")
    add_pod(store)
    k = kubelet(store, clock, start_seconds=1.0)
    clock.t = 5
    assert k.sync_once() is None
    assert get(store)["status"] == {}

    def ready(node: dict[str, Any]) -> None:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]

    store.mutate(NODES, None, "n1", ready, subresource="status")
    assert k.sync_once() == 1.0  # the start delay counts from readiness
    clock.t = 6
    k.sync_once()
    assert get(store)["status"]["phase"] == "Running"


def test_a_cordoned_node_still_runs_its_pods(store: Store, clock: Clock) -> None:
    add_node(store)
    store.mutate(NODES, None, "n1", lambda n: n.setdefault("spec", {}).update(unschedulable=True))
    add_pod(store)
    kubelet(store, clock, start_seconds=0.0).sync_once()
    assert get(store)["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("termination_seconds", "grace", "removed_after"),
    [(0.5, 30, 0.5), (10.0, 2, 2.0)],
)
def test_graceful_deletion_removes_after_the_shorter_of_both(
    store: Store, clock: Clock, termination_seconds: float, grace: int, removed_after: float
) -> None:
    add_node(store)
    add_pod(store, terminationGracePeriodSeconds=grace)
    k = kubelet(store, clock, start_seconds=0.0, termination_seconds=termination_seconds)
    k.sync_once()
    store.delete(PODS, "default", "web")
    assert get(store)["metadata"]["deletionTimestamp"]
    assert k.sync_once() == removed_after
    clock.t = removed_after - 0.01
    k.sync_once()
    assert exists(store)
    clock.t = removed_after
    k.sync_once()
    assert not exists(store)


def test_pods_of_a_vanished_node_are_collected(store: Store, clock: Clock) -> None:
    add_node(store)
    add_pod(store)
    add_pod(store, "never-existed", node="ghost")
    k = kubelet(store, clock, start_seconds=0.0)
    k.sync_once()
    store.delete(NODES, None, "n1")
    k.sync_once()
    assert not exists(store) and not exists(store, "never-existed")


def test_terminal_pods_are_left_alone(store: Store, clock: Clock) -> None:
    add_node(store)
    add_pod(store)
    store.mutate(
        PODS,
        "default",
        "web",
        lambda p: p["status"].update(phase="Succeeded"),
        subresource="status",
    )
    rv = store.resource_version
    kubelet(store, clock, start_seconds=0.0).sync_once()
    assert store.resource_version == rv


async def test_with_the_scheduler_a_pod_runs_and_is_deleted(store: Store) -> None:
    add_node(store)
    add_pod(store, node=None)
    tasks = [
        asyncio.create_task(SimScheduler(store, resync_seconds=0.05).run()),
        asyncio.create_task(SimKubelet(store, start_seconds=0.05, termination_seconds=0.05).run()),
    ]
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2
        while get(store)["status"].get("phase") != "Running":
            assert loop.time() < deadline
            await store.wait_changed(deadline - loop.time())  # the next write, not a poll
        store.delete(PODS, "default", "web")
        while exists(store):
            assert loop.time() < deadline
            await store.wait_changed(deadline - loop.time())
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def limits(**resources: str) -> list[dict[str, Any]]:
    return [{"name": "main", "image": "x", "resources": {"limits": resources}}]


def test_admission_rejects_what_racing_schedulers_double_booked(store: Store, clock: Clock) -> None:
    add_node(store, **{"nvidia.com/gpu": "1"})
    add_pod(store, "first", containers=limits(**{"nvidia.com/gpu": "1"}))
    # Oldest first (HandlePodAdditions sorts by creationTimestamp); same second: by name.
    add_pod(store, "second", containers=limits(**{"nvidia.com/gpu": "1"}))
    add_pod(store, "vgpu", containers=limits(**{"nvidia.com/gpumem": "8000"}))  # not listed
    add_pod(store, "greedy", containers=limits(cpu="5"))
    k = kubelet(store, clock, start_seconds=0.0)
    k.sync_once()
    k.sync_once()
    assert get(store, "first")["status"]["phase"] == "Running"
    assert get(store, "vgpu")["status"]["phase"] == "Running"
    second = get(store, "second")["status"]
    assert (second["phase"], second["reason"], second["message"]) == (
        "Failed",
        "OutOfnvidia.com/gpu",
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 1, used: 1, capacity: 1",
    )
    greedy = get(store, "greedy")["status"]
    assert (greedy["reason"], greedy["message"]) == (
        "OutOfcpu",
        "Pod was rejected: Node didn't have enough resource: cpu, "
        "requested: 5000, used: 0, capacity: 4000",
    )
    [event] = [
        e for e in store.list(EVENTS, "default")[0] if e["involvedObject"]["name"] == "second"
    ]
    assert (event["type"], event["reason"], event["source"]) == (
        "Warning",
        "OutOfnvidia.com/gpu",
        {"component": "kubelet"},
    )
    rv = store.resource_version
    k.sync_once()  # rejected pods are terminal: nothing more is written
    assert store.resource_version == rv
