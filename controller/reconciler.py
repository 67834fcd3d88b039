"""The controller's loop: informers feed the cache, one loop plans and applies.

Shape (Karpenter's provisioner, in small): watch handlers only update the informer cache
(`controller.cache.InformerCache`) and poke a debouncer; the loop waits until every
informer has listed once, then per pass plans over the cache and the controller's memory
(`controller.incremental`, the pure `controller.plan.plan`), settles what the pass applies
(`controller.passes`, pure: creates held back while others are in flight, the memory's
bookkeeping), records that in the memory (`controller.memory.Memory`) and hands the writes
to the executor (`controller.executor.Executor`). Passes run after changes settle
(``idle_seconds`` without a change, at most ``max_delay_seconds`` after the first) and at
least every ``resync_seconds`` (time alone moves some decisions, e.g. the NodeReady cover
expiring).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from controller.cache import InformerCache, Kind
from controller.decisions import Plan, PlanConfig
from controller.dra_intents import DRA_INFORMERS, DraIntents, dra_served
from controller.executor import Executor, each
from controller.failures import TokenBucket, protections
from controller.incremental import IncrementalPlanner
from controller.informer import Informer, InformerSpec
from controller.leader import LeaderElector, LeadershipLost
from controller.memory import TRACKED_PHASES, Memory
from controller.metrics import ControllerMetrics, NodeClaimPhases
from controller.model import NODEPOOL_LABEL, ScaleUpStatus
from controller.passes import inflight_wait, to_apply
from controller.plan import scheduled_statuses
from controller.snapshot import used
from intent import kube as kube_api
from intent.catalog import Catalog
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

log = logging.getLogger(__name__)


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
    #: The GPU catalog intent inference reads for DRA pods (`controller.dra`); None:
    #: `intent.inference.infer`'s default.
    catalog: Catalog | None = None

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
            Kind.PENDING_PODS,
            kube_api.PODS,
            field_selector=f"spec.nodeName=,metadata.namespace!={namespace}",
        ),
        InformerSpec(
            Kind.TRIGGERS, kube_api.PODS, namespace=namespace, label_selector=TRIGGER_SELECTOR
        ),
        InformerSpec(
            Kind.NODECLAIMS, kube_api.NODECLAIMS, observe=NodeClaimPhases(metrics).observe
        ),
        InformerSpec(Kind.NODEPOOLS, kube_api.NODEPOOLS),
        InformerSpec(Kind.NODES, kube_api.NODES, label_selector=NODEPOOL_LABEL),
        InformerSpec(
            Kind.NAMESPACES, kube_api.NAMESPACES, label_selector=f"{INJECT_LABEL}={INJECT_VALUE}"
        ),
        # Every namespace: Karpenter's nominations of triggers link them to NodeClaims,
        # those of native pods hold GPUs of the NodeClaims they name
        # (`controller.plan.native_reserved`).
        InformerSpec(Kind.NOMINATIONS, kube_api.EVENTS, field_selector="reason=Nominated"),
        InformerSpec(
            Kind.REFUSALS,
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
        #: What the controller remembers (`Memory`), told by the informer cache of
        #: objects seen and gone.
        self.memory = Memory(monotonic)
        self.cache = InformerCache(monotonic, observer=self.memory)
        self.planner = IncrementalPlanner(self.cache, self.memory, config.plan)
        self._monotonic = monotonic
        rate = config.trigger_creates_per_second
        self._create_rate = TokenBucket(rate, max(1.0, rate), monotonic()) if rate > 0 else None
        self._poked = asyncio.Event()
        #: When the first poke not yet answered by a pass that could create came in
        #: (`time.monotonic`; None: none waiting): the debounce's deadline counts from it.
        self._waiting_since: float | None = None
        #: The writes of the passes, in their lanes, and the status writer.
        self.executor = Executor(
            kube,
            self.cache,
            self.memory,
            namespace=config.namespace,
            concurrency=config.concurrency,
            report_writes_per_second=config.report_writes_per_second,
            now=lambda: self.now(),
            poke=self._poke,
            instance=os.environ.get("POD_NAME") or socket.gethostname(),
            metrics=self.metrics,
        )
        #: The background read-back of pods that left the pending set (`_read_left`).
        self._reader: asyncio.Task[None] | None = None
        #: Inside `_lead`: this replica plans and writes.
        self._leading = False
        #: The do-not-disrupt writes of the last pass that had any (`_protect`).
        self._protector: asyncio.Task[None] | None = None
        #: The timer of the next `_wake_at`, if one is set.
        self._wake: asyncio.TimerHandle | None = None
        #: When the last pass started (monotonic seconds), and what it saw of the inputs
        #: that can make deletes and marks (`_worth_a_pass`).
        self._last_pass = float("-inf")
        self._money_seen: tuple[int, ...] = ()
        self.informers = [
            self._informer(spec) for spec in informer_specs(config.namespace, self.metrics)
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
            kube,
            self.cache,
            config.plan.trigger.profile,
            write=self.executor.write,
            each=self.executor.each,
            catalog=config.catalog,
        )

    def _informer(self, spec: InformerSpec) -> Informer:
        return Informer(
            self.kube,
            spec,
            self.cache,
            self._changed,
            watch_seconds=self.config.watch_seconds,
            metrics=self.metrics,
        )

    async def _follow_dra(self) -> None:
        """Add the ResourceClaim and ResourceSlice informers when DRA is on
        (`controller.dra_intents.dra_served`)."""
        if self.dra or not await dra_served(self.kube, self.config.dra):
            return
        self.dra = True
        log.info("following DRA ResourceClaims and ResourceSlices (resource.k8s.io/v1)")
        self.informers.extend(self._informer(spec) for spec in DRA_INFORMERS)

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
        executor = self.executor
        reports = executor.reports
        tasks = (
            executor.creates,
            self._protector,
            reports.task,
            reports.closing_task,
            self._reader,
        )
        for task in tasks:
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
            self._leading = True
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
            self._leading = False
            await self._stop_writers()

    def _money_inputs(self) -> tuple[int, ...]:
        """Versions of what can turn a trigger unneeded or linked (a delete or a mark):
        NodeClaims, Nodes, nominations, FailedScheduling Events, NodePools, opted-in
        namespaces, covers, and pods leaving the pending set."""
        cache = self.cache
        kinds = (
            Kind.NODECLAIMS,
            Kind.NODES,
            Kind.NOMINATIONS,
            Kind.REFUSALS,
            Kind.NODEPOOLS,
            Kind.NAMESPACES,
        )
        return (
            *(cache.version(kind) for kind in kinds),
            self.memory.version(),
            cache.departures(),
        )

    async def _worth_a_pass(self) -> bool:
        """While creates are in flight, whether a pass is worth running
        (`controller.passes.inflight_wait`), after waiting out the pause it asks for (or
        the creates' end). False: skip this turn (the end of the creates pokes the
        loop)."""
        wait = inflight_wait(
            self._money_inputs(), self._money_seen, self._last_pass, self._monotonic()
        )
        if wait is None:
            return False
        creates = self.executor.creates
        if wait > 0 and creates is not None:
            await asyncio.wait({creates}, timeout=wait)
        return True

    async def _find_bound(self) -> None:
        """Before the first pass: find the pods told a tracked phase (``Triggered``,
        ``Provisioning``, ``NodeReady``...) that are bound already. They got their node
        while no controller ran (a restart, a leader change), so no watch saw them leave
        the pending set; without this they kept ``Provisioning`` for ever. They are owed
        their final ``Scheduled`` status like pods seen leaving (`Memory.resolve_left`).
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
            self.memory.resolve_left((meta["namespace"], meta["name"]), obj)
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
            if self.cache.current(Kind.TRIGGERS, key) is None:
                self.cache.expect(Kind.TRIGGERS, obj)
                adopted += 1
        log.info("leading: %d triggers live, %d not yet in the cache", len(items), adopted)

    def _changed(self) -> None:
        """An informer saw a change: plan again (`_poke`), and while leading start
        reading back the pods that just left the pending set (`read_left`) at once
        instead of after the next pass: their final ``Scheduled`` status is queued as
        soon as that read finds them bound."""
        self._poke()
        if self._leading:
            self._start_reading()

    def _start_reading(self) -> None:
        """Start the background read-back (`read_left`) if pods left the pending set and
        no read-back runs."""
        if self.memory.left() and (self._reader is None or self._reader.done()):
            self._reader = asyncio.create_task(self.read_left(), name="read-left")

    def _wake_at(self, when: datetime) -> None:
        """Plan again at ``when`` (`controller.decisions.Plan.wake`: a decision changes
        with time alone then, a burst's gathering ends), changes or not. One timer: a
        later wake than the one set waits for it (the pass then sets the next)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + max((when - self.now()).total_seconds(), 0.0) + 0.01
        handle = self._wake
        if handle is not None and loop.time() < handle.when() <= due:
            return  # pending, and sooner
        if handle is not None:
            handle.cancel()
        self._wake = loop.call_at(due, self._poke)

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

    async def _read_left(self, keys: Sequence[tuple[str, str]]) -> None:
        """Read back ``keys``, pods that left the pending set while being scaled up for:
        the watch's DELETED carries their previous state, so only a read says whether
        they were bound (and where) or deleted (REFERENCE.md section 6)."""

        async def read(key: tuple[str, str]) -> None:
            try:
                current = await self.kube.get_pod(*key)  # a read: not in the writes metric
            except KubeError as e:
                log.warning("reading pod %s/%s after it left the pending set: %s", *key, e)
                return  # stays in state.left(): read again next pass
            if current is None and self.memory.scaled_up_for(key):
                self.metrics.record_scale_up(None)  # deleted before it got a node: cancelled
            self.memory.resolve_left(key, current)

        await each(read, keys, self.config.concurrency)

    async def reconcile_once(self) -> Plan:
        """One pass: plan, settle what to apply (`controller.passes.to_apply`), apply;
        then pods that left the pending set are read back by a background task
        (`read_left`), whose findings (final statuses, GPUs taken on a node) the next
        pass uses. A pass never waits for those reads: a pod that left needs no trigger
        whatever the read says, and a burst of bindings must not delay the next pass,
        which deletes the triggers they made unneeded and marks new ones linked
        (Karpenter buys again for a trigger left Unschedulable for a batch window).
        Returns the plan applied."""
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
        if decided.wake is not None:
            self._wake_at(decided.wake)
        if decided:
            decided = to_apply(decided, self.now(), self.config.plan, creating=self.creating)
        spent = decided.bookkeeping.create_tokens
        if bucket is not None and spent:
            bucket.take(spent, self._monotonic())
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
        self._start_reading()
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        self._observe(done.phases, decided)
        self.metrics.set_unplaceable(done.unplaceable)
        self.passes_done += 1
        return decided

    async def read_left(self) -> None:
        """Read back the pods that left the pending set, in rounds until no pod left
        that this call has not read yet (pods that leave during a round are read in the
        next at once; a read that failed is tried again after the next pass). After a
        round that settled any, queue their final statuses (`_report_scheduled`); at the
        end poke the loop if any was settled (what they took of a node changed). Failed
        reads alone poke nothing: against a failing API server they wait for the next
        pass instead of driving a pass per round."""
        read: set[tuple[str, str]] = set()
        settled = False
        while keys := [k for k in self.memory.left() if k not in read]:
            read.update(keys)
            before = len(self.memory.left())
            await self._read_left(keys)
            if len(self.memory.left()) < before:
                settled = True
                self._report_scheduled()
        if settled:
            self._poke()

    def _report_scheduled(self) -> None:
        """Queue the final ``Scheduled`` of the pods a read-back found bound
        (`controller.plan.scheduled_statuses`, what the next pass would report) at once,
        while leading: in a burst of bindings the next pass may wait out the settle delay
        and a running pass, and a bound pod's closing status must not wait on them. The
        writer keeps the latest per pod and drops a ``Scheduled`` no longer owed
        (`controller.reports.StatusWriter.queue`), so the pass that reports them again
        writes nothing twice."""
        if not self._leading:
            return
        scheduled = self.memory.scheduled()
        if scheduled:
            cache = self.cache
            self.executor.queue_statuses(
                scheduled_statuses(scheduled, cache.nodeclaims(), cache.nodes(), self.now())
            )

    def _observe(self, phases: Mapping[str, int], decided: Plan) -> None:
        metrics = self.metrics
        metrics.pending_pods.clear()
        for phase, count in phases.items():
            metrics.pending_pods.labels(phase).set(count)
        metrics.triggers.set(self.cache.count(Kind.TRIGGERS))
        metrics.demand_gpus.clear()
        for key, gpus in decided.demand.items():
            metrics.demand_gpus.labels(key.pool, key.model or "any").set(float(gpus))

    async def apply(self, decided: Plan) -> None:
        """Apply a plan: first what the memory records of it (`Plan.bookkeeping`: pods
        told NodeReady are covered before their trigger goes), then its writes through
        the executor (`Executor.apply`: deletes, marks, labels and links awaited, creates
        in the background, statuses queued)."""
        self.memory.remember(decided.bookkeeping)
        await self.executor.apply(decided)

    @property
    def creating(self) -> bool:
        """Whether a pass's trigger creates are still in flight."""
        return self.executor.creating

    async def wait_creates(self) -> None:
        """Wait until the creates in flight are done (tests and shutdown)."""
        await self.executor.wait_creates()

    async def flush_statuses(self) -> None:
        """Wait until every queued status is written (tests and shutdown)."""
        await self.executor.flush_statuses()

    async def _protect(self) -> None:
        """Set or remove ``karpenter.sh/do-not-disrupt`` on the NodeClaims bought for our
        triggers and their Nodes (`controller.failures.protections`), from the cache as
        it is now."""
        cache = self.cache
        live = frozenset(name for _, name in cache.keys(Kind.TRIGGERS))
        changes = protections(
            cache.nodeclaims(),
            cache.nodes(),
            live,
            used(cache, self.memory),
            self.now(),
            self.config.protect_seconds,
        )
        await self.executor.protect(changes)
