"""Provider profiles: how each Karpenter cloud provider lets a pod select a GPU model.

Karpenter resolves the GPU of an instance type through labels its *provider* defines, and
each provider spells them differently (docs/sources/placement.md section 2, 28-ecosystem.md
part B, REFERENCE.md section 2):

========  ======================================  ===================  ===========  =====================
provider  GPU name label                          value of a T4        memory label  model expressed by
========  ======================================  ===================  ===========  =====================
aws       ``karpenter.k8s.aws/instance-gpu-name``  ``t4``               MiB per GPU  the name label
azure     ``karpenter.azure.com/sku-gpu-name``     ``T4``               none         the name label
gcp       ``karpenter.k8s.gcp/instance-gpu-name``  ``nvidia-tesla-t4``  none         the name label
tke       none                                    (family ``GN7``)     none         ``instance-family``
========  ======================================  ===================  ===========  =====================

A `ProviderProfile` holds one provider's label keys and the tables that turn a canonical
model (``t4``, ``a100``: `intent.contract`'s lowercase spelling) and a GPU memory (MiB per
GPU) into node requirements (`model_requirements`), and says whether a NodePool's own
requirements let it make such a node (`pool_admits_model`). Where a provider has no memory
label, a memory is expressed by the values of a *variant label* whose GPU has that much:
Azure's VM sizes (``node.kubernetes.io/instance-type``), GCP's accelerator types
(``nvidia-a100-80gb``), TKE's instance families. Values a table does not list are never
chosen for a memory, so a provider's table bounds what a memory can select.

Purely data and pure functions; imports nothing but the foundation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypedDict

from intent import keys

__all__ = [
    "AWS",
    "AZURE",
    "GCP",
    "PROFILES",
    "TKE",
    "NodeRequirement",
    "ProviderProfile",
    "Variant",
    "model_requirements",
    "pool_admits_model",
    "profile",
    "requirements_admit",
]


class NodeRequirement(TypedDict):
    """One node selector requirement, as a NodePool or a pod's node affinity spells it."""

    key: str
    operator: str
    values: list[str]


@dataclass(frozen=True, slots=True)
class Variant:
    """One value of a profile's `ProviderProfile.variant_label` and the GPU behind it:
    the canonical ``model`` and its memory (MiB per GPU, the figure of that GPU variant in
    ``intent/catalog.yaml``)."""

    value: str
    model: str
    memory_mib: int


#: How a profile spells a canonical model in its GPU name label: as is (``t4``), upper
#: case (``T4``), or through its variant table (``nvidia-tesla-t4``).
NameStyle = Literal["canonical", "upper", "table"]


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    """What one Karpenter provider puts on its instance types about their GPUs.

    Attributes:
        name: ``aws``, ``azure``, ``gcp`` or ``tke``.
        gpu_name_label: the label naming the GPU, None where the provider has none (TKE).
        name_style: how a canonical model becomes a value of ``gpu_name_label``.
        gpu_count_label: GPUs per instance, None where there is none.
        gpu_memory_label: MiB of memory per GPU, None where there is none (Azure, GCP,
            TKE): a memory is then expressed through ``variants``.
        gpu_manufacturer_label: ``nvidia``/``amd``, None where there is none.
        variant_label: the label ``variants`` lists values of: the model's label where
            there is no name label (TKE's instance family) or its values are a table
            (GCP), else where a GPU memory can be told apart (Azure's VM size).
        variants: the values of ``variant_label`` this profile knows and their GPU.
        node_class_group, node_class_kind: the NodePool ``nodeClassRef`` of the provider.
        name_overrides: (model, value) pairs where the name label spells a model other
            than ``name_style`` says (Azure's H100 NVL sizes are ``H100``).
    """

    name: str
    gpu_name_label: str | None
    name_style: NameStyle
    gpu_count_label: str | None
    gpu_memory_label: str | None
    gpu_manufacturer_label: str | None
    variant_label: str | None
    variants: tuple[Variant, ...]
    node_class_group: str
    node_class_kind: str
    name_overrides: tuple[tuple[str, str], ...] = ()

    @property
    def model_label(self) -> str:
        """The label a trigger selects the model by: the GPU name label, else the
        variant label (TKE's instance family)."""
        label = self.gpu_name_label or self.variant_label
        assert label is not None, f"provider {self.name} expresses no GPU model"
        return label

    @property
    def expresses_memory(self) -> bool:
        """Whether a GPU memory can be asked for: by a memory label, or by the values of
        a variant label (which `model_requirements` may still find none for)."""
        return bool(self.gpu_memory_label or self.variant_label)

    def with_labels(self, name_label: str | None, memory_label: str | None) -> ProviderProfile:
        """This profile with the GPU name and memory labels replaced where given: a
        replaced name label carries the canonical model as is (``t4``), a replaced memory
        label MiB per GPU, as AWS's do (``--gpu-name-label``, ``--gpu-memory-label``)."""
        changed = self
        if name_label:
            changed = dataclasses.replace(
                changed, gpu_name_label=name_label, name_style="canonical"
            )
        if memory_label:
            changed = dataclasses.replace(changed, gpu_memory_label=memory_label)
        return changed

    def name_values(self, model: str) -> tuple[str, ...]:
        """The values of `gpu_name_label` that name ``model`` (empty without that label,
        or for a model the table does not know)."""
        if self.gpu_name_label is None:
            return ()
        if overridden := tuple(v for m, v in self.name_overrides if m == model):
            return overridden
        if self.name_style == "canonical":
            return (model,)
        if self.name_style == "upper":
            return (model.upper(),)
        return tuple(v.value for v in self.variants if v.model == model)

    def shares_name(self, model: str) -> bool:
        """Whether another model of `variants` has one of ``model``'s name values
        (Azure ``H100``: the 80 GB H100 and the H100 NVL), so that the name alone does not
        select ``model``."""
        names = set(self.name_values(model))
        return any(
            v.model != model and names & set(self.name_values(v.model)) for v in self.variants
        )

    def variant_values(self, model: str | None, memory_mib: int | None) -> tuple[str, ...]:
        """The `variants` values of ``model`` (any model when None) whose GPU has at
        least ``memory_mib`` (any memory when None or 0), sorted."""
        return tuple(
            sorted(
                {
                    v.value
                    for v in self.variants
                    if (model is None or v.model == model) and v.memory_mib >= (memory_mib or 0)
                }
            )
        )


def _variants(label_rows: Iterable[tuple[str, str, int]]) -> tuple[Variant, ...]:
    return tuple(Variant(value, model, memory) for value, model, memory in label_rows)


#: AWS (aws/karpenter-provider-aws pkg/apis/v1/labels.go; values from
#: pkg/providers/instancetype/types.go: ``lowerKabobCase`` of the EC2 GPU name, memory
#: ``GpuDeviceInfo.MemoryInfo.SizeInMiB`` per GPU; docs/sources/placement.md section 2.1). Its names are
#: the canonical spelling, and p4d (a100, 40960) and p4de (a100, 81920) differ by memory.
AWS: Final = ProviderProfile(
    name="aws",
    gpu_name_label=keys.AWS_GPU_NAME_LABEL,
    name_style="canonical",
    gpu_count_label=keys.AWS_GPU_COUNT_LABEL,
    gpu_memory_label=keys.AWS_GPU_MEMORY_LABEL,
    gpu_manufacturer_label=keys.AWS_GPU_MANUFACTURER_LABEL,
    variant_label=None,
    variants=(),
    node_class_group="karpenter.k8s.aws",
    node_class_kind="EC2NodeClass",
)

#: Azure (Azure/karpenter-provider-azure pkg/apis/v1beta1/labels.go, ``setRequirementsGPU``
#: in pkg/providers/instancetype/instancetype.go; docs/sources/placement.md section 2.2, 28 B2). The name
#: is the upper-case accelerator token Azure/skewer parses from the VM size
#: (``Standard_NC24ads_A100_v4`` -> ``A100``, the provider's own test). V100 sizes
#: (``NC*s_v3``) and ``Standard_ND96asr_v4`` carry no token: they get ``V100``/``A100``
#: only from skewer's fallback map, which the research could not confirm in the skewer
#: version the provider pins. No memory label: the A100 40 GB (ND96asr_v4) and 80 GB
#: (NC*ads_A100_v4, ND96amsr_A100_v4) share ``A100``, so a memory selects VM sizes.
#: Sizes and GPUs: intent/catalog.yaml ``instance_types.azure`` (Microsoft Learn "GPU
#: accelerated VM sizes", KAITO pkg/sku/azure_sku_handler.go). NC40ads_H100_v5 and
#: NC80adis_H100_v5 hold the 94 GB H100 NVL (KAITO; model ``h100-nvl`` in
#: intent/catalog.yaml), named ``H100`` like ND96isr_H100_v5's 80 GB boards: a model
#: sharing its name with another is selected by its VM sizes too.
AZURE: Final = ProviderProfile(
    name="azure",
    gpu_name_label=keys.AZURE_GPU_NAME_LABEL,
    name_style="upper",
    gpu_count_label=keys.AZURE_GPU_COUNT_LABEL,
    gpu_memory_label=None,
    gpu_manufacturer_label=keys.AZURE_GPU_MANUFACTURER_LABEL,
    variant_label=keys.INSTANCE_TYPE_LABEL,
    variants=_variants(
        [
            *((f"Standard_NC{n}as_T4_v3", "t4", 16384) for n in (4, 8, 16, 64)),
            *((f"Standard_NC{n}s_v3", "v100", 16384) for n in (6, 12, 24)),
            ("Standard_NC24rs_v3", "v100", 16384),
            *((f"Standard_NC{n}ads_A100_v4", "a100", 81920) for n in (24, 48, 96)),
            ("Standard_ND96asr_v4", "a100", 40960),
            ("Standard_ND96amsr_A100_v4", "a100", 81920),
            ("Standard_NC40ads_H100_v5", "h100-nvl", 96256),
            ("Standard_NC80adis_H100_v5", "h100-nvl", 96256),
            ("Standard_ND96isr_H100_v5", "h100", 81920),
            ("Standard_ND96isr_H200_v5", "h200", 144384),
            ("Standard_NV36ads_A10_v5", "a10", 24576),
            ("Standard_NV72ads_A10_v5", "a10", 24576),
        ]
    ),
    node_class_group="karpenter.azure.com",
    node_class_kind="AKSNodeClass",
    name_overrides=(("h100-nvl", "H100"),),
)

#: GCP (cloudpilot-ai/karpenter-provider-gcp pkg/apis/v1alpha1/labels.go; docs/sources/placement.md
#: section 2.3, 28 B3). The name is the GCE accelerator type (``extractGPUName``: the
#: first accelerator's ``GuestAcceleratorType``, e.g. ``a2-highgpu-1g`` ->
#: ``nvidia-tesla-a100``), which already tells memory variants apart
#: (``nvidia-tesla-a100`` is the 40 GB A100, ``nvidia-a100-80gb`` the 80 GB: GKE docs and
#: AI-Hypercomputer/xpk ``system_characteristics.py``). The memory label is registered but
#: only ever ``DoesNotExist``. T4/V100 attach to n1 machines, which this provider does not
#: support yet ("Attached GPU support is deferred to #84").
GCP: Final = ProviderProfile(
    name="gcp",
    gpu_name_label=keys.GCP_GPU_NAME_LABEL,
    name_style="table",
    gpu_count_label=keys.GCP_GPU_COUNT_LABEL,
    gpu_memory_label=None,
    gpu_manufacturer_label=None,
    variant_label=keys.GCP_GPU_NAME_LABEL,
    variants=_variants(
        [
            ("nvidia-tesla-t4", "t4", 16384),
            ("nvidia-tesla-v100", "v100", 16384),
            ("nvidia-tesla-p100", "p100", 16384),
            ("nvidia-tesla-p4", "p4", 8192),
            ("nvidia-l4", "l4", 22888),
            ("nvidia-tesla-a100", "a100", 40960),
            ("nvidia-a100-80gb", "a100", 81920),
            ("nvidia-h100-80gb", "h100", 81920),
            ("nvidia-h100-mega-80gb", "h100", 81920),
            ("nvidia-h200-141gb", "h200", 144384),
            ("nvidia-b200", "b200", 184320),
        ]
    ),
    node_class_group="karpenter.k8s.gcp",
    node_class_kind="GCENodeClass",
)

#: TKE (TencentCloud/karpenter-provider-tke pkg/apis/v1beta1/labels.go and
#: pkg/providers/instancetype/types.go ``computeRequirements``; docs/sources/placement.md section 2.4):
#: no GPU label at all, so a model is the CVM instance families whose GPU it is
#: (``karpenter.k8s.tke/instance-family In [GN7]`` for a T4), and a memory the families
#: whose GPU has that much. The family table (docs/sources/ecosystem.md B5: a third-party transcription
#: of Tencent's instance-type pages, GT4 corroborated by Tencent's international docs;
#: intent/catalog.yaml ``families.tke``) is NOT confirmed by an authoritative source the
#: research could read: check it against ``DescribeInstanceTypeConfigs`` of your region.
TKE: Final = ProviderProfile(
    name="tke",
    gpu_name_label=None,
    name_style="table",
    gpu_count_label=None,
    gpu_memory_label=None,
    gpu_manufacturer_label=None,
    variant_label=keys.TKE_INSTANCE_FAMILY_LABEL,
    variants=_variants(
        [
            ("GN6", "p4", 8192),
            ("GN6S", "p4", 8192),
            ("GN7", "t4", 16384),
            ("GI3X", "t4", 16384),
            ("GN8", "p40", 24576),
            ("GN10X", "v100", 32768),
            ("GN10Xp", "v100", 32768),
            ("GT4", "a100", 40960),
            ("GNV4", "a10", 24576),
            ("PNV4", "a10", 24576),
        ]
    ),
    node_class_group="karpenter.k8s.tke",
    node_class_kind="TKEMachineNodeClass",
)

#: Every profile by name (``--provider``).
PROFILES: Final[Mapping[str, ProviderProfile]] = {p.name: p for p in (AWS, AZURE, GCP, TKE)}


def profile(name: str) -> ProviderProfile:
    """The profile called ``name``. Raises ValueError naming the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROFILES)}") from None


def _in(key: str, values: Iterable[str]) -> NodeRequirement:
    return {"key": key, "operator": "In", "values": list(values)}


def model_requirements(
    profile: ProviderProfile, model: str | None, memory_mib: int | None = None
) -> tuple[NodeRequirement, ...]:
    """The node requirements that select ``model`` (canonical; None: any GPU) with at
    least ``memory_mib`` MiB per GPU (None or 0: any) on ``profile``'s instance types.

    - The model: ``<name label> In [<its values>]`` (AWS ``t4``, Azure ``T4``, GCP
      ``nvidia-tesla-t4``), or without a name label ``<variant label> In [<variants of
      the model>]`` (TKE ``instance-family In [GI3X, GN7]``). Where the name values are a
      variant table (GCP, TKE), a memory narrows them (``a100`` with 81920 MiB:
      ``nvidia-a100-80gb``).
    - A memory: ``<memory label> Gt memory-1`` where the provider has one (AWS); else
      ``<variant label> In [<variants with that much>]`` (Azure's VM sizes), restricted to
      the model's variants when there is a model. A model whose name value another model
      shares (Azure ``H100``: h100 and h100-nvl) is restricted to its variants likewise.

    A memory no known variant has narrows nothing (the model alone is selected: the
    intent's memory cannot be expressed there). A model the table does not know is
    selected by its canonical name, which no instance type carries: no pool admits it
    (`pool_admits_model`), so no trigger asks for it. Pure."""
    memory = memory_mib or 0
    out: list[NodeRequirement] = []
    by_table = profile.gpu_name_label is None or profile.name_style == "table"
    if model is not None and by_table:
        values = profile.variant_values(model, memory) or profile.variant_values(model, 0)
        return (_in(profile.model_label, values or (model,)),)
    if model is not None:
        out.append(_in(profile.model_label, profile.name_values(model)))
    if memory and profile.gpu_memory_label is not None:
        gt: NodeRequirement = {
            "key": profile.gpu_memory_label,
            "operator": "Gt",
            "values": [str(memory - 1)],
        }
        out.append(gt)
        memory = 0  # said; a shared name below is still told apart by its variants
    if profile.variant_label is None or not (memory or (model and profile.shares_name(model))):
        return tuple(out)
    if values := profile.variant_values(model, memory):
        out.append(_in(profile.variant_label, values))
    elif model is not None and profile.shares_name(model):
        # the memory narrows nothing; the model still needs its variants
        out.append(_in(profile.variant_label, profile.variant_values(model, 0)))
    return tuple(out)


def requirements_admit(
    requirements: Iterable[NodeRequirement],
    admits: Callable[[str, str], bool],
    labels: Mapping[str, str] | None = None,
) -> bool:
    """Whether something that ``admits(key, value)`` (a NodePool, a NodeClaim) may make a
    node meeting every requirement: ``In`` needs one value admitted, ``Gt`` a numeric
    label in ``labels`` above the bound (absent or not a number: not met), other operators
    are taken as met. Pure."""
    for r in requirements:
        if r["operator"] == "In" and not any(admits(r["key"], v) for v in r["values"]):
            return False
        if r["operator"] == "Gt":
            try:
                if int((labels or {}).get(r["key"], "")) <= int(r["values"][0]):
                    return False
            except ValueError:
                return False
    return True


def pool_admits_model(
    profile: ProviderProfile, admits: Callable[[str, str], bool], model: str
) -> bool:
    """Whether a NodePool that ``admits(key, value)`` (its requirements and template
    labels) can make a node with ``model`` on ``profile``: it admits one of the model's
    values of `ProviderProfile.model_label` (on TKE: one family holding that GPU). Pure."""
    return requirements_admit(model_requirements(profile, model), admits)
