"""The informer cache: the cluster as the watches show it, read as parsed values.

Informer handlers only update the cache and poke the reconciler (Karpenter's state
controllers work the same way, pkg/controllers/state). Writes the controller makes are
also recorded as *expectations*: until the watch delivers the object at the
resourceVersion the write returned (resourceVersions are only compared for equality,
as the API conventions require), the written state masks the cached one. Without that,
a pass planned on a cache that has not yet seen the trigger just created would create
it again.

What the controller remembers of its own decisions (covers, retries, cooldowns, pods
that left) is not here: `controller.memory.Memory`, told by the cache of objects seen
and gone (`Observer`).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast

from controller.dra import node_devices, slim_claim, slim_slice
from controller.model import (
    InvalidPod,
    PendingPod,
    TriggerInfo,
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
from intent.contract import INJECT_LABEL, INJECT_VALUE, is_trigger

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
Parsed = TypeVar("Parsed")


class Kind(enum.StrEnum):
    """The cache's kinds, one per informer (the values label the informer metrics)."""

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


#: Every kind, in declaration order.
KINDS: tuple[Kind, ...] = tuple(Kind)
#: Most pods logged once as not ours to serve (memory bound).
MAX_IGNORED = 10_000


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


class Observer(Protocol):
    """Told of objects arriving in the cache and leaving it (the controller's memory,
    `controller.memory.Memory`)."""

    def seen(self, kind: Kind, key: Key) -> None:
        """An ADDED or MODIFIED of a version the cache did not hold yet."""

    def gone(self, kind: Kind, key: Key, last: Obj, held: Obj | None) -> None:
        """``key`` left the cache: a DELETED (``last``: the event's object, slimmed;
        ``held``: what the cache held, if anything) or missing from a relist (both: what
        the cache held)."""


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


def _kept(kind: str, obj: Obj) -> Obj:
    """What the cache keeps of ``obj``: pending pods, triggers, nodes, ResourceClaims,
    ResourceSlices and Nominated Events are slimmed (`slim_pod`, `slim_trigger`,
    `slim_node`, `controller.dra.slim_claim`, `controller.dra.slim_slice`,
    `slim_event`)."""
    if kind == Kind.PENDING_PODS:
        return slim_pod(obj)
    if kind == Kind.TRIGGERS:
        return slim_trigger(obj)
    if kind == Kind.RESOURCECLAIMS:
        return slim_claim(obj)
    if kind == Kind.RESOURCESLICES:
        return slim_slice(obj)
    if kind == Kind.NOMINATIONS:
        return slim_event(obj)
    return slim_node(obj) if kind == Kind.NODES else obj


def slim_event(obj: Obj) -> Obj:
    """What the cache keeps of an Event (`controller.nodes.parse_nomination` reads it):
    its metadata's name, namespace and resourceVersion, ``involvedObject``'s kind,
    namespace, name and uid, ``reason``, ``message`` and the times. Nominated Events
    of every namespace are cached, one per pending pod Karpenter nominates."""
    meta = obj.get("metadata") or {}
    involved = obj.get("involvedObject") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "involvedObject": {
            k: involved[k] for k in ("kind", "namespace", "name", "uid") if k in involved
        },
        **{k: obj[k] for k in ("reason", "message", "lastTimestamp", "eventTime") if k in obj},
    }


class InformerCache:
    """Objects by kind and ``(namespace, name)``, pending expectations, tombstones of
    deletions, a change journal, and parsed values memoized per resourceVersion.

    Args:
        monotonic: clock for expectation deadlines (seconds).
        expectation_seconds: how long a write masks the cache at most; after that the
            watch (or a relist) is trusted again.
        observer: told of objects seen and gone (`Observer`), if given.
    """

    def __init__(
        self,
        monotonic: Callable[[], float],
        expectation_seconds: float = 30.0,
        *,
        observer: Observer | None = None,
    ) -> None:
        self._objects: dict[str, dict[Key, Obj]] = {kind: {} for kind in KINDS}
        self._expected: dict[str, dict[Key, _Expectation]] = {kind: {} for kind in KINDS}
        #: Keys a watch's DELETED took out of the cache: (the event's resourceVersion,
        #: monotonic deadline), so that the answer of a write applied before that
        #: deletion but received after it does not bring the object back (`expect`).
        #: Kept as long as an expectation would mask the cache.
        self._gone: dict[str, dict[Key, tuple[str, float]]] = {kind: {} for kind in KINDS}
        self._monotonic = monotonic
        self._expectation_seconds = expectation_seconds
        self._observer = observer
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
        #: Moves whenever a pod leaves the pending set (`departures`).
        self._departures = 0

    def keeper(self, kind: Kind) -> Callable[[Obj], Obj]:
        """What the cache will keep of a ``kind`` object (`_kept`), for a list to apply
        to each item as it arrives, so a large list is never held in full; pass
        ``kept=True`` to `replace` then."""
        return lambda obj: _kept(kind, obj)

    def replace(self, kind: Kind, items: Iterable[Obj], *, kept: bool = False) -> None:
        """A (re)list: the cache for ``kind`` becomes exactly ``items`` (``kept``: they
        already went through `keeper`). A relist is
        newer than every write we made before it, so expectations are dropped. Pending
        pods that vanished in the relist left the pending set as if a DELETED had come
        (client-go's DeltaFIFO ``Replace`` emits those deletes too)."""
        fresh = {key_of(obj): obj if kept else _kept(kind, obj) for obj in items}
        observer = self._observer
        for key, obj in self._objects[kind].items():
            if key not in fresh:
                if kind == Kind.PENDING_PODS:
                    self._departures += 1
                if observer is not None:
                    observer.gone(kind, key, obj, obj)
        self._objects[kind] = fresh
        self._expected[kind].clear()
        self._relisted.add(kind)
        self._changed[kind].clear()
        self._versions[kind] += 1
        parsed = self._parsed[kind]
        for key in [k for k in parsed if k not in fresh]:
            del parsed[key]

    def apply(self, kind: Kind, event_type: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED). An ADDED or MODIFIED of the
        version the cache holds already (the event of our own write, whose answer came
        first: `expect`) is not slimmed again; the version expected is taken as is."""
        key = key_of(obj)
        expected = self._expected[kind].get(key)
        if event_type == "DELETED":
            self._delete(kind, key, _kept(kind, obj))
            return
        rv = _rv(obj)
        held = self._objects[kind].get(key)
        if rv and held is not None and _rv(held) == rv:
            return  # this very version is cached: nothing changed
        if rv and expected is not None and expected.obj is not None and expected.rv == rv:
            obj = expected.obj  # slimmed when the write's answer came
        else:
            obj = _kept(kind, obj)
        self._touch(kind, key)
        self._objects[kind][key] = obj
        self._gone[kind].pop(key, None)
        if self._observer is not None:
            self._observer.seen(kind, key)
        if (
            expected is not None
            and expected.obj is not None
            and _same_or_newer(_rv(obj), expected.rv)
        ):
            del self._expected[kind][key]

    def _delete(self, kind: Kind, key: Key, obj: Obj) -> None:
        """A watch's DELETED of ``key`` (``obj``: the event's object, slimmed)."""
        self._touch(kind, key)
        held = self._objects[kind].get(key)
        if rv_gone := _rv(obj):
            self._gone[kind][key] = (rv_gone, self._monotonic() + self._expectation_seconds)
        self._objects[kind].pop(key, None)
        self._expected[kind].pop(key, None)
        self._parsed[kind].pop(key, None)
        if kind == Kind.PENDING_PODS:
            self._departures += 1
        if self._observer is not None:
            self._observer.gone(kind, key, obj, held)

    def _touch(self, kind: str, key: Key) -> None:
        """Journal that the view of ``key`` may have changed."""
        self._changed[kind].add(key)
        self._versions[kind] += 1

    def version(self, kind: Kind) -> int:
        """A counter that moves whenever the view of ``kind`` may have changed (an
        event, a relist, a write we expect, an expectation expiring)."""
        return self._versions[kind]

    def departures(self) -> int:
        """A counter that moves whenever a pod leaves the pending set (bound, deleted, or
        gone in a relist)."""
        return self._departures

    def changes(self, kind: Kind) -> set[Key] | None:
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

    def current(self, kind: Kind, key: Key) -> Obj | None:
        """The view of one object (expectations applied), None when absent."""
        expected = self._expected[kind].get(key)
        if expected is not None and expected.deadline >= self._monotonic():
            return expected.obj
        return self._objects[kind].get(key)

    def keys(self, kind: Kind) -> list[Key]:
        """Every key in the view of ``kind`` (expectations applied), unsorted."""
        return list(self._view(kind))

    def count(self, kind: Kind) -> int:
        """How many objects the view of ``kind`` holds."""
        return len(self._view(kind))

    def held(self, kind: Kind) -> int:
        """How many objects of ``kind`` the watches show (expectations not applied)."""
        return len(self._objects[kind])

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

    def expect(self, kind: Kind, obj: Obj) -> None:
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
        self._expected[kind][key] = _Expectation(_kept(kind, obj), rv, deadline)
        self._touch(kind, key)

    def expect_deleted(self, kind: Kind, key: Key) -> None:
        """We deleted ``key``: treat it as gone until the watch says so."""
        deadline = self._monotonic() + self._expectation_seconds
        self._expected[kind][key] = _Expectation(None, "", deadline)
        self._touch(kind, key)

    def _view(self, kind: Kind) -> Mapping[Key, Obj]:
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

    def objects(self, kind: Kind) -> list[Obj]:
        """The cache for ``kind`` with expectations applied, sorted by key."""
        view = self._view(kind)
        return [view[k] for k in sorted(view)]

    def _parse(self, kind: Kind, key: Key, obj: Obj, parse: Callable[[Obj], Parsed]) -> Parsed:
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

    def _by_name(self, kind: Kind, parse: Callable[[Obj], _N]) -> dict[str, _N]:
        """The cached objects of a cluster-scoped ``kind``, parsed, by name."""
        return {
            parsed.name: parsed
            for key, obj in self._view(kind).items()
            if (parsed := self._parse(kind, key, obj, parse))
        }

    def nodepools(self) -> dict[str, NodePoolInfo]:
        """The cached NodePools, parsed, by name."""
        return self._by_name(Kind.NODEPOOLS, parse_nodepool)

    def nodeclaims(self) -> dict[str, NodeClaimInfo]:
        """The cached NodeClaims, parsed, by name, each with the GPU devices the
        ResourceSlices of its node publish (`NodeClaimInfo.devices`, DRA) and what a
        sharing device plugin advertises on its node (`NodeClaimInfo.advertised`)."""
        claims = self._by_name(Kind.NODECLAIMS, parse_nodeclaim)
        devices = self.node_devices() if self._objects[Kind.RESOURCESLICES] else {}
        plugins = {name: node.advertised for name, node in self.nodes().items() if node.advertised}
        if not devices and not plugins:
            return claims
        return {
            name: dataclasses.replace(
                claim,
                devices=devices.get(claim.node_name, 0),
                advertised=plugins.get(claim.node_name, ()),
            )
            if claim.node_name in devices or claim.node_name in plugins
            else claim
            for name, claim in claims.items()
        }

    def nominations(self, now: datetime) -> dict[Key, Nomination]:
        """Karpenter's latest ``Nominated`` evidence per trigger ``(namespace, name)``
        (an event without a timestamp counts as seen ``now``)."""
        return self._latest_per_pod(Kind.NOMINATIONS, parse_nomination, now)

    def refusals(self, now: datetime) -> dict[Key, Refusal]:
        """Karpenter's latest limits ``FailedScheduling`` per trigger ``(namespace, name)``
        (an event without a timestamp counts as seen ``now``)."""
        return self._latest_per_pod(Kind.REFUSALS, parse_refusal, now)

    def _latest_per_pod(
        self, kind: Kind, parse: Callable[[Obj], _E | None], now: datetime
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
        return {key[1] for key in self._view(Kind.NAMESPACES)}

    def nodes(self) -> dict[str, NodeInfo]:
        """The cached nodes of Karpenter NodePools, parsed, by name."""
        return self._by_name(Kind.NODES, parse_node)

    def served_pods(self, nodepools: Mapping[str, NodePoolInfo]) -> list[PendingPod | InvalidPod]:
        """The pending pods in opted-in namespaces, parsed against the label keys of
        ``nodepools`` (every pod is re-parsed once when those keys change); triggers are
        left out, and pods of other namespaces logged once (`log_ignored`)."""
        pool_keys = pool_label_keys(nodepools)
        if pool_keys != self._pool_keys:
            # What a pod's parse depends on changed: re-parse every pod once.
            self._pool_keys = pool_keys
            self._generation += 1
        opted_in = self.opted_in()
        pods: list[PendingPod | InvalidPod] = []

        def pending(obj: Obj) -> PendingPod | InvalidPod | None:
            return parse_served_pod(obj, pool_keys)

        for key, obj in self._view(Kind.PENDING_PODS).items():
            parsed = self._parse(Kind.PENDING_PODS, key, obj, pending)
            if parsed is None:
                continue
            if key[0] not in opted_in:
                self.log_ignored(*key)
                continue
            pods.append(parsed)
        return pods

    def triggers(self) -> list[TriggerInfo]:
        """The cached trigger pods, parsed (one without trigger annotations is logged
        and left out)."""
        triggers = []
        for key, obj in self._view(Kind.TRIGGERS).items():
            trigger = self._parse(Kind.TRIGGERS, key, obj, parse_trigger)
            if trigger is None:
                log.warning(
                    "pod %s/%s has trigger labels but no trigger annotations; leaving it alone",
                    *key_of(obj),
                )
            else:
                triggers.append(trigger)
        return triggers

    def claim_specs(self) -> dict[Key, Obj]:
        """The cached ResourceClaims' ``spec`` by ``(namespace, name)``."""
        return {key: obj.get("spec") or {} for key, obj in self._view(Kind.RESOURCECLAIMS).items()}

    def claiming_pods(self) -> list[Obj]:
        """The pending pods with DRA ``spec.resourceClaims`` (unsorted): what
        `controller.dra.intents_to_record` reads, without sorting every pending pod."""
        return [
            obj
            for obj in self._view(Kind.PENDING_PODS).values()
            if (obj.get("spec") or {}).get("resourceClaims")
        ]

    def allocated_claims(self) -> set[Key]:
        """``(namespace, name)`` of the cached ResourceClaims that are allocated."""
        return {key for key, obj in self._view(Kind.RESOURCECLAIMS).items() if obj.get("status")}

    def node_devices(self) -> dict[str, int]:
        """GPU devices the cached ResourceSlices publish, by node name
        (`controller.dra.node_devices`)."""
        return node_devices(self._view(Kind.RESOURCESLICES).values())

    def log_ignored(self, namespace: str, name: str) -> None:
        """Say once per pod that it is not ours to serve (at most `MAX_IGNORED` pods)."""
        if (namespace, name) in self._ignored or len(self._ignored) >= MAX_IGNORED:
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
