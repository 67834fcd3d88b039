"""The simulated cloud of each Karpenter provider: a handful of GPU instance types per
provider (`intent.providers`), labelled as that provider's Karpenter labels its instance
types (pure data).

- ``aws``: `sim.catalog.CATALOG` (EC2, ``karpenter.k8s.aws/instance-gpu-*``).
- ``azure``: VM sizes with ``karpenter.azure.com/sku-*`` labels: ``sku-gpu-name`` the
  upper-case accelerator token of the size (``T4``, ``A100``; the provider's
  ``setRequirementsGPU``), ``sku-gpu-count`` (``0`` without GPUs), no GPU memory label.
- ``gcp``: machine types with ``karpenter.k8s.gcp/instance-gpu-name`` and
  ``cloud.google.com/gke-accelerator`` both the GCE accelerator type
  (``nvidia-tesla-a100``), ``instance-gpu-count``; manufacturer and memory absent
  (the provider only ever sets them DoesNotExist). No n1 + T4: the provider does not
  support attached GPUs.
- ``tke``: CVM instance types with only ``karpenter.k8s.tke/instance-family``,
  ``-instance-cpu`` and ``-instance-memory-gb``: no GPU label at all.

Label keys: docs/sources/placement.md section 2 (with the providers' sources). GPUs per
size: intent/catalog.yaml (Microsoft Learn, Google Cloud, Tencent instance-type pages as
transcribed there; the TKE family table is unverified, see `intent.providers.TKE`).
Prices (USD/hour, on demand) are illustrative list prices that only order the options;
vCPU and memory are the sizes' published figures, rounded. The sim keeps AWS's region,
zones, pod counts and allocatable arithmetic (`sim.catalog.InstanceType`) for every
provider: only labels, GPUs and prices differ. GPU Feature Discovery labels
(``nvidia.com/gpu.*``) are the same on any provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Final

from intent import keys
from intent.providers import AZURE
from sim.catalog import CATALOG, GpuSpec, InstanceType

__all__ = [
    "ALL_INSTANCE_TYPES",
    "AZURE_CATALOG",
    "CATALOGS",
    "GCP_CATALOG",
    "TKE_CATALOG",
    "catalog_for",
]

#: Pods per node on the non-AWS providers (the kubelet default; Azure CNI and GKE
#: differ per setting): enough for the sim.
_MAX_PODS: Final = 110


_T4 = GpuSpec("t4", 16384, "Tesla-T4", 15360, "turing", (7, 5))
_A10 = GpuSpec("a10", 24576, "NVIDIA-A10", 23028, "ampere", (8, 6))
_L4 = GpuSpec("l4", 22888, "NVIDIA-L4", 23034, "ada-lovelace", (8, 9))
_V100_32GB = GpuSpec("v100", 32768, "Tesla-V100-SXM2-32GB", 32510, "volta", (7, 0))
_A100_40GB = GpuSpec("a100", 40960, "NVIDIA-A100-SXM4-40GB", 40960, "ampere", (8, 0))
_A100_80GB = GpuSpec("a100", 81920, "NVIDIA-A100-SXM4-80GB", 81920, "ampere", (8, 0))
_A100_80GB_PCIE = GpuSpec("a100", 81920, "NVIDIA-A100-80GB-PCIe", 81920, "ampere", (8, 0))
_H100 = GpuSpec("h100", 81920, "NVIDIA-H100-80GB-HBM3", 81559, "hopper", (9, 0))
# H100 NVL (94 GB): KAITO pkg/sku/azure_sku_handler.go lists NC40ads_H100_v5 at 94 GiB; its
# own model in intent/catalog.yaml, though Azure names it ``H100`` (`intent.providers.AZURE`).
_H100_NVL = GpuSpec("h100-nvl", 96256, "NVIDIA-H100-NVL", 95830, "hopper", (9, 0))


def _instance(
    provider: str,
    name: str,
    cpu: int,
    memory_gib: int,
    price: str,
    labels: Mapping[str, str],
    gpus: int = 0,
    gpu: GpuSpec | None = None,
) -> InstanceType:
    """An instance type of ``provider`` with its own ``labels``."""
    family = name.split(".")[0] if provider == "tke" else name.split("-")[0]
    return InstanceType(
        name=name,
        family=family,
        category=family[:1].lower(),
        generation="",
        size=name,
        cpu=cpu,
        memory_mib=memory_gib * 1024,
        price=Decimal(price),
        max_pods=_MAX_PODS,
        cpu_manufacturer="amd" if provider == "azure" else "intel",
        gpu_count=gpus if gpu else 0,
        gpu_name=gpu.name if gpu else "",
        gpu_memory_mib=gpu.memory_mib if gpu else 0,
        gpu_product=gpu.product if gpu else "",
        gfd_memory_mib=gpu.gfd_memory_mib if gpu else 0,
        gpu_family=gpu.family if gpu else "",
        gpu_compute=gpu.compute if gpu else (0, 0),
        provider=provider,
        provider_labels=tuple(sorted(labels.items())),
    )


def _azure(
    name: str, cpu: int, memory_gib: int, price: str, gpus: int = 0, gpu: GpuSpec | None = None
) -> InstanceType:
    """An Azure VM size: ``sku-name``, ``sku-family`` (the letter after ``Standard_``),
    ``sku-cpu``, ``sku-memory`` (GiB), ``sku-gpu-count``, and for GPU sizes
    ``sku-gpu-name`` (the size's upper-case accelerator token) and ``-manufacturer``."""
    labels = {
        keys.AZURE_SKU_NAME_LABEL: name,
        keys.AZURE_SKU_FAMILY_LABEL: name.removeprefix("Standard_")[:1],
        "karpenter.azure.com/sku-cpu": str(cpu),
        "karpenter.azure.com/sku-memory": str(memory_gib),
        keys.AZURE_GPU_COUNT_LABEL: str(gpus if gpu else 0),
    }
    if gpu:
        labels[keys.AZURE_GPU_NAME_LABEL] = AZURE.name_values(gpu.name)[0]
        labels[keys.AZURE_GPU_MANUFACTURER_LABEL] = "nvidia"
    return _instance("azure", name, cpu, memory_gib, price, labels, gpus, gpu)


def _gcp(
    name: str,
    cpu: int,
    memory_gib: int,
    price: str,
    gpus: int = 0,
    gpu: GpuSpec | None = None,
    accelerator: str = "",
) -> InstanceType:
    """A GCE machine type: ``instance-family`` (``a2``), ``-cpu``, ``-memory`` (MiB), and
    for GPU types ``instance-gpu-name`` and ``gke-accelerator`` (the accelerator type)
    and ``instance-gpu-count``."""
    labels = {
        keys.GCP_INSTANCE_FAMILY_LABEL: name.split("-")[0],
        "karpenter.k8s.gcp/instance-cpu": str(cpu),
        "karpenter.k8s.gcp/instance-memory": str(memory_gib * 1024),
    }
    if gpu:
        labels[keys.GCP_GPU_NAME_LABEL] = accelerator
        labels[keys.GKE_ACCELERATOR_LABEL] = accelerator
        labels[keys.GCP_GPU_COUNT_LABEL] = str(gpus)
    return _instance("gcp", name, cpu, memory_gib, price, labels, gpus, gpu)


def _tke(
    name: str, cpu: int, memory_gib: int, price: str, gpus: int = 0, gpu: GpuSpec | None = None
) -> InstanceType:
    """A CVM instance type: ``instance-family`` (the part before the dot), ``-cpu``,
    ``-memory-gb``; no GPU label."""
    labels = {
        keys.TKE_INSTANCE_FAMILY_LABEL: name.split(".")[0],
        keys.TKE_INSTANCE_CPU_LABEL: str(cpu),
        keys.TKE_INSTANCE_MEMORY_LABEL: str(memory_gib),
    }
    return _instance("tke", name, cpu, memory_gib, price, labels, gpus, gpu)


#: Azure (East US pay-as-you-go, illustrative).
AZURE_CATALOG: Final[tuple[InstanceType, ...]] = (
    _azure("Standard_D4s_v5", 4, 16, "0.192"),
    _azure("Standard_NC4as_T4_v3", 4, 28, "0.526", 1, _T4),
    _azure("Standard_NC64as_T4_v3", 64, 440, "4.352", 4, _T4),
    _azure("Standard_NV36ads_A10_v5", 36, 440, "3.20", 1, _A10),
    _azure("Standard_NC24ads_A100_v4", 24, 220, "3.673", 1, _A100_80GB_PCIE),
    _azure("Standard_ND96asr_v4", 96, 900, "27.197", 8, _A100_40GB),
    _azure("Standard_NC40ads_H100_v5", 40, 320, "6.98", 1, _H100_NVL),
)  # fmt: skip

#: GCP (us-central1 on demand, illustrative).
GCP_CATALOG: Final[tuple[InstanceType, ...]] = (
    _gcp("e2-standard-4", 4, 16, "0.134"),
    _gcp("g2-standard-4", 4, 16, "0.7068", 1, _L4, "nvidia-l4"),
    _gcp("g2-standard-48", 48, 192, "4.0", 4, _L4, "nvidia-l4"),
    _gcp("a2-highgpu-1g", 12, 85, "3.673", 1, _A100_40GB, "nvidia-tesla-a100"),
    _gcp("a2-ultragpu-1g", 12, 170, "5.069", 1, _A100_80GB, "nvidia-a100-80gb"),
    _gcp("a3-highgpu-1g", 26, 234, "11.06", 1, _H100, "nvidia-h100-80gb"),
    _gcp("a3-highgpu-8g", 208, 1872, "88.25", 8, _H100, "nvidia-h100-80gb"),
)  # fmt: skip

#: TKE (CVM GPU computing instances; illustrative prices). The size suffix is vCPUs and
#: memory, not GPUs: GN7.8XLARGE128 has one T4 (docs/sources/ecosystem.md B5).
TKE_CATALOG: Final[tuple[InstanceType, ...]] = (
    _tke("S5.LARGE8", 2, 8, "0.10"),
    _tke("GN7.2XLARGE32", 8, 32, "0.90", 1, _T4),
    _tke("GN7.5XLARGE80", 20, 80, "1.30", 1, _T4),
    _tke("GN7.20XLARGE320", 80, 320, "4.50", 4, _T4),
    _tke("PNV4.7XLARGE116", 28, 116, "1.90", 1, _A10),
    _tke("GN10Xp.2XLARGE40", 10, 40, "2.20", 1, _V100_32GB),
    _tke("GT4.4XLARGE96", 16, 96, "3.50", 1, _A100_40GB),
    _tke("GT4.41XLARGE948", 164, 948, "26.00", 8, _A100_40GB),
)  # fmt: skip

#: Each provider's catalog by name (`intent.providers.PROFILES`).
CATALOGS: Final[Mapping[str, tuple[InstanceType, ...]]] = {
    "aws": CATALOG,
    "azure": AZURE_CATALOG,
    "gcp": GCP_CATALOG,
    "tke": TKE_CATALOG,
}


#: Every provider's instance types (their names do not collide), for looking a launched
#: type up whatever the cloud.
ALL_INSTANCE_TYPES: Final[tuple[InstanceType, ...]] = tuple(
    it for catalog in CATALOGS.values() for it in catalog
)


def catalog_for(provider: str) -> tuple[InstanceType, ...]:
    """The instance types of ``provider``. Raises ValueError for an unknown one."""
    try:
        return CATALOGS[provider]
    except KeyError:
        known = ", ".join(CATALOGS)
        raise ValueError(f"the sim has no provider {provider!r}; it has {known}") from None
