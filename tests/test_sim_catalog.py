"""The simulated cloud's instance types (sim.catalog)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sim.catalog import CATALOG, by_name, format_quantity, format_resources
from sim.requirements import Requirement, Requirements


@pytest.mark.parametrize(
    ("name", "cpu", "memory", "pods", "gpus"),
    [  # aws/karpenter-provider-aws website/content/en/docs/reference/instance-types.md
        ("m5.large", "1930m", "6903Mi", "29", None),
        ("g4dn.xlarge", "3920m", "14481Mi", "29", "1"),
        ("g4dn.12xlarge", "47810m", "178933Mi", "234", "4"),
        ("g5.xlarge", "3920m", "14162Mi", "58", "1"),
        ("g5.12xlarge", "47810m", "173400Mi", "737", "4"),
        ("g6.xlarge", "3920m", "14162Mi", "58", "1"),
        ("g6.12xlarge", "47810m", "178933Mi", "234", "4"),
        ("g6e.xlarge", "3920m", "29317Mi", "58", "1"),
        ("p4d.24xlarge", "95690m", "1082712Mi", "737", "8"),
        ("p4de.24xlarge", "95690m", "1082712Mi", "737", "8"),
        ("p5.48xlarge", "191450m", "1938410Mi", "100", "8"),
    ],
)
def test_allocatable_matches_the_aws_provider_reference(
    name: str, cpu: str, memory: str, pods: str, gpus: str | None
) -> None:
    allocatable = format_resources(by_name(name).allocatable())
    expected = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "17Gi"}
    if gpus:
        expected["nvidia.com/gpu"] = gpus
    assert allocatable == expected


def test_catalog_holds_the_gpu_families_and_one_cpu_type() -> None:
    assert [it.name for it in CATALOG] == [
        "m5.large",
        "g4dn.xlarge",
        "g4dn.12xlarge",
        "g5.xlarge",
        "g5.12xlarge",
        "g6.xlarge",
        "g6.12xlarge",
        "g6e.xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
    ]
    assert {it.gpu_name for it in CATALOG} == {"", "t4", "a10g", "l4", "l40s", "a100", "h100"}
    with pytest.raises(KeyError):
        by_name("x1.huge")


def test_gpu_type_labels_use_aws_spelling() -> None:
    labels = by_name("p4d.24xlarge").labels()
    assert labels["karpenter.k8s.aws/instance-gpu-name"] == "a100"
    assert labels["karpenter.k8s.aws/instance-gpu-manufacturer"] == "nvidia"
    assert labels["karpenter.k8s.aws/instance-gpu-count"] == "8"
    assert labels["karpenter.k8s.aws/instance-gpu-memory"] == "40960"
    assert labels["karpenter.k8s.aws/instance-family"] == "p4d"
    assert labels["karpenter.k8s.aws/instance-category"] == "p"
    assert labels["karpenter.k8s.aws/instance-cpu"] == "96"
    assert labels["karpenter.k8s.aws/instance-memory"] == "1179648"
    assert labels["node.kubernetes.io/instance-type"] == "p4d.24xlarge"
    assert (labels["kubernetes.io/arch"], labels["kubernetes.io/os"]) == ("amd64", "linux")


def test_both_a100_variants_share_the_name_and_differ_in_memory_per_gpu() -> None:
    """instance-types.md: p4d.24xlarge and p4de.24xlarge are both ``a100``, 8 GPUs, with
    ``instance-gpu-memory`` 40960 and 81920 (MiB per GPU); the 80 GB one costs more."""
    small, large = by_name("p4d.24xlarge"), by_name("p4de.24xlarge")
    for it, mib in ((small, "40960"), (large, "81920")):
        labels = it.labels()
        assert labels["karpenter.k8s.aws/instance-gpu-name"] == "a100"
        assert labels["karpenter.k8s.aws/instance-gpu-count"] == "8"
        assert labels["karpenter.k8s.aws/instance-gpu-memory"] == mib
    assert large.gfd_labels()["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert small.price < large.price


def test_cpu_type_requirements_exclude_gpu_selectors() -> None:
    t4 = Requirements([Requirement.new("karpenter.k8s.aws/instance-gpu-name", "In", ["t4"])])
    assert by_name("m5.large").requirements().intersects(t4) is not None
    assert by_name("g4dn.xlarge").requirements().intersects(t4) is None
    assert "nvidia.com/gpu" not in by_name("m5.large").capacity()


def test_gfd_labels_describe_the_gpu() -> None:
    assert by_name("g4dn.12xlarge").gfd_labels() == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.product": "Tesla-T4",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.family": "turing",
        "nvidia.com/gpu.compute.major": "7",
        "nvidia.com/gpu.compute.minor": "5",
        "nvidia.com/gpu.replicas": "1",
    }
    assert by_name("p5.48xlarge").gfd_labels()["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert by_name("m5.large").gfd_labels() == {}


def test_prices_order_the_families() -> None:
    price = {it.name: it.price for it in CATALOG}
    assert price["g4dn.xlarge"] < price["g6.xlarge"] < price["g5.xlarge"] < price["g6e.xlarge"]
    assert (
        price["g4dn.12xlarge"] < price["g5.12xlarge"] < price["p4d.24xlarge"] < price["p5.48xlarge"]
    )


@pytest.mark.parametrize(
    ("resource", "value", "text"),
    [
        ("cpu", Decimal(4), "4"),
        ("cpu", Decimal("3.92"), "3920m"),
        ("memory", Decimal(14481 * 1024 * 1024), "14481Mi"),
        ("memory", Decimal(16 * 1024**3), "16Gi"),
        ("memory", Decimal(10**9), "1G"),
        ("memory", Decimal(1023), "1023"),
        ("nvidia.com/gpu", Decimal(8), "8"),
        ("nvidia.com/gpumem", Decimal(4000), "4000"),
        ("pods", Decimal(0), "0"),
    ],
)
def test_format_quantity(resource: str, value: Decimal, text: str) -> None:
    assert format_quantity(resource, value) == text
