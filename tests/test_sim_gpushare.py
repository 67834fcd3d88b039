"""The sharing layers' node-side accounting: HAMi's split ``nvidia.com/gpu`` slots, KAI's
reservation pods, and what kube-scheduler and Karpenter see of both; and Karpenter packing
pods it sees as CPU-only beside a whole-GPU pod."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sim import crds, gpushare, hami, kai
from sim.karpenter import KarpenterSim, KarpenterTimings, Snapshot, is_provisionable, solve
from sim.nodeclaims import existing_nodes
from sim.scheduler import SimScheduler
from sim.store import EVENTS, NAMESPACES, NODECLAIMS, NODEPOOLS, NODES, PODS, Store

NODECLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
FAST = KarpenterTimings(0.01, 0.2, 0.1, 0.01, 0.01, 0.01)
INERT = KarpenterTimings(1.0, 10.0, 10.0, 1000.0, 1000.0, 1000.0)  # lifecycle never fires
UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
}


def new_store(*pools: dict[str, Any]) -> Store:
    store = Store()
    crds.install(store)
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    for pool in pools:
        store.create(NODEPOOLS, pool)
    return store


def nodepool(name: str, gpu: str, *, labels: dict[str, str] | None = None, **spec: Any) -> Any:
    template: dict[str, Any] = {
        "spec": {
            "nodeClassRef": NODECLASS,
            "requirements": [{"key": GPU_NAME, "operator": "In", "values": [gpu]}],
            **spec,
        }
    }
    if labels:
        template["metadata"] = {"labels": labels}
    return {"metadata": {"name": name}, "spec": {"template": template}}


def add_pod(
    store: Store,
    name: str,
    *,
    limits: dict[str, str] | None = None,
    cpu: str | None = None,
    scheduler: str | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": dict(limits or {})}
    if cpu:
        resources["requests"] = {"cpu": cpu}
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "x", "resources": resources}],
        **spec,
    }
    if scheduler:
        body["schedulerName"] = scheduler
    meta = {"name": name, "namespace": "default", "annotations": annotations or {}}
    return store.create(PODS, {"metadata": meta, "spec": body, "status": status or {}})


def add_node(store: Store, name: str, *, gpus: int, advertised: int, **labels: str) -> None:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": str(advertised)}
    all_labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "23034",
        "nvidia.com/gpu.product": "NVIDIA-L4",
        **labels,
    }
    store.create(
        NODES,
        {
            "metadata": {"name": name, "labels": all_labels},
            "status": {
                "allocatable": allocatable,
                "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def get(store: Store, name: str, namespace: str = "default") -> dict[str, Any]:
    return store.get(PODS, namespace, name)


def scheduled(store: Store, name: str) -> dict[str, Any]:
    conditions = get(store, name).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "PodScheduled"), {})


def reservations(store: Store) -> list[dict[str, Any]]:
    return store.list(PODS, kai.RESERVATION_NAMESPACE)[0]


def karpenter_view(store: Store) -> dict[str, dict[str, Decimal]]:
    """Karpenter's cluster state: available resources per existing node."""
    nodes, claims, pods = (store.list(rt)[0] for rt in (NODES, NODECLAIMS, PODS))
    return {n.name: dict(n.available) for n in existing_nodes(nodes, claims, pods)}


async def wait_for(store: Store, predicate: Callable[[], Any]) -> Any:
    async with asyncio.timeout(3.0):
        while not (result := predicate()):
            await store.wait_changed(0.02)
    return result


# -- HAMi ----------------------------------------------------------------------------


def test_hami_runs_on_nodes_its_daemonset_selects() -> None:
    assert hami.runs_hami({"gpu": "on", "zone": "a"})
    assert not hami.runs_hami({"gpu": "true"}) and not hami.runs_hami({})
    assert hami.advertised_gpus(4, {"gpu": "on"}) == 40
    assert hami.advertised_gpus(4, {}) == 4


async def test_hami_nodes_advertise_split_slots_and_nodeclaims_keep_the_estimate() -> None:
    store = new_store(
        nodepool("hami", "l4", labels={"gpu": "on"}),
        nodepool("plain", "t4"),
    )
    add_pod(store, "on-l4", limits={"nvidia.com/gpu": "1"}, status=UNSCHEDULABLE,
            nodeSelector={GPU_NAME: "l4"})  # fmt: skip
    add_pod(store, "on-t4", limits={"nvidia.com/gpu": "1"}, status=UNSCHEDULABLE,
            nodeSelector={GPU_NAME: "t4"})  # fmt: skip
    sim = KarpenterSim(store, timings=FAST)
    task = asyncio.create_task(sim.run())
    try:
        nodes = await wait_for(
            store,
            lambda: (
                len(
                    ready := [
                        n
                        for n in store.list(NODES)[0]
                        if n["metadata"]["labels"].get("karpenter.sh/initialized") == "true"
                    ]
                )
                == 2
                and ready
            ),
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    by_pool = {n["metadata"]["labels"]["karpenter.sh/nodepool"]: n for n in nodes}
    l4, t4 = by_pool["hami"], by_pool["plain"]
    assert l4["metadata"]["labels"]["gpu"] == "on"
    assert l4["metadata"]["labels"]["nvidia.com/gpu.count"] == "1"  # GFD: physical GPUs
    assert l4["status"]["allocatable"]["nvidia.com/gpu"] == "10"
    assert l4["status"]["capacity"]["nvidia.com/gpu"] == "10"
    assert t4["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    claims = {
        c["metadata"]["labels"]["karpenter.sh/nodepool"]: c for c in store.list(NODECLAIMS)[0]
    }
    assert claims["hami"]["status"]["allocatable"]["nvidia.com/gpu"] == "1"  # launch estimate
    view = karpenter_view(store)  # existing nodes: from their allocatable
    assert view[l4["metadata"]["name"]]["nvidia.com/gpu"] == Decimal(10)
    assert view[t4["metadata"]["name"]]["nvidia.com/gpu"] == Decimal(1)


def test_a_full_hami_gpu_still_fits_a_plain_pod_for_karpenter_but_not_a_hami_pod() -> None:
    store = new_store(nodepool("gpu", "l4", labels={"gpu": "on"}))
    add_node(store, "hami-1", gpus=1, advertised=10, gpu="on",
             **{GPU_NAME: "l4", "karpenter.sh/nodepool": "gpu"})  # fmt: skip
    scheduler = SimScheduler(store)
    add_pod(store, "big", scheduler="hami-scheduler",
            limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "23034"})  # fmt: skip
    scheduler.schedule_once()
    assert get(store, "big")["spec"]["nodeName"] == "hami-1"
    assert get(store, "big")["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION] == "0:1"

    # HAMi's scheduler: the one physical GPU has no memory left.
    add_pod(store, "vgpu", scheduler="hami-scheduler",
            limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})  # fmt: skip
    scheduler.schedule_once(["hami-scheduler"])
    assert "nodeName" not in get(store, "vgpu")["spec"]
    assert scheduled(store, "vgpu")["message"].startswith(
        "0/1 nodes are available: 1 1/1 CardInsufficientMemory."
    )

    # Karpenter: the node advertises 10 slots, 1 requested, so 9 free: a plain
    # nvidia.com/gpu pod fits there and Karpenter buys nothing for it.
    assert karpenter_view(store)["hami-1"]["nvidia.com/gpu"] == Decimal(9)
    plain = add_pod(store, "plain", limits={"nvidia.com/gpu": "1"}, status=UNSCHEDULABLE)
    assert is_provisionable(plain)
    nodes, claims, pods = (store.list(rt)[0] for rt in (NODES, NODECLAIMS, PODS))
    results = solve(
        Snapshot([plain], store.list(NODEPOOLS)[0], existing_nodes(nodes, claims, pods))
    )
    assert results.new_nodeclaims == [] and results.errors == {}
    assert [(n.name, [p["metadata"]["name"] for p in ps]) for n, ps in results.existing] == [
        ("hami-1", ["plain"])
    ]

    # kube-scheduler fits it by the slot count alone and gives it no device.
    store.mutate(PODS, "default", "plain", lambda p: p.update(status={}), subresource="status")
    scheduler.schedule_once(["default-scheduler"])
    bound = get(store, "plain")
    assert bound["spec"]["nodeName"] == "hami-1"
    assert gpushare.DEVICES_ANNOTATION not in bound["metadata"]["annotations"]
    scheduler.schedule_once(["hami-scheduler"])  # HAMi still sees only its own pod's usage
    assert scheduled(store, "vgpu")["message"].startswith(
        "0/1 nodes are available: 1 1/1 CardInsufficientMemory."
    )


# -- KAI reservation pods ------------------------------------------------------------


def fraction(store: Store, name: str, share: str = "0.5") -> None:
    add_pod(store, name, scheduler="kai-scheduler", cpu="100m", annotations={"gpu-fraction": share})


def test_kai_holds_a_shared_gpu_with_one_reservation_pod() -> None:
    store = new_store()
    add_node(store, "l4", gpus=1, advertised=1)
    fraction(store, "a")
    fraction(store, "b")
    scheduler = SimScheduler(store)
    assert scheduler.schedule_once(["kai-scheduler"]) == 2
    [reservation] = reservations(store)
    meta, spec = reservation["metadata"], reservation["spec"]
    assert meta["name"].startswith("gpu-reservation-l4-") and len(meta["name"]) == 24
    group = meta["labels"][kai.GPU_GROUP_LABEL]
    assert meta["labels"]["app"] == "kai-resource-reservation"
    assert meta["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert meta["annotations"][kai.GPU_INDEX_ANNOTATION] == "0"
    assert spec["nodeName"] == "l4"
    assert spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    for name in "ab":
        pod = get(store, name)
        assert pod["spec"]["nodeName"] == "l4"
        assert pod["metadata"]["labels"] == {kai.GPU_GROUP_LABEL: group}
        assert pod["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION] == "0:0.5"

    # kube-scheduler and Karpenter see the GPU as used.
    assert karpenter_view(store)["l4"]["nvidia.com/gpu"] == Decimal(0)
    add_pod(store, "whole", limits={"nvidia.com/gpu": "1"})
    scheduler.schedule_once(["default-scheduler"])
    assert scheduled(store, "whole")["message"].startswith(
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )

    # The reservation goes with the group's last pod.
    store.force_remove(PODS, "default", "a")
    scheduler.schedule_once(["kai-scheduler"])
    assert len(reservations(store)) == 1
    store.mutate(
        PODS, "default", "b", lambda p: p["status"].update(phase="Succeeded"), subresource="status"
    )
    scheduler.schedule_once(["kai-scheduler"])
    assert reservations(store) == []
    scheduler.schedule_once(["default-scheduler"])
    assert get(store, "whole")["spec"]["nodeName"] == "l4"


def test_each_shared_gpu_gets_its_own_group() -> None:
    store = new_store()
    add_node(store, "l4x2", gpus=2, advertised=2)
    for name in ("a", "b", "c"):
        fraction(store, name, "0.6")
    SimScheduler(store).schedule_once()
    by_device = {
        r["metadata"]["annotations"][kai.GPU_INDEX_ANNOTATION]: r["metadata"]["labels"][
            kai.GPU_GROUP_LABEL
        ]
        for r in reservations(store)
    }
    assert sorted(by_device) == ["0", "1"] and len(set(by_device.values())) == 2
    assert get(store, "a")["metadata"]["labels"][kai.GPU_GROUP_LABEL] == by_device["0"]
    assert get(store, "b")["metadata"]["labels"][kai.GPU_GROUP_LABEL] == by_device["1"]
    assert "nodeName" not in get(store, "c")["spec"]  # 0.6 + 0.6 > 1 on either GPU


def test_a_pod_on_several_shared_gpus_joins_a_group_per_device() -> None:
    store = new_store()
    add_node(store, "l4x2", gpus=2, advertised=2)
    add_pod(store, "pair", scheduler="kai-scheduler",
            annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})  # fmt: skip
    SimScheduler(store).schedule_once()
    groups = sorted(r["metadata"]["labels"][kai.GPU_GROUP_LABEL] for r in reservations(store))
    assert len(groups) == 2
    labels = get(store, "pair")["metadata"]["labels"]
    assert labels == {f"{kai.GPU_GROUP_LABEL}/{g}": g for g in groups}
    assert sorted(kai.pod_groups(get(store, "pair"))) == groups


def test_stale_reservations_follow_kais_live_phases() -> None:
    def member(phase: str | None, group: str = "g") -> dict[str, Any]:
        status = {"phase": phase} if phase else {}
        labels = {kai.GPU_GROUP_LABEL: group}
        return {"metadata": {"namespace": "ml", "labels": labels}, "status": status}

    reservation = kai.reservation_pod("n1", "g", 0, "abcde")
    assert kai.stale_reservations([reservation]) == [reservation]
    assert kai.stale_reservations([reservation, member(None)]) == []  # created: Pending
    assert kai.stale_reservations([reservation, member("Running")]) == []
    assert kai.stale_reservations([reservation, member("Succeeded")]) == [reservation]
    assert kai.stale_reservations([reservation, member("Running", "other")]) == [reservation]
    multi = {"metadata": {"namespace": "ml", "labels": kai.group_labels(["g", "h"])}}
    assert kai.pod_groups(multi) == ["g", "h"]
    assert kai.stale_reservations([reservation, multi]) == []


# -- Karpenter and pods it sees as CPU-only -------------------------------------------


def test_karpenter_packs_kai_fractions_onto_the_whole_gpu_pods_nodeclaim() -> None:
    """KAI pods carrying only ``gpu-fraction`` request no extended resource, so Karpenter
    sees CPU-only pods; their selectors and tolerations allow the GPU pool, so it packs
    them onto the NodeClaim it makes for the native whole-GPU pod and nominates them
    there (no GPU is bought for them)."""
    store = new_store(nodepool("gpu", "t4", taints=[GPU_TAINT]))
    add_pod(store, "trainer", limits={"nvidia.com/gpu": "1"}, cpu="1", tolerations=TOLERATE_GPU)
    for name in ("kai-a", "kai-b"):
        add_pod(store, name, scheduler="kai-scheduler", cpu="500m", tolerations=TOLERATE_GPU,
                annotations={"gpu-fraction": "0.5"})  # fmt: skip
    SimScheduler(store).schedule_once()  # no nodes: all three Unschedulable
    assert all(is_provisionable(get(store, n)) for n in ("trainer", "kai-a", "kai-b"))
    clock = [0.0]
    sim = KarpenterSim(store, timings=INERT, clock=lambda: clock[0])
    try:
        for t in (0.0, 2.0):  # the batch opens, then closes after the 1 s idle window
            clock[0] = t
            sim.reconcile()
    finally:
        sim.close()
    [claim] = store.list(NODECLAIMS)[0]
    name = claim["metadata"]["name"]
    assert claim["spec"]["resources"]["requests"] == {
        "cpu": "2",
        "nvidia.com/gpu": "1",
        "pods": "3",
    }
    nominated = {
        e["involvedObject"]["name"]: e["message"]
        for e in store.list(EVENTS, "default")[0]
        if e["reason"] == "Nominated"
    }
    assert nominated == {
        pod: f"Pod should schedule on: nodeclaim/{name}" for pod in ("trainer", "kai-a", "kai-b")
    }


def test_hami_matches_gpu_types_as_substrings_and_tensor_fusion_its_model_exactly() -> None:
    """HAMi's ``use-gputype: L4`` takes an L40S too (a substring of its type);
    tensor-fusion's ``gpu-model: L4`` only an L4 (its GPUModelFilter compares the
    GPU's model for equality). The sim once placed tensor-fusion L4 pods on L40S
    cards, where the controller then counted them at an L4's share."""
    l4, l40s = gpushare.Device(0, 23034, "NVIDIA-L4"), gpushare.Device(0, 46068, "NVIDIA-L40S")
    meta = {"name": "p", "namespace": "default"}
    hami_pod = {
        "metadata": {**meta, "annotations": {"nvidia.com/use-gputype": "L4"}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": "8000"}}}],
        },
    }
    tf_pod = {
        "metadata": {
            **meta,
            "annotations": {
                "tensor-fusion.ai/gpu-model": "L4",
                "tensor-fusion.ai/vram-request": "8Gi",
            },
        },
        "spec": {"schedulerName": "tensor-fusion-scheduler", "containers": [{"name": "c"}]},
    }
    hami_demand, tf_demand = gpushare.demand(hami_pod), gpushare.demand(tf_pod)
    assert hami_demand is not None and tf_demand is not None
    assert hami_demand.accepts(l4) and hami_demand.accepts(l40s)
    assert tf_demand.accepts(l4) and not tf_demand.accepts(l40s)
    assert not tf_demand.accepts(gpushare.Device(0, 23034, None))  # model unknown
    a100_80gb = gpushare.Device(0, 81920, "NVIDIA-A100-SXM4-80GB")
    tf_a100 = gpushare.GpuDemand("tensor-fusion", tf_demand.requests, ("a100",), exact_model=True)
    assert tf_a100.accepts(a100_80gb) and not tf_demand.accepts(a100_80gb)


def test_hami_spreads_over_cards_by_default_and_binpacks_when_the_pod_asks() -> None:
    """HAMi's scheduler tries a node's cards least used first (its default GPU policy
    ``spread``, HAMi ``pkg/scheduler/config/config.go``); a pod annotated
    ``hami.io/gpu-scheduler-policy: binpack`` goes to the most used card that fits. So
    four 8000 MiB pods on a 4 x A10G node take a card each, and a 20000 MiB pod then
    fits none, though the node has 2.6 cards of memory left."""
    devices = [gpushare.Device(i, 23028, "NVIDIA-A10G") for i in range(4)]

    def pod(mib: int, policy: str | None = None) -> dict[str, Any]:
        annotations = {gpushare.HAMI_GPU_POLICY_ANNOTATION: policy} if policy else {}
        resources = {"limits": {"nvidia.com/gpu": "1", gpushare.HAMI_GPUMEM: str(mib)}}
        return {
            "metadata": {"name": "p", "annotations": annotations},
            "spec": {"schedulerName": "hami-scheduler", "containers": [{"resources": resources}]},
        }

    def place(wanted: dict[str, Any], used: list[float]) -> gpushare.Assignment | gpushare.NoFit:
        demand = gpushare.demand(wanted)
        assert demand is not None
        return gpushare.place(demand, devices, used)

    used = [0.0] * 4
    for _ in range(4):
        placed = place(pod(8000), used)
        assert not isinstance(placed, gpushare.NoFit)
        ((index, share),) = placed
        used[index] += share
    assert all(u > 0 for u in used)
    assert isinstance(place(pod(20000), used), gpushare.NoFit)
    for policy, card in (("binpack", 0), ("spread", 1)):
        placed = place(pod(8000, policy), [0.35, 0.0, 0.0, 0.0])
        assert not isinstance(placed, gpushare.NoFit)
        assert placed[0][0] == card, policy
