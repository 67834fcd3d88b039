"""DRA pods end to end: the real webhook and controller against the sim, whose Karpenter
skips pods with DRA requirements (kubernetes-sigs/karpenter#2384) and whose GPU nodes on
DRA NodePools publish ResourceSlices instead of ``nvidia.com/gpu``.

Each scenario counts every NodeClaim the sim's store ever admitted (`NodeClaimCount`),
deleted ones included: a DRA pod of each understood shape binds with exactly the
NodeClaims it needs, and its story (status, Events) names the NodeClaim it runs on.
"""

from __future__ import annotations

from typing import Any

import pytest
from e2e_support import Env, NodeClaimCount, eventually, settled
from kubernetes_asyncio import client

from controller.model import ScaleUpStatus
from gpu_intent.demo import apply
from intent.kube import RESOURCESLICES
from sim.dra import MIG_CONFIG_LABEL, nodepool

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'


def exactly(expression: str | None = None, **fields: Any) -> dict[str, Any]:
    """An ``exactly`` request of class ``gpu.nvidia.com`` (override with ``fields``)."""
    out: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", **fields}
    if expression:
        out["selectors"] = [{"cel": {"expression": expression}}]
    return out


def claim(name: str, *requests: dict[str, Any], template: bool = False) -> dict[str, Any]:
    """A ResourceClaim (or, with ``template``, a ResourceClaimTemplate) in ``ml``."""
    spec = {"devices": {"requests": list(requests)}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate" if template else "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": spec} if template else spec,
    }


#: The examples' gpu-dra NodePool is tainted for DRA pods only.
DRA_ONLY_TOLERATION = {"key": "gpu-intent.io/dra-only", "operator": "Exists", "effect": "NoSchedule"}


def dra_pod(
    name: str, *, template: str | None = None, claim_name: str | None = None, pool: str = "gpu-dra"
) -> dict[str, Any]:
    """A pod with one ResourceClaim entry ``gpu`` from a template or a named claim,
    selecting the DRA NodePool ``pool``."""
    entry: dict[str, Any] = {"name": "gpu"}
    if template:
        entry["resourceClaimTemplateName"] = template
    if claim_name:
        entry["resourceClaimName"] = claim_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeSelector": {"karpenter.sh/nodepool": pool},
            "tolerations": [GPU_TOLERATION, DRA_ONLY_TOLERATION],
            "resourceClaims": [entry],
            "containers": [
                {
                    "name": "c",
                    "image": "example.registry/infer:7",
                    "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


async def pod_json(env: Env, name: str) -> dict[str, Any]:
    response = await env.core.read_namespaced_pod(name, "ml", _preload_content=False)
    return dict(await response.json())


async def bind_all(env: Env, count: NodeClaimCount, names: list[str]) -> dict[str, str]:
    """Wait until every pod is bound with a closed status; then check, once `settled`
    (an extra NodeClaim would exist by then), that every NodeClaim created hosts one of
    them. Returns pod -> node."""

    async def closed() -> dict[str, str] | None:
        nodes = {}
        for name in names:
            pod = await pod_json(env, name)
            status = ScaleUpStatus.from_annotation(
                (pod["metadata"].get("annotations") or {}).get("gpu-intent.io/scale-up")
            )
            node = pod["spec"].get("nodeName")
            if not node or status is None or status.phase != "Scheduled":
                return None
            nodes[name] = node
        return nodes

    nodes: dict[str, str] = await eventually(closed, 30)
    await settled(env)  # a late extra NodeClaim would show up by then
    claim_nodes = {c["metadata"]["name"]: (c.get("status") or {}).get("nodeName")
                   for c in count.created.values()}  # fmt: skip
    assert sorted(set(claim_nodes.values())) == sorted(set(nodes.values())), claim_nodes
    for name, node in nodes.items():
        pod = await pod_json(env, name)
        status = ScaleUpStatus.from_annotation(pod["metadata"]["annotations"]["gpu-intent.io/scale-up"])
        assert status is not None and claim_nodes.get(status.node_claim or "") == node
    return nodes


async def test_a_template_claim_selecting_an_l4_binds_and_describe_tells_the_story(
    running: tuple[Env, NodeClaimCount],
) -> None:
    env, count = running
    assert await env.kube.serves(RESOURCESLICES)  # so --dra auto follows DRA objects
    await apply(env.api, dra_pod("one", template="one-l4"))  # the examples' template
    await bind_all(env, count, ["one"])
    [bought] = count.created.values()
    labels = bought["metadata"]["labels"]
    assert labels["karpenter.k8s.aws/instance-gpu-name"] == "l4"
    assert labels["karpenter.sh/nodepool"] == "gpu-dra"
    # A DRA node never registers nvidia.com/gpu: Karpenter's Initialized stays Unknown.
    conditions = {c["type"]: c for c in bought["status"]["conditions"]}
    assert conditions["Initialized"]["status"] == "Unknown"
    assert conditions["Initialized"]["reason"] == "ResourceNotRegistered"
    pod = await pod_json(env, "one")
    annotations = pod["metadata"]["annotations"]
    assert annotations["gpu-intent.io/gpus"] == "1" and annotations["gpu-intent.io/model"] == "l4"
    [recorded] = pod["status"]["resourceClaimStatuses"]
    assert f"dra:{recorded['resourceClaimName']}" in annotations["gpu-intent.io/source"]
    events = {e["reason"]: e["message"] for e in await env.events("ml", "one")}
    assert {"Triggered", "ScaleUpComplete"} <= set(events), events
    # The pod is told why Karpenter's Initialized stays Unknown, whether its scheduler
    # bound it before or after the controller saw the slices (NodeReady).
    told = events.get("NodeReady", "") + events["ScaleUpComplete"]
    assert "ResourceSlice" in told and "not a failure" in told


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(exactly(f'{PRODUCT} == "NVIDIA L4"', count=2), id="count-2"),
        pytest.param(
            exactly(f'{PRODUCT}.startsWith("NVIDIA L")', allocationMode="All"), id="all"
        ),
        pytest.param(
            exactly(
                'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'
                f' && {PRODUCT} in ["NVIDIA L4", "NVIDIA A100-SXM4-40GB"]'
            ),
            id="memory-and-in",
        ),
        pytest.param(
            {
                "firstAvailable": [
                    {"name": "h100", **exactly(f'{PRODUCT} == "NVIDIA H100 80GB HBM3"')},
                    {"name": "l4", **exactly(f'{PRODUCT} == "NVIDIA L4"')},
                ]
            },
            id="first-available",
        ),
    ],
)
async def test_each_request_shape_binds_with_exactly_the_nodeclaims_it_needs(
    running: tuple[Env, NodeClaimCount], request_: dict[str, Any]
) -> None:
    env, count = running
    await apply(env.api, claim("shape", {"name": "gpu", **(
        request_ if "firstAvailable" in request_ else {"exactly": request_})}, template=True))  # fmt: skip
    await apply(env.api, dra_pod("shaped", template="shape"))
    await bind_all(env, count, ["shaped"])
    assert len(count.created) == 1


async def test_a_claim_shared_by_two_pods_is_bought_once(
    running: tuple[Env, NodeClaimCount],
) -> None:
    env, count = running
    await apply(env.api, claim("shared-l4", {"name": "gpu", "exactly": exactly(
        f'{PRODUCT} == "NVIDIA L4"')}))  # fmt: skip
    for name in ("first", "second"):
        await apply(env.api, dra_pod(name, claim_name="shared-l4"))
    nodes = await bind_all(env, count, ["first"])

    async def second_bound() -> str | None:
        return (await pod_json(env, "second"))["spec"].get("nodeName")

    assert await eventually(second_bound, 20) == nodes["first"]
    assert len(count.created) == 1


async def test_a_mig_claim_buys_a_whole_gpu_of_the_parent_model(
    running: tuple[Env, NodeClaimCount],
) -> None:
    """Two 1g.5gb MIG slices of an A100: a whole A100 node is bought (a node must exist
    before it is partitioned); its MIG manager publishes the slices and the pod binds."""
    env, count = running
    requirements = [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In",
                     "values": ["a100"]}]  # fmt: skip
    mig_pool = nodepool("gpu-mig", requirements, labels={MIG_CONFIG_LABEL: "all-1g.5gb"})
    await client.CustomObjectsApi(env.api).create_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools", mig_pool
    )
    await apply(env.api, claim("two-slices", {"name": "mig", "exactly": {
        "deviceClassName": "mig.nvidia.com", "count": 2,
        "selectors": [{"cel": {"expression":
            'device.attributes["gpu.nvidia.com"].profile == "1g.5gb"'}}]}}, template=True))  # fmt: skip
    await apply(env.api, dra_pod("sliced", template="two-slices", pool="gpu-mig"))
    await bind_all(env, count, ["sliced"])
    [bought] = count.created.values()
    assert bought["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] == "a100"


async def test_without_gpu_intent_a_dra_pod_stays_pending_and_nothing_is_bought(
    env: Env,
) -> None:
    count = NodeClaimCount(env.cluster)
    try:
        await apply(env.api, dra_pod("alone", template="one-l4"))

        async def refused() -> bool:
            events = await env.events("ml", "alone")
            return any("Dynamic Resource Allocation" in e["message"] for e in events)

        await eventually(refused, 10)  # Karpenter saw it, and skipped it
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        await karpenter.batches(1, within=10)  # a batch from now would have bought for it
        assert (await pod_json(env, "alone"))["spec"].get("nodeName") is None
        assert count.created == {}
    finally:
        await count.close()
