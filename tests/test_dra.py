"""intent.dra: GPU demand of DRA ResourceClaims in every served shape, CEL selectors read
against the catalog's devices, and infer's use of it (claims summed, overrides, warnings)."""

from __future__ import annotations

import contextlib
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intent.catalog import Catalog, default_catalog
from intent.contract import IntentError, Source
from intent.dra import (
    DEVICE_CLASSES,
    ClaimDemand,
    ClaimSource,
    PodClaim,
    claim_demand,
    claim_spec,
    pod_claims,
)
from intent.inference import infer

PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'
MEMORY = 'device.capacity["gpu.nvidia.com"].memory'
PROFILE = "device.attributes['gpu.nvidia.com'].profile"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return default_catalog()


def exactly(device_class: str = "gpu.nvidia.com", *selectors: str, name: str = "gpu",
            **fields: Any) -> dict[str, Any]:  # fmt: skip
    """A v1/v1beta2 request."""
    body: dict[str, Any] = {"deviceClassName": device_class, **fields}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def demand(catalog: Catalog, *requests: dict[str, Any], name: str = "c", **kw: Any) -> ClaimDemand:
    found = claim_demand(ClaimSource("gpu", name, spec(*requests)), catalog=catalog, **kw)
    assert found is not None
    return found


# --- request shapes ------------------------------------------------------------------------


def test_v1_exactly_one_gpu_of_any_model(catalog: Catalog) -> None:
    got = demand(catalog, exactly())
    assert (got.gpus, got.model, got.gpu_memory_mib, got.mig, got.vendor) == (1, None, None, False, "nvidia")
    assert got.warnings == ()
    assert "no selector read" in got.why


def test_count_two_is_two_whole_gpus(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA L4"', count=2))
    assert (got.gpus, got.model, got.gpu_id) == (2, "l4", "l4")


def test_v1beta1_fields_sit_on_the_request(catalog: Catalog) -> None:
    request = {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 4,
               "selectors": [{"cel": {"expression": f'{PRODUCT} == "Tesla T4"'}}]}  # fmt: skip
    got = demand(catalog, request)
    assert (got.gpus, got.model) == (4, "t4")


FIRST_AVAILABLE = {
    "name": "gpu",
    "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2,
         "selectors": [{"cel": {"expression": f'{PRODUCT} == "NVIDIA H100 80GB HBM3"'}}]},
        {"name": "small", "deviceClassName": "gpu.nvidia.com",
         "selectors": [{"cel": {"expression": f'{PRODUCT} == "NVIDIA L4"'}}]},
    ],
}  # fmt: skip


def test_first_available_takes_the_first_alternative_without_can_serve(catalog: Catalog) -> None:
    got = demand(catalog, FIRST_AVAILABLE)
    assert (got.gpus, got.model) == (2, "h100")
    assert got.warnings == ("dra: claim c request gpu: took alternative gpu/big (gpu.nvidia.com), the first of 2",)


def test_first_available_takes_the_first_alternative_can_serve_accepts(catalog: Catalog) -> None:
    asked: list[tuple[str | None, str]] = []

    def can_serve(model: str | None, vendor: str) -> bool:
        asked.append((model, vendor))
        return model == "l4"

    got = demand(catalog, FIRST_AVAILABLE, can_serve=can_serve)
    assert (got.gpus, got.model) == (1, "l4")
    assert ("h100", "nvidia") in asked
    assert got.warnings == (
        "dra: claim c request gpu: took alternative gpu/small (gpu.nvidia.com), the first of 2 that can be served",
    )


def test_first_available_none_servable_takes_the_first_and_says_so(catalog: Catalog) -> None:
    got = demand(catalog, FIRST_AVAILABLE, can_serve=lambda model, vendor: False)
    assert got.model == "h100"
    assert "none can be served; the first of 2" in got.warnings[-1]


def test_all_is_the_fewest_gpus_of_a_node_of_the_model(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA A100-SXM4-80GB"',
                                  allocationMode="All", count=99))  # fmt: skip
    assert catalog.fewest_per_instance("a100") == 1  # a2-ultragpu-1g
    assert (got.gpus, got.model) == (1, "a100")
    assert got.warnings == (
        "dra: claim c request gpu: All read as 1 GPU(s) (fewest per a100 node); set gpu-intent.io/gpus for more",
    )


def test_all_of_a_model_only_sold_by_eight_is_eight(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA H200"', allocationMode="All"))
    assert (got.gpus, got.model) == (8, "h200")  # p5e.48xlarge, a3-ultragpu-8g


def test_all_of_an_open_model_is_one_gpu(catalog: Catalog) -> None:
    got = demand(catalog, exactly(allocationMode="All"))
    assert got.gpus == 1
    assert "All read as 1 GPU(s) (fewest per node: model unknown)" in got.warnings[0]


def test_mig_with_a_known_profile_is_its_share_of_the_parent_gpu(catalog: Catalog) -> None:
    # 3g.20gb exists on the 40 GB A100 only (4 of its 8 memory slices); 3 x 3/7 of an A100
    got = demand(catalog, exactly("mig.nvidia.com", f'{PROFILE} == "3g.20gb"', count=3))
    assert (got.gpus, got.model, got.gpu_id, got.mig, got.gpu_memory_mib) == (
        Decimal(9) / 7, "a100", "a100-40gb", True, None)  # fmt: skip
    assert "MIG 3g.20gb: 3 x 3/7 of a GPU" in got.why


def test_mig_one_slice_is_a_seventh_of_a_gpu(catalog: Catalog) -> None:
    got = demand(catalog, exactly("mig.nvidia.com", f'{PROFILE} == "1g.5gb"'))
    assert (got.gpus, got.model, got.gpu_id) == (Decimal(1) / 7, "a100", "a100-40gb")


def test_mig_slices_constrained_to_one_parent_are_a_share_of_that_gpu(catalog: Catalog) -> None:
    """NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test4.yaml: 2 x 1g.5gb, a 2g.10gb
    and a 3g.20gb on one parent (matchAttribute parentUUID): the whole of one A100 40 GB."""
    spec = {"devices": {
        "requests": [
            {"name": f"mig-{p}-{i}", "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [
                {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{p}'"}}]}}
            for i, p in enumerate(("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"))
        ],
        "constraints": [{"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}],
    }}  # fmt: skip
    got = claim_demand(ClaimSource("mig", "mig", spec), catalog=catalog)
    assert got is not None
    assert (got.gpus, got.model, got.mig, got.warnings) == (1, "a100", True, ())
    assert "one parent GPU" in got.why
    four = {"devices": {"requests": [{"name": "m", "exactly": {
        "deviceClassName": "mig.nvidia.com", "count": 4,
        "selectors": [{"cel": {"expression": f'{PROFILE} == "1g.5gb"'}}]}}],
        "constraints": [{"matchAttribute": "gpu.nvidia.com/parentUUID"}]}}  # fmt: skip
    got = claim_demand(ClaimSource("m", "m", four), catalog=catalog)
    assert got is not None and (got.gpus, got.model) == (Decimal(4) / 7, "a100")


def test_mig_profile_on_several_models_leaves_the_model_open(catalog: Catalog) -> None:
    got = demand(catalog, exactly("mig.nvidia.com", f'{PROFILE} == "3g.40gb"', count=7))
    assert got.model is None  # A100 80 GB and H100
    assert got.gpus == 3  # 7 x 3 / 7
    assert got.warnings == ("dra: claim c request gpu: selectors match a100,h100; model left open",)


def test_mig_without_profile_is_one_gpu_per_device(catalog: Catalog) -> None:
    got = demand(catalog, exactly("mig.nvidia.com", count=2))
    assert (got.gpus, got.model, got.mig) == (2, None, True)
    assert "unknown profile: one whole GPU each" in got.why


def test_a_profile_selector_on_the_gpu_class_is_mig(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PROFILE} == "1g.6gb"', count=4))
    assert (got.gpus, got.model, got.mig) == (1, "a30", True)  # 4 x 1/4 of an A30


def test_mig_all_is_every_gpu_of_the_node_not_a_share(catalog: Catalog) -> None:
    got = demand(catalog, exactly("mig.nvidia.com", f'{PROFILE} == "1g.18gb"', allocationMode="All"))
    assert (got.gpus, got.model, got.mig) == (8, "h200", True)


# --- selectors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "model", "gpu_id", "memory"),
    [
        (f'{PRODUCT} == "NVIDIA L40S"', "l40s", "l40s", None),
        (f'{PRODUCT} in ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"]', "a100", "a100-80gb", None),
        (f'{PRODUCT}.startsWith("NVIDIA A100")', "a100", None, None),
        (f'{PRODUCT}.startsWith("NVIDIA H1")', "h100", "h100-80gb", None),
        (f'{PRODUCT}.startsWith("NVIDIA A100") && {MEMORY}.compareTo(quantity("80Gi")) >= 0',
         "a100", "a100-80gb", 81920),
        (f'{PRODUCT}.startsWith("NVIDIA A100") && {MEMORY}.isGreaterThan(quantity("40Gi"))',
         "a100", "a100-80gb", 81920),
        (f'{PRODUCT}.startsWith("NVIDIA A100") && {MEMORY}.compareTo(quantity("40Gi")) >= 0',
         "a100", None, 40960),
        ('device.attributes["gpu.nvidia.com"].architecture == "Ada Lovelace" && '
         f'{MEMORY}.isLessThan(quantity("24Gi"))', "l4", "l4", 22888),
        (f'device.driver == "gpu.nvidia.com" && {PRODUCT} == "Tesla V100-SXM2-32GB"', "v100", "v100-32gb", None),
    ],
)  # fmt: skip
def test_selector_forms_pin_model_and_memory(
    catalog: Catalog, expression: str, model: str, gpu_id: str | None, memory: int | None
) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", expression))
    assert (got.model, got.gpu_id, got.gpu_memory_mib) == (model, gpu_id, memory)
    assert got.warnings == ()


@pytest.mark.parametrize(
    ("expression", "gpu_id"),
    [
        (f"{PRODUCT}.startsWith('NVIDIA A100') && {MEMORY}.asInteger() >= 85899345920", "a100-80gb"),
        (f"{PRODUCT}.startsWith('NVIDIA A100') && {MEMORY}.sub(quantity('1Gi')).isLessThan(quantity('40Gi'))",
         "a100-40gb"),
        (f"{PRODUCT}.startsWith('NVIDIA A100') && {MEMORY}.add(quantity('1Gi')).compareTo(quantity('81Gi')) == 0",
         "a100-80gb"),
        (f"{PRODUCT}.startsWith('Tesla V100') && {MEMORY}.sign() == 1 && {MEMORY}.isInteger() "
         f"&& {MEMORY}.isGreaterThan(quantity('17179869184'))", "v100-32gb"),
    ],
)  # fmt: skip
def test_the_quantity_library(catalog: Catalog, expression: str, gpu_id: str) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", expression))
    assert (got.gpu_id, got.warnings) == (gpu_id, ())


def test_memory_alone_leaves_the_model_open_with_the_least_memory(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{MEMORY}.compareTo(quantity("40Gi")) >= 0'))
    assert got.model is None
    assert got.gpu_memory_mib == 40960  # the 40 GB A100, the least of the matches
    assert got.warnings[0].startswith("dra: claim c request gpu: selectors match l40s,l40,a40,a100,")


def test_can_serve_narrows_several_models(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"'),
                 can_serve=lambda model, vendor: model == "h200")  # fmt: skip
    assert (got.model, got.gpu_id, got.warnings) == ("h200", "h200-141gb", ())


def test_selectors_are_anded(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT}.startsWith("NVIDIA A100")',
                                  f'{MEMORY}.compareTo(quantity("80Gi")) >= 0'))  # fmt: skip
    assert (got.model, got.gpu_id, got.gpu_memory_mib) == ("a100", "a100-80gb", 81920)


def test_an_unknown_attribute_leaves_the_model_open_with_a_warning(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].brand == "Tesla"', count=2))
    assert (got.gpus, got.model) == (2, None)
    assert got.warnings == (
        "dra: claim c request gpu: selector 'attributes.brand == \"Tesla\"' does not evaluate; model left open",
    )


def test_a_syntax_error_leaves_the_model_open_with_a_warning(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT} == "L4" &&'))
    assert got.model is None
    assert got.warnings == (
        "dra: claim c request gpu: selector 'attributes.productName == \"L4\" &&' does not "
        "compile; model left open",
    )


def test_a_readable_selector_still_counts_beside_an_unreadable_one(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].uuid != ''",
                                  f'{PRODUCT} == "NVIDIA L4"'))  # fmt: skip
    assert got.model == "l4"
    assert len(got.warnings) == 1 and "does not evaluate" in got.warnings[0]


def test_a_product_the_catalog_lacks_matches_nothing(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA RTX PRO 6000"'))
    assert got.model is None
    assert got.warnings == ("dra: claim c request gpu: no catalog GPU matches the selectors; model left open",)


def test_non_gpu_classes_ask_for_nothing(catalog: Catalog) -> None:
    assert (
        claim_demand(ClaimSource("nic", "nic", spec(exactly("sriov.example.com"))), catalog=catalog)
        is None
    )
    assert claim_demand(ClaimSource("e", "empty", {}), catalog=catalog) is None
    mixed = demand(catalog, exactly("sriov.example.com", name="nic"), exactly(count=3))
    assert mixed.gpus == 3


def test_configured_classes_and_amd(catalog: Catalog) -> None:
    extra = {"big-gpus.example.com": ("nvidia", "gpu")}
    got = demand(catalog, exactly("big-gpus.example.com", f'{PRODUCT} == "NVIDIA B200"'), device_classes=extra)
    assert (got.gpus, got.model) == (1, "b200")
    amd = demand(catalog, exactly("gpu.amd.com", count=8))
    assert (amd.gpus, amd.vendor, amd.model) == (8, "amd", None)
    assert set(DEVICE_CLASSES) == {"gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com"}
    with pytest.raises(IntentError, match="device class 'x' must map to"):
        demand(catalog, exactly(), device_classes={"x": ("nvidia", "tpu")})


def test_requests_of_one_claim_are_summed_and_a_second_model_warned(catalog: Catalog) -> None:
    got = demand(catalog, exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA L4"', name="a", count=2),
                 exactly("gpu.nvidia.com", f'{PRODUCT} == "Tesla T4"', name="b"))  # fmt: skip
    assert (got.gpus, got.model) == (3, "l4")
    assert got.warnings == ("dra: claim c names l4 and t4; kept l4",)


# --- malformed shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claim", "field"),
    [
        ({"devices": []}, "spec.devices must be an object"),
        ({"devices": {"requests": {}}}, "spec.devices.requests must be a list"),
        (spec("gpu"), r"spec.devices.requests\[0\] must be an object"),
        (spec({"name": "gpu"}), r"spec.devices.requests\[0\] has none of exactly"),
        (spec({"name": "g", "exactly": {}}), r"requests\[0\].exactly.deviceClassName must be a non-empty"),
        (spec(exactly(count=0)), r"requests\[0\].exactly.count must be a whole number"),
        (spec(exactly(count="2")), r"requests\[0\].exactly.count must be a whole number"),
        (spec(exactly(count=True)), r"requests\[0\].exactly.count must be a whole number"),
        (spec(exactly(count=10_001)), r"requests\[0\].exactly.count must be a whole number"),
        (spec(exactly(allocationMode="Some")), r"requests\[0\].exactly.allocationMode must be"),
        (spec({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": {}}}),
         r"requests\[0\].exactly.selectors must be a list"),
        (spec({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                        "selectors": [{"cel": {"expression": 7}}]}}),
         r"requests\[0\].exactly.selectors\[0\].cel.expression must be a string"),
        (spec({"name": "g", "firstAvailable": []}), r"requests\[0\].firstAvailable must not be empty"),
        (spec({"name": "g", "firstAvailable": [{"name": "a"}]}),
         r"requests\[0\].firstAvailable\[0\].deviceClassName"),
        (spec(exactly(count=6000, name="a"), exactly(count=6000, name="b")), "12000 GPUs, more than 10000"),
    ],
)  # fmt: skip
def test_malformed_claims_raise_intent_error_naming_the_field(
    catalog: Catalog, claim: dict[str, Any], field: str
) -> None:
    with pytest.raises(IntentError, match=field):
        claim_demand(ClaimSource("gpu", "c", claim), catalog=catalog)


# --- the pod's claims -------------------------------------------------------------------------


def dra_pod(*entries: dict[str, Any], statuses: list[dict[str, Any]] | None = None,
            annotations: dict[str, str] | None = None, node_selector: dict[str, str] | None = None,
            resources: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations or {}},
        "spec": {
            "resourceClaims": list(entries),
            "containers": [{"name": "c", "image": "x", "resources": resources or {}}],
        },
    }
    if node_selector:
        pod["spec"]["nodeSelector"] = node_selector
    if statuses is not None:
        pod["status"] = {"resourceClaimStatuses": statuses}
    return pod


def test_pod_claims_without_statuses() -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimTemplateName": "one-l4"},
                  {"name": "shared", "resourceClaimName": "team-gpus"})  # fmt: skip
    assert pod_claims(pod) == (PodClaim("gpu", None, "one-l4"), PodClaim("shared", "team-gpus", None))
    assert pod_claims({"spec": {"containers": []}}) == ()


def test_pod_claims_with_statuses_name_the_created_claims() -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimTemplateName": "one-l4"},
                  {"name": "none", "resourceClaimTemplateName": "maybe"},
                  statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}, {"name": "none"}])  # fmt: skip
    assert pod_claims(pod) == (PodClaim("gpu", "p-gpu-x7k2q", "one-l4"), PodClaim("none", None, "maybe"))


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        ({"spec": {"resourceClaims": {}}}, "spec.resourceClaims must be a list"),
        ({"spec": {"resourceClaims": [{"resourceClaimName": "x"}]}}, r"spec.resourceClaims\[0\].name must be"),
        ({"spec": {"resourceClaims": [{"name": "a"}]}}, r"spec.resourceClaims\[0\] must set exactly one"),
        ({"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}]}},
         r"spec.resourceClaims\[0\] must set exactly one"),
        ({"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": 3}]}},
         r"spec.resourceClaims\[0\].resourceClaimName must be"),
        ({"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "x"}]}, "status": {"resourceClaimStatuses": [{}]}},
         r"status.resourceClaimStatuses\[0\].name must be"),
    ],
)  # fmt: skip
def test_malformed_pod_claims_raise_naming_the_field(pod: dict[str, Any], field: str) -> None:
    with pytest.raises(IntentError, match=field):
        pod_claims(pod)


def test_claim_spec_reads_claims_and_templates() -> None:
    inner = spec(exactly())
    assert claim_spec({"kind": "ResourceClaim", "spec": inner}) == inner
    assert claim_spec({"kind": "ResourceClaimTemplate", "spec": {"spec": inner}}) == inner
    assert claim_spec({"spec": {"spec": inner}}) == inner
    with pytest.raises(IntentError, match=r"spec\.spec must be an object"):
        claim_spec({"kind": "ResourceClaimTemplate", "spec": {"spec": []}})


# --- infer ------------------------------------------------------------------------------------


L4_CLAIM = spec(exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA L4"', count=2))
A100_CLAIM = spec(exactly("gpu.nvidia.com", f'{PRODUCT} == "NVIDIA A100-SXM4-80GB" && '
                                            f'{MEMORY}.compareTo(quantity("80Gi")) >= 0'))  # fmt: skip


def test_infer_takes_demand_model_and_tokens_from_the_claims(catalog: Catalog) -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimTemplateName": "two-l4"},
                  node_selector={"karpenter.sh/nodepool": "gpu"})  # fmt: skip
    got = infer(pod, catalog, claims=[ClaimSource("gpu", "two-l4", L4_CLAIM)])
    assert got.intent is not None
    assert (got.intent.gpus, got.intent.model, got.intent.pool, got.intent.model_memory_mib) == (
        Decimal(2), "l4", "gpu", 22888,
    )
    assert got.intent.source == (
        Source("dra", "two-l4"),
        Source("nodeSelector", "karpenter.sh/nodepool"),
    )
    assert got.warnings == ()
    reasons = {r.part: r for r in got.reasons}
    assert reasons["gpus"].source == "dra:two-l4"
    assert "request gpu asks for 2 x gpu.nvidia.com; selectors match l4" in reasons["gpus"].why
    assert reasons["model"].why == "claim two-l4 names l4 22 GB (nvidia)"


def test_infer_sums_several_claims_and_keeps_the_most_memory(catalog: Catalog) -> None:
    pod = dra_pod({"name": "a", "resourceClaimName": "big"}, {"name": "b", "resourceClaimName": "more"},
                  {"name": "nic", "resourceClaimName": "nic"})  # fmt: skip
    claims = [ClaimSource("a", "big", A100_CLAIM), ClaimSource("b", "more", spec(exactly(count=3))),
              ClaimSource("nic", "nic", spec(exactly("sriov.example.com")))]  # fmt: skip
    got = infer(pod, catalog, claims=claims)
    assert got.intent is not None
    assert (got.intent.gpus, got.intent.model, got.intent.gpu_memory_mib) == (Decimal(4), "a100", 81920)
    assert got.intent.source == (Source("dra", "big"), Source("dra", "more"))


def test_user_annotations_override_the_claims(catalog: Catalog) -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimName": "two-l4"},
                  annotations={"gpu-intent.io/gpus": "8", "gpu-intent.io/model": "l40s"})  # fmt: skip
    got = infer(pod, catalog, claims=[ClaimSource("gpu", "two-l4", L4_CLAIM)])
    assert got.intent is not None
    assert (got.intent.gpus, got.intent.model) == (Decimal(8), "l40s")
    assert "gpus: kept your 8 (gpu-intent.io/gpus), not 2 (dra two-l4)" in got.warnings
    assert "model: kept l40s (user model), not l4 (dra two-l4)" in got.warnings


def test_a_node_selector_model_wins_over_the_claims_by_the_existing_rule(catalog: Catalog) -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimName": "two-l4"},
                  node_selector={"karpenter.k8s.aws/instance-gpu-name": "t4"})  # fmt: skip
    got = infer(pod, catalog, claims=[ClaimSource("gpu", "two-l4", L4_CLAIM)])
    assert got.intent is not None and got.intent.model == "t4"
    assert Source("rule", "model-earlier-source") in got.intent.source
    assert "model: kept t4 (nodeSelector instance-gpu-name), not l4 (dra two-l4)" in got.warnings


def test_without_claims_a_dra_pod_gets_no_intent_and_a_warning(catalog: Catalog) -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimTemplateName": "two-l4"},
                  {"name": "x", "resourceClaimName": "shared"})  # fmt: skip
    got = infer(pod, catalog)
    assert got.intent is None
    assert got.warnings == (
        "dra: claim from template two-l4 could not be read; the controller records the intent from it",
        "dra: claim shared could not be read; the controller records the intent from it",
    )


def test_without_claims_other_sources_still_give_the_intent(catalog: Catalog) -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimName": "c"}, resources={"limits": {"nvidia.com/gpu": 1}})
    got = infer(pod, catalog)
    assert got.intent is not None and got.intent.gpus == 1
    assert got.warnings == ("dra: claim c could not be read; the controller records the intent from it",)
    # given, the claims win over the device-plugin request, with a warning
    given = infer(pod, catalog, claims=[ClaimSource("gpu", "c", L4_CLAIM)])
    assert given.intent is not None and given.intent.gpus == 2
    assert "gpus: kept 2 (dra c), not 1 (resources gpu)" in given.warnings


def test_a_claim_missing_from_those_given_is_warned(catalog: Catalog) -> None:
    pod = dra_pod({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimName": "two"})
    got = infer(pod, catalog, claims=[ClaimSource("a", "one", L4_CLAIM)])
    assert got.intent is not None and got.intent.gpus == 2
    assert got.warnings == ("dra: claim two could not be read; the controller records the intent from it",)


def test_claims_of_non_gpu_classes_give_no_intent(catalog: Catalog) -> None:
    pod = dra_pod({"name": "nic", "resourceClaimName": "nic"})
    got = infer(
        pod, catalog, claims=[ClaimSource("nic", "nic", spec(exactly("sriov.example.com")))]
    )
    assert got == type(got)(None, (), ())


def test_infer_passes_can_serve_and_classes_to_the_claims(catalog: Catalog) -> None:
    pod = dra_pod({"name": "gpu", "resourceClaimName": "fa"}, {"name": "x", "resourceClaimName": "custom"})
    claims = [ClaimSource("gpu", "fa", spec(FIRST_AVAILABLE)),
              ClaimSource("x", "custom", spec(exactly("vgpu.example.com", count=2)))]  # fmt: skip
    got = infer(pod, catalog, claims=claims, can_serve=lambda model, vendor: model in (None, "l4"),
                device_classes={"vgpu.example.com": ("nvidia", "gpu")})  # fmt: skip
    assert got.intent is not None
    assert (got.intent.gpus, got.intent.model) == (Decimal(3), "l4")
    assert got.intent.source == (Source("dra", "fa"), Source("dra", "custom"))


# --- fuzz ------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 20_000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
EXPRESSIONS = st.sampled_from([
    f'{PRODUCT} == "NVIDIA L4"', f'{MEMORY}.compareTo(quantity("40Gi")) >= 0', f"{PROFILE} == '1g.5gb'",
    'quantity("x") == 1', f'{MEMORY}.compareTo(quantity("1e999999")) >= 0', "1 / 0 == 1", "(((",
    f"{MEMORY}.asInteger() > 5", f'{MEMORY}.add(quantity("1Gi")).isLessThan(quantity("2Gi"))',
]) | st.text(max_size=30)  # fmt: skip
BODY = st.fixed_dictionaries(
    {},
    optional={
        "deviceClassName": st.sampled_from([*DEVICE_CLASSES, "other.example.com"]) | JSON,
        "count": st.integers(-1, 12_000) | JSON,
        "allocationMode": st.sampled_from(["ExactCount", "All", "Some"]) | JSON,
        "selectors": st.lists(st.fixed_dictionaries({"cel": st.fixed_dictionaries({"expression": EXPRESSIONS})})
                              | JSON, max_size=2) | JSON,
    },
)  # fmt: skip
REQUEST = (
    st.builds(lambda body, name: {"name": name, "exactly": body}, BODY, JSON)
    | st.builds(lambda subs: {"name": "g", "firstAvailable": subs}, st.lists(BODY, max_size=3) | JSON)
    | BODY
    | JSON
)
CLAIM = st.builds(lambda requests: {"devices": {"requests": requests}}, st.lists(REQUEST, max_size=3) | JSON) | JSON


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(claim=CLAIM, name=JSON, serve=st.none() | st.booleans())
def test_claim_demand_raises_nothing_but_intent_error(claim: Any, name: Any, serve: bool | None) -> None:
    catalog = default_catalog()
    can_serve = None if serve is None else (lambda model, vendor: serve)
    try:
        found = claim_demand(ClaimSource("e", name, claim), catalog=catalog, can_serve=can_serve)
    except IntentError:
        return
    if found is not None:
        assert 1 <= found.gpus <= 10_000
        assert all(len(w) <= 108 for w in found.warnings)
        json.dumps([found.model, found.gpu_memory_mib, found.why])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(claim=CLAIM, entries=st.lists(st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]),
                                                           "resourceClaimName": st.sampled_from(["x", "y"])}),
                                     max_size=2) | JSON)  # fmt: skip
def test_infer_with_claims_raises_nothing_but_intent_error(claim: Any, entries: Any) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"resourceClaims": entries, "containers": [{"name": "c"}]}}
    with contextlib.suppress(IntentError):
        infer(
            pod,
            default_catalog(),
            claims=[ClaimSource("a", "x", claim), ClaimSource("b", "y", claim)],
        )
