"""A NodeClaim whose node offers its GPUs through a sharing layer's device plugin (Volcano
vGPU, gpushare, MIG slices) never turns Ready in Karpenter: the trigger asked for
``nvidia.com/gpu``, which such a node never registers, so ``Initialized`` stays Unknown
(``ResourceNotRegistered``). The controller counts it usable once it is registered and
its node advertises the layer's resources (`controller.nodes.NodeClaimInfo.ready`)."""

from __future__ import annotations

from typing import Any

from controller_fixtures import nodeclaim

from controller.cache import InformerCache, Kind
from controller.nodes import advertised, parse_node, slim_node


def node(name: str, allocatable: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"karpenter.sh/nodepool": "p"},
        },
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", **allocatable},
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure"}],
        },
    }


def test_what_a_sharing_device_plugin_advertises_is_read_and_nothing_else() -> None:
    assert advertised({"nvidia.com/mig-1g.5gb": "7", "nvidia.com/gpu": "0"}) == (
        ("nvidia.com/mig-1g.5gb", "7"),
    )
    assert advertised(
        {"volcano.sh/vgpu-number": "40", "volcano.sh/vgpu-memory": "89424", "cpu": "8"}
    ) == (("volcano.sh/vgpu-memory", "89424"), ("volcano.sh/vgpu-number", "40"))
    assert advertised({"aliyun.com/gpu-mem": "60", "aliyun.com/gpu-count": "4"}) == (
        ("aliyun.com/gpu-count", "4"),
        ("aliyun.com/gpu-mem", "60"),
    )
    # Zero, unparsable and plain GPUs are not a sharing plugin's offer; Intel is refused.
    assert advertised({"volcano.sh/vgpu-number": "0", "nvidia.com/gpu": "4"}) == ()
    assert advertised({"aliyun.com/gpu-mem": "lots", "gpu.intel.com/i915": "1"}) == ()


def test_the_node_cache_keeps_only_the_advertised_sharing_resources() -> None:
    slim = slim_node(node("ip-1", {"nvidia.com/mig-1g.5gb": "14", "nvidia.com/gpu": "0"}))
    assert slim["status"]["allocatable"] == {"nvidia.com/mig-1g.5gb": "14"}
    assert [c["type"] for c in slim["status"]["conditions"]] == ["Ready"]
    assert parse_node(slim).advertised == (("nvidia.com/mig-1g.5gb", "14"),)
    assert "allocatable" not in slim_node(node("ip-2", {"nvidia.com/gpu": "1"}))["status"]


def registered(name: str, node_name: str) -> dict[str, Any]:
    raw = nodeclaim(name, "p", node=node_name, launched=True)
    raw["metadata"]["resourceVersion"] = "3"
    raw["status"]["conditions"] += [
        {"type": "Registered", "status": "True"},
        {"type": "Initialized", "status": "Unknown", "reason": "ResourceNotRegistered"},
    ]
    return raw


def test_a_registered_nodeclaim_is_usable_once_its_node_advertises_the_layer() -> None:
    cache = InformerCache(lambda: 0.0)
    cache.apply(Kind.NODECLAIMS, "ADDED", registered("nc-vgpu", "ip-1"))
    cache.apply(Kind.NODECLAIMS, "ADDED", registered("nc-plain", "ip-2"))
    cache.apply(Kind.NODES, "ADDED", node("ip-2", {"nvidia.com/gpu": "0"}))
    claims = cache.nodeclaims()
    assert not claims["nc-vgpu"].ready and not claims["nc-plain"].ready

    cache.apply(Kind.NODES, "ADDED", node("ip-1", {"volcano.sh/vgpu-number": "10"}))
    claims = cache.nodeclaims()
    assert claims["nc-vgpu"].ready and claims["nc-vgpu"].plugin_ready
    assert not claims["nc-vgpu"].dra_ready
    assert claims["nc-vgpu"].advertised == (("volcano.sh/vgpu-number", "10"),)
    assert not claims["nc-plain"].ready  # nothing advertised: still waiting


def test_an_unregistered_nodeclaim_is_not_usable_whatever_its_node_shows() -> None:
    cache = InformerCache(lambda: 0.0)
    raw = nodeclaim("nc-1", "p", node="ip-1", launched=True)
    raw["metadata"]["resourceVersion"] = "3"
    cache.apply(Kind.NODECLAIMS, "ADDED", raw)
    cache.apply(Kind.NODES, "ADDED", node("ip-1", {"aliyun.com/gpu-mem": "15"}))
    claim = cache.nodeclaims()["nc-1"]
    assert claim.advertised and not claim.ready


def test_a_plugin_ready_nodeclaim_tells_what_its_node_advertises() -> None:
    from controller.reasons import NodeReady, Scheduled

    cache = InformerCache(lambda: 0.0)
    cache.apply(Kind.NODECLAIMS, "ADDED", registered("nc-mig", "ip-1"))
    cache.apply(Kind.NODES, "ADDED", node("ip-1", {"nvidia.com/mig-1g.5gb": "56"}))
    claim = cache.nodeclaims()["nc-mig"]
    assert NodeReady.of(claim, "t-1").advertised == (("nvidia.com/mig-1g.5gb", "56"),)
    assert Scheduled.of("ip-1", "nc-mig", claim).advertised == claim.advertised
    assert NodeReady.of(claim, "t-1").dra_devices is None
