"""Required pod anti-affinity on kubernetes.io/hostname, as the sim's Karpenter honours it
(Karpenter's topology.go: namespaces, label selectors, symmetry), and the DaemonSet pod
every sim node runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_sim_karpenter import (
    GPU_POOL,
    T4,
    add_pods,
    new_store,
    node,
    objects,
    pod,
    running,
    wait_for,
)

from sim.affinity import anti_affinity_conflict, selector_matches
from sim.karpenter import Snapshot, solve
from sim.nodeclaims import device_plugin_pod
from sim.store import NAMESPACES as NAMESPACE_RT
from sim.store import NODECLAIMS, NODES, PODS

Obj = dict[str, Any]

#: The term gpu-intent's triggers carry: no pod of a namespace that did not opt in.
NOT_OPTED_IN = {
    "topologyKey": "kubernetes.io/hostname",
    "namespaceSelector": {
        "matchExpressions": [
            {"key": "gpu-intent.io/inject", "operator": "NotIn", "values": ["enabled"]}
        ]
    },
    "labelSelector": {
        "matchExpressions": [{"key": "gpu-intent.io/trigger", "operator": "DoesNotExist"}]
    },
}
NAMESPACES = {"kube-system": {}, "ml": {"gpu-intent.io/inject": "enabled"}, "default": {}}


def in_namespace(obj: Obj, namespace: str) -> Obj:
    obj["metadata"]["namespace"] = namespace
    return obj


def repelling(name: str, *terms: Obj) -> Obj:
    """A trigger-like pod (labelled as gpu-intent's triggers are) with these terms."""
    p = pod(name, gpus=1, selector=T4)
    p["metadata"]["labels"] = {"gpu-intent.io/trigger": "true"}
    p["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}
    }
    return p


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {"a": "1"}, False),  # a null selector matches no pod
        ({}, {}, True),  # an empty one matches every pod
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "x"}, False),
    ],
)
def test_label_selectors_match_as_labels_selector_as_selector(
    selector: Obj | None, labels: dict[str, str], expected: bool
) -> None:
    assert selector_matches(selector, labels) is expected


def test_namespaces_of_a_term_own_listed_or_selected() -> None:
    daemon = in_namespace(pod("plugin", gpus=0), "kube-system")
    workload = in_namespace(pod("w", gpus=0), "ml")
    mine = in_namespace(repelling("t", NOT_OPTED_IN), "gpu-intent-system")
    assert anti_affinity_conflict(mine, [daemon], NAMESPACES) is not None
    assert anti_affinity_conflict(mine, [workload], NAMESPACES) is None
    own_only = in_namespace(
        repelling("t", {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}), "ml"
    )
    assert anti_affinity_conflict(own_only, [workload], NAMESPACES) is not None
    assert anti_affinity_conflict(own_only, [daemon], NAMESPACES) is None
    listed = in_namespace(
        repelling(
            "t",
            {
                "topologyKey": "kubernetes.io/hostname",
                "namespaces": ["kube-system"],
                "labelSelector": {},
            },
        ),
        "ml",
    )
    assert anti_affinity_conflict(listed, [daemon], NAMESPACES) is not None
    # Only hostname terms are modelled; a zone term constrains nothing here.
    zone = in_namespace(repelling("t", {**NOT_OPTED_IN, "topologyKey": "zone"}), "x")
    assert anti_affinity_conflict(zone, [daemon], NAMESPACES) is None


def test_anti_affinity_is_symmetric() -> None:
    """A pod selected by a neighbour's required term may not join it either
    (Karpenter's inverse topologies)."""
    trigger = in_namespace(repelling("t", NOT_OPTED_IN), "gpu-intent-system")
    native = in_namespace(pod("n", gpus=1), "default")
    kai = in_namespace(pod("k", gpus=0), "ml")
    assert anti_affinity_conflict(native, [trigger], NAMESPACES) is not None
    assert anti_affinity_conflict(kai, [trigger], NAMESPACES) is None


def with_pods(n: Any, *pods: Obj) -> Any:
    return type(n)(**{**n.__dict__, "pods": tuple(pods)})


def test_solve_places_a_repelling_pod_only_where_no_selected_pod_runs() -> None:
    """An existing node with a free GPU (in Karpenter's view) that runs a kube-system
    pod gets no repelling trigger: Karpenter buys for it. A NodeClaim still on its way
    (no pods) takes it, and so does a node running only opted-in pods."""
    daemon = device_plugin_pod({"metadata": {"name": "n1", "labels": {}}}, _now())
    trigger = in_namespace(repelling("t", NOT_OPTED_IN), "gpu-intent-system")
    busy = with_pods(node("n1", gpus=4), daemon)
    results = solve(Snapshot([trigger], [GPU_POOL], [busy], namespace_labels=NAMESPACES))
    assert results.existing == [] and len(results.new_nodeclaims) == 1
    plain = solve(Snapshot([pod("p", gpus=1, selector=T4)], [GPU_POOL], [busy]))
    assert [n.name for n, _ in plain.existing] == ["n1"]  # no term: the free GPU counts
    inflight = node("n2", gpus=4)
    opted = with_pods(node("n3", gpus=4), in_namespace(pod("w", gpus=0), "ml"))
    for room in (inflight, opted):
        placed = solve(Snapshot([trigger], [GPU_POOL], [busy, room], namespace_labels=NAMESPACES))
        assert [n.name for n, _ in placed.existing] == [room.name]
        assert placed.new_nodeclaims == []


def test_solve_keeps_pods_a_trigger_repels_off_its_new_nodeclaim() -> None:
    trigger = in_namespace(repelling("t", NOT_OPTED_IN), "gpu-intent-system")
    native = in_namespace(pod("n", gpus=1, selector=T4), "default")
    kai = in_namespace(pod("k", gpus=0, selector=T4), "ml")
    results = solve(Snapshot([trigger, native, kai], [GPU_POOL], namespace_labels=NAMESPACES))
    claims = [{p["metadata"]["name"] for p in c.pods} for c in results.new_nodeclaims]
    assert len(claims) == 2 and not any({"t", "n"} <= c for c in claims)
    assert {"k", "t", "n"} == set().union(*claims)
    alone = solve(Snapshot([trigger, kai], [GPU_POOL], namespace_labels=NAMESPACES))
    assert [len(c.pods) for c in alone.new_nodeclaims] == [2]  # opted-in pods may join
    # Triggers do not repel each other: four 1-GPU triggers share one 4-GPU NodeClaim.
    four = [in_namespace(repelling(f"t{i}", NOT_OPTED_IN), "gpu-intent-system") for i in range(4)]
    for t in four:
        t["metadata"]["uid"] = t["metadata"]["name"]
    packed = solve(Snapshot(four, [GPU_POOL], namespace_labels=NAMESPACES))
    assert [len(c.pods) for c in packed.new_nodeclaims] == [4]


def test_a_node_runs_its_device_plugins_daemonset_pod() -> None:
    hami_node = {"metadata": {"name": "n-hami", "labels": {"gpu": "on"}}}
    plain = device_plugin_pod({"metadata": {"name": "n1", "labels": {}}}, _now())
    hami = device_plugin_pod(hami_node, _now())
    assert plain["spec"]["nodeName"] == "n1" and plain["metadata"]["namespace"] == "kube-system"
    assert plain["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    assert plain["metadata"]["generateName"].startswith("nvidia-device-plugin")
    assert hami["metadata"]["generateName"].startswith("hami-device-plugin")
    assert not plain["spec"]["containers"][0].get("resources")  # takes no capacity


def _now() -> datetime:
    return datetime(2026, 11, 24, tzinfo=UTC)


async def test_registered_nodes_run_a_daemonset_pod_and_karpenter_copies_pod_requirements() -> None:
    """Through the running sim: the node Karpenter buys runs the device plugin's pod in
    kube-system once it registers, and the NodeClaim carries the requirements of the pods
    it was bought for (a NotIn on a key no NodePool defines included: gpu-intent's
    trigger marker)."""
    store = new_store(GPU_POOL)
    store.create(NAMESPACE_RT, {"metadata": {"name": "kube-system"}})
    marked = pod("a", gpus=1, selector=T4)
    marked["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "gpu-intent.io/trigger-name",
                                "operator": "NotIn",
                                "values": ["a"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    async with running(store):
        add_pods(store, marked, pod("b", gpus=1, selector=T4))
        [node_obj] = await wait_for(store, lambda: objects(store, NODES))
        [plugin] = await wait_for(
            store,
            lambda: [
                p for p in objects(store, PODS) if p["metadata"]["namespace"] == "kube-system"
            ],
        )
    assert plugin["spec"]["nodeName"] == node_obj["metadata"]["name"]
    [claim] = objects(store, NODECLAIMS)
    assert {
        "key": "gpu-intent.io/trigger-name",
        "operator": "NotIn",
        "values": ["a"],
    } in claim["spec"]["requirements"]
