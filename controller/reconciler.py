"""The controller: informers feed the cache, one loop plans and applies.

Shape (Karpenter's provisioner, in small): watch handlers only update `ClusterState`
and poke a debouncer; the loop waits until every informer has listed once, then per
pass takes a `Snapshot`, calls the pure `plan`, and applies the result through `Kube`.
Passes run after changes settle (``idle_seconds`` without a change, at most
``max_delay_seconds`` after the first) and at least every ``resync_seconds`` (time alone
moves some decisions, e.g. the NodeReady cover expiring).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiolimiter import AsyncLimiter
from prometheus_client import CollectorRegistry

from controller.decisions import CreateTrigger, Plan, PlanConfig, SetStatus, without_creates
from controller.dra_intents import DRA_INFORMERS, DraIntents, dra_served
from controller.failures import NODECLAIM, Protection, TokenBucket, protections
from controller.incremental import IncrementalPlanner
from controller.informer import Informer, InformerSpec
from controller.leader import LeaderElector, LeadershipLost
from controller.metrics import ControllerMetrics, NodeClaimPhases
from controller.model import (
    ANNOTATION_NODECLAIM,
    ANNOTATION_PROTECTED,
    DO_NOT_DISRUPT,
    NODE_LABEL,
    NODEPOOL_LABEL,
    NON_BINDING_SCHEDULER,
    PodRef,
    ScaleUpStatus,
)
from controller.reports import StatusWriter
from controller.state import (
    NAMESPACES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    NOMINATIONS,
    PENDING_PODS,
    REFUSALS,
    TRACKED_PHASES,
    TRIGGERS,
    ClusterState,
)
from controller.statuses import triggered
from controller.triggers import condition_patch
from intent import kube as kube_api
from intent.contract import (
    ANNOTATION_SCALE_UP,
    INJECT_LABEL,
    INJECT_VALUE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TRIGGER_LABEL,
    TRIGGER_LABEL_VALUE,
)
from intent.kube import Kube, KubeError
from intent.logs import about

log = logging.getLogger(__name__)

#: Seconds the executor holds a pod's new retry state after its trigger failed (the
#: status writer, rate limited, writes the annotation well within that).
RETRY_HOLD_SECONDS = 120.0


#: Status and Event writes in flight at most: they are rate limited
#: (``report_writes_per_second``), so a few slots keep up, and each write in flight may
#: hold a connection of its own.
REPORT_CONCURRENCY = 8


#: While creates are in flight, seconds between passes at least (`Controller._worth_a_pass`):
#: Karpenter's batch idle window (1 s, ``BATCH_IDLE_DURATION``), within which a trigger
#: whose pods got a node must be deleted or marked.
INFLIGHT_PASS_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Controller settings; ``plan`` holds the decision settings (see `PlanConfig`).

    Times in seconds. A pass runs ``idle_seconds`` after changes stop, at most
    ``max_delay_seconds`` after the first: well inside Karpenter's 1 s batch idle window,
    so a trigger whose pods already got a node is deleted before Karpenter acts on it
    again. ``concurrency``: API writes in flight at once.
    """

    plan: PlanConfig = field(default_factory=PlanConfig)
    idle_seconds: float = 0.1
    max_delay_seconds: float = 0.5
    resync_seconds: float = 5.0
    watch_seconds: int = 300
    concurrency: int = 32
    #: Status and Event writes per second at most (a leaky bucket, ``aiolimiter``): a
    #: burst of 10,000 pods is told over minutes rather than in one storm of API writes.
    #: Trigger creates, deletes, marks and links are not limited: they spend or save money.
    report_writes_per_second: float = 50.0
    #: Trigger creations per second at most (a token bucket of that many per second,
    #: `controller.failures.TokenBucket`, burst ``max(1, rate)``); 0: no limit.
    trigger_creates_per_second: float = 0.0
    #: How long a NodeClaim bought for our triggers stays protected from disruption
    #: (``karpenter.sh/do-not-disrupt``) after it is Ready, unless a pod we served is
    #: bound to its node sooner (`controller.failures.wants_protection`).
    protect_seconds: float = 120.0
    #: DRA: ``auto`` follows ResourceClaims and ResourceSlices when the API server serves
    #: ``resource.k8s.io/v1`` (Kubernetes 1.34+), ``on`` always, ``off`` never
    #: (`controller.dra`).
    dra: str = "auto"

    @property
    def namespace(self) -> str:
        return self.plan.trigger.namespace


#: The label selector of trigger pods: both ownership labels.
TRIGGER_SELECTOR = f"{TRIGGER_LABEL}={TRIGGER_LABEL_VALUE},{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


def informer_specs(namespace: str, metrics: ControllerMetrics) -> list[InformerSpec]:
    """What the controller watches, triggers living in ``namespace`` (the DRA objects
    are added when followed: `controller.dra_intents.DRA_INFORMERS`); NodeClaims'
    provisioning phases are observed into ``metrics`` (`NodeClaimPhases`)."""
    return [
        # Pending pods outside the trigger namespace: the triggers have an informer
        # of their own, and seen here too each of their writes (create, mark, link)
        # would come twice (``metadata.namespace`` is a field every kube-apiserver
        # resource can be selected by, ``!=`` included: apimachinery pkg/fields).
        InformerSpec(
            PENDING_PODS,
            kube_api.PODS,
            field_selector=f"spec.nodeName=,metadata.namespace!={namespace}",
        ),
        InformerSpec(TRIGGERS, kube_api.PODS, namespace=namespace, label_selector=TRIGGER_SELECTOR),
        InformerSpec(NODECLAIMS, kube_api.NODECLAIMS, observe=NodeClaimPhases(metrics).observe),
        InformerSpec(NODEPOOLS, kube_api.NODEPOOLS),
        InformerSpec(NODES, kube_api.NODES, label_selector=NODEPOOL_LABEL),
        InformerSpec(
            NAMESPACES, kube_api.NAMESPACES, label_selector=f"{INJECT_LABEL}={INJECT_VALUE}"
        ),
        InformerSpec(
            NOMINATIONS, kube_api.EVENTS, namespace=namespace, field_selector="reason=Nominated"
        ),
        InformerSpec(
            REFUSALS,
            kube_api.EVENTS,
            namespace=namespace,
            field_selector="reason=FailedScheduling",
        ),
    ]


class Controller:
    """Runs informers and the reconcile loop against one API server.

    Args:
        kube: the API adapter (its lifetime is the caller's).
        config: settings.
        now: wall clock (timezone-aware) for statuses and planning.
        monotonic: clock for debouncing and expectations.
        elector: when given, informers run (and ``ready`` is set) on every replica, but
            passes and writes only while ``elector`` holds the leader Lease; `run` then
            raises `LeadershipLost` when it is lost.
        metrics: the controller's metrics, handed to its informers and status writer
            too, and served by `controller.server` (``kube`` and ``elector`` count on
            theirs: give them the same one). By default a fresh `ControllerMetrics` on
            a registry of its own.
    """

    def __init__(
        self,
        kube: Kube,
        config: ControllerConfig,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        elector: LeaderElector | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.kube = kube
        self.metrics = metrics if metrics is not None else ControllerMetrics(CollectorRegistry())
        self.elector = elector
        self.config = config
        self.now = now
        self.state = ClusterState(monotonic)
        self.planner = IncrementalPlanner(self.state, config.plan)
        self._monotonic = monotonic
        rate = config.trigger_creates_per_second
        self._create_rate = TokenBucket(rate, max(1.0, rate), monotonic()) if rate > 0 else None
        self._poked = asyncio.Event()
        #: When the first poke not yet answered by a pass that could create came in
        #: (`time.monotonic`; None: none waiting): the debounce's deadline counts from it.
        self._waiting_since: float | None = None
        #: Write slots for what saves money (deletes, marks, links, node labels,
        #: protections) and, apart, for reports (statuses, Events): a burst of status
        #: writes never delays marking a trigger linked, which is what stops Karpenter
        #: buying for it again.
        self._report_concurrency = min(REPORT_CONCURRENCY, config.concurrency)
        self._writes = asyncio.Semaphore(config.concurrency)
        self._report_writes = asyncio.Semaphore(self._report_concurrency)
        #: Trigger creates have slots of their own too: thousands of creates in flight
        #: (`_create_all`) never delay a delete or a mark, which stop Karpenter buying.
        self._create_writes = asyncio.Semaphore(config.concurrency)
        #: And protections (`_protect`), which run beside the passes.
        self._protect_writes = asyncio.Semaphore(config.concurrency)
        self._slots_by_operation = {"create": self._create_writes, "protect": self._protect_writes}
        self._report_rate = AsyncLimiter(config.report_writes_per_second, 1.0)
        #: The background read-back of pods that left the pending set (`_read_left`).
        self._reader: asyncio.Task[None] | None = None
        #: The creates of the last pass that decided any, still in flight (`apply`): the
        #: passes meanwhile decide and write everything but creates.
        self._creating: asyncio.Task[None] | None = None
        #: The do-not-disrupt writes of the last pass that had any (`_protect`).
        self._protector: asyncio.Task[None] | None = None
        #: When the last pass started (monotonic seconds), and what it saw of the inputs
        #: that can make deletes and marks (`_worth_a_pass`).
        self._last_pass = float("-inf")
        self._money_seen: tuple[int, ...] = ()
        self.informers = [
            Informer(
                kube,
                spec,
                self.state,
                self._poke,
                watch_seconds=config.watch_seconds,
                metrics=self.metrics,
            )
            for spec in informer_specs(config.namespace, self.metrics)
        ]
        self.ready = asyncio.Event()
        #: Plan-and-apply passes completed (`reconcile_once`), for tests to wait on "a
        #: pass ran after X" (its creates may still be in flight: `creating`).
        self.passes_done = 0
        #: Graceful shutdown (`controller.shutdown`): set when it begins (``/readyz``
        #: answers 503); ``passing`` is held during each pass, so taking it waits for the
        #: pass in flight to finish its writes and keeps the next from starting.
        self.stopping = asyncio.Event()
        self.passing = asyncio.Lock()
        #: Whether the DRA informers run (`_follow_dra`), and the recording of DRA pods'
        #: intents (each pass while they do).
        self.dra = False
        self._dra_intents = DraIntents(
            kube, self.state, config.plan.trigger.gpu_name_label, write=self._write, each=self._each
        )
        #: The status writer: statuses and Events through the report slots and rate.
        self.reports = StatusWriter(
            kube,
            self.state,
            write=lambda operation, coro: self._write(operation, coro, report=True),
            each=lambda act, items: self._each(act, items, self._report_concurrency),
            now=lambda: self.now(),
            instance=os.environ.get("POD_NAME") or socket.gethostname(),
            poke=self._poke,
            metrics=self.metrics,
        )

    async def _follow_dra(self) -> None:
        """Add the ResourceClaim and ResourceSlice informers when DRA is on
        (`controller.dra_intents.dra_served`)."""
        if self.dra or not await dra_served(self.kube, self.config.dra):
            return
        self.dra = True
        log.info("following DRA ResourceClaims and ResourceSlices (resource.k8s.io/v1)")
        for spec in DRA_INFORMERS:
            self.informers.append(
                Informer(
                    self.kube,
                    spec,
                    self.state,
                    self._poke,
                    watch_seconds=self.config.watch_seconds,
                    metrics=self.metrics,
                )
            )

    async def run(self) -> None:
        """Run until cancelled. With an elector, raises `LeadershipLost` once this
        replica has lost the Lease and stopped writing."""
        await self._follow_dra()
        try:
            async with asyncio.TaskGroup() as group:
                for informer in self.informers:
                    group.create_task(informer.run(), name=f"informer-{informer.spec.kind}")
                group.create_task(self._loop(), name="reconcile")
        except BaseExceptionGroup as e:
            lost = e.subgroup(LeadershipLost)
            if lost is not None:
                raise lost.exceptions[0] from None
            raise
        finally:
            await self._stop_writers()

    async def _stop_writers(self) -> None:
        for task in (self._creating, self._protector, self.reports.task, self._reader):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()
        log.info("caches synced (trigger namespace %s)", self.config.namespace)
        self.ready.set()
        if self.elector is None:
            await self._lead()
        else:
            await self.elector.run(self._lead)

    async def _lead(self) -> None:
        """Plan and apply until cancelled; on the way out, stop the status writer and
        the read-back at once (a replica that lost the Lease writes nothing more)."""
        try:
            if self.elector is not None:
                await self._adopt_triggers()
            await self._find_bound()
            log.info("reconciling")
            self._poke()  # plan at once, not after a resync period
            while True:
                await self._settle()
                if self.creating and not await self._worth_a_pass():
                    continue
                async with self.passing:  # held by a graceful shutdown: no new pass
                    try:
                        await self.reconcile_once()
                    except Exception:  # a bug in one pass must not end the controller
                        log.exception("reconcile pass failed; retrying after the next change")
        finally:
            await self._stop_writers()

    def _money_inputs(self) -> tuple[int, ...]:
        """Versions of what can turn a trigger unneeded or linked (a delete or a mark):
        NodeClaims, Nodes, nominations, FailedScheduling Events, NodePools, opted-in
        namespaces, covers, and pods leaving the pending set."""
        state = self.state
        kinds = (NODECLAIMS, NODES, NOMINATIONS, REFUSALS, NODEPOOLS, NAMESPACES)
        return (
            *(state.version(kind) for kind in kinds),
            state.covers_version(),
            state.departures(),
        )

    async def _worth_a_pass(self) -> bool:
        """While creates are in flight, a pass can only delete, mark, link, label and
        report (`apply`), and planning 10,000 pods each time would take the CPU the
        creates need: run one only when something it could act on moved since the last
        pass (`_money_inputs`), at most once per `INFLIGHT_PASS_SECONDS`. False: skip
        this turn (the end of the creates pokes the loop)."""
        if self._money_inputs() == self._money_seen:
            return False
        wait = self._last_pass + INFLIGHT_PASS_SECONDS - self._monotonic()
        if wait > 0 and self._creating is not None:
            await asyncio.wait({self._creating}, timeout=wait)
        return True

    async def _find_bound(self) -> None:
        """Before the first pass: find the pods told a tracked phase (``Triggered``,
        ``Provisioning``, ``NodeReady``...) that are bound already. They got their node
        while no controller ran (a restart, a leader change), so no watch saw them leave
        the pending set; without this they kept ``Provisioning`` for ever. They are owed
        their final ``Scheduled`` status like pods seen leaving (`ClusterState.resolve_left`).
        One paged list of bound pods, each page reduced to those as it arrives."""

        def keep(obj: kube_api.Obj) -> kube_api.Obj:
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
            return obj if status is not None and status.phase in TRACKED_PHASES else {}

        while True:
            try:
                items, _ = await self.kube.list(
                    kube_api.PODS, field_selector="spec.nodeName!=", keep=keep
                )
                break
            except KubeError as e:
                log.warning("reading bound pods before the first pass: %s; retrying", e)
                await asyncio.sleep(1.0)
        found = [obj for obj in items if obj]
        for obj in found:
            meta = obj["metadata"]
            self.state.resolve_left((meta["namespace"], meta["name"]), obj)
        if found:
            log.info("%d pods got a node while no controller ran; telling them", len(found))

    async def _adopt_triggers(self) -> None:
        """Before a new leader's first pass: read the trigger pods from the API server
        and hold every one its cache does not show yet as expected, so triggers the
        former leader created just before it stopped, whose watch events have not
        arrived here, are never created a second time (their names embed the creation
        second, so a later create would not collide)."""
        while True:
            try:
                items, _ = await self.kube.list(
                    kube_api.PODS,
                    namespace=self.config.namespace,
                    label_selector=TRIGGER_SELECTOR,
                )
                break
            except KubeError as e:
                log.warning("reading triggers before leading: %s; retrying", e)
                await asyncio.sleep(1.0)
        adopted = 0
        for obj in items:
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            if self.state.current(TRIGGERS, key) is None:
                self.state.expect(TRIGGERS, obj)
                adopted += 1
        log.info("leading: %d triggers live, %d not yet in the cache", len(items), adopted)

    def _poke(self) -> None:
        """Something changed: plan again (after `_settle`)."""
        if self._waiting_since is None:
            self._waiting_since = time.monotonic()
        self._poked.set()

    async def _settle(self) -> None:
        """Wait for a poke (or the resync period), then for changes to go quiet: at most
        ``max_delay_seconds`` after the first change no pass able to create has answered
        yet. Changes that came in while a pass's creates were in flight have waited
        already: once the creates end, the next pass is not delayed again (in a burst,
        changes never go quiet, and each round of creates paid the whole delay).

        ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can
        swallow a cancellation that arrives as the inner wait completes (CPython
        gh-86296), and the controller then ignored SIGTERM."""
        cfg = self.config
        try:
            async with asyncio.timeout(cfg.resync_seconds):
                await self._poked.wait()
        except TimeoutError:
            return
        deadline = (self._waiting_since or time.monotonic()) + cfg.max_delay_seconds
        while True:
            self._poked.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                async with asyncio.timeout(min(cfg.idle_seconds, remaining)):
                    await self._poked.wait()
            except TimeoutError:
                return

    async def _read_left(self) -> None:
        """Read back the pods that left the pending set while being scaled up for: the
        watch's DELETED carries their previous state, so only a read says whether they
        were bound (and where) or deleted (REFERENCE.md section 6)."""

        async def read(key: tuple[str, str]) -> None:
            try:
                current = await self.kube.get_pod(*key)  # a read: not in the writes metric
            except KubeError as e:
                log.warning("reading pod %s/%s after it left the pending set: %s", *key, e)
                return  # stays in state.left(): read again next pass
            if current is None:
                self.metrics.record_scale_up(None)  # deleted before it got a node: cancelled
            self.state.resolve_left(key, current)

        await self._each(read, self.state.left())

    async def reconcile_once(self) -> Plan:
        """One pass: snapshot, plan, apply; then pods that left the pending set are read
        back by a background task (`read_left`), whose findings (final statuses, GPUs
        taken on a node) the next pass uses. A pass never waits for those reads: a pod
        that left needs no trigger whatever the read says, and a burst of bindings must
        not delay the next pass, which deletes the triggers they made unneeded and marks
        new ones linked (Karpenter buys again for a trigger left Unschedulable for a
        batch window). Returns the plan applied."""
        started = time.perf_counter()
        self._last_pass = self._monotonic()
        self._money_seen = self._money_inputs()
        if not self.creating:
            self._waiting_since = None  # this pass answers every change so far
        if self.dra:
            await self._dra_intents.record()
        bucket = self._create_rate
        tokens = bucket.available(self._monotonic()) if bucket is not None else None
        done = self.planner.run(self.now(), tokens)
        self.metrics.plan_seconds.observe(time.perf_counter() - started)  # deciding, no writes
        decided = done.plan
        if self.creating and decided.creates:
            # The last pass's creates are still in flight: this pass deletes, marks,
            # links, labels and reports, and leaves creating to a pass after them (a
            # trigger's name carries the second it was planned in, so creating again
            # for the same pods now could make a second trigger for them).
            decided = without_creates(decided)
        if bucket is not None and decided.creates:
            bucket.take(len(decided.creates), self._monotonic())
            if not bucket.available(self._monotonic()):
                # Demand may be waiting for tokens: plan again once one is back.
                asyncio.get_running_loop().call_later(
                    bucket.seconds_to_next(self._monotonic()) + 0.01, self._poke
                )
        if decided:
            await self.apply(decided)
        if self._protector is None or self._protector.done():
            # In the background: protecting hundreds of new NodeClaims and Nodes must not
            # hold the next pass's deletes and marks (consolidation is seconds away at
            # the earliest: consolidateAfter plus Karpenter's 15 s re-validation).
            self._protector = asyncio.create_task(self._protect(), name="protect")
        if self.state.left() and (self._reader is None or self._reader.done()):
            self._reader = asyncio.create_task(self.read_left(), name="read-left")
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        self._observe(done.phases, decided)
        self.passes_done += 1
        return decided

    async def read_left(self) -> None:
        """Read back the pods that left the pending set (one round: a read that failed
        is tried again after the next pass), then poke the loop when a read settled any
        of them (a final status is owed, or what they took of a node changed). Failed
        reads alone poke nothing: against a failing API server they wait for the next
        pass instead of driving a pass per round."""
        before = len(self.state.left())
        await self._read_left()
        if len(self.state.left()) < before:
            self._poke()

    def _observe(self, phases: Mapping[str, int], decided: Plan) -> None:
        metrics = self.metrics
        metrics.pending_pods.clear()
        for phase, count in phases.items():
            metrics.pending_pods.labels(phase).set(count)
        metrics.triggers.set(self.state.count(TRIGGERS))
        metrics.demand_gpus.clear()
        for key, gpus in decided.demand.items():
            metrics.demand_gpus.labels(key.pool, key.model or "any").set(float(gpus))

    async def _write(self, operation: str, coro: Any, *, report: bool = False) -> Any:
        """Send one write through its pool of slots (``report``: statuses and Events,
        which also wait for the report rate limit)."""
        try:
            if report:
                await self._report_rate.acquire()
            default = self._report_writes if report else self._writes
            async with self._slots_by_operation.get(operation, default):
                try:
                    result = await coro
                except KubeError:
                    self.metrics.operations.labels(operation, "error").inc()
                    raise
        finally:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()  # cancelled while waiting for a slot: never sent
        self.metrics.operations.labels(operation, "ok").inc()
        return result

    async def apply(self, decided: Plan) -> None:
        """Apply a plan, money first: deletes and marks (what stops Karpenter buying; pods
        told NodeReady are covered before their trigger goes) with the node labels and
        links, awaited; then the creates start in the background (`creating`), and passes
        go on deciding meanwhile (`without_creates`). Status annotations and Events are
        queued for the status writer, so a pass never waits behind them. Failures are
        logged; the next pass retries."""
        now = self.now()
        for delete in decided.deletes:
            if delete.node_claim and delete.cover:
                self.state.cover(
                    ((r.namespace, r.name) for r in delete.cover), delete.node_claim, now
                )
        # A cover may outlive cover_seconds while the schedulers are binding
        # (`controller.capacity.cover_holds`): the record is kept as long as it may hold.
        plan_config = self.config.plan
        self.state.expire_covers(
            now - timedelta(seconds=max(plan_config.cover_seconds, plan_config.cover_max_seconds))
        )
        for delete in decided.deletes:
            for ref, retry in delete.retries:
                self.state.hold_retry((ref.namespace, ref.name), retry, now)
            if delete.orphan is not None:
                self.state.removed(delete.orphan, now)
        # Held until the status writer has surely written them (it is rate limited).
        self.state.expire_retries(now - timedelta(seconds=RETRY_HOLD_SECONDS))
        self.state.expire_removals(now - timedelta(seconds=self.config.plan.cooldown_seconds))
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
        self._queue_statuses(decided.statuses)
        if decided.creates:
            # The creates run on while the next passes decide: against a slow API server
            # a pass's creates may take minutes, and a trigger whose pods got a node
            # meanwhile must still be deleted or marked within Karpenter's batch window.
            self._creating = asyncio.create_task(self._create_all(decided.creates), name="creates")

    @property
    def creating(self) -> bool:
        """Whether a pass's trigger creates are still in flight."""
        return self._creating is not None and not self._creating.done()

    async def wait_creates(self) -> None:
        """Wait until the creates in flight are done (tests and shutdown)."""
        while self._creating is not None and not self._creating.done():
            await asyncio.shield(self._creating)

    async def _create_all(self, creates: Sequence[CreateTrigger]) -> None:
        """Create ``creates``; then plan again. Each worker creates a trigger and marks it
        before it takes the next, so a trigger is provisionable (marked Unschedulable) as
        soon as it exists, not after every other create of the pass."""
        try:
            await self._each(
                lambda c: self._create(c.body, c.gpus, c.group.pool, c.serves), creates
            )
        finally:
            self._poke()

    async def _each(
        self,
        act: Callable[[Any], Awaitable[Any]],
        items: Sequence[Any],
        concurrency: int | None = None,
    ) -> None:
        """``act`` on every item with at most ``concurrency`` (default the config's) in
        flight, by that many workers: 10,000 status writes are 8 coroutines, not 10,000
        tasks (which held about 100 MiB at once)."""
        queue = iter(items)
        workers = min(concurrency or self.config.concurrency, len(items))

        async def worker() -> None:
            for item in queue:
                await act(item)

        await asyncio.gather(*(worker() for _ in range(workers)))

    def _queue_statuses(self, changes: Sequence[SetStatus]) -> None:
        """Hand status writes to the status writer (`controller.reports.StatusWriter`)."""
        self.reports.queue(changes)

    @property
    def _writer(self) -> asyncio.Task[None] | None:
        """The status writer's task, while it runs."""
        return self.reports.task

    async def flush_statuses(self) -> None:
        """Wait until every queued status is written (tests and shutdown)."""
        await self.reports.flush()

    async def _mark(self, ref: PodRef, node_claim: str | None = None) -> None:
        stamp = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = condition_patch(stamp, node_claim)
        reason = patch["status"]["conditions"][0]["reason"]
        try:
            obj = await self._write(
                "mark", self.kube.patch_pod_status(ref.namespace, ref.name, patch)
            )
        except KubeError as e:
            log.warning("marking trigger %s %s: %s", ref, reason, e, extra=about(ref))
            return
        self.state.expect(TRIGGERS, obj)
        log.info("trigger %s marked PodScheduled=False reason %s", ref, reason, extra=about(ref))

    async def _link(self, ref: PodRef, node_claim: str) -> None:
        try:
            obj = await self._write(
                "link",
                self.kube.annotate_pod(ref.namespace, ref.name, {ANNOTATION_NODECLAIM: node_claim}),
            )
        except KubeError as e:
            log.warning(
                "linking trigger %s to nodeclaim %s: %s", ref, node_claim, e, extra=about(ref)
            )
            return
        self.state.expect(TRIGGERS, obj)
        log.info("trigger %s -> nodeclaim/%s", ref, node_claim, extra=about(ref))

    async def _label(self, node: str, value: str) -> None:
        try:
            obj = await self._write("label", self.kube.label_node(node, {NODE_LABEL: value}))
        except KubeError as e:
            log.warning("labelling node %s: %s", node, e, extra=about(node))
            return
        self.state.expect(NODES, obj)
        log.info("node %s labelled %s=%s", node, NODE_LABEL, value, extra=about(node))

    async def _protect(self) -> None:
        """Set or remove ``karpenter.sh/do-not-disrupt`` on the NodeClaims bought for our
        triggers and their Nodes (`controller.failures.protections`), from the cache as
        it is now."""
        live = frozenset(name for _, name in self.state.keys(TRIGGERS))
        changes = protections(
            self.state.nodeclaims(),
            self.state.nodes(),
            live,
            self.state.used(),
            self.now(),
            self.config.protect_seconds,
        )
        await self._each(self._protect_one, changes)

    async def _protect_one(self, change: Protection) -> None:
        value = "true" if change.protect else None
        annotations = {DO_NOT_DISRUPT: value, ANNOTATION_PROTECTED: value}
        on_claim = change.kind == NODECLAIM
        try:
            obj = await self._write(
                "protect",
                self.kube.annotate_nodeclaim(change.name, annotations)
                if on_claim
                else self.kube.annotate_node(change.name, annotations),
            )
        except KubeError as e:
            if not e.not_found:
                log.warning("protecting %s %s: %s", change.kind, change.name, e)
            return
        self.state.expect(NODECLAIMS if on_claim else NODES, obj)
        log.info(
            "%s %s %s",
            change.kind,
            change.name,
            f"protected ({DO_NOT_DISRUPT}=true)" if change.protect else "no longer protected",
        )

    async def _delete_claim(self, name: str, reason: str) -> None:
        try:
            await self._write("delete-nodeclaim", self.kube.delete_nodeclaim(name))
        except KubeError as e:
            log.warning("deleting nodeclaim %s: %s", name, e)
            return
        log.info("deleted nodeclaim %s: %s", name, reason)

    async def _delete(self, ref: PodRef, reason: str) -> None:
        try:
            await self._write("delete", self.kube.delete_pod(ref.namespace, ref.name, ref.uid))
        except KubeError as e:
            log.warning("deleting trigger %s: %s", ref, e, extra=about(ref))
            return
        self.state.expect_deleted(TRIGGERS, (ref.namespace, ref.name))
        log.info("deleted trigger %s: %s", ref, reason, extra=about(ref))

    async def _create(
        self, body: Mapping[str, Any], gpus: int, pool: str, serves: tuple[PodRef, ...]
    ) -> None:
        try:
            obj = await self._write("create", self.kube.create_pod(self.config.namespace, body))
        except KubeError as e:
            if e.conflict:  # the name is the trigger's identity: it exists, none is made twice
                log.info(
                    "trigger %s/%s exists already (an earlier create, or one being deleted)",
                    self.config.namespace,
                    body.get("metadata", {}).get("name", ""),
                )
                return
            log.warning("creating trigger for %s: %s", ", ".join(map(str, serves)), e)
            return
        self.state.expect(TRIGGERS, obj)
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
        stamp = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        status, event = triggered(name, gpus, pool, stamp)
        self._queue_statuses([SetStatus(ref, status, event) for ref in serves])
