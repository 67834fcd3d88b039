"""The GPU catalog: which GPU a label value, annotation or instance type names (data).

The facts live in ``catalog.yaml`` beside this module (each with its source in the file):
GPU variants (canonical model, MiB per GPU, vendor, MIG slices, other spellings) and GPUs
per instance type for AWS, Azure, GCP and Tencent TKE families. A file of the same shape
merges over it (`load_catalog`), so an operator can add a GPU or an instance type with
``--catalog FILE`` (a mounted ConfigMap) without a release.

Lookups are pure and cheap: a normalized spelling is a dict key, and every answer is
remembered. There is no process-wide catalog: whoever infers passes the `Catalog` it
loaded once at start (``gpu-intent webhook --catalog FILE`` gives it to the webhook's
app, ``explain`` to `intent.inference.infer`); a caller that passes none gets the
built-in `default_catalog`. Nothing is read from disk per review.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

from intent.contract import is_label_value
from intent.runtime import SAFE_LOADER

__all__ = [
    "Catalog",
    "CatalogError",
    "Gpu",
    "GpuMatch",
    "InstanceGpus",
    "default_catalog",
    "load_catalog",
    "normalize",
]

#: Vendors the catalog knows, by device-plugin resource domain (nvidia.com/gpu, amd.com/gpu).
VENDORS: Final = ("nvidia", "amd")
_SEPARATORS: Final = re.compile(r"[\s_]+")
_DASHES: Final = re.compile(r"-{2,}")
#: NVIDIA GFD's product label under the MIG "single" strategy: ``<product>-MIG-<g>g.<n>gb``
#: (NVIDIA/gpu-feature-discovery README, e.g. ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``).
_MIG: Final = re.compile(r"^(?P<base>.+)-mig-(?P<slices>\d+)g\.(?P<gb>\d+)gb$")
_MEMORY_TOKEN: Final = re.compile(r"-(\d{1,4})gb-")
#: Where an Alibaba ECS type's family ends: ``ecs.gn7i-c8g1.2xlarge``, ``ecs.ebmgn7e.32xlarge``.
_ECS_FAMILY: Final = re.compile(r"ecs\.[a-z0-9]{1,40}")
#: A MIG profile as mig-parted names it: ``<compute slices>g.<GB>gb``.
_PROFILE: Final = re.compile(r"\d{1,2}g\.\d{1,4}gb")
#: Remembered lookups per catalog; past this many distinct spellings the memo starts over.
_MEMO_LIMIT: Final = 4096


class CatalogError(ValueError):
    """A catalog file is unreadable or malformed; the message names the file and entry."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU variant.

    Attributes:
        id: the catalog key (``a100-80gb``).
        model: canonical model, the ``gpu-intent.io/model`` value (``a100``).
        vendor: ``nvidia`` or ``amd``.
        memory_mib: MiB per GPU.
        mig_slices: compute slices under MIG (7 on A100), or None when not MIG-capable.
        product_names: the names NVIDIA's driver reports for this variant (``"NVIDIA
            A100-SXM4-80GB"``), the DRA ``gpu.nvidia.com`` ``productName`` attribute; empty
            when unknown (AMD).
        architecture: the DRA ``gpu.nvidia.com`` ``architecture`` attribute (``"Ampere"``),
            or None when unknown.
        mig_profiles: the MIG profiles (``1g.5gb``) this variant can be partitioned into
            (NVIDIA/mig-parted ``deployments/systemd/config-default.yaml``), empty when not
            MIG-capable or not listed.
    """

    id: str
    model: str
    vendor: str
    memory_mib: int
    mig_slices: int | None = None
    product_names: tuple[str, ...] = ()
    architecture: str | None = None
    mig_profiles: tuple[str, ...] = ()

    def describe(self) -> str:
        """``a100 80 GB (nvidia)``: model, nominal GB and vendor, for explanations."""
        return f"{self.model} {round(self.memory_mib / 1024)} GB ({self.vendor})"


@dataclass(frozen=True, slots=True)
class GpuMatch:
    """What one spelling names.

    Attributes:
        model: canonical model.
        gpu: the variant, when the spelling pins one (or the model has only one), else None.
        via: how it matched: ``alias``, ``model``, ``tokens`` (a model name and perhaps a
            memory token inside a longer name), ``instance type``, ``family``.
        mig: MIG profile (``1g.5gb``) when the spelling is a MIG slice, else None.
        mig_slices: compute slices of that profile (the ``1`` of ``1g.5gb``), or None.
    """

    model: str
    gpu: Gpu | None
    via: str
    mig: str | None = None
    mig_slices: int | None = None

    @property
    def memory_mib(self) -> int | None:
        """MiB per GPU of the variant, None when no variant is pinned."""
        return self.gpu.memory_mib if self.gpu else None


@dataclass(frozen=True, slots=True)
class InstanceGpus:
    """The GPUs of one instance type or family.

    Attributes:
        name: the instance type or family as the catalog spells it.
        provider: ``aws``, ``azure``, ``gcp``, ``tke`` (or a provider an override adds).
        count: GPUs per instance, None for a family (it varies by size).
        gpu: the variant.
    """

    name: str
    provider: str
    count: int | None
    gpu: Gpu


def normalize(raw: str) -> str:
    """A spelling as the catalog keys it: lowercase, spaces and ``_`` read as ``-``, no
    repeated or outer ``-`` (``"NVIDIA GeForce RTX 3090"`` -> ``"nvidia-geforce-rtx-3090"``)."""
    text = _SEPARATORS.sub("-", raw.strip().lower())
    return _DASHES.sub("-", text).strip("-")


class Catalog:
    """GPU variants, their spellings and the GPUs of instance types (see module docstring).

    Build one with `load_catalog`; it is read-only afterwards except for its lookup memo.
    """

    __slots__ = (
        "_by_model", "_families", "_instance_types", "_memo", "_mig_parents", "_names",
        "_spellings", "gpus",
    )  # fmt: skip

    def __init__(
        self,
        gpus: Mapping[str, Gpu],
        aliases: Mapping[str, str],
        instance_types: Mapping[str, InstanceGpus],
        families: Mapping[str, InstanceGpus],
    ) -> None:
        self.gpus: Mapping[str, Gpu] = dict(gpus)
        by_model: dict[str, list[Gpu]] = {}
        for gpu in self.gpus.values():
            by_model.setdefault(gpu.model, []).append(gpu)
        self._by_model = {m: tuple(v) for m, v in by_model.items()}
        # Model names as tokens, most tokens first, then longest (``rtx-a6000`` before
        # ``a6000``, ``a100`` before ``a10``: matched whole between dashes).
        self._names = tuple(
            sorted(self._by_model, key=lambda m: (-m.count("-"), -len(m), m))
        )
        self._spellings = {normalize(a): self.gpus[i] for a, i in aliases.items()}
        for gpu in self.gpus.values():
            self._spellings.setdefault(normalize(gpu.id), gpu)
        self._instance_types = {k.lower(): v for k, v in instance_types.items()}
        self._families = {k.lower(): v for k, v in families.items()}
        self._memo: dict[str, GpuMatch | None] = {}
        parents: dict[str, list[Gpu]] = {}
        for gpu in self.gpus.values():
            for profile in gpu.mig_profiles:
                parents.setdefault(profile, []).append(gpu)
        self._mig_parents = {p: tuple(v) for p, v in parents.items()}

    def mig_parents(self, profile: str) -> tuple[Gpu, ...]:
        """The variants MIG profile ``profile`` (``1g.5gb``) exists on, in catalog order
        (empty when none lists it)."""
        return self._mig_parents.get(profile.strip().lower(), ())

    @property
    def models(self) -> frozenset[str]:
        """Every canonical model name."""
        return frozenset(self._by_model)

    def variants(self, model: str) -> tuple[Gpu, ...]:
        """The variants of ``model`` (empty when unknown)."""
        return self._by_model.get(model, ())

    def lookup(self, raw: str) -> GpuMatch | None:
        """The GPU ``raw`` names (a label value, annotation entry, product name), or None
        when it names no model the catalog knows.

        In order: a MIG suffix (``<product>-MIG-1g.5gb``) is split off and the product
        looked up; an alias (``NVIDIA-A100-SXM4-80GB``, ``nvidia-a100-80gb``); a model name
        (``A100``, the only variant if there is one); a model name among the tokens of a
        longer name (``NVIDIA-H100-80GB-HBM3``), a memory token (``80GB``) picking the
        variant. Matching is case-insensitive, ``_`` and spaces read as ``-``.
        """
        if raw in self._memo:  # as written: most spellings come again unchanged
            return self._memo[raw]
        key = normalize(raw)
        found = self._memo[key] if key in self._memo else self._lookup(key)
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = found
        self._memo[raw] = found
        return found

    def _lookup(self, key: str) -> GpuMatch | None:
        if not key:
            return None
        mig = _MIG.match(key)
        if mig is not None:
            base = self._lookup(mig["base"])
            if base is None:
                return None
            profile = f"{int(mig['slices'])}g.{int(mig['gb'])}gb"
            return GpuMatch(base.model, base.gpu, base.via, profile, int(mig["slices"]))
        gpu = self._spellings.get(key)
        if gpu is not None:
            return GpuMatch(gpu.model, gpu, "alias")
        if key in self._by_model:
            return GpuMatch(key, self._only_variant(key), "model")
        padded = f"-{key}-"
        for name in self._names:
            if f"-{name}-" in padded:
                return GpuMatch(name, self._variant_by_memory(name, padded), "tokens")
        return None

    def _only_variant(self, model: str) -> Gpu | None:
        variants = self._by_model[model]
        return variants[0] if len(variants) == 1 else None

    def _variant_by_memory(self, model: str, padded: str) -> Gpu | None:
        sizes = {int(gb) for gb in _MEMORY_TOKEN.findall(padded)}
        for gpu in self._by_model[model]:
            if round(gpu.memory_mib / 1024) in sizes:
                return gpu
        return self._only_variant(model)

    def instance_type(self, raw: str) -> InstanceGpus | None:
        """The GPUs of instance type ``raw`` (``p4d.24xlarge``, ``Standard_ND96asr_v4``,
        ``a2-highgpu-1g``, ``BM.GPU.H100.8``, ``gpu_8x_h100_sxm5``, case-insensitive), else
        of its family: the part before the first dot (``GN7.2XLARGE32`` -> TKE ``GN7``;
        ``g6e.metal`` -> AWS ``g6e``), for Alibaba ECS the ``ecs.<family>`` before the
        first ``-`` or the size (``ecs.gn6i-c4g1.xlarge`` -> ``ecs.gn6i``). SageMaker's
        ``ml.`` prefix is dropped (``ml.p4d.24xlarge`` is a p4d.24xlarge: AWS SageMaker
        instance types). None for a type the catalog does not list (a CPU type, say)."""
        key = raw.strip().lower()
        if key.startswith("ml.") and key not in self._instance_types:
            key = key[3:]  # SageMaker / HyperPod: ``ml.`` + the EC2 type
        found = self._instance_types.get(key)
        if found is None and key.startswith("ecs."):  # ecs.gn6i-c4g1.xlarge -> ecs.gn6i
            family = _ECS_FAMILY.match(key)
            found = self._families.get(family[0]) if family else None
        elif found is None and "." in key:
            found = self._families.get(key.split(".", 1)[0])
        return found

    def fewest_per_instance(self, model: str) -> int | None:
        """The fewest GPUs any instance type the catalog lists has of ``model`` (``1`` for
        ``l4``: g6.xlarge), or None when no listed instance type has it. A node of that
        type is the cheapest that satisfies a DRA ``allocationMode: All`` request."""
        counts = [
            t.count for t in self._instance_types.values()
            if t.gpu.model == model and t.count is not None
        ]  # fmt: skip
        return min(counts) if counts else None

    def family(self, raw: str) -> InstanceGpus | None:
        """The GPU of instance family ``raw`` (``g6e``, ``GN7``), case-insensitive."""
        return self._families.get(raw.strip().lower())


# --- loading -------------------------------------------------------------------------


def _fail(where: str, field: str, message: str) -> CatalogError:
    return CatalogError(f"{where}: {field}: {message}")


def _as_mapping(value: object, where: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(where, field, f"must be a mapping, got {type(value).__name__}")
    return value


def _positive_int(value: object, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _fail(where, field, f"must be a positive whole number, got {value!r}")
    return value


def _gpu(gpu_id: str, raw: object, where: str) -> tuple[Gpu, list[str]]:
    field = f"gpus.{gpu_id}"
    entry = _as_mapping(raw, where, field)
    model = entry.get("model")
    if not isinstance(model, str) or model != model.lower() or not is_label_value(model):
        raise _fail(where, f"{field}.model", f"must be a lowercase label value, got {model!r}")
    vendor = entry.get("vendor")
    if vendor not in VENDORS:
        raise _fail(where, f"{field}.vendor", f"must be one of {', '.join(VENDORS)}, got {vendor!r}")
    memory = _positive_int(entry.get("memory_mib"), where, f"{field}.memory_mib")
    slices = entry.get("mig_slices")
    if slices is not None:
        slices = _positive_int(slices, where, f"{field}.mig_slices")
    aliases = entry.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise _fail(where, f"{field}.aliases", "must be a list of non-empty strings")
    products = entry.get("product_names") or []
    if not isinstance(products, list) or not all(isinstance(p, str) and p.strip() for p in products):
        raise _fail(where, f"{field}.product_names", "must be a list of non-empty strings")
    architecture = entry.get("architecture")
    if architecture is not None and (not isinstance(architecture, str) or not architecture.strip()):
        raise _fail(where, f"{field}.architecture", f"must be a non-empty string, got {architecture!r}")
    profiles = entry.get("mig_profiles") or []
    if not isinstance(profiles, list) or not all(isinstance(p, str) and _PROFILE.fullmatch(p) for p in profiles):
        raise _fail(where, f"{field}.mig_profiles", "must be a list of MIG profiles such as 1g.5gb")
    unknown = set(entry) - {
        "model", "vendor", "memory_mib", "mig_slices", "aliases", "product_names", "architecture",
        "mig_profiles",
    }  # fmt: skip
    if unknown:
        raise _fail(where, field, f"unknown fields {', '.join(sorted(map(str, unknown)))}")
    gpu = Gpu(str(gpu_id), model, str(vendor), memory, slices, tuple(products), architecture,
              tuple(profiles))  # fmt: skip
    return gpu, list(aliases)


@dataclass
class _Data:
    """A catalog document, validated, before the lookup tables are built."""

    gpus: dict[str, Gpu]
    aliases: dict[str, str]
    instance_types: dict[tuple[str, str], tuple[int, str]]
    families: dict[tuple[str, str], str]


def _parse(document: object, where: str) -> _Data:
    top = _as_mapping(document, where, "document")
    unknown = set(top) - {"gpus", "instance_types", "families"}
    if unknown:
        raise _fail(where, "document", f"unknown sections {', '.join(sorted(map(str, unknown)))}")
    data = _Data({}, {}, {}, {})
    for gpu_id, raw in _as_mapping(top.get("gpus"), where, "gpus").items():
        gpu, aliases = _gpu(str(gpu_id), raw, where)
        data.gpus[gpu.id] = gpu
        data.aliases.update((alias, gpu.id) for alias in aliases)
    types = _as_mapping(top.get("instance_types"), where, "instance_types")
    for provider, table in types.items():
        for name, raw in _as_mapping(table, where, f"instance_types.{provider}").items():
            field = f"instance_types.{provider}.{name}"
            if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], str):
                raise _fail(where, field, f"must be [GPU count, GPU id], got {raw!r}")
            count = _positive_int(raw[0], where, f"{field}[0]")
            data.instance_types[(str(provider), str(name))] = (count, raw[1])
    families = _as_mapping(top.get("families"), where, "families")
    for provider, table in families.items():
        for name, gpu_id in _as_mapping(table, where, f"families.{provider}").items():
            if not isinstance(gpu_id, str):
                raise _fail(where, f"families.{provider}.{name}", f"must be a GPU id, got {gpu_id!r}")
            data.families[(str(provider), str(name))] = gpu_id
    return data


def _read(path: Path) -> object:
    try:
        with path.open(encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise CatalogError(f"{path}: cannot read the catalog: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not YAML: {e}") from e


def _build(data: _Data, where: str) -> Catalog:
    def gpu_of(gpu_id: str, field: str) -> Gpu:
        gpu = data.gpus.get(gpu_id)
        if gpu is None:
            raise _fail(where, field, f"names GPU {gpu_id!r}, which is not in gpus")
        return gpu

    types = {
        name: InstanceGpus(name, provider, count, gpu_of(gpu_id, f"instance_types.{provider}.{name}"))
        for (provider, name), (count, gpu_id) in data.instance_types.items()
    }
    families = {
        name: InstanceGpus(name, provider, None, gpu_of(gpu_id, f"families.{provider}.{name}"))
        for (provider, name), gpu_id in data.families.items()
    }
    return Catalog(data.gpus, data.aliases, types, families)


_BUILTIN: Final = "catalog.yaml"


def load_catalog(override: str | Path | None = None) -> Catalog:
    """The built-in catalog, with the file ``override`` merged over it when given.

    Merging: a GPU id, instance type (per provider) or family (per provider) in the
    override replaces the built-in entry of the same key; new keys are added. Aliases
    follow their GPU entry.

    Raises:
        CatalogError: a file cannot be read, is not YAML, or breaks the shape described in
            ``catalog.yaml`` (the message names the file and the field).
    """
    builtin = resources.files("intent").joinpath(_BUILTIN)
    text = builtin.read_text(encoding="utf-8")
    data = _parse(yaml.load(text, Loader=SAFE_LOADER), f"gpu_intent/{_BUILTIN}")
    where = "intent/catalog.yaml"
    if override is not None:
        where = str(override)
        extra = _parse(_read(Path(override)), where)
        replaced = set(extra.gpus)
        data.aliases = {a: i for a, i in data.aliases.items() if i not in replaced}
        data.gpus.update(extra.gpus)
        data.aliases.update(extra.aliases)
        data.instance_types.update(extra.instance_types)
        data.families.update(extra.families)
    return _build(data, where)


_default: Catalog | None = None


def default_catalog() -> Catalog:
    """The built-in catalog (``catalog.yaml`` alone), loaded once per process: what
    inference uses when its caller passes no catalog. Nothing changes it; a ``--catalog``
    file is loaded into a `Catalog` of its own (`load_catalog`)."""
    global _default
    if _default is None:
        _default = load_catalog()
    return _default

