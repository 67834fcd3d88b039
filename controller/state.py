"""The controller's cache of the cluster, fed by informers, read as a `Snapshot`.

Informer handlers only update the cache and poke the reconciler (Karpenter's state
controllers work the same way, pkg/controllers/state). Writes the controller makes are
also recorded as *expectations*: until the watch delivers the object at the
resourceVersion the write returned (resourceVersions are only compared for equality,
as the API conventions require), the written state masks the cached one. Without that,
a pass planned on a cache that has not yet seen the trigger just created would create
it again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol, TypeVar, cast

from controller import karpenter
from controller.decisions import Snapshot
from controller.dra import node_devices, slim_claim, slim_slice
from controller.model import (
    GroupKey,
    InvalidPod,
    PendingPod,
    RetryState,
    ScaleUpStatus,
    ScheduledPod,
    parse_pending_pod,
    parse_trigger,
    slim_pod,
    slim_trigger,
)
from controller.nodes import (
    NodeClaimInfo,
    NodeInfo,
    NodePoolInfo,
    Nomination,
    Refusal,
    parse_node,
    parse_nodeclaim,
    parse_nodepool,
    parse_nomination,
    parse_refusal,
    slim_node,
)
from controller.packing import gpu_use
from intent.contract import (
    ANNOTATION_GPUS,
    ANNOTATION_SCALE_UP,
    INJECT_LABEL,
    INJECT_VALUE,
    Intent,
    IntentError,
    Phase,
    is_trigger,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
Parsed = TypeVar("Parsed")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


class _PodEvent(Protocol):
    @property
    def pod(self) -> tuple[str, str]: ...

    @property
    def seen(self) -> datetime | None: ...


_E = TypeVar("_E", bound=_PodEvent)

#: Cache kinds, one per informer.
PENDING_PODS = "pending-pods"
TRIGGERS = "triggers"
NODECLAIMS = "nodeclaims"
NODEPOOLS = "nodepools"
#: Namespaces that opted in (label `intent.contract.INJECT_LABEL`).
NAMESPACES = "namespaces"
#: Karpenter's ``Nominated`` Events in the trigger namespace.
NOMINATIONS = "nominations"
#: Nodes of Karpenter NodePools (label ``karpenter.sh/nodepool``), slimmed.
NODES = "nodes"
#: Karpenter's ``FailedScheduling`` Events in the trigger namespace (limits reached).
REFUSALS = "refusals"
#: DRA ResourceClaims (all namespaces), slimmed to what intent inference reads.
RESOURCECLAIMS = "resourceclaims"
#: DRA ResourceSlices, slimmed to node, driver and device names.
RESOURCESLICES = "resourceslices"
KINDS = (
    PENDING_PODS,
    TRIGGERS,
    NODECLAIMS,
    NODEPOOLS,
    NAMESPACES,
    NOMINATIONS,
    NODES,
    REFUSALS,
    RESOURCECLAIMS,
    RESOURCESLICES,
)
#: Scale-up phases after which a pod's binding deserves a final ``Scheduled`` status.
TRACKED_PHASES: frozenset[str] = frozenset(
    {Phase.TRIGGERED, Phase.PROVISIONING, Phase.NODE_READY, Phase.WAITING, Phase.FAILED}
)
#: Most bound pods remembered while their final status is pending (memory bound).
MAX_SCHEDULED = 10_000
#: How long a NodeClaim lost before it registered is remembered for its triggers
#: (`ClusterState.lost_claims`), seconds: a pass reads it long before.
LOST_CLAIM_SECONDS = 900.0


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def pool_label_keys(nodepools: Mapping[str, NodePoolInfo]) -> set[str]:
    """Label keys any of ``nodepools`` defines (what a pod's parse depends on)."""
    keys: set[str] = set()
    for pool in nodepools.values():
        keys |= pool.label_keys()
    return keys


def parse_served_pod(obj: Obj, pool_keys: set[str]) -> PendingPod | InvalidPod | None:
    """`parse_pending_pod` of a pod in the pending set; None for our own triggers."""
    if is_trigger((obj.get("metadata") or {}).get("labels")):
        return None
    return parse_pending_pod(obj, pool_keys)


def _rv(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion", ""))


def _same_or_newer(have: str, want: str) -> bool:
    """Whether an object at resourceVersion ``have`` shows the write that returned
    ``want``: the same version, or, when both are decimal integers (kube-apiserver's are
    etcd revisions), a later one. Other versions are opaque: only equality counts (then
    an expectation lasts until its deadline). An empty version never matches."""
    if not have or not want:
        return False
    if have == want:
        return True
    return have.isdigit() and want.isdigit() and int(have) >= int(want)


@dataclass(slots=True)
class _Expectation:
    obj: Obj | None  # None: we deleted it
    rv: str
    deadline: float


class ClusterState:
    """Objects by kind and ``(namespace, name)``, plus pending expectations.

    Args:
        monotonic: clock for expectation deadlines (seconds).
        expectation_seconds: how long a write masks the cache at most; after that the
            watch (or a relist) is trusted again.
    """

    def __init__(self, monotonic: Callable[[], float], expectation_seconds: float = 30.0) -> None:
        self._objects: dict[str, dict[Key, Obj]] = {kind: {} for kind in KINDS}
        self._expected: dict[str, dict[Key, _Expectation]] = {kind: {} for kind in KINDS}
        #: Keys a watch's DELETED took out of the cache: (the event's resourceVersion,
        #: monotonic deadline), so that the answer of a write applied before that
        #: deletion but received after it does not bring the object back (`expect`).
        #: Kept as long as an expectation would mask the cache.
        self._gone: dict[str, dict[Key, tuple[str, float]]] = {kind: {} for kind in KINDS}
        self._monotonic = monotonic
        self._expectation_seconds = expectation_seconds
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
        #: The latest ``PodScheduled=True`` time of such a pod (`last_bind`).
        self._last_bind: datetime | None = None
        #: Pods in namespaces that did not opt in, already logged once.
        self._ignored: set[Key] = set()
        #: Parsed values by kind and key: (resourceVersion, generation, value).
        self._parsed: dict[str, dict[Key, tuple[str, int, Any]]] = {kind: {} for kind in KINDS}
        self._generation = 0
        self._pool_keys: set[str] = set()
        #: Change journal for an incremental reader (`changes`, `version`): keys whose
        #: view may have changed since the last `changes` call, kinds relisted since then
        #: (every key may have changed), and a counter per kind moved by every change.
        self._changed: dict[str, set[Key]] = {kind: set() for kind in KINDS}
        self._relisted: set[str] = set(KINDS)
        self._versions: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._covers_version = 0
        #: Moves whenever a pod leaves the pending set (`departures`).
        self._departures = 0
        #: Retry states of pods whose trigger failed, held until their annotation shows
        #: them: pod -> (state, when set). See `controller.failures`.
        self._retries: dict[Key, tuple[RetryState, datetime]] = {}
        #: When a trigger of each group was last removed as unneeded (the cooldown).
        self._removals: dict[GroupKey, datetime] = {}
        #: NodeClaims bought for our triggers and deleted before they registered: trigger
        #: name -> (NodeClaim name, monotonic time seen gone). See `lost_claims`.
        self._lost: dict[str, tuple[str, float]] = {}

    @staticmethod
    def _kept(kind: str, obj: Obj) -> Obj:
        """What the cache keeps of ``obj``: pending pods, triggers, nodes, ResourceClaims
        and ResourceSlices are slimmed (`slim_pod`, `slim_trigger`, `slim_node`,
        `controller.dra.slim_claim`, `controller.dra.slim_slice`)."""
        if kind == PENDING_PODS:
            return slim_pod(obj)
        if kind == TRIGGERS:
            return slim_trigger(obj)
        if kind == RESOURCECLAIMS:
            return slim_claim(obj)
        if kind == RESOURCESLICES:
            return slim_slice(obj)
        return slim_node(obj) if kind == NODES else obj

    def keeper(self, kind: str) -> Callable[[Obj], Obj]:
        """What the cache will keep of a ``kind`` object (`_kept`), for a list to apply
        to each item as it arrives, so a large list is never held in full; pass
        ``kept=True`` to `replace` then."""
        return lambda obj: self._kept(kind, obj)

    def replace(self, kind: str, items: Iterable[Obj], *, kept: bool = False) -> None:
        """A (re)list: the cache for ``kind`` becomes exactly ``items`` (``kept``: they
        already went through `keeper`). A relist is
        newer than every write we made before it, so expectations are dropped. Pending
        pods that vanished in the relist left the pending set as if a DELETED had come
        (client-go's DeltaFIFO ``Replace`` emits those deletes too)."""
        fresh = {key_of(obj): obj if kept else self._kept(kind, obj) for obj in items}
        if kind == NODECLAIMS:
            for key, obj in self._objects[kind].items():
                if key not in fresh:
                    self._note_lost(obj)
        if kind == PENDING_PODS:
            for key, obj in self._objects[kind].items():
                if key not in fresh:
                    self._departures += 1
                    self._note_left(key, obj)
        self._objects[kind] = fresh
        self._expected[kind].clear()
        self._relisted.add(kind)
        self._changed[kind].clear()
        self._versions[kind] += 1
        parsed = self._parsed[kind]
        for key in [k for k in parsed if k not in fresh]:
            del parsed[key]

    def apply(self, kind: str, event_type: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED). An ADDED or MODIFIED of the
        version the cache holds already (the event of our own write, whose answer came
        first: `expect`) is not slimmed again; the version expected is taken as is."""
        key = key_of(obj)
        expected = self._expected[kind].get(key)
        if event_type != "DELETED":
            rv = _rv(obj)
            held = self._objects[kind].get(key)
            if rv and held is not None and _rv(held) == rv:
                return  # this very version is cached: nothing changed
            if rv and expected is not None and expected.obj is not None and expected.rv == rv:
                obj = expected.obj  # slimmed when the write's answer came
            else:
                obj = self._kept(kind, obj)
        else:
            obj = self._kept(kind, obj)
        self._touch(kind, key)
        if event_type == "DELETED":
            if kind == NODECLAIMS:
                self._note_lost(self._objects[kind].get(key) or obj)
            if rv_gone := _rv(obj):
                self._gone[kind][key] = (rv_gone, self._monotonic() + self._expectation_seconds)
            self._objects[kind].pop(key, None)
            self._expected[kind].pop(key, None)
            self._parsed[kind].pop(key, None)
            if kind == PENDING_PODS:
                self._departures += 1
                self._note_left(key, obj)
            return
        self._objects[kind][key] = obj
        self._gone[kind].pop(key, None)
        if kind == PENDING_PODS:
            self._left.pop(key, None)
        if (
            expected is not None
            and expected.obj is not None
            and _same_or_newer(_rv(obj), expected.rv)
        ):
            del self._expected[kind][key]

    def _touch(self, kind: str, key: Key) -> None:
        """Journal that the view of ``key`` may have changed."""
        self._changed[kind].add(key)
        self._versions[kind] += 1

    def version(self, kind: str) -> int:
        """A counter that moves whenever the view of ``kind`` may have changed (an
        event, a relist, a write we expect, an expectation expiring)."""
        return self._versions[kind]

    def covers_version(self) -> int:
        """A counter that moves whenever the NodeReady covers change."""
        return self._covers_version

    def departures(self) -> int:
        """A counter that moves whenever a pod leaves the pending set (bound, deleted, or
        gone in a relist)."""
        return self._departures

    def changes(self, kind: str) -> set[Key] | None:
        """Keys of ``kind`` whose view may have changed since the previous call, or None
        when ``kind`` was relisted since then (every key may have changed). Consumes the
        journal: meant for one reader (`controller.incremental`). Expired expectations
        count as changes (see `expire_expectations`)."""
        if kind in self._relisted:
            self._relisted.discard(kind)
            self._changed[kind].clear()
            return None
        keys, self._changed[kind] = self._changed[kind], set()
        return keys

    def current(self, kind: str, key: Key) -> Obj | None:
        """The view of one object (expectations applied), None when absent."""
        expected = self._expected[kind].get(key)
        if expected is not None and expected.deadline >= self._monotonic():
            return expected.obj
        return self._objects[kind].get(key)

    def keys(self, kind: str) -> list[Key]:
        """Every key in the view of ``kind`` (expectations applied), unsorted."""
        return list(self._view(kind))

    def count(self, kind: str) -> int:
        """How many objects the view of ``kind`` holds."""
        return len(self._view(kind))

    def expire_expectations(self) -> None:
        """Drop expectations past their deadline (journalled as changes), and the
        deletions `expect` checks once as old."""
        now = self._monotonic()
        for kind, expectations in self._expected.items():
            for key in [k for k, e in expectations.items() if e.deadline < now]:
                log.debug("expectation for %s %s/%s expired", kind, *key)
                del expectations[key]
                self._touch(kind, key)
        for gone in self._gone.values():
            for key in [k for k, (_, deadline) in gone.items() if deadline < now]:
                del gone[key]

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
        be on its way; where they went counts in `ClusterState.used`)."""
        if len(self._left) + len(self._bound) >= MAX_SCHEDULED:
            return
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
        if status is None:
            if ANNOTATION_GPUS in annotations and karpenter.is_provisionable(obj):
                self._left[key] = obj
        elif status.phase in TRACKED_PHASES:
            self._left[key] = obj

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
        with ``version(NODECLAIMS)``."""
        now = self._monotonic()
        return {t: c for t, (c, seen) in self._lost.items() if now - seen <= LOST_CLAIM_SECONDS}

    def left(self) -> list[Key]:
        """Pods we were scaling up for that left the pending set, not yet read back."""
        return sorted(self._left)

    def resolve_left(self, key: Key, current: Obj | None) -> None:
        """What reading a `left` pod returned: the pod as it is now, or None when it is
        gone. A bound pod's GPUs count as used on its node, and one told a tracked phase
        is owed a final status; any other is forgotten."""
        self._left.pop(key, None)
        node = (current or {}).get("spec", {}).get("nodeName")
        if current is None or not node:
            return
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
        if status is not None and status.phase in TRACKED_PHASES:
            self._bound[key] = current
        bound_at = ScheduledPod.parse(current).bound_at
        if bound_at is not None and (self._last_bind is None or bound_at > self._last_bind):
            self._last_bind = bound_at
        try:
            intent = Intent.from_annotations(annotations)
        except IntentError:
            intent = None
        if intent is not None:
            self._used[node] = self._used.get(node, Decimal(0)) + gpu_use(intent)

    def last_bind(self) -> datetime | None:
        """When a pod we were scaling up for was last bound (its ``PodScheduled=True``
        time, as `resolve_left` read it), None before any: the schedulers' progress,
        which keeps NodeReady covers (`controller.capacity.cover_holds`). kube-apiserver
        sets that condition, with its ``lastTransitionTime``, in the same write as
        ``spec.nodeName`` when a scheduler posts a Binding (``BindingREST``,
        pkg/registry/core/pod/storage/storage.go); a pod without it moves nothing, and
        covers then end after ``cover_seconds`` as before."""
        return self._last_bind

    def cover(self, keys: Iterable[Key], node_claim: str, since: datetime) -> None:
        """Record that these pods were left to their scheduler on ``node_claim`` at
        ``since`` (the planner's NodeReady cover), before their status is written."""
        for key in keys:
            self._covers[key] = (node_claim, since)
            self._covers_version += 1

    def expire_covers(self, before: datetime) -> None:
        """Forget covers set before ``before`` (they no longer hold anyway)."""
        for key in [k for k, (_, since) in self._covers.items() if since < before]:
            del self._covers[key]
            self._covers_version += 1

    def covers(self) -> dict[Key, tuple[str, datetime]]:
        """The NodeReady covers (a copy): pod -> (NodeClaim, when)."""
        return dict(self._covers)

    def hold_retry(self, key: Key, retry: RetryState, since: datetime) -> None:
        """Hold a pod's new retry state (its trigger failed) until `expire_retries`."""
        self._retries[key] = (retry, since)
        self._covers_version += 1

    def expire_retries(self, before: datetime) -> None:
        """Forget retry states held since before ``before`` (their annotation is written
        by then, or the write failed and the pod's count restarts from its annotation)."""
        for key in [k for k, (_, since) in self._retries.items() if since < before]:
            del self._retries[key]
            self._covers_version += 1

    def release_retry(self, key: Key, retry: RetryState) -> None:
        """The pod's annotation now shows ``retry``: stop holding it (so a user who
        removes the annotation to try again is heard at once)."""
        held = self._retries.get(key)
        if held is not None and held[0] == retry:
            del self._retries[key]
            self._covers_version += 1

    def retries(self) -> dict[Key, RetryState]:
        """The retry states held (a copy): pod -> state."""
        return {key: retry for key, (retry, _) in self._retries.items()}

    def removed(self, group: GroupKey, when: datetime) -> None:
        """A trigger of ``group`` was removed as unneeded at ``when`` (cooldown starts)."""
        self._removals[group] = when
        self._covers_version += 1

    def expire_removals(self, before: datetime) -> None:
        """Forget removals before ``before`` (their cooldown is over)."""
        for key in [k for k, when in self._removals.items() if when < before]:
            del self._removals[key]
            self._covers_version += 1

    def removals(self) -> dict[GroupKey, datetime]:
        """When a trigger of each group was last removed as unneeded (a copy)."""
        return dict(self._removals)

    def refusals(self, now: datetime) -> dict[Key, Refusal]:
        """Karpenter's latest limits ``FailedScheduling`` per trigger ``(namespace, name)``
        (an event without a timestamp counts as seen ``now``)."""
        return self._latest_per_pod(REFUSALS, parse_refusal, now)

    def forget_scheduled(self, key: Key) -> None:
        """The bound pod's final status is written (or it is gone)."""
        self._bound.pop(key, None)
        self._left.pop(key, None)

    def expect(self, kind: str, obj: Obj) -> None:
        """We wrote ``obj`` (as the API returned it): see it until the watch does. When
        the watch already did (its event for this write, or a later one, came in before
        the write's answer), there is nothing to wait for: an expectation set then would
        hide every later event of the object until its deadline (a NodeClaim seen
        Launched for 30 s after it was Ready, its trigger never removed). Likewise when
        the watch took the object out at that version or a later one (a pending pod's
        status write answered after the ``spec.nodeName=`` watch's DELETED for its
        binding): the answer does not bring it back, which made the planner buy a
        trigger for a pod already running."""
        key = key_of(obj)
        rv = _rv(obj)
        current = self._objects[kind].get(key)
        gone = self._gone[kind].get(key)
        if (current is not None and _same_or_newer(_rv(current), rv)) or (
            current is None
            and gone is not None
            and gone[1] >= self._monotonic()
            and _same_or_newer(gone[0], rv)
        ):
            self._expected[kind].pop(key, None)
            self._touch(kind, key)
            return
        deadline = self._monotonic() + self._expectation_seconds
        self._expected[kind][key] = _Expectation(self._kept(kind, obj), rv, deadline)
        self._touch(kind, key)

    def expect_deleted(self, kind: str, key: Key) -> None:
        """We deleted ``key``: treat it as gone until the watch says so."""
        deadline = self._monotonic() + self._expectation_seconds
        self._expected[kind][key] = _Expectation(None, "", deadline)
        self._touch(kind, key)

    def _view(self, kind: str) -> Mapping[Key, Obj]:
        """The cache for ``kind`` with expectations applied (no copy when none apply)."""
        expectations = self._expected[kind]
        if not expectations:
            return self._objects[kind]
        now = self._monotonic()
        view = dict(self._objects[kind])
        for key, expected in list(expectations.items()):
            if expected.deadline < now:
                log.debug("expectation for %s %s/%s expired", kind, *key)
                del expectations[key]
                self._touch(kind, key)
            elif expected.obj is None:
                view.pop(key, None)
            else:
                view[key] = expected.obj
        return view

    def objects(self, kind: str) -> list[Obj]:
        """The cache for ``kind`` with expectations applied, sorted by key."""
        view = self._view(kind)
        return [view[k] for k in sorted(view)]

    def _parse(self, kind: str, key: Key, obj: Obj, parse: Callable[[Obj], Parsed]) -> Parsed:
        """``parse(obj)``, remembered per object and resourceVersion: a pass re-parses only
        what changed since the last one (and everything when `_generation` moves). An
        object without a resourceVersion (never from the API) is parsed every time."""
        rv = _rv(obj)
        cached = self._parsed[kind].get(key)
        if rv and cached is not None and cached[0] == rv and cached[1] == self._generation:
            return cast(Parsed, cached[2])
        value = parse(obj)
        self._parsed[kind][key] = (rv, self._generation, value)
        return value

    def pending_expectations(self) -> int:
        return sum(len(e) for e in self._expected.values())

    def _by_name(self, kind: str, parse: Callable[[Obj], _N]) -> dict[str, _N]:
        """The cached objects of a cluster-scoped ``kind``, parsed, by name."""
        return {
            parsed.name: parsed
            for key, obj in self._view(kind).items()
            if (parsed := self._parse(kind, key, obj, parse))
        }

    def nodepools(self) -> dict[str, NodePoolInfo]:
        """The cached NodePools, parsed, by name."""
        return self._by_name(NODEPOOLS, parse_nodepool)

    def nodeclaims(self) -> dict[str, NodeClaimInfo]:
        """The cached NodeClaims, parsed, by name, each with the GPU devices the
        ResourceSlices of its node publish (`NodeClaimInfo.devices`, DRA)."""
        claims = self._by_name(NODECLAIMS, parse_nodeclaim)
        if not self._objects[RESOURCESLICES]:
            return claims
        devices = self.node_devices()
        return {
            name: dataclasses.replace(claim, devices=devices[claim.node_name])
            if claim.node_name in devices
            else claim
            for name, claim in claims.items()
        }

    def nominations(self, now: datetime) -> dict[Key, Nomination]:
        """Karpenter's latest ``Nominated`` evidence per trigger ``(namespace, name)``
        (an event without a timestamp counts as seen ``now``)."""
        return self._latest_per_pod(NOMINATIONS, parse_nomination, now)

    def _latest_per_pod(
        self, kind: str, parse: Callable[[Obj], _E | None], now: datetime
    ) -> dict[Key, _E]:
        """The latest parsed event of cache ``kind`` per pod it is about (an event without
        a timestamp counts as seen ``now``)."""
        latest: dict[Key, _E] = {}
        for key, event in self._view(kind).items():
            parsed = self._parse(kind, key, event, parse)
            if parsed is None:
                continue
            known = latest.get(parsed.pod)
            if known is None or (parsed.seen or now) >= (known.seen or now):
                latest[parsed.pod] = parsed
        return latest

    def opted_in(self) -> set[str]:
        """Names of the namespaces that opted in."""
        return {key[1] for key in self._view(NAMESPACES)}

    def snapshot(self, now: datetime) -> Snapshot:
        """Parse the cache into the planner's input (pure apart from the clock read for
        expectation expiry). Parses only what changed since the last call, but walks
        every object: `controller.incremental` is the pass that costs what changed."""
        nodepools = self.nodepools()
        nodeclaims = self.nodeclaims()
        pool_keys = pool_label_keys(nodepools)
        if pool_keys != self._pool_keys:
            # What a pod's parse depends on changed: re-parse every pod once.
            self._pool_keys = pool_keys
            self._generation += 1
        opted_in = self.opted_in()
        pods: list[PendingPod | InvalidPod] = []

        def pending(obj: Obj) -> PendingPod | InvalidPod | None:
            return parse_served_pod(obj, pool_keys)

        for key, obj in self._view(PENDING_PODS).items():
            parsed = self._parse(PENDING_PODS, key, obj, pending)
            if parsed is None:
                continue
            if key[0] not in opted_in:
                self.log_ignored(*key)
                continue
            pods.append(parsed)
        nominations = self.nominations(now)
        triggers = []
        for key, obj in self._view(TRIGGERS).items():
            trigger = self._parse(TRIGGERS, key, obj, parse_trigger)
            if trigger is None:
                log.warning(
                    "pod %s/%s has trigger labels but no trigger annotations; leaving it alone",
                    *key_of(obj),
                )
            else:
                triggers.append(trigger)
        return Snapshot(
            pods,
            triggers,
            nodeclaims,
            nodepools,
            now,
            self.scheduled(),
            nominations,
            dict(self._covers),
            self.used(),
            self.nodes(),
            retries=self.retries(),
            refusals=self.refusals(now),
            removals=self.removals(),
            last_bind=self.last_bind(),
            lost=self.lost_claims(),
        )

    def nodes(self) -> dict[str, NodeInfo]:
        """The cached nodes of Karpenter NodePools, parsed, by name."""
        return self._by_name(NODES, parse_node)

    def claim_specs(self) -> dict[Key, Obj]:
        """The cached ResourceClaims' ``spec`` by ``(namespace, name)``."""
        return {key: obj.get("spec") or {} for key, obj in self._view(RESOURCECLAIMS).items()}

    def claiming_pods(self) -> list[Obj]:
        """The pending pods with DRA ``spec.resourceClaims`` (unsorted): what
        `controller.dra.intents_to_record` reads, without sorting every pending pod."""
        return [
            obj
            for obj in self._view(PENDING_PODS).values()
            if (obj.get("spec") or {}).get("resourceClaims")
        ]

    def allocated_claims(self) -> set[Key]:
        """``(namespace, name)`` of the cached ResourceClaims that are allocated."""
        return {key for key, obj in self._view(RESOURCECLAIMS).items() if obj.get("status")}

    def node_devices(self) -> dict[str, int]:
        """GPU devices the cached ResourceSlices publish, by node name
        (`controller.dra.node_devices`)."""
        return node_devices(self._view(RESOURCESLICES).values())

    def used(self) -> dict[str, Decimal]:
        """GPUs of the pods we served found bound, by node name (see
        `controller.capacity.held_covers`); nodes no NodeClaim names any more are forgotten
        once they add up."""
        if len(self._used) > 2 * len(self._objects[NODECLAIMS]) + 100:
            joined = {c.node_name for c in self.nodeclaims().values() if c.node_name}
            self._used = {node: gpus for node, gpus in self._used.items() if node in joined}
        return dict(self._used)

    def log_ignored(self, namespace: str, name: str) -> None:
        """Say once per pod that it is not ours to serve (bounded like `_left`)."""
        if (namespace, name) in self._ignored or len(self._ignored) >= MAX_SCHEDULED:
            return
        self._ignored.add((namespace, name))
        log.info(
            "ignoring pod %s/%s: it carries a GPU intent but namespace %s has not opted in "
            "(label %s=%s)",
            namespace,
            name,
            namespace,
            INJECT_LABEL,
            INJECT_VALUE,
        )
