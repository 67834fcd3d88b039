"""The controller's memory: what it must remember of its own decisions and of pods it
served, beyond what the informer cache (`controller.cache.InformerCache`) shows.

- NodeReady covers set when a trigger was deleted, retry states held until their
  annotation is written, and cooldowns of groups whose trigger was removed: recorded
  from a plan's `controller.decisions.Bookkeeping` (`remember`).
- Pods we were scaling up for that left the pending set (bound or deleted: only a read
  says which), those found bound and owed a final ``Scheduled`` status, the GPUs they
  took on their node, and the schedulers' last bind: told by the cache (`seen`, `gone`,
  the `controller.cache.Observer` calls) and by the reads (`resolve_left`).
- NodeClaims bought for our triggers and deleted before they registered (`lost_claims`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from controller import karpenter
from controller.cache import Key, Kind, Obj
from controller.decisions import Bookkeeping
from controller.model import GroupKey, RetryState, ScaleUpStatus, ScheduledPod
from controller.nodes import parse_nodeclaim
from controller.packing import gpu_use
from intent.contract import (
    ANNOTATION_GPUS,
    ANNOTATION_SCALE_UP,
    Intent,
    IntentError,
    Phase,
)

log = logging.getLogger(__name__)

#: Scale-up phases after which a pod's binding deserves a final ``Scheduled`` status.
TRACKED_PHASES: frozenset[Phase] = frozenset(
    {Phase.TRIGGERED, Phase.PROVISIONING, Phase.NODE_READY, Phase.WAITING, Phase.FAILED}
)
#: Most bound pods remembered while their final status is pending (memory bound).
MAX_SCHEDULED = 10_000
#: How long a NodeClaim lost before it registered is remembered for its triggers
#: (`Memory.lost_claims`), seconds: a pass reads it long before.
LOST_CLAIM_SECONDS = 900.0


class Memory:
    """What the controller remembers between passes (see the module).

    Args:
        monotonic: clock for how long lost NodeClaims are remembered (seconds).
    """

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        #: Pods we were scaling up for that left the pending set (bound or deleted: the
        #: watch cannot say which), waiting for the reconciler to read them.
        self._left: dict[Key, Obj] = {}
        #: Those of them found bound, owed a final ``Scheduled`` status.
        self._bound: dict[Key, Obj] = {}
        #: NodeReady covers set when a trigger was deleted: pod -> (NodeClaim, when).
        self._covers: dict[Key, tuple[str, datetime]] = {}
        #: GPUs (`controller.packing.gpu_use`) of the pods we were scaling up for, by the node
        #: they were found bound to: what of a new node's GPUs they took.
        self._used: dict[str, Decimal] = {}
        #: `left` pods told ``NodeReady`` on a NodeClaim, not read back yet: pod ->
        #: (NodeClaim, GPUs, `controller.packing.gpu_use`). See `leaving`.
        self._leaving: dict[Key, tuple[str, Decimal]] = {}
        #: `left` pods remembered only for the GPUs they take (`_note_left`): told
        #: ``Native``, or bound by their scheduler before they were ever Unschedulable.
        self._counted_only: set[Key] = set()
        #: The latest ``PodScheduled=True`` time of such a pod (`last_bind`).
        self._last_bind: datetime | None = None
        #: Moves whenever covers, held retries or cooldowns change (`version`).
        self._version = 0
        #: Retry states of pods whose trigger failed, held until their annotation shows
        #: them: pod -> (state, when set). See `controller.failures`.
        self._retries: dict[Key, tuple[RetryState, datetime]] = {}
        #: When a trigger of each group was last removed as unneeded (the cooldown).
        self._removals: dict[GroupKey, datetime] = {}
        #: NodeClaims bought for our triggers and deleted before they registered: trigger
        #: name -> (NodeClaim name, monotonic time seen gone). See `lost_claims`.
        self._lost: dict[str, tuple[str, float]] = {}

    def remember(self, kept: Bookkeeping) -> None:
        """Record what an applied plan asks to be remembered (`Bookkeeping`): covers,
        retry states and cooldowns set at ``kept.at``, then forget those older than its
        cut-offs."""
        if kept.at is not None:
            self.cover(kept.covers, kept.at)
            for key, retry in kept.retries:
                self.hold_retry(key, retry, kept.at)
            for group in kept.removals:
                self.removed(group, kept.at)
        if kept.covers_before is not None:
            self.expire_covers(kept.covers_before)
        if kept.retries_before is not None:
            self.expire_retries(kept.retries_before)
        if kept.removals_before is not None:
            self.expire_removals(kept.removals_before)

    # The cache's `controller.cache.Observer` calls.

    def seen(self, kind: Kind, key: Key) -> None:
        """A pending pod came back (or changed): it is not among those that left."""
        if kind == Kind.PENDING_PODS:
            self._left.pop(key, None)
            self._leaving.pop(key, None)
            self._counted_only.discard(key)  # a pod of that name again (StatefulSet)

    def gone(self, kind: Kind, key: Key, last: Obj, held: Obj | None) -> None:
        """A pending pod left the pending set (`_note_left`, from the watch's last word),
        or a NodeClaim is gone (`_note_lost`, from the last state the cache had)."""
        if kind == Kind.PENDING_PODS:
            self._note_left(key, last)
        elif kind == Kind.NODECLAIMS:
            self._note_lost(held or last)

    def version(self) -> int:
        """A counter that moves whenever the covers, held retries or cooldowns change."""
        return self._version

    def scheduled(self) -> list[ScheduledPod]:
        """Bound pods owed a final status, by key."""
        return [ScheduledPod.parse(obj) for _, obj in sorted(self._bound.items())]

    def _note_left(self, key: Key, obj: Obj) -> None:
        """A pod left the ``spec.nodeName=`` selection. Its DELETED event carries the
        *previous* object, without the nodeName it may just have got (kube-apiserver's
        cache_watcher.go convertToWatchEvent, REFERENCE.md section 6), so whether it was
        bound or deleted is learned by reading it (`left`, `resolve_left`). Only pods we
        were scaling up for are remembered, at most `MAX_SCHEDULED`: those told a tracked
        phase, and Unschedulable GPU pods not told anything yet (their status may still
        be on its way; where they went counts in `Memory.used`).

        Every other GPU pod (it has an intent) is remembered only for the GPUs it takes
        on its node, which are no longer room for the pods told ``NodeReady`` there:
        pods told ``Native`` (kube-scheduler binds a native GPU pod on whichever node has
        free ``nvidia.com/gpu`` first, often the new node of a non-binding trigger, seen
        on the real kube-scheduler and Karpenter, `../shared/realk8s`), and pods their
        scheduler bound before they were ever Unschedulable. A sharing scheduler takes a
        new pod at once, while the pods it refused earlier wait in its unschedulable
        queue for a cluster event (kube-scheduler's ``SchedulingQueue``,
        pkg/scheduler/internal/queue/scheduling_queue.go): in a 1,000-pod demo, 34 HAMi
        pods created after a new node turned Ready took its cards, and 30 pods told
        ``NodeReady`` there waited out their cover. Costs one read per GPU pod that
        binds."""
        if len(self._left) + len(self._bound) >= MAX_SCHEDULED:
            return
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
        if status is None:
            if ANNOTATION_GPUS in annotations:
                self._left[key] = obj
                if not karpenter.is_provisionable(obj):
                    self._counted_only.add(key)
        elif status.phase in TRACKED_PHASES:
            self._left[key] = obj
            self._note_leaving(key, annotations, status)
        elif status.phase is Phase.NATIVE:
            self._left[key] = obj
            self._counted_only.add(key)

    def _note_leaving(
        self, key: Key, annotations: Mapping[str, str], status: ScaleUpStatus
    ) -> None:
        """Remember the GPUs of a pod told ``NodeReady`` that left the pending set, on
        the NodeClaim of its cover (the executor's record, else its status), until it is
        read back (`leaving`)."""
        cover = self._covers.get(key)
        claim = cover[0] if cover is not None else None
        if claim is None and status.phase is Phase.NODE_READY:
            claim = status.node_claim
        if not claim:
            return
        try:
            intent = Intent.from_annotations(annotations)
        except IntentError:
            return
        if intent is not None:
            self._leaving[key] = (claim, gpu_use(intent))

    def leaving(self) -> dict[str, Decimal]:
        """GPUs of the pods told ``NodeReady`` that left the pending set and are not read
        back yet, by the NodeClaim of their cover: NodeClaim name -> GPUs
        (`controller.packing.gpu_use`). Most of them were bound there, and until the
        read says where (`resolve_left`, then `used`), they count against its room
        (`controller.capacity.held_covers`). Without this, in a burst the reads lag the
        bindings and the room looks larger by the GPUs of every pod bound and not yet
        read. In one traced `bench.cost` run every L4 trigger was deleted while 40 new
        L4 GPUs had about 58 GPUs of KAI pods to hold, and the memory-only KAI pods left
        waiting took an A100 node, so Karpenter bought a second ``p4d.24xlarge``; with
        this, 9 of 10 traced runs bought one."""
        out: dict[str, Decimal] = {}
        for claim, gpus in self._leaving.values():
            out[claim] = out.get(claim, Decimal(0)) + gpus
        return out

    def _note_lost(self, obj: Obj) -> None:
        """A NodeClaim is gone (its DELETED event, or missing from a relist; ``obj`` is
        the last state the cache had). If Karpenter bought it for our triggers (it
        carries their marker) and it never registered, their scale-up failed: Karpenter
        deletes a NodeClaim on insufficient capacity and at its launch (5 min) or
        registration (15 min) timeout (pkg/controllers/nodeclaim/lifecycle/launch.go,
        liveness.go), and it does not consolidate a node that never registered. The
        failure is remembered by trigger name for `LOST_CLAIM_SECONDS`: the link the
        controller records on a trigger (``gpu-intent.io/nodeclaim``) may not have been
        written yet (an insufficient-capacity error comes within a second), and without
        this the trigger would only look unlinked while Karpenter buys for it again."""
        claim = parse_nodeclaim(obj)
        if not claim.marked or claim.ready or claim.conditions.get("Registered") == "True":
            return
        now = self._monotonic()
        for name in [n for n, (_, seen) in self._lost.items() if now - seen > LOST_CLAIM_SECONDS]:
            del self._lost[name]
        if len(self._lost) >= MAX_SCHEDULED:
            return
        for trigger in claim.marked:
            self._lost[trigger] = (claim.name, now)

    def lost_claims(self) -> dict[str, str]:
        """NodeClaims bought for our triggers and deleted before they registered, seen in
        the last `LOST_CLAIM_SECONDS`: trigger name -> NodeClaim name (a copy). It moves
        with the cache's ``version(Kind.NODECLAIMS)``."""
        now = self._monotonic()
        return {t: c for t, (c, seen) in self._lost.items() if now - seen <= LOST_CLAIM_SECONDS}

    def scaled_up_for(self, key: Key) -> bool:
        """Whether `left` pod ``key`` was one we were scaling up for (not one remembered
        only for the GPUs it takes, `_note_left`)."""
        return key not in self._counted_only

    def left(self) -> list[Key]:
        """Pods we were scaling up for that left the pending set, not yet read back."""
        return sorted(self._left)

    def resolve_left(self, key: Key, current: Obj | None) -> None:
        """What reading a `left` pod returned: the pod as it is now, or None when it is
        gone. A bound pod's GPUs count as used on its node (only that for one remembered
        only for them, `_note_left`: it is owed no status, and its binding is not the
        progress of pods we scaled up for), and one told a tracked phase is owed a final
        status, as is one not told anything yet (`_note_left` kept it because it was
        Unschedulable: a status decided for it may have been dropped when it bound
        first, `controller.reports`); any other is forgotten."""
        self._left.pop(key, None)
        self._leaving.pop(key, None)
        only_gpus = key in self._counted_only
        self._counted_only.discard(key)
        node = (current or {}).get("spec", {}).get("nodeName")
        if current is None or not node:
            return
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
        if not only_gpus and (
            (status is None and ANNOTATION_GPUS in annotations)
            or (status is not None and status.phase in TRACKED_PHASES)
        ):
            self._bound[key] = current
        bound_at = None if only_gpus else ScheduledPod.parse(current).bound_at
        if bound_at is not None and (self._last_bind is None or bound_at > self._last_bind):
            self._last_bind = bound_at
        try:
            intent = Intent.from_annotations(annotations)
        except IntentError:
            intent = None
        if intent is not None:
            self._used[node] = self._used.get(node, Decimal(0)) + gpu_use(intent)

    def owes_final(self, key: Key) -> bool:
        """Whether bound pod ``key`` is still owed its final status (`scheduled`)."""
        return key in self._bound

    def owe_final(self, key: Key, current: Obj) -> None:
        """A status write for bound pod ``key`` landed after its binding (``current``:
        the pod as the write's answer showed it): it is owed its final status again,
        whatever was written before (`controller.reports`). Its GPUs are not counted
        again (`resolve_left` did, or will, when it read the pod back)."""
        if key in self._bound or len(self._left) + len(self._bound) < MAX_SCHEDULED:
            self._bound[key] = current
            self._version += 1

    def last_bind(self) -> datetime | None:
        """When a pod we were scaling up for was last bound (its ``PodScheduled=True``
        time, as `resolve_left` read it), None before any: the schedulers' progress,
        which keeps NodeReady covers (`controller.capacity.cover_holds`). kube-apiserver
        sets that condition, with its ``lastTransitionTime``, in the same write as
        ``spec.nodeName`` when a scheduler posts a Binding (``BindingREST``,
        pkg/registry/core/pod/storage/storage.go); a pod without it moves nothing, and
        covers then end after ``cover_seconds`` as before."""
        return self._last_bind

    def used(self, claims: int, joined: Callable[[], Iterable[str]]) -> dict[str, Decimal]:
        """GPUs of the pods we served found bound, by node name (see
        `controller.capacity.held_covers`); nodes no NodeClaim names any more are forgotten
        once they add up (more than twice the ``claims`` the cache holds, plus 100:
        ``joined`` then names the nodes they have)."""
        if len(self._used) > 2 * claims + 100:
            keep = set(joined())
            self._used = {node: gpus for node, gpus in self._used.items() if node in keep}
        return dict(self._used)

    def cover(self, pods: Iterable[tuple[Key, str]], since: datetime) -> None:
        """Record that these pods were left to their scheduler on their NodeClaim at
        ``since`` (the planner's NodeReady cover), before their status is written:
        ``pods`` pairs each pod with the NodeClaim's name."""
        for key, node_claim in pods:
            self._covers[key] = (node_claim, since)
            self._version += 1

    def forget_scheduled(self, key: Key) -> None:
        """The bound pod's final status is written (or it is gone)."""
        self._bound.pop(key, None)
        self._left.pop(key, None)
        self._leaving.pop(key, None)

    def expire_covers(self, before: datetime) -> None:
        """Forget covers set before ``before`` (they no longer hold anyway)."""
        for key in [k for k, (_, since) in self._covers.items() if since < before]:
            del self._covers[key]
            self._version += 1

    def covers(self) -> dict[Key, tuple[str, datetime]]:
        """The NodeReady covers (a copy): pod -> (NodeClaim, when)."""
        return dict(self._covers)

    def hold_retry(self, key: Key, retry: RetryState, since: datetime) -> None:
        """Hold a pod's new retry state (its trigger failed) until `expire_retries`."""
        self._retries[key] = (retry, since)
        self._version += 1

    def expire_retries(self, before: datetime) -> None:
        """Forget retry states held since before ``before`` (their annotation is written
        by then, or the write failed and the pod's count restarts from its annotation)."""
        for key in [k for k, (_, since) in self._retries.items() if since < before]:
            del self._retries[key]
            self._version += 1

    def release_retry(self, key: Key, retry: RetryState) -> None:
        """The pod's annotation now shows ``retry``: stop holding it (so a user who
        removes the annotation to try again is heard at once)."""
        held = self._retries.get(key)
        if held is not None and held[0] == retry:
            del self._retries[key]
            self._version += 1

    def retries(self) -> dict[Key, RetryState]:
        """The retry states held (a copy): pod -> state."""
        return {key: retry for key, (retry, _) in self._retries.items()}

    def removed(self, group: GroupKey, when: datetime) -> None:
        """A trigger of ``group`` was removed as unneeded at ``when`` (cooldown starts)."""
        self._removals[group] = when
        self._version += 1

    def expire_removals(self, before: datetime) -> None:
        """Forget removals before ``before`` (their cooldown is over)."""
        for key in [k for k, when in self._removals.items() if when < before]:
            del self._removals[key]
            self._version += 1

    def removals(self) -> dict[GroupKey, datetime]:
        """When a trigger of each group was last removed as unneeded (a copy)."""
        return dict(self._removals)
