"""What a pod asks for through GPU-sharing layers and device requests, in GPUs.

A purely computational module: no I/O, no awaits. `read_demand` reads every source
(HAMi, KAI-Scheduler, tensor-fusion, whole ``nvidia.com/gpu`` / ``amd.com/gpu``) and keeps
the first that gives demand; `intent.inference` adds the model, pool and the user's
annotations. Every rule names its source in the reader's docstring. The extended-resource
sharing layers (Volcano vGPU, Alibaba gpushare, Tencent qGPU and vcuda, NVIDIA MIG mixed
strategy, Intel) are read by `intent.sharing`, between tensor-fusion and whole devices.
The containers' resources and `Demand` are `intent.containers`'s (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final

from intent import keys, sharing
from intent.containers import MAX_CONTAINERS, MAX_WARNING, Demand, as_mapping, brief, short
from intent.containers import Containers as _Containers
from intent.containers import container_path as _path
from intent.containers import num as _num
from intent.containers import percent_share as _percent_share
from intent.containers import pod_total as _pod_total
from intent.containers import quantity_of as _quantity
from intent.containers import string_of as _string
from intent.contract import IntentError, Source, check_mib, format_gpus
from intent.quantity import to_mib
from intent.text import show

if TYPE_CHECKING:
    from intent.catalog import Catalog

__all__ = [
    "AMD_GPU_RESOURCE",
    "GPU_RESOURCE",
    "HAMI_NOUSE_GPUTYPE",
    "HAMI_USE_GPUTYPE",
    "MAX_CONTAINERS",
    "MAX_WARNING",
    "TF_GPUPOOL",
    "TF_GPU_MODEL",
    "Demand",
    "as_mapping",
    "brief",
    "read_demand",
    "short",
    "show",
]

#: The GPU extended resources and HAMi's keys, under the names inference uses
#: (defined in `intent.keys`).
GPU_RESOURCE: Final = keys.NVIDIA_GPU
AMD_GPU_RESOURCE: Final = keys.AMD_GPU
HAMI_GPUMEM: Final = keys.HAMI_GPUMEM
HAMI_GPUMEM_PERCENTAGE: Final = keys.HAMI_GPUMEM_PERCENTAGE
HAMI_GPUCORES: Final = keys.HAMI_GPUCORES
HAMI_USE_GPUTYPE: Final = keys.HAMI_USE_GPUTYPE
HAMI_NOUSE_GPUTYPE: Final = keys.HAMI_NOUSE_GPUTYPE
_HAMI_RESOURCES: Final = (HAMI_GPUMEM, HAMI_GPUMEM_PERCENTAGE, HAMI_GPUCORES)

KAI_GPU_FRACTION: Final = "gpu-fraction"
KAI_GPU_MEMORY: Final = "gpu-memory"
KAI_NUM_DEVICES: Final = "gpu-fraction-num-devices"
#: GPUs one device's worth of a memory-only KAI request counts as: node-scale-adjuster's
#: GPUMemoryToFractionRatio default (kai-scheduler/KAI-Scheduler PR #425).
KAI_MEMORY_FRACTION: Final = Decimal("0.1")

TF_ENABLED_LABEL: Final = "tensor-fusion.ai/enabled"
TF_GPU_MODEL: Final = "tensor-fusion.ai/gpu-model"
TF_GPU_COUNT: Final = "tensor-fusion.ai/gpu-count"
TF_VRAM_REQUEST: Final = "tensor-fusion.ai/vram-request"
TF_TFLOPS_REQUEST: Final = "tensor-fusion.ai/tflops-request"
TF_COMPUTE_PERCENT: Final = "tensor-fusion.ai/compute-percent-request"
TF_GPUPOOL: Final = ("tensor-fusion.ai/gpupool", "tensor-fusion.ai/gpu-pool")
_TF_ANNOTATIONS: Final = (
    TF_GPU_MODEL, TF_GPU_COUNT, TF_VRAM_REQUEST, TF_TFLOPS_REQUEST, TF_COMPUTE_PERCENT,
)  # fmt: skip


#: The demand sources in precedence order (the error and warning prefixes name them).
_LAYERS: Final = ("hami", "kai", "tensor-fusion", "sharing", "resources")


_ZERO: Final = Decimal(0)
_ONE: Final = Decimal(1)

#: The rule token of `read_demand` keeping the first of demand sources that disagree.
RULE_GPUS_EARLIER: Final = Source("rule", "gpus-earlier-source")
#: The sources of the keys the readers read, by key, made once (a review makes none).
_HAMI_SOURCES: Final = {k: Source("hami", k) for k in (GPU_RESOURCE, *_HAMI_RESOURCES)}
_KAI_SOURCES: Final = {
    k: Source("kai", k) for k in (KAI_GPU_FRACTION, KAI_GPU_MEMORY, KAI_NUM_DEVICES)
}
_TF_SOURCES: Final = {k: Source("tensor-fusion", k) for k in (TF_ENABLED_LABEL, *_TF_ANNOTATIONS)}
#: Whole-device resources in the order read: (resource, vendor, its source).
_WHOLE_RESOURCES: Final = tuple(
    (resource, vendor, Source("resources", resource))
    for resource, vendor in ((GPU_RESOURCE, "nvidia"), (AMD_GPU_RESOURCE, "amd"))
)


def _hami(pod: _Containers, explain: bool) -> Demand | None:
    """HAMi demand (Project-HAMi/HAMi): container resources, summed like the scheduler does.

    Per container, in GPUs:

    - ``nvidia.com/gpu`` is the container's vGPU count, 1 when absent (HAMi's webhook sets
      ``defaultGPUNum``, 1: ``mutateContainerResource`` in pkg/device/nvidia/device.go).
    - One vGPU is the share of one GPU it takes: the largest of ``nvidia.com/gpucores``/100
      and ``nvidia.com/gpumem-percentage``/100, or 1 when neither is given
      (``nvidia.com/gpumem`` MiB cannot become a share without knowing the GPU's memory).
    - N >= 2 vGPUs are N whole GPUs: HAMi's ``Fit`` (pkg/device/nvidia/device.go) takes at
      most one vGPU from each physical GPU of the node for a container (``k.Nums--`` once
      per device), so the N vGPUs land on N distinct GPUs; the HAMi examples say so
      (examples/nvidia/use_memory_fraction.yaml: "how many physical GPUs the pod needs",
      examples/nvidia/vllm_cross_vgpu.yaml: 2 vGPUs for tensor parallel workers). The
      source then names ``hami:nvidia.com/gpu`` when a share was given, as the count, not
      the share, decided the GPUs.

    ``gpu_memory_mib`` is the largest ``nvidia.com/gpumem`` (MiB per vGPU, hence per
    physical GPU) of any container.
    """
    if not _asks_hami(pod):
        return None
    used: set[str] = set()
    notes: list[str] = []
    memory: int | None = None

    def per_container(kind: str, index: int, container: Mapping[str, Any]) -> Decimal:
        nonlocal memory
        res = pod.resources(kind, index, container)
        values = res.values
        if GPU_RESOURCE not in values and HAMI_GPUMEM not in values \
                and HAMI_GPUMEM_PERCENTAGE not in values and HAMI_GPUCORES not in values:  # fmt: skip
            return _ZERO
        count = _quantity(res, GPU_RESOURCE)
        if count is None:
            count = _ONE
        shares: list[Decimal] = []
        for key in (HAMI_GPUCORES, HAMI_GPUMEM_PERCENTAGE):
            share = _percent_share(res, key)
            if share is not None:
                shares.append(share)
                used.add(key)
        gpumem = _quantity(res, HAMI_GPUMEM)
        if gpumem is not None and gpumem > 0:
            mib = check_mib(int(gpumem.to_integral_value(rounding=ROUND_CEILING)),  # already MiB
                            res.where(HAMI_GPUMEM))  # fmt: skip
            used.add(HAMI_GPUMEM)
            memory = max(memory or 0, mib)
        share = max(shares, default=_ONE)
        if count >= 2:  # one vGPU per physical GPU: N distinct GPUs, whole
            if shares:
                used.add(GPU_RESOURCE)
            if explain:
                notes.append(f"{_path(kind, index)}: {_num(count)} vGPUs on {_num(count)} distinct GPUs")
            return count
        if explain:
            notes.append(f"{_path(kind, index)}: {_num(count)} vGPU of {_num(share)} GPU")
        return count * share

    gpus = _pod_total(pod, per_container)
    if gpus <= 0:
        return None
    source = tuple(_HAMI_SOURCES[key] for key in (GPU_RESOURCE, *_HAMI_RESOURCES) if key in used)
    why = "; ".join(notes) + " (HAMi places each vGPU of a container on its own GPU)" \
        if explain else ""  # fmt: skip
    return Demand(
        gpus=gpus,
        source=source or (_HAMI_SOURCES[GPU_RESOURCE],),
        why=why,
        gpu_memory_mib=memory,
        memory_source=_HAMI_SOURCES[HAMI_GPUMEM] if memory else None,
    )


def _asks_hami(pod: _Containers) -> bool:
    """Whether any container (init containers first) has a HAMi resource."""
    init, regular = pod.of("initContainers"), pod.of("containers")
    for kind, containers in (("initContainers", init), ("containers", regular)):
        for index, container in enumerate(containers):
            values = pod.resources(kind, index, container).values
            if HAMI_GPUMEM in values or HAMI_GPUMEM_PERCENTAGE in values \
                    or HAMI_GPUCORES in values:  # fmt: skip
                return True
    return False


def _decimal(annotations: Mapping[str, Any], key: str) -> Decimal:
    """Annotation ``key`` as a plain decimal number of magnitude 1e-9 .. 1e9 (or 0)."""
    where = f"metadata.annotations[{key!r}]"
    raw = _string(annotations[key], where)
    try:
        value = Decimal(raw.strip())
    except InvalidOperation as e:
        raise IntentError(f"{where}: {show(raw)} is not a number") from e
    if not value.is_finite():
        raise IntentError(f"{where}: {show(raw)} is not a number")
    if value and not -9 <= value.adjusted() <= 9:
        raise IntentError(f"{where}: {show(raw)} is out of range")
    return value


def _positive_int(annotations: Mapping[str, Any], key: str) -> int:
    value = _decimal(annotations, key)
    if value <= 0 or value != value.to_integral_value():
        raise IntentError(
            f"metadata.annotations[{key!r}]: {show(annotations[key])} "
            "must be a positive whole number"
        )
    return int(value)


def _kai(annotations: Mapping[str, Any], explain: bool) -> Demand | None:
    """KAI-Scheduler demand (kai-scheduler/KAI-Scheduler pod annotations), in GPUs.

    One device (``gpu-fraction-num-devices`` absent or 1) is ``gpu-fraction`` GPUs
    (0 < f <= 1), so two ``0.5`` pods can share one GPU. A ``gpu-memory`` (MiB per device)
    request without a fraction counts as `KAI_MEMORY_FRACTION` (0.1) GPU, as KAI's
    node-scale-adjuster counts it.

    ``gpu-fraction-num-devices: N`` >= 2 is N whole GPUs: KAI reads it as N devices each
    with that fraction or memory (``NewGpuResourceRequirementWithMultiFraction(numDevices,
    fraction, memory)`` in pkg/scheduler/api/pod_info/pod_info.go; the annotation is
    ``GpuFractionsNumDevices`` in pkg/common/constants/constants.go; Run:ai's docs: "the
    number of GPU devices to allocate using the specified gpu-fraction or gpu-memory
    value"), each device its own GPU. ``gpu_memory_mib`` is ``gpu-memory``, MiB per device.
    """
    if KAI_GPU_FRACTION not in annotations and KAI_GPU_MEMORY not in annotations:
        return None
    source = [s for k, s in _KAI_SOURCES.items() if k in annotations]
    devices = 1
    if KAI_NUM_DEVICES in annotations:
        devices = _positive_int(annotations, KAI_NUM_DEVICES)
    memory: int | None = None
    if KAI_GPU_MEMORY in annotations:
        memory = _positive_int(annotations, KAI_GPU_MEMORY)
    fraction = KAI_MEMORY_FRACTION
    if KAI_GPU_FRACTION in annotations:
        fraction = _decimal(annotations, KAI_GPU_FRACTION)
        if not 0 < fraction <= 1:
            raise IntentError(
                f"metadata.annotations[{KAI_GPU_FRACTION!r}]: {fraction} must be in (0, 1]"
            )
    if not explain:
        why = ""
    elif devices >= 2:  # N distinct devices: N GPUs
        why = f"{devices} devices (gpu-fraction-num-devices) are {devices} distinct GPUs (KAI-Scheduler)"
    elif KAI_GPU_FRACTION in annotations:
        why = f"gpu-fraction {_num(fraction)} of one GPU (KAI-Scheduler)"
    else:
        why = f"gpu-memory without gpu-fraction counts {fraction} GPU (KAI node-scale-adjuster)"
    gpus = Decimal(devices) if devices >= 2 else fraction
    return Demand(
        gpus=gpus,
        source=tuple(source),
        why=why,
        gpu_memory_mib=memory,
        memory_source=_KAI_SOURCES[KAI_GPU_MEMORY] if memory else None,
    )


def _tensor_fusion(
    labels: Mapping[str, Any], annotations: Mapping[str, Any], explain: bool
) -> Demand | None:
    """tensor-fusion demand (NexusGPU/tensor-fusion pod label and annotations), in GPUs.

    One GPU (``gpu-count`` absent or 1) is ``compute-percent-request``/100 GPUs, 1 when
    absent; ``tflops-request`` alone gives share 1 (TFLOPs need the GPU's peak to become
    a share). ``gpu-count: N`` >= 2 is N whole GPUs: tensor-fusion's ``GpuAllocator``
    (internal/gpuallocator/gpuallocator.go) selects ``req.Count`` distinct GPUs of one
    node (``SelectGPUs``, ``NewSameNodeFilter``) and ``Bind`` takes the whole request
    (TFLOPs and VRAM) from each of them. ``vram-request`` is a byte quantity (``"20Gi"``)
    per GPU -> ``gpu_memory_mib`` (MiB per GPU). Model and pool are read by `infer`.
    """
    if labels.get(TF_ENABLED_LABEL) != "true" and TF_GPU_MODEL not in annotations \
            and TF_GPU_COUNT not in annotations and TF_VRAM_REQUEST not in annotations \
            and TF_TFLOPS_REQUEST not in annotations and TF_COMPUTE_PERCENT not in annotations:
        return None  # the label and every annotation of _TF_ANNOTATIONS absent
    source: list[Source] = []

    token = _TF_SOURCES.__getitem__

    count = 1
    if TF_GPU_COUNT in annotations:
        count = _positive_int(annotations, TF_GPU_COUNT)
        source.append(token(TF_GPU_COUNT))
    share = Decimal(1)
    if TF_COMPUTE_PERCENT in annotations:
        where = f"metadata.annotations[{TF_COMPUTE_PERCENT!r}]"
        percent = _decimal(annotations, TF_COMPUTE_PERCENT)
        if not 0 < percent <= 100:
            raise IntentError(f"{where}: {percent} must be in (0, 100]")
        share = percent / 100
        source.append(token(TF_COMPUTE_PERCENT))
    memory: int | None = None
    if TF_VRAM_REQUEST in annotations:
        where = f"metadata.annotations[{TF_VRAM_REQUEST!r}]"
        memory = to_mib(_string(annotations[TF_VRAM_REQUEST], where), where)
        if memory <= 0:
            raise IntentError(f"{where}: {show(annotations[TF_VRAM_REQUEST])} must be > 0")
        check_mib(memory, where)
        source.append(token(TF_VRAM_REQUEST))
    if not source:  # the demand is the defaults: name what switched tensor-fusion on
        for key in (TF_TFLOPS_REQUEST, TF_GPU_MODEL):
            if key in annotations:
                source.append(token(key))
                break
        else:
            source.append(token(TF_ENABLED_LABEL))
    if not explain:
        why = ""
    elif count >= 2:
        why = f"gpu-count {count} is {count} distinct GPUs of one node (tensor-fusion GpuAllocator)"
    else:
        why = f"one GPU, compute share {_num(share)} (tensor-fusion)"
    return Demand(
        gpus=Decimal(count) if count >= 2 else share,  # N distinct GPUs: N whole GPUs
        source=tuple(source),
        why=why,
        gpu_memory_mib=memory,
        memory_source=token(TF_VRAM_REQUEST) if memory else None,
    )


def _whole(pod: _Containers, resource: str) -> Decimal:
    """The pod's effective request of ``resource``, which must be whole devices."""

    def per_container(kind: str, index: int, container: Mapping[str, Any]) -> Decimal:
        res = pod.resources(kind, index, container)
        value = _quantity(res, resource)
        if value is None:
            return _ZERO
        if value != value.to_integral_value():
            raise IntentError(f"{res.where(resource)}: {value} is not a whole number of GPUs")
        return value

    return _pod_total(pod, per_container)


def _whole_gpus(pod: _Containers, explain: bool) -> Demand | None:
    """Whole devices: the pod's effective ``nvidia.com/gpu``, else ``amd.com/gpu``
    request (extended resources of NVIDIA's and AMD's device plugins)."""
    for resource, vendor, source in _WHOLE_RESOURCES:
        gpus = _whole(pod, resource)
        if gpus > 0:
            why = f"{_num(gpus)} whole {resource} requested (the pod's effective request)" \
                if explain else ""  # fmt: skip
            return Demand(gpus=gpus, source=(source,), why=why, vendor=vendor)
    return None


def read_demand(
    spec: Mapping[str, Any],
    labels: Mapping[str, Any],
    annotations: Mapping[str, Any],
    warnings: list[str],
    *,
    explain: bool = True,
    catalog: Catalog | None = None,
) -> tuple[Demand | None, list[Source]]:
    """The first demand source that gives GPUs, and the rules its choice needed.

    Every source is read; one whose fields do not parse is skipped with a warning. A
    sharing layer that disagrees with the chosen one is a warning. ``explain`` False
    leaves `Demand.why` empty (the webhook does not show it); nothing else changes.
    ``catalog`` gives the parents of MIG profiles (`intent.sharing`; default the built-in).

    Raises:
        IntentError: no source gives demand and one failed to parse (its error).
    """
    pod = _Containers(spec)
    found: list[tuple[str, Demand]] = []
    errors: list[tuple[str, IntentError]] = []
    for name in _LAYERS:
        try:
            if name == "hami":
                demand = _hami(pod, explain)
            elif name == "kai":
                demand = _kai(annotations, explain)
            elif name == "tensor-fusion":
                demand = _tensor_fusion(labels, annotations, explain)
            elif name == "sharing":
                for layer, result in sharing.read_layers(pod, explain, catalog):
                    if isinstance(result, IntentError):
                        errors.append((layer, result))
                    else:
                        found.append((layer, result))
                continue
            elif found and found[0][0] == "hami":
                continue  # HAMi already read nvidia.com/gpu as its vGPU count
            else:
                demand = _whole_gpus(pod, explain)
        except IntentError as e:
            errors.append((name, e))
            continue
        if demand is not None:
            found.append((name, demand))
    if not found:
        if errors:
            raise errors[0][1]
        return None, []
    chosen = found[0][1]
    for name, error in errors:
        warnings.append(short(f"{name} ignored: {error}"))
    tokens: list[Source] = []
    for _, other in found[1:]:
        if other.gpus != chosen.gpus:
            warnings.append(short(
                f"gpus: kept {format_gpus(chosen.gpus)} ({brief(chosen.source[0])}), "
                f"not {format_gpus(other.gpus)} ({brief(other.source[0])})"
            ))
            tokens.append(RULE_GPUS_EARLIER)
    return chosen, tokens
