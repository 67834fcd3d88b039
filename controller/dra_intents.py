"""Following DRA pods: whether the ResourceClaim and ResourceSlice informers run
(`dra_served`), and the recording of the intents `controller.dra.intents_to_record`
reads out of pending pods' ResourceClaims (`DraIntents`): a pod whose intent is
written is served like any other from the next pass on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tenacity import RetryCallState

from controller.cache import InformerCache, Kind
from controller.dra import DraIntent, intents_to_record
from controller.informer import InformerSpec
from controller.metrics import Lane
from intent import kube as kube_api
from intent.catalog import Catalog
from intent.contract import ANNOTATION_SOURCE
from intent.kube import Kube, KubeError
from intent.logs import about
from intent.providers import ProviderProfile, pool_admits_model
from intent.retry import retrying

log = logging.getLogger(__name__)

#: The informers that follow DRA objects, once `dra_served` says so.
DRA_INFORMERS = (
    InformerSpec(Kind.RESOURCECLAIMS, kube_api.RESOURCECLAIMS),
    InformerSpec(Kind.RESOURCESLICES, kube_api.RESOURCESLICES),
)


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    log.warning(
        "discovering resource.k8s.io/v1: %s; retrying in %.2fs", error, state.upcoming_sleep
    )


async def dra_served(kube: Kube, mode: str) -> bool:
    """Whether to follow DRA ResourceClaims and ResourceSlices: ``mode`` ``on`` always,
    ``off`` never, ``auto`` when the API server serves ``resource.k8s.io/v1``
    (Kubernetes 1.34+). A discovery that fails retryably (no answer, 429, 5xx) is
    retried until it works (`intent.retry.retrying`); any other `KubeError` (403...) is
    raised."""
    if mode == "off":
        return False
    if mode == "auto":
        served = False
        async for attempt in retrying(attempts=None, before_sleep=_log_retry):
            with attempt:
                served = await kube.serves(kube_api.RESOURCESLICES)
        if not served:
            log.info("resource.k8s.io/v1 is not served: DRA pods are not followed")
            return False
    return True


class DraIntents:
    """Writes the intents of pending DRA pods, when the pods, claims, NodePools or
    opted-in namespaces changed since the last time.

    Args:
        kube: the API adapter.
        cache: the informer cache (what is read, and told what was written).
        profile: the Karpenter provider's profile: how a pool admits a GPU model (which
            pools can serve, `intent.providers.pool_admits_model`).
        write: one API write through the executor's slots
            (`controller.executor.Executor.write`).
        each: acts on every intent, a few at a time (`controller.executor.Executor.each`).
        catalog: the GPU catalog inference reads (None: `intent.inference.infer`'s
            default).
    """

    def __init__(
        self,
        kube: Kube,
        cache: InformerCache,
        profile: ProviderProfile,
        *,
        write: Callable[[Lane, Awaitable[Any]], Awaitable[Any]],
        each: Callable[[Callable[[Any], Awaitable[Any]], Sequence[Any]], Awaitable[None]],
        catalog: Catalog | None = None,
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._catalog = catalog
        self._profile = profile
        self._write = write
        self._each = each
        #: The cache versions the last recording saw, and the pods whose ResourceClaims
        #: were reported unparsable (each once).
        self._seen: tuple[int, ...] = ()
        self._reported: set[tuple[str, str]] = set()

    async def record(self) -> None:
        """Write the intents of pending DRA pods (`controller.dra.intents_to_record`),
        when the pods, claims, NodePools or opted-in namespaces changed since the last
        time. A written pod is served like any other from the next pass on."""
        cache = self._cache
        kinds = (Kind.PENDING_PODS, Kind.RESOURCECLAIMS, Kind.NODEPOOLS, Kind.NAMESPACES)
        seen = tuple(cache.version(kind) for kind in kinds)
        if seen == self._seen:
            return
        self._seen = seen
        pools = [p for p in cache.nodepools().values() if p.ready and p.makes_gpus()]
        profile = self._profile

        def can_serve(pool: str | None, model: str | None, vendor: str | None) -> bool:
            return any(
                (pool is None or p.name == pool)
                and (model is None or pool_admits_model(profile, p.admits, model))
                for p in pools
            )

        claims = cache.claim_specs()
        intents, errors = intents_to_record(
            cache.claiming_pods(),
            claims,
            cache.opted_in(),
            can_serve=can_serve,
            allocated=cache.allocated_claims(),
            catalog=self._catalog,
        )
        for ref, error in errors:
            if (ref.namespace, ref.name) not in self._reported:
                self._reported.add((ref.namespace, ref.name))
                log.warning("pod %s: its ResourceClaims do not parse: %s", ref, error,
                            extra=about(ref))  # fmt: skip
        await self._each(self._record_one, intents)

    async def _record_one(self, intent: DraIntent) -> None:
        ref = intent.ref
        try:
            obj = await self._write(
                Lane.INTENT, self._kube.annotate_pod(ref.namespace, ref.name, intent.annotations)
            )
        except KubeError as e:
            log.warning("recording the DRA intent of pod %s: %s", ref, e, extra=about(ref))
            self._seen = ()  # try again next pass
            return
        self._cache.expect(Kind.PENDING_PODS, obj)
        log.info(
            "pod %s: recorded its intent from its ResourceClaims (%s)%s",
            ref,
            intent.annotations.get(ANNOTATION_SOURCE, ""),
            "; " + "; ".join(intent.warnings) if intent.warnings else "",
            extra=about(ref),
        )
