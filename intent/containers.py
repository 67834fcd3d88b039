"""The containers of a pod spec and their effective resources: what every demand reader
(`intent.demand`, `intent.sharing`) walks, and the `Demand` they return.

A purely computational module: no I/O, no awaits. A pod's containers are read once per
review (`Containers`), their resources once per container (`Resources`), and the pod's
total of a per-container value is computed as the kube-scheduler does (`pod_total`). Also
the text helpers warnings share (`short`, `brief`), so each stays one line of at most 120
characters once the webhook puts ``gpu-intent: `` before it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from intent.contract import IntentError, Source
from intent.quantity import quantity_or_reason
from intent.text import show

__all__ = [
    "MAX_CONTAINERS",
    "MAX_WARNING",
    "Containers",
    "Demand",
    "PerContainer",
    "Resources",
    "as_mapping",
    "brief",
    "container_path",
    "num",
    "percent_share",
    "pod_total",
    "quantity_of",
    "short",
    "string_of",
]

#: Longest warning text: 120 characters once the webhook puts ``gpu-intent: `` before it.
MAX_WARNING: Final = 108
#: Most containers (and, apart, init containers) of a pod inference reads; a pod with more
#: gets no intent (a warning says why). Real pods have a handful; the bound keeps a
#: review's work small however large the pod.
MAX_CONTAINERS: Final = 256

#: One container's demand: ``(kind, index, container)`` -> GPUs.
PerContainer = Callable[[str, int, Mapping[str, Any]], Decimal]
_ZERO: Final = Decimal(0)
_ONE: Final = Decimal(1)


def brief(source: Source) -> str:
    """A source for a warning: ``nodeSelector:karpenter.k8s.aws/instance-gpu-name``
    -> ``nodeSelector instance-gpu-name`` (the full token is in the source annotation)."""
    key = source.key
    return f"{source.where} {key.rsplit('/', 1)[-1]}" if key else source.where


def short(text: str) -> str:
    """``text`` on one line, cut to `MAX_WARNING` characters (with ``...``)."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 3] + "..."


@dataclass(frozen=True, slots=True)
class Demand:
    """What one demand source says: GPUs, its sources and the reasoning (``why``,
    empty when `read_demand` was asked not to explain); ``gpu_memory_mib`` MiB per GPU
    and the source that stated it."""

    gpus: Decimal
    source: tuple[Source, ...]
    why: str
    gpu_memory_mib: int | None = None
    memory_source: Source | None = None
    vendor: str = "nvidia"
    #: Devices whose share of a GPU is their memory over the GPU's (a memory-only request
    #: of a sharing layer, `intent.sharing`): ``gpus`` counts each as a whole GPU until
    #: `intent.inference.infer` knows the model's memory. None for other demand.
    memory_share_of: Decimal | None = None
    #: Catalog GPU ids the request itself names (the parents of a MIG profile), and the
    #: profile (``1g.5gb``): a model source after the node constraints.
    gpu_ids: tuple[str, ...] = ()
    mig: str | None = None


def as_mapping(value: object, where: str) -> Mapping[str, Any]:
    """``value`` as a mapping; None (JSON null or absent) is an empty one."""
    if type(value) is dict:  # JSON's objects: skip the slower ABC check
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IntentError(f"{where} must be an object, got {type(value).__name__}")
    return value


def string_of(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise IntentError(f"{where} must be a string, got {show(value)}")
    return value


def container_path(kind: str, index: int) -> str:
    """The field path of a container: ``spec.containers[0]``."""
    return f"spec.{kind}[{index}]"


def _containers(spec: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    """The containers of ``spec[kind]`` (``containers``/``initContainers``), each a mapping.

    Raises:
        IntentError: not a list, an item not an object, or more than `MAX_CONTAINERS`
            items (a pod's demand is the sum over all of them, so none may be skipped).
    """
    raw = spec.get(kind)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise IntentError(f"spec.{kind} must be a list, got {type(raw).__name__}")
    if len(raw) > MAX_CONTAINERS:
        raise IntentError(f"spec.{kind} has {len(raw)} items; gpu-intent reads at most {MAX_CONTAINERS}")
    return [c if type(c) is dict else as_mapping(c, container_path(kind, i)) for i, c in enumerate(raw)]


class Resources:
    """Effective resources of one container: ``values`` maps a resource name to its raw
    quantity.

    Requests, falling back to limits for a key absent from requests: Kubernetes defaults
    an extended resource's request to its limit (kubernetes/kubernetes, core/v1 defaults).
    The field path of a value (for messages) is built only when asked (`where`).
    """

    __slots__ = ("_index", "_kind", "_requests", "values")

    def __init__(self, container: Mapping[str, Any], kind: str, index: int) -> None:
        # `as_mapping` checks, the field paths built only for a value that is not a dict
        resources = container.get("resources")
        if type(resources) is not dict:
            resources = as_mapping(resources, f"{container_path(kind, index)}.resources")
        limits = resources.get("limits")
        if type(limits) is not dict:
            limits = as_mapping(limits, f"{container_path(kind, index)}.resources.limits")
        requests = resources.get("requests")
        if type(requests) is not dict:
            requests = as_mapping(requests, f"{container_path(kind, index)}.resources.requests")
        self._kind = kind
        self._index = index
        self._requests = requests
        # requests overwrite limits; read only, so one side alone is used as it is
        self.values: Mapping[str, object] = (
            requests if not limits else limits if not requests else {**limits, **requests}
        )

    def where(self, key: str) -> str:
        """The field path of resource ``key``: ``spec.containers[0].resources.limits['cpu']``."""
        section = "requests" if key in self._requests else "limits"
        return f"{container_path(self._kind, self._index)}.resources.{section}[{key!r}]"


class Containers:
    """The containers of one pod spec and their `Resources`, each read at most once.

    Several demand sources walk the same containers; this keeps the walk's results (or
    its `IntentError` message, raised again at the same point) for the whole reading.
    """

    __slots__ = ("_lists", "_resources", "_spec")

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self._spec = spec
        self._lists: dict[str, list[Mapping[str, Any]] | str] = {}
        self._resources: dict[tuple[str, int], Resources | str] = {}

    def of(self, kind: str) -> list[Mapping[str, Any]]:
        """`_containers` of ``kind`` (``containers``/``initContainers``)."""
        found = self._lists.get(kind)
        if found is None:
            try:
                found = _containers(self._spec, kind)
            except IntentError as e:
                found = str(e)
            self._lists[kind] = found
        if isinstance(found, str):
            raise IntentError(found)
        return found

    def resources(self, kind: str, index: int, container: Mapping[str, Any]) -> Resources:
        """The `Resources` of ``container``, ``spec[kind][index]``."""
        found = self._resources.get((kind, index))
        if found is None:
            try:
                found = Resources(container, kind, index)
            except IntentError as e:
                found = str(e)
            self._resources[(kind, index)] = found
        if isinstance(found, str):
            raise IntentError(found)
        return found


def quantity_of(res: Resources, key: str) -> Decimal | None:
    """Resource ``key`` (a non-negative quantity), or None when absent."""
    values = res.values
    raw = values.get(key)
    if raw is None and key not in values:
        return None
    value = quantity_or_reason(raw)
    if isinstance(value, str):
        raise IntentError(f"{res.where(key)}: {value}")
    if value < 0:
        raise IntentError(f"{res.where(key)}: {show(raw)} must not be negative")
    return value


def pod_total(pod: Containers, per_container: PerContainer) -> Decimal:
    """The pod's effective demand for one resource, as the kube-scheduler computes it.

    ``max(sum(containers) + sum(sidecars), max over init containers of (init + sidecars
    started before it))``, sidecars being init containers with ``restartPolicy: Always``
    (kubernetes/kubernetes component-helpers ``resource.PodRequests``, KEP-753). Without
    sidecars this is ``max(sum(containers), max(initContainers))``.
    """
    sidecars = _ZERO
    init_peak = _ZERO
    for index, container in enumerate(pod.of("initContainers")):
        value = per_container("initContainers", index, container)
        if container.get("restartPolicy") == "Always":
            sidecars += value
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, value + sidecars)
    regular = _ZERO
    for index, container in enumerate(pod.of("containers")):
        regular += per_container("containers", index, container)
    return max(regular + sidecars, init_peak)


def percent_share(res: Resources, key: str) -> Decimal | None:
    """Resource ``key``, a 0-100 percent, as a share of one GPU; None if absent or 0."""
    value = quantity_of(res, key)
    if value is None or value == 0:
        return None
    if value > 100:
        raise IntentError(f"{res.where(key)}: {value} is not a percentage (0-100)")
    return value / 100


def num(value: Decimal) -> str:
    return format(value.normalize(), "f")

