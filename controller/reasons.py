"""Why the planner decided what it did, as values: the typed reasons `controller.plan.plan`
and its pure helpers return, and the Plan carries (`controller.decisions.SetStatus.why`,
`controller.decisions.DeleteTrigger.why`, `controller.decisions.DeleteNodeClaim.why`).
No words here: `controller.messages` renders each reason into the text pods, Events and
logs show, and `controller.statuses` into the status it belongs to. Values only.

The families, each a union of frozen dataclasses:

- `NoPool`: why no NodePool serves a pod (`controller.pools.resolve_pool`,
  `controller.placement.unplaceable`), or none of its nodes can run it (`NoNodeRuns`,
  with the `Constraint` of the pod's node selector or affinity that
  `controller.pools.unmet_constraint` found unmet). The pod is told ``Unresolvable``.
- `Hold`: why a new trigger waits (`controller.plan`'s ``_held_back``: the cooldown, a
  cap, the creation rate). Its pods are told ``Waiting``.
- `FailureReason`: why a live trigger failed (`controller.failures.trigger_failure`).
- `DeleteReason`: why a trigger is deleted.
- `StatusReason`: what a pod is told, one type per kind of status (`Invalid`, `Native`,
  `Unresolvable`, `HeldBack`, `BackingOff`, `GaveUp`, `FreeGpus`, `Triggered`,
  `Provisioning`, `NodeReady`, `Scheduled`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from controller.model import PodRef, Requirement, RetryState, TriggerInfo
from controller.nodes import NodeClaimInfo
from intent.keys import INSTANCE_TYPE_LABEL

# --- why no NodePool serves a pod ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaintRefused:
    """The pod tolerates none of NodePool ``pool``'s ``NoSchedule``/``NoExecute`` taint
    ``key=value:effect`` (``value`` ``""``: the taint has none;
    `controller.model.untolerated_taint`)."""

    pool: str
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class DefaultPoolMissing:
    """The intent names no GPU model and the default NodePool ``pool``
    (``--default-nodepool``) does not exist or is not Ready."""

    pool: str


@dataclass(frozen=True, slots=True)
class NoDefaultPool:
    """The intent names no GPU model and no default NodePool is configured."""


@dataclass(frozen=True, slots=True)
class NoPoolOffers:
    """No Ready NodePool offers GPU model ``model`` (by the provider's model label
    ``label``, `intent.providers.ProviderProfile.model_label`)."""

    model: str
    label: str


@dataclass(frozen=True, slots=True)
class OfferingPoolsRefuse:
    """NodePools offer GPU model ``model``, but the pod tolerates the taints of none:
    ``refused`` names the first one's."""

    model: str
    refused: TaintRefused


@dataclass(frozen=True, slots=True)
class NoPoolPlaces:
    """A NodePool would serve the pod but for where its GPU-sharing ``layer`` runs
    (`controller.placement.LAYERS`): no NodePool makes nodes with ``missing``, the first
    requirement of the layer's placement the pool cannot meet. ``layer`` ``""`` and
    ``missing`` None: no layer's requirement is named."""

    layer: str = ""
    missing: Requirement | None = None


@dataclass(frozen=True, slots=True)
class SelectorNotAdmitted:
    """The pod's node selector ``key=value``: NodePool ``pool`` defines ``key`` and does
    not admit ``value``."""

    key: str
    value: str
    pool: str


@dataclass(frozen=True, slots=True)
class SelectorLabelUnknown:
    """The pod's node selector ``key=value``: no node of NodePool ``pool`` will carry
    ``key`` (the pool does not define it, nor is it well known or put on by GPU agents)."""

    key: str
    value: str
    pool: str


@dataclass(frozen=True, slots=True)
class AffinityUnmet:
    """``requirement``, of the first of the pod's required node-affinity terms: no node
    of NodePool ``pool`` can satisfy it (nor any term)."""

    requirement: Requirement
    pool: str


#: The term of a pod's node selector or required node affinity that no node of its
#: NodePool can satisfy (`controller.pools.unmet_constraint`).
Constraint = SelectorNotAdmitted | SelectorLabelUnknown | AffinityUnmet


@dataclass(frozen=True, slots=True)
class NoNodeRuns:
    """The pod has a NodePool, but no node of it can run the pod: ``unmet``."""

    unmet: Constraint


#: Why no NodePool serves a pod: its status is ``Unresolvable``.
NoPool = (
    TaintRefused
    | DefaultPoolMissing
    | NoDefaultPool
    | NoPoolOffers
    | OfferingPoolsRefuse
    | NoPoolPlaces
    | NoNodeRuns
)

# --- why a new trigger waits ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cooldown:
    """A trigger of the group was removed as unneeded at ``removed``: no new one for
    ``seconds`` (``--cooldown-seconds``)."""

    removed: datetime
    seconds: float


@dataclass(frozen=True, slots=True)
class TooManyGpus:
    """A bin needs ``gpus`` GPUs in one trigger, more than ``cap``
    (``--max-gpus-per-trigger``)."""

    gpus: int
    cap: int


@dataclass(frozen=True, slots=True)
class TriggerLimit:
    """``cap`` live triggers (``--max-triggers``) exist already."""

    cap: int


@dataclass(frozen=True, slots=True)
class PoolTriggerLimit:
    """``cap`` live triggers of NodePool ``pool`` (``--max-triggers-per-pool``) exist
    already."""

    pool: str
    cap: int


@dataclass(frozen=True, slots=True)
class RateLimited:
    """The trigger creation rate limit (``--trigger-creates-per-second``) allows no more
    creates this pass."""


@dataclass(frozen=True, slots=True)
class Contested:
    """Capacity on its way for KAI's pods could take the group's nodes first
    (`controller.contests`); the wait lasts at most until ``until``. It names no
    NodeClaim: the status stays the same while the wait lasts, and its ``since`` says
    when the wait began."""

    until: datetime


@dataclass(frozen=True, slots=True)
class ComingUp:
    """NodeClaim ``claim``, which Karpenter launched for other pods and which is not
    Ready yet, has GPUs none of the pending pods Karpenter nominated onto it will use
    (the pods it was bought for went to other nodes): the group's pods that fit there
    wait for it rather than buy (`controller.plan._coming_up`), at most until
    ``until``."""

    claim: str
    until: datetime


@dataclass(frozen=True, slots=True)
class Settling:
    """The NodeClaims ``claims`` (Ready within a cover, hosting the group's pods), with
    ``coming`` (on their way, bought for the group's triggers), have in all the GPUs
    the group's pods left without room need: their scheduler is still placing pods, on
    other cards than planned (`controller.plan._settling`). The wait lasts at most
    until ``until``, when the first of ``claims`` stops being fresh."""

    claims: tuple[str, ...]
    until: datetime
    coming: tuple[str, ...] = ()


#: Why a new trigger waits: its pods are told ``Waiting``.
Hold = (
    Cooldown
    | TooManyGpus
    | TriggerLimit
    | PoolTriggerLimit
    | RateLimited
    | Contested
    | ComingUp
    | Settling
)

# --- why a trigger failed ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolAtLimits:
    """Karpenter refused the trigger: NodePool ``pool`` is at its ``spec.limits``
    (``said``: its ``FailedScheduling`` message)."""

    pool: str
    said: str


@dataclass(frozen=True, slots=True)
class ClaimDeleted:
    """NodeClaim ``node_claim``, bought for the trigger, was deleted before it was Ready."""

    node_claim: str


@dataclass(frozen=True, slots=True)
class ClaimNotReady:
    """NodeClaim ``node_claim`` was not Ready ``timeout_seconds`` after its creation
    (``--init-timeout-seconds``); ``waiting``: the conditions of ``Launched``,
    ``Registered``, ``Initialized`` not True yet. ``kept``: a pod we served runs on its
    node, so it is kept (else it is deleted with the trigger)."""

    node_claim: str
    timeout_seconds: float
    waiting: tuple[str, ...]
    kept: bool


#: Why a live trigger failed (`controller.failures.Failure`).
FailureReason = PoolAtLimits | ClaimDeleted | ClaimNotReady

# --- why a trigger is deleted --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NotNeeded:
    """No pending pod needs the trigger any more; ``node_claim``: its NodeClaim, Ready
    (None: none is known)."""

    node_claim: str | None = None


@dataclass(frozen=True, slots=True)
class TriggerFailed:
    """The trigger failed: ``failure``."""

    failure: FailureReason


@dataclass(frozen=True, slots=True)
class ClaimReady:
    """The trigger's NodeClaim ``node_claim`` is Ready: its pods' schedulers take over."""

    node_claim: str


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """No NodeClaim was made for the trigger yet, and capacity on its way for KAI's pods
    could take its node first (`controller.contests.contested`): it is withdrawn, and
    its pods wait as a new trigger would (``hold``)."""

    hold: Contested


#: Why a trigger is deleted (`controller.decisions.DeleteTrigger`).
DeleteReason = NotNeeded | TriggerFailed | ClaimReady | Withdrawn

# --- what a pod is told --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Invalid:
    """``InvalidIntent``: the pod's gpu-intent annotations do not parse (``error``)."""

    error: str


@dataclass(frozen=True, slots=True)
class Native:
    """``Native``: Karpenter provisions for the pod itself (whole ``nvidia.com/gpu``)."""


@dataclass(frozen=True, slots=True)
class Unresolvable:
    """``Unresolvable``: no NodePool serves the pod, or none of its nodes can run it."""

    why: NoPool


@dataclass(frozen=True, slots=True)
class HeldBack:
    """``Waiting``: the pod's new trigger is held back by a cap or the cooldown."""

    why: Hold


@dataclass(frozen=True, slots=True)
class BackingOff:
    """``Waiting``: the pod's scale-ups failed ``retry.attempts`` times of ``attempts``;
    it waits out its backoff (``retry.retry_at``)."""

    retry: RetryState
    attempts: int


@dataclass(frozen=True, slots=True)
class GaveUp:
    """``Failed``: pod ``ref`` used up its scale-up attempts (``retry``)."""

    ref: PodRef
    retry: RetryState


def retrying(ref: PodRef, retry: RetryState, attempts: int) -> BackingOff | GaveUp:
    """What pod ``ref``, whose scale-ups failed (``retry``), is told: `GaveUp` once its
    ``attempts`` (``--retry-attempts``) are used up, else `BackingOff`."""
    return GaveUp(ref, retry) if retry.attempts >= attempts else BackingOff(retry, attempts)


@dataclass(frozen=True, slots=True)
class FreeGpus:
    """``NodeReady``: the pod fits the free GPUs of Ready NodeClaim ``node_claim`` (node
    ``node``, None: not known), so it is left to its scheduler."""

    node_claim: str
    node: str | None

    @classmethod
    def of(cls, host: NodeClaimInfo) -> FreeGpus:
        """The reason for a pod placed on ``host``'s free GPUs."""
        return cls(host.name, host.node_name)


@dataclass(frozen=True, slots=True)
class Triggered:
    """``Triggered``: trigger ``trigger`` (``namespace/name``) requests ``gpus`` GPUs on
    NodePool ``pool``; no NodeClaim is known for it yet."""

    trigger: str
    gpus: int
    pool: str


@dataclass(frozen=True, slots=True)
class Provisioning:
    """``Provisioning``: NodeClaim ``node_claim`` (instance type ``instance_type``, None
    or ``""``: not known yet) is on its way for trigger ``trigger`` of ``gpus`` GPUs, of
    which ``pods`` pods use ``used``."""

    node_claim: str
    instance_type: str | None
    trigger: str
    gpus: int
    used: Decimal
    pods: int

    @classmethod
    def of(
        cls,
        claim: NodeClaimInfo,
        trigger: TriggerInfo,
        used: Decimal,
        pods: int,
        gpus: int | None = None,
    ) -> Provisioning:
        """The reason for the ``pods`` pods (using ``used`` GPUs) of ``trigger``, linked
        to ``claim``; ``gpus``: the GPUs their bins hold when more than the trigger's
        (spare GPUs of other triggers linked to ``claim`` pooled,
        `controller.packing.TriggerCapacity`)."""
        itype = claim.labels.get(INSTANCE_TYPE_LABEL)
        held = max(trigger.gpus, gpus or 0)
        return cls(claim.name, itype, str(trigger.ref), held, used, pods)


@dataclass(frozen=True, slots=True)
class NodeReady:
    """``NodeReady``: NodeClaim ``node_claim`` (node ``node``, None: not known), linked
    to trigger ``trigger``, is Ready and the trigger is removed. ``dra_devices``: the GPU
    devices its node publishes in ResourceSlices when it is Ready by them (DRA), else
    None. ``advertised``: what a sharing layer's device plugin advertises on its node
    when it is Ready by that (`NodeClaimInfo.plugin_ready`: Volcano vGPU, gpushare, MIG),
    else empty."""

    node_claim: str
    node: str | None
    trigger: str
    dra_devices: int | None = None
    advertised: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, claim: NodeClaimInfo, trigger: str) -> NodeReady:
        """The reason for the pods of ``trigger``, linked to Ready ``claim``."""
        devices = claim.devices if claim.dra_ready else None
        plugin = claim.advertised if claim.plugin_ready else ()
        return cls(claim.name, claim.node_name, trigger, devices, plugin)


@dataclass(frozen=True, slots=True)
class Scheduled:
    """``Scheduled``: the pod got node ``node``, of NodeClaim ``node_claim`` (None: none
    is known for it). ``dra_devices`` and ``advertised`` as for `NodeReady`."""

    node: str
    node_claim: str | None
    dra_devices: int | None = None
    advertised: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, node: str, claim_name: str | None, claim: NodeClaimInfo | None) -> Scheduled:
        """The reason for a pod bound to ``node`` of NodeClaim ``claim_name`` (``claim``:
        that NodeClaim, when cached)."""
        devices = claim.devices if claim is not None and claim.dra_ready else None
        plugin = claim.advertised if claim is not None and claim.plugin_ready else ()
        return cls(node, claim_name, devices, plugin)


#: What a pod is told (`controller.statuses.told` makes its status and Event).
StatusReason = (
    Invalid
    | Native
    | Unresolvable
    | HeldBack
    | BackingOff
    | GaveUp
    | FreeGpus
    | Triggered
    | Provisioning
    | NodeReady
    | Scheduled
)

#: Every typed reason `controller.messages.render` renders.
Reason = NoPool | Constraint | Hold | FailureReason | DeleteReason | StatusReason
