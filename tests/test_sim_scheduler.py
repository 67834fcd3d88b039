"""SimScheduler against a real Store: binding, kube-scheduler's messages, retries, quiet."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from sim import gpushare, hami
from sim import scheduler as sim_scheduler
from sim.filters import NodeInfo
from sim.kubelet import SimKubelet
from sim.scheduler import KAI_ON_HAMI, SimScheduler
from sim.store import EVENTS, NAMESPACES, NODES, PODS, Store

GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


@pytest.fixture
def store() -> Store:
    s = Store()
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


def add_node(
    store: Store,
    name: str,
    *,
    gpus: int = 0,
    memory_mib: int = 23034,
    product: str = "NVIDIA-L4",
    cpu: str = "8",
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    ready: str = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    allocatable = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
        all_labels.update(
            {
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": str(memory_mib),
                "nvidia.com/gpu.product": product,
            }
        )
    return store.create(
        NODES,
        {
            "metadata": {"name": name, "labels": all_labels},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {
                "allocatable": allocatable,
                "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": ready}],
            },
        },
    )


def add_pod(
    store: Store,
    name: str,
    *,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    scheduler: str | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "x", "resources": resources}],
        **spec,
    }
    if scheduler:
        body["schedulerName"] = scheduler
    return store.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": body,
        },
    )


def get(store: Store, name: str) -> dict[str, Any]:
    return store.get(PODS, "default", name)


def scheduled(store: Store, name: str) -> dict[str, Any]:
    for condition in get(store, name).get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled":
            return dict(condition)
    return {}


def events_for(store: Store, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in store.list(EVENTS, "default")[0]
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


@pytest.fixture
async def running(store: Store) -> AsyncIterator[SimScheduler]:
    scheduler = SimScheduler(store, resync_seconds=0.05)
    task = asyncio.create_task(scheduler.run())
    yield scheduler
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def until(check: Callable[[], bool], seconds: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


# -- binding ---------------------------------------------------------------------------


def test_binds_a_whole_gpu_pod_like_the_binding_subresource(store: Store) -> None:
    add_node(store, "cpu-1")
    add_node(store, "gpu-1", gpus=2)
    add_pod(store, "train", limits={"nvidia.com/gpu": "1", "cpu": "1"})
    assert SimScheduler(store).schedule_once() == 1
    pod = get(store, "train")
    assert pod["spec"]["nodeName"] == "gpu-1"
    assert pod["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION] == "0:1"
    condition = scheduled(store, "train")
    assert condition["status"] == "True" and "reason" not in condition
    assert "nominatedNodeName" not in pod["status"]
    [event] = events_for(store, "train", "Scheduled")
    assert event["message"] == "Successfully assigned default/train to gpu-1"
    assert event["source"] == {"component": "default-scheduler"}


def test_kube_scheduler_spreads_by_cpu_and_memory_hami_packs_gpus(store: Store) -> None:
    """kube-scheduler scores CPU and memory only (LeastAllocated plus
    BalancedAllocation), so a second 1-GPU pod goes to the emptier node, not next to the
    first one's GPU; HAMi's binpack puts its second pod on the node whose GPUs are used."""
    add_node(store, "a", gpus=2)
    add_node(store, "b", gpus=2)
    add_pod(store, "first", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "2"})
    SimScheduler(store).schedule_once()
    assert get(store, "first")["spec"]["nodeName"] == "a"  # a tie: the first by name
    add_pod(store, "second", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "2"})
    SimScheduler(store).schedule_once()
    assert get(store, "second")["spec"]["nodeName"] == "b"
    # a pod that asks nothing counts as 100m and 200 MiB: it spreads as well
    add_node(store, "c", gpus=2)
    add_pod(store, "idle")
    SimScheduler(store).schedule_once()
    assert get(store, "idle")["spec"]["nodeName"] == "c"
    hami_labels = dict(hami.NODE_SELECTOR)
    add_node(store, "h1", gpus=10, labels=hami_labels)
    add_node(store, "h2", gpus=10, labels=hami_labels)
    vgpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    add_pod(store, "v1", limits=vgpu, scheduler="hami-scheduler", requests={"cpu": "2"})
    SimScheduler(store).schedule_once()
    add_pod(store, "v2", limits=vgpu, scheduler="hami-scheduler", requests={"cpu": "2"})
    SimScheduler(store).schedule_once()
    assert get(store, "v1")["spec"]["nodeName"] == get(store, "v2")["spec"]["nodeName"]


def test_most_allocated_scoring_puts_gpu_pods_next_to_each_other(store: Store) -> None:
    """With NodeResourcesFit's ``MostAllocated`` (nvidia.com/gpu weight 10, CPU and
    memory 1), the second 1-GPU pod goes next to the first one's GPU, and a 2-GPU pod
    still finds a node with 2 free: what LeastAllocated's spreading took from it. A pod
    that asks no GPU is scored on CPU and memory only (the extended resource is left
    out, ``resource_allocation.go``) and also goes to the fuller node."""
    add_node(store, "a", gpus=2)
    add_node(store, "b", gpus=2)
    packing = SimScheduler(store, scoring="MostAllocated")
    add_pod(store, "first", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "2"})
    packing.schedule_once()
    add_pod(store, "second", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "2"})
    packing.schedule_once()
    assert get(store, "first")["spec"]["nodeName"] == "a"
    assert get(store, "second")["spec"]["nodeName"] == "a"
    add_pod(store, "pair", limits={"nvidia.com/gpu": "2"}, requests={"cpu": "2"})
    packing.schedule_once()
    assert get(store, "pair")["spec"]["nodeName"] == "b"
    add_node(store, "c", gpus=2)
    add_pod(store, "idle")
    packing.schedule_once()
    assert get(store, "idle")["spec"]["nodeName"] in ("a", "b")


def test_packs_kai_fractions_on_one_device_and_rejects_the_third(store: Store) -> None:
    add_node(store, "l4", gpus=1)
    for name in ("a", "b", "c"):
        add_pod(store, name, scheduler="kai-scheduler", annotations={"gpu-fraction": "0.5"})
    SimScheduler(store).schedule_once()
    assert [get(store, n)["spec"].get("nodeName") for n in "abc"] == ["l4", "l4", None]
    assert get(store, "b")["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION] == "0:0.5"
    assert scheduled(store, "c")["message"] == (
        "0/1 nodes are available: 1 1/1 CardInsufficientMemory. "
        f"preemption: 0/1 nodes are available: 1 {NO_VICTIMS}.."
    )
    [event] = events_for(store, "c", "FailedScheduling")
    assert event["source"] == {"component": "kai-scheduler"}


# -- unschedulable messages ------------------------------------------------------------


def test_unschedulable_condition_and_event_carry_kube_schedulers_message(store: Store) -> None:
    add_node(store, "cpu-1")
    add_node(store, "gpu-1", gpus=1, taints=[GPU_TAINT])
    add_node(store, "gpu-2", gpus=1, taints=[GPU_TAINT])
    add_pod(store, "train", limits={"nvidia.com/gpu": "1"})
    assert SimScheduler(store).schedule_once() == 0
    message = (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: }. "
        f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}.."
    )
    condition = scheduled(store, "train")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        message,
    )
    [event] = events_for(store, "train", "FailedScheduling")
    assert (event["type"], event["message"]) == ("Warning", message)
    assert event["source"] == {"component": "default-scheduler"}
    assert "nodeName" not in get(store, "train")["spec"]


def test_no_nodes_at_all(store: Store) -> None:
    add_pod(store, "train", limits={"nvidia.com/gpu": "1"})
    SimScheduler(store).schedule_once()
    assert scheduled(store, "train")["message"] == "no nodes available to schedule pods"
    assert scheduled(store, "train")["reason"] == "Unschedulable"


def test_default_scheduler_pod_with_hami_memory_is_insufficient_everywhere(store: Store) -> None:
    add_node(store, "gpu-1", gpus=2, labels=dict(hami.NODE_SELECTOR))
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    add_pod(store, "plain", limits=limits)
    add_pod(store, "hami", limits=limits, scheduler="hami-scheduler")
    SimScheduler(store).schedule_once()
    assert scheduled(store, "plain")["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpumem. "
        f"preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}.."
    )
    vgpu = get(store, "hami")  # HAMi's extender handles gpumem: the pod fits
    assert vgpu["spec"]["nodeName"] == "gpu-1"
    assert vgpu["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION] == "0:0.347313"


def test_full_node_and_preemption_dry_run(store: Store) -> None:
    add_node(store, "gpu-1", gpus=2)
    add_pod(store, "low", limits={"nvidia.com/gpu": "1"}, priority=-10)
    add_pod(store, "peer", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "one", limits={"nvidia.com/gpu": "1"})
    scheduler = SimScheduler(store)
    scheduler.schedule_once()
    # "low" sorts after the priority-0 pods, so "one" and "peer" won the two GPUs.
    assert get(store, "one")["spec"]["nodeName"] == "gpu-1"
    assert get(store, "peer")["spec"]["nodeName"] == "gpu-1"
    add_pod(store, "two", limits={"nvidia.com/gpu": "2"})
    add_pod(store, "never", limits={"nvidia.com/gpu": "1"}, preemptionPolicy="Never")
    scheduler.schedule_once()
    assert scheduled(store, "low")["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        f"preemption: 0/1 nodes are available: 1 {NO_VICTIMS}.."
    )
    assert scheduled(store, "two")["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        f"preemption: 0/1 nodes are available: 1 {NO_VICTIMS}.."
    )
    assert scheduled(store, "never")["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: not eligible due to preemptionPolicy=Never.."
    )


def test_preemption_reports_what_evicting_lower_priority_pods_would_not_fix(store: Store) -> None:
    add_node(store, "gpu-1", gpus=2, cpu="4")
    add_pod(store, "low", limits={"nvidia.com/gpu": "1"}, priority=-10, nodeName="gpu-1")
    add_pod(store, "busy", requests={"cpu": "3"}, nodeName="gpu-1")
    add_pod(store, "big", limits={"nvidia.com/gpu": "2", "cpu": "2"})
    SimScheduler(store).schedule_once()
    assert scheduled(store, "big")["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu. "
        "preemption: 0/1 nodes are available: 1 Insufficient cpu.."
    )


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        ({"ready": "False"}, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
        ({"ready": "Unknown"}, "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
        ({"unschedulable": True}, "node(s) were unschedulable"),
        ({"labels": {"zone": "b"}}, "node(s) didn't match Pod's node affinity/selector"),
        (
            {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
            "node(s) had untolerated taint {karpenter.sh/unregistered: }",
        ),
    ],
)
def test_filter_reasons(store: Store, node: dict[str, Any], reason: str) -> None:
    add_node(store, "n1", gpus=1, **{"labels": {"zone": "a"}, **node})
    add_pod(store, "p", limits={"nvidia.com/gpu": "1"}, nodeSelector={"zone": "a"})
    SimScheduler(store).schedule_once()
    assert scheduled(store, "p")["message"] == (
        f"0/1 nodes are available: 1 {reason}. preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}.."
    )


def test_tolerations_and_matching_affinity_allow_binding(store: Store) -> None:
    add_node(store, "n1", gpus=1, taints=[GPU_TAINT], labels={"zone": "a"}, unschedulable=True)
    add_pod(
        store,
        "p",
        limits={"nvidia.com/gpu": "1"},
        tolerations=[{"operator": "Exists"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    )
    SimScheduler(store).schedule_once()
    assert get(store, "p")["spec"]["nodeName"] == "n1"


def test_scheduling_gates_block_without_an_event(store: Store) -> None:
    add_node(store, "n1")
    add_pod(store, "gated", schedulingGates=[{"name": "example.com/wait"}])
    SimScheduler(store).schedule_once()
    condition = scheduled(store, "gated")
    assert (condition["reason"], condition["message"]) == (
        "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates",
    )
    assert events_for(store, "gated", "FailedScheduling") == []


def test_ignores_unknown_schedulers_and_bound_pods(store: Store) -> None:
    add_node(store, "n1")
    add_pod(store, "volcano", scheduler="volcano")
    add_pod(store, "pinned", nodeName="elsewhere")
    SimScheduler(store).schedule_once()
    assert get(store, "volcano")["status"] == {}
    assert get(store, "pinned")["spec"]["nodeName"] == "elsewhere"
    assert get(store, "pinned")["status"] == {}


def test_a_changed_reason_is_written_once_and_repeats_are_not(store: Store) -> None:
    add_node(store, "n1", cpu="1")
    add_pod(store, "p", requests={"cpu": "2"})
    scheduler = SimScheduler(store)
    scheduler.schedule_once()
    first = scheduled(store, "p")
    rv = store.resource_version
    scheduler.schedule_once()
    assert store.resource_version == rv
    add_node(store, "n2", cpu="4")  # the pod would fit it empty: a queueing hint retries it
    add_pod(store, "busy", requests={"cpu": "3"}, nodeName="n2")
    scheduler.schedule_once()
    second = scheduled(store, "p")
    assert second["message"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
    assert second["lastTransitionTime"] == first["lastTransitionTime"]  # status stayed False
    assert len(events_for(store, "p", "FailedScheduling")) == 2


def _count_filters(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Pod name -> how many nodes the scheduler's filters ran against for it."""
    calls: Counter[str] = Counter()
    real = sim_scheduler._filter

    def counting(info: Any, node: Any) -> Any:
        calls[info.pod["metadata"]["name"]] += 1
        return real(info, node)

    monkeypatch.setattr(sim_scheduler, "_filter", counting)
    return calls


def test_an_unschedulable_pod_waits_until_something_could_make_it_fit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_filters(monkeypatch)
    add_node(store, "gpu-1", gpus=1)
    add_pod(store, "first", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "second", limits={"nvidia.com/gpu": "1"})
    scheduler = SimScheduler(store)
    scheduler.schedule_once()
    assert get(store, "first")["spec"]["nodeName"] == "gpu-1"
    message = scheduled(store, "second")["message"]
    assert calls["second"] == 1
    # a bind elsewhere only takes capacity, and another pod's change is not this pod's:
    add_pod(store, "web", requests={"cpu": "1"})
    store.mutate(PODS, "default", "first", lambda o: o["metadata"].update(labels={"a": "b"}))
    scheduler.schedule_once()
    assert get(store, "web")["spec"]["nodeName"] == "gpu-1"
    assert calls["second"] == 1
    assert scheduled(store, "second")["message"] == message
    # its own change: tried again (and still unschedulable)
    store.mutate(PODS, "default", "second", lambda o: o["metadata"].update(labels={"try": "2"}))
    scheduler.schedule_once()
    assert calls["second"] == 2
    scheduler.schedule_once()
    assert calls["second"] == 2
    # the bound pod finishes: its GPU is free, the parked pod is tried and binds
    store.mutate(
        PODS, "default", "first", lambda o: o.setdefault("status", {}).update(phase="Succeeded"),
        subresource="status",
    )  # fmt: skip
    scheduler.schedule_once()
    assert get(store, "second")["spec"]["nodeName"] == "gpu-1"


def test_a_pass_filters_again_only_the_node_a_bind_changed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_filters(monkeypatch)
    for i in range(4):
        add_node(store, f"n{i}", gpus=1)
    for name in ("a", "b", "c"):
        add_pod(store, name, limits={"nvidia.com/gpu": "1"})
    SimScheduler(store).schedule_once()
    assert sorted(get(store, n)["spec"]["nodeName"] for n in "abc") == ["n0", "n1", "n2"]
    # the first pod is filtered against four nodes; the next ones only against the node
    # the bind before them filled, the other three verdicts still hold; each once more
    # against its chosen node as the store shows it before the bind (`_fresh_fit`)
    assert (calls["a"], calls["b"], calls["c"]) == (5, 2, 2)


def test_only_a_node_change_it_may_fit_and_the_longest_wait_retry_a_parked_pod(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_filters(monkeypatch)
    add_node(store, "n1", cpu="1")
    add_node(store, "small", cpu="1")
    add_pod(store, "p", requests={"cpu": "2"})
    scheduler = SimScheduler(store)
    scheduler.schedule_once()
    scheduler.schedule_once()
    assert calls["p"] == 2  # one attempt, filtered against both nodes
    # kube-scheduler v1.32's queueing hints: a node change or a new node it would not fit
    # even empty, or an annotation written on the pod, leaves it in unschedulablePods
    store.mutate(NODES, None, "n1", lambda o: o["metadata"]["labels"].update(zone="a"))
    add_node(store, "tiny", cpu="1")
    store.mutate(PODS, "default", "p", lambda o: o["metadata"].update(annotations={"a": "b"}))
    scheduler.schedule_once()
    assert calls["p"] == 2
    # its allocatable grows so that it fits: tried again, and binds
    store.mutate(
        NODES, None, "n1", lambda o: o["status"]["allocatable"].update(cpu="2"),
        subresource="status",
    )  # fmt: skip
    scheduler.schedule_once()
    assert get(store, "p")["spec"]["nodeName"] == "n1"
    # the longest wait in unschedulablePods retries a pod with no event
    add_pod(store, "q", requests={"cpu": "8"})
    scheduler.schedule_once()
    scheduler.schedule_once()
    assert calls["q"] == 3
    monkeypatch.setattr(sim_scheduler, "MAX_IN_UNSCHEDULABLE_SECONDS", 0.0)
    scheduler.schedule_once()
    scheduler.schedule_once()
    assert calls["q"] == 9


# -- the loop --------------------------------------------------------------------------


async def test_retries_when_a_node_appears(store: Store, running: SimScheduler) -> None:
    add_pod(store, "train", limits={"nvidia.com/gpu": "1"})
    await until(lambda: scheduled(store, "train").get("reason") == "Unschedulable")
    add_node(store, "gpu-1", gpus=1)
    await until(lambda: get(store, "train")["spec"].get("nodeName") == "gpu-1")
    assert scheduled(store, "train")["status"] == "True"


async def test_retries_when_a_pod_is_deleted(store: Store, running: SimScheduler) -> None:
    add_node(store, "gpu-1", gpus=1)
    add_pod(store, "first", limits={"nvidia.com/gpu": "1"})
    await until(lambda: get(store, "first")["spec"].get("nodeName") == "gpu-1")
    add_pod(store, "second", limits={"nvidia.com/gpu": "1"})
    await until(lambda: scheduled(store, "second").get("reason") == "Unschedulable")
    store.delete(PODS, "default", "first")  # graceful: still holds its GPU
    await running.passed(names=["default-scheduler"], within=2)  # it would have bound it
    assert "nodeName" not in get(store, "second")["spec"]
    store.force_remove(PODS, "default", "first")  # what the kubelet does at the end
    await until(lambda: get(store, "second")["spec"].get("nodeName") == "gpu-1")


async def test_no_writes_after_settling(store: Store, running: SimScheduler) -> None:
    add_node(store, "gpu-1", gpus=1, taints=[GPU_TAINT])
    add_node(store, "gpu-2", gpus=1)
    add_pod(store, "bound", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "stuck", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "gated", schedulingGates=[{"name": "x"}])
    add_pod(store, "other", scheduler="volcano")
    await until(lambda: scheduled(store, "stuck").get("reason") == "Unschedulable")
    async with asyncio.timeout(2):  # settled: a pass of every loop after the last write
        while True:
            rv = store.resource_version
            await running.passed(rv, within=2)
            if store.resource_version == rv:
                break
    await running.passes(6, within=2)  # six resync passes of every loop since
    assert store.resource_version == rv
    assert get(store, "bound")["spec"]["nodeName"] == "gpu-2"


def test_identical_pods_share_a_verdict_only_until_the_next_bind(store: Store) -> None:
    add_node(store, "n1", gpus=2, cpu="2")
    big = {"nvidia.com/gpu": "2", "cpu": "3"}
    add_pod(store, "a-big", limits=big)
    add_pod(store, "b-small", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "c-big", limits=big)
    add_pod(store, "d-big", limits=big)
    SimScheduler(store).schedule_once()
    assert get(store, "b-small")["spec"]["nodeName"] == "n1"
    before = "0/1 nodes are available: 1 Insufficient cpu."
    after = "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    assert scheduled(store, "a-big")["message"].startswith(before + " preemption")
    assert scheduled(store, "c-big")["message"].startswith(after)
    assert scheduled(store, "d-big")["message"] == scheduled(store, "c-big")["message"]


# -- one loop per scheduler name ---------------------------------------------------------


async def test_each_scheduler_name_is_its_own_loop(store: Store) -> None:
    add_node(store, "gpu-1", gpus=4, labels=dict(hami.NODE_SELECTOR))
    add_node(store, "gpu-2", gpus=2)  # KAI's pods never go to a HAMi node
    scheduler = SimScheduler(store, resync_seconds=0.05)
    tasks = {name: asyncio.create_task(loop, name=name) for name, loop in scheduler.loops().items()}
    assert set(tasks) == {
        "default-scheduler",
        "hami-scheduler",
        "kai-scheduler",
        "tensor-fusion-scheduler",
    }
    try:
        tasks["kai-scheduler"].cancel()  # one scheduler down does not stop the others
        add_pod(store, "plain", limits={"nvidia.com/gpu": "1"})
        add_pod(store, "vgpu", scheduler="hami-scheduler",
                limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})  # fmt: skip
        add_pod(store, "half", scheduler="kai-scheduler", annotations={"gpu-fraction": "0.5"})
        add_pod(store, "tf", scheduler="tensor-fusion-scheduler",
                annotations={"tensor-fusion.ai/vram-request": "8Gi"})  # fmt: skip
        await until(
            lambda: all(get(store, n)["spec"].get("nodeName") for n in ("plain", "vgpu", "tf"))
        )
        # A pass of each running loop after the binds, all of which saw the KAI pod.
        await scheduler.passes(names=[n for n in tasks if n != "kai-scheduler"], within=2)
        assert "nodeName" not in get(store, "half")["spec"]
        assert get(store, "half")["status"] == {}  # nobody looked at it
        tasks["kai-scheduler"] = asyncio.create_task(scheduler.run_loop("kai-scheduler"))
        await until(lambda: get(store, "half")["spec"].get("nodeName") == "gpu-2")
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def test_racing_schedulers_can_double_book_a_gpu(store: Store) -> None:
    """kube-scheduler binds first; KAI's session keeps the view it took before that bind
    (kube-scheduler checks the store before its own bind, `SimScheduler._fresh_fit`, a
    KAI session does not): both bind to the one GPU, and the kubelet's admission rejects
    the younger pod."""
    add_node(store, "gpu-1", gpus=1)
    add_pod(store, "plain", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "kai-whole", scheduler="kai-scheduler", limits={"nvidia.com/gpu": "1"})
    scheduler = SimScheduler(store, resync_seconds=0.05)
    task = asyncio.create_task(scheduler.run())
    try:
        await until(
            lambda: all(get(store, n)["spec"].get("nodeName") for n in ("plain", "kai-whole"))
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for name in ("plain", "kai-whole"):
        assert get(store, name)["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION] == "0:1"
    kubelet = SimKubelet(store, start_seconds=0.0)
    kubelet.sync_once()
    kubelet.sync_once()
    statuses = sorted(
        (get(store, n)["status"]["phase"], get(store, n)["status"].get("reason"))
        for n in ("plain", "kai-whole")
    )
    assert statuses == [("Failed", "OutOfnvidia.com/gpu"), ("Running", None)]
    add_pod(store, "late", limits={"nvidia.com/gpu": "1"})
    SimScheduler(store).schedule_once()
    assert scheduled(store, "late")["message"].startswith(
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )


def test_kube_scheduler_checks_the_node_as_it_is_now_before_it_binds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler filters each pod on a snapshot taken for its own scheduling cycle:
    a GPU another scheduler's loop bound after this pass began is not free. The sim's
    pass view still shows it free; the check before the bind leaves the pod for the next
    pass, which finds no GPU (a traced demo had a native pod bound onto the GPUs of KAI's
    reservation pods, and KAI's fractions then ran on GPUs they did not hold)."""
    add_node(store, "gpu-1", gpus=1)
    add_pod(store, "plain", limits={"nvidia.com/gpu": "1"})
    other = add_pod(store, "other", limits={"nvidia.com/gpu": "1"}, scheduler="kai-scheduler")
    original = sim_scheduler._filter

    def racing_filter(info: Any, node: NodeInfo) -> Any:
        verdict = original(info, node)  # the pass's view: the GPU is free
        if not get(store, "other")["spec"].get("nodeName"):

            def bind(obj: dict[str, Any]) -> None:
                obj["spec"]["nodeName"] = "gpu-1"

            store.mutate(PODS, "default", other["metadata"]["name"], bind)  # KAI's bind lands
        return verdict

    monkeypatch.setattr(sim_scheduler, "_filter", racing_filter)
    scheduler = SimScheduler(store, scheduler_names=("default-scheduler",))
    assert scheduler.schedule_once() == 0
    assert get(store, "plain")["spec"].get("nodeName") is None
    monkeypatch.setattr(sim_scheduler, "_filter", original)
    scheduler.schedule_once()
    assert scheduled(store, "plain")["message"].startswith(
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )


async def test_a_second_bind_of_a_bound_pod_fails(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Two replicas of one scheduler (no leader election) race for the same pod: the
    binding subresource lets only the first bind land."""
    add_node(store, "n1")
    add_pod(store, "web", requests={"cpu": "1"})
    replicas = [SimScheduler(store, resync_seconds=0.05) for _ in range(2)]
    created = store.resource_version
    tasks = [asyncio.create_task(r.run_loop("default-scheduler")) for r in replicas]
    try:
        await until(lambda: get(store, "web")["spec"].get("nodeName") == "n1")
        # Both replicas through a pass that saw the pod (the loser's bind failed in it).
        for r in replicas:
            await r.passed(created, names=["default-scheduler"], within=2)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert len(events_for(store, "web", "Scheduled")) == 1
    assert (
        'binding default/web to n1 failed: Operation cannot be fulfilled on pods/binding "web": '
        'pod web is already assigned to node "n1"'
    ) in caplog.text


@pytest.mark.parametrize(
    "annotations,limits",
    [
        ({"gpu-fraction": "0.5"}, None),
        ({"gpu-memory": "8000"}, None),
        ({}, {"nvidia.com/gpu": "1"}),
    ],
    ids=["fraction", "memory", "whole"],
)
def test_kai_pods_never_go_to_a_node_running_hamis_device_plugin(
    store: Store, annotations: dict[str, str], limits: dict[str, str] | None
) -> None:
    add_node(store, "hami-gpu", gpus=10, labels=dict(hami.NODE_SELECTOR))
    add_pod(store, "kai", scheduler="kai-scheduler", annotations=annotations, limits=limits)
    SimScheduler(store).schedule_once()
    assert "nodeName" not in get(store, "kai")["spec"]
    assert KAI_ON_HAMI in scheduled(store, "kai")["message"]
    add_node(store, "plain-gpu", gpus=1)
    SimScheduler(store).schedule_once()
    assert get(store, "kai")["spec"]["nodeName"] == "plain-gpu"


def test_hami_pods_go_only_to_nodes_running_hamis_device_plugin(store: Store) -> None:
    add_node(store, "plain-gpu", gpus=1)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    add_pod(store, "vgpu", limits=limits, scheduler="hami-scheduler")
    SimScheduler(store).schedule_once()
    assert "nodeName" not in get(store, "vgpu")["spec"]
    assert "NodeInsufficientDevice" in scheduled(store, "vgpu")["message"]
    add_node(store, "hami-gpu", gpus=10, labels=dict(hami.NODE_SELECTOR))
    SimScheduler(store).schedule_once()
    assert get(store, "vgpu")["spec"]["nodeName"] == "hami-gpu"


def test_kai_takes_the_node_with_the_fewest_idle_gpus_others_the_most_used() -> None:
    """KAI's binpack scores a node by its idle GPUs (the fewest win, KAI
    nodeplacement's nodepack_test.go); the sim's other schedulers take the node with
    the most GPU share used (kube-scheduler too when no pod is given). An 8-GPU node
    with two half-used GPUs (6 idle) and a 4-GPU node with one half-used GPU (3 idle):
    KAI takes the 4-GPU one, the others the 8 (more share used)."""
    big = NodeInfo({}, "a-big", {}, [], gpu_used=[0.5, 0.5] + [0.0] * 6)
    small = NodeInfo({}, "b-small", {}, [], gpu_used=[0.5, 0.0, 0.0, 0.0])
    assert min((big, small), key=sim_scheduler.node_order("kai-scheduler")).name == "b-small"
    for name in ("default-scheduler", "hami-scheduler"):
        assert min((big, small), key=sim_scheduler.node_order(name)).name == "a-big"
    empty8 = NodeInfo({}, "a-empty8", {}, [], gpu_used=[0.0] * 8)
    empty4 = NodeInfo({}, "b-empty4", {}, [], gpu_used=[0.0] * 4)
    assert min((empty8, empty4), key=sim_scheduler.node_order("kai-scheduler")).name == "b-empty4"


def test_kai_does_not_bind_a_fraction_whose_reservation_pod_the_kubelet_would_reject(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KAI's binder binds a fractional pod only once its GPU reservation pod got a GPU
    (``waitForGPUReservationPodAllocation``). A native pod bound to the node's last GPU
    after KAI's session took its view (kube-scheduler's loop racing KAI's) leaves no
    ``nvidia.com/gpu`` for a reservation pod: the kubelet would reject it, so none is
    made and the fraction stays pending, rather than running beside the native pod on a
    GPU it does not hold."""
    add_node(store, "gpu-1", gpus=1)
    native = add_pod(store, "native", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "kai", scheduler="kai-scheduler", annotations={"gpu-fraction": "0.5"})
    scheduler = SimScheduler(store, scheduler_names=("kai-scheduler",))
    original = sim_scheduler._filter

    def racing_filter(info: Any, node: NodeInfo) -> Any:
        verdict = original(info, node)  # KAI's view: the GPU is free
        if not get(store, "native")["spec"].get("nodeName"):

            def bind(obj: dict[str, Any]) -> None:
                obj["spec"]["nodeName"] = "gpu-1"

            store.mutate(PODS, "default", "native", bind)  # kube-scheduler's bind lands
        return verdict

    monkeypatch.setattr(sim_scheduler, "_filter", racing_filter)
    assert scheduler.schedule_once() == 0
    assert get(store, "kai")["spec"].get("nodeName") is None
    assert store.list(PODS, "kai-resource-reservation")[0] == []
    monkeypatch.setattr(sim_scheduler, "_filter", original)
    # the GPU freed, the next session binds it with a reservation pod
    store.delete(PODS, "default", native["metadata"]["name"], grace_period_seconds=0)
    assert scheduler.schedule_once() == 1
    assert get(store, "kai")["spec"]["nodeName"] == "gpu-1"
    assert len(store.list(PODS, "kai-resource-reservation")[0]) == 1


@pytest.mark.parametrize("backoff", [(0.0, 0.0), (30.0, 300.0)])
def test_a_backing_off_native_pod_loses_its_new_gpu_to_a_kai_session(
    store: Store, backoff: tuple[float, float]
) -> None:
    """The race seen on the real kube-scheduler and Karpenter: a native GPU pod that
    failed once waits out kube-scheduler's backoff (podInitialBackoffSeconds x
    2^(attempts-1)) after the node Karpenter bought for it appears, and KAI's next
    session binds its own pod on that GPU. Without backoff the native pod, tried first,
    takes it."""
    scheduler = SimScheduler(store, backoff_seconds=backoff)
    native = add_pod(store, "native", limits={"nvidia.com/gpu": "1"})
    add_pod(store, "kai", scheduler="kai-scheduler", annotations={"gpu-fraction": "0.5"})
    assert scheduler.schedule_once() == 0  # no node: both Unschedulable, one attempt each
    add_node(store, "gpu-1", gpus=1)
    waiting = scheduler.backoff(native["metadata"]["uid"], time.monotonic())
    assert scheduler.schedule_once() == 1
    winner = "kai" if backoff[0] else "native"
    loser = "native" if backoff[0] else "kai"
    assert get(store, winner)["spec"].get("nodeName") == "gpu-1"
    assert get(store, loser)["spec"].get("nodeName") is None
    assert (waiting > 29.0) if backoff[0] else (waiting == 0.0)
