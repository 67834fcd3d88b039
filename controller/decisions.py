"""What `controller.plan.plan` reads and decides: its settings (`PlanConfig`), the
cluster it looks at (`Snapshot`), and the `Plan` it returns, whose actions the executor
(`controller.executor.Executor`) writes and whose `Bookkeeping` the controller's memory
(`controller.memory.Memory`) records. Values only. The actions carry why they were
decided as typed reasons (`controller.reasons`); their texts come from
`controller.messages`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from controller.messages import delete_text, failure_text
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
from controller.nodes import NodeClaimInfo, NodeInfo, NodePoolInfo, Nomination, Refusal
from controller.placement import Placements
from controller.reasons import DeleteReason, FailureReason, StatusReason
from controller.triggers import TriggerSettings


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
            of pods can buy, set above the bursts a cluster makes (NodePool ``limits``
            stay the budget). Where it binds, the pods left waiting are not idle: their
            schedulers place them on the nodes bought for the others, whose pods then
            need more. ``bench.cost`` (508 pods, 168 to 198 triggers) bought a second
            p4d.24xlarge in the runs where 100 held 20 pods back, and none with 1000.
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
        contest_seconds: how long a new trigger may wait for the capacity on its way
            for KAI's pods that could take its node first (`controller.contests`),
            counted from when its oldest pod became Unschedulable; and how long, from
            its creation, a NodeClaim Karpenter launched for other pods that went
            elsewhere holds back triggers for the pods it can host
            (`controller.plan._coming_up`).
        placement: where each GPU-sharing layer's pods can run
            (`controller.placement.Placements`, the layers' own defaults): a pod's trigger
            asks for such a node, and only NodePools that make one serve it.
        gather_seconds, gather_max_seconds: a group's new pods (no status yet, and that
            Karpenter cannot provision for by itself, `controller.plan._new_pod`) get no
            new trigger while the group's newest pod is younger than ``gather_seconds``,
            for at most ``gather_max_seconds`` from its oldest new pod's creation: a
            burst is packed whole, not pass by pass as its pods arrive (Karpenter's
            own batching, ``BATCH_IDLE_DURATION`` 1 s and ``BATCH_MAX_DURATION`` 10 s,
            pkg/operator/options). Ages are read from ``creationTimestamp``, whole
            seconds, so 2 s waits 1 to 2 s after the newest pod (on the real
            Karpenter, 1 s let passes that ran just after a second began cut a burst
            arriving over one second); 0 turns it off.
    """

    trigger: TriggerSettings = field(default_factory=TriggerSettings)
    default_nodepool: str | None = None
    cover_seconds: float = 60.0
    cover_max_seconds: float = 300.0
    max_triggers: int = 1000
    max_triggers_per_pool: int = 0
    max_gpus_per_trigger: int = 8
    retry_base_seconds: float = 30.0
    retry_max_seconds: float = 600.0
    retry_attempts: int = 3
    init_timeout_seconds: float = 1200.0
    cooldown_seconds: float = 10.0
    contest_seconds: float = 120.0
    placement: Placements = field(default_factory=Placements)
    gather_seconds: float = 2.0
    gather_max_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything `controller.plan.plan` looks at, taken at one instant (``now``,
    timezone-aware)."""

    pods: Sequence[PendingPod | InvalidPod]
    triggers: Sequence[TriggerInfo]
    nodeclaims: Mapping[str, NodeClaimInfo]
    nodepools: Mapping[str, NodePoolInfo]
    now: datetime
    #: Pods that got a node while being scaled up for, owed a final status.
    scheduled: Sequence[ScheduledPod] = ()
    #: Karpenter's latest ``Nominated`` evidence per trigger ``(namespace, name)``.
    nominations: Mapping[tuple[str, str], Nomination] = field(default_factory=dict)
    #: NodeReady covers the controller's memory set when a trigger was deleted (pod
    #: ``(namespace, name)`` -> (NodeClaim, when)): they hold even if the status write
    #: failed.
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
    #: Retry states the controller's memory holds for pods whose annotation may not show
    #: them yet (pod ``(namespace, name)`` -> state).
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
    #: by the name of the trigger whose marker they carried (`Memory.lost_claims`):
    #: failures the trigger's recorded link may not show yet.
    lost: Mapping[str, str] = field(default_factory=dict)
    #: GPUs of pending native pods that Karpenter nominated onto a NodeClaim, by
    #: NodeClaim name (`controller.plan.native_reserved`, over every pending pod, not
    #: only this snapshot's): not room for the pods of a sharing layer.
    reserved: Mapping[str, Decimal] = field(default_factory=dict)
    #: The namespaces that opted in: Karpenter's nominations of pods of any other
    #: namespace (but the triggers') onto a NodeClaim not bought for our triggers keep
    #: its GPUs from our pods (`controller.capacity.foreign_claims`).
    opted_in: frozenset[str] = frozenset()
    #: GPUs of pods told ``NodeReady`` that left the pending set and are not read back
    #: yet, by the NodeClaim of their cover (`Memory.leaving`): not room for others.
    leaving: Mapping[str, Decimal] = field(default_factory=dict)


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
    #: A new retry state to write with it (annotation `controller.model.ANNOTATION_RETRY`).
    retry: RetryState | None = None
    #: Why: the typed reason ``status`` and ``event`` were made from
    #: (`controller.statuses.told`); None for one made otherwise.
    why: StatusReason | None = None


@dataclass(frozen=True, slots=True)
class LinkTrigger:
    """Record on a trigger pod the NodeClaim Karpenter made for it."""

    ref: PodRef
    node_claim: str


@dataclass(frozen=True, slots=True)
class DeleteTrigger:
    """Delete a trigger pod (uid-guarded), because of ``why`` (a typed reason, or its
    text). ``cover``: its pods, told ``NodeReady`` on NodeClaim ``node_claim``; the
    controller's memory covers them before the delete is sent (`Bookkeeping.covers`)."""

    ref: PodRef
    why: DeleteReason | str
    cover: tuple[PodRef, ...] = ()
    node_claim: str | None = None
    #: The trigger failed: its pods' new retry states, held by the controller's memory
    #: until written (see `controller.failures`).
    retries: tuple[tuple[PodRef, RetryState], ...] = ()
    #: No pod needs it any more: the group it served starts its cooldown.
    orphan: GroupKey | None = None

    @property
    def reason(self) -> str:
        """``why`` in words (`controller.messages.delete_text`), as the executor logs it."""
        return self.why if isinstance(self.why, str) else delete_text(self.why)


@dataclass(frozen=True, slots=True)
class DeleteNodeClaim:
    """Delete a NodeClaim bought for a trigger that never initialized, because of ``why``
    (the trigger's failure, or its text)."""

    name: str
    why: FailureReason | str

    @property
    def reason(self) -> str:
        """``why`` in words (`controller.messages.failure_text`), as the executor logs it."""
        return self.why if isinstance(self.why, str) else failure_text(self.why)


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
class Bookkeeping:
    """What the controller's memory (`controller.memory.Memory`) records when a plan is
    applied, decided by `controller.passes.bookkeeping` (the empty value records nothing).

    Attributes:
        at: when the plan was applied (timezone-aware): the time covers, retry states
            and cooldowns are recorded at.
        covers: pods told ``NodeReady`` whose trigger is deleted, each ``(namespace,
            name)`` with the NodeClaim's name: their NodeReady cover.
        retries: new retry states of the pods of failed triggers, held until written.
        removals: groups whose trigger no pod needed any more: their cooldown starts.
        covers_before, retries_before, removals_before: cut-offs: records set before
            them are forgotten (None: none is).
        create_tokens: trigger creations spent from the rate limit
            (`controller.failures.TokenBucket`).
    """

    at: datetime | None = None
    covers: tuple[tuple[tuple[str, str], str], ...] = ()
    retries: tuple[tuple[tuple[str, str], RetryState], ...] = ()
    removals: tuple[GroupKey, ...] = ()
    covers_before: datetime | None = None
    retries_before: datetime | None = None
    removals_before: datetime | None = None
    create_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    """The decisions of one pass, in the order the executor applies them, and what the
    controller's memory records of them (``bookkeeping``: filled in by
    `controller.passes.to_apply`, empty as `controller.plan.plan` returns it)."""

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
    bookkeeping: Bookkeeping = field(default_factory=Bookkeeping)
    #: The earliest time a decision of this plan changes with time alone (a burst's
    #: gathering ends, a hold's deadline passes), None when none does: the controller
    #: plans again then, changes or not. Not an action: a plan with only a wake is empty.
    wake: datetime | None = None

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
    earlier pass are still in flight. Nothing else changes: `controller.plan.plan` tells
    the pods of a create nothing (the executor says ``Triggered`` once the trigger
    exists), so they simply wait for a later pass."""
    return replace(decided, creates=())
