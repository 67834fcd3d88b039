"""A simple model of how GPU sharing layers place pods on a node's GPU devices.

A purely computational module with no side effects. Each GPU device has a capacity of
1.0 *share*; a pod asks for some number of distinct devices and a share on each. The
sim's scheduler calls `demand` for the pod, `node_devices` and `usage` for a node, then
`place` to pick devices in its layer's order, and records the result on the pod as the annotation
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
  substrings of the device type; devices tried least used first (HAMi's default GPU
  policy ``spread``), or most used first for a pod annotated
  ``hami.io/gpu-scheduler-policy: binpack``;
- KAI-Scheduler (kai-scheduler/KAI-Scheduler): annotations ``gpu-fraction`` on
  ``gpu-fraction-num-devices`` devices (default 1), or ``gpu-memory`` MiB per device;
- tensor-fusion (NexusGPU/tensor-fusion): annotations ``tensor-fusion.ai/gpu-count``
  (default 1), ``vram-request`` (bytes quantity), ``compute-percent-request``, and
  ``gpu-model`` (a case-insensitive substring of the device product);
- Volcano vGPU (``schedulerName: volcano``; volcano-sh/volcano
  ``pkg/scheduler/api/devices/util.go`` ``ExtractResourceRequest``, `sim.volcano`): per
  container whose limits name ``volcano.sh/vgpu-number`` (that many distinct devices) or
  only ``volcano.sh/vgpu-memory`` (one), memory ``vgpu-memory`` MiB (limits, else
  requests), overridden by ``vgpu-memory-percentage``, else the whole device's memory,
  and ``vgpu-cores`` percent; HAMi's ``use-gputype`` (which wins) / ``nouse-gputype``
  annotations; devices visited by binpack (most used first);
- Alibaba gpushare (default scheduler plus gpushare's extender, `sim.aliyun`): the
  containers' ``aliyun.com/gpu-mem`` limits summed, GiB, on one device, chosen by
  binpack (the least memory left that fits).

The share a request takes on one device is the largest of its parts (memory share,
fraction, cores share); a memory request on a device of unknown memory takes the whole
device. Failure reasons use HAMi's vocabulary (``pkg/device/common``:
``NodeInsufficientDevice``, ``<n>/<total> CardTypeMismatch``,
``<n>/<total> CardInsufficientMemory``, ``<n>/<total> CardInsufficientCore``), except
Volcano's (`sim.volcano.DEVICE_SHARING_ERROR`) and gpushare's extender's
(`sim.aliyun.INSUFFICIENT`).

Devices come from NVIDIA GPU Feature Discovery node labels (``nvidia.com/gpu.count``,
``nvidia.com/gpu.memory`` in MiB, ``nvidia.com/gpu.product``), falling back to
``status.allocatable["nvidia.com/gpu"]`` devices of unknown memory and product; on a
gpushare node, from its ``aliyun.com/*`` capacity as the extender reads it. Which layer
may use a node's devices depends on the agent serving it (`sim.deviceplugins`, `serves`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any, Final, Literal

from intent import keys
from intent.quantity import parse_quantity, to_mib
from sim import aliyun, deviceplugins, volcano
from sim.catalog import gpu_model
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
    "Policy",
    "bind_annotations",
    "demand",
    "format_assignment",
    "no_devices_reason",
    "node_devices",
    "parse_assignment",
    "place",
    "serves",
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
_MIB_PER_GIB = 1024

#: Resources HAMi's scheduler extender manages with ``ignoredByScheduler: true``, so
#: kube-scheduler's NodeResourcesFit does not count them for sharing-layer pods.
SHARING_RESOURCES = frozenset(
    {GPU, HAMI_GPUMEM, HAMI_GPUMEM_PERCENTAGE, HAMI_GPUCORES, "nvidia.com/priority"}
)

Layer = Literal["whole", "hami", "kai", "tensor-fusion", "volcano", "aliyun"]
#: Device order `place` tries: by index, the most used first, or the least used first
#: (ties by index).
Policy = Literal["first-fit", "binpack", "spread"]
#: HAMi's per-pod override of its GPU policy (``binpack`` or ``spread``), and the default
#: when a pod names none: ``GPUSchedulerPolicy = spread`` (Project-HAMi/HAMi
#: ``pkg/scheduler/config/config.go``; its scheduler's ``gpuSchedulerPolicy`` setting).
HAMI_GPU_POLICY_ANNOTATION: Final = "hami.io/gpu-scheduler-policy"
HAMI_DEFAULT_GPU_POLICY: Final[Policy] = "spread"
#: ``((device index, share), ...)``; an index may repeat (two containers on one device).
Assignment = tuple[tuple[int, float], ...]

#: Slack when comparing shares (rounded to 9 places): far below a MiB of any GPU.
_EPS = 1e-7

#: The layers whose pods may take devices of a node each agent serves (`serves`). A
#: plain ``nvidia.com/gpu`` pod on a HAMi node takes a split slot, no device; KAI's pods
#: never get HAMi's devices (`sim.scheduler.KAI_ON_HAMI`).
_SERVED: Final[Mapping[deviceplugins.Plugin, frozenset[Layer]]] = {
    "nvidia": frozenset({"whole", "kai", "tensor-fusion"}),
    "hami": frozenset({"whole", "hami", "tensor-fusion"}),
    "volcano": frozenset({"volcano"}),
    "gpushare": frozenset({"aliyun"}),
    "mig": frozenset(),
    "dra": frozenset(),
}


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
        return round(max(parts), 9) if parts else 1.0

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
    ``gpu-model``: NexusGPU/tensor-fusion internal/gpuallocator/filter). ``policy``
    orders the devices `place` tries."""

    layer: Layer
    requests: tuple[DeviceRequest, ...]
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    exact_model: bool = False
    policy: Policy = "first-fit"

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
    asked = annotations.get(HAMI_GPU_POLICY_ANNOTATION)
    policy: Policy = asked if asked in ("binpack", "spread") else HAMI_DEFAULT_GPU_POLICY
    return GpuDemand(
        "hami",
        tuple(requests),
        _types(annotations.get(HAMI_USE_GPUTYPE)),
        _types(annotations.get(HAMI_NOUSE_GPUTYPE)),
        policy=policy,
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


def _volcano_request(
    limits: Mapping[str, Any], requests: Mapping[str, Any], i: int
) -> DeviceRequest:
    """One container's vGPUs as ``ExtractResourceRequest`` reads them (module doc)."""

    def get(key: str, *, fallback: bool = True) -> float | None:
        source = limits if key in limits else requests if fallback else {}
        if key not in source:
            return None
        return float(parse_quantity(source[key], f"spec.containers[{i}][{key!r}]"))

    count = get(volcano.NUMBER, fallback=False)
    memory, percent = get(volcano.MEMORY), get(volcano.MEMORY_PERCENTAGE)
    cores = get(volcano.CORES)
    fraction: float | None = None
    if percent is not None:  # a percentage wins over vgpu-memory
        fraction, memory = percent / 100, None
    elif not memory:
        fraction, memory = 1.0, None  # neither: 100 % of the card
    return DeviceRequest(
        int(count) if count is not None else 1,
        memory_mib=int(memory) if memory else None,
        memory_fraction=fraction,
        compute_fraction=cores / 100 if cores else None,
    )


def _volcano(pod: Mapping[str, Any]) -> GpuDemand | None:
    requests: list[DeviceRequest] = []
    for i, container in enumerate((pod.get("spec") or {}).get("containers") or ()):
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if volcano.NUMBER not in limits and volcano.MEMORY not in limits:
            continue  # not a vGPU container (``checkVGPUResourcesInPod`` reads limits)
        request = _volcano_request(limits, resources.get("requests") or {}, i)
        if request.count > 0:
            requests.append(request)
    if not requests:
        return _whole(pod, "whole")
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    use = _types(annotations.get(HAMI_USE_GPUTYPE))
    nouse = () if use else _types(annotations.get(HAMI_NOUSE_GPUTYPE))  # checkGPUtype
    return GpuDemand("volcano", tuple(requests), use, nouse, policy="binpack")


def _aliyun(pod: Mapping[str, Any]) -> GpuDemand | None:
    gib = aliyun.pod_gpu_mem(pod)
    if gib <= 0:
        return None
    request = DeviceRequest(1, memory_mib=gib * _MIB_PER_GIB)
    return GpuDemand("aliyun", (request,), policy="binpack")


def demand(pod: Mapping[str, Any]) -> GpuDemand | None:
    """The pod's GPU demand as the layer its ``spec.schedulerName`` names sees it, or
    None if it asks for no GPU.

    ``hami-scheduler`` reads HAMi container resources; ``kai-scheduler`` KAI annotations;
    ``tensor-fusion-scheduler`` (or the label ``tensor-fusion.ai/enabled=true``)
    tensor-fusion annotations; ``volcano`` Volcano's vGPU resources; without those
    fields, and for every other scheduler, the pod's whole ``nvidia.com/gpu`` count (the
    default scheduler ignores the annotations and extended resources of the sharing
    layers), except that the default scheduler's gpushare extender places a pod asking
    ``aliyun.com/gpu-mem`` (and no ``nvidia.com/gpu``).

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
    if scheduler == volcano.SCHEDULER_NAME:
        return _volcano(pod)
    whole = _whole(pod, "whole")
    if whole is None and scheduler == "default-scheduler":
        return _aliyun(pod)
    return whole


def node_devices(
    node: Mapping[str, Any], plugin: deviceplugins.Plugin | None = None
) -> list[Device]:
    """The node's GPUs, indexed from 0, from GPU Feature Discovery labels
    (``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory`` MiB, ``nvidia.com/gpu.product``);
    without a count label, ``status.allocatable["nvidia.com/gpu"]`` devices of unknown
    memory. Unparsable values count as absent. ``plugin`` is the node's agent
    (`sim.deviceplugins.node_plugin` when not given).

    A gpushare node's are what gpushare's extender reads (`sim.aliyun.node_gpus`:
    ``aliyun.com/gpu-count`` devices of ``aliyun.com/gpu-mem`` // count GiB each). A node
    that runs NVIDIA's DRA driver instead of its device plugin has none for the sharing
    layers: they find GPUs through the device plugin (HAMi's own, REFERENCE.md section 3;
    KAI holds whole GPUs for fractions with reservation pods that request
    ``nvidia.com/gpu``, which such a node never advertises); its GPUs are ResourceSlice
    devices, allocated only to ResourceClaims. Nor has a MIG node: its GPUs are split
    into MIG devices, each its own ``nvidia.com/mig-<profile>`` resource."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    plugin = deviceplugins.node_plugin(node) if plugin is None else plugin
    if plugin in ("dra", "mig"):
        return []
    if plugin == "gpushare":
        gpus, gib = aliyun.node_gpus(node)
        product = labels.get(GFD_PRODUCT) or None
        return [Device(i, gib * _MIB_PER_GIB, product) for i in range(gpus)]
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
    plugin: deviceplugins.Plugin = "nvidia",
) -> list[float]:
    """Share used on each device (index -> 0.0..1.0) by the pods bound to a node whose
    GPU agent is ``plugin`` (`sim.deviceplugins`).

    Pods carrying `DEVICES_ANNOTATION` count as recorded; bound pods without it (created
    with ``spec.nodeName``) are placed by first fit on ``devices`` in the order given,
    except, on a node running HAMi's device plugin, pods of no sharing layer: HAMi counts
    only the pods it allocated devices to (its ``hami.io/vgpu-devices-allocated``
    annotation), and kube-scheduler gives a plain ``nvidia.com/gpu`` pod there one of the
    split slots, not a device. Volcano counts only the pods it assigned devices to (its
    ``volcano.sh/vgpu-ids-new`` annotation; the sim's is `DEVICES_ANNOTATION`). On a
    gpushare node only gpushare's own record counts, GiB exact (`sim.aliyun.recorded`:
    ``ALIYUN_COM_GPU_MEM_POD`` GiB on GPU ``ALIYUN_COM_GPU_MEM_IDX``). Terminal pods
    (Succeeded/Failed) hold nothing. The list has at least ``len(devices)`` entries.
    """
    used = [0.0] * len(devices)
    unrecorded: list[Mapping[str, Any]] = []
    for pod in pods_on_node:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if plugin == "gpushare":
            _add_aliyun(used, devices, pod)
            continue
        recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ANNOTATION)
        if recorded is None:
            unrecorded.append(pod)
            continue
        for index, share in parse_assignment(recorded):
            if index >= 0:
                used.extend([0.0] * (index + 1 - len(used)))
                used[index] += share
    for pod in unrecorded if plugin != "volcano" else ():
        try:
            wanted = demand(pod)
        except ValueError:
            continue
        if wanted is None or (plugin == "hami" and wanted.layer == "whole"):
            continue
        placed = place(wanted, devices, used)
        if not isinstance(placed, NoFit):
            for index, share in placed:
                used[index] += share
    return used


def _add_aliyun(used: list[float], devices: Sequence[Device], pod: Mapping[str, Any]) -> None:
    """Add a pod's gpushare record (`sim.aliyun.recorded`) to ``used``."""
    record = aliyun.recorded(pod)
    if record is None or record[0] >= len(devices):
        return  # the extender skips a pod without a GPU index (or an unknown GPU)
    index, gib = record
    memory = devices[index].memory_mib
    if memory:
        used[index] += gib * _MIB_PER_GIB / memory


def place(
    wanted: GpuDemand, devices: Sequence[Device], used: Sequence[float]
) -> Assignment | NoFit:
    """For each request in order, the first devices the type filters accept whose free
    share (1.0 - ``used``) covers the request's share, distinct within a request, trying
    devices by index (``first-fit``), with ``binpack`` the most used first (Volcano's
    ``sortedDeviceIndicesByPolicy``, gpushare's ``allocateGPUID``), with ``spread`` the
    least used first (HAMi's default: ``DeviceUsageList`` sorted by usage score,
    ``pkg/scheduler/policy/gpu_policy.go``), ties by index.
    Returns the assignment, or `NoFit` with HAMi's reason (Volcano's and gpushare's own
    for their layers, `no_devices_reason`)."""
    free = [1.0 - (used[d.index] if d.index < len(used) else 0.0) for d in devices]
    chosen: list[tuple[int, float]] = []
    for request in wanted.requests:
        if request.count > len(devices):
            return NoFit(_LAYER_REASONS.get(wanted.layer, "NodeInsufficientDevice"))
        slots: Sequence[int] = range(len(devices))
        if wanted.policy == "binpack":
            slots = sorted(slots, key=lambda slot: (free[slot], slot))
        elif wanted.policy == "spread":
            slots = sorted(slots, key=lambda slot: (-free[slot], slot))
        picked: list[tuple[int, float]] = []
        reasons: dict[str, int] = {}
        for slot in slots:
            if len(picked) == request.count:
                break
            device = devices[slot]
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
            hami = ", ".join(f"{n}/{len(devices)} {r}" for r, n in sorted(reasons.items()))
            return NoFit(_LAYER_REASONS.get(wanted.layer, hami))
        for slot, share in picked:
            free[slot] -= share
            chosen.append((devices[slot].index, share))
    return tuple(chosen)


#: What Volcano's and gpushare's schedulers say of a node whose devices cannot take a pod.
_LAYER_REASONS: Final[Mapping[Layer, str]] = {
    "volcano": volcano.DEVICE_SHARING_ERROR,
    "aliyun": aliyun.INSUFFICIENT,
}


def serves(plugin: deviceplugins.Plugin, layer: Layer) -> bool:
    """Whether pods of ``layer`` may take devices on a node served by ``plugin``:
    NVIDIA's plugin serves whole GPUs, KAI and tensor-fusion; HAMi's its own pods, whole
    ``nvidia.com/gpu`` pods (split slots) and tensor-fusion; Volcano's only Volcano's pods;
    gpushare's only pods its extender places; MIG and DRA nodes none."""
    return layer in _SERVED[plugin]


def no_devices_reason(layer: Layer, node_name: str) -> str:
    """The reason a node whose agent has no devices for ``layer`` fails the pod with:
    gpushare's extender's ``The node <name> is not for GPU share, need skip``,
    Volcano's `sim.volcano.DEVICE_SHARING_ERROR`, else HAMi's ``NodeInsufficientDevice``."""
    if layer == "aliyun":
        return aliyun.NOT_FOR_GPU_SHARE.format(node_name)
    if layer == "volcano":
        return volcano.DEVICE_SHARING_ERROR
    return "NodeInsufficientDevice"


def bind_annotations(
    wanted: GpuDemand, devices: Sequence[Device], assignment: Assignment, now_ns: int
) -> dict[str, str]:
    """Annotations a layer's binder writes beside the sim's `DEVICES_ANNOTATION`:
    gpushare's extender's (`sim.aliyun.bind_annotations`: GPU index, its GiB, the pod's
    GiB, ``ASSIGNED: "false"``, assume time ``now_ns``); none for the other layers."""
    if wanted.layer != "aliyun" or not assignment or not wanted.requests:
        return {}
    index = assignment[0][0]
    device = next((d for d in devices if d.index == index), None)
    per_device = (device.memory_mib or 0) // _MIB_PER_GIB if device is not None else 0
    pod_gib = (wanted.requests[0].memory_mib or 0) // _MIB_PER_GIB
    return aliyun.bind_annotations(index, per_device, pod_gib, now_ns)
