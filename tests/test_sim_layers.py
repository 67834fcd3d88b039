"""The sim serving three more GPU layers: NVIDIA MIG (mixed strategy), Alibaba gpushare and
Volcano vGPU (sim.deviceplugins, sim.aliyun, sim.volcano, sim.gpushare, sim.scheduler).

Nodes are built the way `sim.nodeclaims` registers them (`make_node`: the instance type's
labels, GFD's, and what `sim.deviceplugins` advertises), so the scheduler tests see the
same nodes the Karpenter lifecycle test makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from sim import aliyun, crds, deviceplugins, gpushare, volcano
from sim.catalog import InstanceType, by_name
from sim.dra import DRA_NODE_LABELS, MIG_CONFIG_LABEL
from sim.karpenter import KarpenterSim, KarpenterTimings, Snapshot, is_provisionable, solve
from sim.kubelet import SimKubelet
from sim.nodeclaims import SYSTEM_NAMESPACE
from sim.scheduler import CLUSTER_SCHEDULER_NAMES, SimScheduler
from sim.store import EVENTS, NAMESPACES, NODECLAIMS, NODEPOOLS, NODES, PODS, Store

GPUSHARE = dict(aliyun.NODE_SELECTOR)
VOLCANO = dict(volcano.NODE_SELECTOR)
HAMI = {"gpu": "on"}
MIG_1G5 = {MIG_CONFIG_LABEL: "all-1g.5gb"}
FAST = KarpenterTimings(0.01, 0.2, 0.1, 0.01, 0.01, 0.01)
NODECLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"


# -- which agent, and what it advertises ----------------------------------------------


@pytest.mark.parametrize(
    ("labels", "instance", "expected"),
    [
        ({}, "g4dn.12xlarge", "nvidia"),
        (HAMI, "g4dn.12xlarge", "hami"),
        ({**HAMI, **VOLCANO}, "g4dn.12xlarge", "volcano"),
        ({**HAMI, **VOLCANO, **GPUSHARE}, "g4dn.12xlarge", "gpushare"),
        ({**GPUSHARE, **MIG_1G5}, "p4d.24xlarge", "mig"),
        ({**MIG_1G5, **DRA_NODE_LABELS}, "p4d.24xlarge", "dra"),
        ({MIG_CONFIG_LABEL: "all-disabled"}, "p4d.24xlarge", "nvidia"),
        # a T4 has no MIG: the label changes nothing, the next agent serves the node
        ({**GPUSHARE, **MIG_1G5}, "g4dn.xlarge", "gpushare"),
        ({MIG_CONFIG_LABEL: "all-3g.40gb"}, "p4d.24xlarge", "nvidia"),  # not an A100-40GB profile
        ({**VOLCANO, "volcano.sh/vgpu.enabled": "false"}, "g6.xlarge", "nvidia"),
    ],
)
def test_one_agent_serves_a_node_chosen_by_label_priority(
    labels: dict[str, str], instance: str, expected: str
) -> None:
    assert deviceplugins.plugin(labels, by_name(instance)) == expected


def test_without_the_instance_type_a_mig_label_alone_decides() -> None:
    assert deviceplugins.plugin(MIG_1G5) == "mig"
    assert deviceplugins.plugin({MIG_CONFIG_LABEL: "all-disabled", **VOLCANO}) == "volcano"


@pytest.mark.parametrize(
    ("instance", "labels", "expected"),
    [
        ("g4dn.12xlarge", {}, {"nvidia.com/gpu": "4"}),
        ("g4dn.12xlarge", HAMI, {"nvidia.com/gpu": "40"}),
        # gpushare: floor(NVML MiB / 1024) GiB per GPU: a T4 (15360 MiB) is 15
        ("g4dn.12xlarge", GPUSHARE, {"aliyun.com/gpu-mem": "60", "aliyun.com/gpu-count": "4"}),
        ("g6.xlarge", GPUSHARE, {"aliyun.com/gpu-mem": "22", "aliyun.com/gpu-count": "1"}),
        ("p5.48xlarge", GPUSHARE, {"aliyun.com/gpu-mem": "632", "aliyun.com/gpu-count": "8"}),
        (
            "g4dn.12xlarge",
            VOLCANO,
            {
                "volcano.sh/vgpu-number": "40",
                "volcano.sh/vgpu-memory": "61440",
                "volcano.sh/vgpu-cores": "400",
            },
        ),
        ("p4d.24xlarge", MIG_1G5, {"nvidia.com/mig-1g.5gb": "56"}),
        ("p4d.24xlarge", {MIG_CONFIG_LABEL: "all-3g.20gb"}, {"nvidia.com/mig-3g.20gb": "16"}),
        ("p5.48xlarge", {MIG_CONFIG_LABEL: "all-1g.10gb"}, {"nvidia.com/mig-1g.10gb": "56"}),
        ("p4d.24xlarge", {**MIG_1G5, **DRA_NODE_LABELS}, {}),
        ("m5.large", GPUSHARE, {}),
    ],
)
def test_each_agent_advertises_its_own_resources(
    instance: str, labels: dict[str, str], expected: dict[str, str]
) -> None:
    assert deviceplugins.advertised(labels, by_name(instance)) == expected


def test_a_mig_node_gets_the_mixed_strategy_gfd_labels() -> None:
    p4d = by_name("p4d.24xlarge")
    assert deviceplugins.mig_labels(MIG_1G5, p4d) == {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-1g.5gb.count": "56",
        "nvidia.com/mig-1g.5gb.memory": "4864",
        "nvidia.com/mig-1g.5gb.multiprocessors": "14",
        "nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/mig-1g.5gb.replicas": "1",
        "nvidia.com/mig-1g.5gb.sharing-strategy": "none",
    }
    assert deviceplugins.mig_labels({MIG_CONFIG_LABEL: "all-disabled"}, p4d) == {}
    assert deviceplugins.mig_labels({**MIG_1G5, **DRA_NODE_LABELS}, p4d) == {}


def test_each_agent_has_its_daemonset() -> None:
    names = {
        deviceplugins.daemonset(labels, by_name(it))
        for labels, it in [
            ({}, "g4dn.xlarge"),
            (HAMI, "g4dn.xlarge"),
            (GPUSHARE, "g4dn.xlarge"),
            (VOLCANO, "g4dn.xlarge"),
            (DRA_NODE_LABELS, "g4dn.xlarge"),
        ]
    }
    assert names == {
        "nvidia-device-plugin-daemonset",
        "hami-device-plugin",
        "gpushare-device-plugin-ds",
        "volcano-device-plugin",
        "nvidia-dra-driver-gpu-kubelet-plugin",
    }
    assert deviceplugins.daemonset(MIG_1G5, by_name("p4d.24xlarge")) == (
        "nvidia-device-plugin-daemonset"
    )


# -- the scheduler ---------------------------------------------------------------------


@pytest.fixture
def store() -> Store:
    s = Store()
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


def make_node(store: Store, name: str, instance: str, **labels: str) -> dict[str, Any]:
    """A Ready node of ``instance`` as `sim.nodeclaims` registers one with ``labels``."""
    it: InstanceType = by_name(instance)
    all_labels = {**it.labels(), "kubernetes.io/hostname": name, **labels, **it.gfd_labels()}
    all_labels.update(deviceplugins.mig_labels(all_labels, it))
    resources = {"cpu": str(it.cpu), "memory": f"{it.memory_mib}Mi", "pods": "110"}
    resources.update(deviceplugins.advertised(all_labels, it))
    return store.create(
        NODES,
        {
            "metadata": {"name": name, "labels": all_labels},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def add_pod(
    store: Store,
    name: str,
    limits: dict[str, str],
    *,
    scheduler: str | None = None,
    annotations: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A pending pod of one container with ``limits`` (and ``requests``); ``extra`` spec."""
    resources: dict[str, Any] = {"limits": limits}
    if requests:
        resources["requests"] = requests
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": resources}],
        **extra,
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    meta = {"name": name, "namespace": "default", "annotations": annotations or {}}
    return store.create(PODS, {"metadata": meta, "spec": spec})


def get(store: Store, name: str) -> dict[str, Any]:
    return store.get(PODS, "default", name)


def node_of(store: Store, name: str) -> str | None:
    node: str | None = get(store, name)["spec"].get("nodeName")
    return node


def devices_of(store: Store, name: str) -> str:
    annotation: str = get(store, name)["metadata"]["annotations"][gpushare.DEVICES_ANNOTATION]
    return annotation


def condition(store: Store, name: str) -> dict[str, Any]:
    for c in get(store, name).get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled":
            return dict(c)
    return {}


def schedule(store: Store) -> None:
    SimScheduler(store, scheduler_names=CLUSTER_SCHEDULER_NAMES).schedule_once()


# MIG


def test_a_mig_slice_pod_fits_by_the_extended_resource_alone(store: Store) -> None:
    make_node(store, "mig", "p4d.24xlarge", **MIG_1G5)
    make_node(store, "t4", "g4dn.xlarge")
    add_pod(store, "slices", {"nvidia.com/mig-1g.5gb": "50"})
    schedule(store)
    assert node_of(store, "slices") == "mig"
    assert gpushare.DEVICES_ANNOTATION not in get(store, "slices")["metadata"]["annotations"]

    add_pod(store, "too-many", {"nvidia.com/mig-1g.5gb": "7"})  # 6 left
    add_pod(store, "whole", {"nvidia.com/gpu": "1"})
    schedule(store)
    assert node_of(store, "too-many") is None
    assert condition(store, "too-many")["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.5gb. preemption: 0/2 nodes"
        " are available: 1 No preemption victims found for incoming pod, 1 Preemption is not"
        " helpful for scheduling.."
    )
    assert node_of(store, "whole") == "t4"  # the MIG node has no nvidia.com/gpu


def test_sharing_layers_get_no_devices_where_another_agent_runs(store: Store) -> None:
    make_node(store, "mig", "p4d.24xlarge", **MIG_1G5)
    make_node(store, "vgpu", "g6.xlarge", **VOLCANO)
    make_node(store, "share", "g4dn.xlarge", **GPUSHARE)
    add_pod(store, "kai", {}, scheduler="kai-scheduler", annotations={"gpu-fraction": "0.5"})
    add_pod(store, "hami", {"nvidia.com/gpu": "1"}, scheduler="hami-scheduler")
    schedule(store)
    for name in ("kai", "hami"):
        assert node_of(store, name) is None
        assert condition(store, name)["message"].startswith(
            "0/3 nodes are available: 3 NodeInsufficientDevice."
        )


# gpushare


def test_gpushare_binds_by_binpack_and_writes_the_extenders_annotations(store: Store) -> None:
    make_node(store, "share", "g4dn.12xlarge", **GPUSHARE)  # 4 GPUs x 15 GiB
    add_pod(store, "a", {"aliyun.com/gpu-mem": "4"})
    schedule(store)
    add_pod(store, "b", {"aliyun.com/gpu-mem": "12"})  # GPU 0 has 11 left: GPU 1
    schedule(store)
    add_pod(store, "c", {"aliyun.com/gpu-mem": "3"})  # GPU 0: 11 left, GPU 1: 3 left
    schedule(store)
    assert [get(store, p)["metadata"]["annotations"][aliyun.INDEX_ANNOTATION] for p in "abc"] == [
        "0",
        "1",
        "1",  # binpack: the least memory left that fits (first fit would take GPU 0)
    ]
    annotations = get(store, "c")["metadata"]["annotations"]
    assert {k: annotations[k] for k in (aliyun.DEV_ANNOTATION, aliyun.POD_ANNOTATION)} == {
        aliyun.DEV_ANNOTATION: "15",
        aliyun.POD_ANNOTATION: "3",
    }
    assert annotations[aliyun.ASSIGNED_ANNOTATION] == "false"
    assert int(annotations[aliyun.ASSUME_TIME_ANNOTATION]) > 1_600_000_000 * 10**9
    assert node_of(store, "c") == "share"


def test_gpushare_fills_one_gpu_exactly_before_the_next(store: Store) -> None:
    make_node(store, "share", "g4dn.12xlarge", **GPUSHARE)  # 4 T4s: 15 GiB each
    for i in range(16):
        add_pod(store, f"p{i:02}", {"aliyun.com/gpu-mem": "1"})
        schedule(store)  # one pass each: the GPU's use is read back from the annotations
    gpus = [
        get(store, f"p{i:02}")["metadata"]["annotations"][aliyun.INDEX_ANNOTATION]
        for i in range(16)
    ]
    assert gpus == ["0"] * 15 + ["1"]  # fifteen 1-GiB pods fill a 15-GiB GPU to the GiB


def test_gpushare_refuses_a_pod_no_single_gpu_can_hold(store: Store) -> None:
    make_node(store, "share", "g4dn.12xlarge", **GPUSHARE)  # 60 GiB, 15 per GPU
    make_node(store, "plain", "g4dn.xlarge")
    add_pod(store, "big", {"aliyun.com/gpu-mem": "16"})
    schedule(store)
    got = condition(store, "big")
    assert (got["status"], got["reason"]) == ("False", "Unschedulable")
    assert got["message"] == (
        "0/2 nodes are available: 1 Insufficient GPU Memory in one device,"
        " 1 Insufficient aliyun.com/gpu-mem. preemption: 0/2 nodes are available:"
        " 1 No preemption victims found for incoming pod,"
        " 1 Preemption is not helpful for scheduling.."
    )


def test_the_extender_counts_only_pods_it_recorded(store: Store) -> None:
    make_node(store, "share", "g4dn.xlarge", **GPUSHARE)
    node = store.get(NODES, None, "share")
    devices = gpushare.node_devices(node)
    assert devices == [gpushare.Device(0, 15 * 1024, "Tesla-T4")]
    recorded = {
        "metadata": {"annotations": {aliyun.INDEX_ANNOTATION: "0", aliyun.POD_ANNOTATION: "5"}}
    }
    unrecorded = {"spec": {"containers": [{"resources": {"limits": {"aliyun.com/gpu-mem": "5"}}}]}}
    done = {**recorded, "status": {"phase": "Succeeded"}}
    used = gpushare.usage([recorded, unrecorded, done], devices, plugin="gpushare")
    assert used == [pytest.approx(1 / 3)]


# Volcano


def test_volcano_puts_each_vgpu_of_a_container_on_its_own_card(store: Store) -> None:
    make_node(store, "vgpu", "g6.12xlarge", **VOLCANO)  # 4 x L4, 23034 MiB each
    add_pod(
        store,
        "two",
        {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "11517"},
        scheduler="volcano",
    )
    schedule(store)
    assert node_of(store, "two") == "vgpu"
    assert devices_of(store, "two") == "0:0.5,1:0.5"


def test_volcano_binpacks_onto_the_most_used_card(store: Store) -> None:
    make_node(store, "vgpu", "g6.12xlarge", **VOLCANO)
    add_pod(store, "a", {"volcano.sh/vgpu-memory": "4000"}, scheduler="volcano")  # one vGPU
    schedule(store)
    add_pod(store, "b", {"volcano.sh/vgpu-memory": "20000"}, scheduler="volcano")
    schedule(store)
    add_pod(store, "c", {"volcano.sh/vgpu-memory": "2000"}, scheduler="volcano")
    schedule(store)
    indices = [devices_of(store, p).split(":")[0] for p in "abc"]
    assert indices == ["0", "1", "1"]  # first fit would put c on card 0


@pytest.mark.parametrize(
    ("limits", "share"),
    [
        ({"volcano.sh/vgpu-number": "1"}, "1"),  # no memory asked: the whole card
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "60"}, "1"),
        (
            {
                "volcano.sh/vgpu-number": "1",
                "volcano.sh/vgpu-memory": "2303",
                "volcano.sh/vgpu-cores": "60",
            },
            "0.6",
        ),
    ],
)
def test_volcano_reads_memory_percentage_and_cores(
    store: Store, limits: dict[str, str], share: str
) -> None:
    make_node(store, "vgpu", "g6.xlarge", **VOLCANO)
    add_pod(store, "p", limits, scheduler="volcano")
    schedule(store)
    assert devices_of(store, "p") == f"0:{share}"


def test_a_volcano_pod_asking_only_cores_is_no_vgpu_request(store: Store) -> None:
    make_node(store, "vgpu", "g6.xlarge", **VOLCANO)
    add_pod(store, "cores", {"volcano.sh/vgpu-cores": "50"}, scheduler="volcano")
    assert gpushare.demand(get(store, "cores")) is None  # checkVGPUResourcesInPod: no
    schedule(store)
    assert node_of(store, "cores") == "vgpu"  # by the node's vgpu-cores alone, no card
    assert gpushare.DEVICES_ANNOTATION not in get(store, "cores")["metadata"]["annotations"]


def test_volcano_memory_percentage_is_a_share_but_no_node_advertises_it(store: Store) -> None:
    percent = {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory-percentage": "25",
               "volcano.sh/vgpu-memory": "9999"}  # fmt: skip
    add_pod(store, "p", percent, scheduler="volcano")
    wanted = gpushare.demand(get(store, "p"))
    assert wanted == gpushare.GpuDemand(
        "volcano", (gpushare.DeviceRequest(2, memory_fraction=0.25),), policy="binpack"
    )  # the percentage wins over vgpu-memory
    make_node(store, "vgpu", "g6.xlarge", **VOLCANO)
    schedule(store)
    # Volcano checks every requested scalar resource against the node's idle ones, and the
    # device plugin registers vgpu-number, -memory and -cores only
    assert condition(store, "p")["message"] == (
        "0/1 nodes are unavailable: 1 Insufficient volcano.sh/vgpu-memory-percentage."
    )


def test_volcano_refuses_with_its_own_message_and_no_preemption(store: Store) -> None:
    make_node(store, "vgpu", "g6.12xlarge", **VOLCANO)
    make_node(store, "plain", "g6.xlarge")
    add_pod(store, "five", {"volcano.sh/vgpu-number": "5"}, scheduler="volcano")  # 4 cards
    add_pod(
        store,
        "huge",
        {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "30000"},
        scheduler="volcano",
    )
    schedule(store)
    for name in ("five", "huge"):
        got = condition(store, name)
        assert node_of(store, name) is None
        assert (got["status"], got["reason"]) == ("False", "Unschedulable")
    assert condition(store, "five")["message"] == (
        "0/2 nodes are unavailable: 1 Insufficient volcano.sh/vgpu-number,"
        " 1 hami-vgpuDeviceSharing error."
    )
    assert condition(store, "huge")["message"] == (
        "0/2 nodes are unavailable: 1 Insufficient volcano.sh/vgpu-memory,"
        " 1 hami-vgpuDeviceSharing error."
    )
    [event] = [
        e
        for e in store.list(EVENTS, "default")[0]
        if e["involvedObject"]["name"] == "five" and e["reason"] == "FailedScheduling"
    ]
    assert event["source"]["component"] == "volcano"


def test_volcano_type_filters(store: Store) -> None:
    make_node(store, "l4", "g6.xlarge", **VOLCANO)
    make_node(store, "t4", "g4dn.xlarge", **VOLCANO)
    vgpu = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1000"}
    add_pod(store, "on-t4", vgpu, scheduler="volcano",
            annotations={"nvidia.com/use-gputype": "t4"})  # fmt: skip
    add_pod(store, "not-l4", vgpu, scheduler="volcano",
            annotations={"nvidia.com/nouse-gputype": "L4"})  # fmt: skip
    schedule(store)
    assert (node_of(store, "on-t4"), node_of(store, "not-l4")) == ("t4", "t4")


def test_a_bare_scheduler_still_leaves_volcanos_pods_alone(store: Store) -> None:
    make_node(store, "vgpu", "g6.xlarge", **VOLCANO)
    add_pod(store, "p", {"volcano.sh/vgpu-number": "1"}, scheduler="volcano")
    SimScheduler(store).schedule_once()
    assert get(store, "p").get("status", {}) == {}


# -- Karpenter -------------------------------------------------------------------------


GPU_POOL: dict[str, Any] = {
    "metadata": {"name": "gpu", "uid": "uid-gpu"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": NODECLASS,
                "requirements": [{"key": GPU_NAME, "operator": "Exists"}],
            }
        }
    },
}


@pytest.mark.parametrize(
    ("limits", "scheduler"),
    [
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"}, "volcano"),
        ({"aliyun.com/gpu-mem": "2"}, None),
        ({"nvidia.com/mig-1g.5gb": "1"}, None),
    ],
)
def test_karpenter_provisions_nothing_for_a_sharing_layers_resources(
    store: Store, limits: dict[str, str], scheduler: str | None
) -> None:
    add_pod(store, "p", limits, scheduler=scheduler)
    schedule(store)  # no node: the pod's scheduler marks it Unschedulable
    pod = get(store, "p")
    assert is_provisionable(pod)
    results = solve(Snapshot([pod], [GPU_POOL]))
    assert results.new_nodeclaims == []
    resources = ",".join(f'"{k}":"{v}"' for k, v in sorted({**limits, "pods": "1"}.items()))
    assert results.errors == {
        "default/p": "no instance type has enough resources, requirements="
        "karpenter.k8s.aws/ec2nodeclass In [default], karpenter.k8s.aws/instance-gpu-name"
        f" Exists, karpenter.sh/nodepool In [gpu], resources={{{resources}}}"
    }


def _pool(name: str, labels: dict[str, str], requirement: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeClassRef": NODECLASS, "requirements": [requirement]},
            }
        },
    }


def _in(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": [value]}


async def _until(store: Store, predicate: Callable[[], Any]) -> Any:
    async with asyncio.timeout(15.0):
        while not (result := predicate()):
            await store.wait_changed(0.02)
    return result


async def test_layer_nodes_come_up_serving_their_pods_and_keep_triggers_unregistered() -> None:
    store = Store()
    crds.install(store)
    for ns in ("default", SYSTEM_NAMESPACE):
        store.create(NAMESPACES, {"metadata": {"name": ns}})
    pools = {
        "mig": _pool("mig", MIG_1G5, _in("node.kubernetes.io/instance-type", "p4d.24xlarge")),
        "gpushare": _pool("gpushare", GPUSHARE, _in(GPU_NAME, "t4")),
        "volcano": _pool("volcano", VOLCANO, _in(GPU_NAME, "l4")),
    }
    for pool in pools.values():
        store.create(NODEPOOLS, pool)
    for name in pools:  # what buys each node: a pod asking nvidia.com/gpu on its pool
        selector = {"karpenter.sh/nodepool": name}
        add_pod(store, f"trigger-{name}", {"nvidia.com/gpu": "1"}, nodeSelector=selector)
    add_pod(store, "mig-pod", {"nvidia.com/mig-1g.5gb": "1"})
    add_pod(store, "share-pod", {"aliyun.com/gpu-mem": "2"})
    add_pod(store, "vgpu-pod", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"},
            scheduler="volcano")  # fmt: skip
    karpenter = KarpenterSim(store, timings=FAST)
    scheduler = SimScheduler(store, scheduler_names=CLUSTER_SCHEDULER_NAMES, resync_seconds=0.05)
    kubelet = SimKubelet(store, start_seconds=0.01)
    tasks = [asyncio.create_task(c.run()) for c in (karpenter, scheduler, kubelet)]
    layer_pods = ("mig-pod", "share-pod", "vgpu-pod")
    try:
        await _until(
            store,
            lambda: all(get(store, p)["status"].get("phase") == "Running" for p in layer_pods),
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        karpenter.close()
    nodes = {n["metadata"]["labels"]["karpenter.sh/nodepool"]: n for n in store.list(NODES)[0]}
    assert {p: node_of(store, f"{p}-pod") for p in ("mig", "share", "vgpu")} == {
        "mig": nodes["mig"]["metadata"]["name"],
        "share": nodes["gpushare"]["metadata"]["name"],
        "vgpu": nodes["volcano"]["metadata"]["name"],
    }
    extended = {
        pool: {k: v for k, v in n["status"]["allocatable"].items() if "/" in k}
        for pool, n in nodes.items()
    }
    assert extended == {
        "mig": {"nvidia.com/mig-1g.5gb": "56"},
        "gpushare": {"aliyun.com/gpu-mem": "15", "aliyun.com/gpu-count": "1"},
        "volcano": {
            "volcano.sh/vgpu-number": "10",
            "volcano.sh/vgpu-memory": "23034",
            "volcano.sh/vgpu-cores": "100",
        },
    }
    assert nodes["mig"]["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] == "56"
    plugin_pods = {p["spec"]["nodeName"]: p for p in store.list(PODS, SYSTEM_NAMESPACE)[0]}
    apps = {
        pool: plugin_pods[n["metadata"]["name"]]["metadata"]["labels"]["app.kubernetes.io/name"]
        for pool, n in nodes.items()
    }
    assert apps == {
        "mig": "nvidia-device-plugin-daemonset",
        "gpushare": "gpushare-device-plugin-ds",
        "volcano": "volcano-device-plugin",
    }
    claims = {
        c["metadata"]["labels"]["karpenter.sh/nodepool"]: c for c in store.list(NODECLAIMS)[0]
    }
    for claim in claims.values():  # as real Karpenter: nvidia.com/gpu never registers
        [initialized] = [c for c in claim["status"]["conditions"] if c["type"] == "Initialized"]
        assert (initialized["status"], initialized["reason"], initialized["message"]) == (
            "Unknown",
            "ResourceNotRegistered",
            'Resource "nvidia.com/gpu" was requested but not registered',
        )
    estimates = {pool: c["status"]["allocatable"]["nvidia.com/gpu"] for pool, c in claims.items()}
    assert estimates == {"mig": "8", "gpushare": "1", "volcano": "1"}  # GPUs at launch
    for name in pools:
        assert node_of(store, f"trigger-{name}") is None


def test_the_gpushare_extender_sees_the_nodes_capacity_not_the_labels() -> None:
    node = {"status": {"capacity": {"aliyun.com/gpu-mem": "61", "aliyun.com/gpu-count": "4"}}}
    assert aliyun.node_gpus(node) == (4, 15)  # integer division, as NewNodeInfo
    assert aliyun.node_gpus({"status": {"capacity": {"aliyun.com/gpu-mem": "60"}}}) == (0, 0)
    assert aliyun.pod_gpu_mem(
        {"spec": {"containers": [
            {"resources": {"limits": {"aliyun.com/gpu-mem": "2"}}},
            {"resources": {"requests": {"aliyun.com/gpu-mem": "3"}}},  # requests: not read
            {"resources": {"limits": {"aliyun.com/gpu-mem": "4"}}},
        ]}}
    ) == 6  # fmt: skip
    assert Decimal(aliyun.gib_per_gpu(81559)) == 79


def test_volcano_words_node_failures_as_its_allocate_action() -> None:
    assert volcano.node_reasons(
        ("Too many pods", "Insufficient cpu", "Insufficient volcano.sh/vgpu-number")
    ) == ("Insufficient cpu",)  # resources first, one named
    assert volcano.node_reasons(("Too many pods",)) == ("node(s) pod number exceeded",)
    assert volcano.fit_errors_message(0, ()) == "0/0 nodes are unavailable"
    assert volcano.fit_errors_message(3, [("b",), ("a",), ("b",)]) == (
        "0/3 nodes are unavailable: 1 a, 2 b."
    )
