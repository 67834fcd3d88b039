"""The controller's DRA decisions (`controller.dra`): which pending DRA pods get an intent
recorded from their ResourceClaims, shared claims counted once, and NodeClaims usable once
their node's ResourceSlices publish GPU devices. Pure functions on plain dicts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller_fixtures import T0, nodeclaim

from controller.dra import intents_to_record, node_devices, slim_claim, slim_slice
from controller.model import slim_pod
from controller.nodes import parse_nodeclaim
from intent.contract import Intent, Source

L4 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'


def claim_spec(count: int = 1, expression: str = L4) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": count,
                        "selectors": [{"cel": {"expression": expression}}],
                    },
                }
            ]
        }
    }


def dra_pod(
    name: str,
    *,
    claim: str | None = None,
    template: str | None = None,
    created_claim: str | None = None,
    namespace: str = "ml",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pending Unschedulable pod with one ResourceClaim entry ``gpu``."""
    entry: dict[str, Any] = {"name": "gpu"}
    if claim:
        entry["resourceClaimName"] = claim
    if template:
        entry["resourceClaimTemplateName"] = template
    status: dict[str, Any] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 cannot allocate all claims.",
                "lastTransitionTime": T0,
            }
        ],
    }
    if created_claim:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": created_claim}]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": T0,
            "annotations": annotations or {},
        },
        "spec": {
            "resourceClaims": [entry],
            "nodeSelector": {"karpenter.sh/nodepool": "gpu-dra"},
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
        },
        "status": status,
    }


def test_a_pending_dra_pod_gets_the_intent_of_its_claim_read_through_the_slim_cache() -> None:
    pod = slim_pod(dra_pod("a", template="one-l4", created_claim="a-gpu-x7k2p"))
    claims = {("ml", "a-gpu-x7k2p"): slim_claim({"metadata": {"name": "a-gpu-x7k2p",
              "namespace": "ml"}, "spec": claim_spec(2)})["spec"]}  # fmt: skip
    intents, errors = intents_to_record([pod], claims, {"ml"})
    assert errors == []
    [recorded] = intents
    assert recorded.ref.name == "a"
    intent = Intent.from_annotations(recorded.annotations)
    assert intent is not None
    assert (intent.gpus, intent.model, intent.pool) == (2, "l4", "gpu-dra")
    assert Source("dra", "a-gpu-x7k2p") in intent.source


def test_pods_wait_for_their_claims_and_only_opted_in_namespaces_are_served() -> None:
    claims = {("ml", "c1"): claim_spec(), ("other", "c1"): claim_spec()}
    waiting = dra_pod("tpl", template="one-l4")  # the resourceclaim controller is behind
    unseen = dra_pod("named", claim="c9")  # the claim cache has not seen it yet
    elsewhere = dra_pod("x", claim="c1", namespace="other")
    intents, _ = intents_to_record([waiting, unseen, elsewhere], claims, {"ml"})
    assert intents == []
    intents, _ = intents_to_record([elsewhere], claims, {"ml", "other"})
    assert [i.ref.name for i in intents] == ["x"]


def test_a_claim_shared_by_several_pods_is_counted_once() -> None:
    """Pods sharing one ResourceClaim share its devices on one node: the first by name
    stands for it, the others get no intent (they follow the claim to its node); nor does
    a pod whose claim is already counted by an annotated pod or allocated."""
    claims = {("ml", "shared"): claim_spec(), ("ml", "own"): claim_spec()}
    pods = [dra_pod("b", claim="shared"), dra_pod("a", claim="shared"), dra_pod("c", claim="own")]
    intents, _ = intents_to_record(pods, claims, {"ml"})
    assert [i.ref.name for i in intents] == ["a", "c"]
    # Once "a" carries the intent, "b" still gets nothing.
    annotated = dra_pod("a", claim="shared", annotations=intents[0].annotations)
    intents, _ = intents_to_record([annotated, pods[0]], claims, {"ml"})
    assert intents == []
    intents, _ = intents_to_record([pods[0]], claims, {"ml"}, allocated={("ml", "shared")})
    assert intents == []


def test_pods_already_annotated_bound_or_not_unschedulable_are_left_alone() -> None:
    claims = {("ml", "c1"): claim_spec()}
    annotated = dra_pod("a", claim="c1", annotations={"gpu-intent.io/intent-version": "v1",
                        "gpu-intent.io/gpus": "1"})  # fmt: skip
    fresh = dra_pod("b", claim="c1")
    fresh["status"]["conditions"] = []  # not (yet) found unschedulable
    assert intents_to_record([annotated, fresh], claims, {"ml"}) == ([], [])


def test_claims_that_do_not_parse_are_reported_not_acted_on() -> None:
    bad = dra_pod("a", claim="c1")
    bad["spec"]["resourceClaims"] = [{"name": 7}]
    intents, errors = intents_to_record([bad], {("ml", "c1"): claim_spec()}, {"ml"})
    assert intents == [] and [ref.name for ref, _ in errors] == ["a"]
    broken = {("ml", "c1"): {"devices": {"requests": "nope"}}}
    intents, errors = intents_to_record([dra_pod("b", claim="c1")], broken, {"ml"})
    assert intents == [] and [ref.name for ref, _ in errors] == ["b"]


def test_a_nodeclaim_is_usable_once_its_node_publishes_gpu_devices() -> None:
    """On a DRA node nvidia.com/gpu never registers: Karpenter's Initialized stays Unknown
    and Ready never turns True, yet the GPUs are there once the slices publish them."""
    slices = [
        slim_slice({"metadata": {"name": "s1"}, "spec": {"nodeName": "ip-1", "driver":
                    "gpu.nvidia.com", "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}),
        {"spec": {"nodeName": "ip-1", "driver": "net.example.com", "devices": [{"name": "n"}]}},
        {"spec": {"driver": "gpu.nvidia.com", "devices": [{"name": "gpu-0"}]}},  # no node
    ]  # fmt: skip
    assert node_devices(slices) == {"ip-1": 2}
    raw = nodeclaim("nc-1", "gpu-dra", node="ip-1", launched=True)
    raw["status"]["conditions"].append({"type": "Registered", "status": "True"})
    claim = parse_nodeclaim(raw)
    assert not claim.ready
    published = replace(claim, devices=2)
    assert published.ready and published.dra_ready
    unregistered = parse_nodeclaim(nodeclaim("nc-2", "gpu-dra", node="ip-1", launched=True))
    assert not replace(unregistered, devices=2).ready
