"""The GPU catalog: spellings, memory variants, instance types, and overrides from a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from intent.catalog import (
    CatalogError,
    active_catalog,
    default_catalog,
    load_catalog,
    use_catalog,
)
from intent.inference import infer_intent


@pytest.mark.parametrize(
    ("raw", "gpu_id"),
    [
        ("NVIDIA-A100-SXM4-80GB", "a100-80gb"),
        ("nvidia-a100-80gb", "a100-80gb"),
        ("A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA-A100-SXM4-40GB", "a100-40gb"),
        ("nvidia-tesla-a100", "a100-40gb"),
        ("NVIDIA-H100-80GB-HBM3", "h100-80gb"),
        ("Tesla V100-SXM2-32GB", "v100-32gb"),
        ("Tesla-V100-SXM2-16GB", "v100-16gb"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("AMD_Instinct_MI300X", "mi300x"),
        ("Tesla-T4", "t4"),
    ],
)
def test_spellings_name_one_variant(raw: str, gpu_id: str) -> None:
    found = default_catalog().lookup(raw)
    assert found is not None and found.gpu is not None
    assert found.gpu.id == gpu_id


def test_a_model_with_several_variants_names_none_of_them() -> None:
    found = default_catalog().lookup("A100")
    assert found is not None
    assert (found.model, found.gpu) == ("a100", None)


def test_mig_slice_is_a_slice_of_the_40gb_a100() -> None:
    found = default_catalog().lookup("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
    assert found is not None and found.gpu is not None
    assert (found.gpu.id, found.mig, found.mig_slices, found.gpu.mig_slices) == (
        "a100-40gb", "1g.5gb", 1, 7
    )


def test_a10_is_not_found_inside_a100() -> None:
    found = default_catalog().lookup("NVIDIA-A10")
    assert found is not None and found.model == "a10"


@pytest.mark.parametrize("raw", ["${GPU_TYPE}", "", "cpu", "nvidia"])
def test_unknown_spellings_name_nothing(raw: str) -> None:
    assert default_catalog().lookup(raw) is None


@pytest.mark.parametrize(
    ("raw", "provider", "count", "gpu_id"),
    [
        ("p4d.24xlarge", "aws", 8, "a100-40gb"),
        ("p4de.24xlarge", "aws", 8, "a100-80gb"),
        ("g6e.2xlarge", "aws", 1, "l40s"),
        ("g6e.metal", "aws", None, "l40s"),  # not listed: its family
        ("Standard_ND96isr_MI300X_v5", "azure", 8, "mi300x"),
        ("standard_nc24ads_a100_v4", "azure", 1, "a100-80gb"),
        ("a2-ultragpu-1g", "gcp", 1, "a100-80gb"),
        ("g2-standard-24", "gcp", 2, "l4"),
        ("GN7.2XLARGE32", "tke", None, "t4"),
    ],
)
def test_instance_types(raw: str, provider: str, count: int | None, gpu_id: str) -> None:
    found = default_catalog().instance_type(raw)
    assert found is not None
    assert (found.provider, found.count, found.gpu.id) == (provider, count, gpu_id)


def test_cpu_instance_type_has_no_gpu() -> None:
    assert default_catalog().instance_type("m5.large") is None


def test_override_adds_and_replaces_entries(tmp_path: Path) -> None:
    override = tmp_path / "catalog.yaml"
    override.write_text(
        "gpus:\n"
        "  rtx-pro-6000:\n"
        "    model: rtx-pro-6000\n"
        "    vendor: nvidia\n"
        "    memory_mib: 98304\n"
        "    aliases: [NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition]\n"
        "  t4:\n"
        "    model: t4\n"
        "    vendor: nvidia\n"
        "    memory_mib: 15360\n"
        "instance_types:\n"
        "  aws:\n"
        "    g7e.2xlarge: [1, rtx-pro-6000]\n"
        "families:\n"
        "  tke:\n"
        "    GN7: l4\n"
    )
    catalog = load_catalog(override)
    found = catalog.lookup("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition")
    assert found is not None and found.model == "rtx-pro-6000"
    t4 = catalog.lookup("Tesla-T4")  # the alias went with the replaced entry
    assert t4 is not None and t4.gpu is not None and t4.gpu.memory_mib == 15360
    assert catalog.instance_type("g7e.2xlarge") is not None
    tke = catalog.instance_type("GN7.2XLARGE32")
    assert tke is not None and tke.gpu.model == "l4"
    assert catalog.instance_type("p4d.24xlarge") is not None  # the rest is still there
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "nodeSelector": {"node.kubernetes.io/instance-type": "g7e.2xlarge"}}}  # fmt: skip
    intent = infer_intent(pod, catalog)
    assert intent is not None and intent.model == "rtx-pro-6000"
    assert infer_intent(pod) is not None and infer_intent(pod).model is None  # type: ignore[union-attr]


def test_use_catalog_sets_what_inference_reads(tmp_path: Path) -> None:
    override = tmp_path / "c.yaml"
    override.write_text("families:\n  aws:\n    g6e: a100-80gb\n")
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "nodeSelector": {"karpenter.k8s.aws/instance-family": "g6e"}}}  # fmt: skip
    use_catalog(load_catalog(override))
    try:
        intent = infer_intent(pod)
        assert intent is not None and intent.model == "a100"
    finally:
        use_catalog(None)
    assert active_catalog() is default_catalog()
    intent = infer_intent(pod)
    assert intent is not None and intent.model == "l40s"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("gpus: [1]\n", "gpus: must be a mapping"),
        ("gpus:\n  x: {model: X, vendor: nvidia, memory_mib: 1}\n", r"gpus.x.model: must be a lowercase"),
        ("gpus:\n  x: {model: x, vendor: intel, memory_mib: 1}\n", r"gpus.x.vendor"),
        ("gpus:\n  x: {model: x, vendor: nvidia, memory_mib: -5}\n", r"gpus.x.memory_mib"),
        ("gpus:\n  x: {model: x, vendor: nvidia, memory_mib: 1, colour: red}\n", "unknown fields colour"),
        ("instance_types:\n  aws:\n    a.b: [2, nope]\n", "names GPU 'nope'"),
        ("instance_types:\n  aws:\n    a.b: 2\n", r"must be \[GPU count, GPU id\]"),
        ("gpu: {}\n", "unknown sections gpu"),
        ("gpus: {\n", "not YAML"),
    ],
)
def test_malformed_override_names_file_and_field(tmp_path: Path, text: str, match: str) -> None:
    override = tmp_path / "bad.yaml"
    override.write_text(text)
    with pytest.raises(CatalogError, match=match) as caught:
        load_catalog(override)
    assert str(override) in str(caught.value)


def test_missing_override_file_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "absent.yaml")


def test_lookups_are_remembered() -> None:
    catalog = load_catalog()
    first = catalog.lookup("NVIDIA-L40S")
    assert catalog.lookup("nvidia-l40s") is first
