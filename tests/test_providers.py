"""Provider profiles (`intent.providers`): how each Karpenter provider's labels select a
GPU model and memory, in triggers, pool resolution and the sim's Karpenter."""

from __future__ import annotations

import json
from typing import Any

import pytest
from controller_fixtures import gpu_pod, nodepool

from controller.capacity import claim_hosts
from controller.model import GroupKey, PendingPod, PodRef, parse_pending_pod
from controller.nodes import parse_nodeclaim, parse_nodepool
from controller.plan import PlanConfig
from controller.pools import resolve_pool
from controller.triggers import TriggerSettings, trigger_pod
from gpu_intent import cli
from gpu_intent.demo import default_examples
from intent.providers import (
    AWS,
    AZURE,
    GCP,
    PROFILES,
    TKE,
    ProviderProfile,
    model_requirements,
    pool_admits_model,
    profile,
)
from sim.karpenter import Snapshot, solve
from sim.providers import AZURE_CATALOG, CATALOGS, GCP_CATALOG, TKE_CATALOG

FAMILY = "karpenter.k8s.tke/instance-family"
AZURE_NAME = "karpenter.azure.com/sku-gpu-name"
GCP_NAME = "karpenter.k8s.gcp/instance-gpu-name"

# --- The profiles ------------------------------------------------------------------------


def test_each_profile_selects_a_t4_by_its_own_label_and_value() -> None:
    assert model_requirements(AWS, "t4") == (
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["t4"]},
    )
    assert model_requirements(AZURE, "t4") == (
        {"key": AZURE_NAME, "operator": "In", "values": ["T4"]},
    )
    assert model_requirements(GCP, "t4") == (
        {"key": GCP_NAME, "operator": "In", "values": ["nvidia-tesla-t4"]},
    )
    (family,) = model_requirements(TKE, "t4")
    assert family["key"] == FAMILY and "GN7" in family["values"]
    assert TKE.gpu_name_label is None and TKE.model_label == FAMILY


def test_a_memory_variant_is_a_memory_label_or_the_values_whose_gpu_has_it() -> None:
    """The 80 GB A100: AWS's memory label; GCP's accelerator value; Azure's VM sizes."""
    assert model_requirements(AWS, "a100", 81920)[1] == {
        "key": "karpenter.k8s.aws/instance-gpu-memory",
        "operator": "Gt",
        "values": ["81919"],
    }
    assert model_requirements(GCP, "a100", 81920) == (
        {"key": GCP_NAME, "operator": "In", "values": ["nvidia-a100-80gb"]},
    )
    assert model_requirements(GCP, "a100") == (
        {"key": GCP_NAME, "operator": "In", "values": ["nvidia-a100-80gb", "nvidia-tesla-a100"]},
    )
    name, sizes = model_requirements(AZURE, "a100", 81920)
    assert name == {"key": AZURE_NAME, "operator": "In", "values": ["A100"]}
    assert sizes["key"] == "node.kubernetes.io/instance-type"
    assert "Standard_NC24ads_A100_v4" in sizes["values"]
    assert "Standard_ND96asr_v4" not in sizes["values"]  # the 40 GB one


def test_a_memory_no_variant_has_narrows_nothing() -> None:
    """TKE sells no 80 GB A100 the table knows: the model alone is selected."""
    assert model_requirements(TKE, "a100", 81920) == model_requirements(TKE, "a100")
    assert model_requirements(TKE, "a100") == (
        {"key": FAMILY, "operator": "In", "values": ["GT4"]},
    )


def test_a_memory_without_a_model_selects_the_variants_with_that_much() -> None:
    (tke,) = model_requirements(TKE, None, 30000)
    assert tke["key"] == FAMILY and set(tke["values"]) == {"GN10X", "GN10Xp", "GT4"}
    (azure,) = model_requirements(AZURE, None, 90000)
    assert azure["values"] == [
        "Standard_NC40ads_H100_v5",
        "Standard_NC80adis_H100_v5",
        "Standard_ND96isr_H200_v5",
    ]
    assert model_requirements(AWS, None, 0) == ()


def test_a_name_two_models_share_is_told_apart_by_their_variants() -> None:
    """Azure names the H100 NVL sizes and the 80 GB H100 sizes both ``H100``."""
    nvl = model_requirements(AZURE, "h100-nvl")
    assert nvl[0] == {"key": AZURE_NAME, "operator": "In", "values": ["H100"]}
    assert "Standard_NC40ads_H100_v5" in nvl[1]["values"]
    assert model_requirements(AZURE, "h100")[1]["values"] == ["Standard_ND96isr_H100_v5"]
    assert model_requirements(AZURE, "t4", 20000) == model_requirements(AZURE, "t4")


def test_overriding_the_name_label_spells_the_canonical_model() -> None:
    custom = TKE.with_labels("example.com/gpu", None)
    assert model_requirements(custom, "t4") == (
        {"key": "example.com/gpu", "operator": "In", "values": ["t4"]},
    )


def test_profiles_by_name() -> None:
    assert set(PROFILES) == {"aws", "azure", "gcp", "tke"}
    assert profile("tke") is TKE
    with pytest.raises(ValueError, match="unknown provider 'oci'"):
        profile("oci")


# --- Triggers ----------------------------------------------------------------------------


def _pool(prof: ProviderProfile, name: str, values: list[str]) -> dict[str, Any]:
    obj = nodepool(name, models=values, label=prof.model_label)
    obj["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": prof.node_class_group,
        "kind": prof.node_class_kind,
        "name": "default",
    }
    return obj


def _trigger(prof: ProviderProfile, group: GroupKey, pool: dict[str, Any]) -> dict[str, Any]:
    settings = TriggerSettings(provider=prof)
    serves = [PodRef("ml", "p", "uid-p", "1")]
    return trigger_pod(group, 1, parse_nodepool(pool), serves, settings, name="gi-x")


def _expressions(trigger: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = trigger["spec"]["affinity"]["nodeAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return list(term["matchExpressions"])


def test_a_t4_trigger_on_tke_selects_t4_families_and_no_gpu_name_label() -> None:
    pool = _pool(TKE, "gpu", ["GN7", "GT4"])
    trigger = _trigger(TKE, GroupKey("gpu", "t4"), pool)
    assert trigger["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu"}
    (family,) = [e for e in _expressions(trigger) if e["key"] == FAMILY]
    assert family["operator"] == "In" and "GN7" in family["values"]
    assert not any("gpu-name" in e["key"] for e in _expressions(trigger))


def test_a_t4_trigger_on_azure_selects_its_sku_gpu_name() -> None:
    trigger = _trigger(AZURE, GroupKey("gpu", "t4"), _pool(AZURE, "gpu", ["T4"]))
    assert trigger["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu", AZURE_NAME: "T4"}


def test_an_aws_trigger_is_as_before() -> None:
    trigger = _trigger(AWS, GroupKey("gpu", None, (), 20000), _pool(AWS, "gpu", ["l4"]))
    assert _expressions(trigger)[-1] == {
        "key": "karpenter.k8s.aws/instance-gpu-memory",
        "operator": "Gt",
        "values": ["19999"],
    }


# --- Pool resolution ---------------------------------------------------------------------


def _resolve(prof: ProviderProfile, model: str, pools: list[dict[str, Any]]) -> str | None:
    infos = {p["metadata"]["name"]: parse_nodepool(p) for p in pools}
    pod = parse_pending_pod(gpu_pod("p", "1", model=model), set())
    assert isinstance(pod, PendingPod)
    config = PlanConfig(trigger=TriggerSettings(provider=prof))
    chosen, _ = resolve_pool(pod, infos, config)
    return chosen.name if chosen else None


@pytest.mark.parametrize(
    ("prof", "t4", "a100"),
    [
        (AWS, ["t4"], ["a100"]),
        (AZURE, ["T4"], ["A100"]),
        (GCP, ["nvidia-tesla-t4"], ["nvidia-tesla-a100", "nvidia-a100-80gb"]),
        (TKE, ["GN7"], ["GT4"]),
    ],
)
def test_pool_resolution_admits_models_as_the_provider_spells_them(
    prof: ProviderProfile, t4: list[str], a100: list[str]
) -> None:
    pools = [_pool(prof, "small", t4), _pool(prof, "large", a100)]
    assert _resolve(prof, "t4", pools) == "small"
    assert _resolve(prof, "a100", pools) == "large"
    assert _resolve(prof, "h200", pools) is None


def test_a_tke_pool_admits_a_t4_when_its_families_allow_one() -> None:
    cpu = parse_nodepool(_pool(TKE, "cpu", ["S5", "SA2"]))
    gpu = parse_nodepool(_pool(TKE, "gpu", ["GN7", "PNV4"]))
    assert not pool_admits_model(TKE, cpu.admits, "t4")
    assert pool_admits_model(TKE, gpu.admits, "t4")
    assert pool_admits_model(TKE, gpu.admits, "a10")
    assert not pool_admits_model(TKE, gpu.admits, "a100")


def test_a_tke_nodeclaim_hosts_the_pods_of_its_family_model() -> None:
    claim = parse_nodeclaim(
        {
            "metadata": {
                "name": "c",
                "labels": {"karpenter.sh/nodepool": "gpu", FAMILY: "GN7"},
            },
            "spec": {"requirements": []},
        }
    )
    pod = parse_pending_pod(gpu_pod("p", "1", model="t4"), set())
    assert isinstance(pod, PendingPod)
    assert claim_hosts(claim, GroupKey("gpu", "t4"), pod, TKE)
    assert not claim_hosts(claim, GroupKey("gpu", "a100"), pod, TKE)


# --- The sim's clouds --------------------------------------------------------------------


def test_each_sim_cloud_labels_its_types_as_its_provider() -> None:
    assert all(FAMILY in it.labels() for it in TKE_CATALOG)
    assert not any("gpu" in key for it in TKE_CATALOG for key in it.labels())
    t4 = next(it for it in AZURE_CATALOG if it.gpu_name == "t4")
    assert t4.labels()[AZURE_NAME] == "T4"
    assert not any("karpenter.k8s.aws" in key for it in GCP_CATALOG for key in it.labels())
    for name, catalog in CATALOGS.items():
        assert all(it.provider == name for it in catalog)


@pytest.mark.parametrize(("prof", "bought"), [(TKE, "GN7.2XLARGE32"), (AZURE, None)])
def test_the_sim_karpenter_buys_the_provider_type_a_t4_trigger_selects(
    prof: ProviderProfile, bought: str | None
) -> None:
    """A T4 trigger built for the provider, solved by the sim's Karpenter over that
    provider's catalog: on TKE the cheapest GN7."""
    values = {"tke": ["GN7", "GT4"], "azure": ["T4", "A100"]}[prof.name]
    pool = _pool(prof, "gpu", values)
    trigger = _trigger(prof, GroupKey("gpu", "t4"), pool)
    trigger["metadata"]["uid"] = "uid-trigger"
    trigger["spec"].pop("schedulerName")
    trigger["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    catalog = CATALOGS[prof.name]
    results = solve(Snapshot([trigger], [pool], catalog=catalog))
    assert not results.errors
    (claim,) = results.new_nodeclaims
    cheapest = claim.instance_types[0].name
    assert cheapest == (bought or "Standard_NC4as_T4_v3")
    assert all(it.gpu_name == "t4" for it in claim.instance_types)


# --- The demo on each provider's NodePools ------------------------------------------------


def test_the_demo_on_tke_ends_ok_with_no_gpu_label_anywhere(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``gpu-intent demo --provider tke``: examples/providers/tke (NodePools selecting
    instance families, no GPU label) on the sim's TKE cloud; every pod Scheduled or
    Native, nothing beyond the need, a GN7 for the T4."""
    code = cli.main(["demo", "--provider", "tke", "--output", "json", "--timeout", "120"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert code == 0 and summary["ok"], summary["problems"]
    assert {p["phase"] for p in summary["pods"]} <= {"Scheduled", "Native"}
    assert summary["gpusLowerBound"] == {"a10": 1, "a100": 1, "t4": 1, "v100": 1}
    assert "GN7.2XLARGE32" in captured.err and "(provider tke," in captured.err
    nodepools = (default_examples("tke") / "10-nodepools.yaml").read_text()
    assert "aws" not in nodepools and "gpu-name" not in nodepools
