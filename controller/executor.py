"""The executor: performs a plan's writes through `intent.kube.Kube`, in lanes.

What stops Karpenter buying comes first: a plan's deletes, marks, node labels and links
are awaited (`Executor.apply`); its trigger creates then run in the background, so the
next passes go on deleting and marking while thousands of creates are in flight; its
statuses are handed to the status writer (`controller.reports.StatusWriter`), which
writes them at the report rate. Every write goes in a lane (`controller.metrics.Lane`,
the ``operation`` label of ``gpu_intent_operations_total``); what saves money (deletes,
marks, links, labels), creates, protections and reports have write slots apart, so a
burst of one never delays another. Each write the API answered is recorded in the informer cache as an
expectation (`controller.cache.InformerCache.expect`). The executor decides nothing:
`controller.plan.plan` and `controller.passes` did.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from aiolimiter import AsyncLimiter

from controller.cache import InformerCache, Kind
from controller.decisions import CreateTrigger, Plan, SetStatus
from controller.failures import NODECLAIM, Protection
from controller.memory import Memory
from controller.metrics import ControllerMetrics, Lane
from controller.model import (
    ANNOTATION_NODECLAIM,
    ANNOTATION_PROTECTED,
    DO_NOT_DISRUPT,
    NODE_LABEL,
    NON_BINDING_SCHEDULER,
    PodRef,
)
from controller.reports import StatusWriter
from controller.statuses import triggered
from controller.triggers import condition_patch
from intent.kube import Kube, KubeError
from intent.logs import about

log = logging.getLogger(__name__)


#: Status and Event writes in flight at most: they are rate limited
#: (``report_writes_per_second``), so a few slots keep up, and each write in flight may
#: hold a connection of its own.
REPORT_CONCURRENCY = 8


async def each(
    act: Callable[[Any], Awaitable[Any]], items: Sequence[Any], concurrency: int
) -> None:
    """``act`` on every item with at most ``concurrency`` in flight, by that many
    workers: 10,000 status writes are 8 coroutines, not 10,000 tasks (which held about
    100 MiB at once)."""
    queue = iter(items)

    async def worker() -> None:
        for item in queue:
            await act(item)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))


class Executor:
    """Performs plans' writes (see the module).

    Args:
        kube: the API adapter.
        cache: told of every write the API answered (expectations).
        memory: the controller's memory, told by the status writer what it wrote.
        namespace: the trigger namespace.
        concurrency: writes in flight at once per lane (the reports' at most
            `REPORT_CONCURRENCY`).
        report_writes_per_second: status and Event writes per second at most.
        now: wall clock (timezone-aware) for conditions, statuses and Events.
        poke: plan again (after the creates, or written statuses).
        instance: the Events' ``reportingInstance`` (this replica).
        metrics: where writes (``gpu_intent_operations_total``) and trigger creations
            are counted.
    """

    def __init__(
        self,
        kube: Kube,
        cache: InformerCache,
        memory: Memory,
        *,
        namespace: str,
        concurrency: int,
        report_writes_per_second: float,
        now: Callable[[], datetime],
        poke: Callable[[], None],
        instance: str,
        metrics: ControllerMetrics,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics
        self.namespace = namespace
        self.concurrency = concurrency
        self._now = now
        self._poke = poke
        #: Write slots for what saves money (deletes, marks, links, node labels) and,
        #: apart, for reports (statuses, Events): a burst of status writes never delays
        #: marking a trigger linked, which is what stops Karpenter buying for it again.
        self._report_concurrency = min(REPORT_CONCURRENCY, concurrency)
        self._writes = asyncio.Semaphore(concurrency)
        self._report_writes = asyncio.Semaphore(self._report_concurrency)
        #: Trigger creates have slots of their own too: thousands of creates in flight
        #: (`_create_all`) never delay a delete or a mark, which stop Karpenter buying.
        #: And protections (`protect`), which run beside the passes.
        self._slots: dict[Lane, asyncio.Semaphore] = {
            Lane.CREATE: asyncio.Semaphore(concurrency),
            Lane.PROTECT: asyncio.Semaphore(concurrency),
        }
        self._report_rate = AsyncLimiter(report_writes_per_second, 1.0)
        #: ``Scheduled`` statuses have slots of their own, as many as the other writes,
        #: and no rate limit: one write per pod bound, paced by the schedulers
        #: (`controller.reports`); a burst of bindings is told within seconds even when
        #: each write takes half a second.
        self._closing_writes = asyncio.Semaphore(concurrency)
        #: The creates of the last plan that had any, still in flight (`apply`).
        self.creates: asyncio.Task[None] | None = None
        #: The status writer: statuses and Events through the report slots and rate.
        self.reports = StatusWriter(
            kube,
            cache,
            memory,
            write=lambda lane, coro: self.write(lane, coro, report=True),
            write_closing=lambda lane, coro: self.write(lane, coro, closing=True),
            each=lambda act, items: each(act, items, self._report_concurrency),
            each_closing=lambda act, items: each(act, items, concurrency),
            now=lambda: self._now(),
            instance=instance,
            poke=poke,
            metrics=metrics,
        )

    async def write(
        self, lane: Lane, coro: Any, *, report: bool = False, closing: bool = False
    ) -> Any:
        """Send one write through its lane's slots (``report``: statuses and Events,
        which also wait for the report rate limit; ``closing``: a ``Scheduled`` status,
        through slots of its own and no rate limit)."""
        try:
            if report:
                await self._report_rate.acquire()
            default = self._report_writes if report else self._writes
            if closing:
                default = self._closing_writes
            async with self._slots.get(lane, default):
                try:
                    result = await coro
                except KubeError:
                    self.metrics.operations.labels(lane, "error").inc()
                    raise
        finally:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()  # cancelled while waiting for a slot: never sent
        self.metrics.operations.labels(lane, "ok").inc()
        return result

    async def each(
        self,
        act: Callable[[Any], Awaitable[Any]],
        items: Sequence[Any],
        concurrency: int | None = None,
    ) -> None:
        """`each` with at most ``concurrency`` (default the executor's) in flight."""
        await each(act, items, concurrency or self.concurrency)

    async def apply(self, decided: Plan) -> None:
        """Perform a plan's writes, money first: deletes and marks (what stops Karpenter
        buying) with the node labels and links, awaited; then the creates start in the
        background (`creating`). Status annotations and Events are queued for the status
        writer, so a pass never waits behind them. Failures are logged; the next pass
        retries."""
        # What stops Karpenter buying comes first, and takes the write slots first: the
        # deletes of triggers no pod needs and the marks of triggers whose NodeClaim is
        # known (Karpenter buys for an Unschedulable trigger every batch window). Node
        # labels come next and before the creates: new triggers exclude nodes by them.
        await asyncio.gather(
            *(self._delete(d.ref, d.reason) for d in decided.deletes),
            *(self._delete_claim(c.name, c.reason) for c in decided.claim_deletes),
            *(self._mark(m.ref, m.node_claim) for m in decided.marks),
            *(self._label(n.node, n.value) for n in decided.labels),
            *(self._link(link.ref, link.node_claim) for link in decided.links),
        )
        # Statuses never concern the pods of a create (`_create` tells those).
        self.queue_statuses(decided.statuses)
        if decided.creates:
            # The creates run on while the next passes decide: against a slow API server
            # a pass's creates may take minutes, and a trigger whose pods got a node
            # meanwhile must still be deleted or marked within Karpenter's batch window.
            self.creates = asyncio.create_task(self._create_all(decided.creates), name="creates")

    @property
    def creating(self) -> bool:
        """Whether a plan's trigger creates are still in flight."""
        return self.creates is not None and not self.creates.done()

    async def wait_creates(self) -> None:
        """Wait until the creates in flight are done (tests and shutdown)."""
        while self.creates is not None and not self.creates.done():
            await asyncio.shield(self.creates)

    def queue_statuses(self, changes: Sequence[SetStatus]) -> None:
        """Hand status writes to the status writer (`controller.reports.StatusWriter`)."""
        self.reports.queue(changes)

    async def flush_statuses(self) -> None:
        """Wait until every queued status is written (tests and shutdown)."""
        await self.reports.flush()

    async def _create_all(self, creates: Sequence[CreateTrigger]) -> None:
        """Create ``creates``; then plan again. Each worker creates a trigger and marks it
        before it takes the next, so a trigger is provisionable (marked Unschedulable) as
        soon as it exists, not after every other create of the pass."""
        try:
            await self.each(lambda c: self._create(c.body, c.gpus, c.group.pool, c.serves), creates)
        finally:
            self._poke()

    async def protect(self, changes: Sequence[Protection]) -> None:
        """Set or remove ``karpenter.sh/do-not-disrupt`` as ``changes`` say
        (`controller.failures.protections`)."""
        await self.each(self._protect_one, changes)

    async def _protect_one(self, change: Protection) -> None:
        value = "true" if change.protect else None
        annotations = {DO_NOT_DISRUPT: value, ANNOTATION_PROTECTED: value}
        on_claim = change.kind == NODECLAIM
        try:
            obj = await self.write(
                Lane.PROTECT,
                self.kube.annotate_nodeclaim(change.name, annotations)
                if on_claim
                else self.kube.annotate_node(change.name, annotations),
            )
        except KubeError as e:
            if not e.not_found:
                log.warning("protecting %s %s: %s", change.kind, change.name, e)
            return
        self.cache.expect(Kind.NODECLAIMS if on_claim else Kind.NODES, obj)
        log.info(
            "%s %s %s",
            change.kind,
            change.name,
            f"protected ({DO_NOT_DISRUPT}=true)" if change.protect else "no longer protected",
        )

    async def _mark(self, ref: PodRef, node_claim: str | None = None) -> None:
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = condition_patch(stamp, node_claim)
        reason = patch["status"]["conditions"][0]["reason"]
        try:
            obj = await self.write(
                Lane.MARK, self.kube.patch_pod_status(ref.namespace, ref.name, patch)
            )
        except KubeError as e:
            log.warning("marking trigger %s %s: %s", ref, reason, e, extra=about(ref))
            return
        self.cache.expect(Kind.TRIGGERS, obj)
        log.info("trigger %s marked PodScheduled=False reason %s", ref, reason, extra=about(ref))

    async def _link(self, ref: PodRef, node_claim: str) -> None:
        try:
            obj = await self.write(
                Lane.LINK,
                self.kube.annotate_pod(ref.namespace, ref.name, {ANNOTATION_NODECLAIM: node_claim}),
            )
        except KubeError as e:
            log.warning(
                "linking trigger %s to nodeclaim %s: %s", ref, node_claim, e, extra=about(ref)
            )
            return
        self.cache.expect(Kind.TRIGGERS, obj)
        log.info("trigger %s -> nodeclaim/%s", ref, node_claim, extra=about(ref))

    async def _label(self, node: str, value: str) -> None:
        try:
            obj = await self.write(Lane.LABEL, self.kube.label_node(node, {NODE_LABEL: value}))
        except KubeError as e:
            log.warning("labelling node %s: %s", node, e, extra=about(node))
            return
        self.cache.expect(Kind.NODES, obj)
        log.info("node %s labelled %s=%s", node, NODE_LABEL, value, extra=about(node))

    async def _delete_claim(self, name: str, reason: str) -> None:
        try:
            await self.write(Lane.DELETE_NODECLAIM, self.kube.delete_nodeclaim(name))
        except KubeError as e:
            log.warning("deleting nodeclaim %s: %s", name, e)
            return
        log.info("deleted nodeclaim %s: %s", name, reason)

    async def _delete(self, ref: PodRef, reason: str) -> None:
        try:
            await self.write(Lane.DELETE, self.kube.delete_pod(ref.namespace, ref.name, ref.uid))
        except KubeError as e:
            log.warning("deleting trigger %s: %s", ref, e, extra=about(ref))
            return
        self.cache.expect_deleted(Kind.TRIGGERS, (ref.namespace, ref.name))
        log.info("deleted trigger %s: %s", ref, reason, extra=about(ref))

    async def _create(
        self, body: Mapping[str, Any], gpus: int, pool: str, serves: tuple[PodRef, ...]
    ) -> None:
        try:
            obj = await self.write(Lane.CREATE, self.kube.create_pod(self.namespace, body))
        except KubeError as e:
            if e.conflict:  # the name is the trigger's identity: it exists, none is made twice
                log.info(
                    "trigger %s/%s exists already (an earlier create, or one being deleted)",
                    self.namespace,
                    body.get("metadata", {}).get("name", ""),
                )
                return
            log.warning("creating trigger for %s: %s", ", ".join(map(str, serves)), e)
            return
        self.cache.expect(Kind.TRIGGERS, obj)
        self.metrics.triggers_created.labels(pool).inc()
        name = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        log.info(
            "created trigger %s: %d GPU on NodePool %s for %s",
            name,
            gpus,
            pool,
            ", ".join(map(str, serves)),
            extra=about(name),
        )
        if (obj.get("spec") or {}).get("schedulerName") == NON_BINDING_SCHEDULER:
            await self._mark(PodRef(obj["metadata"]["namespace"], obj["metadata"]["name"]))
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        status, event = triggered(name, gpus, pool, stamp)
        self.queue_statuses([SetStatus(ref, status, event) for ref in serves])
