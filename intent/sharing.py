"""GPU demand through the extended resources of GPU-sharing device plugins, table-driven.

A purely computational module: no I/O, no awaits. `intent.demand.read_demand` calls
`read_layers` between tensor-fusion and whole devices. Each layer of `LAYERS` names the
resources its device plugin advertises, their units and where that is written (repo and
path, from docs/sources/ecosystem.md); `Source(<layer>, <resource>)` tokens name what was read.

**Reading one container of a layer** (table fields in brackets):

- ``[count]`` is the number of physical GPUs the container gets (a slice of each), 1 when
  absent. N >= 2 of them are N whole GPUs, as for HAMi (`intent.demand`): the Volcano vGPU
  plugin is HAMi's (Project-HAMi/volcano-vgpu-device-plugin) and places each vGPU of a
  container on its own card; Intel's ``i915``/``xe`` count is cards (GAS: "that POD will
  consume 1000 millicores from two GPUs").
- ``[shares]`` are percent-like resources over ``unit`` (100 = one GPU, Intel millicores
  1000 = one GPU); one device is the largest share. With ``[whole_shares]`` (Tencent qGPU
  ``qgpu-core``, tkestack ``vcuda-core``) a share of 1 or more must be whole and is that
  many whole GPUs (``qgpu-core: 200`` is two cards).
- ``[memory]`` times ``[memory_mib]`` is MiB (per GPU, or with ``[memory_total]`` over all
  the container's GPUs). Memory alone (no share) is a share of one GPU that only the GPU's
  memory tells: ``gpus`` counts it as a whole GPU and `Demand.memory_share_of` lets
  `intent.inference.infer` take memory / the model's memory once it knows the model.
- ``[refuse]``: the layer's GPUs are read but no intent is made (an `IntentError` saying
  why): Intel GPUs, which no Karpenter provider puts in an instance type's capacity
  (docs/inference.md, "Intel and AMD").

**MIG, mixed strategy** (NVIDIA/k8s-device-plugin README, ``--mig-strategy=mixed``):
``nvidia.com/mig-<g>g.<n>gb`` (suffixes ``.me``, ``.gfx``, ``.me.all``: ``internal/rm/rm.go``
replaces ``+`` by ``.``) asks for that many MIG devices; each is ``g`` of the parent's
compute slices (7; 4 on the A30), so ``q`` devices are ``q x g / slices`` of a GPU, summed.
The parent variants come from the catalog's ``mig_profiles`` (NVIDIA/mig-parted
``deployments/systemd/config-default.yaml``); when they are one model it is a model source.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final

from intent.catalog import Catalog, default_catalog
from intent.containers import (
    Containers,
    Demand,
    Resources,
    container_path,
    num,
    pod_total,
    quantity_of,
)
from intent.contract import IntentError, Source, check_mib

__all__ = ["LAYERS", "MIG_PREFIX", "Layer", "read_layers"]

_ZERO: Final = Decimal(0)
_ONE: Final = Decimal(1)


@dataclass(frozen=True, slots=True)
class Layer:
    """One sharing layer's extended resources (see the module docstring for the rules)."""

    name: str
    count: tuple[str, ...]
    shares: tuple[tuple[str, Decimal], ...]
    memory: str | None
    memory_mib: Decimal = _ONE
    memory_total: bool = False
    whole_shares: bool = False
    vendor: str = "nvidia"
    #: a memory value above this is read as MiB, not ``memory_mib`` units (Alibaba's
    #: ``--memory-unit=MiB``: no GPU has 512 GiB), with a note; None: never.
    mib_above: int | None = None
    refuse: str = ""
    docs: str = ""

    @property
    def keys(self) -> tuple[str, ...]:
        keys = [k for k, _ in self.shares]
        return tuple(k for k in (*self.count, *keys, self.memory) if k is not None)


_PERCENT: Final = Decimal(100)

#: The layers, in the order read (the first that gives demand wins, after HAMi, KAI and
#: tensor-fusion). Sources: docs/sources/ecosystem.md part A.
LAYERS: Final = (
    Layer(
        "volcano", ("volcano.sh/vgpu-number",),
        (("volcano.sh/vgpu-cores", _PERCENT), ("volcano.sh/vgpu-memory-percentage", _PERCENT)),
        "volcano.sh/vgpu-memory",
        docs="Project-HAMi/volcano-vgpu-device-plugin deployments/helm/volcano-vgpu-device-plugin/"
        "values.yaml (resourceCountName, resourceMemoryName: MiB per vGPU, resourceCoreName: "
        "percent), README, examples/vgpu-case02.yml",
    ),
    Layer(
        "volcano", (), (), "volcano.sh/gpu-memory",
        docs="volcano-sh/devices examples/gpu-share.yml (legacy GPU share, MB)",
    ),
    Layer(
        "aliyun", ("aliyun.com/gpu-count",), (("aliyun.com/gpu-core.percentage", _PERCENT),),
        "aliyun.com/gpu-mem", memory_mib=Decimal(1024), memory_total=True, mib_above=512,
        docs="AliyunContainerService/gpushare-device-plugin cmd/nvidia/main.go (--memory-unit "
        "default GiB), pkg/gpu/nvidia/const.go; kubeflow/arena pkg/apis/types "
        "(gpu-core.percentage)",
    ),
    Layer(
        "aliyun", ("aliyun.com/gpu",), (), None,
        docs="kubeflow/arena pkg/apis/types AliyunGPUResourceName (ACK topology-aware GPUs)",
    ),
    Layer(
        "qgpu", (), (("tke.cloud.tencent.com/qgpu-core", _PERCENT),),
        "tke.cloud.tencent.com/qgpu-memory", memory_mib=Decimal(1024), memory_total=True,
        whole_shares=True,
        docs="Tencent Cloud TKE qGPU docs (tencentcloud.com/document/product/457/59103): "
        "qgpu-core percent of a card, N*100 for N cards; qgpu-memory GiB",
    ),
    Layer(
        "vcuda", (), (("tencent.com/vcuda-core", _PERCENT),), "tencent.com/vcuda-memory",
        memory_mib=Decimal(256), memory_total=True, whole_shares=True,
        docs="tkestack/gpu-manager README (100 vcuda-core = 1 GPU; 1 vcuda-memory = 256Mi), "
        "pkg/types/types.go MemoryBlockSize",
    ),
    Layer(
        "intel", ("gpu.intel.com/i915", "gpu.intel.com/xe"), (("gpu.intel.com/millicores", Decimal(1000)),),
        "gpu.intel.com/memory.max", memory_mib=Decimal(1) / (1024 * 1024), memory_total=True,
        vendor="intel",
        refuse="Intel GPUs: no Karpenter provider puts gpu.intel.com in capacity; no intent",
        docs="intel/intel-device-plugins-for-kubernetes cmd/gpu_plugin/README.md (i915, xe), "
        "cmd/internal/labeler/labeler.go (millicoresPerGPU 1000, memory.max bytes)",
    ),
)  # fmt: skip

#: Resource name -> the layers that read it (one pass over a container's keys finds them).
_BY_KEY: Final[Mapping[str, tuple[int, ...]]] = {
    key: tuple(i for i, layer in enumerate(LAYERS) if key in layer.keys)
    for layer in LAYERS for key in layer.keys
}  # fmt: skip
_SOURCES: Final = {(layer.name, k): Source(layer.name, k) for layer in LAYERS for k in layer.keys}

#: The MIG mixed strategy's resource prefix and name (NVIDIA/k8s-device-plugin).
MIG_PREFIX: Final = "nvidia.com/mig-"
_MIG_RESOURCE: Final = re.compile(r"^nvidia\.com/mig-(\d{1,2})g\.(\d{1,4})gb((?:\.me|\.gfx|\.all)*)$")
#: Compute slices of a GPU under MIG when the profile's parent is not in the catalog.
_DEFAULT_SLICES: Final = 7


def _asked(pod: Containers) -> tuple[set[int], list[tuple[str, int, Resources, str]]]:
    """The layers any container asks for (indexes into `LAYERS`) and the MIG resources,
    ``(kind, index, resources, key)``: one pass over the containers' resource names."""
    layers: set[int] = set()
    mig: list[tuple[str, int, Resources, str]] = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(pod.of(kind)):
            res = pod.resources(kind, index, container)
            for key in res.values:
                hit = _BY_KEY.get(key)
                if hit is not None:
                    layers.update(hit)
                elif key.startswith(MIG_PREFIX):
                    mig.append((kind, index, res, key))
    return layers, mig


def _whole(value: Decimal, res: Resources, key: str) -> Decimal:
    if value != value.to_integral_value():
        raise IntentError(f"{res.where(key)}: {value} is not a whole number")
    return value


@dataclass(slots=True)
class _Tally:
    """What a layer's containers said, beyond their GPUs."""

    used: set[str]
    notes: list[str]
    memory: int | None = None
    memory_only: Decimal = _ZERO
    other: bool = False  # a container with a share or a count >= 2
    mib_note: bool = False


def _container(layer: Layer, res: Resources, where: str, tally: _Tally, explain: bool) -> Decimal:
    """One container's GPUs in ``layer`` (module docstring), recording memory in ``tally``."""
    values = res.values
    if not any(k in values for k in layer.keys):
        return _ZERO
    count: Decimal | None = None
    for key in layer.count:
        value = quantity_of(res, key)
        if value is not None:
            count = (count or _ZERO) + _whole(value, res, key)
            tally.used.add(key)
    if count == 0:
        return _ZERO
    devices = count if count is not None else _ONE
    share: Decimal | None = None
    for key, unit in layer.shares:
        value = quantity_of(res, key)
        if value is None or value == 0:
            continue
        tally.used.add(key)
        part = value / unit
        if part > 1 and not layer.whole_shares:
            raise IntentError(f"{res.where(key)}: {value} is more than one GPU ({unit})")
        share = part if share is None else max(share, part)
    gpus = devices if devices >= 2 else devices * (share if share is not None else _ONE)
    if share is not None and share >= 1 and layer.whole_shares:
        key = layer.shares[0][0]
        gpus = _whole(share, res, key)  # N*100: N whole cards
    memory = quantity_of(res, layer.memory) if layer.memory else None
    if memory is not None and memory > 0:
        tally.used.add(layer.memory or "")
        per_unit = layer.memory_mib
        if layer.mib_above is not None and memory > layer.mib_above:
            per_unit, tally.mib_note = _ONE, True
        mib = memory * per_unit
        if layer.memory_total and gpus >= 1:
            mib /= gpus.to_integral_value(rounding=ROUND_CEILING)
        mib_int = check_mib(int(mib.to_integral_value(rounding=ROUND_CEILING)), res.where(layer.memory or ""))
        tally.memory = max(tally.memory or 0, mib_int)
        if share is None and devices < 2:
            tally.memory_only += gpus
        else:
            tally.other = True
    else:
        tally.other = True
    if explain:
        if devices >= 2:
            said = f"{num(devices)} devices on {num(devices)} distinct GPUs"
        elif share is not None and share >= 1:
            said = f"{num(share * layer.shares[0][1])} {layer.shares[0][0].rsplit('/', 1)[-1]}: {num(gpus)} whole GPU(s)"
        elif share is not None:
            said = f"{num(share)} of one GPU"
        elif memory is not None and memory > 0:
            said = "memory only: one GPU until the model's memory is known"
        else:
            said = f"{num(gpus)} GPU(s)"
        tally.notes.append(f"{where}: {said}")
    return gpus


def _layer(pod: Containers, layer: Layer, explain: bool) -> Demand | None:
    """What ``layer``'s resources ask for, summed like the kube-scheduler sums requests."""
    tally = _Tally(set(), [])

    def per_container(kind: str, index: int, container: Mapping[str, Any]) -> Decimal:
        res = pod.resources(kind, index, container)
        return _container(layer, res, container_path(kind, index), tally, explain)

    gpus = pod_total(pod, per_container)
    if gpus <= 0:
        return None
    if layer.refuse:
        raise IntentError(f"{'/'.join(sorted(tally.used))}: {layer.refuse}")
    source = tuple(_SOURCES[(layer.name, k)] for k in layer.keys if k in tally.used)
    why = ""
    if explain:
        why = "; ".join(tally.notes) + f" ({layer.name}: {layer.docs.split(' (')[0]})"
        if tally.mib_note:
            why += f"; {layer.memory} over {layer.mib_above} read as MiB (--memory-unit=MiB)"
    memory_source = _SOURCES[(layer.name, layer.memory)] if tally.memory and layer.memory else None
    return Demand(
        gpus=gpus,
        source=source,
        why=why,
        gpu_memory_mib=tally.memory,
        memory_source=memory_source,
        vendor=layer.vendor,
        memory_share_of=tally.memory_only if tally.memory_only and not tally.other else None,
    )


def _mig(
    items: list[tuple[str, int, Resources, str]], catalog: Catalog, explain: bool
) -> Demand | None:
    """MIG devices of the mixed strategy (module docstring), summed over the containers
    (a MIG device is not shared, so init containers are not peaked here: they are few)."""
    total = _ZERO
    sources: dict[str, Source] = {}
    notes: list[str] = []
    ids: dict[str, None] = {}
    profiles: dict[str, None] = {}
    memory = 0
    for kind, index, res, key in items:
        m = _MIG_RESOURCE.match(key)
        if m is None:
            raise IntentError(f"{res.where(key)}: {key} is not a MIG profile resource")
        value = quantity_of(res, key)
        if value is None or value == 0:
            continue
        value = _whole(value, res, key)
        slices, gb = int(m[1]), int(m[2])
        profile = f"{slices}g.{gb}gb"
        parents = catalog.mig_parents(profile)
        per_gpu = parents[0].mig_slices if parents and parents[0].mig_slices else _DEFAULT_SLICES
        share = value * slices / per_gpu
        if kind == "containers":  # init containers run before: their slices are reused
            total += share
        ids.update(dict.fromkeys(g.id for g in parents))
        profiles[profile] = None
        memory = max(memory, gb * 1024)
        sources.setdefault(key, Source("mig", key))
        if explain:
            parent = ",".join(dict.fromkeys(g.model for g in parents)) or "unknown GPU"
            notes.append(f"{container_path(kind, index)}: {num(value)} x {profile}, each "
                         f"{slices}/{per_gpu} of one {parent} GPU")  # fmt: skip
    if total <= 0:
        return None
    models = {catalog.gpus[i].model for i in ids}
    why = "; ".join(notes) + " (NVIDIA MIG mixed strategy)" if explain else ""
    return Demand(
        gpus=total,
        source=tuple(sources.values()),
        why=why,
        gpu_memory_mib=memory or None,
        memory_source=next(iter(sources.values())) if memory else None,
        gpu_ids=tuple(ids) if len(models) == 1 and len(profiles) == 1 else (),
        mig=next(iter(profiles)) if len(profiles) == 1 else None,
    )


def read_layers(
    pod: Containers, explain: bool, catalog: Catalog | None = None
) -> list[tuple[str, Demand | IntentError]]:
    """Each layer the pod's containers ask for, in `LAYERS` order then MIG, with its
    demand or the `IntentError` reading it raised (``read_demand`` keeps the first demand
    and warns about the errors)."""
    asked, mig = _asked(pod)
    out: list[tuple[str, Demand | IntentError]] = []
    for i in sorted(asked):
        layer = LAYERS[i]
        try:
            demand = _layer(pod, layer, explain)
        except IntentError as e:
            out.append((layer.name, e))
            continue
        if demand is not None:
            out.append((layer.name, demand))
    if mig:
        try:
            found = _mig(mig, catalog or default_catalog(), explain)
        except IntentError as e:
            out.append(("mig", e))
        else:
            if found is not None:
                out.append(("mig", found))
    return out
