"""Trigger planning: ``plan(snapshot, config) -> Plan``, a pure function with no awaits.

Given the pending GPU pods, the live trigger pods, NodeClaims, NodePools and Karpenter's
``Nominated`` evidence, it decides:

1. which pods need no trigger (Karpenter provisions for them natively), which cannot be
   served (no NodePool offers their model, or their node selector or required node
   affinity can never match a node the pool makes) and which intents are invalid;
2. for the rest, grouped by (NodePool, model, copied node selector), the GPU *bins*:
   a pod needing ``g >= 1`` GPUs gets a bin of ``ceil(g)`` whole GPUs; fractional pods
   (and pods that state GPU memory on a card of known memory, by that share) are packed
   best-fit-decreasing into bins with spare share, so two 0.5 pods fill one 1-GPU bin
   (KAI's node-scale-adjuster sums fractions the same way, REFERENCE.md 3);
3. *in-flight accounting*: bins are placed into the GPU capacity of the group's live
   triggers first (most progressed first: Ready, launched, linked, new), whatever their
   size, so a change in packing never replaces capacity already bought; only bins left
   over become new triggers. A trigger no bin needs is deleted, unless its NodeClaim is
   still on its way: then it is kept as supply for demand that may come, and deleted
   when the NodeClaim is Ready or gone;
4. each trigger is linked to a NodeClaim only by evidence: the node a binding trigger
   is bound to, the link recorded earlier, or Karpenter's ``Nominated`` event naming the
   trigger. Nothing is guessed from creation times or pools; without evidence the pod
   is told that no NodeClaim is known yet. When the linked NodeClaim is Ready the
   trigger is deleted and its pods are told ``NodeReady``;
5. pods told ``NodeReady`` stay out of planning for ``cover_seconds`` while their
   NodeClaim stays Ready (longer, up to ``cover_max_seconds``, while their schedulers
   are still binding pods we scaled up for), so the gap between trigger deletion and
   the real pod binding does not buy a second node;
6. pods that got a node while being scaled up for are told ``Scheduled``, naming the
   NodeClaim whose node they run on, so no stale status outlives the scale-up;
7. failed triggers (`controller.failures.trigger_failure`) are removed and their pods
   wait a backoff, or are told ``Failed`` after the last attempt; a group whose trigger
   was removed unneeded cools down; and demand above a cap (GPUs per trigger, triggers
   in all and per NodePool, the creation rate) waits, told ``Waiting`` and why.

The executor (`controller.reconciler`) applies the plan through the API adapter: money
first (creates, deletes), statuses after.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from controller import karpenter
from controller.capacity import held_covers, nodes_to_label, place_on_free
from controller.failures import (
    effective_retry,
    next_retry,
    retry_due,
    trigger_failure,
)
from controller.model import (
    ANNOTATION_RETRY,
    FAILED,
    INVALID,
    NATIVE,
    NODE_READY,
    PROVISIONING,
    SCHEDULED,
    TRIGGERED,
    UNRESOLVABLE,
    WAITING,
    GroupKey,
    InvalidPod,
    NodeClaimInfo,
    NodeInfo,
    NodePoolInfo,
    Nomination,
    PendingPod,
    PodRef,
    Refusal,
    Requirement,
    RetryState,
    ScaleUpStatus,
    ScheduledPod,
    Toleration,
    TriggerInfo,
    gpu_need,
    largest_need_first,
    untolerated_taint,
)
from controller.triggers import LINKED_REASON, TriggerSettings, trigger_name, trigger_pod
from intent.contract import format_gpus


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """Planning settings.

    Attributes:
        trigger: how trigger pods are built (namespace, image, GPU model label).
        default_nodepool: NodePool for intents without a model, or None (then such pods
            are reported ``Unresolvable``).
        cover_seconds: how long pods told ``NodeReady`` are left to their scheduler
            before their demand counts again (KAI's node-scale-adjuster waits 60 s).
        cover_max_seconds: how long such a cover may last while the schedulers are
            still binding pods we scaled up for (`controller.capacity.cover_holds`).
        max_triggers: most live trigger pods at once; a bound on what a bug or a flood
            of pods can buy.
        max_triggers_per_pool: most live trigger pods of one NodePool (0: only
            ``max_triggers``).
        max_gpus_per_trigger: most GPUs one trigger asks for; a pod needing more waits
            (a p5.48xlarge has 8).
        retry_base_seconds, retry_max_seconds: the backoff after a failed scale-up
            (`controller.failures.backoff_seconds`).
        retry_attempts: failed scale-ups after which a pod is told ``Failed``.
        init_timeout_seconds: a NodeClaim bought for a trigger and not Ready this long
            after its creation has failed (beyond Karpenter's 15 min registration
            timeout; Karpenter has none for initialization).
        cooldown_seconds: after a trigger no pod needed is removed, its group gets no new
            trigger for this long (stops flapping when pods come and go).
    """

    trigger: TriggerSettings = field(default_factory=TriggerSettings)
    default_nodepool: str | None = None
    cover_seconds: float = 60.0
    cover_max_seconds: float = 300.0
    max_triggers: int = 100
    max_triggers_per_pool: int = 0
    max_gpus_per_trigger: int = 8
    retry_base_seconds: float = 30.0
    retry_max_seconds: float = 600.0
    retry_attempts: int = 3
    init_timeout_seconds: float = 1200.0
    cooldown_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything `plan` looks at, taken at one instant (``now``, timezone-aware)."""

    pods: Sequence[PendingPod | InvalidPod]
    triggers: Sequence[TriggerInfo]
    nodeclaims: Mapping[str, NodeClaimInfo]
    nodepools: Mapping[str, NodePoolInfo]
    now: datetime
    #: Pods that got a node while being scaled up for, owed a final status.
    scheduled: Sequence[ScheduledPod] = ()
    #: Karpenter's latest ``Nominated`` evidence per trigger ``(namespace, name)``.
    nominations: Mapping[tuple[str, str], Nomination] = field(default_factory=dict)
    #: NodeReady covers the executor set when it deleted a trigger (pod ``(namespace,
    #: name)`` -> (NodeClaim, when)): they hold even if the status write failed.
    covers: Mapping[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    #: GPUs of the pods we served found bound, by node name (see
    #: `controller.capacity.held_covers`).
    used: Mapping[str, Decimal] = field(default_factory=dict)
    #: Nodes of Karpenter NodePools, by name.
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    #: Live triggers outside this snapshot that count against ``max_triggers`` (when
    #: `controller.incremental` plans one partition of the cluster; 0 for all of it).
    live_elsewhere: int = 0
    #: The same per NodePool, against ``max_triggers_per_pool``.
    live_elsewhere_by_pool: Mapping[str, int] = field(default_factory=dict)
    #: Retry states the executor holds for pods whose annotation may not show them yet
    #: (pod ``(namespace, name)`` -> state).
    retries: Mapping[tuple[str, str], RetryState] = field(default_factory=dict)
    #: Karpenter's latest limits ``FailedScheduling`` per trigger ``(namespace, name)``.
    refusals: Mapping[tuple[str, str], Refusal] = field(default_factory=dict)
    #: When a trigger of each group was last removed as unneeded (the cooldown).
    removals: Mapping[GroupKey, datetime] = field(default_factory=dict)
    #: Trigger creations the rate limit allows this pass (None: no limit).
    create_tokens: int | None = None
    #: Whether to decide node labels (`controller.capacity.nodes_to_label`): they depend
    #: on every trigger, so `controller.incremental` decides them once over the whole
    #: cluster, not in each partition's plan.
    decide_labels: bool = True
    #: When a pod we scaled up for was last seen bound (its ``PodScheduled=True`` time):
    #: NodeReady covers outlive ``cover_seconds`` while the schedulers are still binding
    #: (`controller.capacity.cover_holds`). None: no bind seen.
    last_bind: datetime | None = None
    #: NodeClaims Karpenter bought for our triggers and deleted before they registered,
    #: by the name of the trigger whose marker they carried (`ClusterState.lost_claims`):
    #: failures the trigger's recorded link may not show yet.
    lost: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event to record on a pod: type ``Normal``/``Warning``, reason, message."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class SetStatus:
    """Write ``status`` to the pod's scale-up annotation and record ``event`` on it."""

    ref: PodRef
    status: ScaleUpStatus
    event: Event | None
    #: For a ``Scheduled`` status: seconds from pod creation to binding (a metric).
    seconds_to_node: float | None = None
    #: A new retry state to write with it (annotation `ANNOTATION_RETRY`).
    retry: RetryState | None = None


@dataclass(frozen=True, slots=True)
class LinkTrigger:
    """Record on a trigger pod the NodeClaim Karpenter made for it."""

    ref: PodRef
    node_claim: str


@dataclass(frozen=True, slots=True)
class DeleteTrigger:
    """Delete a trigger pod (uid-guarded). ``cover``: its pods, told ``NodeReady`` on
    NodeClaim ``node_claim``; the executor covers them before deleting."""

    ref: PodRef
    reason: str
    cover: tuple[PodRef, ...] = ()
    node_claim: str | None = None
    #: The trigger failed: its pods' new retry states, held by the executor until
    #: written (see `controller.failures`).
    retries: tuple[tuple[PodRef, RetryState], ...] = ()
    #: No pod needs it any more: the group it served starts its cooldown.
    orphan: GroupKey | None = None


@dataclass(frozen=True, slots=True)
class DeleteNodeClaim:
    """Delete a NodeClaim bought for a trigger that never initialized."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class MarkTrigger:
    """Set a non-binding trigger's ``PodScheduled=False`` condition: reason
    ``Unschedulable`` while no NodeClaim is known for it (``node_claim`` None: Karpenter
    provisions for it), `controller.triggers.LINKED_REASON` once one is (Karpenter leaves
    it alone)."""

    ref: PodRef
    node_claim: str | None


@dataclass(frozen=True, slots=True)
class LabelNode:
    """Set `controller.model.NODE_LABEL` to ``value`` on Node ``node``."""

    node: str
    value: str


@dataclass(frozen=True, slots=True)
class CreateTrigger:
    """Create ``body`` (a trigger for ``gpus`` GPUs of ``group``) and then tell ``serves``."""

    group: GroupKey
    gpus: int
    body: Mapping[str, object]
    serves: tuple[PodRef, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """The decisions of one pass, in the order the executor applies them."""

    links: tuple[LinkTrigger, ...] = ()
    statuses: tuple[SetStatus, ...] = ()
    deletes: tuple[DeleteTrigger, ...] = ()
    creates: tuple[CreateTrigger, ...] = ()
    #: GPUs of demand per group this pass (for metrics and the demo's report).
    demand: Mapping[GroupKey, Decimal] = field(default_factory=dict)
    marks: tuple[MarkTrigger, ...] = ()
    #: Node labels to set before the creates (see `controller.capacity.nodes_to_label`).
    labels: tuple[LabelNode, ...] = ()
    #: NodeClaims to delete (bought for failed triggers, never initialized).
    claim_deletes: tuple[DeleteNodeClaim, ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.links
            or self.statuses
            or self.deletes
            or self.creates
            or self.marks
            or self.labels
            or self.claim_deletes
        )


def without_creates(decided: Plan) -> Plan:
    """``decided`` with no trigger creates: what a pass applies while the creates of an
    earlier pass are still in flight. Nothing else changes: `plan` tells the pods of a
    create nothing (the executor says ``Triggered`` once the trigger exists), so they
    simply wait for a later pass."""
    return replace(decided, creates=())


@dataclass(slots=True)
class _Bin:
    size: int
    used: Decimal
    pods: list[PendingPod]

    @property
    def cpu_millis(self) -> int:
        return sum(p.cpu_millis for p in self.pods)

    @property
    def memory_bytes(self) -> int:
        return sum(p.memory_bytes for p in self.pods)


def _status_change(
    pod: PendingPod | InvalidPod, status: ScaleUpStatus, event: Event | None
) -> SetStatus | None:
    if status.same_state(pod.status):
        return None
    return SetStatus(pod.ref, status, event)


def is_native(pod: PendingPod) -> bool:
    """Karpenter can provision for ``pod`` itself: nothing it cannot simulate, and the
    GPU demand is whole ``nvidia.com/gpu`` requests (recorded by the webhook as source
    ``resources:nvidia.com/gpu``)."""
    if pod.unsimulatable:
        return False
    return any(token == "resources:nvidia.com/gpu" for token in pod.intent.source) and (
        pod.intent.gpus == pod.intent.gpus.to_integral_value()
    )


#: What `resolve_pool` reads of a pod (`pool_key`): its intent's pool, model and GPU
#: memory, and its tolerations.
PoolKey = tuple[str | None, str | None, int | None, tuple[Toleration, ...]]


def pool_key(pod: PendingPod) -> PoolKey:
    """Everything `resolve_pool` reads of ``pod``: pods with equal keys resolve to the same
    pool (the planner and `controller.incremental` cache the resolution by it). Pure."""
    intent = pod.intent
    return (intent.pool, intent.model, intent.gpu_memory_mib, pod.tolerations)


def resolve_pool(
    pod: PendingPod, pools: Mapping[str, NodePoolInfo], config: PlanConfig
) -> tuple[NodePoolInfo | None, str]:
    """The NodePool a pod's trigger should target, and a message when there is none.

    Order: the pool the intent names if it exists, is Ready and admits the model; for a
    model, the Ready pools that explicitly admit it (requirement ``In`` or template
    label on the GPU model label), else GPU pools that do not exclude it, by weight then
    name (Karpenter picks the highest weight among matching pools); without a model, the
    configured default pool, or for an intent that states GPU memory the first GPU pool
    (its trigger then asks for that much GPU memory, so Karpenter picks the cheapest
    GPU that fits). Only pools whose ``NoSchedule``/``NoExecute`` taints the pod
    tolerates count (`controller.model.untolerated_taint`, kube-scheduler's matching):
    a trigger tolerates its pool's taints, but the pod must run on the node, and a pool
    tainted for DRA pods only took KAI pods' A100 triggers in `bench.scaleup_time`
    before. A pod that tolerates none of the pools that would do gets no pool, and the
    message names the taint.
    """
    label = config.trigger.gpu_name_label
    model = pod.intent.model
    ready = sorted((p for p in pools.values() if p.ready), key=lambda p: (-p.weight, p.name))

    def refused(pool: NodePoolInfo) -> str:
        taint = untolerated_taint(pod.tolerations, pool.taints) or {}
        value = f"={taint['value']}" if taint.get("value") else ""
        return (
            f"the pod does not tolerate NodePool {pool.name}'s taint "
            f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"
        )

    def tolerated(pool: NodePoolInfo) -> bool:
        return untolerated_taint(pod.tolerations, pool.taints) is None

    named = pools.get(pod.intent.pool or "")
    if named is not None and named.ready and (model is None or named.admits(label, model)):
        return (named, "") if tolerated(named) else (None, refused(named))
    if model is None:
        default = pools.get(config.default_nodepool or "")
        if default is not None and default.ready:
            return (default, "") if tolerated(default) else (None, refused(default))
        gpu_pools = [p for p in ready if p.makes_gpus()]
        if pod.intent.gpu_memory_mib and gpu_pools and not config.default_nodepool:
            # the memory requirement lets Karpenter pick the GPU
            usable = [p for p in gpu_pools if tolerated(p)]
            return (usable[0], "") if usable else (None, refused(gpu_pools[0]))
        if config.default_nodepool:
            return (
                None,
                f"default NodePool {config.default_nodepool!r} does not exist or is not Ready",
            )
        return None, "the intent names no GPU model and no default NodePool is configured"
    explicit = [p for p in ready if p.admits(label, model) and label in p.label_keys()]
    implicit = [p for p in ready if p.admits(label, model) and p.makes_gpus()]
    if not (explicit or implicit):
        return None, f"no Ready NodePool offers GPU model {model!r} ({label})"
    for candidates in (explicit, implicit):
        usable = [p for p in candidates if tolerated(p)]
        if usable:
            return usable[0], ""
    return None, f"no Ready NodePool offering GPU model {model!r} will take it: " + refused(
        (explicit or implicit)[0]
    )


#: Label domains that agents running on GPU nodes set once the node has joined (NVIDIA
#: GPU Feature Discovery ``nvidia.com/gpu.*``, Node Feature Discovery
#: ``feature.node.kubernetes.io/*``, AMD's node labeller ``amd.com/*``): Karpenter cannot
#: know them, yet a GPU node it makes will carry them, so a pod selecting them can run
#: there (the webhook reads the GPU model out of them).
RUNTIME_LABEL_PREFIXES: tuple[str, ...] = ("nvidia.com/", "feature.node.kubernetes.io/", "amd.com/")


def _knowable(key: str) -> bool:
    """A label key a new node can carry without any NodePool defining it."""
    return karpenter.is_well_known_label(key) or key.startswith(RUNTIME_LABEL_PREFIXES)


def _expression_met(r: Requirement, pool: NodePoolInfo) -> bool:
    """Whether some node of ``pool`` can satisfy node-selector requirement ``r``."""
    if r.key not in pool.label_keys():
        return _knowable(r.key) or r.operator in ("NotIn", "DoesNotExist")
    own = [q for q in pool.requirements if q.key == r.key]
    if r.operator == "In":
        return any(pool.admits(r.key, v) for v in r.values)
    if r.operator == "NotIn":
        if r.key in pool.labels:
            return pool.labels[r.key] not in r.values
        return not any(q.operator == "In" and set(q.values) <= set(r.values) for q in own)
    if r.operator == "Exists":
        return not any(q.operator == "DoesNotExist" for q in own)
    if r.operator == "DoesNotExist":
        return r.key not in pool.labels and not any(q.operator in ("In", "Exists") for q in own)
    return True  # Gt/Lt: numeric ranges are left to Karpenter


def unmet_constraint(pod: PendingPod, pool: NodePoolInfo) -> str | None:
    """The first term of ``pod``'s node selector or required node affinity that no node
    ``pool`` makes can satisfy, worded for the pod's status; None when a new node of the
    pool can run it. A key is satisfiable when the pool defines it (template label or
    requirement) and admits the value, or when nodes carry it without the pool
    (Karpenter's well-known labels, `RUNTIME_LABEL_PREFIXES`). Affinity terms are ORed:
    one satisfiable term is enough."""
    for key, value in pod.node_selector:
        if key in pool.label_keys():
            if not pool.admits(key, value):
                return f"nodeSelector {key}={value}: NodePool {pool.name} does not admit it"
        elif not _knowable(key):
            return (
                f"nodeSelector {key}={value}: no node of NodePool {pool.name} will have label {key}"
            )
    if pod.affinity_terms:
        failed = [
            next((r for r in term if not _expression_met(r, pool)), None)
            for term in pod.affinity_terms
        ]
        if all(f is not None for f in failed):
            r = failed[0]
            assert r is not None
            values = ",".join(r.values)
            return (
                f"required node affinity {r.key} {r.operator} [{values}]: "
                f"no node of NodePool {pool.name} can satisfy it"
            )
    return None


def pack(pods: Iterable[PendingPod]) -> list[_Bin]:
    """Best-fit-decreasing of pods' GPU needs (`controller.model.gpu_need`) into
    whole-GPU bins (see module doc).

    Pods are taken largest need first; a fractional pod goes to the open bin whose
    spare share fits it most tightly, else opens a 1-GPU bin. A pod that states GPU
    memory shares a card by that memory's share of it when its model's memory is known
    (three HAMi ``gpumem: 6000`` pods on one 22,888 MiB A10G); when it is not, it takes
    whole GPUs and shares none (KAI counts a ``gpu-memory`` pod as 0.1 GPU, and ten such
    pods on one 24 GiB card would not fit), as a native whole-GPU pod would. Best fit
    and first fit decreasing share the 11/9 OPT + 6/9 bound (Dosa 2007); a sorted index of spare
    shares makes this O(n log n) instead of first fit's O(n x bins).
    """
    bins: list[_Bin] = []
    spare: list[tuple[Decimal, int]] = []  # (spare share, bin index), sorted
    for pod, need in largest_need_first(pods):
        if need >= 1:
            size = math.ceil(need)
            bins.append(_Bin(size, need, [pod]))
            if size - need > 0:
                bisect.insort(spare, (size - need, len(bins) - 1))
            continue
        at = bisect.bisect_left(spare, (need, -1))
        if at < len(spare):
            left, index = spare.pop(at)
            chosen = bins[index]
            chosen.used += need
            chosen.pods.append(pod)
            if left - need > 0:
                bisect.insort(spare, (left - need, index))
        else:
            bins.append(_Bin(1, need, [pod]))
            bisect.insort(spare, (1 - need, len(bins) - 1))
    return bins


def link_claims(
    triggers: Sequence[TriggerInfo],
    claims: Mapping[str, NodeClaimInfo],
    nominations: Mapping[tuple[str, str], Nomination],
) -> dict[PodRef, str | None]:
    """The NodeClaim each live trigger belongs to, by evidence only (None: not known).

    In order: the NodeClaim of the node a binding trigger is bound to
    (``status.nodeName``); the NodeClaim whose requirements carry the trigger's marker
    (`controller.model.TRIGGER_MARKER_KEY`: Karpenter bought it for this trigger; the
    newest such NodeClaim not being deleted); the link recorded on the trigger, while
    that NodeClaim exists and is not being deleted; Karpenter's ``Nominated`` event
    naming the trigger (same uid) and an existing NodeClaim whose ``nvidia.com/gpu``
    requests are not already held by triggers linked to it. Creation order is never
    evidence: a NodeClaim of the same pool may well be one Karpenter made for another
    pod. Markers are matched by trigger name: triggers live in one namespace.
    """
    by_node = {c.node_name: c for c in claims.values() if c.node_name}
    by_marker: dict[str, NodeClaimInfo] = {}
    for marked in sorted(
        (c for c in claims.values() if c.marked and not c.deleting),
        key=lambda c: (c.created or datetime.min.replace(tzinfo=UTC), c.name),
    ):
        for name in marked.marked:
            by_marker[name] = marked  # the newest wins: an older one failed or went away
    links: dict[PodRef, str | None] = {}
    nominated_only: list[tuple[TriggerInfo, NodeClaimInfo]] = []
    used: dict[str, int] = defaultdict(int)
    for trigger in triggers:
        claim: NodeClaimInfo | None = by_node.get(trigger.node_name or "")
        if claim is None:
            claim = by_marker.get(trigger.ref.name)
        if claim is None:
            recorded = claims.get(trigger.node_claim or "")
            claim = recorded if recorded is not None and not recorded.deleting else None
        if claim is None:
            links[trigger.ref] = None
            nominated = nominations.get((trigger.ref.namespace, trigger.ref.name))
            if nominated is not None and nominated.uid in ("", trigger.ref.uid):
                named = claims.get(nominated.node_claim)
                if named is not None and not named.deleting:
                    nominated_only.append((trigger, named))
            continue
        links[trigger.ref] = claim.name
        used[claim.name] += trigger.gpus
    # A nomination onto GPUs other triggers already hold is no evidence of capacity:
    # Karpenter counts only bound pods against an in-flight NodeClaim, so a later trigger
    # may be nominated onto one bought for another. Such a trigger stays unlinked (and
    # Unschedulable), and Karpenter buys for it once that NodeClaim's GPUs are taken.
    for trigger, claim in sorted(
        nominated_only, key=lambda tc: (tc[0].created or datetime.min, tc[0].ref)
    ):
        if claim.gpu_requests and used[claim.name] + trigger.gpus > claim.gpu_requests:
            continue
        links[trigger.ref] = claim.name
        used[claim.name] += trigger.gpus
    return links


#: How long a bound pod's final ``Scheduled`` status waits for the caches to learn which
#: NodeClaim its node belongs to (seconds), before it says none is known.
SCHEDULED_NAME_WAIT_SECONDS = 30.0


def _named_late(done: ScheduledPod, now: datetime) -> bool:
    """Whether ``done`` waited `SCHEDULED_NAME_WAIT_SECONDS` since it was bound (or its
    binding time is unknown): its ``Scheduled`` status is written without a NodeClaim."""
    return done.bound_at is None or (now - done.bound_at).total_seconds() >= (
        SCHEDULED_NAME_WAIT_SECONDS
    )


def triggered(trigger: str, gpus: int, pool: str, stamp: str) -> tuple[ScaleUpStatus, Event]:
    """The ``Triggered`` status and event for pods a trigger stands for (also used by the
    executor right after it creates a trigger, when the name is first known)."""
    message = (
        f"trigger {trigger} requests {gpus} nvidia.com/gpu on NodePool {pool}; "
        "waiting for Karpenter to create a NodeClaim (none is known yet)"
    )
    return ScaleUpStatus(TRIGGERED, message, trigger, since=stamp), Event(
        "Normal", "Triggered", message
    )


def plan(snapshot: Snapshot, config: PlanConfig) -> Plan:
    """Decide one pass of trigger work. Pure: no I/O, no clock but ``snapshot.now``."""
    now = snapshot.now
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    claims = snapshot.nodeclaims
    statuses: list[SetStatus] = []
    groups: dict[GroupKey, list[PendingPod]] = defaultdict(list)

    def tell(pod: PendingPod | InvalidPod, status: ScaleUpStatus, event: Event | None) -> None:
        change = _status_change(pod, status, event)
        if change is not None:
            statuses.append(change)

    # Pods of one workload share their pool choice and constraints: decide each once.
    pools_for: dict[PoolKey, tuple[NodePoolInfo | None, str]] = {}
    unmet_for: dict[tuple[str, object, object], str | None] = {}
    held, free = held_covers(
        (p for p in snapshot.pods if isinstance(p, PendingPod) and not is_native(p)),
        claims,
        snapshot.covers,
        snapshot.used,
        now,
        config.cover_seconds,
        config.cover_max_seconds,
        snapshot.last_bind,
    )
    for pod in snapshot.pods:  # order-free: packing sorts what it packs
        if isinstance(pod, InvalidPod):
            message = f"ignoring this pod: its gpu-intent annotations do not parse: {pod.error}"
            tell(
                pod,
                ScaleUpStatus(INVALID, message, since=stamp),
                Event("Warning", "InvalidIntent", message),
            )
            continue
        if is_native(pod):
            message = "Karpenter can provision for this pod itself (whole nvidia.com/gpu); no trigger needed"
            tell(
                pod,
                ScaleUpStatus(NATIVE, message, since=stamp),
                Event("Normal", "NativeProvisioning", message),
            )
            continue
        if pod.ref in held:
            continue
        where = pool_key(pod)
        if (resolved := pools_for.get(where)) is None:
            resolved = pools_for[where] = resolve_pool(pod, snapshot.nodepools, config)
        pool, why = resolved
        if pool is not None:
            constraints = (pool.name, pod.node_selector, pod.affinity_terms)
            if constraints not in unmet_for:
                unmet_for[constraints] = unmet_constraint(pod, pool)
            unmet = unmet_for[constraints]
            if unmet is not None:
                pool, why = None, f"no node Karpenter can make will run this pod: {unmet}"
        if pool is None:
            tell(
                pod,
                ScaleUpStatus(UNRESOLVABLE, why, since=stamp),
                Event("Warning", "NoNodePool", why),
            )
            continue
        retry = effective_retry(pod.retry, snapshot.retries.get((pod.ref.namespace, pod.ref.name)))
        if retry is not None and retry.attempts >= config.retry_attempts:
            message = failed_message(pod.ref, retry)
            tell(
                pod,
                ScaleUpStatus(FAILED, message, since=stamp),
                Event("Warning", "ScaleUpFailed", message),
            )
            continue
        if retry is not None and not retry_due(retry, now):
            message = retry_message(retry, config.retry_attempts)
            tell(
                pod,
                ScaleUpStatus(WAITING, message, since=stamp),
                Event("Warning", "ScaleUpRetry", message),
            )
            continue
        memory = pod.intent.gpu_memory_mib if pod.intent.model is None else None
        groups[GroupKey(pool.name, pod.intent.model, pod.selector, memory or 0)].append(pod)

    for key in sorted(groups, key=GroupKey.sort_key):
        if free:
            groups[key], placed = place_on_free(
                groups[key],
                key,
                free,
                claims,
                config.trigger.gpu_name_label,
                config.trigger.gpu_memory_label,
            )
            for pod, host in placed:
                node = host.node_name or "(unknown)"
                message = (
                    f"NodeClaim {host.name} is Ready as node {node} with GPUs free for "
                    "this pod; left to the pod's scheduler"
                )
                status = ScaleUpStatus(NODE_READY, message, None, host.name, host.node_name, stamp)
                tell(pod, status, Event("Normal", "NodeReady", message))

    claim_of_node = {c.node_name: c.name for c in claims.values() if c.node_name}
    for done in snapshot.scheduled:
        # Name the NodeClaim by evidence only: the one whose node the pod is bound to
        # (its status.nodeName, or the Node's NodeClaim ownerReference). The caches may
        # learn of the node after the binding: the final status waits for them a while.
        bound_to = snapshot.nodes.get(done.node)
        claim_name = claim_of_node.get(done.node) or (bound_to.claim if bound_to else None)
        if claim_name is None and not _named_late(done, now):
            continue
        message = f"scheduled on node {done.node}" + (
            f" (NodeClaim {claim_name})" if claim_name else " (no NodeClaim known for it)"
        )
        if claim_name and (dra := claims.get(claim_name)) is not None and dra.dra_ready:
            message += (
                f"; its {dra.devices} GPU(s) are DRA ResourceSlice devices, so Karpenter's "
                "Initialized stays Unknown (ResourceNotRegistered): not a failure"
            )
        status = ScaleUpStatus(SCHEDULED, message, None, claim_name, done.node, stamp)
        event = Event("Normal", "ScaleUpComplete", message)
        statuses.append(SetStatus(done.ref, status, event, done.seconds_to_node))

    live = [t for t in snapshot.triggers if not t.deleting]
    links = link_claims(live, claims, snapshot.nominations)
    link_actions = tuple(
        LinkTrigger(t.ref, name)
        for t in live
        if (name := links.get(t.ref)) is not None and name != t.node_claim
    )
    marks = tuple(
        MarkTrigger(t.ref, linked)
        for t in live
        if not t.binding
        and not t.node_name
        and t.condition_reason
        != ("Unschedulable" if (linked := links.get(t.ref)) is None else LINKED_REASON)
    )
    by_group: dict[GroupKey, list[TriggerInfo]] = defaultdict(list)
    for trigger in live:
        by_group[trigger.group].append(trigger)

    failures = {}
    for trigger in live:
        failure = trigger_failure(
            trigger,
            claims.get(links.get(trigger.ref) or ""),
            claims,
            snapshot.refusals.get((trigger.ref.namespace, trigger.ref.name)),
            now,
            config.init_timeout_seconds,
            snapshot.used,
            snapshot.lost.get(trigger.ref.name),
        )
        if failure is not None:
            failures[trigger.ref] = failure
    deletes: list[DeleteTrigger] = []
    creates: list[CreateTrigger] = []
    claim_deletes: dict[str, DeleteNodeClaim] = {}
    demand: dict[GroupKey, Decimal] = {}
    budget = config.max_triggers - len(live) - snapshot.live_elsewhere
    pool_live: dict[str, int] = defaultdict(int, snapshot.live_elsewhere_by_pool)
    for trigger in live:
        pool_live[trigger.pool] += 1
    tokens = snapshot.create_tokens

    def wait(pods: Sequence[PendingPod], message: str) -> None:
        for pod in pods:
            tell(
                pod,
                ScaleUpStatus(WAITING, message, since=stamp),
                Event("Normal", "ScaleUpWaiting", message),
            )

    node_labels = tuple(
        LabelNode(node, value)
        for node, value in (
            nodes_to_label(snapshot.nodes, snapshot.nodepools, claims, live)
            if snapshot.decide_labels
            else ()
        )
    )
    for key in sorted(set(groups) | set(by_group), key=GroupKey.sort_key):
        pods = groups.get(key, [])
        demand[key] = sum((gpu_need(p.intent) for p in pods), Decimal(0))
        claim_of = {t.ref: claims.get(links.get(t.ref) or "") for t in by_group.get(key, [])}
        supply = sorted(
            by_group.get(key, []),
            key=lambda t: (-_progress(claim_of[t.ref]), t.created or datetime.min, t.ref),
        )
        capacity = _Capacity(supply)
        served: dict[PodRef, list[_Bin]] = defaultdict(list)
        for bin_ in sorted(pack(pods), key=lambda b: (-b.size, b.pods[0].ref)):
            holder = capacity.take(bin_.size)
            if holder is not None:
                served[holder.ref].append(bin_)
                continue
            removed = snapshot.removals.get(key)
            if removed is not None and now - removed < timedelta(seconds=config.cooldown_seconds):
                wait(
                    bin_.pods,
                    f"a trigger of this group was removed as unneeded at {removed:%H:%M:%S}; "
                    f"waiting out the {config.cooldown_seconds:g}s cooldown before buying again",
                )
                continue
            if bin_.size > config.max_gpus_per_trigger:
                wait(
                    bin_.pods,
                    f"needs {bin_.size} GPUs in one trigger, more than the cap of "
                    f"{config.max_gpus_per_trigger} (--max-gpus-per-trigger); waiting",
                )
                continue
            if budget <= 0:
                wait(bin_.pods, f"trigger limit ({config.max_triggers}) reached; waiting")
                continue
            cap = config.max_triggers_per_pool
            if cap and pool_live[key.pool] >= cap:
                wait(
                    bin_.pods,
                    f"trigger limit of NodePool {key.pool} ({cap}, --max-triggers-per-pool) "
                    "reached; waiting",
                )
                continue
            if tokens is not None and tokens <= 0:
                wait(bin_.pods, "trigger creation rate limit reached; waiting")
                continue
            budget -= 1
            pool_live[key.pool] += 1
            if tokens is not None:
                tokens -= 1
            pool = snapshot.nodepools[key.pool]
            refs = tuple(p.ref for p in bin_.pods)
            body = trigger_pod(
                key,
                bin_.size,
                pool,
                refs,
                config.trigger,
                # A retry is a new trigger: its name (and marker) differs from the
                # failed one's even within the same second.
                name=trigger_name(key, refs, stamp + _retry_suffix(bin_.pods)),
                cpu_millis=bin_.cpu_millis,
                memory_bytes=bin_.memory_bytes,
            )
            creates.append(CreateTrigger(key, bin_.size, body, refs))
        for trigger in supply:
            claim = claim_of[trigger.ref]
            bins = served.get(trigger.ref, [])
            pods_served = [p for b in bins for p in b.pods]
            failure = failures.get(trigger.ref)
            if failure is not None:
                retries = []
                for pod in pods_served:
                    held_retry = snapshot.retries.get((pod.ref.namespace, pod.ref.name))
                    retry = next_retry(
                        effective_retry(pod.retry, held_retry),
                        failure.reason,
                        now,
                        config.retry_base_seconds,
                        config.retry_max_seconds,
                    )
                    retries.append((pod.ref, retry))
                    if retry.attempts >= config.retry_attempts:
                        message = failed_message(pod.ref, retry)
                        status = ScaleUpStatus(FAILED, message, since=stamp)
                        event = Event("Warning", "ScaleUpFailed", message)
                    else:
                        message = retry_message(retry, config.retry_attempts)
                        status = ScaleUpStatus(WAITING, message, since=stamp)
                        event = Event("Warning", "ScaleUpRetry", message)
                    statuses.append(SetStatus(pod.ref, status, event, retry=retry))
                deletes.append(
                    DeleteTrigger(trigger.ref, f"failed: {failure.reason}", retries=tuple(retries))
                )
                if failure.delete_claim:
                    claim_deletes[failure.delete_claim] = DeleteNodeClaim(
                        failure.delete_claim, failure.reason
                    )
                continue
            if not bins:
                if claim is not None and not claim.ready:
                    continue  # capacity on its way: kept as supply, deleted once Ready
                reason = (
                    f"NodeClaim {claim.name} is Ready and no pending pod needs it"
                    if claim is not None
                    else "no pending pod needs it any more"
                )
                # Nothing was bought for it yet: the group cools down (pods that come and
                # go would otherwise make a trigger, and maybe a NodeClaim, each time). A
                # Ready NodeClaim's free GPUs take new pods of the group instead.
                orphan = key if claim is None else None
                deletes.append(DeleteTrigger(trigger.ref, reason, orphan=orphan))
                continue
            _tell_progress(trigger, claim, bins, pods_served, key.pool, stamp, tell, deletes)
    going = {d.ref for d in deletes}  # no patch on a pod this pass deletes
    marks = tuple(m for m in marks if m.ref not in going)
    link_actions = tuple(link for link in link_actions if link.ref not in going)
    return Plan(
        link_actions,
        tuple(statuses),
        tuple(deletes),
        tuple(creates),
        demand,
        marks,
        node_labels,
        tuple(claim_deletes[name] for name in sorted(claim_deletes)),
    )


def _retry_suffix(pods: Sequence[PendingPod]) -> str:
    """``/retry<n>`` for a trigger of pods that failed before (n: most attempts)."""
    attempts = max((p.retry.attempts for p in pods if p.retry is not None), default=0)
    return f"/retry{attempts}" if attempts else ""


def failed_message(ref: PodRef, retry: RetryState) -> str:
    """The ``Failed`` status message: why, and what to do."""
    return (
        f"gave up after {retry.attempts} failed scale-ups; last: {retry.reason}. Check the "
        "NodePool (limits, instance types, capacity in its zones) and Karpenter's events, "
        f"then try again: kubectl annotate pod -n {ref.namespace} {ref.name} {ANNOTATION_RETRY}-"
    )


def retry_message(retry: RetryState, attempts: int) -> str:
    """The ``Waiting`` status message of a pod in retry backoff."""
    return (
        f"scale-up failed ({retry.attempts} of {attempts} attempts): {retry.reason}; "
        f"a new trigger after {retry.retry_at}"
    )


class _Capacity:
    """Spare GPUs of a group's triggers, handed out in priority order: `take` gives the
    first trigger (in ``supply`` order) with at least that many spare GPUs. Triggers are
    bucketed by spare GPUs (a few distinct values), so each take costs O(distinct spare
    sizes x log triggers) instead of a scan of every trigger."""

    def __init__(self, supply: Sequence[TriggerInfo]) -> None:
        self._supply = supply
        self._buckets: dict[int, list[int]] = defaultdict(list)  # spare -> heap of indices
        for index, trigger in enumerate(supply):
            self._buckets[trigger.gpus].append(index)  # indices ascend: already heaps

    def take(self, gpus: int) -> TriggerInfo | None:
        best: tuple[int, int] | None = None  # (index, spare)
        for spare, heap in self._buckets.items():
            if spare >= gpus and heap and (best is None or heap[0] < best[0]):
                best = (heap[0], spare)
        if best is None:
            return None
        index, spare = best
        heapq.heappop(self._buckets[spare])
        if spare > gpus:
            heapq.heappush(self._buckets[spare - gpus], index)
        return self._supply[index]


def _tell_progress(
    trigger: TriggerInfo,
    claim: NodeClaimInfo | None,
    bins: Sequence[_Bin],
    pods: Sequence[PendingPod],
    pool: str,
    stamp: str,
    tell: Callable[[PendingPod, ScaleUpStatus, Event | None], None],
    deletes: list[DeleteTrigger],
) -> None:
    """Statuses for the pods ``trigger`` stands for, by its NodeClaim's progress; a Ready
    NodeClaim also removes the trigger (its pods are covered by the executor)."""
    name = str(trigger.ref)
    if claim is not None and not claim.ready:
        told = (PROVISIONING, name, claim.name, None)
        if all(
            p.status is not None
            and (p.status.phase, p.status.trigger, p.status.node_claim, p.status.node) == told
            for p in pods
        ):
            return  # every pod already knows (the steady case): no message to build
    used = sum((b.used for b in bins), Decimal(0))
    if claim is not None and claim.ready:
        node = claim.node_name or "(unknown)"
        message = (
            f"NodeClaim {claim.name} is Ready as node {node}; removed trigger "
            f"{name} so the pod's scheduler can use the capacity"
        )
        if claim.dra_ready:
            message = (
                f"NodeClaim {claim.name}'s node {node} publishes {claim.devices} GPU "
                "device(s) in ResourceSlices (DRA; Karpenter's Initialized stays Unknown, "
                "ResourceNotRegistered, as on any DRA node: not a failure); removed trigger "
                f"{name} so the pod's scheduler can allocate its claims there"
            )
        status = ScaleUpStatus(NODE_READY, message, None, claim.name, claim.node_name, stamp)
        for pod in pods:
            tell(pod, status, Event("Normal", "NodeReady", message))
        deletes.append(
            DeleteTrigger(
                trigger.ref,
                f"NodeClaim {claim.name} is Ready",
                tuple(p.ref for p in pods),
                claim.name,
            )
        )
    elif claim is not None:
        itype = claim.labels.get("node.kubernetes.io/instance-type")
        message = (
            f"Karpenter NodeClaim {claim.name}"
            + (f" ({itype})" if itype else "")
            + f" is being provisioned for trigger {name} "
            f"({trigger.gpus} GPU, {format_gpus(used)} used by {len(pods)} pod(s))"
        )
        status = ScaleUpStatus(PROVISIONING, message, name, claim.name, None, stamp)
        for pod in pods:
            tell(pod, status, Event("Normal", "Provisioning", message))
    else:
        status, event = triggered(name, trigger.gpus, pool, stamp)
        for pod in pods:
            tell(pod, status, event)


def _progress(claim: NodeClaimInfo | None) -> int:
    """How far a trigger's capacity has come: 3 Ready, 2 launched, 1 linked, 0 none."""
    if claim is None:
        return 0
    return 3 if claim.ready else 2 if claim.launched else 1


# What `controller.incremental` relies on to re-plan only what changed: how far `plan`'s
# decisions reach. Keep these two in step with `plan`.


def partition(
    item: PendingPod | InvalidPod | TriggerInfo,
    pools: Mapping[str, NodePoolInfo],
    config: PlanConfig,
) -> tuple[str, str]:
    """The partition of a pending pod or trigger: (GPU model or ``""``, NodePool or
    ``""``), every group's pods and triggers in one partition. `plan`'s decisions about
    the items of one partition do not depend on the items of another, except through the
    trigger budget (``max_triggers``) and NodeClaims that triggers of two partitions
    point to, which `controller.incremental` checks, as it checks that no group spans two
    partitions (by the groups in `Plan.demand`, which names every group with pods or
    triggers): a wrong guess here costs a whole plan, never a wrong one. A pod's pool is
    `resolve_pool`'s; invalid pods form their own partition."""
    if isinstance(item, InvalidPod):
        return ("\x00invalid", "")
    if isinstance(item, TriggerInfo):
        return (item.model or "", item.pool)
    pool, _ = resolve_pool(item, pools, config)
    return (item.intent.model or "", pool.name if pool is not None else "")


def time_sensitive(
    pod: PendingPod | InvalidPod,
    covers: Mapping[tuple[str, str], tuple[str, datetime]],
    retries: Mapping[tuple[str, str], RetryState] | None = None,
) -> bool:
    """Whether `plan`'s decisions about ``pod`` may change with ``snapshot.now`` alone,
    other than the time stamped on statuses it writes: a pod that may be under a
    NodeReady cover (`controller.capacity.held_covers`), by its status or the
    executor's ``covers``, or one with a retry state (its backoff ends with time; the
    executor's ``retries`` or its annotation)."""
    if isinstance(pod, InvalidPod):
        return False
    if (pod.ref.namespace, pod.ref.name) in covers:
        return True
    if pod.retry is not None or (pod.ref.namespace, pod.ref.name) in (retries or {}):
        return True
    status = pod.status
    return status is not None and status.phase == NODE_READY and bool(status.node_claim)
