"""Trigger planning: ``plan(snapshot, config) -> Plan``, a pure function with no awaits.

Given the pending GPU pods, the live trigger pods, NodeClaims and NodePools, it decides:

1. which pods need no trigger (Karpenter provisions for them natively), which cannot be
   served (no NodePool offers their model) and which intents are invalid;
2. for the rest, grouped by (NodePool, model, copied node selector), the GPU *bins*:
   a pod needing ``g >= 1`` GPUs gets a bin of ``ceil(g)`` whole GPUs; fractional pods
   are packed best-fit-decreasing into bins with spare share, so two 0.5 pods fill one
   1-GPU bin (KAI's node-scale-adjuster sums fractions the same way, REFERENCE.md 3);
3. bins are matched to live triggers of the same group and size; unmatched bins become
   new triggers, unmatched triggers are deleted (their demand went away);
4. each trigger is linked to the NodeClaim Karpenter made for it (same pool, created no
   earlier than the trigger, compatible model, enough GPU requests left); when that
   NodeClaim is Ready, the trigger is deleted and its pods are told ``NodeReady``;
5. pods told ``NodeReady`` stay out of planning for ``cover_seconds`` while their
   NodeClaim stays Ready, so the gap between trigger deletion and the real pod binding
   does not buy a second node;
6. pods that got a node while being scaled up for (often before their NodeClaim's
   Ready was even seen: a sharing layer's scheduler may place them beside the unbound
   trigger) are told ``Scheduled``, so no stale status outlives the scale-up.

The executor (`controller.reconciler`) applies the plan through the API adapter.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from controller.model import (
    GroupKey,
    InvalidPod,
    NodeClaimInfo,
    NodePoolInfo,
    PendingPod,
    PodRef,
    ScaleUpStatus,
    ScheduledPod,
    TriggerInfo,
    parse_time,
)
from controller.triggers import TriggerSettings, trigger_pod
from gpu_intent.intent import format_gpus

# Phases of the scale-up status annotation (see model.ScaleUpStatus).
NATIVE = "Native"
UNRESOLVABLE = "Unresolvable"
INVALID = "InvalidIntent"
TRIGGERED = "Triggered"
PROVISIONING = "Provisioning"
NODE_READY = "NodeReady"
SCHEDULED = "Scheduled"


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """Planning settings.

    Attributes:
        trigger: how trigger pods are built (namespace, image, GPU model label).
        default_nodepool: NodePool for intents without a model, or None (then such pods
            are reported ``Unresolvable``).
        cover_seconds: how long pods told ``NodeReady`` are left to their scheduler
            before their demand counts again (KAI's node-scale-adjuster waits 60 s).
        max_triggers: most live trigger pods at once; a bound on what a bug or a flood
            of pods can buy.
    """

    trigger: TriggerSettings = field(default_factory=TriggerSettings)
    default_nodepool: str | None = None
    cover_seconds: float = 60.0
    max_triggers: int = 100


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


@dataclass(frozen=True, slots=True)
class LinkTrigger:
    """Record on a trigger pod the NodeClaim Karpenter made for it."""

    ref: PodRef
    node_claim: str


@dataclass(frozen=True, slots=True)
class DeleteTrigger:
    """Delete a trigger pod (uid-guarded). ``after``: pods whose status must be written
    first; if any of those writes fails, the trigger stays for the next pass."""

    ref: PodRef
    reason: str
    after: tuple[PodRef, ...] = ()


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

    def __bool__(self) -> bool:
        return bool(self.links or self.statuses or self.deletes or self.creates)


@dataclass(slots=True)
class _Bin:
    size: int
    used: Decimal
    pods: list[PendingPod]


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


def _gpu_pool(pool: NodePoolInfo) -> bool:
    """A pool that says it makes GPU nodes: a GPU-ish requirement or label key, or a
    taint on ``nvidia.com/gpu``."""
    keys = pool.label_keys() | {str(t.get("key", "")) for t in pool.taints}
    return any("gpu" in key for key in keys)


def resolve_pool(
    pod: PendingPod, pools: Mapping[str, NodePoolInfo], config: PlanConfig
) -> tuple[NodePoolInfo | None, str]:
    """The NodePool a pod's trigger should target, and a message when there is none.

    Order: the pool the intent names if it exists, is Ready and admits the model; for a
    model, the Ready pools that explicitly admit it (requirement ``In`` or template
    label on the GPU model label), else GPU pools that do not exclude it, by weight then
    name (Karpenter picks the highest weight among matching pools); without a model, the
    configured default pool.
    """
    label = config.trigger.gpu_name_label
    model = pod.intent.model
    ready = sorted((p for p in pools.values() if p.ready), key=lambda p: (-p.weight, p.name))
    named = pools.get(pod.intent.pool or "")
    if named is not None and named.ready and (model is None or named.admits(label, model)):
        return named, ""
    if model is None:
        default = pools.get(config.default_nodepool or "")
        if default is not None and default.ready:
            return default, ""
        if config.default_nodepool:
            return (
                None,
                f"default NodePool {config.default_nodepool!r} does not exist or is not Ready",
            )
        return None, "the intent names no GPU model and no default NodePool is configured"
    explicit = [p for p in ready if p.admits(label, model) and label in p.label_keys()]
    implicit = [p for p in ready if p.admits(label, model) and _gpu_pool(p)]
    if not (explicit or implicit):
        return None, f"no Ready NodePool offers GPU model {model!r} ({label})"
    return (explicit or implicit)[0], ""


def _covered(
    pod: PendingPod, claims: Mapping[str, NodeClaimInfo], now: datetime, cover: float
) -> bool:
    status = pod.status
    if status is None or status.phase != NODE_READY or not status.node_claim:
        return False
    claim = claims.get(status.node_claim)
    since = parse_time(status.since)
    if claim is None or not claim.ready or claim.deleting or since is None:
        return False
    return now - since < timedelta(seconds=cover)


def pack(pods: Iterable[PendingPod]) -> list[_Bin]:
    """Best-fit-decreasing of pods' GPU needs into whole-GPU bins (see module doc).

    Pods are taken largest need first; a fractional pod goes to the open bin whose
    spare share fits it most tightly, else opens a 1-GPU bin. Best fit and first fit
    decreasing share the 11/9 OPT + 6/9 bound (Dosa 2007); a sorted index of spare
    shares makes this O(n log n) instead of first fit's O(n x bins).
    """
    bins: list[_Bin] = []
    spare: list[tuple[Decimal, int]] = []  # (spare share, bin index), sorted
    order = sorted(pods, key=lambda p: (-p.intent.gpus, p.created or datetime.min, p.ref))
    for pod in order:
        need = pod.intent.gpus
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
    triggers: Sequence[TriggerInfo], claims: Mapping[str, NodeClaimInfo], gpu_name_label: str
) -> dict[PodRef, str | None]:
    """The NodeClaim each live trigger belongs to (None: not made yet).

    A trigger bound to a node belongs to that node's NodeClaim. A recorded link stands
    while the NodeClaim exists. Otherwise the oldest NodeClaim of the trigger's pool,
    created no earlier than the trigger (second precision), admitting its model and
    selector, with ``nvidia.com/gpu`` requests not yet used by other linked triggers.
    Karpenter's ``Nominated`` event names the NodeClaim too, but it is a rate-limited
    hint (REFERENCE.md 1), so it is not relied on.
    """
    by_node = {c.node_name: c for c in claims.values() if c.node_name}
    links: dict[PodRef, str | None] = {}
    used: dict[str, Decimal] = defaultdict(Decimal)
    pending: list[TriggerInfo] = []
    for trigger in sorted(triggers, key=lambda t: (t.created or datetime.min, t.ref)):
        claim = by_node.get(trigger.node_name or "")
        if claim is None:
            recorded = claims.get(trigger.node_claim or "")
            claim = recorded if recorded is not None and not recorded.deleting else None
        if claim is not None:
            links[trigger.ref] = claim.name
            used[claim.name] += trigger.gpus
        else:
            pending.append(trigger)
    candidates = sorted(
        (c for c in claims.values() if not c.deleting and c.created is not None),
        key=lambda c: (c.created, c.name),
    )
    for trigger in pending:
        links[trigger.ref] = None
        for claim in candidates:
            if claim.pool != trigger.pool or trigger.created is None:
                continue
            assert claim.created is not None
            if claim.created < trigger.created.replace(microsecond=0):
                continue
            if claim.gpu_requests - used[claim.name] < trigger.gpus:
                continue
            if trigger.model and not claim.admits(gpu_name_label, trigger.model):
                continue
            if not all(claim.admits(k, v) for k, v in trigger.selector):
                continue
            links[trigger.ref] = claim.name
            used[claim.name] += trigger.gpus
            break
    return links


def triggered(trigger: str, gpus: int, pool: str, stamp: str) -> tuple[ScaleUpStatus, Event]:
    """The ``Triggered`` status and event for pods a trigger stands for (also used by the
    executor right after it creates a trigger, when the name is first known)."""
    message = (
        f"trigger {trigger} requests {gpus} nvidia.com/gpu on NodePool {pool}; "
        "waiting for Karpenter to create a NodeClaim"
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

    for pod in sorted(snapshot.pods, key=lambda p: p.ref):
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
        if _covered(pod, claims, now, config.cover_seconds):
            continue
        pool, why = resolve_pool(pod, snapshot.nodepools, config)
        if pool is None:
            tell(
                pod,
                ScaleUpStatus(UNRESOLVABLE, why, since=stamp),
                Event("Warning", "NoNodePool", why),
            )
            continue
        groups[GroupKey(pool.name, pod.intent.model, pod.selector)].append(pod)

    claim_of_node = {c.node_name: c.name for c in claims.values() if c.node_name}
    for done in snapshot.scheduled:
        # Name the NodeClaim by evidence only: the one whose node the pod is bound to.
        claim_name = claim_of_node.get(done.node)
        message = f"scheduled on node {done.node}" + (
            f" (NodeClaim {claim_name})" if claim_name else " (no NodeClaim known for it)"
        )
        status = ScaleUpStatus(SCHEDULED, message, None, claim_name, done.node, stamp)
        event = Event("Normal", "ScaleUpComplete", message)
        statuses.append(SetStatus(done.ref, status, event, done.seconds_to_node))

    live = [t for t in snapshot.triggers if not t.deleting]
    links = link_claims(live, claims, config.trigger.gpu_name_label)
    link_actions = tuple(
        LinkTrigger(t.ref, name)
        for t in live
        if (name := links.get(t.ref)) is not None and name != t.node_claim
    )
    by_group: dict[GroupKey, list[TriggerInfo]] = defaultdict(list)
    for trigger in live:
        by_group[trigger.group].append(trigger)

    deletes: list[DeleteTrigger] = []
    creates: list[CreateTrigger] = []
    demand: dict[GroupKey, Decimal] = {}
    budget = config.max_triggers - len(live)
    for key in sorted(set(groups) | set(by_group)):
        pods = groups.get(key, [])
        demand[key] = sum((p.intent.gpus for p in pods), Decimal(0))
        progress = {t.ref: _progress_linked(t, links, claims) for t in by_group.get(key, [])}
        spare = sorted(
            by_group.get(key, []),
            key=lambda t: (-progress[t.ref], t.created or datetime.min, t.ref),
        )
        for bin_ in sorted(pack(pods), key=lambda b: (-b.size, b.pods[0].ref)):
            match = next((t for t in spare if t.gpus == bin_.size), None)
            if match is None:
                if budget <= 0:
                    message = f"trigger limit ({config.max_triggers}) reached; waiting"
                    for pod in bin_.pods:
                        tell(pod, ScaleUpStatus(TRIGGERED, message, since=stamp), None)
                    continue
                budget -= 1
                pool = snapshot.nodepools[key.pool]
                refs = tuple(p.ref for p in bin_.pods)
                body = trigger_pod(key, bin_.size, pool, refs, config.trigger)
                creates.append(CreateTrigger(key, bin_.size, body, refs))
                continue
            spare.remove(match)
            claim = claims.get(links.get(match.ref) or "")
            trigger_name = str(match.ref)
            if claim is not None and claim.ready:
                node = claim.node_name or "(unknown)"
                message = (
                    f"NodeClaim {claim.name} is Ready as node {node}; removed trigger "
                    f"{trigger_name} so the pod's scheduler can use the capacity"
                )
                status = ScaleUpStatus(
                    NODE_READY, message, None, claim.name, claim.node_name, stamp
                )
                for pod in bin_.pods:
                    tell(pod, status, Event("Normal", "NodeReady", message))
                deletes.append(
                    DeleteTrigger(
                        match.ref,
                        f"NodeClaim {claim.name} is Ready",
                        tuple(p.ref for p in bin_.pods),
                    )
                )
            elif claim is not None:
                itype = claim.labels.get("node.kubernetes.io/instance-type")
                message = (
                    f"Karpenter NodeClaim {claim.name}"
                    + (f" ({itype})" if itype else "")
                    + f" is being provisioned for trigger {trigger_name} "
                    f"({bin_.size} GPU, {format_gpus(bin_.used)} used by {len(bin_.pods)} pod(s))"
                )
                status = ScaleUpStatus(PROVISIONING, message, trigger_name, claim.name, None, stamp)
                for pod in bin_.pods:
                    tell(pod, status, Event("Normal", "Provisioning", message))
            else:
                status, event = triggered(trigger_name, bin_.size, key.pool, stamp)
                for pod in bin_.pods:
                    tell(pod, status, event)
        for trigger in spare:
            deletes.append(DeleteTrigger(trigger.ref, "no pending pod needs it any more"))
    return Plan(link_actions, tuple(statuses), tuple(deletes), tuple(creates), demand)


def _progress_linked(
    trigger: TriggerInfo, links: Mapping[PodRef, str | None], claims: Mapping[str, NodeClaimInfo]
) -> int:
    linked = links.get(trigger.ref)
    claim = claims.get(linked or "")
    if claim is None:
        return 0
    return 3 if claim.ready else 2 if claim.launched else 1
