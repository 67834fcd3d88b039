"""List-then-watch loops that keep `ClusterState` current (client-go's reflector, in small).

Each informer lists, then watches from the list's resourceVersion, following bookmarks;
when the server ends the watch (its ``timeoutSeconds``) it watches again from the last
resourceVersion seen; on ``410 Gone`` (the resourceVersion was compacted away) it
relists at once; on any other failure it relists after an exponential backoff
(0.5 s doubling to 30 s), so an API server restart costs a relist, not the controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from controller.kube import Kube, KubeError, Resource
from controller.metrics import REGISTRY
from controller.state import ClusterState

log = logging.getLogger(__name__)

RESTARTS = Counter(
    "gpu_intent_informer_restarts_total",
    "Informer relists after the initial list, by resource and reason.",
    ["informer", "reason"],
    registry=REGISTRY,
)
EVENTS = Counter(
    "gpu_intent_informer_events_total",
    "Watch events applied to the cache, by informer and type.",
    ["informer", "type"],
    registry=REGISTRY,
)


@dataclass(frozen=True, slots=True)
class InformerSpec:
    """What one informer follows: a resource, optionally narrowed, cached as ``kind``."""

    kind: str
    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class Informer:
    """Keeps ``state`` current for one `InformerSpec`; calls ``on_change`` after each
    update. ``watch_seconds``: the server-side watch timeout asked for (seconds)."""

    def __init__(
        self,
        kube: Kube,
        spec: InformerSpec,
        state: ClusterState,
        on_change: Callable[[], None],
        *,
        watch_seconds: int = 300,
        max_backoff: float = 30.0,
    ) -> None:
        self.kube = kube
        self.spec = spec
        self.state = state
        self.on_change = on_change
        self.watch_seconds = watch_seconds
        self.max_backoff = max_backoff
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """Run until cancelled."""
        spec = self.spec
        backoff = 0.5
        while True:
            try:
                rv = await self._list()
                while True:
                    rv = await self._watch(rv)
                    backoff = 0.5
            except KubeError as e:
                if e.gone:
                    log.info("informer %s: %s; relisting", spec.kind, e)
                    RESTARTS.labels(spec.kind, "expired").inc()
                    continue
                log.warning("informer %s: %s; relisting in %.1fs", spec.kind, e, backoff)
                RESTARTS.labels(spec.kind, "error").inc()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

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
            keep=self.state.keeper(spec.kind),
        )
        self.state.replace(spec.kind, items, kept=True)
        self.synced.set()
        self.on_change()
        log.debug("informer %s listed %d objects at resourceVersion %s", spec.kind, len(items), rv)
        return rv

    async def _watch(self, rv: str) -> str:
        spec = self.spec
        async for event_type, obj in self.kube.watch(
            spec.resource,
            rv,
            namespace=spec.namespace,
            label_selector=spec.label_selector,
            field_selector=spec.field_selector,
            timeout_seconds=self.watch_seconds,
        ):
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            EVENTS.labels(spec.kind, event_type).inc()
            if event_type == "BOOKMARK":
                continue
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                self.state.apply(spec.kind, event_type, obj)
                self.on_change()
        return rv
