"""The simulated cluster's object store: what etcd plus the apiserver's registry do.

Objects are JSON dicts keyed by resource type, namespace and name. Every write takes the
next value of one cluster-wide ``resourceVersion`` counter (as etcd's revision does), and
is recorded in a bounded per-type history so that watches can resume from a
resourceVersion; a resume point older than the history gets `Gone` (HTTP 410, reason
``Expired``), exactly as kube-apiserver answers after etcd compaction.

Semantics copied from kube-apiserver (k8s.io/apiserver ``pkg/registry/generic/registry``):

- ``generateName`` plus 5 random characters from ``bcdfghjklmnpqrstvwxz2456789``
  (k8s.io/apiserver ``pkg/storage/names``).
- ``uid``, ``creationTimestamp``, ``resourceVersion`` and ``generation`` are set by the
  store; an update whose ``metadata.resourceVersion`` is set and stale is a `Conflict`.
- Types with a status subresource ignore ``status`` on a main-resource update and
  everything but ``status`` on a status update; ``generation`` grows when ``spec`` changes.
- Delete of an object with finalizers only sets ``deletionTimestamp``; it goes away when
  an update removes the last finalizer. A pod bound to a node is deleted gracefully
  (``deletionTimestamp`` + ``deletionGracePeriodSeconds``) and removed by the kubelet;
  an unbound pod is removed at once (``pkg/registry/core/pod/strategy.go``
  ``CheckGracefulDelete``).
- A watch with a label or field selector sees ``DELETED`` when an object stops matching
  and ``ADDED`` when it starts to (``pkg/storage/cacher``).

This module is single-threaded asyncio code: no method awaits while it changes state, so
a list taken and a watch opened in the same step see a consistent snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import orjson

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_T = TypeVar("_T")

#: A pass of an in-process controller (`Store.run_passes`) longer than this many seconds
#: is logged: the sim's API server, in the same event loop, answers nothing meanwhile.
SLOW_PASS_SECONDS = 1.0
#: Seconds a controller whose pass walks every pod lets writes settle before its next
#: pass (`Store.run_passes` ``settle_seconds``: the sim's kubelet and resourceclaim
#: controller): short beside every delay they model, so nothing happens noticeably later.
SETTLE_SECONDS = 0.02


def json_copy(value: _T) -> _T:
    """A deep copy of a JSON value (dicts, lists and immutable scalars): every read and
    write of the store copies whole objects, so this is the sim's hottest function.

    A round trip through orjson (C) is about 2.5 times as fast as a Python walk for a
    pod. Values orjson cannot encode (a `Decimal`, an int beyond 64 bits, a non-str key)
    take the walk instead (`_walk_copy`), as do scalars and tuples, which the walk
    returns as they are (so they must be immutable). JSON cannot carry NaN or infinity,
    which the API server never stores either."""
    if type(value) is dict or type(value) is list:
        try:
            return cast(_T, orjson.loads(orjson.dumps(value)))
        except TypeError:
            pass
    return _walk_copy(value)


def _walk_copy(value: _T) -> _T:
    """`json_copy` in Python: dicts and lists copied, anything else returned as is."""
    if isinstance(value, dict):
        return cast(_T, {k: _walk_copy(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(_T, [_walk_copy(v) for v in value])
    return value


#: A selector compiled to a predicate over an object (see `sim.selectors`).
Predicate = Callable[[Mapping[str, Any]], bool]
#: ``fn(old, new)`` raising `Invalid`; ``old`` is None on create.
Validator = Callable[[Obj | None, Obj], None]


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource the sim serves, e.g. ``pods`` in core ``v1``."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    has_status: bool = False

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``<group>/<version>`` otherwise."""
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


NAMESPACES = ResourceType("", "v1", "Namespace", "namespaces", namespaced=False, has_status=True)
PODS = ResourceType("", "v1", "Pod", "pods", namespaced=True, has_status=True)
NODES = ResourceType("", "v1", "Node", "nodes", namespaced=False, has_status=True)
EVENTS = ResourceType("", "v1", "Event", "events", namespaced=True)
SECRETS = ResourceType("", "v1", "Secret", "secrets", namespaced=True)
NODECLAIMS = ResourceType(
    "karpenter.sh", "v1", "NodeClaim", "nodeclaims", namespaced=False, has_status=True
)
NODEPOOLS = ResourceType(
    "karpenter.sh", "v1", "NodePool", "nodepools", namespaced=False, has_status=True
)
MUTATING_WEBHOOK_CONFIGURATIONS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    namespaced=False,
)
LEASES = ResourceType("coordination.k8s.io", "v1", "Lease", "leases", namespaced=True)
# Dynamic Resource Allocation, GA in Kubernetes 1.34 (see `sim.dra`).
DEVICECLASSES = ResourceType(
    "resource.k8s.io", "v1", "DeviceClass", "deviceclasses", namespaced=False
)
RESOURCESLICES = ResourceType(
    "resource.k8s.io", "v1", "ResourceSlice", "resourceslices", namespaced=False
)
RESOURCECLAIMS = ResourceType(
    "resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", namespaced=True, has_status=True
)
RESOURCECLAIMTEMPLATES = ResourceType(
    "resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", namespaced=True
)

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    NAMESPACES,
    PODS,
    NODES,
    EVENTS,
    SECRETS,
    NODECLAIMS,
    NODEPOOLS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    LEASES,
    DEVICECLASSES,
    RESOURCESLICES,
    RESOURCECLAIMS,
    RESOURCECLAIMTEMPLATES,
)


class ApiError(Exception):
    """An error the apiserver answers with a ``Status`` object.

    Attributes: ``code`` (HTTP status), ``reason`` (``NotFound``, ``AlreadyExists``,
    ``Conflict``, ``Invalid``, ``Expired``, ``BadRequest``, ...), ``message``, ``details``.
    """

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})

    def status(self) -> Obj:
        """The ``meta/v1 Status`` body kube-apiserver sends for this error."""
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


class BadRequest(ApiError):
    code, reason = 400, "BadRequest"


class NotFound(ApiError):
    code, reason = 404, "NotFound"


class AlreadyExists(ApiError):
    code, reason = 409, "AlreadyExists"


class Conflict(ApiError):
    code, reason = 409, "Conflict"


class Gone(ApiError):
    code, reason = 410, "Expired"


class Invalid(ApiError):
    code, reason = 422, "Invalid"


class InternalError(ApiError):
    code, reason = 500, "InternalError"


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded write: ``type`` ADDED/MODIFIED/DELETED, the object after it (for
    DELETED the last state, stamped with the deletion's resourceVersion) and before it."""

    type: str
    rv: int
    obj: Obj
    old: Obj | None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """What a watcher receives: ``type`` ADDED/MODIFIED/DELETED and the object.

    The object is shared with the store's history: consumers must not mutate it.
    """

    type: str
    obj: Obj


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def _now() -> datetime:
    return datetime.now(UTC)


def rfc3339(ts: datetime) -> str:
    """Kubernetes ``metav1.Time`` format: second precision, ``Z`` suffix."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _at_resource_version(obj: Obj, rv: int) -> Obj:
    """A shallow copy of ``obj`` whose ``metadata.resourceVersion`` is ``rv``."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


class Watcher:
    """An open watch: iterate for `WatchEvent`; ends when closed (overflow or `close`)."""

    def __init__(
        self,
        store: Store,
        rt: ResourceType,
        namespace: str | None,
        predicate: Predicate | None,
        max_queue: int,
    ) -> None:
        self._store = store
        self.rt = rt
        self.namespace = namespace
        self.predicate = predicate
        self._queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self._max_queue = max_queue
        self.closed = False

    def _matches(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.predicate is None or self.predicate(obj)

    def _offer(self, change: Change) -> None:
        """Translate a store change into what this watcher sees (selector semantics).

        As kube-apiserver's watch cache does (k8s.io/apiserver ``pkg/storage/cacher/
        cache_watcher.go`` ``convertToWatchEvent``; REFERENCE.md section 6): an object
        that starts matching arrives as ADDED; one that stops matching arrives as DELETED
        carrying the *previous* object (the last state that matched) with only its
        resourceVersion moved to the event's. So a pod that gets bound reaches a
        ``spec.nodeName=`` watch as DELETED without its nodeName; a deletion carries the
        object's last state.
        """
        if self.closed:
            return
        now_in = change.type != "DELETED" and self._matches(change.obj)
        was_in = change.old is not None and self._matches(change.old)
        if change.type == "DELETED":
            event = (
                WatchEvent("DELETED", change.obj) if was_in or self._matches(change.obj) else None
            )
        elif now_in and was_in:
            event = WatchEvent("MODIFIED", change.obj)
        elif now_in:
            event = WatchEvent("ADDED", change.obj)
        elif was_in:
            assert change.old is not None
            event = WatchEvent("DELETED", _at_resource_version(change.old, change.rv))
        else:
            event = None
        if event is None:
            return
        if self._queue.qsize() >= self._max_queue:
            log.warning(
                "closing slow %s watcher: %d events queued", self.rt.plural, self._max_queue
            )
            self.close()
            return
        self._queue.put_nowait(event)

    def close(self) -> None:
        """Stop the watch; the iterator ends after the events already queued."""
        if not self.closed:
            self.closed = True
            self._store._unsubscribe(self)
            self._queue.put_nowait(None)

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> WatchEvent:
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        return item


@dataclass
class _Table:
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)
    history: deque[Change] = field(default_factory=deque)
    compacted_rv: int = 0
    watchers: set[Watcher] = field(default_factory=set)
    last_rv: int = 0  # resourceVersion of the newest write to this type


class Store:
    """In-memory object store with resourceVersion, history-backed watch and finalizers.

    Args:
        history_limit: changes kept per resource type for watch resumption; older resume
            points get `Gone`.
        watch_queue_limit: events a watcher may have queued before it is closed as slow
            (kube-apiserver's cacher likewise terminates watchers that cannot keep up).
        now: clock for ``creationTimestamp`` and ``deletionTimestamp``.
    """

    def __init__(
        self,
        *,
        history_limit: int = 10_000,
        watch_queue_limit: int = 100_000,
        now: Callable[[], datetime] = _now,
    ) -> None:
        self._tables: dict[ResourceType, _Table] = {rt: _Table() for rt in RESOURCE_TYPES}
        self._validators: dict[ResourceType, list[Validator]] = {}
        self._rv = 0
        self._history_limit = history_limit
        self._watch_queue_limit = watch_queue_limit
        self._now = now
        self._changed = asyncio.Event()
        self._rng = random.Random()

    # -- introspection -------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out (0 before any write)."""
        return self._rv

    def last_write(self, rt: ResourceType) -> int:
        """The resourceVersion of the newest create, update or delete of ``rt`` (0: none
        since the store began)."""
        return self._tables[rt].last_rv

    def add_validator(self, rt: ResourceType, validator: Validator) -> None:
        """Run ``validator(old, new)`` before every create/update of ``rt``."""
        self._validators.setdefault(rt, []).append(validator)

    async def wait_changed(
        self,
        max_seconds: float | None = None,
        *,
        since: int | None = None,
        kinds: Collection[ResourceType] | None = None,
    ) -> bool:
        """Wait for a write newer than resourceVersion ``since`` (default: now): True at
        once if there already is one, True when one happens, False after ``max_seconds``.
        With ``kinds``, only writes to those resource types count (a scheduler does not
        re-scan for an Event or a Lease, as kube-scheduler's queue moves pods only on
        pod and node events).

        For the sim's in-process controllers (scheduler, Karpenter, kubelet), which
        re-scan on change instead of each holding a watch. Pass the resourceVersion read
        *before* a pass as ``since``, so that writes made during the pass (one's own
        included) are not lost.
        """
        floor = self._rv if since is None else since
        loop = asyncio.get_running_loop()
        deadline = None if max_seconds is None else loop.time() + max_seconds
        while True:
            newest = (
                self._rv
                if kinds is None
                else max((self._tables[rt].last_rv for rt in kinds), default=0)
            )
            if newest > floor:
                return True
            self._changed.clear()
            try:
                await asyncio.wait_for(
                    self._changed.wait(), None if deadline is None else deadline - loop.time()
                )
            except TimeoutError:
                return False
            # On Python 3.11, wait_for can swallow a cancel that lands in the same step as
            # the change it was waiting for; re-raise it so the caller's loop stops.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError

    async def run_passes(
        self,
        step: Callable[[], float | None],
        what: str,
        kinds: Collection[ResourceType] | None = None,
        *,
        settle_seconds: float = 0.0,
    ) -> None:
        """Run ``step`` now and again after every write, until cancelled: the loop of
        the sim's in-process controllers.

        ``step`` returns the seconds until it has timed work due (None: only a write
        matters). Writes made during a step (its own included) trigger the next step;
        with ``kinds``, only writes to those resource types do. A step that raises is
        logged and retried after 1 s: a controller survives its own bugs, as real ones do.
        ``settle_seconds``: after being woken, wait that long before the next step, so a
        burst of writes (a scheduler binding hundreds of pods one by one) makes one pass
        of a controller whose pass walks every object, not one pass per write.
        """
        while True:
            seen = self._rv
            started = time.monotonic()
            try:
                wait = step()
            except Exception:
                log.exception("%s pass failed; retrying in 1s", what)
                wait = 1.0
            took = time.monotonic() - started
            if took > SLOW_PASS_SECONDS:  # the API server answered nothing meanwhile
                log.warning("%s pass took %.1fs", what, took)
            await self.wait_changed(wait, since=seen, kinds=kinds)
            if settle_seconds > 0:
                await asyncio.sleep(settle_seconds)

    # -- reads ---------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """A deep copy of one object. Raises `NotFound`."""
        return json_copy(self._get(rt, namespace, name))

    def peek(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """The stored object itself, read-only (no copy), for a reader that only looks at
        it or copies what it keeps (the HTTP handlers' patch base). Raises `NotFound`."""
        return self._get(rt, namespace, name)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        predicate: Predicate | None = None,
        *,
        copy_objects: bool = True,
    ) -> tuple[list[Obj], int]:
        """Objects of ``rt`` (in ``namespace`` if given) matching ``predicate``, sorted by
        namespace/name, and the resourceVersion the list is consistent with.

        ``copy_objects=False`` returns the stored dicts themselves, for in-process readers
        that promise not to mutate them (it saves a deep copy per object per scan).
        """
        # filtered before sorted: a list of one namespace sorts what it returns, not
        # every object of the type
        objects = self._tables[rt].objects
        keys = sorted(
            key
            for key, obj in objects.items()
            if (namespace is None or key[0] == namespace) and (predicate is None or predicate(obj))
        )
        items = [objects[key] for key in keys]
        if copy_objects:
            items = json_copy(items)
        return items, self._rv

    def changes_since(self, rt: ResourceType, resource_version: int) -> Sequence[Change] | None:
        """The recorded writes to ``rt`` after ``resource_version``, oldest first (their
        objects are the stored dicts: read-only), or None when the history no longer
        reaches back that far (as a watch from there would get `Gone`). For the sim's
        in-process caches (`sim.podview.PodView`), a synchronous watch."""
        table = self._tables[rt]
        if resource_version < table.compacted_rv:
            return None
        out: list[Change] = []
        for change in reversed(table.history):
            if change.rv <= resource_version:
                break
            out.append(change)
        out.reverse()
        return out

    def iter_objects(self, rt: ResourceType) -> Iterator[Obj]:
        """The stored objects of ``rt`` themselves (read-only), unsorted, no copy."""
        return iter(list(self._tables[rt].objects.values()))

    # -- writes --------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        owned: bool = False,
    ) -> Obj:
        """Store a new object and return a copy of it as stored.

        ``dry_run=True`` (``?dryRun=All``) does every check and returns the object as it
        would be stored (without ``resourceVersion``), but stores nothing.

        ``owned=True``: ``obj`` is a dict handed over (the store keeps it; the caller never
        touches it again) and the object returned is the stored one, read-only, for a
        caller that only encodes it (the HTTP handlers): no copy either way.

        ``namespace`` (for namespaced types) overrides a missing ``metadata.namespace``
        and must agree with a present one. Raises `Invalid` (no name or generateName, or a
        validator's complaint), `BadRequest` (namespace mismatch), `NotFound` (namespace
        does not exist), `AlreadyExists`.
        """
        new = obj if owned and isinstance(obj, dict) else json_copy(dict(obj))
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be an object")
        ns = self._namespace_for(rt, meta, namespace)
        if rt.namespaced and not self._exists(NAMESPACES, None, ns):
            raise NotFound(
                f'namespaces "{ns}" not found', details={"name": ns, "kind": "namespaces"}
            )
        table = self._tables[rt]
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise Invalid(
                    f"{rt.kind} is invalid: metadata.name: Required value: name or generateName is required",
                    details={"kind": rt.kind},
                )
            for _ in range(16):
                candidate = prefix + "".join(self._rng.choice(_NAME_CHARS) for _ in range(5))
                if (ns, candidate) not in table.objects:
                    meta["name"] = candidate
                    break
            else:  # pragma: no cover - 27^5 names per prefix
                raise AlreadyExists(f"could not generate a unique name for {prefix!r}")
        name = meta["name"]
        if (ns, name) in table.objects:
            raise AlreadyExists(
                f'{rt.plural} "{name}" already exists',
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self._now())
        meta["generation"] = 1
        if rt.has_status:
            new.setdefault("status", {})
        self._validate(rt, None, new)
        if dry_run:
            return new if owned else json_copy(new)
        stored = self._commit(rt, "ADDED", new, None)
        return stored if owned else json_copy(stored)

    def update(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        owned: bool = False,
    ) -> Obj:
        """Replace an object (HTTP PUT): see `_update`. ``obj`` is copied, never kept;
        ``owned=True`` as in `create`: ``obj`` (a dict) is handed over and the stored
        object returned read-only."""
        if owned and isinstance(obj, dict):
            return self._update(rt, obj, subresource=subresource, dry_run=dry_run, copy=False)
        return self._update(rt, json_copy(dict(obj)), subresource=subresource, dry_run=dry_run)

    def _update(
        self,
        rt: ResourceType,
        new: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        copy: bool = True,
    ) -> Obj:
        """Replace an object (HTTP PUT) with ``new``, which is taken over (the caller keeps
        no reference to it). Returns a copy of the stored object (``copy=False``: the
        stored object itself, read-only). ``subresource="status"`` replaces only status;
        ``"binding"`` (pods only) replaces spec and status together, as the pod registry's
        ``BindingREST`` does in one update.

        ``dry_run=True`` does every check and returns the would-be object; nothing changes.

        A set ``metadata.resourceVersion`` must equal the stored one (`Conflict`
        otherwise). Removing the last finalizer of an object being deleted deletes it.
        Raises `NotFound`, `Conflict`, `Invalid`, `BadRequest`.
        """
        meta = new.get("metadata") or {}
        old = self._get(
            rt, meta.get("namespace") if rt.namespaced else None, str(meta.get("name", ""))
        )
        expected = meta.get("resourceVersion")
        if expected not in (None, "") and str(expected) != old["metadata"]["resourceVersion"]:
            raise Conflict(
                f"Operation cannot be fulfilled on {rt.plural}{'.' + rt.group if rt.group else ''} "
                f'"{old["metadata"]["name"]}": the object has been modified; please apply '
                "your changes to the latest version and try again",
                details={"name": old["metadata"]["name"], "kind": rt.plural},
            )
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if subresource == "status":
            kept = json_copy(old)
            kept["status"] = new.get("status", {})
            new = kept
        elif subresource == "binding":
            pass  # pods/binding writes spec.nodeName and status.conditions in one update
        elif subresource is not None:
            raise NotFound(f"subresource {subresource!r} not found")
        elif rt.has_status:
            new["status"] = json_copy(old.get("status", {}))
        new_meta = new.setdefault("metadata", {})
        for key in (
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if key in old["metadata"]:
                new_meta[key] = old["metadata"][key]
            else:
                new_meta.pop(key, None)
        if new.get("spec") != old.get("spec"):
            new_meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self._validate(rt, old, new)
        if dry_run:
            result = new
        elif new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            result = self._remove(rt, new)
        else:
            result = self._commit(rt, "MODIFIED", new, old)
        return json_copy(result) if copy else result

    def mutate(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        fn: Callable[[Obj], None],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Read-modify-write: ``fn`` edits a copy of the current object in place, which is
        then written with `update` (no conflict possible: nothing runs in between).
        Raises what `get` and `update` raise."""
        current = self.get(rt, namespace, name)
        fn(current)
        current["metadata"]["resourceVersion"] = self._get(rt, namespace, name)["metadata"][
            "resourceVersion"
        ]
        return self._update(rt, current, subresource=subresource)  # a copy already: owned

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
    ) -> Obj:
        """Delete an object, returning its last state.

        Objects with finalizers, and pods bound to a node with a non-zero grace period,
        are only marked (``deletionTimestamp``); see the module docstring. Raises
        `NotFound`, `Conflict` (a failed uid or resourceVersion precondition).
        """
        old = self._get(rt, namespace, name)
        meta = old["metadata"]
        if precondition_uid is not None and precondition_uid != meta["uid"]:
            raise Conflict(
                f"Precondition failed: UID in precondition: {precondition_uid}, UID in object meta: {meta['uid']}"
            )
        if precondition_rv is not None and precondition_rv != meta["resourceVersion"]:
            raise Conflict(
                f"Precondition failed: ResourceVersion in precondition: {precondition_rv}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}"
            )
        graceful = False
        if rt is PODS and (old.get("spec") or {}).get("nodeName"):
            grace = grace_period_seconds
            if grace is None:
                grace = int((old.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            graceful = grace > 0 and old.get("status", {}).get("phase") not in (
                "Succeeded",
                "Failed",
            )
        if meta.get("finalizers") or graceful:
            if meta.get("deletionTimestamp"):
                return json_copy(old)
            new = json_copy(old)
            new["metadata"]["deletionTimestamp"] = rfc3339(self._now())
            if graceful:
                new["metadata"]["deletionGracePeriodSeconds"] = grace
            return json_copy(self._commit(rt, "MODIFIED", new, old))
        return json_copy(self._remove(rt, json_copy(old)))

    def force_remove(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """Remove an object now, ignoring finalizers and grace (what the kubelet's final
        zero-grace delete of a terminated pod amounts to). Raises `NotFound`."""
        return json_copy(self._remove(rt, json_copy(self._get(rt, namespace, name))))

    # -- watch ---------------------------------------------------------------------

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        resource_version: int | None = None,
        predicate: Predicate | None = None,
    ) -> Watcher:
        """Open a watch on ``rt``.

        ``resource_version`` None or 0: synthetic ADDED events for every current match,
        then live changes ("get state and start at most recent"). Otherwise every change
        after that resourceVersion, replayed from history, then live changes.
        Raises `Gone` when the history no longer reaches back to ``resource_version``.
        """
        table = self._tables[rt]
        watcher = Watcher(self, rt, namespace, predicate, self._watch_queue_limit)
        if resource_version:
            if resource_version < table.compacted_rv:
                raise Gone(f"too old resource version: {resource_version} ({table.compacted_rv})")
            for change in table.history:
                if change.rv > resource_version:
                    watcher._offer(change)
        else:
            for (_, _), obj in sorted(table.objects.items()):
                if watcher._matches(obj):
                    watcher._queue.put_nowait(WatchEvent("ADDED", obj))
        table.watchers.add(watcher)
        return watcher

    def compact(self, rt: ResourceType | None = None) -> None:
        """Drop all history (of ``rt``, or of every type), as etcd compaction does:
        watches from any older resourceVersion then get `Gone`."""
        for t in [rt] if rt else list(self._tables):
            table = self._tables[t]
            table.history.clear()
            table.compacted_rv = self._rv

    # -- internals -----------------------------------------------------------------

    def _unsubscribe(self, watcher: Watcher) -> None:
        self._tables[watcher.rt].watchers.discard(watcher)

    def _namespace_for(self, rt: ResourceType, meta: Obj, namespace: str | None) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        ns = meta.get("namespace") or namespace
        if namespace and meta.get("namespace") and meta["namespace"] != namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not ns:
            raise BadRequest("a namespace is required for namespaced resources")
        meta["namespace"] = ns
        return str(ns)

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if rt.namespaced else "", name)

    def _exists(self, rt: ResourceType, namespace: str | None, name: str) -> bool:
        return self._key(rt, namespace, name) in self._tables[rt].objects

    def _get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        try:
            return self._tables[rt].objects[self._key(rt, namespace, name)]
        except KeyError:
            raise NotFound(
                f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}" not found',
                details={"name": name, "group": rt.group, "kind": rt.plural},
            ) from None

    def _validate(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        for validator in self._validators.get(rt, ()):
            validator(old, new)

    def _commit(self, rt: ResourceType, kind: str, new: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        table = self._tables[rt]
        table.objects[self._key(rt, new["metadata"].get("namespace"), new["metadata"]["name"])] = (
            new
        )
        self._record(rt, Change(kind, self._rv, new, old))
        return new

    def _remove(self, rt: ResourceType, last: Obj) -> Obj:
        table = self._tables[rt]
        key = self._key(rt, last["metadata"].get("namespace"), last["metadata"]["name"])
        old = table.objects.pop(key)
        self._rv += 1
        last["metadata"]["resourceVersion"] = str(self._rv)
        self._record(rt, Change("DELETED", self._rv, last, old))
        return last

    def _record(self, rt: ResourceType, change: Change) -> None:
        table = self._tables[rt]
        table.last_rv = change.rv
        table.history.append(change)
        while len(table.history) > self._history_limit:
            table.compacted_rv = table.history.popleft().rv
        for watcher in list(table.watchers):
            watcher._offer(change)
        self._changed.set()
