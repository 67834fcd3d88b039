"""The simulated Karpenter (sim.karpenter, sim.nodeclaims).

Pure `solve` tests are table-driven; the rest run `KarpenterSim` against a real `Store`
with the Karpenter CRDs installed (schema, defaults, CEL rules), either with short timings
or stepped by hand with a fake clock. Only the last test runs the sim scheduler and
kubelet too; elsewhere pending pods stay pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from sim import crds
from sim.catalog import ZONES, by_name
from sim.disruption import parse_duration
from sim.karpenter import (
    Batcher,
    KarpenterSim,
    KarpenterTimings,
    Snapshot,
    is_provisionable,
    solve,
)
from sim.kubelet import SimKubelet
from sim.nodeclaims import (
    EKS_TIMINGS,
    FAST_TIMINGS,
    ExistingNode,
    UnavailableOfferings,
    existing_nodes,
)
from sim.scheduler import SimScheduler
from sim.store import (
    EVENTS,
    NAMESPACES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    Invalid,
    Obj,
    Store,
)

NODECLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
FAST = KarpenterTimings(0.01, 0.2, 0.1, 0.01, 0.01, 0.01)
INERT = KarpenterTimings(1.0, 10.0, 10.0, 1000.0, 1000.0, 1000.0)  # lifecycle never fires


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return (
        {"key": key, "operator": op, "values": list(values)}
        if values
        else {"key": key, "operator": op}
    )


def nodepool(name: str, *reqs: dict[str, Any], weight: int | None = None, **template: Any) -> Obj:
    """A NodePool; ``template`` holds taints, startupTaints, limits (moved to spec), labels."""
    limits = template.pop("limits", None)
    labels = template.pop("labels", None)
    spec: dict[str, Any] = {
        "template": {"spec": {"nodeClassRef": NODECLASS, "requirements": list(reqs), **template}}
    }
    if labels:
        spec["template"]["metadata"] = {"labels": labels}
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = limits
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


GPU_POOL = nodepool("gpu", expr(GPU_NAME, "Exists"))
CPU_POOL = nodepool("cpu", expr("karpenter.k8s.aws/instance-category", "In", "m"))


def pod(name: str, *, gpus: int = 0, cpu: str | None = None, **spec: Any) -> Obj:
    """A pod marked Unschedulable; ``gpumem``/``selector``/``tolerations`` etc. in spec."""
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if gpumem := spec.pop("gpumem", None):
        limits["nvidia.com/gpumem"] = str(gpumem)
    requests = {"cpu": cpu} if cpu else {}
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if owner := spec.pop("owner", None):
        metadata["ownerReferences"] = [owner]
    status = spec.pop("status", None) or {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    if selector := spec.pop("selector", None):
        spec["nodeSelector"] = selector
    container = {"name": "c", "image": "x", "resources": {"limits": limits, "requests": requests}}
    return {"metadata": metadata, "spec": {"containers": [container], **spec}, "status": status}


# -- pure solve ---------------------------------------------------------------------


def test_is_provisionable_follows_karpenter() -> None:
    assert is_provisionable(pod("p"))
    assert is_provisionable(pod("p", schedulerName="hami-scheduler", priority=-10))
    assert not is_provisionable(pod("p", status={"phase": "Pending"}))
    assert not is_provisionable(pod("p", nodeName="n1"))
    bumped = pod("p")
    bumped["status"]["nominatedNodeName"] = "n1"
    assert not is_provisionable(bumped)
    assert not is_provisionable(
        pod("p", owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d"})
    )
    assert not is_provisionable(pod("p", owner={"apiVersion": "v1", "kind": "Node", "name": "n"}))
    assert is_provisionable(
        pod("p", owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r"})
    )


def names(snapshot: Snapshot) -> list[tuple[str, list[str], list[str]]]:
    """Solve; (pool, instance type options, pod names) per new NodeClaim."""
    results = solve(snapshot)
    return [
        (c.nodepool, [it.name for it in c.instance_types], [p["metadata"]["name"] for p in c.pods])
        for c in results.new_nodeclaims
    ]


T4 = {GPU_NAME: "t4"}


@pytest.mark.parametrize(
    ("pods", "pools", "expected"),
    [
        (
            [pod("a", gpus=1, selector=T4)],
            [CPU_POOL, GPU_POOL],
            [("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])],
        ),
        (
            [pod("a", gpus=1, selector=T4), pod("b", gpus=1, selector=T4)],
            [GPU_POOL],
            [("gpu", ["g4dn.12xlarge"], ["a", "b"])],
        ),
        ([pod("a", cpu="1")], [CPU_POOL, GPU_POOL], [("cpu", ["m5.large"], ["a"])]),
        ([pod("a", gpus=8)], [GPU_POOL], [("gpu", ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"], ["a"])]),
        (  # required OR terms: the first (v100, never offered) is relaxed away
            [
                pod(
                    "a",
                    gpus=1,
                    affinity={
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [expr(GPU_NAME, "In", "v100")]},
                                    {"matchExpressions": [expr(GPU_NAME, "In", "l4")]},
                                ]
                            }
                        }
                    },
                )
            ],
            [GPU_POOL],
            [("gpu", ["g6.xlarge", "g6.12xlarge"], ["a"])],
        ),
        (  # an unsatisfiable preference is dropped
            [
                pod(
                    "a",
                    gpus=1,
                    selector=T4,
                    affinity={
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 10,
                                    "preference": {
                                        "matchExpressions": [expr(GPU_NAME, "In", "h100")]
                                    },
                                }
                            ]
                        }
                    },
                )
            ],
            [GPU_POOL],
            [("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])],
        ),
        (  # the bigger pod opens the NodeClaim (cpu descending), the small one joins it
            [pod("small", cpu="1", selector=T4), pod("big", cpu="40", selector=T4)],
            [GPU_POOL],
            [("gpu", ["g4dn.12xlarge"], ["big", "small"])],
        ),
        (  # weight wins over name
            [pod("a", gpus=1)],
            [
                nodepool("a-low", expr(GPU_NAME, "In", "l4")),
                nodepool("z-high", expr(GPU_NAME, "In", "a10g"), weight=50),
            ],
            [("z-high", ["g5.xlarge", "g5.12xlarge"], ["a"])],
        ),
        (  # equal weight: by name
            [pod("a", gpus=1)],
            [
                nodepool("b", expr(GPU_NAME, "In", "a10g")),
                nodepool("a", expr(GPU_NAME, "In", "l4")),
            ],
            [("a", ["g6.xlarge", "g6.12xlarge"], ["a"])],
        ),
        (  # limits filter the options by capacity
            [pod("a", gpus=1)],
            [nodepool("gpu", expr(GPU_NAME, "In", "t4"), limits={"cpu": "10"})],
            [("gpu", ["g4dn.xlarge"], ["a"])],
        ),
        (  # startupTaints need no toleration
            [pod("a", gpus=1)],
            [
                nodepool(
                    "gpu",
                    expr(GPU_NAME, "In", "t4"),
                    startupTaints=[{"key": "boot", "effect": "NoSchedule"}],
                )
            ],
            [("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])],
        ),
        (  # a tolerated pool taint
            [pod("a", gpus=1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])],
            [
                nodepool(
                    "gpu",
                    expr(GPU_NAME, "In", "t4"),
                    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                )
            ],
            [("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])],
        ),
        (  # a PreferNoSchedule pool taint is tolerated by the last relaxation step
            [pod("a", gpus=1)],
            [
                nodepool(
                    "gpu",
                    expr(GPU_NAME, "In", "t4"),
                    taints=[{"key": "soft", "effect": "PreferNoSchedule"}],
                )
            ],
            [("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])],
        ),
    ],
)
def test_solve_places_pods_on_new_nodeclaims(
    pods: list[Obj], pools: list[Obj], expected: list[tuple[str, list[str], list[str]]]
) -> None:
    assert names(Snapshot(pods, pools)) == expected


def test_solve_asks_a_refusing_nodeclaim_once_per_kind_of_pod_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In-flight NodeClaims only narrow as pods are added, so one that refused a pod is
    not asked again for an identical one; the NodeClaims and placements are the same as
    when every pod is asked everywhere (each pod its own signature)."""
    from sim import karpenter as sim_karpenter

    pods = [
        *(pod(f"big-{i}", gpus=1, cpu="3", selector=T4) for i in range(6)),
        *(pod(f"small-{i}", cpu="1", selector=T4) for i in range(6)),
        *(pod(f"l4-{i}", gpus=1, selector={GPU_NAME: "l4"}) for i in range(6)),
    ]
    snapshot = Snapshot(pods, [GPU_POOL])
    asked: list[int] = []
    real = sim_karpenter._Solver._in_flight_may_take

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(sim_karpenter._Solver, "_in_flight_may_take", counting)
    remembered = names(snapshot)
    with_memory = len(asked)
    asked.clear()
    monkeypatch.setattr(sim_karpenter, "_solver_signature", lambda p: p["metadata"]["name"])
    assert names(snapshot) == remembered
    assert with_memory < len(asked)
    assert sum(len(placed) for _, _, placed in remembered) == len(pods)


def test_the_solver_signature_ignores_what_replicas_differ_in_and_keeps_what_solve_reads() -> None:
    from sim.karpenter import _solver_signature

    def replica(token_volume: str, **spec: Any) -> Obj:
        p = pod(token_volume, gpus=1, selector=T4, **spec)
        p["spec"]["volumes"] = [{"name": f"kube-api-access-{token_volume}", "projected": {}}]
        p["metadata"]["annotations"] = {"note": token_volume}
        return p

    assert _solver_signature(replica("6wppj")) == _solver_signature(replica("8lzbs"))
    for other in (
        replica("x", tolerations=[GPU_TAINT | {"operator": "Equal"}]),
        replica("x", overhead={"cpu": "1"}),
        replica("x", resourceClaims=[{"name": "gpu"}]),
        pod("x", gpus=2, selector=T4),
        pod("x", gpus=1, selector={GPU_NAME: "l4"}),
    ):
        assert _solver_signature(other) != _solver_signature(replica("6wppj"))
    labelled = replica("y")
    labelled["metadata"]["labels"] = {"app": "a"}
    assert _solver_signature(labelled) != _solver_signature(replica("y"))


def legacy(pool: str) -> str:
    """The v1.0-v1.3 prefix of a per-NodePool error."""
    return f'incompatible with nodepool "{pool}", daemonset overhead={{"pods":"0"}}, '


NO_GPUMEM = (
    "no instance type has enough resources, requirements=karpenter.k8s.aws/ec2nodeclass In [default],"
    " karpenter.k8s.aws/instance-gpu-name Exists, karpenter.sh/nodepool In [gpu],"
    ' resources={"nvidia.com/gpumem":"4000","pods":"1"}'
)
NO_PRODUCT = 'incompatible requirements, label "nvidia.com/gpu.product" does not have known values'
NO_T4_IN_CPU = (
    "no instance type met the scheduling requirements or had enough resources, requirements="
    "karpenter.k8s.aws/ec2nodeclass In [default], karpenter.k8s.aws/instance-category In [m],"
    " karpenter.k8s.aws/instance-gpu-name In [t4], karpenter.sh/nodepool In [cpu],"
    ' resources={"nvidia.com/gpu":"1","pods":"1"}'
)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
NO_TYPES = "nodepool requirements filtered out all available instance types"


@pytest.mark.parametrize(
    ("a_pod", "pools", "current", "old"),
    [
        (pod("a", gpumem=4000), [GPU_POOL], NO_GPUMEM, legacy("gpu") + NO_GPUMEM),
        (
            pod("a", gpus=1, selector={"nvidia.com/gpu.product": "Tesla-T4"}),
            [CPU_POOL, GPU_POOL],
            f"{NO_PRODUCT}; {NO_PRODUCT}",
            f"{legacy('cpu')}{NO_PRODUCT}; {legacy('gpu')}{NO_PRODUCT}",
        ),
        (
            pod("a", gpus=1),
            [nodepool("gpu", expr(GPU_NAME, "Exists"), taints=[GPU_TAINT])],
            "did not tolerate taint",
            legacy("gpu") + "did not tolerate nvidia.com/gpu=true:NoSchedule",
        ),
        (pod("a", gpus=1, selector=T4), [CPU_POOL], NO_T4_IN_CPU, legacy("cpu") + NO_T4_IN_CPU),
        (
            pod("a", gpus=1),
            [nodepool("gpu", expr(GPU_NAME, "In", "t4"), limits={"cpu": "2"})],
            "all available instance types exceed limits for nodepool",
            'all available instance types exceed limits for nodepool: "gpu"',
        ),
        (pod("a", gpus=1), [nodepool("none", expr(GPU_NAME, "In", "v100"))], NO_TYPES, NO_TYPES),
    ],
)
def test_solve_reports_karpenters_reasons(
    a_pod: Obj, pools: list[Obj], current: str, old: str
) -> None:
    results = solve(Snapshot([a_pod], pools))
    assert results.new_nodeclaims == []
    assert results.errors == {"default/a": current}
    assert solve(Snapshot([a_pod], pools, legacy_messages=True)).errors == {"default/a": old}


def node(
    name: str, *, gpus: int, pool: str = "gpu", initialized: bool = True, taints: Iterable[Obj] = ()
) -> ExistingNode:
    resources = {
        "cpu": Decimal(4),
        "memory": Decimal(16 * 2**30),
        "pods": Decimal(29),
        "nvidia.com/gpu": Decimal(gpus),
    }
    labels = {**by_name("g4dn.12xlarge").labels(), "karpenter.sh/nodepool": pool}
    return ExistingNode(
        name, labels, list(taints), resources, resources, initialized, f"{name}-claim", name
    )


def test_solve_prefers_existing_capacity_and_accounts_for_what_it_placed() -> None:
    pods = [
        pod("a", gpus=1, selector=T4),
        pod("b", gpus=1, selector=T4),
        pod("c", gpus=1, selector=T4),
    ]
    results = solve(
        Snapshot(pods, [GPU_POOL], [node("n2", gpus=1, initialized=False), node("n1", gpus=1)])
    )
    placed = [(n.name, [p["metadata"]["name"] for p in ps]) for n, ps in results.existing]
    assert placed == [("n1", ["a"]), ("n2", ["b"])]  # initialized first
    assert [[p["metadata"]["name"] for p in c.pods] for c in results.new_nodeclaims] == [["c"]]


def test_solve_skips_existing_nodes_the_pod_cannot_use() -> None:
    tainted = node(
        "n1", gpus=4, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    )
    a100 = node("n2", gpus=4)
    results = solve(Snapshot([pod("a", gpus=1, selector=T4)], [GPU_POOL], [tainted]))
    assert results.existing == [] and len(results.new_nodeclaims) == 1
    l4_pod = pod("a", gpus=1, selector={GPU_NAME: "l4"})
    assert solve(Snapshot([l4_pod], [GPU_POOL], [a100])).existing == []


def test_solve_limits_count_existing_capacity_and_new_nodeclaims() -> None:
    pool = nodepool("gpu", expr(GPU_NAME, "In", "t4"), limits={"nvidia.com/gpu": "5"})
    existing = node("n1", gpus=4, taints=[{"key": "full", "effect": "NoSchedule"}])
    results = solve(Snapshot([pod("a", gpus=1), pod("b", gpus=2)], [pool], [existing]))
    assert [[it.name for it in c.instance_types] for c in results.new_nodeclaims] == [
        ["g4dn.xlarge"]
    ]
    assert "exceed limits" in results.errors["default/b"]


def test_existing_nodes_view_of_an_initializing_node() -> None:
    claim: dict[str, Any] = {
        "metadata": {
            "name": "gpu-x",
            "labels": {"karpenter.sh/nodepool": "gpu", "launched": "yes"},
        },
        "spec": {
            "taints": [{"key": "t", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "boot", "effect": "NoSchedule"}],
        },
        "status": {
            "providerID": "aws:///z/i-1",
            "allocatable": {"nvidia.com/gpu": "4", "cpu": "47810m"},
            "capacity": {"nvidia.com/gpu": "4"},
        },
    }
    new_node: dict[str, Any] = {
        "metadata": {"name": "n1", "labels": {"karpenter.sh/registered": "true", "joined": "yes"}},
        "spec": {
            "providerID": "aws:///z/i-1",
            "taints": [
                {"key": "boot", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                {"key": "t", "effect": "NoSchedule"},
            ],
        },
        "status": {"allocatable": {"cpu": "47", "nvidia.com/gpu": "0"}},
    }
    bound = pod("a", gpus=1, nodeName="n1", status={"phase": "Running"})
    done = pod("b", gpus=1, nodeName="n1", status={"phase": "Succeeded"})
    [view] = existing_nodes([new_node], [claim], [bound, done])
    assert (view.name, view.nodeclaim, view.node, view.initialized) == ("n1", "gpu-x", "n1", False)
    assert view.labels == new_node["metadata"]["labels"]  # registered: the Node's labels
    assert view.taints == [{"key": "t", "effect": "NoSchedule"}]  # startup and ephemeral ignored
    # resources.Subtract keeps the allocatable's keys only: no "pods" entry (absent = 0).
    assert view.available == {"cpu": Decimal(47), "nvidia.com/gpu": Decimal(3)}
    claim["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert existing_nodes([new_node], [claim], []) == []
    unlaunched = {"metadata": {"name": "gpu-y", "labels": {}}, "spec": {}, "status": {}}
    [view] = existing_nodes([], [unlaunched], [])
    assert (view.name, view.node, view.available) == ("gpu-y", None, {})


# -- KarpenterSim against a store ---------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def stepped(store: Store, **kwargs: Any) -> Iterator[tuple[KarpenterSim, FakeClock]]:
    """A `KarpenterSim` reconciled by hand on a fake clock; its lifecycle never fires."""
    clock = FakeClock()
    sim = KarpenterSim(store, timings=INERT, clock=clock, **kwargs)
    try:
        yield sim, clock
    finally:
        sim.close()


def step(sim: KarpenterSim, clock: FakeClock, *times: float) -> None:
    """Reconcile at each of ``times`` (seconds on the fake clock)."""
    for t in times:
        clock.now = t
        sim.reconcile()


def new_store(*pools: Obj) -> Store:
    store = Store()
    crds.install(store)  # the Karpenter CRDs' schemas and CEL rules, as the apiserver
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    for p in pools:
        store.create(NODEPOOLS, {**p, "metadata": {"name": p["metadata"]["name"]}})
    return store


def add_pods(store: Store, *pods: Obj) -> None:
    for p in pods:
        store.create(
            PODS, {**p, "metadata": {k: v for k, v in p["metadata"].items() if k != "uid"}}
        )


@contextlib.asynccontextmanager
async def running(
    store: Store, timings: KarpenterTimings = FAST, **kwargs: Any
) -> AsyncIterator[KarpenterSim]:
    sim = KarpenterSim(store, timings=timings, **kwargs)
    task = asyncio.create_task(sim.run())
    try:
        yield sim
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_for(store: Store, predicate: Callable[[], Any]) -> Any:
    """Re-check ``predicate`` on store changes until it returns something truthy (10 s at
    most: the lifecycle steps take well under a second, but a loaded CI machine once took
    over 3 s; lifecycle steps that write nothing are covered by a short poll)."""
    async with asyncio.timeout(10.0):
        while not (result := predicate()):
            await store.wait_changed(0.02)
    return result


def objects(store: Store, rt: Any) -> list[dict[str, Any]]:
    return store.list(rt)[0]


def events(store: Store, reason: str | None = None) -> list[tuple[str, str, str, int]]:
    return [
        (e["involvedObject"]["name"], e["type"], e["message"], e["count"])
        for e in objects(store, EVENTS)
        if reason is None or e["reason"] == reason
    ]


def ready(claim: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in claim["status"].get("conditions", ())
    )


async def test_gpu_pod_gets_a_t4_node_walked_to_ready(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    store = new_store(CPU_POOL, GPU_POOL)
    async with running(store):
        add_pods(store, pod("a", gpus=1, selector=T4))
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
    meta, spec, status = claim["metadata"], claim["spec"], claim["status"]
    assert meta["name"].startswith("gpu-") and meta["labels"]["karpenter.sh/nodepool"] == "gpu"
    assert meta["labels"]["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
    assert meta["labels"]["topology.kubernetes.io/zone"] in (
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    )
    assert meta["labels"]["karpenter.sh/capacity-type"] == "on-demand"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": "gpu",
            "uid": objects(store, NODEPOOLS)[1]["metadata"]["uid"],
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["finalizers"] == ["karpenter.sh/termination"]
    assert spec["nodeClassRef"] == NODECLASS and spec["expireAfter"] == "720h"
    assert {"key": GPU_NAME, "operator": "In", "values": ["t4"]} in spec["requirements"]
    assert {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]} in spec[
        "requirements"
    ]
    assert {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["g4dn.12xlarge", "g4dn.xlarge"],
    } in spec["requirements"]
    assert spec["resources"]["requests"] == {"nvidia.com/gpu": "1", "pods": "1"}
    assert status["providerID"].startswith(
        f"aws:///{meta['labels']['topology.kubernetes.io/zone']}/i-"
    )
    assert len(status["providerID"].rsplit("/i-", 1)[1]) == 17
    assert (
        status["allocatable"]["nvidia.com/gpu"] == "1"
        and status["allocatable"]["memory"] == "14481Mi"
    )
    assert {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]} == {
        t: ("True", t) for t in ("Launched", "Registered", "Initialized", "Ready")
    }
    [the_node] = objects(store, NODES)
    assert status["nodeName"] == the_node["metadata"]["name"]
    assert the_node["metadata"]["name"].startswith("ip-10-") and the_node["metadata"][
        "name"
    ].endswith(".ec2.internal")
    labels = the_node["metadata"]["labels"]
    assert labels[GPU_NAME] == "t4" and labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.count"] == "1" and labels["nvidia.com/gpu.memory"] == "15360"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["kubernetes.io/hostname"] == the_node["metadata"]["name"]
    assert labels["karpenter.sh/registered"] == labels["karpenter.sh/initialized"] == "true"
    assert the_node["spec"]["providerID"] == status["providerID"]
    assert the_node["metadata"]["ownerReferences"][0]["kind"] == "NodeClaim"
    assert the_node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert the_node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert [(c["type"], c["status"]) for c in the_node["status"]["conditions"]] == [
        ("Ready", "True")
    ]
    assert events(store, "Nominated") == [
        ("a", "Normal", f"Pod should schedule on: nodeclaim/{meta['name']}", 1)
    ]
    logged = [r.getMessage() for r in caplog.records if meta["name"] in r.getMessage()]
    assert [m.split()[0] for m in logged] == ["created", "launched", "registered", "nodeclaim"]
    assert all("nodepool gpu" in m for m in logged)
    assert all("g4dn.xlarge" in m for m in logged)


async def test_nodepools_get_ready_conditions_and_unready_pools_are_skipped() -> None:
    store = new_store(GPU_POOL)
    with stepped(store) as (sim, clock):
        step(sim, clock, 0.0)
        conditions = objects(store, NODEPOOLS)[0]["status"]["conditions"]
        assert {c["type"]: (c["status"], c["reason"], c["message"]) for c in conditions} == {
            "NodeClassReady": ("True", "NodeClassReady", ""),
            "Ready": ("True", "Ready", ""),
            "ValidationSucceeded": ("True", "ValidationSucceeded", ""),
        }
        assert all(c["lastTransitionTime"] for c in conditions)

        def not_ready(p: dict[str, Any]) -> None:
            for c in p["status"]["conditions"]:
                if c["type"] == "Ready":
                    c.update(status="False", reason="NodeClassNotReady")

        store.mutate(NODEPOOLS, None, "gpu", not_ready, subresource="status")
        add_pods(store, pod("a", gpus=1))
        step(sim, clock, 1.0, 2.0, 11.0, 12.0)
    assert objects(store, NODECLAIMS) == [] and events(store) == []
    assert (
        objects(store, NODEPOOLS)[0]["status"]["conditions"][1]["status"] == "False"
    )  # left alone


async def test_gpumem_pod_fails_to_schedule_once_per_dedupe_window() -> None:
    store = new_store(GPU_POOL)
    with stepped(store) as (sim, clock):
        add_pods(store, pod("a", gpumem=4000))
        step(sim, clock, 0.0, 1.0)  # one batch
        step(sim, clock, 10.0, 11.0, 20.0, 21.0)  # two requeued batches, deduped
        [(name, type_, message, count)] = events(store, "FailedScheduling")
        assert (name, type_, message, count) == (
            "a",
            "Warning",
            f"Failed to schedule pod, {NO_GPUMEM}",
            1,
        )
        step(sim, clock, 300.0, 301.0)  # the 5 minute dedupe window has passed
        assert [e[3] for e in events(store, "FailedScheduling")] == [2]
    assert objects(store, NODECLAIMS) == []


async def test_gfd_label_selector_is_incompatible_with_every_pool() -> None:
    store = new_store(GPU_POOL)
    async with running(store, legacy_messages=True):
        add_pods(store, pod("a", gpus=1, selector={"nvidia.com/gpu.product": "Tesla-T4"}))
        [(_, _, message, _)] = await wait_for(store, lambda: events(store, "FailedScheduling"))
    assert message == f"Failed to schedule pod, {legacy('gpu')}{NO_PRODUCT}"  # legacy_messages
    assert objects(store, NODECLAIMS) == []


async def test_untolerated_pool_taint_fails_and_tolerated_startup_taints_are_lifted() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    startup = {"key": "node.example.com/booting", "effect": "NoExecute"}
    store = new_store(
        nodepool("gpu", expr(GPU_NAME, "Exists"), taints=[taint], startupTaints=[startup])
    )
    async with running(store):
        add_pods(store, pod("a", gpus=1))
        [(_, _, message, _)] = await wait_for(store, lambda: events(store, "FailedScheduling"))
        assert message == "Failed to schedule pod, did not tolerate taint"
        add_pods(
            store, pod("b", gpus=1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
        )
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
    assert claim["spec"]["taints"] == [taint] and claim["spec"]["startupTaints"] == [startup]
    assert objects(store, NODES)[0]["spec"]["taints"] == [taint]


async def test_pods_in_one_batch_share_the_cheapest_nodeclaim_that_fits_both() -> None:
    store = new_store(GPU_POOL)
    async with running(store):
        add_pods(store, pod("a", gpus=1, selector=T4), pod("b", gpus=1, selector=T4))
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
    assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g4dn.12xlarge"
    assert claim["spec"]["resources"]["requests"] == {"nvidia.com/gpu": "2", "pods": "2"}
    assert sorted(n for n, *_ in events(store, "Nominated")) == ["a", "b"]


async def test_later_pods_land_on_the_inflight_nodeclaim_and_requeues_add_none() -> None:
    store = new_store(GPU_POOL)
    async with running(store) as sim:
        add_pods(store, pod("a", gpus=1, selector=T4), pod("b", gpus=1, selector=T4))
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
        add_pods(store, pod("c", gpus=2))
        await wait_for(store, lambda: [e for e in events(store, "Nominated") if e[0] == "c"])
        await sim.batches(3, within=5)  # batches of the still pending pods' requeues
    assert [c["metadata"]["name"] for c in objects(store, NODECLAIMS)] == [
        claim["metadata"]["name"]
    ]
    [(_, _, message, _)] = [e for e in events(store, "Nominated") if e[0] == "c"]
    node_name = claim["status"]["nodeName"]
    assert (
        message
        == f"Pod should schedule on: nodeclaim/{claim['metadata']['name']}, node/{node_name}"
    )


@pytest.mark.parametrize(
    "a_pod",
    [
        pod("a", gpus=1, status={"phase": "Pending"}),
        pod(
            "a",
            gpus=1,
            status={
                "phase": "Pending",
                "nominatedNodeName": "n1",
                "conditions": [{"type": "PodScheduled", "reason": "Unschedulable"}],
            },
        ),
        pod(
            "a",
            gpus=1,
            owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"},
        ),
        pod("a", gpus=1, selector={"kubernetes.io/hostname": "n1"}),  # ignored by validation
        pod(
            "a",
            gpus=1,
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [expr("karpenter.sh/nodepool", "DoesNotExist")]}
                        ]
                    }
                }
            },
        ),
    ],
)
async def test_pods_karpenter_does_not_act_on_get_nothing(a_pod: Obj) -> None:
    store = new_store(GPU_POOL)
    with stepped(store) as (sim, clock):
        add_pods(store, a_pod)
        step(sim, clock, 0.0, 1.0, 10.0, 11.0)
    assert objects(store, NODECLAIMS) == [] and events(store) == []


async def test_batches_returns_once_a_window_closes_and_quiet_means_none_will() -> None:
    """`KarpenterSim.batches`: a provisionable pod opens a window; the wait returns when
    it closed and its NodeClaim exists. With no provisionable pod Karpenter is `quiet`
    and no batch comes."""
    store = new_store(GPU_POOL)
    idle = KarpenterTimings(0.3, 1.0, 10.0, 1000.0, 1000.0, 1000.0)
    async with running(store, idle) as sim:
        add_pods(
            store,
            pod(
                "ds",
                gpus=1,
                owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"},
            ),
        )
        await wait_for(store, lambda: sim.seen_version >= store.resource_version)
        assert sim.quiet
        with pytest.raises(TimeoutError):
            await sim.batches(1, within=0.5)
        assert sim.batches_done == 0 and objects(store, NODECLAIMS) == []
        add_pods(store, pod("a", gpus=1, selector=T4))
        started = time.monotonic()
        await wait_for(store, lambda: sim.seen_version >= store.resource_version)
        assert not sim.quiet  # the window is open
        await sim.batches(1, within=5)
        assert time.monotonic() - started >= 0.29  # the 0.3 s idle window
        assert sim.batches_done == 1 and len(objects(store, NODECLAIMS)) == 1


async def test_settled_store_does_not_churn() -> None:
    store = new_store(GPU_POOL, CPU_POOL)
    async with running(store) as sim:
        add_pods(store, pod("a", gpus=1, selector=T4), pod("b", gpumem=10), pod("c", cpu="1"))
        await wait_for(store, lambda: len([c for c in objects(store, NODECLAIMS) if ready(c)]) == 2)
        await sim.batches(2, within=5)  # the batches after Ready have written what they do
        settled = store.resource_version
        await sim.batches(5, within=5)  # five requeue batches
        assert store.resource_version == settled


async def test_deleted_nodeclaims_are_terminated_with_their_node() -> None:
    store = new_store(GPU_POOL)
    slow = KarpenterTimings(0.01, 0.2, 0.1, launch_seconds=30.0)
    async with running(store, slow):
        add_pods(store, pod("a", gpus=1))
        [claim] = await wait_for(store, lambda: objects(store, NODECLAIMS))
        store.delete(NODECLAIMS, None, claim["metadata"]["name"])
        await wait_for(store, lambda: not objects(store, NODECLAIMS))
    async with running(store):
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
        assert objects(store, NODES)
        store.delete(NODECLAIMS, None, claim["metadata"]["name"])
        await wait_for(store, lambda: not objects(store, NODECLAIMS) and not objects(store, NODES))


async def test_a_nodeclaim_nothing_can_launch_is_deleted_with_an_event() -> None:
    store = new_store(GPU_POOL)
    claim = {
        "metadata": {
            "name": "gpu-manual",
            "labels": {"karpenter.sh/nodepool": "gpu"},
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "nodeClassRef": NODECLASS,
            "requirements": [
                expr("node.kubernetes.io/instance-type", "In", "g4dn.xlarge"),
                expr("topology.kubernetes.io/zone", "In", "eu-west-1a"),
            ],
        },
    }
    async with running(store):
        store.create(NODECLAIMS, claim)
        await wait_for(store, lambda: not objects(store, NODECLAIMS))
    [(name, type_, message, _)] = events(store, "InsufficientCapacityError")
    assert (name, type_) == ("gpu-manual", "Warning")
    assert message.startswith(
        "NodeClaim gpu-manual event: creating instance, insufficient capacity"
    )
    assert objects(store, NODES) == []


# -- batching and the sync gate, stepped with a fake clock --------------------------


def test_batcher_idle_and_max_windows() -> None:
    batcher = Batcher(idle=1.0, maximum=3.0)
    assert batcher.deadline is None and not batcher.take(100.0)
    for t in (0.0, 0.9, 1.8, 2.7):
        batcher.trigger(f"pod-{t}", t)
        assert not batcher.take(t)
    assert batcher.deadline == 3.0  # the max window, not 2.7 + 1
    batcher.trigger("pod-0.0", 2.9)  # a key already in the window does not extend it
    assert batcher.take(3.0) and batcher.deadline is None
    batcher.trigger("x", 10.0)
    batcher.trigger("y", 10.5)
    assert not batcher.take(11.4) and batcher.take(11.5)  # idle window after the last key


async def test_a_rejected_nodeclaim_is_retried_at_the_next_requeue() -> None:
    store, rejecting = new_store(GPU_POOL), [True]

    def webhook(old: Obj | None, new: Obj) -> None:
        if old is None and rejecting[0]:
            raise Invalid("admission webhook denied the request")

    store.add_validator(NODECLAIMS, webhook)
    with stepped(store) as (sim, clock):
        add_pods(store, pod("a", gpus=1))
        step(sim, clock, 0.0, 1.0)
        assert objects(store, NODECLAIMS) == [] and events(store) == []
        rejecting[0] = False
        step(sim, clock, 10.0, 11.0)
        assert len(objects(store, NODECLAIMS)) == 1 and len(events(store, "Nominated")) == 1


async def test_provisioning_waits_for_batch_windows_and_provider_ids() -> None:
    store, clock = new_store(GPU_POOL), FakeClock()
    sim = KarpenterSim(store, timings=INERT, clock=clock)
    try:
        add_pods(store, pod("a", gpus=1, selector=T4))
        assert sim.reconcile() == 1.0  # batch open, idle window 1 s
        clock.now = 0.5
        add_pods(store, pod("b", gpus=1, selector=T4))
        assert sim.reconcile() == 1.0
        clock.now = 1.4
        sim.reconcile()
        assert objects(store, NODECLAIMS) == []
        clock.now = 1.5
        sim.reconcile()
        [claim] = objects(store, NODECLAIMS)  # both pods in one NodeClaim
        assert claim["spec"]["resources"]["requests"]["nvidia.com/gpu"] == "2"
        assert {
            c["type"]: (c["status"], c["reason"], c["message"])
            for c in claim["status"]["conditions"]
        } == {
            "Launched": ("Unknown", "AwaitingReconciliation", "object is awaiting reconciliation"),
            "Registered": (
                "Unknown",
                "AwaitingReconciliation",
                "object is awaiting reconciliation",
            ),
            "Initialized": (
                "Unknown",
                "AwaitingReconciliation",
                "object is awaiting reconciliation",
            ),
            "Ready": (
                "Unknown",
                "ReconcilingDependents",
                "Initialized=Unknown, Launched=Unknown, Registered=Unknown",
            ),
        }
        # The claim is not launched (INERT): a new pod's batch is dropped, unsynced.
        clock.now = 5.0
        add_pods(store, pod("c", gpus=8), pod("d", gpus=1))
        sim.reconcile()
        clock.now = 6.0
        sim.reconcile()
        assert len(objects(store, NODECLAIMS)) == 1 and events(store, "FailedScheduling") == []
        launched, name = by_name("g4dn.12xlarge"), claim["metadata"]["name"]
        store.mutate(
            NODECLAIMS, None, name, lambda o: o["metadata"]["labels"].update(launched.labels())
        )
        store.mutate(
            NODECLAIMS,
            None,
            name,
            lambda o: o["status"].update(
                providerID="aws:///us-east-1a/i-0123456789abcdef0",
                allocatable={"nvidia.com/gpu": str(launched.gpu_count), "pods": "234"},
            ),
            subresource="status",
        )
        clock.now = 15.0  # every pod's 10 s requeue fires together
        assert sim.reconcile() == 1.0
        clock.now = 16.0
        sim.reconcile()
        # a, b (t4) and d fit the launched g4dn.12xlarge in flight; c (8 GPUs) needs its own.
        assert len(objects(store, NODECLAIMS)) == 2
        first = claim["metadata"]["name"]
        assert [e for e in events(store, "Nominated") if e[0] == "d"] == [
            ("d", "Normal", f"Pod should schedule on: nodeclaim/{first}", 1)
        ]
    finally:
        sim.close()


async def test_with_the_sim_scheduler_the_pod_runs_on_the_provisioned_node() -> None:
    store = new_store(GPU_POOL)
    kubelet = SimKubelet(store, start_seconds=0.01)
    scheduler = SimScheduler(store, resync_seconds=0.05)
    tasks = [asyncio.create_task(c.run()) for c in (scheduler, kubelet)]
    try:
        async with running(store):
            plain = pod("a", gpus=1, selector=T4, status={"phase": "Pending"})
            add_pods(store, plain)
            running_pod = await wait_for(
                store,
                lambda: [p for p in objects(store, PODS) if p["status"].get("phase") == "Running"],
            )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    [the_node] = objects(store, NODES)
    assert running_pod[0]["spec"]["nodeName"] == the_node["metadata"]["name"]


def test_timings_scale_every_delay_and_eks_takes_about_a_minute_to_ready() -> None:
    half = EKS_TIMINGS.scaled(0.5)
    assert (half.batch_idle_seconds, half.requeue_seconds, half.register_seconds) == (
        0.5,
        5.0,
        19.0,
    )
    ready = EKS_TIMINGS.launch_seconds + EKS_TIMINGS.register_seconds
    assert 55 <= ready + EKS_TIMINGS.initialize_seconds <= 65
    assert FAST_TIMINGS.batch_idle_seconds / FAST_TIMINGS.requeue_seconds == 0.1


# -- insufficient capacity and the unavailable-offerings cache ------------------------


def test_unavailable_offerings_expire_after_their_ttl() -> None:
    clock = FakeClock()
    cache = UnavailableOfferings(180.0, clock)
    cache.mark("g4dn.xlarge", "us-east-1a", "on-demand")
    clock.now = 179.9
    assert cache.current() == {("g4dn.xlarge", "us-east-1a", "on-demand")}
    clock.now = 180.0
    assert cache.current() == frozenset()


def test_solve_passes_over_unavailable_offerings() -> None:
    pods, pools = [pod("a", gpus=1, selector=T4)], [GPU_POOL]
    assert names(Snapshot(pods, pools)) == [("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])]
    one_zone = frozenset({("g4dn.xlarge", "us-east-1a", "on-demand")})
    assert names(Snapshot(pods, pools, unavailable=one_zone)) == [
        ("gpu", ["g4dn.xlarge", "g4dn.12xlarge"], ["a"])
    ]
    every_zone = frozenset(("g4dn.xlarge", z, "on-demand") for z in ZONES)
    assert names(Snapshot(pods, pools, unavailable=every_zone)) == [
        ("gpu", ["g4dn.12xlarge"], ["a"])
    ]
    only_xlarge = [pod("b", gpus=1, selector={"node.kubernetes.io/instance-type": "g4dn.xlarge"})]
    results = solve(Snapshot(only_xlarge, pools, unavailable=every_zone))
    assert results.new_nodeclaims == []
    assert results.errors["default/b"].startswith("no instance type ")


async def test_insufficient_capacity_falls_back_to_the_next_offering() -> None:
    store = new_store(GPU_POOL)
    async with running(store) as sim:
        sim.no_capacity.update(("g4dn.xlarge", z) for z in ZONES[:2])
        add_pods(store, pod("a", gpus=1, selector=T4))
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
        # The cheapest type still, in the one zone with capacity; a zone tried on the way
        # (zones are picked at random) is remembered.
        labels = claim["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
        assert labels["topology.kubernetes.io/zone"] == ZONES[2]
        assert sim.unavailable_offerings <= {("g4dn.xlarge", z, "on-demand") for z in ZONES[:2]}
        sim.no_capacity.add(("g4dn.xlarge", ZONES[2]))
        add_pods(store, pod("b", gpus=1, selector=T4))
        # Pending a and b want two GPUs, the first claim has one: b's NodeClaim may still
        # take g4dn.xlarge (the last zone is not yet known to be out), the launch fails
        # there and falls back to g4dn.12xlarge, the next cheapest type.
        second = await wait_for(
            store,
            lambda: [
                c
                for c in objects(store, NODECLAIMS)
                if ready(c) and c["metadata"]["name"] != claim["metadata"]["name"]
            ],
        )
        assert ("g4dn.xlarge", ZONES[2], "on-demand") in sim.unavailable_offerings
    assert second[0]["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g4dn.12xlarge"
    assert events(store, "InsufficientCapacityError") == []


async def test_insufficient_capacity_deletes_the_nodeclaim_and_is_not_retried() -> None:
    store = new_store(GPU_POOL)
    only_xlarge = {"node.kubernetes.io/instance-type": "g4dn.xlarge"}
    async with running(store) as sim:
        sim.no_capacity.update(("g4dn.xlarge", z) for z in ZONES)
        add_pods(store, pod("a", gpus=1, selector=only_xlarge))
        [ice] = await wait_for(store, lambda: events(store, "InsufficientCapacityError"))
        [failed] = await wait_for(store, lambda: events(store, "FailedScheduling"))
        # Many requeue batches later: still the one NodeClaim, deleted.
        await sim.batches(5, within=5)
        assert objects(store, NODECLAIMS) == []
        assert events(store, "InsufficientCapacityError") == [ice]
    name, type_, message, _ = ice
    assert type_ == "Warning"
    assert message.startswith(f"NodeClaim {name} event: creating instance, insufficient capacity")
    assert all(f"g4dn.xlarge in {z}" in message for z in ZONES)
    assert failed[0] == "a" and failed[2].startswith("Failed to schedule pod, no instance type")


# -- launch and registration timeouts, resources that never register -----------------


def claim_names(store: Store) -> set[str]:
    return {c["metadata"]["name"] for c in objects(store, NODECLAIMS)}


async def test_a_launch_that_hangs_times_out_and_karpenter_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    store = new_store(GPU_POOL)
    timings = dataclasses.replace(FAST, launch_timeout_seconds=1.0)
    async with running(store, timings) as sim:
        sim.lifecycle.launch_hangs = True
        add_pods(store, pod("a", gpus=1, selector=T4))
        [first] = await wait_for(store, lambda: claim_names(store))
        # Deleted at the timeout, never launched; the pending pod gets a new NodeClaim.
        await wait_for(store, lambda: claim_names(store) - {first})
        assert first not in claim_names(store)
        assert (
            f"nodeclaim {first} (nodepool gpu, not launched): terminating due to timeout (launch_timeout)"
            in caplog.text
        )
        sim.lifecycle.launch_hangs = False
        await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])


async def test_a_node_that_never_registers_times_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    store = new_store(GPU_POOL)
    timings = dataclasses.replace(FAST, registration_timeout_seconds=1.5)
    async with running(store, timings) as sim:
        sim.lifecycle.registration_hangs = True
        add_pods(store, pod("a", gpus=1, selector=T4))
        [first] = await wait_for(
            store,
            lambda: [
                c["metadata"]["name"]
                for c in objects(store, NODECLAIMS)
                if c.get("status", {}).get("providerID")
            ],
        )
        await wait_for(store, lambda: first not in claim_names(store))
        assert objects(store, NODES) == []  # the kubelet never joined
        assert "terminating due to timeout (registration_timeout)" in caplog.text
        # Karpenter's defaults: 5 and 15 minutes.
        assert (
            KarpenterTimings().launch_timeout_seconds,
            KarpenterTimings().registration_timeout_seconds,
        ) == (300.0, 900.0)


async def test_a_resource_that_never_registers_leaves_the_nodeclaim_uninitialized() -> None:
    store = new_store(GPU_POOL)
    async with running(store) as sim:
        sim.lifecycle.unregistered_resources.add("nvidia.com/gpu")
        add_pods(store, pod("a", gpus=1, selector=T4))

        def initialized() -> dict[str, Any] | None:
            for c in objects(store, NODECLAIMS):
                for cond in c.get("status", {}).get("conditions", ()):
                    if cond["type"] == "Initialized" and cond["reason"] == "ResourceNotRegistered":
                        return dict(cond)
            return None

        cond = await wait_for(store, initialized)
        assert (cond["status"], cond["message"]) == (
            "Unknown",
            'Resource "nvidia.com/gpu" was requested but not registered',
        )
        [node] = objects(store, NODES)
        assert node["status"]["conditions"][-1]["status"] == "True"  # the kubelet is Ready
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]
        assert "karpenter.sh/initialized" not in node["metadata"]["labels"]
        settled = store.resource_version
        # Time, not an event: the registration is retried and must not time out.
        await asyncio.sleep(0.5)
        assert store.resource_version == settled and len(objects(store, NODECLAIMS)) == 1
        sim.lifecycle.unregistered_resources.clear()  # the device plugin comes up
        await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
        [node] = objects(store, NODES)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
        assert node["metadata"]["labels"]["karpenter.sh/initialized"] == "true"


async def test_a_nodepool_at_its_limits_launches_nothing_and_says_so() -> None:
    pool = nodepool("gpu", expr(GPU_NAME, "In", "t4"), limits={"nvidia.com/gpu": "1"})
    store = new_store(pool)
    async with running(store) as sim:
        add_pods(store, pod("a", gpus=1), pod("b", gpus=1))
        [failed] = await wait_for(store, lambda: events(store, "FailedScheduling"))
        await sim.batches(5, within=5)  # five requeue batches: still one NodeClaim
        assert len(objects(store, NODECLAIMS)) == 1
    assert failed[1:3] == (
        "Warning",
        "Failed to schedule pod, all available instance types exceed limits for nodepool",
    )


# -- emptiness consolidation ----------------------------------------------------------


def consolidating_pool(after: str) -> Obj:
    pool = nodepool("gpu", expr(GPU_NAME, "Exists"))
    pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": after}
    return pool


async def provisioned_then_emptied(store: Store, sim: KarpenterSim) -> dict[str, Any]:
    """A node provisioned for pod a, whose pod then goes away; returns its NodeClaim."""
    add_pods(store, pod("a", gpus=1, selector=T4))
    [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
    store.delete(PODS, "default", "a")
    return claim


EMPTINESS = dataclasses.replace(FAST, consolidation_validation_seconds=0.5)


async def test_an_empty_node_is_removed_after_consolidate_after_and_validation() -> None:
    store = new_store(consolidating_pool("1s"))
    store.create(NAMESPACES, {"metadata": {"name": "kube-system"}})  # DaemonSet pods
    async with running(store, EMPTINESS) as sim:
        sim.emptiness.enabled = True
        claim = await provisioned_then_emptied(store, sim)
        [node] = objects(store, NODES)
        # DaemonSet pods (the device plugin) do not count: the node is empty.
        assert [p["spec"]["nodeName"] for p in objects(store, PODS)] == [node["metadata"]["name"]]
        # Time, not an event: the timers are under test (< consolidateAfter 1 s +
        # validation 0.5 s: still there).
        await asyncio.sleep(1.0)
        assert [c["metadata"]["name"] for c in objects(store, NODECLAIMS)] == [
            claim["metadata"]["name"]
        ]
        await wait_for(store, lambda: not objects(store, NODECLAIMS) and not objects(store, NODES))


@pytest.mark.parametrize(
    "blocker", ["switch off", "Never", "node do-not-disrupt", "pod do-not-disrupt", "nominated"]
)
async def test_an_empty_node_is_kept(blocker: str) -> None:
    store = new_store(consolidating_pool("Never" if blocker == "Never" else "0s"))
    async with running(store, EMPTINESS) as sim:
        sim.emptiness.enabled = blocker != "switch off"
        if blocker == "nominated":  # a pending pod keeps being nominated to the node
            add_pods(store, pod("a", gpus=1, selector=T4))
            await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
        else:
            await provisioned_then_emptied(store, sim)
        if blocker == "node do-not-disrupt":
            [node] = objects(store, NODES)
            store.mutate(
                NODES,
                None,
                node["metadata"]["name"],
                lambda n: (
                    n["metadata"]
                    .setdefault("annotations", {})
                    .update({"karpenter.sh/do-not-disrupt": "true"})
                ),
            )
        if blocker == "pod do-not-disrupt":  # even a DaemonSet pod's blocks (types.go)
            [node] = objects(store, NODES)
            daemon = pod("daemon", owner={"apiVersion": "apps/v1", "kind": "DaemonSet",
                                          "name": "ds", "uid": "uid-ds"})  # fmt: skip
            daemon["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
            daemon["spec"]["nodeName"] = node["metadata"]["name"]
            daemon["status"] = {"phase": "Running"}
            add_pods(store, daemon)
        # Time, not an event: a blocked node starts no consolidation timer whose pass a
        # test could wait on; three validation periods, several nomination windows.
        await asyncio.sleep(1.5)
        assert len(objects(store, NODECLAIMS)) == 1 and len(objects(store, NODES)) == 1


def test_parse_duration() -> None:
    assert [parse_duration(v) for v in ("0s", "30s", "1m30s", "1h", "500ms", "Never")] == [
        0.0,
        30.0,
        90.0,
        3600.0,
        0.5,
        None,
    ]
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("5 minutes")


async def test_a_solve_in_its_thread_gives_the_same_nodeclaim_and_nominations() -> None:
    """``solve_in_thread``: the results of a solve run off the event loop are applied by a
    later pass; the outcome is the one the in-loop solve gives (see the test above)."""
    store = new_store(GPU_POOL)
    async with running(store, solve_in_thread=True):
        add_pods(store, pod("a", gpus=1, selector=T4), pod("b", gpus=1, selector=T4))
        [claim] = await wait_for(store, lambda: [c for c in objects(store, NODECLAIMS) if ready(c)])
    assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g4dn.12xlarge"
    assert sorted(n for n, *_ in events(store, "Nominated")) == ["a", "b"]
