"""The simulated cloud's instance types: AWS EC2 GPU families plus one CPU type (pure data).

Every figure is checked against aws/karpenter-provider-aws
``website/content/en/docs/reference/instance-types.md`` (generated from the EC2 API, AMI
family AL2023, no blockDeviceMappings): vCPUs, memory (MiB), GPU count, the
``karpenter.k8s.aws/instance-gpu-*`` label values and the ENI-limited pod count. The
allocatable arithmetic is the provider's ``pkg/providers/instancetype/types.go``
(``memory``, ``kubeReservedResources``, ``evictionThreshold``) with its defaults
(``VMMemoryOverheadPercent`` 0.075, 20Gi root volume); the tests compare the result with
the figures that page lists.

Prices are illustrative us-east-1 on-demand list prices in USD/hour (2024, before the
June 2025 P4/P5 price cuts); they only order the options, as Karpenter's launch does.

GFD labels (``nvidia.com/gpu.*``) are what NVIDIA GPU Feature Discovery publishes; the
``gpu.memory`` values are the MiB NVML reports (e.g. 15360 for a T4, not the 16384 the
EC2 API lists) as seen in public ``nvidia-smi`` output, approximate where noted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from sim.requirements import (
    AWS_INSTANCE_LABELS,
    INSTANCE_LABELS,
    Requirement,
    Requirements,
    from_labels,
)

__all__ = [
    "AWS_INSTANCE_LABELS",
    "CAPACITY_TYPES",
    "CATALOG",
    "REGION",
    "ZONES",
    "InstanceType",
    "by_name",
    "format_quantity",
    "format_resources",
    "offering_requirements",
]

REGION: Final = "us-east-1"
ZONES: Final = ("us-east-1a", "us-east-1b", "us-east-1c")
#: Offered capacity types (spot is not modelled).
CAPACITY_TYPES: Final = ("on-demand",)

_MIB: Final = 1024 * 1024
_GIB: Final = 1024 * _MIB
#: Default root volume of the AL2023 AMI family (``amifamily.DefaultEBS``): 20Gi.
_ROOT_VOLUME_BYTES: Final = 20 * _GIB
#: ``VMMemoryOverheadPercent`` default of the AWS provider.
_VM_MEMORY_OVERHEAD: Final = 0.075


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One EC2 instance type.

    Units: ``cpu`` vCPUs, ``memory_mib`` MiB (as EC2 lists it), ``gpu_memory_mib`` MiB per
    GPU as the ``karpenter.k8s.aws/instance-gpu-memory`` label, ``gfd_memory_mib`` MiB per
    GPU as NVML reports it (GFD ``nvidia.com/gpu.memory``), ``price`` USD/hour on demand,
    ``max_pods`` the ENI-limited pod count (AL2023 default).
    """

    name: str
    family: str
    category: str
    generation: str
    size: str
    cpu: int
    memory_mib: int
    price: Decimal
    max_pods: int
    cpu_manufacturer: str
    local_nvme_gb: int = 0
    gpu_count: int = 0
    gpu_name: str = ""
    gpu_memory_mib: int = 0
    gpu_product: str = ""
    gfd_memory_mib: int = 0
    gpu_family: str = ""
    gpu_compute: tuple[int, int] = (0, 0)
    arch: str = "amd64"
    os: str = "linux"
    #: The Karpenter provider selling it (`intent.providers`): ``aws`` here; the other
    #: providers' types (`sim.providers`) carry their own instance labels in
    #: ``provider_labels`` instead of the ``karpenter.k8s.aws/*`` ones, and ``gpu_name``
    #: is then the canonical model, not a label value.
    provider: str = "aws"
    provider_labels: tuple[tuple[str, str], ...] = ()

    def labels(self) -> dict[str, str]:
        """The instance type's single-valued labels, as the AWS provider resolves them onto
        a NodeClaim at launch (``computeRequirements``; zone and capacity type are added
        per launch); another provider's type: the well-known ones and its
        ``provider_labels``."""
        if self.provider != "aws":
            return {
                "node.kubernetes.io/instance-type": self.name,
                "kubernetes.io/arch": self.arch,
                "kubernetes.io/os": self.os,
                "topology.kubernetes.io/region": REGION,
                **dict(self.provider_labels),
            }
        labels = {
            "node.kubernetes.io/instance-type": self.name,
            "kubernetes.io/arch": self.arch,
            "kubernetes.io/os": self.os,
            "topology.kubernetes.io/region": REGION,
            "karpenter.k8s.aws/instance-category": self.category,
            "karpenter.k8s.aws/instance-family": self.family,
            "karpenter.k8s.aws/instance-generation": self.generation,
            "karpenter.k8s.aws/instance-size": self.size,
            "karpenter.k8s.aws/instance-cpu": str(self.cpu),
            "karpenter.k8s.aws/instance-cpu-manufacturer": self.cpu_manufacturer,
            "karpenter.k8s.aws/instance-memory": str(self.memory_mib),
            "karpenter.k8s.aws/instance-hypervisor": "nitro",
        }
        if self.local_nvme_gb:
            labels["karpenter.k8s.aws/instance-local-nvme"] = str(self.local_nvme_gb)
        if self.gpu_count:
            labels["karpenter.k8s.aws/instance-gpu-name"] = self.gpu_name
            labels["karpenter.k8s.aws/instance-gpu-manufacturer"] = "nvidia"
            labels["karpenter.k8s.aws/instance-gpu-count"] = str(self.gpu_count)
            labels["karpenter.k8s.aws/instance-gpu-memory"] = str(self.gpu_memory_mib)
        return labels

    def requirements(self) -> Requirements:
        """What the type offers, as Karpenter matches it (AWS ``computeRequirements``): its
        `labels`, zone and capacity type In the offered ones, DoesNotExist for every AWS
        instance label it lacks and for ``node.kubernetes.io/windows-build``."""
        return _requirements(self)

    def capacity(self) -> dict[str, Decimal]:
        """Node capacity the provider predicts (``computeCapacity``): cpu in cores, memory
        and ephemeral-storage in bytes (memory less the 7.5% VM overhead), pods, and
        ``nvidia.com/gpu`` when the type has GPUs."""
        vm_overhead_mib = math.ceil(self.memory_mib * _VM_MEMORY_OVERHEAD)
        capacity = {
            "cpu": Decimal(self.cpu),
            "memory": Decimal((self.memory_mib - vm_overhead_mib) * _MIB),
            "ephemeral-storage": Decimal(_ROOT_VOLUME_BYTES),
            "pods": Decimal(self.max_pods),
        }
        if self.gpu_count:
            capacity["nvidia.com/gpu"] = Decimal(self.gpu_count)
        return capacity

    def overhead(self) -> dict[str, Decimal]:
        """kube-reserved plus the kubelet's hard eviction thresholds, same units as
        `capacity` (``kubeReservedResources``, ``evictionThreshold``): memory
        11 MiB x pods + 255 MiB + 100 MiB, ephemeral-storage 1Gi + 10%, cpu 6% of the first
        core, 1% of the second, 0.5% of the next two, 0.25% of the rest."""
        millicores = self.cpu * 1000
        reserved_milli = 0.0
        for start, end, share in (
            (0, 1000, 0.06),
            (1000, 2000, 0.01),
            (2000, 4000, 0.005),
            (4000, 1 << 31, 0.0025),
        ):
            if millicores >= start:
                reserved_milli += int(min(millicores - start, end - start) * share)
        memory_mib = 11 * self.max_pods + 255 + 100
        storage = _GIB + math.ceil(_ROOT_VOLUME_BYTES / 100 * 10)
        return {
            "cpu": Decimal(int(reserved_milli)) / 1000,
            "memory": Decimal(memory_mib * _MIB),
            "ephemeral-storage": Decimal(storage),
        }

    def allocatable(self) -> dict[str, Decimal]:
        """`capacity` minus `overhead`: what Karpenter's scheduler fits pods against."""
        overhead = self.overhead()
        return {
            name: value - overhead.get(name, Decimal(0)) for name, value in self.capacity().items()
        }

    def gfd_labels(self) -> dict[str, str]:
        """Labels NVIDIA GPU Feature Discovery (and the GPU operator's
        ``nvidia.com/gpu.present``) put on a node of this type; empty without GPUs."""
        if not self.gpu_count:
            return {}
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpu_count),
            "nvidia.com/gpu.product": self.gpu_product,
            "nvidia.com/gpu.memory": str(self.gfd_memory_mib),
            "nvidia.com/gpu.family": self.gpu_family,
            "nvidia.com/gpu.compute.major": str(self.gpu_compute[0]),
            "nvidia.com/gpu.compute.minor": str(self.gpu_compute[1]),
            "nvidia.com/gpu.replicas": "1",
        }


@functools.cache
def _requirements(it: InstanceType) -> Requirements:
    labels = it.labels()
    reqs = [Requirement.new(k, "In", [v]) for k, v in labels.items()]
    absent = [k for k in INSTANCE_LABELS[it.provider] if k not in labels]
    reqs += [Requirement.new(k, "DoesNotExist") for k in absent]
    reqs += [
        Requirement.new("topology.kubernetes.io/zone", "In", ZONES),
        Requirement.new("karpenter.sh/capacity-type", "In", CAPACITY_TYPES),
        Requirement.new("node.kubernetes.io/windows-build", "DoesNotExist"),
    ]
    return Requirements(reqs)


@functools.cache
def offering_requirements() -> tuple[Requirements, ...]:
    """One per offering (zone x capacity type), all available, same for every type
    (AWS ``createOfferings``)."""
    return tuple(
        from_labels({"topology.kubernetes.io/zone": z, "karpenter.sh/capacity-type": c})
        for z in ZONES
        for c in CAPACITY_TYPES
    )


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: its canonical name (the AWS label spelling; `sim.providers` spells
    it per provider) and memory (``instance-gpu-memory``, MiB), the GFD product string and
    memory (``nvidia.com/gpu.memory``, MiB), the GFD architecture family and compute
    capability."""

    name: str
    memory_mib: int
    product: str
    gfd_memory_mib: int
    family: str
    compute: tuple[int, int]


_T4 = GpuSpec("t4", 16384, "Tesla-T4", 15360, "turing", (7, 5))
_A10G = GpuSpec("a10g", 22888, "NVIDIA-A10G", 23028, "ampere", (8, 6))
_L4 = GpuSpec("l4", 22888, "NVIDIA-L4", 23034, "ada-lovelace", (8, 9))
# L40S and H100 SXM: GFD memory from public nvidia-smi output (approximate).
_L40S = GpuSpec("l40s", 45776, "NVIDIA-L40S", 46068, "ada-lovelace", (8, 9))
_A100_40GB = GpuSpec("a100", 40960, "NVIDIA-A100-SXM4-40GB", 40960, "ampere", (8, 0))
# The 80 GB A100 has the same AWS name ``a100``: only ``instance-gpu-memory`` (81920 on
# p4de.24xlarge, 40960 on p4d.24xlarge) tells them apart (instance-types.md).
_A100_80GB = GpuSpec("a100", 81920, "NVIDIA-A100-SXM4-80GB", 81920, "ampere", (8, 0))
_H100 = GpuSpec("h100", 81920, "NVIDIA-H100-80GB-HBM3", 81559, "hopper", (9, 0))


_GPUS: Final = (_T4, _A10G, _L4, _L40S, _A100_40GB, _A100_80GB, _H100)


def gpu_model(product: str) -> str:
    """The short model name of a GFD product string: ``"NVIDIA-L40S"`` -> ``"l40s"``,
    ``"Tesla-T4"`` -> ``"t4"``, ``"NVIDIA-A100-SXM4-80GB"`` -> ``"a100"`` (a variant of
    this catalog's GPUs); another product lowercased without a leading ``nvidia-`` or
    ``tesla-``. It is what tensor-fusion's GPU resources carry as ``status.gpuModel``
    (its GPU info table: Model ``"L4"`` for full name ``"NVIDIA L4"``), compared
    case-insensitively here."""
    text = product.lower()
    for gpu in _GPUS:
        if gpu.product.lower() == text:
            return gpu.name
    for prefix in ("nvidia-", "tesla-"):
        text = text.removeprefix(prefix)
    return next((g.name for g in _GPUS if text.startswith(g.name + "-")), text)


def _gpu_type(
    name: str,
    cpu: int,
    memory_mib: int,
    price: str,
    max_pods: int,
    cpu_vendor: str,
    nvme_gb: int,
    gpus: int,
    gpu: GpuSpec,
) -> InstanceType:
    """A GPU instance type; family, category, generation and size come from ``name``
    (``g6e.xlarge``: family g6e, category g, generation 6, size xlarge)."""
    family, size = name.split(".")
    generation = next(ch for ch in family if ch.isdigit())
    return InstanceType(
        name,
        family,
        family[0],
        generation,
        size,
        cpu,
        memory_mib,
        Decimal(price),
        max_pods,
        cpu_vendor,
        nvme_gb,
        gpus,
        gpu.name,
        gpu.memory_mib,
        gpu.product,
        gpu.gfd_memory_mib,
        gpu.family,
        gpu.compute,
    )


#: The simulated cloud's instance types, cheapest first within a family:
#: name, vCPU, memory MiB, on-demand USD/hour, max pods, CPU vendor, local NVMe GB, GPUs.
CATALOG: Final[tuple[InstanceType, ...]] = (
    InstanceType("m5.large", "m5", "m", "5", "large", 2, 8192, Decimal("0.096"), 29, "intel"),
    _gpu_type("g4dn.xlarge", 4, 16384, "0.526", 29, "intel", 125, 1, _T4),
    _gpu_type("g4dn.12xlarge", 48, 196608, "3.912", 234, "intel", 900, 4, _T4),
    _gpu_type("g5.xlarge", 4, 16384, "1.006", 58, "amd", 250, 1, _A10G),
    _gpu_type("g5.12xlarge", 48, 196608, "5.672", 737, "amd", 3800, 4, _A10G),
    _gpu_type("g6.xlarge", 4, 16384, "0.8048", 58, "amd", 250, 1, _L4),
    _gpu_type("g6.12xlarge", 48, 196608, "4.6016", 234, "amd", 3760, 4, _L4),
    _gpu_type("g6e.xlarge", 4, 32768, "1.861", 58, "amd", 250, 1, _L40S),
    _gpu_type("p4d.24xlarge", 96, 1179648, "32.7726", 737, "intel", 8000, 8, _A100_40GB),
    # p4de: p4d's host with 80 GB A100s; $40.96566/h us-east-1 on-demand Linux in the
    # same 2024 list (aws.amazon.com/ec2/pricing/on-demand, before the June 2025 cuts).
    _gpu_type("p4de.24xlarge", 96, 1179648, "40.96566", 737, "intel", 8000, 8, _A100_80GB),
    _gpu_type("p5.48xlarge", 192, 2097152, "98.32", 100, "amd", 30400, 8, _H100),
)  # fmt: skip


def by_name(name: str, catalog: tuple[InstanceType, ...] = CATALOG) -> InstanceType:
    """The instance type called ``name``. Raises KeyError."""
    for it in catalog:
        if it.name == name:
            return it
    raise KeyError(name)


_BINARY = (
    ("Ei", 1024**6),
    ("Pi", 1024**5),
    ("Ti", 1024**4),
    ("Gi", 1024**3),
    ("Mi", 1024**2),
    ("Ki", 1024),
)
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi"})


def format_quantity(resource: str, value: Decimal) -> str:
    """A Kubernetes quantity string for ``value`` in the resource's base unit.

    Byte resources take the largest exact binary suffix, then decimal (``14481Mi``,
    ``17Gi``, ``1G``); others print whole numbers plainly and fractions in milli-units
    (``4``, ``3920m``), like ``resource.Quantity.String`` in canonical form.
    """
    if value == value.to_integral_value():
        whole = int(value)
        if resource in _BYTE_RESOURCES and whole:
            for suffix, size in _BINARY:
                if whole % size == 0:
                    return f"{whole // size}{suffix}"
            for suffix, size in _DECIMAL:
                if whole % size == 0:
                    return f"{whole // size}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value.normalize(), "f")


def format_resources(resources: Mapping[str, Decimal]) -> dict[str, str]:
    """`format_quantity` over a resource list, keys sorted."""
    return {name: format_quantity(name, resources[name]) for name in sorted(resources)}
