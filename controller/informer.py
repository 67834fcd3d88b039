"""List-then-watch loops that keep `controller.cache.InformerCache` current (client-go's reflector, in small).

Each informer lists, then watches from the list's resourceVersion, following bookmarks;
when the server ends the watch (its ``timeoutSeconds``, a restart, a load balancer's idle
cut) it watches again from the last resourceVersion seen. On ``410 Gone`` (the
resourceVersion was compacted away) it relists at once. Any other failure (a 429, a 5xx,
a lost or refused connection, a watch that closed within a second with nothing in it)
relists after a backoff, through ``tenacity``: "full jitter" exponential
(`tenacity.wait_random_exponential`: uniformly random between ``min_backoff`` and
``min(max_backoff, min_backoff * 2**(n-1))`` for the n-th failure in a row, so replicas
restarted together do not retry in step; AWS Architecture Blog, "Exponential Backoff And
Jitter"), and never less than a 429's ``Retry-After`` (capped at ``max_backoff``), as
client-go's reflector does (k8s.io/client-go ``tools/cache/reflector.go``: backoff
manager, ``isTooManyRequestsError``, "very short watch"). A list that succeeds ends the
run of failures. An informer is `synced` from its first list on, and stays so while it
retries: its cache is as old as its last event, as a client-go informer's ``HasSynced``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from tenacity import RetryCallState, wait_random_exponential

from controller.cache import InformerCache, Kind
from controller.metrics import ControllerMetrics
from intent.kube import Kube, KubeError, Obj, Resource
from intent.retry import retrying

log = logging.getLogger(__name__)

#: A watch that ends sooner than this with no event in it is a failure, not a server
#: timeout (client-go reflector ``handleWatch``: "very short watch").
SHORT_WATCH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class InformerSpec:
    """What one informer follows: a resource, optionally narrowed, cached as ``kind``.
    ``observe``, when given, sees every object as it arrives, before the cache: each
    listed one as ``("LISTED", obj)`` then ``("SYNCED", {})`` once the list is in, and
    every watch event as ``(type, obj)`` (metrics that need transitions hook here)."""

    kind: Kind
    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    observe: Callable[[str, Obj], None] | None = None


def retry_delay(error: BaseException | None, backoff: float, max_backoff: float) -> float:
    """Seconds to wait before relisting after ``error``, given the jittered exponential
    ``backoff`` for this failure: none for 410 Gone (relist at once), at least a 429's
    ``Retry-After`` (at most ``max_backoff`` of it), else ``backoff``. Pure."""
    if isinstance(error, KubeError):
        if error.gone:
            return 0.0
        if error.retry_after is not None:
            return max(backoff, min(error.retry_after, max_backoff))
    return backoff


def _reason(error: KubeError) -> str:
    if error.gone:
        return "expired"
    return "throttled" if error.status == 429 else "error"


class Informer:
    """Keeps ``cache`` current for one `InformerSpec`; calls ``on_change`` after each
    update. ``watch_seconds``: the server-side watch timeout asked for (seconds);
    ``min_backoff``/``max_backoff``: the first window and the cap of the relist backoff
    (seconds); ``sleep``: how to wait (tests record the waits); ``metrics``: where its
    ``gpu_intent_informer_*`` metrics are counted, labelled with ``spec.kind`` (the
    controller's; by default a fresh `ControllerMetrics` of its own)."""

    def __init__(
        self,
        kube: Kube,
        spec: InformerSpec,
        cache: InformerCache,
        on_change: Callable[[], None],
        *,
        watch_seconds: int = 300,
        min_backoff: float = 0.5,
        max_backoff: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.kube = kube
        self.metrics = metrics if metrics is not None else ControllerMetrics(CollectorRegistry())
        self.spec = spec
        self.cache = cache
        self.on_change = on_change
        self.watch_seconds = watch_seconds
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.synced = asyncio.Event()
        self._sleep = sleep
        self._jitter = wait_random_exponential(
            multiplier=min_backoff, max=max_backoff, min=min(0.1, min_backoff)
        )
        self.metrics.informer_synced.labels(spec.kind).set(0)

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return retry_delay(error, self._jitter(state), self.max_backoff)

    async def _before_sleep(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        delay = state.upcoming_sleep
        if isinstance(error, KubeError):
            self.metrics.informer_restarts.labels(self.spec.kind, _reason(error)).inc()
            if error.gone:
                log.info("informer %s: %s; relisting", self.spec.kind, error)
                return
        self.metrics.informer_backoff_seconds.labels(self.spec.kind).inc(delay)
        log.warning("informer %s: %s; relisting in %.2fs", self.spec.kind, error, delay)

    async def run(self) -> None:
        """Run until cancelled: list, watch, and on failure relist (see the module)."""
        # The adapter's retry policy (`intent.retry.retrying`), with the reflector's rules:
        # every `KubeError` relists (a 410 at once), for as long as the informer runs.
        relisting = retrying(
            attempts=None,
            retry=lambda e: isinstance(e, KubeError),
            wait=self._wait,
            sleep=self._sleep,
            before_sleep=self._before_sleep,
        )
        async for attempt in relisting:
            with attempt:
                rv = await self._list()
                attempt.retry_state.attempt_number = 1  # a list that works restarts the backoff
                while True:
                    rv = await self._watch(rv)

    async def _list(self) -> str:
        """List into the cache; returns the list's resourceVersion.

        A method of its own so that no frame keeps the listed objects once they are in
        the cache: `run` lives as long as the informer, and a list it held kept every
        object listed alive after watch events had replaced it (at 10,000 pending pods,
        about 30 MiB more by the time each had been written once, `bench.controller_rss`).
        """
        spec = self.spec
        items, rv = await self.kube.list(
            spec.resource,
            namespace=spec.namespace,
            label_selector=spec.label_selector,
            field_selector=spec.field_selector,
            keep=self.cache.keeper(spec.kind),
        )
        if spec.observe is not None:
            for item in items:
                spec.observe("LISTED", item)
            spec.observe("SYNCED", {})
        self.cache.replace(spec.kind, items, kept=True)
        self.synced.set()
        self.metrics.informer_synced.labels(spec.kind).set(1)
        self.on_change()
        log.debug("informer %s listed %d objects at resourceVersion %s", spec.kind, len(items), rv)
        return rv

    async def _watch(self, rv: str) -> str:
        spec = self.spec
        started = time.monotonic()
        seen = 0
        async for event_type, obj in self.kube.watch(
            spec.resource,
            rv,
            namespace=spec.namespace,
            label_selector=spec.label_selector,
            field_selector=spec.field_selector,
            timeout_seconds=self.watch_seconds,
        ):
            seen += 1
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            self.metrics.informer_events.labels(spec.kind, event_type).inc()
            if event_type == "BOOKMARK":
                continue
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                if spec.observe is not None:
                    spec.observe(event_type, obj)
                self.cache.apply(spec.kind, event_type, obj)
                self.on_change()
        if not seen and time.monotonic() - started < SHORT_WATCH_SECONDS:
            # The informer's judgement, not a failed call: counted as a restart (error),
            # not in gpu_intent_api_errors_total (the adapter counts those).
            raise KubeError(
                f"watching {spec.resource.plural} from resourceVersion {rv}",
                0,
                "ShortWatch",
                f"the watch closed after less than {SHORT_WATCH_SECONDS:g}s with no event",
                verb="watch",
            )
        return rv
