"""Trigger planning: ``plan(snapshot, config) -> Plan``, a pure function with no awaits.

Given the pending GPU pods, the live trigger pods, NodeClaims, NodePools and Karpenter's
``Nominated`` evidence, it decides:

1. which pods need no trigger (Karpenter provisions for them natively), which cannot be
   served (no NodePool offers their model, or their node selector or required node
   affinity can never match a node the pool makes) and which intents are invalid;
2. for the rest, grouped by (NodePool, model, copied node selector), the GPU *bins*:
   a pod needing ``g >= 1`` GPUs gets a bin of ``ceil(g)`` whole GPUs; fractional pods
   (and pods that state GPU memory on a card of known memory, by that share) are packed
   into bins with spare share, so two 0.5 pods fill one 1-GPU bin (KAI's
   node-scale-adjuster sums fractions the same way, REFERENCE.md 3): best-fit-decreasing
   or minimum bin slack, whichever needs fewer GPUs (`controller.packing.pack`);
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
   in all and per NodePool, the creation rate) waits, told ``Waiting`` and why, as does
   a group whose nodes KAI's pods would take first while capacity bought for them is on
   its way (`controller.contests`); a KAI group's trigger Karpenter has not bought for
   yet is withdrawn then (`_withdraw`).

The executor (`controller.reconciler`) applies the plan through the API adapter: money
first (creates, deletes), statuses after.

`plan` runs as named stages over one working state (`_Pass`), in this order:
`_classify` (1, 5), `_place_on_free` (pods that fit the free GPUs of a Ready NodeClaim
are told ``NodeReady`` rather than bought for), `_report_scheduled` (6),
`_link_and_mark` (4), `_failures` (7) and `_allocate` (2, 3, 7: for each group, `_fill`
buys its demand, then `_settle` decides each of its live triggers). Its pure helpers
live beside it: `controller.pools` (the NodePool, and whether its nodes can run the
pod), `controller.packing` (GPU needs, bins, the spare GPUs of triggers),
`controller.statuses` (what pods are told) and `controller.decisions` (the settings,
the snapshot and the plan). What it decides carries why as typed reasons
(`controller.reasons`: what each pod is told, why a trigger waits, fails or is
deleted); their words are `controller.messages`' alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Final

from controller import statuses
from controller.capacity import (
    Room,
    claim_hosts,
    foreign_claims,
    fresh,
    held_covers,
    nodes_to_label,
    place_on_free,
)
from controller.contests import Contest, contested, contesting, is_session, of_create
from controller.decisions import (
    CreateTrigger,
    DeleteNodeClaim,
    DeleteTrigger,
    Event,
    LabelNode,
    LinkTrigger,
    MarkTrigger,
    Plan,
    PlanConfig,
    SetStatus,
    Snapshot,
)
from controller.failures import (
    Failure,
    effective_retry,
    next_retry,
    retry_due,
    trigger_failure,
)
from controller.failures import stamp as rfc3339
from controller.messages import failure_text
from controller.model import (
    GroupKey,
    InvalidPod,
    PendingPod,
    PodRef,
    RetryState,
    ScaleUpStatus,
    ScheduledPod,
    TriggerInfo,
)
from controller.nodes import NodeClaimInfo, NodeInfo, NodePoolInfo, Nomination
from controller.packing import Bin, TriggerCapacity, gpu_need, gpu_use, pack, spread_demand
from controller.pools import PoolResolver, resolve_pool
from controller.reasons import (
    ClaimReady,
    ComingUp,
    Cooldown,
    FreeGpus,
    HeldBack,
    Hold,
    Invalid,
    Native,
    NodeReady,
    NotNeeded,
    PoolTriggerLimit,
    Provisioning,
    RateLimited,
    Scheduled,
    Settling,
    StatusReason,
    TooManyGpus,
    Triggered,
    TriggerFailed,
    TriggerLimit,
    Unresolvable,
    Withdrawn,
    retrying,
)
from controller.triggers import LINKED_REASON, trigger_name, trigger_pod
from intent.contract import Phase, Source
from intent.keys import NVIDIA_GPU, UNSCHEDULABLE
from intent.providers import model_requirements

# `PlanConfig` lives in `controller.decisions`; the command (`gpu_intent`) imports it
# from here.
__all__ = [
    "SCHEDULED_NAME_WAIT_SECONDS",
    "PlanConfig",
    "is_native",
    "link_claims",
    "partition",
    "plan",
    "time_sensitive",
]


#: How long HAMi's pods left without room wait (`Settling`) after the last NodeClaim
#: hosting them turned Ready, seconds: twice kube-scheduler's ``podMaxBackoffSeconds``
#: (10 s, KubeSchedulerConfiguration v1, ``pkg/scheduler/apis/config/v1/defaults.go``).
#: A Node's update moves the pods parked unschedulable to the backoff queue, each tried
#: again at most that long after its last attempt (``scheduling_queue.go``); HAMi's
#: scheduler is kube-scheduler with HAMi's extender.
SETTLE_SECONDS: Final = 20.0


@dataclass(slots=True)
class _Lend:
    """A trigger of one of KAI's groups whose NodeClaim (``claim``) is on its way, and
    the GPUs its own group's pods leave (``spare``, whole GPUs), which `_borrow` lends
    to KAI's other groups on its NodePool."""

    trigger: TriggerInfo
    claim: NodeClaimInfo
    spare: int


@dataclass(slots=True)
class _Pass:
    """One `plan` pass at work: the actions decided so far, each list in the order its
    entries were decided (the plan keeps that order), and the bookkeeping the stages
    hand on to one another."""

    #: ``snapshot.now`` as the statuses record it (``since``) and trigger names embed it.
    stamp: str
    #: The live triggers (those not being deleted), in the snapshot's order.
    live: list[TriggerInfo]
    statuses: list[SetStatus] = field(default_factory=list)
    #: What `tell` rendered this pass, by reason: (the reason, its status, its Event).
    told: dict[StatusReason, tuple[StatusReason, ScaleUpStatus, Event]] = field(
        default_factory=dict
    )
    links: tuple[LinkTrigger, ...] = ()
    marks: tuple[MarkTrigger, ...] = ()
    deletes: list[DeleteTrigger] = field(default_factory=list)
    creates: list[CreateTrigger] = field(default_factory=list)
    claim_deletes: dict[str, DeleteNodeClaim] = field(default_factory=dict)
    demand: dict[GroupKey, Decimal] = field(default_factory=dict)
    #: The pods to buy GPUs for, by group (`_classify`; `_place_on_free` takes some).
    groups: defaultdict[GroupKey, list[PendingPod]] = field(
        default_factory=lambda: defaultdict(list)
    )
    #: The NodeClaim each live trigger is linked to, None when none is (`_link_and_mark`).
    claim_of: dict[PodRef, NodeClaimInfo | None] = field(default_factory=dict)
    #: The live triggers that failed, and why (`_failures`).
    failures: dict[PodRef, Failure] = field(default_factory=dict)
    #: What the caps leave for new triggers (`_allocate`): triggers in all, the live
    #: triggers per NodePool, and creations the rate limit allows (None: no limit).
    budget: int = 0
    pool_live: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    tokens: int | None = None
    #: Capacity on its way for KAI's pods, which they would take before other layers'
    #: pods (`controller.contests`): live triggers not Ready, and those created this pass.
    contests: list[Contest] = field(default_factory=list)
    #: Each group's live triggers, most progressed first (`_allocate`).
    supplies: dict[GroupKey, list[TriggerInfo]] = field(default_factory=dict)
    #: The groups this pass makes a trigger of, once every group is filled (`_allocate`;
    #: `_settle` starts no cooldown for them).
    created_groups: frozenset[GroupKey] = frozenset()
    #: Spare GPUs KAI's groups may borrow from one another (`_borrow`), computed on
    #: first need (`_lendable`), by NodePool.
    lendable: dict[str, list[_Lend]] | None = None
    #: Bins of KAI's pods placed in another group's trigger, by trigger.
    borrowed: defaultdict[PodRef, list[Bin]] = field(default_factory=lambda: defaultdict(list))
    #: The spare GPUs each live trigger of a group `_fill` has allocated kept (by
    #: trigger): what the group lends (`_lendable`) once its own pods are placed.
    kept: dict[PodRef, int] = field(default_factory=dict)
    #: The room of NodeClaims Karpenter launched for other pods that is no pending
    #: pod's (`_coming_up`), computed on first need; what held bins take is taken out.
    coming: dict[str, Room] | None = None
    #: The room `fresh` NodeClaims have left once covers and this pass's placements on
    #: free GPUs took theirs (`_place_on_free`), by name: what `_settling` weighs.
    free: dict[str, Room] = field(default_factory=dict)
    #: The earliest time a decision of this pass changes with time alone (`Plan.wake`).
    wake: datetime | None = None

    def wake_at(self, when: datetime) -> None:
        """Plan again at ``when`` at the latest (`Plan.wake`)."""
        if self.wake is None or when < self.wake:
            self.wake = when

    def tell(self, pod: PendingPod | InvalidPod, why: StatusReason) -> None:
        """Tell ``pod`` the status ``why`` makes (`controller.statuses.told`, and record
        its Event), unless it knows already (`controller.statuses.knows`). Pods told an
        equal reason share one reason, status and Event (frozen values): thousands of
        pods held back by one cap cost one message, not one each."""
        if not statuses.knows(pod.status, why):
            shared = self.told.get(why)
            if shared is None:
                shared = self.told[why] = (why, *statuses.told(why, self.stamp))
            why, status, event = shared
            self.statuses.append(SetStatus(pod.ref, status, event, why=why))

    def to_plan(self, labels: tuple[LabelNode, ...]) -> Plan:
        """The `Plan` of what was decided: no link or mark for a trigger this pass
        deletes, the NodeClaim deletes by name."""
        going = {d.ref for d in self.deletes}
        return Plan(
            tuple(link for link in self.links if link.ref not in going),
            tuple(self.statuses),
            tuple(self.deletes),
            tuple(self.creates),
            self.demand,
            tuple(m for m in self.marks if m.ref not in going),
            labels,
            tuple(self.claim_deletes[name] for name in sorted(self.claim_deletes)),
            wake=self.wake,
        )


def plan(snapshot: Snapshot, config: PlanConfig) -> Plan:
    """Decide one pass of trigger work. Pure: no I/O, no clock but ``snapshot.now``."""
    work = _Pass(
        stamp=rfc3339(snapshot.now),
        live=[t for t in snapshot.triggers if not t.deleting],
    )
    free = _classify(snapshot, config, work)
    _link_and_mark(snapshot, work)
    _place_on_free(snapshot, config, work, free)
    _report_scheduled(snapshot, work)
    _failures(snapshot, config, work)
    _allocate(snapshot, config, work)
    return work.to_plan(_node_labels(snapshot, work.live))


def _classify(snapshot: Snapshot, config: PlanConfig, work: _Pass) -> dict[str, Room]:
    """Classify (module doc, 1 and 5): what each pending pod needs. A pod whose intent
    does not parse is told ``InvalidIntent``; one Karpenter provisions for itself
    (`is_native`) ``Native``; one under a NodeReady cover that still holds
    (`controller.capacity.held_covers`) is left to its scheduler; one no NodePool serves,
    or no node of its pool can run (`controller.pools.PoolResolver`), ``Unresolvable``;
    one out of scale-up attempts ``Failed``, and one in its retry backoff ``Waiting``.
    Every other pod joins its group in ``work.groups``: (NodePool, model, copied node
    selector, and for a pod that names no model its GPU memory). Returns the room of
    Ready NodeClaims, by name, that the covers leave (`held_covers`)."""
    held, free = held_covers(
        (p for p in snapshot.pods if isinstance(p, PendingPod) and not is_native(p)),
        snapshot.nodeclaims,
        snapshot.covers,
        snapshot.used,
        snapshot.now,
        config.cover_seconds,
        config.cover_max_seconds,
        snapshot.last_bind,
        snapshot.reserved,
        lambda: foreign_claims(
            snapshot.nominations.values(), snapshot.opted_in, config.trigger.namespace
        ),
        snapshot.leaving,
    )
    pools = PoolResolver(snapshot.nodepools, config)
    for pod in snapshot.pods:  # order-free: packing sorts what it packs
        if isinstance(pod, InvalidPod):
            work.tell(pod, Invalid(pod.error))
            continue
        if is_native(pod):
            work.tell(pod, Native())
            continue
        if pod.ref in held:
            continue
        pool = pools.resolve(pod)
        if not isinstance(pool, NodePoolInfo):
            work.tell(pod, Unresolvable(pool))
            continue
        retry = effective_retry(pod.retry, snapshot.retries.get((pod.ref.namespace, pod.ref.name)))
        if retry is not None and (
            retry.attempts >= config.retry_attempts or not retry_due(retry, snapshot.now)
        ):
            work.tell(pod, retrying(pod.ref, retry, config.retry_attempts))
            continue
        work.groups[_group_key(pod, pool, config)].append(pod)
    return free


def _group_key(pod: PendingPod, pool: NodePoolInfo, config: PlanConfig) -> GroupKey:
    """The group of ``pod`` (served by ``pool``): its pool, model, copied selector, the
    GPU memory its GPUs need and its sharing layer's placement (``config.placement``).
    The memory: for a pod that names no model, what it asks; for one that names a model
    variant (``model_memory_mib``, the 80 GB A100), that variant's, so the trigger asks
    ``gpu_memory_label Gt memory-1`` and Karpenter cannot pick the 40 GB one (no memory
    when the provider has no memory label)."""
    intent = pod.intent
    memory = intent.gpu_memory_mib if intent.model is None else intent.model_memory_mib
    if not config.trigger.profile.expresses_memory:
        memory = None
    placed = config.placement.for_intent(intent)
    return GroupKey(pool.name, intent.model, pod.selector, memory or 0, placed)


def _place_on_free(
    snapshot: Snapshot, config: PlanConfig, work: _Pass, free: dict[str, Room]
) -> None:
    """Classify, continued: the pods of each group that fit the free GPUs of a Ready
    NodeClaim (``free``; `controller.capacity.place_on_free`, which takes what it places
    out of ``free``) leave their group and are told ``NodeReady``: the capacity is there
    already, so their scheduler is left to use it. The pods of a live trigger linked to
    such a NodeClaim (``work.claim_of``) take its GPUs first and stay with their trigger
    (`_settle` tells them ``NodeReady`` and covers them as it deletes the trigger): the
    NodeClaim was bought for them (`_own_claims`)."""
    work.free = free
    if not free:
        return
    own = _own_claims(work, free)
    for key in sorted(work.groups, key=GroupKey.sort_key):
        if free:
            work.groups[key], placed = place_on_free(
                work.groups[key],
                key,
                free,
                snapshot.nodeclaims,
                config.trigger.profile,
                own,
            )
            for pod, host in placed:
                work.tell(pod, FreeGpus.of(host))


def _own_claims(work: _Pass, free: Mapping[str, Room]) -> dict[tuple[str, str], str]:
    """The NodeClaim in ``free`` (Ready, with room) that each pending pod's trigger is
    linked to, by pod (namespace, name): the trigger its status names, or, told
    nothing yet, the one made for it (`TriggerInfo.serves`), as `_stay` keeps pods.
    Seen on the real Karpenter (run 16): the first of three A10G NodeClaims turned
    Ready while its triggers were live, its GPUs went to the largest pending pods,
    two of them planned on the NodeClaims still coming, and the pods it was bought for
    lost their room; a fourth node was bought for them and came up empty."""
    linked = {
        str(t.ref): claim.name
        for t in work.live
        if (claim := work.claim_of.get(t.ref)) is not None and claim.name in free
    }
    if not linked:
        return {}
    own: dict[tuple[str, str], str] = {}
    for trigger in work.live:
        name = linked.get(str(trigger.ref))
        if name is not None:
            own.update((pod, name) for pod in trigger.serves)
    for pods in work.groups.values():
        for pod in pods:
            told = pod.status.trigger if pod.status is not None else None
            key = (pod.ref.namespace, pod.ref.name)
            if told is not None:
                if told in linked:
                    own[key] = linked[told]
                else:
                    own.pop(key, None)  # told of another trigger since
    return own


def _report_scheduled(snapshot: Snapshot, work: _Pass) -> None:
    """Report scheduled (module doc, 6): `scheduled_statuses` of the snapshot."""
    work.statuses.extend(
        scheduled_statuses(snapshot.scheduled, snapshot.nodeclaims, snapshot.nodes, snapshot.now)
    )


def scheduled_statuses(
    scheduled: Sequence[ScheduledPod],
    nodeclaims: Mapping[str, NodeClaimInfo],
    nodes: Mapping[str, NodeInfo],
    now: datetime,
) -> list[SetStatus]:
    """Each pod that got a node while being scaled up for (``scheduled``) is told
    ``Scheduled`` (``since`` ``now``), naming the NodeClaim by evidence only: the one
    whose node the pod is bound to (its ``status.nodeName``, or the Node's NodeClaim
    ownerReference). The caches may learn of the node after the binding: the final
    status waits for them `SCHEDULED_NAME_WAIT_SECONDS` (`_named_late`) before it says
    no NodeClaim is known (such a pod gets no status yet). Pure; `plan` reports these,
    and the controller as soon as a read-back finds pods bound
    (`controller.reconciler.Controller.read_left`), without waiting for a pass."""
    stamp = rfc3339(now)
    claim_of_node = {c.node_name: c.name for c in nodeclaims.values() if c.node_name}
    out: list[SetStatus] = []
    for done in scheduled:
        bound_to = nodes.get(done.node)
        claim_name = claim_of_node.get(done.node) or (bound_to.claim if bound_to else None)
        if claim_name is None and not _named_late(done, now):
            continue
        claim = nodeclaims.get(claim_name) if claim_name else None
        why = Scheduled.of(done.node, claim_name, claim)
        status, event = statuses.told(why, stamp)
        out.append(SetStatus(done.ref, status, event, done.seconds_to_node, why=why))
    return out


def _link_and_mark(snapshot: Snapshot, work: _Pass) -> None:
    """Link and mark (module doc, 4): the NodeClaim of each live trigger, by evidence
    only (`link_claims`), into ``work.claim_of``; a link to record on each trigger whose
    recorded link differs; and a mark for each non-binding trigger whose
    ``PodScheduled`` reason is not yet what its link calls for (``Unschedulable``
    while no NodeClaim is known, so Karpenter provisions for it,
    `controller.triggers.LINKED_REASON` once one is, so Karpenter leaves it alone)."""
    links = link_claims(work.live, snapshot.nodeclaims, snapshot.nominations)
    work.claim_of = {t.ref: snapshot.nodeclaims.get(links.get(t.ref) or "") for t in work.live}
    work.links = tuple(
        LinkTrigger(t.ref, name)
        for t in work.live
        if (name := links.get(t.ref)) is not None and name != t.node_claim
    )
    work.marks = tuple(
        MarkTrigger(t.ref, linked)
        for t in work.live
        if not t.binding
        and not t.node_name
        and t.condition_reason
        != (UNSCHEDULABLE if (linked := links.get(t.ref)) is None else LINKED_REASON)
    )


def _failures(snapshot: Snapshot, config: PlanConfig, work: _Pass) -> None:
    """Failures (module doc, 7): which live triggers failed, by the evidence of this
    pass (`controller.failures.trigger_failure`: Karpenter refused it at its NodePool's
    limits, its NodeClaim went away before it was Ready, or is not Ready in time), into
    ``work.failures``. What becomes of them and their pods is decided with their group
    (`_fail`)."""
    for trigger in work.live:
        failure = trigger_failure(
            trigger,
            work.claim_of[trigger.ref],
            snapshot.nodeclaims,
            snapshot.refusals.get((trigger.ref.namespace, trigger.ref.name)),
            snapshot.now,
            config.init_timeout_seconds,
            snapshot.used,
            snapshot.lost.get(trigger.ref.name),
        )
        if failure is not None:
            work.failures[trigger.ref] = failure


def _allocate(snapshot: Snapshot, config: PlanConfig, work: _Pass) -> None:
    """Allocate (module doc, 2, 3 and 7): group by group (KAI's first, of no model first,
    then in `GroupKey.sort_key` order), the group's demand is bought (`_fill`: bins into the
    spare GPUs of its live triggers, most progressed first, then those KAI's other groups
    lend, else new triggers within the caps; pods that borrowed a trigger's spare stay
    with it first, `_stay_borrowed`); once every group is, each live trigger is
    settled (`_settle`: failed, unneeded, or its pods, its own group's and borrowers',
    told its progress). What KAI's groups buy joins ``work.contests``."""
    work.budget = config.max_triggers - len(work.live) - snapshot.live_elsewhere
    work.pool_live = defaultdict(int, snapshot.live_elsewhere_by_pool)
    by_group: dict[GroupKey, list[TriggerInfo]] = defaultdict(list)
    for trigger in work.live:
        work.pool_live[trigger.pool] += 1
        by_group[trigger.group].append(trigger)
    work.tokens = snapshot.create_tokens
    work.contests = list(contesting(work.live, snapshot.nodeclaims, config.placement))
    # KAI's groups first, those of no model before those of one: what they buy this
    # pass may hold back the groups after them.
    keys = sorted(
        set(work.groups) | set(by_group),
        key=lambda k: (not is_session(k, config.placement), k.model is not None, k.sort_key()),
    )
    for key in keys:
        work.supplies[key] = sorted(
            by_group.get(key, []),
            key=lambda t: (-_progress(work.claim_of[t.ref]), t.created or datetime.min, t.ref),
        )
    # Pods that borrowed a trigger of another of KAI's groups stay with it before any
    # group borrows afresh.
    own = {k: _stay_borrowed(snapshot, config, work, k, work.groups.get(k, [])) for k in keys}
    filled: list[tuple[list[TriggerInfo], dict[PodRef, list[Bin]]]] = []
    for key in keys:
        supply = _withdraw(snapshot, config, work, key, work.supplies[key])
        created = len(work.creates)
        filled.append((supply, _fill(snapshot, config, work, key, supply, own[key])))
        if is_session(key, config.placement):
            work.contests.extend(of_create(c, snapshot.now) for c in work.creates[created:])
    # Settled once every group is filled: a group after may borrow a trigger's spare.
    work.created_groups = frozenset(c.group for c in work.creates)
    for supply, served in filled:
        for trigger in supply:
            bins = served.get(trigger.ref, []) + work.borrowed.pop(trigger.ref, [])
            _settle(snapshot, config, work, trigger, bins)


def _withdraw(
    snapshot: Snapshot,
    config: PlanConfig,
    work: _Pass,
    key: GroupKey,
    supply: list[TriggerInfo],
) -> list[TriggerInfo]:
    """The supply of KAI's group ``key`` (one that names a model) without its triggers
    Karpenter has made no NodeClaim for yet, when capacity on its way for KAI's pods of
    no model would hold a new trigger of the group back (`controller.contests.contested`):
    those are deleted (``Withdrawn``, no cooldown) and their pods wait with the rest.
    KAI's pods of no model take whatever node they fit first, so an A100 node bought for
    A100 fractions that comes up with the L4 nodes bought for memory-only pods is theirs
    as readily as the L4s; withdrawn before Karpenter buys it, it comes up after them.
    Karpenter may have just made its NodeClaim unseen (its ``Nominated`` event not read
    yet): deleting an unlinked trigger risks that, as deleting one no pod needs does."""
    if key.model is None or not is_session(key, config.placement):
        return supply
    unlinked = [t for t in supply if work.claim_of[t.ref] is None and t.ref not in work.failures]
    pods = work.groups.get(key, [])
    if not unlinked or not pods:
        return supply
    hold = contested(
        key,
        pods,
        work.contests,
        snapshot.nodepools,
        config.placement,
        snapshot.now,
        config.contest_seconds,
    )
    if hold is None:
        return supply
    for trigger in unlinked:
        work.deletes.append(DeleteTrigger(trigger.ref, Withdrawn(hold)))
    gone = {t.ref for t in unlinked}
    return [t for t in supply if t.ref not in gone]


def _fill(
    snapshot: Snapshot,
    config: PlanConfig,
    work: _Pass,
    key: GroupKey,
    supply: Sequence[TriggerInfo],
    pods: Sequence[PendingPod],
) -> dict[PodRef, list[Bin]]:
    """Allocate one group's demand: its pods' GPUs (``work.demand``), less those staying
    with a trigger they borrowed (``pods``: the rest, `_stay_borrowed`), packed into bins
    (`controller.packing.pack`), largest first, each placed into the spare GPUs of the
    group's live triggers (``supply``, in priority order) whatever their size, so a
    change in packing never replaces capacity already bought; a bin left over becomes a
    new trigger (`_new_trigger`) unless a cap or the cooldown holds it back
    (`_held_back`; its pods are then told ``Waiting`` and why). Returns the bins each
    live trigger serves, by trigger."""
    work.demand[key] = sum((gpu_need(p.intent) for p in work.groups.get(key, [])), Decimal(0))
    served: dict[PodRef, list[Bin]] = defaultdict(list)
    capacity = _capacity(work, supply)
    left = _place_own(work, key, supply, capacity, served, pods)
    work.kept.update((t.ref, capacity.spare(i)) for i, t in enumerate(supply))
    gathering = _gathering(snapshot, config, work.groups.get(key, []))
    settling = _settling(snapshot, config, work, key, left, supply, served)
    for bin_ in left:
        if _borrow(config, work, key, bin_):
            if key.model is None:
                # Pods of no model placed in capacity on its way still take whatever
                # node they fit first: KAI's groups of a model wait for it as for a
                # trigger of their own (`controller.contests.contested`).
                work.contests.append(Contest(key, snapshot.now))
            continue
        session_any = key.model is None and is_session(key, config.placement)
        if gathering is not None and all(_new_pod(p) for p in bin_.pods):
            work.wake_at(gathering)  # told nothing yet: planned whole once it ends
            if session_any:
                # KAI's pods of no model take whatever node they fit first: about to be
                # bought for, they hold KAI's groups of a model back as a trigger would.
                work.contests.append(
                    Contest(key, min(p.created or snapshot.now for p in bin_.pods))
                )
            continue
        hold = settling or _held_back(snapshot, config, work, key, bin_)
        if hold is not None:
            if session_any and isinstance(hold, ComingUp):
                # waiting for a node on its way, which they will take as a trigger's
                work.contests.append(Contest(key, snapshot.nodeclaims[hold.claim].created))
            for pod in bin_.pods:
                work.tell(pod, HeldBack(hold))
            continue
        work.creates.append(_new_trigger(snapshot, config, work, key, bin_))
    return served


def _settling(
    snapshot: Snapshot,
    config: PlanConfig,
    work: _Pass,
    key: GroupKey,
    left: Sequence[Bin],
    supply: Sequence[TriggerInfo],
    served: Mapping[PodRef, Sequence[Bin]],
) -> Settling | None:
    """Whether group ``key``'s bins no trigger had room for (``left``) wait for the
    `fresh` NodeClaims that host all their pods (`controller.capacity.claim_hosts`),
    those with no room left included, and the NodeClaims on their way that the group's
    triggers are linked to, because those have, in all, the GPUs the pods need
    (`controller.packing.gpu_use`): a Ready one its room once covers and this pass's
    placements took theirs (``work.free``), one on its way the GPUs the group's
    triggers bought there; counting also the pods of the group's triggers linked to
    any of them. Only for HAMi's pods
    (`controller.packing.spread_demand`), whose room is judged card by card: other
    pods' room is judged in all on each NodeClaim, and in all across NodeClaims is no
    room (the 1,000-pod mix's tensor-fusion pods waited 48 s on 22 one-GPU L40S nodes
    whose free shares each held none of them). None when they do not, or no Ready one
    hosts them. Pure.

    The room of each card (`controller.capacity.Room`) was judged with each covered
    pod on the NodeClaim it was told of, but its scheduler places pods on any node they
    fit. Seen on the real Karpenter (run 18): HAMi bound the oldest pods of a burst to
    the first A10G node Ready, bought for others; the pods of two 10000 MiB vGPUs
    covered there lost their room while the three nodes held all of the burst, and a
    fourth was bought that came up empty. And (run 22): the first node Ready took pods
    planned on the third, still on its way; its triggers kept a few small pods each,
    no whole GPU spare, and the two pods of two vGPUs left bought a fourth node within
    a second, which came up empty as the third held them.

    The wait ends `SETTLE_SECONDS` after the last of them turned Ready, none being on
    its way: by then its scheduler has tried every pending pod with all of them Ready,
    and room only shrinks while a burst binds; at the latest when the first of them
    stops being fresh (`controller.capacity.fresh`). Waiting out the whole cover, a
    pod that fit nowhere held the sim's 1,000-pod mix 60 s before it bought; ending
    the wait 10 s after the last bind, NodeClaims on their way not counted, left a
    HAMi node empty in both of two runs of it."""
    if not left:
        return None
    profile = config.trigger.profile
    pods = [pod for bin_ in left for pod in bin_.pods]
    if not all(spread_demand(pod.intent) is not None for pod in pods):
        return None  # room counted in all per NodeClaim (`Room`): no card pins it
    # One pod per node selector and required affinity: all `claim_hosts` reads of a pod.
    shapes = list({(p.node_selector, p.affinity_terms): p for p in pods}.values())

    def hosts_all(claim: NodeClaimInfo) -> bool:
        return all(claim_hosts(claim, key, pod, profile) for pod in shapes)

    # Fresh with no room left counts too: the pods covered there may go elsewhere.
    hosts = [
        name
        for name, claim in sorted(snapshot.nodeclaims.items())
        if claim.pool == key.pool
        and (name in work.free or (claim.marked and _fresh(snapshot, config, claim)))
        and hosts_all(claim)
    ]
    if not hosts:
        return None
    # GPUs the group's triggers bought on each NodeClaim on its way that hosts the pods
    coming: dict[str, int] = defaultdict(int)
    for trigger in supply:
        claim = work.claim_of[trigger.ref]
        if (
            claim is not None
            and not claim.ready
            and trigger.ref not in work.failures
            and (claim.name in coming or hosts_all(claim))
        ):
            coming[claim.name] += trigger.gpus
    need = sum((gpu_use(pod.intent) for pod in pods), Decimal(0))
    going = set(hosts) | set(coming)
    for trigger in supply:
        claim = work.claim_of[trigger.ref]
        if claim is not None and claim.name in going:
            need += sum((gpu_use(p.intent) for b in served.get(trigger.ref, ()) for p in b.pods),
                        Decimal(0))  # fmt: skip
    free = sum((work.free[name].total for name in hosts if name in work.free), Decimal(0))
    room = free + sum(coming.values())
    if need > room:
        return None
    ready = [r for name in hosts if (r := snapshot.nodeclaims[name].ready_since) is not None]
    until = min(ready) + timedelta(seconds=config.cover_seconds)
    if not coming:
        until = min(until, max(ready) + timedelta(seconds=SETTLE_SECONDS))
    if snapshot.now >= until:
        return None
    work.wake_at(until)
    return Settling(tuple(hosts), until, tuple(sorted(coming)))


def _fresh(snapshot: Snapshot, config: PlanConfig, claim: NodeClaimInfo) -> bool:
    """`controller.capacity.fresh` of ``claim`` at the snapshot's time, as `_classify`
    judges it."""
    return fresh(
        claim, snapshot.now, config.cover_seconds, config.cover_max_seconds, snapshot.last_bind
    )


def _new_pod(pod: PendingPod) -> bool:
    """A pod a burst brings that may wait for the rest of it: told nothing yet, its
    creation time known, and one Karpenter cannot provision for by itself
    (``unsimulatable``). Karpenter sees a KAI pod of annotations only as a CPU pod: its
    own batch (1 s idle) closes without the trigger and buys a node for it alone, where
    a trigger made at once is packed with it (the sim's Karpenter bought a T4 node for a
    memory-only pod so)."""
    return pod.status is None and pod.created is not None and bool(pod.unsimulatable)


def _gathering(
    snapshot: Snapshot, config: PlanConfig, pods: Sequence[PendingPod]
) -> datetime | None:
    """When the burst group ``pods`` is receiving ends, None when it is not receiving
    one: ``config.gather_seconds`` after its newest new pod's creation (`_new_pod`), at
    most ``config.gather_max_seconds`` after its oldest's. Until then its new pods'
    bins get no trigger and are told nothing (`_fill`): packed pass by pass as they
    arrive, a burst's pods fill the cards of the triggers made for the first ones as
    those were packed, and the later ones need more (on the real Karpenter, HAMi's
    A10G pods of the 160-pod mix: 14 GPUs where 12 hold them when packed whole, and one
    of the four `g5.12xlarge` bought came up empty). Whole seconds of
    ``creationTimestamp`` make the wait up to a second shorter. Pure."""
    if config.gather_seconds <= 0:
        return None
    created = [p.created for p in pods if p.created is not None and _new_pod(p)]
    if not created:
        return None
    end = min(
        max(created) + timedelta(seconds=config.gather_seconds),
        min(created) + timedelta(seconds=config.gather_max_seconds),
    )
    return end if snapshot.now < end else None


def _borrow(config: PlanConfig, work: _Pass, key: GroupKey, bin_: Bin) -> bool:
    """Place ``bin_`` of KAI's group ``key`` in the spare GPUs of a trigger of another
    KAI group on its NodePool whose NodeClaim is on its way (linked, not Ready) and is
    known to host its pods: its launched instance's labels say the GPU the group needs
    (`intent.providers.model_requirements`: model, memory) and meet the rest
    (`controller.capacity.claim_hosts`). KAI puts its pods on any node they fit, so
    when KAI's fractions of the pool took the L4 node bought for memory-only pods, the
    fractions' own NodeClaim, still coming, has the room those pods need, and when the
    memory-only pods went elsewhere their NodeClaim has the room of the fractions they
    displaced; buying another node would leave one empty. The spare is what the
    lending group's own pods leave (`_lendable`). Returns whether it was placed; its
    pods are then told of that trigger (``work.borrowed``)."""
    if not is_session(key, config.placement):
        return False
    if work.lendable is None:
        work.lendable = _lendable(config, work)
    profile = config.trigger.profile
    gpu = model_requirements(profile, key.model, key.min_memory_mib)
    for lend in work.lendable.get(key.pool, ()):
        if lend.spare < bin_.size or lend.trigger.group == key:
            continue
        if not all(r["key"] in lend.claim.labels for r in gpu):
            continue  # not launched yet: which GPU it brings is not known
        if all(claim_hosts(lend.claim, key, pod, profile) for pod in bin_.pods):
            lend.spare -= bin_.size
            work.borrowed[lend.trigger.ref].append(bin_)
            return True
    return False


def _stay_borrowed(
    snapshot: Snapshot,
    config: PlanConfig,
    work: _Pass,
    key: GroupKey,
    pods: Sequence[PendingPod],
) -> Sequence[PendingPod]:
    """Pods of KAI's group ``key`` told of a trigger of another KAI group they borrowed
    the spare of (`_borrow`) stay with it while it still lends (`_lendable`: its
    NodeClaim on its way, hosting them), as far as its spare holds their bins
    (``work.borrowed``); returns the group's other pods, to be placed as usual. Borrowed
    afresh each pass, they went to whichever lender came first with room, and as the
    lenders' own pods came and went, they were told one trigger, then another, while
    the first was still linked (real runs 25 and 26: 8 and 11 KAI L4 quarters)."""
    if not is_session(key, config.placement):
        return pods
    told: dict[str, list[PendingPod]] = defaultdict(list)
    for pod in pods:
        trigger = pod.status.trigger if pod.status is not None else None
        if trigger is not None:
            told[trigger].append(pod)
    if not told:
        return pods
    if work.lendable is None:
        work.lendable = _lendable(config, work)
    lenders = {
        str(lend.trigger.ref): lend
        for lend in work.lendable.get(key.pool, ())
        if lend.trigger.group != key and str(lend.trigger.ref) in told
    }
    if not lenders:
        return pods
    profile = config.trigger.profile
    kept: set[PodRef] = set()
    for name, lend in sorted(lenders.items()):
        for bin_ in pack(p for p in told[name] if claim_hosts(lend.claim, key, p, profile)):
            if lend.spare < bin_.size:
                continue
            lend.spare -= bin_.size
            work.borrowed[lend.trigger.ref].append(bin_)
            kept.update(p.ref for p in bin_.pods)
    if kept and key.model is None:
        # as `_fill` does for a bin `_borrow` places: they take whatever node they fit
        work.contests.append(Contest(key, snapshot.now))
    return [p for p in pods if p.ref not in kept]


def _lendable(config: PlanConfig, work: _Pass) -> dict[str, list[_Lend]]:
    """The triggers of KAI's groups whose NodeClaim is on its way, each with the GPUs
    its own group's pods leave spare, by NodePool, in the groups' order then the
    supply's: what `_fill` kept of a group it has allocated (``work.kept``), else what
    placing the group's own pods as `_fill` will leaves (`_own_spare`)."""
    out: dict[str, list[_Lend]] = defaultdict(list)
    for key, supply in sorted(work.supplies.items(), key=lambda kv: kv[0].sort_key()):
        if not is_session(key, config.placement):
            continue
        on_way = [
            (i, claim)
            for i, t in enumerate(supply)
            if (claim := work.claim_of[t.ref]) is not None
            and not claim.ready
            and t.ref not in work.failures
        ]
        if not on_way:
            continue
        if all(supply[i].ref in work.kept for i, _ in on_way):
            spare = {i: work.kept[supply[i].ref] for i, _ in on_way}
        else:
            spare = dict(enumerate(_own_spare(work, key, supply)))
        out[key.pool].extend(_Lend(supply[i], claim, spare[i]) for i, claim in on_way if spare[i])
    return out


def _own_spare(work: _Pass, key: GroupKey, supply: Sequence[TriggerInfo]) -> list[int]:
    """The spare GPUs each of ``supply`` (group ``key``'s live triggers) has once the
    group's own pods are placed as `_fill` places them (`_place_own`). Pure: nothing is
    told or bought. Withdrawing the group's unlinked triggers (`_withdraw`) leaves its
    linked ones' spare as it is: their pods go to the linked ones first either way."""
    capacity = _capacity(work, supply)
    _place_own(work, key, supply, capacity, defaultdict(list))
    return [capacity.spare(i) for i in range(len(supply))]


def _capacity(work: _Pass, supply: Sequence[TriggerInfo]) -> TriggerCapacity:
    """The spare GPUs of ``supply`` (a group's live triggers), pooled by the NodeClaim
    each is linked to (``work.claim_of``; `controller.packing.TriggerCapacity`)."""
    claims = [c.name if (c := work.claim_of[t.ref]) is not None else None for t in supply]
    return TriggerCapacity(supply, claims)


def _place_own(
    work: _Pass,
    key: GroupKey,
    supply: Sequence[TriggerInfo],
    capacity: TriggerCapacity,
    served: dict[PodRef, list[Bin]],
    pods: Sequence[PendingPod] | None = None,
) -> list[Bin]:
    """Place group ``key``'s pods (``pods``, by default all of the group's) in its live
    triggers' GPUs (``capacity`` over ``supply``): staying pods first (`_stay`), then
    the bins packed, largest first, each into the first trigger with room, whatever its
    size (``served``, by trigger). Returns the bins no trigger had room for, largest
    first."""
    if pods is None:
        pods = work.groups.get(key, [])
    pods, stayed = _stay(work, supply, pods, capacity, served)
    left: list[Bin] = []
    for bin_ in sorted(pack(pods, into=stayed), key=lambda b: (-b.size, b.pods[0].ref)):
        holder = capacity.take(bin_.size)
        if holder is None:
            left.append(bin_)
        else:
            served[holder.ref].append(bin_)
    return left


def _stay(
    work: _Pass,
    supply: Sequence[TriggerInfo],
    pods: Sequence[PendingPod],
    capacity: TriggerCapacity,
    served: dict[PodRef, list[Bin]],
) -> tuple[list[PendingPod], list[Bin]]:
    """Pods stay with the live trigger they were told of (their status names it), or,
    told nothing yet, with the one made for them (`TriggerInfo.serves`): their bins
    take that trigger's GPUs first, as far as it has room. So a pod is not moved
    from trigger to trigger, and its story (``Triggered`` Events naming one trigger
    after another, then one NodeClaim after another) does not churn as new pods join
    the group and its packing changes; on the real Karpenter, when only the pods of
    linked triggers stayed, one pod was named in 8 triggers within 12 s.

    First the pods of linked triggers (Karpenter made a NodeClaim for them), then those
    of unlinked ones, but only when no linked trigger of the group has a spare GPU left:
    a NodeClaim bought whose pods went elsewhere must take the pods still pending before
    an unlinked trigger makes Karpenter buy another (packed afresh, they go to the most
    progressed trigger first, and the unlinked one is deleted as not needed). Returns
    the pods left to pack, and the staying pods' bins: the share they leave of their
    GPUs is packed with those pods first (`controller.packing.pack` ``into``), so
    staying costs no GPU that packing everything afresh would have saved."""
    if not supply:
        return list(pods), []
    told_of = {str(t.ref): i for i, t in enumerate(supply)}
    # Its status not written yet (the writer is rate-limited; a burst's creates queue
    # many), a pod stays with the trigger made for it (`TriggerInfo.serves`): packed
    # afresh, it was told one trigger, then another, 0.4 s apart (real run 9).
    made_for = {pod: i for i, t in enumerate(supply) for pod in t.serves}
    linked = {i for i, t in enumerate(supply) if work.claim_of[t.ref] is not None}
    stay: dict[int, list[PendingPod]] = defaultdict(list)
    rest: list[PendingPod] = []
    for pod in pods:
        if pod.status is None:
            index = made_for.get((pod.ref.namespace, pod.ref.name))
            if index is not None:
                stay[index].append(pod)
            else:
                rest.append(pod)
            continue
        told = pod.status.trigger
        index = told_of.get(told) if told else None
        if index is None:
            rest.append(pod)
        else:
            stay[index].append(pod)
    stayed: list[Bin] = []

    def keep(indices: list[int]) -> None:
        # Each trigger's own GPUs first; then what a bin lacks of the other triggers
        # linked to its NodeClaim, once their own staying pods are placed.
        short: list[tuple[int, Bin]] = []
        for index in indices:
            for bin_ in pack(stay[index]):
                if capacity.take_from(index, bin_.size):
                    served[supply[index].ref].append(bin_)
                    stayed.append(bin_)
                else:
                    short.append((index, bin_))
        for index, bin_ in short:
            if capacity.take_from(index, bin_.size, pooled=True):
                served[supply[index].ref].append(bin_)
                stayed.append(bin_)
            else:
                rest.extend(bin_.pods)

    keep(sorted(i for i in stay if i in linked))
    unlinked = sorted(i for i in stay if i not in linked)
    if any(capacity.spare(i) > 0 for i in linked):
        rest.extend(p for i in unlinked for p in stay[i])
    else:
        keep(unlinked)
    return rest, stayed


def _held_back(
    snapshot: Snapshot, config: PlanConfig, work: _Pass, key: GroupKey, bin_: Bin
) -> Hold | None:
    """Why a new trigger for ``bin_`` of group ``key`` waits, None when it may be
    created: the group's cooldown after a trigger was removed unneeded, the GPUs-per-
    trigger cap, capacity on its way for KAI's pods that could take its node first
    (`controller.contests.contested`), the trigger limits (in all, then per NodePool),
    the creation rate."""
    removed = snapshot.removals.get(key)
    if removed is not None and snapshot.now - removed < timedelta(seconds=config.cooldown_seconds):
        return Cooldown(removed, config.cooldown_seconds)
    gpus = bin_.size
    if gpus > config.max_gpus_per_trigger:
        return TooManyGpus(gpus, config.max_gpus_per_trigger)
    contest = contested(
        key,
        bin_.pods,
        work.contests,
        snapshot.nodepools,
        config.placement,
        snapshot.now,
        config.contest_seconds,
    )
    if contest is not None:
        return contest
    coming = _wait_for_coming(snapshot, config, work, key, bin_)
    if coming is not None:
        return coming
    if work.budget <= 0:
        return TriggerLimit(config.max_triggers)
    cap = config.max_triggers_per_pool
    if cap and work.pool_live[key.pool] >= cap:
        return PoolTriggerLimit(key.pool, cap)
    if work.tokens is not None and work.tokens <= 0:
        return RateLimited()
    return None


def _coming_up(snapshot: Snapshot, config: PlanConfig) -> dict[str, Room]:
    """The room, by NodeClaim name, of the NodeClaims Karpenter launched for pods other
    than our live triggers (no live trigger's marker) that are not Ready yet: their GPUs
    (`NodeClaimInfo.gpus`, the instance launched) less those of the pending native pods
    Karpenter nominated onto them (``snapshot.reserved``), spread over their cards
    (`controller.capacity.Room`); only those with some room, of a NodePool that makes
    GPUs, and none Karpenter nominated a pod of a namespace that did not opt in onto
    (`controller.capacity.foreign_claims`: that pod's GPUs are not known). Pure.

    The pods Karpenter bought such a NodeClaim for may have gone elsewhere: kube-scheduler
    binds a pending native pod to the first Ready node it fits, a node bought for our
    triggers included, while its own NodeClaim is still initializing (seen on the real
    kube-scheduler and Karpenter, `../shared/realk8s`: three 1-GPU native pods took a T4
    node bought for KAI's triggers, whose pods were bought a fifth T4 node that came up
    empty, as KAI took the native pods' nodes). Karpenter counts in-flight NodeClaims as
    capacity for the pods it provisions (pkg/controllers/provisioning/scheduling,
    ``NewExistingNode`` for in-flight nodes); this is that count for sharing-layer pods.

    One bought for triggers that are all gone counts too: Karpenter made it as the
    trigger, no longer needed, was deleted (real run 29: nominated and deleted within
    3 ms), and it comes up with no pod of its own."""
    passed = foreign_claims(
        snapshot.nominations.values(), snapshot.opted_in, config.trigger.namespace
    )
    live = frozenset(t.ref.name for t in snapshot.triggers)
    room: dict[str, Room] = {}
    for claim in snapshot.nodeclaims.values():
        if (
            claim.marked & live
            or claim.ready
            or claim.deleting
            or not claim.gpu_capacity
            or claim.name in passed
        ):
            continue
        pool = snapshot.nodepools.get(claim.pool or "")
        if pool is None or not pool.makes_gpus():
            continue
        left = Room.of(claim.gpus, snapshot.reserved.get(claim.name, Decimal(0)))
        if left.total > 0:
            room[claim.name] = left
    return room


def _wait_for_coming(
    snapshot: Snapshot, config: PlanConfig, work: _Pass, key: GroupKey, bin_: Bin
) -> ComingUp | None:
    """Whether ``bin_`` of group ``key`` waits for a NodeClaim `_coming_up` has room on:
    the first by name that hosts all its pods (`controller.capacity.claim_hosts`) and
    has room for each (`Room.take`, taken out of ``work.coming``), for at most
    ``config.contest_seconds`` from the NodeClaim's creation. Only one whose labels say
    the GPU the group needs (`intent.providers.model_requirements`), as the instance
    launched sets them: its requirements may allow several models. Once the NodeClaim is
    Ready its free GPUs take the pods (`controller.capacity.place_on_free`), or, taken
    by others, let them buy."""
    if work.coming is None:
        work.coming = _coming_up(snapshot, config)
    if not work.coming:
        return None
    profile = config.trigger.profile
    gpu = model_requirements(profile, key.model, key.min_memory_mib)
    for name in sorted(work.coming):
        claim = snapshot.nodeclaims[name]
        until = (claim.created or snapshot.now) + timedelta(seconds=config.contest_seconds)
        if snapshot.now >= until or not all(r["key"] in claim.labels for r in gpu):
            continue  # waited long enough; or not labelled yet: its GPU is not known
        if not all(claim_hosts(claim, key, pod, profile) for pod in bin_.pods):
            continue
        trial = Room(list(work.coming[name].cards))
        if all(trial.take(pod.intent, gpu_need(pod.intent)) for pod in bin_.pods):
            work.coming[name] = trial
            work.wake_at(until)
            return ComingUp(name, until)
    return None


def _new_trigger(
    snapshot: Snapshot, config: PlanConfig, work: _Pass, key: GroupKey, bin_: Bin
) -> CreateTrigger:
    """The create of a trigger for ``bin_`` (`controller.triggers.trigger_pod`), counted
    against the caps."""
    work.budget -= 1
    work.pool_live[key.pool] += 1
    if work.tokens is not None:
        work.tokens -= 1
    refs = tuple(p.ref for p in bin_.pods)
    body = trigger_pod(
        key,
        bin_.size,
        snapshot.nodepools[key.pool],
        refs,
        config.trigger,
        # A retry is a new trigger: its name (and marker) differs from the
        # failed one's even within the same second.
        name=trigger_name(key, refs, work.stamp + _retry_suffix(bin_.pods)),
        cpu_millis=bin_.cpu_millis,
        memory_bytes=bin_.memory_bytes,
    )
    return CreateTrigger(key, bin_.size, body, refs)


def _settle(
    snapshot: Snapshot,
    config: PlanConfig,
    work: _Pass,
    trigger: TriggerInfo,
    bins: Sequence[Bin],
) -> None:
    """Allocate, for one live trigger serving ``bins``: a failed one is removed
    (`_fail`); one no bin needs is deleted, unless its NodeClaim is still on its way
    (then it is kept as supply for demand that may come, and deleted once that
    NodeClaim is Ready or gone), and when nothing was bought for it its group cools
    down; the pods of any other are told how far its NodeClaim has come
    (`_tell_progress`)."""
    claim = work.claim_of[trigger.ref]
    pods = [p for b in bins for p in b.pods]
    if trigger.ref in work.failures:
        _fail(snapshot, config, work, trigger, pods)
        return
    if not bins:
        if claim is not None and not claim.ready:
            return  # capacity on its way: kept as supply, deleted once Ready
        # Nothing was bought for it yet: the group cools down (pods that come and
        # go would otherwise make a trigger, and maybe a NodeClaim, each time). A
        # Ready NodeClaim's free GPUs take new pods of the group instead. Not when
        # this pass makes a trigger of the group: its pods did not go, they were
        # packed anew as more came (a 1-GPU trigger left empty beside new 2-GPU
        # ones), and a cooldown would hold back the rest of a burst for its length.
        repacked = trigger.group in work.created_groups
        orphan = trigger.group if claim is None and not repacked else None
        unneeded = NotNeeded(claim.name if claim is not None else None)
        work.deletes.append(DeleteTrigger(trigger.ref, unneeded, orphan=orphan))
        return
    _tell_progress(work, trigger, claim, bins, pods)


def _fail(
    snapshot: Snapshot,
    config: PlanConfig,
    work: _Pass,
    trigger: TriggerInfo,
    pods: Sequence[PendingPod],
) -> None:
    """Failures, applied: the failed ``trigger`` is deleted (with the NodeClaim bought
    for it that never initialized, if any), and each pod it served gets its next retry
    state (`controller.failures.next_retry`), held by the executor until written: told
    ``Waiting`` out its backoff, or ``Failed`` after the last attempt."""
    failure = work.failures[trigger.ref]
    # The retry annotation keeps the failure's text: a restarted controller reads it back.
    reason = failure_text(failure.why)
    retries = []
    for pod in pods:
        held_retry = snapshot.retries.get((pod.ref.namespace, pod.ref.name))
        retry = next_retry(
            effective_retry(pod.retry, held_retry),
            reason,
            snapshot.now,
            config.retry_base_seconds,
            config.retry_max_seconds,
        )
        retries.append((pod.ref, retry))
        why = retrying(pod.ref, retry, config.retry_attempts)
        status, event = statuses.told(why, work.stamp)
        work.statuses.append(SetStatus(pod.ref, status, event, retry=retry, why=why))
    failed = TriggerFailed(failure.why)
    work.deletes.append(DeleteTrigger(trigger.ref, failed, retries=tuple(retries)))
    if failure.delete_claim:
        work.claim_deletes[failure.delete_claim] = DeleteNodeClaim(
            failure.delete_claim, failure.why
        )


def _tell_progress(
    work: _Pass,
    trigger: TriggerInfo,
    claim: NodeClaimInfo | None,
    bins: Sequence[Bin],
    pods: Sequence[PendingPod],
) -> None:
    """Statuses for the pods ``trigger`` stands for, by its NodeClaim's progress
    (``Triggered``, ``Provisioning``, ``NodeReady``); a Ready NodeClaim also removes the
    trigger (its pods are covered by the executor)."""
    name = str(trigger.ref)
    if claim is not None and not claim.ready:
        known = (Phase.PROVISIONING, name, claim.name, None)
        if all(
            p.status is not None
            and (p.status.phase, p.status.trigger, p.status.node_claim, p.status.node) == known
            for p in pods
        ):
            return  # every pod already knows (the steady case): no message to build
    why: StatusReason
    if claim is None:
        why = Triggered(name, trigger.gpus, trigger.pool)
    elif claim.ready:
        why = NodeReady.of(claim, name)
        ready = ClaimReady(claim.name)
        work.deletes.append(
            DeleteTrigger(trigger.ref, ready, tuple(p.ref for p in pods), claim.name)
        )
    else:
        used = sum((b.used for b in bins), Decimal(0))
        why = Provisioning.of(claim, trigger, used, len(pods), sum(b.size for b in bins))
    for pod in pods:
        work.tell(pod, why)


def _node_labels(snapshot: Snapshot, live: Sequence[TriggerInfo]) -> tuple[LabelNode, ...]:
    """The node labels to set (`controller.capacity.nodes_to_label`), when this snapshot
    decides them (``snapshot.decide_labels``)."""
    if not snapshot.decide_labels:
        return ()
    return tuple(
        LabelNode(node, value)
        for node, value in nodes_to_label(
            snapshot.nodes, snapshot.nodepools, snapshot.nodeclaims, live
        )
    )


def is_native(pod: PendingPod) -> bool:
    """Karpenter can provision for ``pod`` itself: nothing it cannot simulate, and the
    GPU demand is whole ``nvidia.com/gpu`` requests (recorded by the webhook as source
    ``resources:nvidia.com/gpu``)."""
    if pod.unsimulatable:
        return False
    return Source("resources", NVIDIA_GPU) in pod.intent.source and (
        pod.intent.gpus == pod.intent.gpus.to_integral_value()
    )


def native_reserved(
    pods: Iterable[PendingPod | InvalidPod],
    nominations: Mapping[tuple[str, str], Nomination],
) -> dict[str, Decimal]:
    """GPUs (`controller.packing.gpu_need`) of the pending native pods (`is_native`)
    that Karpenter nominated onto a NodeClaim (its ``Nominated`` Event, the latest per
    pod, for the same pod uid), summed by NodeClaim name. Karpenter packs pending native
    pods onto the NodeClaims it launches for triggers (it no longer counts a trigger
    marked `controller.triggers.LINKED_REASON` there) and buys nothing more for them:
    those GPUs are theirs, not room for pods of a sharing layer (seen on the real
    kube-scheduler and Karpenter, `../shared/realk8s`). Pure."""
    reserved: dict[str, Decimal] = defaultdict(Decimal)
    for pod in pods:
        if not isinstance(pod, PendingPod) or not is_native(pod):
            continue
        nomination = nominations.get((pod.ref.namespace, pod.ref.name))
        if nomination is None or (nomination.uid and pod.ref.uid and nomination.uid != pod.ref.uid):
            continue
        reserved[nomination.node_claim] += gpu_need(pod.intent)
    return dict(reserved)


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


def _retry_suffix(pods: Sequence[PendingPod]) -> str:
    """``/retry<n>`` for a trigger of pods that failed before (n: most attempts)."""
    attempts = max((p.retry.attempts for p in pods if p.retry is not None), default=0)
    return f"/retry{attempts}" if attempts else ""


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
    return status is not None and status.phase == Phase.NODE_READY and bool(status.node_claim)
