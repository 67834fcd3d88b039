"""The sim's scheduler: kube-scheduler plus the GPU sharing layers' device placement.

`SimScheduler` makes a pass on every pod or node write (and every ``resync_seconds``), in
one loop per scheduler name (see below), and tries to place each pending pod whose
``spec.schedulerName`` that loop serves. Pods are read from a `sim.podview.PodView`
(kube-scheduler's informer-fed cache) and each node's summed requests are kept until its
pods change, so a pass costs its pending pods and the nodes, not every pod. Per node it runs,
in kube-scheduler's default filter order (kubernetes ``pkg/scheduler/apis/config/v1``
default plugins), stopping at the first failure:

1. NodeUnschedulable: ``spec.unschedulable`` unless the pod tolerates
   ``node.kubernetes.io/unschedulable:NoSchedule`` -> ``node(s) were unschedulable``;
2. TaintToleration: NoSchedule/NoExecute taints, plus the ``node.kubernetes.io/not-ready``
   (``unreachable`` when Ready is Unknown) NoSchedule taint the node lifecycle controller
   puts on a node that is not Ready -> ``node(s) had untolerated taint {<key>: <value>}``;
3. NodeAffinity -> ``node(s) didn't match Pod's node affinity/selector``;
4. NodeResourcesFit: ``pod_requests`` against ``status.allocatable`` minus the requests
   of the node's non-terminal pods -> ``Too many pods``, ``Insufficient <resource>``;
   for HAMi, KAI and tensor-fusion pods the resources HAMi's extender manages
   (``nvidia.com/gpu``, ``nvidia.com/gpumem``, ...) are skipped (``ignoredByScheduler``);
   a MIG slice (``nvidia.com/mig-1g.5gb``) is an ordinary extended resource here;
5. GPU devices (`gpushare.place`), on nodes whose agent serves the pod's layer
   (`gpushare.serves`, `sim.deviceplugins`): HAMi's extender / KAI / tensor-fusion, with
   HAMi's reasons (``NodeInsufficientDevice``, ``1/1 CardInsufficientMemory``, ...);
   Volcano's deviceshare plugin (``hami-vgpuDeviceSharing error``); for a default-scheduler
   pod asking ``aliyun.com/gpu-mem``, gpushare's scheduler extender (`sim.aliyun`:
   ``Insufficient GPU Memory in one device``; at bind it writes its ``ALIYUN_COM_GPU_MEM_*``
   annotations with the binding);
6. DynamicResources (kubernetes ``pkg/scheduler/framework/plugins/dynamicresources``), for
   a pod with ``spec.resourceClaims``: every claim must exist first (PreEnqueue: until
   then the pod is not tried at all and gets no condition, only a log line with the
   plugin's message, e.g. ``pod "ns/p": ResourceClaim not created yet``); on each node
   the unallocated claims must be allocatable from the node's free ResourceSlice devices
   (`sim.dra.allocate`) -> ``cannot allocate all claims``, and an allocated claim must
   be for this node -> ``resourceclaim not available on the node``; both
   UnschedulableAndUnresolvable. Before the bind (PreBind) each claim gets the
   delete-protection finalizer, ``status.allocation`` and the pod in
   ``status.reservedFor``.

Pods are tried in PrioritySort order (``spec.priority`` descending, then creation time,
to the second, then name: the real ones break those ties otherwise, kube-scheduler by
when the pod last entered its queue, ``QueuedPodInfo.Timestamp``, KAI by UID, its
``JobOrderFn`` in ``pkg/scheduler/framework/session_plugins.go``);
among the nodes that fit, the one `node_order` ranks first wins: for kube-scheduler its
default scoring of CPU and memory (`kube_score`), for KAI the fewest idle GPUs, for the
others the most GPU share allocated; ties go by name (the real ones pick at random).
Within a pass,
a pod identical to one just found unschedulable gets the same verdict without another
walk over the nodes, until the next bind changes a node.

Steps 1-3, and 4 when a request exceeds the node's whole allocatable (recent kube-scheduler,
``InsufficientResource.Unresolvable``), are UnschedulableAndUnresolvable:
preemption "is not helpful" there. The FailedScheduling
message is kube-scheduler's ``FitError.Error()`` (``pkg/scheduler/framework/types.go``)
followed by DefaultPreemption's PostFilter message, e.g.
``0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated
taint {nvidia.com/gpu: }. preemption: 0/2 nodes are available: 1 No preemption victims
found for incoming pod, 1 Preemption is not helpful for scheduling..`` (the double period
is real: the inner FitError ends with one and the separator adds another).

The scheduler never preempts and never sets ``status.nominatedNodeName``.

Each scheduler name is its own loop (`SimScheduler.run_loop`, one asyncio task each in
`sim.cluster.SimCluster`), as kube-scheduler, hami-scheduler, kai-scheduler and
tensor-fusion's scheduler are separate processes in a cluster: each has its own resync
timer, and each pass works from the view it took at its start (plus its own binds, as
kube-scheduler's cache assumes a pod on its node before the bind lands), yielding to the
other loops after taking the view and then every couple of milliseconds. So no scheduler
wins every tie, and two of them can bind pods to the same node from views that predate each other's
binds: they may **double-book** a node's ``nvidia.com/gpu`` or a device's share, as real
schedulers sharing nodes can (the kubelet's admission then rejects the younger pod with
``OutOfnvidia.com/gpu``, see `sim.kubelet`; an over-shared device is not caught). KAI's
binder makes no reservation pod the kubelet would reject: its fractional pod is then not
bound (`SimScheduler._reserve`), as the real binder's wait for the reservation fails.
Binding follows the pods/binding subresource (``BindingREST`` in kubernetes
``pkg/registry/core/pod/storage``): binding a pod that is already bound, or being
deleted, fails with a Conflict.

Sharing layers, beyond `gpushare`:

- HAMi (`sim.hami`): on a node running HAMi's device plugin, ``nvidia.com/gpu`` counts
  split slots (GPUs x 10), so kube-scheduler fits a plain ``nvidia.com/gpu`` pod by that
  count alone and assigns it no physical device; HAMi's scheduler places its pods by the
  physical devices' memory and cores.
- KAI (`sim.kai`): binding a fractional pod first makes sure a reservation pod holds its
  GPU (one per shared GPU, in ``kai-resource-reservation``), and the kai-scheduler loop
  deletes reservation pods whose GPU group has no live pod left, as KAI's binder does.
  KAI's pods never go to a HAMi node (`KAI_ON_HAMI`): HAMi's device plugin would not
  give their GPUs a device.
- Volcano (`sim.volcano`, loop ``volcano``, served by `CLUSTER_SCHEDULER_NAMES`): the same
  filters, then its vGPUs placed by binpack, each of a container on its own card; an
  unschedulable pod gets Volcano's ``FitErrors`` message (``0/2 nodes are unavailable: 1
  Insufficient volcano.sh/vgpu-number, 1 hami-vgpuDeviceSharing error.``), no preemption.
  Volcano checks a node's resources before its predicates; the sim keeps kube-scheduler's
  order, so a node failing both reports its predicate failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from copy import deepcopy
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, Literal, TypeVar, get_args

from sim import deviceplugins, dra, filters, gpushare, kai, volcano
from sim.events import EventRecorder
from sim.filters import (
    KAI_ON_HAMI,
    NodeInfo,
    PodInfo,
    Status,
    fit_error,
    quantities,
    signature,
)
from sim.filters import filter_node as _filter
from sim.podview import PodView
from sim.scheduling import is_terminal, node_taints, pod_requests
from sim.store import (
    NAMESPACES,
    NODES,
    PODS,
    RESOURCECLAIMS,
    RESOURCESLICES,
    AlreadyExists,
    ApiError,
    Conflict,
    NotFound,
    Obj,
    Store,
    rfc3339,
)

__all__ = [
    "BACKOFF_SCHEDULERS",
    "CLUSTER_SCHEDULER_NAMES",
    "DEFAULT_SCHEDULER_NAMES",
    "KAI_ON_HAMI",
    "MOST_ALLOCATED_WEIGHTS",
    "REAL_BACKOFF_SECONDS",
    "SCORING_STRATEGIES",
    "ScoringStrategy",
    "SimScheduler",
    "node_order",
    "node_properties",
    "scheduling_properties",
]

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER_NAMES = (
    "default-scheduler",
    "hami-scheduler",
    "kai-scheduler",
    "tensor-fusion-scheduler",
)
#: What `sim.cluster.SimCluster` serves: also Volcano's scheduler (`sim.volcano`), which a
#: bare `SimScheduler` leaves alone as any other unknown name.
CLUSTER_SCHEDULER_NAMES = (*DEFAULT_SCHEDULER_NAMES, volcano.SCHEDULER_NAME)
#: The schedulers built on kube-scheduler's scheduling queue, whose pods wait out a
#: backoff after each failed attempt (`SimScheduler.backoff`): kube-scheduler itself,
#: HAMi's (kube-scheduler with HAMi's extender) and tensor-fusion's (a kube-scheduler
#: build with its plugins). KAI's and Volcano's schedulers open a session every period
#: and try every pending pod in it.
BACKOFF_SCHEDULERS: Final = frozenset(
    {"default-scheduler", "hami-scheduler", "tensor-fusion-scheduler"}
)
#: KubeSchedulerConfiguration v1 defaults: podInitialBackoffSeconds 1,
#: podMaxBackoffSeconds 10 (``pkg/scheduler/apis/config/v1/defaults.go``), seconds.
REAL_BACKOFF_SECONDS: Final = (1.0, 10.0)
#: kube-scheduler's ``DefaultPodMaxInUnschedulablePodsDuration`` (5 min,
#: ``pkg/scheduler/backend/queue/scheduling_queue.go``): a pod parked in
#: unschedulablePods longer than this is tried again whatever happened, seconds.
MAX_IN_UNSCHEDULABLE_SECONDS: Final = 300.0
#: Longest stretch a scheduler pass runs before it yields to the event loop, seconds.
_SLICE_SECONDS: Final = 0.002
_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
#: Node changes `SimScheduler` keeps for the queueing hints (`_woken_by_nodes`); a pod
#: parked before the oldest is retried.
_NODE_CHANGES_KEPT: Final = 4096


_V = TypeVar("_V")


def _pruned(table: dict[str, _V], pods: Mapping[str, Obj]) -> dict[str, _V]:
    """``table`` (keyed by pod uid) without the pods no longer in ``pods``, once it holds
    more than twice as many entries (plus 1,024); else ``table`` itself."""
    if len(table) <= 2 * len(pods) + 1024:
        return table
    return {uid: v for uid, v in table.items() if uid in pods}


def scheduling_properties(pod: Mapping[str, Any]) -> str:
    """What of ``pod`` a write must change to retry it from unschedulablePods, as JSON:
    its labels, tolerations, scheduling gates, containers' resources and resource claims
    (with their statuses). Source: kube-scheduler v1.32 ``framework.
    PodSchedulingPropertiesChange`` (``pkg/scheduler/framework/events.go``): any other
    update is ``updatePodOther``, which no default plugin's queueing hint takes. The sim
    is coarser: kube-scheduler asks only the plugins that rejected the pod, so a label
    change does not retry a pod NodeResourcesFit rejected (checked against the real
    kube-scheduler v1.32.13 of ../shared/realk8s: annotation writes, a label on a node
    the pod cannot fit and a label on the pod made no new attempt; allocatable that fits
    and a bound pod deleted did). The product writes only annotations on pending pods."""
    spec = pod.get("spec") or {}
    return json.dumps(
        [
            (pod.get("metadata") or {}).get("labels"),
            spec.get("tolerations"),
            spec.get("schedulingGates"),
            [c.get("resources") for c in spec.get("initContainers") or ()],
            [c.get("resources") for c in spec.get("containers") or ()],
            spec.get("resourceClaims"),
            (pod.get("status") or {}).get("resourceClaimStatuses"),
        ],
        sort_keys=True,
    )


def node_properties(node: Mapping[str, Any]) -> str:
    """What of ``node`` a change of may make an unschedulable pod fit, as JSON: labels,
    taints (with the ``not-ready`` one the node lifecycle controller sets while it is not
    Ready, `sim.scheduling.node_taints`), ``spec.unschedulable`` and allocatable (the
    node update events the default plugins register with queueing hints on, their
    ``EventsToRegister``: UpdateNodeLabel, UpdateNodeTaint, UpdateNodeAllocatable)."""
    spec = node.get("spec") or {}
    return json.dumps(
        [
            (node.get("metadata") or {}).get("labels"),
            node_taints(node),
            spec.get("unschedulable"),
            (node.get("status") or {}).get("allocatable"),
        ],
        sort_keys=True,
    )


def _parsed_node(node: Obj) -> NodeInfo:
    """A `NodeInfo` of ``node`` with no pods: its parsed allocatable, GPU devices, taints
    (`sim.scheduling.node_taints`) and GPU agent (`sim.deviceplugins.node_plugin`)."""
    plugin = deviceplugins.node_plugin(node)
    return NodeInfo(
        node,
        node["metadata"]["name"],
        quantities((node.get("status") or {}).get("allocatable")),
        gpushare.node_devices(node, plugin),
        node_taints(node),
        plugin=plugin,
    )


def _condition(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return {}


def _set_condition(
    pod: Obj, status: str, reason: str | None, message: str | None, now: str
) -> None:
    """``podutil.UpdatePodCondition`` for PodScheduled: lastTransitionTime moves only
    when the status does."""
    conditions: list[Obj] = pod.setdefault("status", {}).setdefault("conditions", [])
    new: Obj = {"type": "PodScheduled", "status": status, "lastProbeTime": None}
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    for i, old in enumerate(conditions):
        if old.get("type") == "PodScheduled":
            same = old.get("status") == status and old.get("lastTransitionTime")
            new["lastTransitionTime"] = old["lastTransitionTime"] if same else now
            conditions[i] = new
            return
    new["lastTransitionTime"] = now
    conditions.append(new)


def _ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _most_used(node: NodeInfo) -> tuple[float, str]:
    return (-sum(node.gpu_used), node.name)


#: The resources kube-scheduler's default scoring weighs, weight 1 each
#: (``pkg/scheduler/apis/config/v1/default_plugins.go``, NodeResourcesFit's default
#: ``LeastAllocated`` strategy and NodeResourcesBalancedAllocation).
SCORED_RESOURCES: Final = ("cpu", "memory")
#: kube-scheduler's ``framework.MaxNodeScore``.
MAX_NODE_SCORE: Final = 100

#: NodeResourcesFit's ``scoringStrategy.type`` (``KubeSchedulerConfiguration``):
#: ``LeastAllocated`` is kube-scheduler's default; ``MostAllocated`` packs.
ScoringStrategy = Literal["LeastAllocated", "MostAllocated"]
SCORING_STRATEGIES: Final[tuple[ScoringStrategy, ...]] = get_args(ScoringStrategy)
#: The resources and weights the sim's ``MostAllocated`` scores by: the configuration
#: docs/limits.md recommends for GPU pods on kube-scheduler ("kube-scheduler spreads
#: whole-GPU pods"), which the real control plane ran in real runs 27 to 29.
MOST_ALLOCATED_WEIGHTS: Final = (("nvidia.com/gpu", 10), ("cpu", 1), ("memory", 1))


def _most_allocated(wanted: Mapping[str, Decimal], node: NodeInfo) -> int:
    """NodeResourcesFit's ``MostAllocated`` score (``most_allocated.go``): per resource
    of `MOST_ALLOCATED_WEIGHTS`, the share requested once the pod is placed (a request
    above capacity counts as the capacity), times `MAX_NODE_SCORE`, weighted; a
    resource the node has none of is left out, and so is an extended resource the pod
    does not request (``calculateResourceAllocatableRequest``,
    ``resource_allocation.go``)."""
    total = weights = 0
    for name, weight in MOST_ALLOCATED_WEIGHTS:
        capacity = node.allocatable.get(name, Decimal(0))
        asked = wanted.get(name, Decimal(0))
        if capacity <= 0 or (name not in SCORED_RESOURCES and asked <= 0):
            continue
        used = node.scored.get(name) if name in SCORED_RESOURCES else node.requested.get(name)
        requested = min((used or Decimal(0)) + asked, capacity)
        total += int(requested * MAX_NODE_SCORE / capacity) * weight
        weights += weight
    return total // weights if weights else 0


def kube_score(
    wanted: Mapping[str, Decimal], node: NodeInfo, strategy: ScoringStrategy = "LeastAllocated"
) -> int:
    """kube-scheduler's score of ``node`` for a pod asking ``wanted`` (its
    `sim.filters.nonzero_requests`, plus its ``nvidia.com/gpu`` for ``MostAllocated``),
    from its resource plugins (weight 1 each): NodeResourcesFit's ``strategy``, by
    default ``LeastAllocated`` (the mean over `SCORED_RESOURCES` of the share left free
    once the pod is placed, 0 to `MAX_NODE_SCORE`;
    ``pkg/scheduler/framework/plugins/noderesources/least_allocated.go``), else
    ``MostAllocated`` (`_most_allocated`), plus NodeResourcesBalancedAllocation
    (`MAX_NODE_SCORE` times one minus the standard deviation of the CPU and memory
    requested shares; ``balanced_allocation.go``). By default no extended resource
    counts: ``nvidia.com/gpu`` does not, so 1-GPU pods spread over the nodes with the
    most CPU and memory free rather than fill one node's GPUs."""
    least = 0
    shares: list[float] = []
    for name in SCORED_RESOURCES:
        capacity = node.allocatable.get(name, Decimal(0))
        requested = node.scored.get(name, Decimal(0)) + wanted[name]
        if capacity <= 0:
            shares.append(1.0)
            continue
        if requested <= capacity and strategy == "LeastAllocated":
            least += int((capacity - requested) * MAX_NODE_SCORE / capacity)
        shares.append(min(float(requested / capacity), 1.0))
    fit = least // len(SCORED_RESOURCES)
    if strategy == "MostAllocated":
        fit = _most_allocated(wanted, node)
    mean = sum(shares) / len(shares)
    deviation = (sum((x - mean) ** 2 for x in shares) / len(shares)) ** 0.5
    return fit + int((1 - deviation) * MAX_NODE_SCORE)


def _kube_order(
    info: PodInfo, strategy: ScoringStrategy = "LeastAllocated"
) -> Callable[[NodeInfo], tuple[int, str]]:
    wanted = filters.nonzero_requests(info)  # once per pod, not per node
    if strategy == "MostAllocated":
        wanted["nvidia.com/gpu"] = info.requests.get("nvidia.com/gpu", Decimal(0))
    return lambda node: (-kube_score(wanted, node, strategy), node.name)


def _fewest_idle(node: NodeInfo) -> tuple[int, float, str]:
    return (sum(1 for used in node.gpu_used if used <= 0), -sum(node.gpu_used), node.name)


def node_order(
    scheduler: str, info: PodInfo | None = None, scoring: ScoringStrategy = "LeastAllocated"
) -> Callable[[NodeInfo], tuple[Any, ...]]:
    """The key a scheduler's feasible nodes are sorted by, the first one taken.

    - ``kai-scheduler``: the fewest idle GPUs first (devices with nothing on them), as
      KAI's default ``binpack`` node placement scores a node linearly from the most idle
      GPUs of the fitting nodes (score 0) to the fewest (the highest;
      NVIDIA/KAI-Scheduler ``pkg/scheduler/plugins/nodeplacement``, its
      ``nodepack_test.go``): an 8-GPU node with 6 idle loses to a 4-GPU node with 4.
    - ``default-scheduler`` (kube-scheduler) placing ``info``: the highest `kube_score`
      with NodeResourcesFit's ``scoring``; its default scoring of CPU and memory
      spreads pods (real run 17: eight 1-GPU T4 pods went to eight nodes, and the 4-GPU
      pods then fit none). Without ``info``, as the others.
    - every other scheduler: the most GPU share used first (a GPU binpack; HAMi's
      default node policy is ``binpack``, HAMi ``pkg/scheduler/config/config.go``).

    Ties go by node name (the real schedulers break them at random)."""
    if scheduler == "kai-scheduler":
        return _fewest_idle
    if scheduler == "default-scheduler" and info is not None:
        return _kube_order(info, scoring)
    return _most_used


class SimScheduler:
    """Binds pending pods to nodes, or marks them ``PodScheduled=False/Unschedulable``
    with a FailedScheduling event, as kube-scheduler (and HAMi, KAI-Scheduler and
    tensor-fusion's schedulers for their pods) would.

    Args:
        store: the sim's object store.
        scheduler_names: ``spec.schedulerName`` values served (absent means
            ``default-scheduler``); other pods are left alone.
        resync_seconds: longest wait between passes when nothing changes.
        backoff_seconds: (initial, max) backoff of the `BACKOFF_SCHEDULERS`' pods after
            a failed attempt (`backoff`); `REAL_BACKOFF_SECONDS` are kube-scheduler's
            defaults, (0, 0) retries at once.
        scoring: kube-scheduler's NodeResourcesFit scoring strategy for the
            ``default-scheduler`` (`kube_score`): its default ``LeastAllocated``, or
            ``MostAllocated`` with `MOST_ALLOCATED_WEIGHTS`.
    """

    def __init__(
        self,
        store: Store,
        *,
        scheduler_names: Sequence[str] = DEFAULT_SCHEDULER_NAMES,
        resync_seconds: float = 0.5,
        backoff_seconds: tuple[float, float] = (0.0, 0.0),
        scoring: ScoringStrategy = "LeastAllocated",
    ) -> None:
        self._store = store
        #: kube-scheduler's NodeResourcesFit scoring strategy (`kube_score`).
        self._scoring: ScoringStrategy = scoring
        #: kube-scheduler's podInitialBackoffSeconds and podMaxBackoffSeconds (`backoff`).
        self._backoff = backoff_seconds
        #: uid -> (failed scheduling attempts, monotonic seconds of the last one), for
        #: the schedulers built on kube-scheduler's queue (`BACKOFF_SCHEDULERS`).
        self._attempts: dict[str, tuple[int, float]] = {}
        self._names = tuple(dict.fromkeys(scheduler_names))
        self._resync = resync_seconds
        self._recorders: dict[str, EventRecorder] = {}
        self._cache: dict[str, tuple[str, PodInfo | None]] = {}
        self._nodes: dict[str, tuple[tuple[str, str], NodeInfo]] = {}
        self._view = PodView(store)
        #: node -> ((PodView.node_version, node uid, node resourceVersion), its bound
        #: pods' infos, their summed requests, the GPU share used on each device, and
        #: their CPU and memory as kube-scheduler's scoring counts them)
        self._bound: dict[
            str,
            tuple[
                tuple[int, str, str],
                list[PodInfo],
                dict[str, Decimal],
                list[float],
                dict[str, Decimal],
            ],
        ] = {}
        self._warned: set[tuple[str, str]] = set()
        self._rng = random.Random()
        #: kube-scheduler's unschedulablePods: uid -> (the pod's `scheduling_properties`
        #: and the `_cluster_token` when it was found unschedulable, monotonic seconds
        #: then, and the pod's resourceVersion those properties were last read at: a pod
        #: not written since is not encoded again on every pass)
        self._parked: dict[str, tuple[str, tuple[int, ...], float, str]] = {}
        #: The store's node write last read, and each node's (`node_properties`, object)
        #: then (`_node_changes`).
        self._node_seen: tuple[int, dict[str, tuple[str, Obj]]] = (-1, {})
        #: The nodes' changes of scheduling properties, oldest first: (number, the node
        #: before (None: added), after (None: removed)); `_node_changes`' count is the last
        #: number. Kept to `_NODE_CHANGES_KEPT`.
        self._node_log: list[tuple[int, Obj | None, Obj | None]] = []
        self._node_count = 0
        #: (pod `signature`, node change number, after it) -> `_fits_empty`
        self._hints: dict[tuple[str, int, bool], bool] = {}
        #: uid -> (resourceVersion, `kai.group_role` of the pod at it)
        self._roles: dict[str, tuple[str, tuple[bool, tuple[str, ...]]]] = {}
        #: (`PodView.departures`, reservation pods created) at the last `_sync_reservations`
        self._synced: tuple[int, int] | None = None
        self._reservations_made = 0
        #: Per scheduler name, the passes its `run_loop` completed, and the store's
        #: resourceVersion the newest of them started at (it saw every write up to it):
        #: what a test waits on (`passes`, `passed`) instead of sleeping. Observation only.
        self.passes_done: dict[str, int] = {}
        self.seen_version: dict[str, int] = {}
        self._pass_done_event: asyncio.Event | None = None

    def loops(self) -> dict[str, Coroutine[Any, Any, None]]:
        """One `run_loop` coroutine per scheduler name, to run as separate tasks."""
        return {name: self.run_loop(name) for name in self._names}

    async def run(self) -> None:
        """Every scheduler name's loop, concurrently, until cancelled."""
        await asyncio.gather(*self.loops().values())

    async def run_loop(self, name: str) -> None:
        """The loop of the scheduler called ``name``: a pass now, then after every pod or
        node change and every ``resync_seconds``, until cancelled. A pass yields to the
        event loop after taking its view (so racing schedulers can each take theirs before
        either binds) and then after each `_SLICE_SECONDS` of work, so the other loops
        run meanwhile and race it, as separate scheduler processes do, without a pass over
        hundreds of pending pods taking hundreds of event-loop turns.
        A pass that raises is logged and retried a second later."""
        while True:
            seen = self._store.resource_version
            wait = self._resync
            try:
                slice_end = 0.0  # the first yield, after taking the view, always yields
                for _ in self._pass(name):
                    if time.monotonic() >= slice_end:
                        await asyncio.sleep(0)
                        slice_end = time.monotonic() + _SLICE_SECONDS
            except Exception:
                log.exception("%s pass failed; retrying in 1s", name)
                wait = 1.0
            else:
                self._pass_done(name, seen)
            await self._store.wait_changed(
                wait, since=seen, kinds=(PODS, NODES, RESOURCECLAIMS, RESOURCESLICES)
            )

    async def passes(
        self, n: int = 1, *, names: Iterable[str] | None = None, within: float
    ) -> None:
        """Wait until the loop (`run_loop`) of each scheduler in ``names`` (default: all)
        has completed ``n`` more passes than now. Raises `TimeoutError` after ``within``
        seconds (a loop that is not running completes none)."""
        wanted = tuple(self._names if names is None else names)
        targets = {name: self.passes_done.get(name, 0) + n for name in wanted}
        await self._until(
            lambda: all(self.passes_done.get(k, 0) >= v for k, v in targets.items()), within
        )

    async def passed(
        self,
        version: int | None = None,
        *,
        names: Iterable[str] | None = None,
        within: float,
    ) -> None:
        """Wait until the loop of each scheduler in ``names`` (default: all) has completed
        a pass that started at the store's resourceVersion ``version`` (default: now) or
        later, so saw every write up to it: after it, each pending pod it serves that
        existed then has been tried (bound, or marked) unless it waits in
        unschedulablePods (`_is_parked`). Raises `TimeoutError` after ``within`` seconds."""
        floor = self._store.resource_version if version is None else version
        wanted = tuple(self._names if names is None else names)
        await self._until(
            lambda: all(self.seen_version.get(name, -1) >= floor for name in wanted), within
        )

    async def _until(self, check: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            while not check():
                if self._pass_done_event is None:
                    self._pass_done_event = asyncio.Event()
                await self._pass_done_event.wait()

    def _pass_done(self, name: str, seen: int) -> None:
        """Count a completed pass of ``name`` that started at resourceVersion ``seen``,
        and wake `passes` and `passed`."""
        self.passes_done[name] = self.passes_done.get(name, 0) + 1
        self.seen_version[name] = seen
        if self._pass_done_event is not None:
            self._pass_done_event.set()
            self._pass_done_event = None

    def schedule_once(self, names: Iterable[str] | None = None) -> int:
        """One pass of each scheduler in ``names`` (default: all), one after another,
        each from its own view; returns how many pods were bound."""
        return sum(sum(self._pass(name)) for name in (self._names if names is None else names))

    def _cluster_token(self) -> tuple[int, ...]:
        """What changes when a pod found unschedulable may fit now: a node added, or its
        labels, taints, allocatable or ``spec.unschedulable`` changed (`node_properties`),
        a write to a ResourceClaim or a ResourceSlice (for a pod with claims), or a bound
        pod deleted or finished
        (`PodView.released`). A bind is not in it: it only takes capacity. A node's
        annotations, conditions or heartbeats are not either: with SchedulerQueueingHints
        (on by default since v1.32, ``pkg/features/versioned_kube_features.go``) the node
        events NodeResourcesFit, NodeAffinity, TaintToleration and NodeUnschedulable
        register are Add, UpdateNodeAllocatable, UpdateNodeLabel and UpdateNodeTaint
        (their ``EventsToRegister``)."""
        return (
            self._node_changes(),
            self._store.last_write(RESOURCECLAIMS),
            self._store.last_write(RESOURCESLICES),
            self._view.released,
        )

    def _node_changes(self) -> int:
        """How many times a node was added, removed or changed its `node_properties`;
        each change is logged for `_woken_by_nodes`. Reads the nodes only after a node
        write."""
        last = self._store.last_write(NODES)
        seen, props = self._node_seen
        if last != seen:
            nodes, _ = self._store.list(NODES, copy_objects=False)
            now: dict[str, tuple[str, Obj]] = {}
            for n in nodes:
                name, current = n["metadata"]["name"], node_properties(n)
                before = props.get(name)
                # a copy of each version logged: the store may change its objects in place
                now[name] = before if before and before[0] == current else (current, deepcopy(n))
            for name in props.keys() | now.keys():
                before, after = props.get(name), now.get(name)
                if before is None or after is None or before[0] != after[0]:
                    self._node_count += 1
                    self._node_log.append(
                        (
                            self._node_count,
                            None if before is None else before[1],
                            None if after is None else after[1],
                        )
                    )
            del self._node_log[:-_NODE_CHANGES_KEPT]
            self._node_seen = (last, now)
        return self._node_count

    def _woken_by_nodes(self, pod: Obj, since: int) -> bool:
        """Whether a node change after change number ``since`` may make ``pod`` fit, as
        the queueing hints of the default filter plugins judge one (kube-scheduler
        v1.32, on by default): the pod passes every filter on the changed node with no
        pod bound (NodeResourcesFit ``isSchedulableAfterNodeChange`` compares the
        requests with allocatable only) and did not on it before the change (a node
        added, or its labels, taints or allocatable changed so that the pod now
        matches). True too when the log no longer reaches back to ``since``."""
        log_ = self._node_log
        if log_ and log_[0][0] > since + 1:
            return True
        info = self._info(pod)
        if info is None:
            return False
        for number, before, after in reversed(log_):
            if number <= since:
                break
            if (
                after is not None
                and self._fits_empty(info, number, after, after=True)
                and (before is None or not self._fits_empty(info, number, before, after=False))
            ):
                return True
        return False

    def _fits_empty(self, info: PodInfo, number: int, node: Obj, *, after: bool) -> bool:
        """Whether ``info`` passes every filter on ``node`` (the node ``after`` or before
        change ``number``) with no pod bound there; cached per pod `signature`."""
        key = (signature(info), number, after)
        cached = self._hints.get(key)
        if cached is None:
            if len(self._hints) > 4 * _NODE_CHANGES_KEPT:
                self._hints.clear()
            empty = _parsed_node(node)
            empty.refresh_gpus()
            cached = self._hints[key] = filters.filter_node(info, empty) is None
        return cached

    def _is_parked(self, pod: Obj, token: tuple[int, ...], now: float) -> bool:
        """Whether ``pod`` waits in unschedulablePods: found unschedulable with its current
        `scheduling_properties`, nothing in `_cluster_token` changed since, and for less
        than `MAX_IN_UNSCHEDULABLE_SECONDS`."""
        meta = pod["metadata"]
        uid = meta["uid"]
        parked = self._parked.get(uid)
        if parked is None:
            return False
        version = meta.get("resourceVersion", "")
        if parked[3] != version:
            if parked[0] != scheduling_properties(pod):
                return False
            parked = self._parked[uid] = (*parked[:3], version)
        # A write to a ResourceClaim or ResourceSlice (token[1:3]) may make only a pod
        # with claims fit: DynamicResources is the one plugin registering those events.
        claims = bool((pod.get("spec") or {}).get("resourceClaims"))
        if (
            (claims and parked[1][1:3] != token[1:3])
            or parked[1][3:] != token[3:]
            or now - parked[2] >= MAX_IN_UNSCHEDULABLE_SECONDS
        ):
            return False
        if parked[1][0] != token[0]:
            if self._woken_by_nodes(pod, parked[1][0]):
                return False
            self._parked[uid] = (parked[0], token, parked[2], parked[3])
        return True

    def _pass(self, name: str) -> Iterator[bool]:
        """One pass of the scheduler ``name``: take the view, yield, then try each of its
        pending pods in PrioritySort order, yielding whether it was bound.

        As kube-scheduler's scheduling queue (``pkg/scheduler/backend/queue/
        scheduling_queue.go``), a pod found unschedulable waits in unschedulablePods
        and is not tried again until it changes itself, or a cluster event may make
        it fit (a node added or changed, an assigned pod deleted: the queueing hints
        of NodeResourcesFit, NodeAffinity, TaintToleration and DynamicResources), or
        `MAX_IN_UNSCHEDULABLE_SECONDS` pass (``podMaxInUnschedulablePodsDuration``).
        Binding another pod only takes capacity, so it moves none of them. A write to
        the pod itself retries it only if it changes its `scheduling_properties`: an
        annotation or status write does not, as kube-scheduler v1.32's
        ``PriorityQueue.Update`` asks the queueing hints, which no default plugin
        registers for such an update."""
        view = self._view
        view.refresh()
        token = self._cluster_token()
        now = time.monotonic()
        pending: list[PodInfo] = []
        queued = name in BACKOFF_SCHEDULERS
        for pod in view.pending.get(name, {}).values():
            if self._is_parked(pod, token, now) or (
                queued and self.backoff(pod["metadata"]["uid"], now) > 0
            ):
                continue
            info = self._info(pod)
            if info is not None:
                pending.append(info)
        self._cache = _pruned(self._cache, view.pods)
        self._parked = _pruned(self._parked, view.pods)
        self._attempts = _pruned(self._attempts, view.pods)
        self._roles = _pruned(self._roles, view.pods)
        if name == "kai-scheduler" and self._synced != (view.departures, self._reservations_made):
            self._synced = (view.departures, self._reservations_made)
            self._sync_reservations(list(view.pods.values()))
        if not pending:
            yield False
            return  # nothing to place: the nodes need not be read (1,000 nodes cost 10s of ms)
        node_objs, _ = self._store.list(NODES, copy_objects=False)
        nodes = {n["metadata"]["name"]: self._node_with_pods(n) for n in node_objs}
        self._nodes = {k: v for k, v in self._nodes.items() if k in nodes}
        self._bound = {k: v for k, v in self._bound.items() if k in nodes}
        yield False
        pending.sort(
            key=lambda p: (-p.priority, p.pod["metadata"].get("creationTimestamp", ""), _ref(p.pod))
        )
        ordered = sorted(nodes.values(), key=lambda n: n.name)
        failed: dict[str, str] = {}
        verdicts: dict[str, dict[str, Status | None]] = {}
        state = (
            dra.DraState.load(self._store)
            if any((p.pod.get("spec") or {}).get("resourceClaims") for p in pending)
            else None
        )
        for info in pending:
            if (info.pod.get("spec") or {}).get("schedulingGates"):
                self._mark(info.pod, "SchedulingGated", _GATED_MESSAGE, event=False)
                yield False
            else:
                yield self._schedule(info, ordered, failed, state, token, verdicts, name)

    @staticmethod
    def _serves(pod: Mapping[str, Any], name: str) -> bool:
        return ((pod.get("spec") or {}).get("schedulerName") or "default-scheduler") == name

    def _node_with_pods(self, node: Obj) -> NodeInfo:
        """A fresh `NodeInfo` of ``node`` holding its bound pods; the pods' infos and
        summed requests are cached per node until the view says its pods changed."""
        meta = node["metadata"]
        name = meta["name"]
        info = self._node_info(node)
        version = (
            self._view.node_version.get(name, 0),
            meta.get("uid", ""),
            meta.get("resourceVersion", ""),
        )
        cached = self._bound.get(name)
        if cached is None or cached[0] != version:
            summed = NodeInfo(node, name, info.allocatable, info.devices, plugin=info.plugin)
            for pod in self._view.bound_on(name):
                if is_terminal(pod):
                    continue
                summed.add(self._info(pod) or PodInfo(pod, 0, {"pods": Decimal(1)}, None))
            summed.refresh_gpus()
            cached = (version, summed.pods, summed.requested, summed.gpu_used, summed.scored)
            self._bound[name] = cached
        info.pods = list(cached[1])
        info.requested = dict(cached[2])
        info.gpu_used = list(cached[3])
        info.scored = dict(cached[4])
        return info

    def _node_info(self, node: Obj) -> NodeInfo:
        """A fresh `NodeInfo` of ``node`` with no pods; its parsed allocatable, devices,
        taints and GPU agent are cached per uid and resourceVersion."""
        meta = node["metadata"]
        key = (meta.get("uid", ""), meta.get("resourceVersion", ""))
        cached = self._nodes.get(meta["name"])
        if cached is None or cached[0] != key:
            cached = (key, _parsed_node(node))
            self._nodes[meta["name"]] = cached
        base = cached[1]
        return NodeInfo(
            node, base.name, base.allocatable, base.devices, base.taints, plugin=base.plugin
        )

    def _info(self, pod: Obj) -> PodInfo | None:
        """Requests and GPU demand of ``pod``, cached per resourceVersion; None (with one
        warning) if a quantity or annotation does not parse."""
        uid, rv = pod["metadata"]["uid"], pod["metadata"].get("resourceVersion", "")
        cached = self._cache.get(uid)
        if cached is not None and cached[0] == rv:
            if cached[1] is not None:
                cached[1].pod = pod
            return cached[1]
        info: PodInfo | None
        try:
            info = PodInfo(
                pod,
                int((pod.get("spec") or {}).get("priority") or 0),
                pod_requests(pod),
                gpushare.demand(pod),
            )
        except ValueError as e:
            info = None
            if (uid, rv) not in self._warned:
                self._warned.add((uid, rv))
                log.warning("cannot schedule %s: %s", _ref(pod), e)
        self._cache[uid] = (rv, info)
        return info

    def _schedule(
        self,
        info: PodInfo,
        nodes: list[NodeInfo],
        failed: dict[str, str],
        state: dra.DraState | None,
        token: tuple[int, ...],
        verdicts: dict[str, dict[str, Status | None]],
        scheduler: str = "default-scheduler",
    ) -> bool:
        """Bind ``info`` (on the feasible node `node_order` of ``scheduler`` puts first)
        or mark it unschedulable (and park it, with ``token``, the
        pass's `_cluster_token`). ``failed`` maps the `signature` of
        pods found unschedulable in this pass (since the last bind) to their message:
        an identical pod gets the same verdict without filtering every node again.
        ``verdicts`` (signature -> node name -> `_filter`'s result) remembers the
        filters' verdicts of this pass for pods without ResourceClaims: a verdict holds
        until its node changes, that is until a pod is bound there, when this forgets
        that node's. ``state`` is the DRA view of this pass (None when no pending pod
        has claims)."""
        claims: list[Obj] = []
        if state is not None and (info.pod.get("spec") or {}).get("resourceClaims"):
            try:
                claims = dra.pod_claims(info.pod, state)
            except dra.ClaimError as e:  # PreEnqueue: not tried, no condition written
                warned = (info.pod["metadata"]["uid"], str(e))
                if warned not in self._warned:
                    self._warned.add(warned)
                    log.info("%s waits: %s", _ref(info.pod), e)
                return False
        if not nodes:
            self._unschedulable(info.pod, fit_error(info, [], {}), token)
            return False
        key = signature(info)
        if key in failed:
            self._unschedulable(info.pod, failed[key], token)
            return False
        statuses: dict[str, Status] = {}
        feasible: list[NodeInfo] = []
        allocations: dict[str, dict[tuple[str, str], list[tuple[str, dra.DeviceId]]]] = {}
        known = {} if claims else verdicts.setdefault(key, {})
        for node in nodes:
            if node.name not in known:
                known[node.name] = _filter(info, node)
            status = known[node.name]
            if status is None and claims:
                assert state is not None
                allocated = dra.allocate(claims, node.name, state)
                if isinstance(allocated, str):
                    status = Status((allocated,), True)
                else:
                    allocations[node.name] = allocated
            if status is None:
                feasible.append(node)
            else:
                statuses[node.name] = status
        if not feasible:
            failed[key] = fit_error(info, nodes, statuses)
            self._unschedulable(info.pod, failed[key], token)
            return False
        best = min(feasible, key=node_order(scheduler, info, self._scoring))
        used = best.gpu_used
        if scheduler in BACKOFF_SCHEDULERS and not claims:
            fresh = self._fresh_fit(info, best.name)
            if fresh is None:
                return False  # tried again in the next pass, on what is bound now
            used = fresh.gpu_used
        assignment: gpushare.Assignment = ()
        annotations: dict[str, str] = {}
        if info.demand is not None and best.places_devices(info):
            placed = gpushare.place(info.demand, best.devices, used)
            assert not isinstance(placed, gpushare.NoFit)  # the filter just placed it
            assignment = placed
            annotations = gpushare.bind_annotations(
                info.demand, best.devices, assignment, time.time_ns()
            )
        if claims:
            assert state is not None
            if not self._reserve_claims(info.pod, claims, allocations[best.name], best.name, state):
                return False
        if not self._bind(info.pod, best.name, assignment, annotations):
            return False
        best.add(info)
        for index, share in assignment:
            best.gpu_used[index] += share
        failed.clear()  # the node changed: earlier verdicts may no longer hold
        for per_node in verdicts.values():
            per_node.pop(best.name, None)
        return True

    def _fresh_fit(self, info: PodInfo, node: str) -> NodeInfo | None:
        """``node`` as the store shows it now, if ``info`` still fits there, else None.

        kube-scheduler (and the schedulers built on it, `BACKOFF_SCHEDULERS`) filters
        each pod on a snapshot of its cache taken for that pod's scheduling cycle
        (``schedulePod`` calls ``Cache.UpdateSnapshot``, ``pkg/scheduler/schedule_one.go``),
        which the informers keep
        current within milliseconds; the sim's pass works from the view it took at its
        start. Checked against the store before the bind, a pod does not take the GPUs
        another scheduler's loop bound since the pass began (a traced 1,000-pod demo: a
        native 2-GPU pod bound onto the two GPUs KAI's reservation pods had taken 40 ms
        before, the kubelet rejected the younger reservation pods, and KAI's fractions
        ran on GPUs they did not hold). KAI's sessions keep their snapshot, as the real
        one does for a whole session."""
        fresh = self._node_now(node)
        return fresh if _filter(info, fresh) is None else None

    def _node_now(self, node: str) -> NodeInfo:
        """``node`` with the pods bound to it in the store now (the view refreshed: binds
        and reservation pods made since the pass began count)."""
        self._view.refresh()
        return self._node_with_pods(self._store.get(NODES, None, node))

    def _reserve_claims(
        self,
        pod: Obj,
        claims: Sequence[Obj],
        allocations: Mapping[tuple[str, str], list[tuple[str, dra.DeviceId]]],
        node: str,
        state: dra.DraState,
    ) -> bool:
        """DynamicResources PreBind: for each claim, the delete-protection finalizer first
        (a metadata write) if it is being allocated, then one status write with
        ``allocation`` (`sim.dra.allocation_status`) and the pod in ``reservedFor``;
        False (logged) if a write fails."""
        for claim in claims:
            meta = claim["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            picks = allocations.get(key)
            allocation = dra.allocation_status(picks, node) if picks is not None else None
            try:
                if allocation is not None and dra.DELETE_PROTECTION_FINALIZER not in (
                    meta.get("finalizers") or ()
                ):
                    self._store.mutate(
                        RESOURCECLAIMS, key[0], key[1],
                        lambda obj: obj["metadata"].setdefault("finalizers", []).append(
                            dra.DELETE_PROTECTION_FINALIZER
                        ),
                    )  # fmt: skip
                updated = self._store.mutate(
                    RESOURCECLAIMS, key[0], key[1],
                    functools.partial(dra.reserve, pod=pod, allocation=allocation),
                    subresource="status",
                )  # fmt: skip
            except ApiError as e:
                log.warning("reserving claim %s/%s for %s failed: %s", *key, _ref(pod), e.message)
                return False
            state.commit(updated)
            if picks is not None:
                devices = ", ".join(d[2] for _, d in picks)
                log.info("allocated claim %s/%s on %s: %s", key[0], key[1], node, devices)
        return True

    def _recorder(self, pod: Mapping[str, Any]) -> EventRecorder:
        name = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if name not in self._recorders:
            self._recorders[name] = EventRecorder(self._store, name)
        return self._recorders[name]

    def _bind(
        self,
        pod: Obj,
        node: str,
        assignment: gpushare.Assignment,
        extra: Mapping[str, str] | None = None,
    ) -> bool:
        """What the pods/binding subresource does, in one write: ``spec.nodeName`` (a
        Conflict if the pod is bound already or being deleted), the binding's annotations
        (`gpushare.DEVICES_ANNOTATION`, plus ``extra``: gpushare's extender patches its
        own just before it binds) and condition ``PodScheduled=True``. A KAI fractional
        pod first gets its GPU groups (`_reserve`)."""
        meta = pod["metadata"]
        now = rfc3339(datetime.now(UTC))
        labels: dict[str, str] = {}
        if assignment and kai.is_fractional(pod):
            reserved = self._reserve(node, assignment)
            if reserved is None:
                return False
            labels = reserved

        def set_node(obj: Obj) -> None:
            name, current = obj["metadata"]["name"], (obj.get("spec") or {}).get("nodeName")
            if obj["metadata"].get("deletionTimestamp"):
                reason = f"pod {name} is being deleted, cannot be assigned to a host"
            elif current:
                reason = f'pod {name} is already assigned to node "{current}"'
            else:
                reason = ""
            if reason:
                raise Conflict(
                    f'Operation cannot be fulfilled on pods/binding "{name}": {reason}',
                    details={"name": name, "kind": "pods/binding"},
                )
            obj.setdefault("spec", {})["nodeName"] = node
            if labels:
                obj["metadata"].setdefault("labels", {}).update(labels)
            if assignment:
                annotations = obj["metadata"].setdefault("annotations", {})
                annotations[gpushare.DEVICES_ANNOTATION] = gpushare.format_assignment(assignment)
                annotations.update(extra or {})

        def bind(obj: Obj) -> None:  # one write, as BindingREST's assignPod
            set_node(obj)
            _set_condition(obj, "True", None, None, now)

        try:
            bound = self._store.mutate(
                PODS, meta["namespace"], meta["name"], bind, subresource="binding"
            )
        except ApiError as e:
            log.warning("binding %s to %s failed: %s", _ref(pod), node, e.message)
            return False
        devices = f" (GPU devices {gpushare.format_assignment(assignment)})" if assignment else ""
        log.info("bound %s to node %s%s", _ref(pod), node, devices)
        self._recorder(pod).record(
            bound, "Normal", "Scheduled", f"Successfully assigned {_ref(pod)} to {node}"
        )
        return True

    def _reserve(self, node: str, assignment: gpushare.Assignment) -> dict[str, str] | None:
        """KAI's binder (``ReserveGpuDevice``): for each device in ``assignment``, the GPU
        group whose reservation pod holds it on ``node``, or a new group and reservation
        pod; returns the pod's group labels, None if a reservation pod cannot be made."""
        fresh = self._node_now(node)  # the reservation pods made since the pass began
        by_device = kai.groups_by_device((p.pod for p in fresh.pods), node)
        if filters.reservations_short(fresh, assignment):
            # The filter passed on the pass's view; the pods bound since (kube-scheduler's
            # loop racing this one) are older than a new reservation pod, which the
            # kubelet then rejects (``OutOfnvidia.com/gpu``): the real binder's wait
            # (``waitForGPUReservationPodAllocation``) times out, the reservation pod is
            # deleted and the bind fails. The pod stays pending.
            log.info("not binding to %s: no free %s for a GPU reservation pod", node, gpushare.GPU)
            return None
        indices = list(dict.fromkeys(i for i, _ in assignment))
        groups: list[str] = []
        for index in indices:
            group = by_device.get(index)
            if group is None:
                group = str(uuid.uuid4())
                suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
                try:
                    self._ensure_reservation_namespace()
                    created = self._store.create(
                        PODS, kai.reservation_pod(node, group, index, suffix)
                    )
                except ApiError as e:
                    log.warning("creating a GPU reservation pod on %s failed: %s", node, e.message)
                    return None
                self._reservations_made += 1
                log.info(
                    "reserved GPU %d of %s for group %s: %s", index, node, group, _ref(created)
                )
            groups.append(group)
        return kai.group_labels(groups)

    def _group_role(self, pod: Mapping[str, Any]) -> tuple[bool, tuple[str, ...]]:
        """`kai.group_role`, cached per pod and resourceVersion."""
        meta = pod["metadata"]
        uid, rv = meta["uid"], meta.get("resourceVersion", "")
        cached = self._roles.get(uid)
        if cached is None or cached[0] != rv:
            cached = (rv, kai.group_role(pod))
            self._roles[uid] = cached
        return cached[1]

    def _ensure_reservation_namespace(self) -> None:
        """``kai-resource-reservation`` exists wherever KAI is installed."""
        with contextlib.suppress(AlreadyExists):
            self._store.create(NAMESPACES, {"metadata": {"name": kai.RESERVATION_NAMESPACE}})

    def _sync_reservations(self, pods: Sequence[Obj]) -> None:
        """KAI's binder ``syncForPods``: delete (grace 0) reservation pods whose GPU group
        has no pod left in phase Pending or Running. `_pass` calls it when a pod may have
        left its group (`PodView.departures`) or a reservation pod was made (its bind
        may have failed, leaving the group empty), not on every pass."""
        for pod in kai.stale_reservations(pods, self._group_role):
            meta = pod["metadata"]
            try:
                self._store.delete(PODS, meta["namespace"], meta["name"], grace_period_seconds=0)
            except NotFound:
                continue
            except ApiError as e:
                log.warning("deleting reservation pod %s failed: %s", _ref(pod), e.message)
                self._synced = None  # try again next pass
                continue
            log.info("deleted reservation pod %s: no pod left in its GPU group", _ref(pod))

    def _unschedulable(self, pod: Obj, message: str, token: tuple[int, ...]) -> None:
        """Mark ``pod`` Unschedulable with ``message`` and park it at the resourceVersion
        it has after that write (not parked if the write failed: the next pass retries);
        count the failed attempt (`backoff`)."""
        uid = pod["metadata"]["uid"]
        now = time.monotonic()
        attempts, _ = self._attempts.get(uid, (0, now))
        self._attempts[uid] = (attempts + 1, now)
        version = self._mark(pod, "Unschedulable", message)
        if version is not None:
            self._parked[uid] = (scheduling_properties(pod), token, now, version)

    def backoff(self, uid: str, now: float) -> float:
        """Seconds the pod ``uid`` still waits in backoffQ at monotonic ``now``, after its
        failed attempts: podInitialBackoffSeconds x 2^(attempts - 1), at most
        podMaxBackoffSeconds, from its last attempt (kube-scheduler
        ``pkg/scheduler/backend/queue/scheduling_queue.go`` ``calculateBackoffDuration``;
        the defaults are 1 s and 10 s, KubeSchedulerConfiguration v1). A cluster event
        moves an unschedulable pod to backoffQ, not activeQ, while this lasts: a new node's
        GPUs wait for the pods Karpenter bought them for while a scheduler without such
        a queue (KAI's and Volcano's sessions) binds others there."""
        initial, maximum = self._backoff
        attempts, last = self._attempts.get(uid, (0, now))
        if attempts == 0 or initial <= 0:
            return 0.0
        wait = min(initial * 2.0 ** (attempts - 1), maximum)
        return max(0.0, last + wait - now)

    def _mark(self, pod: Obj, reason: str, message: str, *, event: bool = True) -> str | None:
        """Set ``PodScheduled=False`` with ``reason``/``message`` unless already so;
        returns the pod's resourceVersion after it (None if the write failed)."""
        current = _condition(pod)
        if (current.get("status"), current.get("reason"), current.get("message")) == (
            "False",
            reason,
            message,
        ):
            return str(pod["metadata"].get("resourceVersion", ""))
        meta = pod["metadata"]
        now = rfc3339(datetime.now(UTC))
        try:
            updated = self._store.mutate(
                PODS,
                meta["namespace"],
                meta["name"],
                lambda obj: _set_condition(obj, "False", reason, message, now),
                subresource="status",
            )
        except ApiError as e:
            log.warning("updating PodScheduled of %s failed: %s", _ref(pod), e.message)
            return None
        log.info("%s is %s: %s", _ref(pod), reason.lower(), message)
        if event:
            self._recorder(pod).record(updated, "Warning", "FailedScheduling", message)
        return str(updated["metadata"].get("resourceVersion", ""))
