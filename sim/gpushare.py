"""A simple model of how GPU sharing layers place pods on a node's GPU devices.

A purely computational module with no side effects. Each GPU device has a capacity of
1.0 *share*; a pod asks for some number of distinct devices and a share on each. The
sim's scheduler calls `demand` for the pod, `node_devices` and `usage` for a node, then
`place` to pick devices by first fit, and records the result on the pod as the annotation
`DEVICES_ANNOTATION` (``"0:0.5,1:0.5"``: device index, colon, share), which later calls to
`usage` read back.

Where the demand rules come from:

- whole GPUs (``default-scheduler``, or a sharing scheduler without its own fields):
  the pod's effective ``nvidia.com/gpu`` request, each device fully used;
- HAMi (Project-HAMi/HAMi ``pkg/device/nvidia/device.go`` ``GenerateResourceRequests``):
  per container, ``nvidia.com/gpu`` = number of distinct devices (vGPUs, default 1 when
  only memory/cores are given), memory ``nvidia.com/gpumem`` MiB, else
  ``nvidia.com/gpumem-percentage``, else the whole device's memory (HAMi's default of
  100 %), and ``nvidia.com/gpucores`` percent; pod annotations ``nvidia.com/use-gputype``
  / ``nvidia.com/nouse-gputype`` are comma lists matched case-insensitively as
  substrings of the device type;
- KAI-Scheduler (kai-scheduler/KAI-Scheduler): annotations ``gpu-fraction`` on
  ``gpu-fraction-num-devices`` devices (default 1), or ``gpu-memory`` MiB per device;
- tensor-fusion (NexusGPU/tensor-fusion): annotations ``tensor-fusion.ai/gpu-count``
  (default 1), ``vram-request`` (bytes quantity), ``compute-percent-request``, and
  ``gpu-model`` (a case-insensitive substring of the device product).

The share a request takes on one device is the largest of its parts (memory share,
fraction, cores share); a memory request on a device of unknown memory takes the whole
device. Failure reasons use HAMi's vocabulary (``pkg/device/common``:
``NodeInsufficientDevice``, ``<n>/<total> CardTypeMismatch``,
``<n>/<total> CardInsufficientMemory``, ``<n>/<total> CardInsufficientCore``).

Devices come from NVIDIA GPU Feature Discovery node labels (``nvidia.com/gpu.count``,
``nvidia.com/gpu.memory`` in MiB, ``nvidia.com/gpu.product``), falling back to
``status.allocatable["nvidia.com/gpu"]`` devices of unknown memory and product.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any, Literal

from intent import keys
from intent.quantity import parse_quantity, to_mib
from sim.catalog import gpu_model
from sim.dra import runs_dra
from sim.scheduling import pod_requests

__all__ = [
    "DEVICES_ANNOTATION",
    "SHARING_RESOURCES",
    "Assignment",
    "Device",
    "DeviceRequest",
    "GpuDemand",
    "Layer",
    "NoFit",
    "demand",
    "format_assignment",
    "node_devices",
    "parse_assignment",
    "place",
    "usage",
]

#: Pod annotation the sim's scheduler writes at bind time: ``"<index>:<share>,..."``.
DEVICES_ANNOTATION = "sim.gpu-intent.io/gpu-devices"

GPU = keys.NVIDIA_GPU
HAMI_GPUMEM = keys.HAMI_GPUMEM
HAMI_GPUMEM_PERCENTAGE = keys.HAMI_GPUMEM_PERCENTAGE
HAMI_GPUCORES = keys.HAMI_GPUCORES
HAMI_USE_GPUTYPE = keys.HAMI_USE_GPUTYPE
HAMI_NOUSE_GPUTYPE = keys.HAMI_NOUSE_GPUTYPE
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"
KAI_NUM_DEVICES = "gpu-fraction-num-devices"
TF_ENABLED = "tensor-fusion.ai/enabled"
TF_COUNT = "tensor-fusion.ai/gpu-count"
TF_VRAM = "tensor-fusion.ai/vram-request"
TF_COMPUTE = "tensor-fusion.ai/compute-percent-request"
TF_MODEL = "tensor-fusion.ai/gpu-model"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_PRODUCT = "nvidia.com/gpu.product"

#: Resources HAMi's scheduler extender manages with ``ignoredByScheduler: true``, so
#: kube-scheduler's NodeResourcesFit does not count them for sharing-layer pods.
SHARING_RESOURCES = frozenset(
    {GPU, HAMI_GPUMEM, HAMI_GPUMEM_PERCENTAGE, HAMI_GPUCORES, "nvidia.com/priority"}
)

Layer = Literal["whole", "hami", "kai", "tensor-fusion"]
#: ``((device index, share), ...)``; an index may repeat (two containers on one device).
Assignment = tuple[tuple[int, float], ...]

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU: ``index`` on the node, ``memory_mib`` (None if unknown), ``product``."""

    index: int
    memory_mib: int | None = None
    product: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """``count`` distinct devices, each taking the largest of: ``memory_mib`` (MiB, as a
    share of the device's memory), ``memory_fraction`` (0-1, e.g. KAI ``gpu-fraction``,
    HAMi ``gpumem-percentage``/100) and ``compute_fraction`` (0-1, HAMi
    ``gpucores``/100, tensor-fusion ``compute-percent-request``/100); 1.0 if none."""

    count: int
    memory_mib: int | None = None
    memory_fraction: float | None = None
    compute_fraction: float | None = None

    def _memory_share(self, device: Device) -> float | None:
        if self.memory_mib is not None:
            return self.memory_mib / device.memory_mib if device.memory_mib else 1.0
        return self.memory_fraction

    def share_on(self, device: Device) -> float:
        """The share this request takes on ``device`` (above 1.0 it never fits)."""
        parts = [p for p in (self._memory_share(device), self.compute_fraction) if p is not None]
        return round(max(parts), 6) if parts else 1.0

    def memory_bound(self, device: Device) -> bool:
        """Whether memory (rather than compute) sets the share on ``device``."""
        memory = self._memory_share(device)
        return self.compute_fraction is None or (
            memory is not None and memory >= self.compute_fraction
        )


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """What one pod asks of a node's GPUs: per-container `DeviceRequest` s placed in
    order, and device-type filters: lowercase substrings of the product (HAMi's
    ``use-gputype``, matched as substrings of the device type, so ``L4`` also takes an
    ``L40S``), or with ``exact_model`` the model name itself (tensor-fusion's
    ``GPUModelFilter`` keeps a GPU only when its ``status.gpuModel`` equals the pod's
    ``gpu-model``: NexusGPU/tensor-fusion internal/gpuallocator/filter)."""

    layer: Layer
    requests: tuple[DeviceRequest, ...]
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    exact_model: bool = False

    def accepts(self, device: Device) -> bool:
        """Whether the type filters allow ``device`` (an unknown product fails a
        required type and passes an excluded one)."""
        if self.exact_model:
            return not self.use_types or (
                device.product is not None and gpu_model(device.product) in self.use_types
            )
        product = (device.product or "").lower()
        if self.use_types and not (device.product and any(t in product for t in self.use_types)):
            return False
        return not any(t in product for t in self.nouse_types if device.product)


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why `place` found no devices, in HAMi's reason vocabulary."""

    reason: str


def _number(raw: object, field: str) -> float:
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation as e:
        raise ValueError(f"{field}: {raw!r} is not a number") from e
    if not value.is_finite() or value < 0:
        raise ValueError(f"{field}: {raw!r} is not a non-negative number")
    return float(value)


def _types(raw: object) -> tuple[str, ...]:
    return tuple(t.strip().lower() for t in str(raw or "").split(",") if t.strip())


def _whole(pod: Mapping[str, Any], layer: Layer) -> GpuDemand | None:
    count = pod_requests(pod).get(GPU, Decimal(0))
    if count <= 0:
        return None
    whole = int(count.to_integral_value(rounding=ROUND_CEILING))
    return GpuDemand(layer, (DeviceRequest(whole, memory_fraction=1.0),))


def _hami(pod: Mapping[str, Any]) -> GpuDemand | None:
    spec = pod.get("spec") or {}
    requests: list[DeviceRequest] = []
    for i, container in enumerate(spec.get("containers") or ()):
        resources = container.get("resources") or {}
        limits: dict[str, Any] = dict(resources.get("requests") or {})
        limits.update(resources.get("limits") or {})  # HAMi reads limits first

        def get(key: str, limits: Mapping[str, Any] = limits, i: int = i) -> float | None:
            if key not in limits:
                return None
            return float(parse_quantity(limits[key], f"spec.containers[{i}][{key!r}]"))

        count, mem, percent, cores = (
            get(k) for k in (GPU, HAMI_GPUMEM, HAMI_GPUMEM_PERCENTAGE, HAMI_GPUCORES)
        )
        if count is None and mem is None and percent is None and cores is None:
            continue
        if count is None:
            count = 1.0  # HAMi's defaultGPUNum
        if count <= 0:
            continue
        memory_fraction: float | None = None
        if not mem:
            memory_fraction = percent / 100 if percent else 1.0  # HAMi default: 100 %
        requests.append(
            DeviceRequest(
                int(count),
                memory_mib=int(mem) if mem else None,
                memory_fraction=memory_fraction,
                compute_fraction=cores / 100 if cores else None,
            )
        )
    if not requests:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return GpuDemand(
        "hami",
        tuple(requests),
        _types(annotations.get(HAMI_USE_GPUTYPE)),
        _types(annotations.get(HAMI_NOUSE_GPUTYPE)),
    )


def _kai(pod: Mapping[str, Any]) -> GpuDemand | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if KAI_FRACTION not in annotations and KAI_MEMORY not in annotations:
        return _whole(pod, "kai")
    devices = int(_number(annotations.get(KAI_NUM_DEVICES, 1), KAI_NUM_DEVICES))
    fraction = None
    if KAI_FRACTION in annotations:
        fraction = _number(annotations[KAI_FRACTION], KAI_FRACTION)
    memory = None
    if KAI_MEMORY in annotations:
        memory = int(_number(annotations[KAI_MEMORY], KAI_MEMORY))
    request = DeviceRequest(max(devices, 1), memory_mib=memory, memory_fraction=fraction)
    return GpuDemand("kai", (request,))


def _tensor_fusion(pod: Mapping[str, Any]) -> GpuDemand | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not any(k in annotations for k in (TF_COUNT, TF_VRAM, TF_COMPUTE, TF_MODEL)):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(TF_ENABLED) != "true":
            return _whole(pod, "tensor-fusion")
    count = int(_number(annotations.get(TF_COUNT, 1), TF_COUNT))
    fraction = None
    if TF_COMPUTE in annotations:
        fraction = _number(annotations[TF_COMPUTE], TF_COMPUTE) / 100
    memory = to_mib(annotations[TF_VRAM], TF_VRAM) if TF_VRAM in annotations else None
    return GpuDemand(
        "tensor-fusion",
        (DeviceRequest(max(count, 1), memory_mib=memory, compute_fraction=fraction),),
        _types(annotations.get(TF_MODEL)),
        exact_model=True,
    )


def demand(pod: Mapping[str, Any]) -> GpuDemand | None:
    """The pod's GPU demand as the layer its ``spec.schedulerName`` names sees it, or
    None if it asks for no GPU.

    ``hami-scheduler`` reads HAMi container resources; ``kai-scheduler`` KAI annotations;
    ``tensor-fusion-scheduler`` (or the label ``tensor-fusion.ai/enabled=true``)
    tensor-fusion annotations; without those fields, and for every other scheduler, the
    pod's whole ``nvidia.com/gpu`` count (the default scheduler ignores the annotations
    and extended resources of the sharing layers).

    Raises:
        ValueError: a quantity or annotation value does not parse.
    """
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if scheduler == "hami-scheduler":
        return _hami(pod)
    if scheduler == "kai-scheduler":
        return _kai(pod)
    if scheduler == "tensor-fusion-scheduler" or labels.get(TF_ENABLED) == "true":
        return _tensor_fusion(pod)
    return _whole(pod, "whole")


def node_devices(node: Mapping[str, Any]) -> list[Device]:
    """The node's GPUs, indexed from 0, from GPU Feature Discovery labels
    (``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory`` MiB, ``nvidia.com/gpu.product``);
    without a count label, ``status.allocatable["nvidia.com/gpu"]`` devices of unknown
    memory. Unparsable values count as absent.

    A node that runs NVIDIA's DRA driver instead of its device plugin (`sim.dra.runs_dra`)
    has none for the sharing layers: they find GPUs through the device plugin (HAMi's own,
    REFERENCE.md section 3; KAI holds whole GPUs for fractions with reservation pods that
    request ``nvidia.com/gpu``, which such a node never advertises). Its GPUs are
    ResourceSlice devices, allocated only to ResourceClaims."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if runs_dra(labels):
        return []
    count: int | None = None
    try:
        count = int(labels[GFD_COUNT])
    except (KeyError, ValueError):
        raw = ((node.get("status") or {}).get("allocatable") or {}).get(GPU)
        if raw is not None:
            try:
                count = int(parse_quantity(raw, f"allocatable[{GPU!r}]"))
            except ValueError:
                count = None
    memory: int | None
    try:
        memory = int(labels[GFD_MEMORY])
    except (KeyError, ValueError):
        memory = None
    product = labels.get(GFD_PRODUCT) or None
    return [Device(i, memory, product) for i in range(max(count or 0, 0))]


def format_assignment(assignment: Assignment) -> str:
    """``((0, 0.5), (1, 0.5))`` -> ``"0:0.5,1:0.5"`` (shares on one device summed)."""
    merged: dict[int, float] = {}
    for index, share in assignment:
        merged[index] = merged.get(index, 0.0) + share
    return ",".join(f"{i}:{round(s, 6):g}" for i, s in sorted(merged.items()))


def parse_assignment(text: str) -> Assignment:
    """Inverse of `format_assignment`; malformed entries are skipped."""
    out: list[tuple[int, float]] = []
    for entry in text.split(","):
        index, _, share = entry.partition(":")
        try:
            out.append((int(index), float(share)))
        except ValueError:
            continue
    return tuple(out)


def usage(
    pods_on_node: Iterable[Mapping[str, Any]],
    devices: Sequence[Device] = (),
    *,
    hami_node: bool = False,
) -> list[float]:
    """Share used on each device (index -> 0.0..1.0) by the pods bound to a node.

    Pods carrying `DEVICES_ANNOTATION` count as recorded; bound pods without it (created
    with ``spec.nodeName``) are placed by first fit on ``devices`` in the order given,
    except, on a node running HAMi's device plugin (``hami_node``), pods of no sharing
    layer: HAMi counts only the pods it allocated devices to (its
    ``hami.io/vgpu-devices-allocated`` annotation), and kube-scheduler gives a plain
    ``nvidia.com/gpu`` pod there one of the split slots, not a device.
    Terminal pods (Succeeded/Failed) hold nothing. The list has at least
    ``len(devices)`` entries.
    """
    used = [0.0] * len(devices)
    unrecorded: list[Mapping[str, Any]] = []
    for pod in pods_on_node:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ANNOTATION)
        if recorded is None:
            unrecorded.append(pod)
            continue
        for index, share in parse_assignment(recorded):
            if index >= 0:
                used.extend([0.0] * (index + 1 - len(used)))
                used[index] += share
    for pod in unrecorded:
        try:
            wanted = demand(pod)
        except ValueError:
            continue
        if wanted is None or (hami_node and wanted.layer == "whole"):
            continue
        placed = place(wanted, devices, used)
        if not isinstance(placed, NoFit):
            for index, share in placed:
                used[index] += share
    return used


def place(
    wanted: GpuDemand, devices: Sequence[Device], used: Sequence[float]
) -> Assignment | NoFit:
    """First fit: for each request in order, the lowest-index devices the type filters
    accept whose free share (1.0 - ``used``) covers the request's share, distinct within
    a request. Returns the assignment, or `NoFit` with HAMi's reason."""
    free = [1.0 - (used[d.index] if d.index < len(used) else 0.0) for d in devices]
    chosen: list[tuple[int, float]] = []
    for request in wanted.requests:
        if request.count > len(devices):
            return NoFit("NodeInsufficientDevice")
        picked: list[tuple[int, float]] = []
        reasons: dict[str, int] = {}
        for slot, device in enumerate(devices):
            if len(picked) == request.count:
                break
            share = request.share_on(device)
            if not wanted.accepts(device):
                reasons["CardTypeMismatch"] = reasons.get("CardTypeMismatch", 0) + 1
            elif free[slot] + _EPS < share:
                why = (
                    "CardInsufficientMemory"
                    if request.memory_bound(device)
                    else "CardInsufficientCore"
                )
                reasons[why] = reasons.get(why, 0) + 1
            else:
                picked.append((slot, share))
        if len(picked) < request.count:
            return NoFit(", ".join(f"{n}/{len(devices)} {r}" for r, n in sorted(reasons.items())))
        for slot, share in picked:
            free[slot] -= share
            chosen.append((devices[slot].index, share))
    return tuple(chosen)
