"""The status writer: scale-up statuses and their Events, written by a task of its own.

`controller.plan.plan` decides what pods are told (`controller.decisions.SetStatus`);
the executor (`controller.executor.Executor`) queues those here and never waits for
them, so a burst of 10,000 pods is told over minutes (the report rate limit) while the
passes go on deleting and marking triggers. The latest status per pod wins, and one
equal to what is being written already is dropped, so no Event is recorded twice.

**A status is never older than the truth.** A status is decided on the pod as the cache
showed it (its ``resourceVersion``, `controller.model.PodRef.version`, written into the
annotation as ``podResourceVersion`` and into the Event's ``involvedObject``), and may
be written seconds later (the rate limit, a slow API server). Before the write, a status
that only holds for a pod without a node (`controller.memory.TRACKED_PHASES`) is
dropped when the pod has left the pending set since (bound or deleted: the planner
decides its final status from the read-back, `controller.memory.Memory.resolve_left`),
or when the pod's annotation already shows a status decided on a newer version of it,
or (``Triggered``, ``Provisioning``) when the trigger it names was deleted since (the
cache's view, our own deletes included: a real API server showed a ``Provisioning``
written 0.7 s after its trigger was deleted).
After the write, the API server's answer is the pod as it is now: if it shows a node,
the status just written raced the binding; its Event is not recorded and the pod is
owed its final status again (`controller.memory.Memory.owe_final`), which the next pass
decides.

**Closing first.** A pod that got its node is told ``Scheduled`` by a writer task of its
own, through write slots of its own and outside the report rate limit (`write_closing`):
one write per pod bound, so its pace is the schedulers' binding pace, and it never waits
behind thousands of open statuses queued at the rate limit. Its Event goes through the
rate limit with the others. A ``Scheduled`` for a pod whose open status is still in
flight waits for that write (per pod, writes land in the order decided). Other final
statuses (``Native``, ``Unresolvable``, ``InvalidIntent``) come before the open ones of
each round of the rate-limited writer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from controller.cache import InformerCache, Kind
from controller.decisions import Event, SetStatus
from controller.memory import TRACKED_PHASES, Memory
from controller.metrics import ControllerMetrics, Lane
from controller.model import ANNOTATION_RETRY, PodRef, ScaleUpStatus, object_meta
from intent.contract import ANNOTATION_SCALE_UP, Phase
from intent.kube import Kube, KubeError
from intent.logs import about

#: Open phases whose status names a live trigger: once the trigger is deleted (its
#: NodeClaim Ready, or its pods regrouped), such a status queued before is stale.
_NAMING_A_TRIGGER = frozenset({Phase.TRIGGERED, Phase.PROVISIONING})

log = logging.getLogger(__name__)

COMPONENT = "gpu-intent-controller"

#: Open statuses written per round of the writer at most: a final status queued during
#: a burst waits for no more than this many writes (8 slots at the report rate).
BATCH = 64


def newer(have: str | None, want: str) -> bool:
    """Whether resourceVersion ``have`` is newer than ``want`` (both as the API server
    gave them). kube-apiserver's are etcd revisions, decimal integers that grow with
    every write (k8s.io/apiserver storage/etcd3 ``APIObjectVersioner``); any other pair
    (unknown, empty) counts as not newer, so nothing is dropped on a guess."""
    if not have or not want or not (have.isdigit() and want.isdigit()):
        return False
    return int(have) > int(want)


#: One API write through the executor's report slots and rate limit
#: (`controller.executor.Executor.write`): the write's lane and its call.
Write = Callable[[Lane, Awaitable[Any]], Awaitable[Any]]
#: Acting on every item, a few at a time (`controller.executor.each`).
Each = Callable[[Callable[[Any], Awaitable[Any]], Sequence[Any]], Awaitable[None]]


def event_body(ref: PodRef, event: Event, now: datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event about pod ``ref`` (what ``kubectl describe pod`` lists).
    Named ``<pod>.<hex time>`` like client-go's recorder; ``count`` 1; its
    ``involvedObject.resourceVersion`` is the pod version the status was decided on, as
    client-go's ``reference.GetReference`` records it."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{ref.name}.{time.time_ns():x}", "namespace": ref.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            **({"resourceVersion": ref.version} if ref.version else {}),
        },
        "reason": event.reason,
        "message": event.message,
        "type": event.type,
        "source": {"component": COMPONENT},
        "reportingComponent": f"gpu-intent.io/{COMPONENT}",
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class StatusWriter:
    """Writes queued statuses (the pod's scale-up annotation, and its retry annotation
    when the status carries a retry state) and their Events, then pokes the loop.

    Args:
        kube: the API adapter.
        cache: the informer cache, told what was written.
        memory: the controller's memory, told of final statuses written (and of pods
            found gone) and of retry states the annotation now shows.
        write: one report write (slots and rate limit are the caller's).
        write_closing: one ``Scheduled`` write (slots of its own, no rate limit).
        each: acts on a batch of statuses a few at a time.
        each_closing: the same for a batch of ``Scheduled`` writes (default ``each``).
        now: wall clock for the Events.
        instance: the Events' ``reportingInstance`` (this replica).
        poke: plan again (written statuses may settle decisions).
        metrics: where ended scale-ups (``gpu_intent_scale_ups_total``) and times to a
            node (``gpu_intent_pod_time_to_node_seconds``) are counted: the
            controller's; by default a fresh `ControllerMetrics` of its own.
    """

    def __init__(
        self,
        kube: Kube,
        cache: InformerCache,
        memory: Memory,
        *,
        write: Write,
        write_closing: Write | None = None,
        each: Each,
        each_closing: Each | None = None,
        now: Callable[[], datetime],
        instance: str,
        poke: Callable[[], None],
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self._kube = kube
        self._metrics = metrics if metrics is not None else ControllerMetrics(CollectorRegistry())
        self._cache = cache
        self._memory = memory
        self._write = write
        self._write_closing = write_closing or write
        self._each = each
        self._each_closing = each_closing or each
        self._now = now
        self._instance = instance
        self._poke = poke
        #: Status writes waiting for the writer, latest per pod (final statuses apart,
        #: written first), and those in flight.
        self._queued: dict[tuple[str, str], SetStatus] = {}
        self._final: dict[tuple[str, str], SetStatus] = {}
        self._writing: dict[tuple[str, str], SetStatus] = {}
        #: ``Scheduled`` statuses, for the closing task.
        self._closing: dict[tuple[str, str], SetStatus] = {}
        #: Set whenever a write ends (the closing task waits on it for a pod whose
        #: other write is in flight).
        self._wrote = asyncio.Event()
        #: Events of final statuses written, recorded after the open statuses queued.
        self._events: list[tuple[PodRef, Event]] = []
        #: Status writes dropped or undone because the pod had moved on (tests, logs).
        self.dropped = 0
        #: The writer tasks, while they run (None before the first status).
        self.task: asyncio.Task[None] | None = None
        self.closing_task: asyncio.Task[None] | None = None

    def queue(self, changes: Sequence[SetStatus]) -> None:
        """Hand status writes to the writer task: the latest per pod wins, and one equal
        to what is being written already is dropped, as is a ``Scheduled`` for a pod no
        longer owed it (`Memory.owes_final`: written already): no duplicate Events.

        An open status that replaces one still queued takes its place in the line, not
        the end of it: behind a burst, a pod whose status moves on every few seconds
        (``Triggered``, ``Provisioning``, ``NodeReady``) would otherwise go to the back
        at each move and keep the first status it was told for as long as the burst
        lasts (a 1,000-pod demo showed a ``Waiting`` kept 21 s while its pods got a
        trigger, a NodeClaim and a node)."""
        for change in changes:
            key = (change.ref.namespace, change.ref.name)
            writing = self._writing.get(key)
            if writing is not None and change.status.same_state(writing.status):
                continue
            if change.status.phase == Phase.SCHEDULED and not self._memory.owes_final(key):
                continue  # written already (a pass planned before that write landed)
            if change.status.phase in TRACKED_PHASES:
                target = self._queued
            elif change.status.phase == Phase.SCHEDULED:
                target = self._closing
            else:
                target = self._final
            for waiting in (self._queued, self._final, self._closing):
                if waiting is not target:
                    waiting.pop(key, None)
            target[key] = change  # a key queued already keeps its place (dict order)
        self._start()

    def _start(self) -> None:
        """Start the writer tasks that have work and are not running."""
        if (self._queued or self._final or self._events) and (
            self.task is None or self.task.done()
        ):
            self.task = asyncio.create_task(self._write_all(), name="status-writer")
        if self._closing and (self.closing_task is None or self.closing_task.done()):
            self.closing_task = asyncio.create_task(self._close_all(), name="closing-writer")

    async def _close_all(self) -> None:
        """Write every ``Scheduled`` queued, until none is left. A pod whose other write
        is in flight (sent, or waiting for its slot or the rate limit) waits for that
        write to end, then is written here: never behind the rate-limited writer's
        batch."""
        while self._closing:
            batch = {k: c for k, c in self._closing.items() if k not in self._writing}
            if not batch:
                self._wrote.clear()
                await self._wrote.wait()  # a write ended: its pod may go now
                continue
            for key in batch:
                del self._closing[key]
            await self._write_batch(batch, closing=True)
            self._start()
        self._poke()

    async def _write_all(self) -> None:
        """Rounds until nothing is queued, each: every final status queued, then up to
        `BATCH` open ones (so a final status queued meanwhile waits for at most that
        many writes), then the final statuses' Events."""
        while self._queued or self._final or self._events:
            final, self._final = self._final, {}
            await self._write_batch(final)
            keys = list(itertools.islice(self._queued, BATCH))
            await self._write_batch({key: self._queued.pop(key) for key in keys})
            events, self._events = self._events, []
            await self._each(lambda item: self._event(*item), events)
        self._poke()  # written statuses may settle decisions: plan again

    async def _write_batch(
        self, batch: dict[tuple[str, str], SetStatus], *, closing: bool = False
    ) -> None:
        """Write ``batch``; each pod counts as being written (``_writing``) from when its
        write is handed to a slot until it ends, not for the whole batch."""
        if not batch:
            return
        act = self._set_closing if closing else self._set_status

        async def one(change: SetStatus) -> bool:
            key = (change.ref.namespace, change.ref.name)
            self._writing[key] = change
            try:
                return await act(change)
            finally:
                if self._writing.get(key) is change:
                    del self._writing[key]
                self._wrote.set()

        await (self._each_closing if closing else self._each)(one, list(batch.values()))

    async def flush(self) -> None:
        """Wait until every queued status is written (tests and shutdown)."""
        while True:
            running = [t for t in (self.task, self.closing_task) if t is not None and not t.done()]
            if not running:
                return
            await asyncio.shield(asyncio.gather(*running, return_exceptions=True))

    async def _set_closing(self, change: SetStatus) -> bool:
        return await self._set_status(change, closing=True)

    def _moved_on(self, change: SetStatus) -> str | None:
        """Why ``change`` no longer holds for its pod as the cache shows it now (None:
        it still may): see the module docstring."""
        if change.status.phase not in TRACKED_PHASES:
            return None
        key = (change.ref.namespace, change.ref.name)
        current = self._cache.current(Kind.PENDING_PODS, key)
        if current is None:
            return "the pod left the pending set (bound or deleted)"
        annotations = object_meta(current).get("annotations") or {}
        shown = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
        if shown is not None and newer(shown.observed, change.ref.version):
            return f"its status {shown.phase} was decided on a newer version of it"
        if shown is not None and change.retry is None and change.status.same_state(shown):
            # A pass planned before an equal write landed (`controller.statuses.knows`
            # would have told nothing): a second Event saying the same (real run 12:
            # 239 `Triggered` Events for 144 pods, most pods two of one trigger).
            return f"it shows {shown.phase} so already"
        trigger = change.status.trigger
        if change.status.phase in _NAMING_A_TRIGGER and trigger:
            namespace, _, name = trigger.partition("/")
            if name and self._cache.current(Kind.TRIGGERS, (namespace, name)) is None:
                return f"its trigger {trigger} was deleted since"
        return None

    async def _set_status(self, change: SetStatus, *, closing: bool = False) -> bool:
        ref = change.ref
        why = self._moved_on(change)
        if why is not None:
            self.dropped += 1
            log.debug("pod %s: not telling %s: %s", ref, change.status.phase, why)
            return True
        status = change.status
        if ref.version:
            status = replace(status, observed=ref.version)
        annotations = {ANNOTATION_SCALE_UP: status.to_annotation()}
        if change.retry is not None:
            annotations[ANNOTATION_RETRY] = change.retry.to_annotation()
        write = self._write_closing if closing else self._write
        try:
            obj = await write(
                Lane.STATUS, self._kube.annotate_pod(ref.namespace, ref.name, annotations)
            )
        except KubeError as e:
            if e.not_found:
                self._memory.forget_scheduled((ref.namespace, ref.name))
                return True  # the pod is gone: nothing left to tell
            log.warning("updating scale-up status of pod %s: %s", ref, e, extra=about(ref))
            return False
        bound = (obj.get("spec") or {}).get("nodeName")
        if bound and change.status.phase in TRACKED_PHASES:
            # The pod was bound before this write landed: the status is older than the
            # pod. No Event for it; the pod is owed its final status again.
            self.dropped += 1
            key = (ref.namespace, ref.name)
            if key not in self._final:  # else its final status is next in line already
                self._memory.owe_final(key, obj)
            log.info(
                "pod %s: %s written after it was bound to %s; owed its final status",
                ref,
                change.status.phase,
                bound,
                extra=about(ref),
            )
            return True
        if change.retry is not None:
            self._memory.release_retry((ref.namespace, ref.name), change.retry)
        self._metrics.record_scale_up(change.status.phase)
        if change.status.phase == Phase.SCHEDULED:
            self._memory.forget_scheduled((ref.namespace, ref.name))
            if change.seconds_to_node is not None:
                self._metrics.time_to_node.observe(max(0.0, change.seconds_to_node))
        elif not (obj.get("spec") or {}).get("nodeName"):
            self._cache.expect(Kind.PENDING_PODS, obj)
        log.info(
            "pod %s: %s: %s", ref, change.status.phase, change.status.message, extra=about(ref)
        )
        if change.event is not None:
            if change.status.phase in TRACKED_PHASES:
                if self._cache.current(Kind.PENDING_PODS, (ref.namespace, ref.name)) is None:
                    return True  # bound (or deleted) since the write: no open Event now
                await self._event(ref, change.event)
            else:
                self._events.append((ref, change.event))
                self._start()
        return True

    async def _event(self, ref: PodRef, event: Event) -> None:
        try:
            await self._write(
                Lane.EVENT,
                self._kube.create_event(
                    ref.namespace, event_body(ref, event, self._now(), self._instance)
                ),
            )
        except KubeError as e:
            log.warning("recording event %s on pod %s: %s", event.reason, ref, e, extra=about(ref))
