"""Infer a pod's GPU `Intent` from the fields GPU-sharing layers and Kubernetes define.

A purely computational module: no I/O, no awaits. The webhook calls `infer_intent` on the
pod of an AdmissionReview; the side effects (the JSON patch) happen in
`webhook.review`.

Where demand comes from, first match wins (every fact names its source):

1. **HAMi** (Project-HAMi/HAMi), when any container has ``nvidia.com/gpumem`` (MiB per
   vGPU), ``nvidia.com/gpumem-percentage`` (0-100) or ``nvidia.com/gpucores`` (percent):
   per container, one vGPU (HAMi's webhook defaults the count to 1) is the share of one
   GPU it takes; ``nvidia.com/gpu: N`` >= 2 vGPUs are N whole GPUs, since HAMi puts each
   vGPU of a container on a different physical GPU. GPU model from the pod annotation
   ``nvidia.com/use-gputype`` (comma list; the first entry).
2. **KAI-Scheduler** (kai-scheduler/KAI-Scheduler), pod annotations ``gpu-fraction``
   (0 < f <= 1), ``gpu-memory`` (MiB): one device is that fraction of a GPU;
   ``gpu-fraction-num-devices: N`` >= 2 is N whole GPUs (N distinct devices).
3. **tensor-fusion** (NexusGPU/tensor-fusion), pod label ``tensor-fusion.ai/enabled`` or
   its ``tensor-fusion.ai/*`` request annotations: one GPU is the compute share;
   ``tensor-fusion.ai/gpu-count: N`` >= 2 is N whole GPUs (N distinct GPUs of one node).
4. **Whole GPUs**: the pod's ``nvidia.com/gpu`` request (Kubernetes extended resource).

A sharing layer that spreads a request over N >= 2 devices needs N distinct GPUs, whatever
the share on each: a trigger asking for ``N x share`` GPUs would buy a node with too few
cards. ``gpu-memory`` stays MiB per GPU (per device), never multiplied by N.

A model or NodePool the sharing layer does not name is taken from the pod's scheduling
constraints (`MODEL_LABELS`, `NODEPOOL_LABEL`); an explicit NodePool constraint is a
hard requirement, so it wins over a sharing layer's pool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation, localcontext
from typing import Any, Final

from gpu_intent.intent import MAX_GPUS, Intent, IntentError
from gpu_intent.quantity import parse_quantity, to_mib

__all__ = [
    "KNOWN_MODELS",
    "MODEL_LABELS",
    "NODEPOOL_LABEL",
    "canonical_model",
    "infer_intent",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"
HAMI_GPUMEM: Final = "nvidia.com/gpumem"
HAMI_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
HAMI_GPUCORES: Final = "nvidia.com/gpucores"
HAMI_USE_GPUTYPE: Final = "nvidia.com/use-gputype"
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

#: Node label keys whose value names the GPU model, in order of preference (REFERENCE §2:
#: Karpenter AWS, Azure, GCP and Alibaba providers, GKE, NVIDIA GPU Feature Discovery, the
#: plain-cluster ``accelerator`` convention).
MODEL_LABELS: Final = (
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.azure.com/sku-gpu-name",
    "karpenter.k8s.gcp/instance-gpu-name",
    "karpenter.k8s.alicloud/instance-gpu-name",
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.product",
    "accelerator",
)
#: Karpenter core's NodePool label (kubernetes-sigs/karpenter).
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"

#: Canonical model names, spelled as Karpenter AWS's ``instance-gpu-name`` label spells them.
KNOWN_MODELS: Final = (
    "t4", "a10g", "a10", "l4", "l40s", "l40", "a30", "a40", "a100",
    "v100", "h100", "h200", "b200", "gb200",
)  # fmt: skip
_BY_LENGTH: Final = tuple(sorted(KNOWN_MODELS, key=len, reverse=True))
_TOKEN_SPLIT: Final = re.compile(r"[-_\s]+")
_VENDOR_PREFIXES: Final = ("nvidia-", "tesla-")

#: ``gpus`` is rounded up to this step, so a ``1/3`` fraction stays a short annotation.
GPU_STEP: Final = Decimal("0.000001")

_PerContainer = Callable[[Mapping[str, Any], str], Decimal]


def _show(value: object) -> str:
    """A short repr of a user-supplied value for an error message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def canonical_model(raw: str) -> str | None:
    """Canonical lowercase GPU model for a label or annotation value, or None if empty.

    Matches the `KNOWN_MODELS` as whole tokens separated by ``-``, ``_`` or whitespace,
    longest name first, case-insensitively: ``"NVIDIA-A100-SXM4-80GB"`` -> ``"a100"``,
    ``"Tesla-T4"`` / ``"nvidia-tesla-t4"`` / ``"T4"`` -> ``"t4"``, ``"L40S"`` -> ``"l40s"``.
    Formats: REFERENCE §2 (Karpenter providers, GKE, NVIDIA GPU Feature Discovery).
    An unknown name flows through lowercased, with leading ``nvidia-`` / ``tesla-``
    stripped (``"NVIDIA-RTX-4090"`` -> ``"rtx-4090"``).
    """
    text = raw.strip().lower()
    if not text:
        return None
    tokens = set(_TOKEN_SPLIT.split(text))
    for name in _BY_LENGTH:
        if name in tokens:
            return name
    for prefix in _VENDOR_PREFIXES:
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
    return text


@dataclass(frozen=True, slots=True)
class _Demand:
    """What a sharing layer (or the whole-GPU request) says, before constraints merge in."""

    gpus: Decimal
    source: tuple[str, ...]
    model: str | None = None
    model_source: str | None = None
    pool: str | None = None
    pool_source: str | None = None
    gpu_memory_mib: int | None = None


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    """``value`` as a mapping; None (JSON null or absent) is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IntentError(f"{field} must be an object, got {type(value).__name__}")
    return value


def _string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise IntentError(f"{field} must be a string, got {_show(value)}")
    return value


def _containers(spec: Mapping[str, Any], kind: str) -> list[tuple[str, Mapping[str, Any]]]:
    """``(field path, container)`` for ``spec[kind]`` (``containers``/``initContainers``)."""
    raw = spec.get(kind)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise IntentError(f"spec.{kind} must be a list, got {type(raw).__name__}")
    return [(f"spec.{kind}[{i}]", _mapping(c, f"spec.{kind}[{i}]")) for i, c in enumerate(raw)]


def _resources(container: Mapping[str, Any], path: str) -> dict[str, tuple[str, object]]:
    """Effective resources of one container: ``{key: (field path, raw quantity)}``.

    Requests, falling back to limits for a key absent from requests: Kubernetes defaults
    an extended resource's request to its limit (kubernetes/kubernetes, core/v1 defaults).
    """
    resources = _mapping(container.get("resources"), f"{path}.resources")
    out: dict[str, tuple[str, object]] = {}
    for where in ("limits", "requests"):  # requests overwrite limits
        for key, raw in _mapping(resources.get(where), f"{path}.resources.{where}").items():
            out[key] = (f"{path}.resources.{where}[{key!r}]", raw)
    return out


def _quantity(res: Mapping[str, tuple[str, object]], key: str) -> tuple[str, Decimal] | None:
    """``(field path, value)`` of resource ``key`` (a non-negative quantity), or None."""
    if key not in res:
        return None
    field, raw = res[key]
    if not isinstance(raw, str | int | float):
        raise IntentError(f"{field}: {_show(raw)} is not a quantity")
    value = parse_quantity(raw, field)
    if value < 0:
        raise IntentError(f"{field}: {_show(raw)} must not be negative")
    return field, value


def _pod_total(spec: Mapping[str, Any], per_container: _PerContainer) -> Decimal:
    """The pod's effective demand for one resource, as the kube-scheduler computes it.

    ``max(sum(containers) + sum(sidecars), max over init containers of (init + sidecars
    started before it))``, sidecars being init containers with ``restartPolicy: Always``
    (kubernetes/kubernetes component-helpers ``resource.PodRequests``, KEP-753). Without
    sidecars this is ``max(sum(containers), max(initContainers))``.
    """
    sidecars = Decimal(0)
    init_peak = Decimal(0)
    for path, container in _containers(spec, "initContainers"):
        value = per_container(container, path)
        if container.get("restartPolicy") == "Always":
            sidecars += value
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, value + sidecars)
    regular = sum((per_container(c, p) for p, c in _containers(spec, "containers")), Decimal(0))
    return max(regular + sidecars, init_peak)


def _all_containers(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return _containers(spec, "initContainers") + _containers(spec, "containers")


def _percent_share(res: Mapping[str, tuple[str, object]], key: str) -> Decimal | None:
    """Resource ``key``, a 0-100 percent, as a share of one GPU; None if absent or 0."""
    found = _quantity(res, key)
    if found is None or found[1] == 0:
        return None
    field, value = found
    if value > 100:
        raise IntentError(f"{field}: {value} is not a percentage (0-100)")
    return value / 100


def _hami(spec: Mapping[str, Any], annotations: Mapping[str, Any]) -> _Demand | None:
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
    containers = _all_containers(spec)
    if not any(k in _resources(c, p) for p, c in containers for k in _HAMI_RESOURCES):
        return None
    used: set[str] = set()
    memory: int | None = None

    def per_container(container: Mapping[str, Any], path: str) -> Decimal:
        nonlocal memory
        res = _resources(container, path)
        if not any(k in res for k in (GPU_RESOURCE, *_HAMI_RESOURCES)):
            return Decimal(0)
        found = _quantity(res, GPU_RESOURCE)
        count = Decimal(1) if found is None else found[1]
        shares: list[Decimal] = []
        for key in (HAMI_GPUCORES, HAMI_GPUMEM_PERCENTAGE):
            share = _percent_share(res, key)
            if share is not None:
                shares.append(share)
                used.add(key)
        found = _quantity(res, HAMI_GPUMEM)
        if found is not None and found[1] > 0:
            mib = int(found[1].to_integral_value(rounding=ROUND_CEILING))  # already MiB
            used.add(HAMI_GPUMEM)
            memory = max(memory or 0, mib)
        if count >= 2:  # one vGPU per physical GPU: N distinct GPUs, whole
            if shares:
                used.add(GPU_RESOURCE)
            return count
        return count * max(shares, default=Decimal(1))

    gpus = _pod_total(spec, per_container)
    if gpus <= 0:
        return None
    source = tuple(f"hami:{key}" for key in (GPU_RESOURCE, *_HAMI_RESOURCES) if key in used)
    model, model_source = None, None
    raw_types = annotations.get(HAMI_USE_GPUTYPE)
    if raw_types is not None:
        field = f"metadata.annotations[{HAMI_USE_GPUTYPE!r}]"
        entries = [e for e in _string(raw_types, field).split(",") if e.strip()]
        if entries:
            model, model_source = canonical_model(entries[0]), f"hami:{HAMI_USE_GPUTYPE}"
    return _Demand(
        gpus=gpus,
        source=source or (f"hami:{GPU_RESOURCE}",),
        model=model,
        model_source=model_source,
        gpu_memory_mib=memory,
    )


def _decimal(annotations: Mapping[str, Any], key: str) -> Decimal:
    """Annotation ``key`` as a plain decimal number of magnitude 1e-9 .. 1e9 (or 0)."""
    field = f"metadata.annotations[{key!r}]"
    raw = _string(annotations[key], field)
    try:
        value = Decimal(raw.strip())
    except InvalidOperation as e:
        raise IntentError(f"{field}: {_show(raw)} is not a number") from e
    if not value.is_finite():
        raise IntentError(f"{field}: {_show(raw)} is not a number")
    if value and not -9 <= value.adjusted() <= 9:
        raise IntentError(f"{field}: {_show(raw)} is out of range")
    return value


def _positive_int(annotations: Mapping[str, Any], key: str) -> int:
    value = _decimal(annotations, key)
    if value <= 0 or value != value.to_integral_value():
        raise IntentError(
            f"metadata.annotations[{key!r}]: {_show(annotations[key])} "
            "must be a positive whole number"
        )
    return int(value)


def _kai(annotations: Mapping[str, Any]) -> _Demand | None:
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
    source = [f"kai:{k}" for k in (KAI_GPU_FRACTION, KAI_GPU_MEMORY, KAI_NUM_DEVICES)
              if k in annotations]  # fmt: skip
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
    gpus = Decimal(devices) if devices >= 2 else fraction  # N distinct devices: N GPUs
    return _Demand(gpus=gpus, source=tuple(source), gpu_memory_mib=memory)


def _tensor_fusion(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> _Demand | None:
    """tensor-fusion demand (NexusGPU/tensor-fusion pod label and annotations), in GPUs.

    One GPU (``gpu-count`` absent or 1) is ``compute-percent-request``/100 GPUs, 1 when
    absent; ``tflops-request`` alone gives share 1 (TFLOPs need the GPU's peak to become
    a share). ``gpu-count: N`` >= 2 is N whole GPUs: tensor-fusion's ``GpuAllocator``
    (internal/gpuallocator/gpuallocator.go) selects ``req.Count`` distinct GPUs of one
    node (``SelectGPUs``, ``NewSameNodeFilter``) and ``Bind`` takes the whole request
    (TFLOPs and VRAM) from each of them. ``vram-request`` is a byte quantity (``"20Gi"``)
    per GPU -> ``gpu_memory_mib`` (MiB per GPU); model from ``gpu-model``; pool from
    ``gpupool`` (or ``gpu-pool``).
    """
    enabled = labels.get(TF_ENABLED_LABEL) == "true"
    if not enabled and not any(k in annotations for k in _TF_ANNOTATIONS):
        return None
    source: list[str] = []

    def token(key: str) -> str:
        return f"tensor-fusion:{key}"

    count = 1
    if TF_GPU_COUNT in annotations:
        count = _positive_int(annotations, TF_GPU_COUNT)
        source.append(token(TF_GPU_COUNT))
    share = Decimal(1)
    if TF_COMPUTE_PERCENT in annotations:
        field = f"metadata.annotations[{TF_COMPUTE_PERCENT!r}]"
        percent = _decimal(annotations, TF_COMPUTE_PERCENT)
        if not 0 < percent <= 100:
            raise IntentError(f"{field}: {percent} must be in (0, 100]")
        share = percent / 100
        source.append(token(TF_COMPUTE_PERCENT))
    memory: int | None = None
    if TF_VRAM_REQUEST in annotations:
        field = f"metadata.annotations[{TF_VRAM_REQUEST!r}]"
        memory = to_mib(_string(annotations[TF_VRAM_REQUEST], field), field)
        if memory <= 0:
            raise IntentError(f"{field}: {_show(annotations[TF_VRAM_REQUEST])} must be > 0")
        source.append(token(TF_VRAM_REQUEST))
    if not source:  # the demand is the defaults: name what switched tensor-fusion on
        for key in (TF_TFLOPS_REQUEST, TF_GPU_MODEL):
            if key in annotations:
                source.append(token(key))
                break
        else:
            source.append(token(TF_ENABLED_LABEL))
    model, model_source = None, None
    if TF_GPU_MODEL in annotations:
        field = f"metadata.annotations[{TF_GPU_MODEL!r}]"
        model = canonical_model(_string(annotations[TF_GPU_MODEL], field))
        model_source = token(TF_GPU_MODEL) if model else None
    pool, pool_source = None, None
    for key in TF_GPUPOOL:
        if key in annotations:
            value = _string(annotations[key], f"metadata.annotations[{key!r}]").strip()
            if value:
                pool, pool_source = value, token(key)
                break
    return _Demand(
        gpus=Decimal(count) if count >= 2 else share,  # N distinct GPUs: N whole GPUs
        source=tuple(source),
        model=model,
        model_source=model_source,
        pool=pool,
        pool_source=pool_source,
        gpu_memory_mib=memory,
    )


def _whole_gpus(spec: Mapping[str, Any]) -> _Demand | None:
    """Whole GPUs: the pod's effective ``nvidia.com/gpu`` request (a whole number)."""

    def per_container(container: Mapping[str, Any], path: str) -> Decimal:
        res = _resources(container, path)
        found = _quantity(res, GPU_RESOURCE)
        if found is None:
            return Decimal(0)
        field, value = found
        if value != value.to_integral_value():
            raise IntentError(f"{field}: {value} is not a whole number of GPUs")
        return value

    gpus = _pod_total(spec, per_container)
    if gpus <= 0:
        return None
    return _Demand(gpus=gpus, source=(f"resources:{GPU_RESOURCE}",))


def _constraint(spec: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, str] | None:
    """First ``(value, source token)`` for any of ``keys`` in the pod's hard constraints.

    Looks in ``spec.nodeSelector`` first, then in ``spec.affinity.nodeAffinity.
    requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchExpressions``
    with operator ``In`` (its first value; terms in order). Keys in the order given.
    """
    selector = _mapping(spec.get("nodeSelector"), "spec.nodeSelector")
    for key in keys:
        value = selector.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip(), f"nodeSelector:{key}"
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    path = f"spec.affinity.nodeAffinity.{required_key}"
    required = _mapping(node_affinity.get(required_key), path)
    terms = required.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise IntentError(f"{path}.nodeSelectorTerms must be a list")
    expressions: list[Mapping[str, Any]] = []
    for i, term in enumerate(terms):
        exprs = _mapping(term, f"{path}.nodeSelectorTerms[{i}]").get("matchExpressions") or []
        if not isinstance(exprs, list):
            raise IntentError(f"{path}.nodeSelectorTerms[{i}].matchExpressions must be a list")
        expressions.extend(e for e in exprs if isinstance(e, Mapping))
    for key in keys:
        for expr in expressions:
            values = expr.get("values")
            if expr.get("key") == key and expr.get("operator") == "In" and values:
                first = values[0] if isinstance(values, list) else None
                if isinstance(first, str) and first.strip():
                    return first.strip(), f"nodeAffinity:{key}"
    return None


def infer_intent(pod: Mapping[str, Any]) -> Intent | None:
    """Infer the GPU intent of ``pod``, a Pod as a JSON object (AdmissionReview
    ``request.object``), or None when it asks for no GPU (a GPU node selector alone is
    not demand).

    The result's ``gpus`` is GPUs in total (fractional only for a share of one device;
    a request spread over N >= 2 devices is N whole GPUs), ``gpu_memory_mib`` MiB per
    GPU, ``model`` canonical (`canonical_model`), ``pool`` a NodePool name, and ``source``
    the ``<where>:<key>`` tokens actually used. See the module docstring for the rules and
    their sources.

    Raises:
        IntentError: a field it must read is malformed (``spec.containers`` not a list, a
            quantity that does not parse, ``gpu-fraction: "abc"`` or outside (0, 1], ...);
            the message names the field.
    """
    if not isinstance(pod, Mapping):
        raise IntentError(f"pod must be an object, got {type(pod).__name__}")
    metadata = _mapping(pod.get("metadata"), "metadata")
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations")
    labels = _mapping(metadata.get("labels"), "metadata.labels")
    spec = _mapping(pod.get("spec"), "spec")

    demand = (
        _hami(spec, annotations)
        or _kai(annotations)
        or _tensor_fusion(labels, annotations)
        or _whole_gpus(spec)
    )
    if demand is None:
        return None
    if demand.gpus > MAX_GPUS:
        raise IntentError(f"{format(demand.gpus.normalize(), 'f')} GPUs is more than {MAX_GPUS}")
    with localcontext() as ctx:
        ctx.prec = 40
        rounded = demand.gpus.quantize(GPU_STEP, rounding=ROUND_CEILING)
    gpus = demand.gpus if rounded == demand.gpus else rounded  # keep "0.5" as 0.5
    source = list(demand.source)
    model = demand.model
    if model is not None and demand.model_source is not None:
        source.append(demand.model_source)
    else:
        found = _constraint(spec, MODEL_LABELS)
        if found is not None:
            model = canonical_model(found[0])
            source.append(found[1])
    pool = demand.pool
    found = _constraint(spec, (NODEPOOL_LABEL,))
    if found is not None:
        pool = found[0]
        source.append(found[1])
    elif pool is not None and demand.pool_source is not None:
        source.append(demand.pool_source)
    return Intent(
        gpus=gpus,
        model=model,
        pool=pool,
        gpu_memory_mib=demand.gpu_memory_mib,
        source=tuple(dict.fromkeys(source)),  # unique, in order
    )
