"""kube-scheduler's filters as the sim's scheduler runs them on one node (pure).

The order, reasons and sources are `sim.scheduler`'s module doc: NodeUnschedulable,
TaintToleration, NodeAffinity (`filter_node`), NodeResourcesFit and the GPU sharing
layers' device placement (`fit`); `fit_error` words a pod's failure on every node as
kube-scheduler (with DefaultPreemption's message) or Volcano does. `PodInfo` and
`NodeInfo` are the scheduler's per-pass views of a pod and a node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from sim import deviceplugins, gpushare, kai, volcano
from sim.scheduling import (
    fit_error_message,
    matches_node_selector,
    quantity,
    tolerates,
    untolerated_taint,
)
from sim.store import Obj

__all__ = [
    "KAI_ON_HAMI",
    "NO_NODES",
    "NodeInfo",
    "PodInfo",
    "Status",
    "checked_requests",
    "filter_node",
    "fit",
    "fit_error",
    "preemption_message",
    "quantities",
    "reservations_short",
    "signature",
]

NO_NODES = "no nodes available to schedule pods"  # scheduler ErrNoNodesAvailable
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_NO_VICTIMS = "No preemption victims found for incoming pod"
_FIRST_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class Status:
    """A node's filter failure: reasons, and whether preemption could not help."""

    reasons: tuple[str, ...]
    unresolvable: bool


@dataclass(slots=True)
class PodInfo:
    """A pending or bound pod as the filters read it: its effective ``requests``
    (`sim.scheduling.pod_requests`), ``spec.priority`` and GPU ``demand``
    (`sim.gpushare.demand`, None without one)."""

    pod: Obj
    priority: int
    requests: dict[str, Decimal]
    demand: gpushare.GpuDemand | None
    #: `signature`, computed on first use (an info lives as long as one pod version)
    signature: str = ""
    #: the (resource, quantity) pairs NodeResourcesFit compares, in its order, computed
    #: on first use by `checked_requests`
    checks: tuple[tuple[str, Decimal], ...] | None = None


@dataclass(slots=True)
class NodeInfo:
    """A node in one pass: parsed ``allocatable``, GPU ``devices`` (`sim.gpushare`),
    taints, its bound non-terminal pods with their summed ``requested`` resources, the
    share used on each device (``gpu_used``) and the GPU agent serving it (``plugin``)."""

    obj: Obj
    name: str
    allocatable: dict[str, Decimal]
    devices: list[gpushare.Device]
    taints: list[Mapping[str, Any]] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    requested: dict[str, Decimal] = field(default_factory=dict)
    gpu_used: list[float] = field(default_factory=list)
    plugin: deviceplugins.Plugin = "nvidia"  # the GPU agent serving the node
    #: CPU and memory of its pods as kube-scheduler's scoring counts them
    #: (`nonzero_requests`).
    scored: dict[str, Decimal] = field(default_factory=dict)

    @property
    def hami(self) -> bool:
        """Whether the node runs HAMi's device plugin."""
        return self.plugin == "hami"

    def add(self, info: PodInfo) -> None:
        """Count ``info`` as bound here (its requests; not its devices)."""
        self.pods.append(info)
        for key, value in info.requests.items():
            self.requested[key] = self.requested.get(key, Decimal(0)) + value
        for key, value in nonzero_requests(info).items():
            self.scored[key] = self.scored.get(key, Decimal(0)) + value

    def refresh_gpus(self) -> None:
        """Recompute ``gpu_used`` from the pods (`sim.gpushare.usage`)."""
        self.gpu_used = gpushare.usage((p.pod for p in self.pods), self.devices, plugin=self.plugin)

    def places_devices(self, info: PodInfo) -> bool:
        """Whether ``info`` takes physical devices here: every GPU pod, except a plain
        ``nvidia.com/gpu`` pod on a HAMi node (it takes a split slot)."""
        return info.demand is not None and not (self.hami and info.demand.layer == "whole")

    def without_priority_below(self, priority: int) -> NodeInfo:
        """This node as if every pod of lower priority were evicted (preemption dry run)."""
        copy = NodeInfo(
            self.obj, self.name, self.allocatable, self.devices, self.taints, plugin=self.plugin
        )
        for info in self.pods:
            if info.priority >= priority:
                copy.add(info)
        copy.refresh_gpus()
        return copy


#: What kube-scheduler's scoring counts for a pod that requests no CPU or memory:
#: ``DefaultMilliCPURequest`` (100m) and ``DefaultMemoryRequest`` (200 MiB),
#: ``pkg/scheduler/util/pod_resources.go``; cores and bytes.
NONZERO_DEFAULTS: Final = {"cpu": Decimal("0.1"), "memory": Decimal(200 * 1024 * 1024)}


def nonzero_requests(info: PodInfo) -> dict[str, Decimal]:
    """``info``'s CPU (cores) and memory (bytes) as kube-scheduler's scoring counts them
    (``GetNonzeroRequests``): a request of zero counts as `NONZERO_DEFAULTS` (the real
    one applies this per container; the sim per pod)."""
    return {k: info.requests.get(k) or default for k, default in NONZERO_DEFAULTS.items()}


def quantities(raw: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """A resource list (``status.allocatable``) parsed to base units; unparsable entries
    are left out."""
    out: dict[str, Decimal] = {}
    for key, value in (raw or {}).items():
        try:
            out[key] = quantity(value, key)
        except ValueError:
            continue
    return out


#: `fit`'s reason for a KAI pod on a node running HAMi's device plugin.
KAI_ON_HAMI: Final = "node runs HAMi's device plugin, which allocates GPUs only to HAMi's pods"


def fit(info: PodInfo, node: NodeInfo) -> Status | None:
    """NodeResourcesFit (``fitsRequest``) then GPU device placement."""
    reasons: list[str] = []
    unresolvable = False
    allowed = node.allocatable.get("pods", Decimal(0))
    if node.requested.get("pods", Decimal(0)) + 1 > allowed:
        reasons.append("Too many pods")  # never Unresolvable in fitsRequest
    for key, wanted in checked_requests(info):
        capacity = node.allocatable.get(key, Decimal(0))
        if wanted > capacity - node.requested.get(key, Decimal(0)):
            reasons.append(f"Insufficient {key}")
            unresolvable = unresolvable or wanted > capacity
    if reasons:
        return Status(tuple(reasons), unresolvable)
    if info.demand is None:
        return None
    layer = info.demand.layer
    if layer == "kai" and node.hami:
        # KAI holds a GPU with a pod that asks for nvidia.com/gpu (a reservation pod
        # for fractions, the pod itself for whole GPUs). On a HAMi node that resource is
        # HAMi's device plugin's, whose Allocate serves only the pod HAMi's scheduler
        # assigned there (`GetPendingPod`, Project-HAMi/HAMi pkg/util/util.go: the pod
        # annotated bind-phase "allocating" for this node) and fails any other. Real KAI
        # would bind and the container never start; the sim refuses the node, so in
        # both no KAI pod runs on a HAMi node.
        return Status((KAI_ON_HAMI,), False)
    if not gpushare.serves(node.plugin, layer):
        # A layer finds devices only through its own agent: HAMi's scheduler knows only
        # the devices its device plugin registers in node annotations
        # (hami.io/node-nvidia-register; Project-HAMi/HAMi docs/develop/protocol.md),
        # Volcano's those of its vGPU plugin, gpushare's extender nodes with
        # aliyun.com/gpu-mem capacity (`sim.deviceplugins` says which agent runs where).
        return Status((gpushare.no_devices_reason(layer, node.name),), False)
    if node.places_devices(info):
        placed = gpushare.place(info.demand, node.devices, node.gpu_used)
        if isinstance(placed, gpushare.NoFit):
            return Status((placed.reason,), False)
        if layer == "kai" and kai.is_fractional(info.pod) and reservations_short(node, placed):
            return Status((KAI_NO_RESERVATION,), False)
    return None


#: `fit`'s reason for a KAI fraction whose new GPU groups' reservation pods would not
#: fit the node's free ``nvidia.com/gpu``.
KAI_NO_RESERVATION: Final = "node has no free nvidia.com/gpu for a GPU reservation pod"


def reservations_short(node: NodeInfo, assignment: gpushare.Assignment) -> bool:
    """Whether the devices of ``assignment`` that no reservation pod holds yet (new GPU
    groups, each held by a reservation pod asking one ``nvidia.com/gpu``,
    `sim.kai.reservation_pod`) are more than the node's ``nvidia.com/gpu`` its bound
    pods leave: real KAI counts the GPUs other pods request, and the kubelet would
    reject the reservation pod. Unknown (no ``nvidia.com/gpu`` advertised yet): not
    short."""
    capacity = node.allocatable.get(gpushare.GPU)
    if capacity is None:
        return False
    devices = {index for index, _ in assignment}
    if len(devices) <= capacity - node.requested.get(gpushare.GPU, Decimal(0)):
        return False
    # Each held device counts once, as KAI counts GPUs, whatever reservation pods hold it.
    held = kai.groups_by_device((p.pod for p in node.pods), node.name)
    others = sum(
        (
            p.requests.get(gpushare.GPU, Decimal(0))
            for p in node.pods
            if (p.pod.get("metadata") or {}).get("namespace") != kai.RESERVATION_NAMESPACE
        ),
        Decimal(0),
    )
    free = capacity - others - len(held)
    return sum(1 for index in devices if index not in held) > free


#: Layers whose schedulers leave HAMi's managed resources out of NodeResourcesFit.
_SKIPPING: Final = frozenset({"hami", "kai", "tensor-fusion"})


def checked_requests(info: PodInfo) -> tuple[tuple[str, Decimal], ...]:
    """The requests `fit` compares with a node's free resources, in ``fitsRequest``'s
    order (cpu, memory, ephemeral-storage, then the others by name), without zero ones
    and, for a HAMi, KAI or tensor-fusion pod, without the resources HAMi's extender
    manages (its scheduler places those on devices). Volcano's allocate action and
    kube-scheduler with gpushare's extender (``ignoredByScheduler: false``) check every
    requested resource against the node. Cached on ``info``."""
    if info.checks is None:
        skip = gpushare.SHARING_RESOURCES if info.demand and info.demand.layer in _SKIPPING else ()
        others = sorted(k for k in info.requests if k not in _FIRST_RESOURCES and k != "pods")
        info.checks = tuple(
            (key, info.requests[key])
            for key in (*(k for k in _FIRST_RESOURCES if k in info.requests), *others)
            if info.requests[key] > 0 and key not in skip
        )
    return info.checks


def filter_node(info: PodInfo, node: NodeInfo) -> Status | None:
    """The default filter plugins in order; None if the pod fits ``node``."""
    spec = info.pod.get("spec") or {}
    tolerations = spec.get("tolerations") or ()
    if (node.obj.get("spec") or {}).get("unschedulable") and not any(
        tolerates(t, _UNSCHEDULABLE_TAINT) for t in tolerations
    ):
        return Status(("node(s) were unschedulable",), True)
    taint = untolerated_taint(tolerations, node.taints)
    if taint is not None:
        reason = (
            f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
        )
        return Status((reason,), True)
    labels = (node.obj.get("metadata") or {}).get("labels") or {}
    if not matches_node_selector(info.pod, labels, node_name=node.name):
        return Status(("node(s) didn't match Pod's node affinity/selector",), True)
    return fit(info, node)


def fit_error(info: PodInfo, nodes: Sequence[NodeInfo], statuses: Mapping[str, Status]) -> str:
    """The FailedScheduling message: Volcano's ``FitErrors`` for its pods (no
    preemption; `sim.volcano.fit_errors_message`), else kube-scheduler's ``FitError``
    with DefaultPreemption's message (`NO_NODES` when there are no nodes)."""
    if (info.pod.get("spec") or {}).get("schedulerName") == volcano.SCHEDULER_NAME:
        reasons = (volcano.node_reasons(st.reasons) for st in statuses.values())
        return volcano.fit_errors_message(len(nodes), reasons)
    if not nodes:
        return NO_NODES
    post = preemption_message(info, nodes, statuses)
    return fit_error_message(len(nodes), (st.reasons for st in statuses.values()), post)


def preemption_message(
    info: PodInfo, nodes: Sequence[NodeInfo], statuses: Mapping[str, Status]
) -> str:
    """DefaultPreemption's PostFilter message (``pkg/scheduler/framework/preemption``)."""
    if (info.pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return "preemption: not eligible due to preemptionPolicy=Never."
    outcome: list[Status] = []
    for node in nodes:
        status = statuses[node.name]
        if status.unresolvable:
            outcome.append(Status((_NOT_HELPFUL,), True))
        elif not any(p.priority < info.priority for p in node.pods):
            outcome.append(Status((_NO_VICTIMS,), True))
        else:
            # Evicting every lower-priority pod: if that is still not enough, say why;
            # if it would be, real kube-scheduler would preempt (the sim does not).
            after = filter_node(info, node.without_priority_below(info.priority))
            outcome.append(after if after is not None else Status((_NO_VICTIMS,), True))
    return "preemption: " + fit_error_message(len(nodes), (st.reasons for st in outcome))


def signature(info: PodInfo) -> str:
    """Everything the filters and the preemption message read from a pod; computed once
    per pod version (cached on ``info``)."""
    if not info.signature:
        info.signature = _compute_signature(info)
    return info.signature


def _compute_signature(info: PodInfo) -> str:
    spec = info.pod.get("spec") or {}
    return json.dumps(
        [
            sorted((k, str(v)) for k, v in info.requests.items()),
            repr(info.demand),
            info.priority,
            spec.get("preemptionPolicy"),
            spec.get("tolerations"),
            spec.get("nodeSelector"),
            (spec.get("affinity") or {}).get("nodeAffinity"),
            spec.get("resourceClaims"),
            (info.pod.get("status") or {}).get("resourceClaimStatuses"),
        ],
        sort_keys=True,
        default=str,
    )
