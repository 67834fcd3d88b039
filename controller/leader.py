"""Leader election over a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Only the leader plans and writes; every replica keeps its caches synced, so a follower
is ready (``/readyz``) and takes over with a warm cache. The algorithm is client-go's
``tools/leaderelection/leaderelection.go`` (``tryAcquireOrRenew``, ``renew``,
``release``):

- a candidate reads the Lease; a missing one is created with itself as holder;
- a Lease held by another is left alone while it is *valid*: until
  ``leaseDurationSeconds`` (the record's) after this replica last *saw the record
  change*, by its own monotonic clock, so clock skew between machines does not matter;
- taking or renewing is a PUT carrying the resourceVersion read, so of two candidates
  racing for an expired Lease the API server lets one win (409 Conflict for the other);
- the leader renews every ``retry_seconds``; when no renewal succeeds within
  ``renew_deadline_seconds`` it stops acting at once (`LeadershipLost`). The deadline is
  shorter than the lease, so the leader has stopped before any other replica can take
  the Lease. It also stops at once when it reads the Lease held by someone else;
- on a clean shutdown the leader stops acting, then releases the Lease (empty holder,
  ``leaseDurationSeconds: 1``, as client-go's ``ReleaseOnCancel``), so a successor takes
  over within ``retry_seconds`` instead of a lease duration.

kubernetes_asyncio ships a port (``kubernetes_asyncio.leaderelection``), but it refuses
periods under 1 s (tests need shorter ones), keeps running the leader's task when that
task fails, and compares wall-clock times; this module is a small adapter over
`intent.kube.Kube` instead. The decisions (`claim`, `released`) are pure.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from controller.metrics import ControllerMetrics
from intent.kube import Kube, KubeError, Obj

log = logging.getLogger(__name__)

#: client-go ``leaderelection.JitterFactor``: the acquire loop waits ``retry_seconds``
#: times a random factor in [1, 2.2), and ``renew_deadline_seconds`` must exceed
#: ``retry_seconds`` times this.
JITTER_FACTOR = 1.2
DEFAULT_LEASE_NAME = "gpu-intent-controller"


class LeadershipLost(Exception):
    """This replica was the leader and is no longer; it has stopped acting. The process
    should exit non-zero (and be restarted as a follower)."""


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Where the Lease lives and its timings, in seconds.

    Defaults are those of Kubernetes' own controllers: lease 15 s, renew deadline 10 s,
    retry 2 s (k8s.io/component-base ``config/v1alpha1/defaults.go``
    ``RecommendedDefaultLeaderElectionConfiguration``, the values controller-runtime's
    manager also defaults to). Validated as client-go's ``NewLeaderElector``: lease >
    renew deadline > ``JITTER_FACTOR`` x retry > 0.
    """

    namespace: str
    identity: str
    name: str = DEFAULT_LEASE_NAME
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if self.retry_seconds <= 0:
            raise ValueError("retry period must be positive")
        if self.lease_seconds <= self.renew_deadline_seconds:
            raise ValueError("lease duration must be greater than the renew deadline")
        if self.renew_deadline_seconds <= JITTER_FACTOR * self.retry_seconds:
            raise ValueError(f"renew deadline must exceed {JITTER_FACTOR} x the retry period")


def micro_time(now: datetime) -> str:
    """A ``metav1.MicroTime`` as the API serializes it (RFC 3339, microseconds, UTC)."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _spec(lease: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (lease or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def holder(lease: Mapping[str, Any] | None) -> str:
    """The Lease's ``spec.holderIdentity`` ("" when none holds it)."""
    return str(_spec(lease).get("holderIdentity") or "")


def record_duration(lease: Mapping[str, Any] | None, default: float) -> float:
    """``spec.leaseDurationSeconds`` of the record (client-go judges validity by the
    record's duration, not its own), else ``default`` seconds."""
    value = _spec(lease).get("leaseDurationSeconds")
    return float(value) if isinstance(value, int | float) and value > 0 else default


def claim(
    lease: Mapping[str, Any] | None,
    config: LeaderElectionConfig,
    now: datetime,
    *,
    unchanged_for_seconds: float,
) -> Obj | None:
    """The Lease body to write to take or renew leadership, or None while another
    holder's Lease is still valid. Pure.

    ``lease`` is the Lease as read (None: absent, so the body is a create);
    ``unchanged_for_seconds`` is how long this replica has seen that same record. The
    body keeps the read ``resourceVersion`` (so a concurrent writer wins and this one
    gets 409), keeps ``acquireTime`` and ``leaseTransitions`` when renewing, and adds
    one transition when taking over (client-go ``tryAcquireOrRenew``)."""
    stamp = micro_time(now)
    duration = max(1, math.ceil(config.lease_seconds))
    if lease is None:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": config.name, "namespace": config.namespace},
            "spec": {
                "holderIdentity": config.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
    current = holder(lease)
    spec = dict(_spec(lease))
    valid = unchanged_for_seconds < record_duration(lease, config.lease_seconds)
    if current and current != config.identity and valid:
        return None
    transitions = int(spec.get("leaseTransitions") or 0)
    if current != config.identity:
        spec["acquireTime"] = stamp
        transitions += 1
    spec.update(
        holderIdentity=config.identity,
        leaseDurationSeconds=duration,
        renewTime=stamp,
        leaseTransitions=transitions,
    )
    spec.setdefault("acquireTime", stamp)
    body = {k: v for k, v in lease.items() if k not in ("spec", "status")}
    body["spec"] = spec
    return body


def released(lease: Mapping[str, Any], now: datetime) -> Obj:
    """The Lease body that gives leadership up: no holder, ``leaseDurationSeconds`` 1,
    the transitions kept (client-go ``release``). Pure."""
    stamp = micro_time(now)
    spec = dict(_spec(lease))
    spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=stamp, renewTime=stamp)
    body = {k: v for k, v in lease.items() if k not in ("spec", "status")}
    body["spec"] = spec
    return body


class LeaderElector:
    """Campaigns for the Lease and runs ``lead`` only while holding it.

    Args:
        kube: the API adapter (Lease get/create/update).
        config: Lease location and timings (seconds).
        now: wall clock written into the Lease (``acquireTime``, ``renewTime``).
        monotonic: clock for validity and deadlines (seconds), never the wall clock.
        metrics: where ``gpu_intent_leader`` is set (1 while leading, else 0): the
            controller's; by default a fresh `ControllerMetrics` of its own.
    """

    def __init__(
        self,
        kube: Kube,
        config: LeaderElectionConfig,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.metrics = metrics if metrics is not None else ControllerMetrics(CollectorRegistry())
        self._now = now
        self._monotonic = monotonic
        self._observed: Obj | None = None
        self._observed_spec: Mapping[str, Any] = {}
        self._observed_at = 0.0
        self.leading = asyncio.Event()

    def _observe(self, lease: Obj | None) -> None:
        spec = _spec(lease)
        if lease is None or spec != self._observed_spec:
            self._observed_spec = dict(spec)
            self._observed_at = self._monotonic()
        self._observed = lease

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: read the Lease, write it if ours to take or renew. True when
        this replica holds it now. Raises `LeadershipLost` when it was leading and reads
        the Lease held by another (it can only have been taken after expiry)."""
        cfg = self.config
        try:
            lease = await self.kube.get_lease(cfg.namespace, cfg.name)
        except KubeError as e:
            log.warning("leader election: %s", e)
            return False
        self._observe(lease)
        current = holder(lease)
        if self.leading.is_set() and current != cfg.identity:
            raise LeadershipLost(f"lease {cfg.namespace}/{cfg.name} is held by {current!r} now")
        body = claim(
            lease,
            cfg,
            self._now(),
            unchanged_for_seconds=self._monotonic() - self._observed_at,
        )
        if body is None:
            return False
        try:
            if lease is None:
                written = await self.kube.create_lease(cfg.namespace, body)
            else:
                written = await self.kube.update_lease(cfg.namespace, body)
        except KubeError as e:
            level = logging.DEBUG if e.conflict else logging.WARNING
            log.log(level, "leader election: %s", e)
            return False
        self._observe(written)
        return True

    async def _acquire(self) -> None:
        cfg = self.config
        while True:
            if await self.try_acquire_or_renew():
                return
            await asyncio.sleep(cfg.retry_seconds * (1 + random.random() * JITTER_FACTOR))

    async def _renew(self) -> None:
        """Return when a renewal round fails to succeed within the renew deadline;
        raise `LeadershipLost` when the Lease is seen held by another."""
        cfg = self.config
        while True:
            deadline = self._monotonic() + cfg.renew_deadline_seconds
            renewed = False
            while not renewed:
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    return
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self.try_acquire_or_renew()
                        if not renewed:
                            await asyncio.sleep(cfg.retry_seconds)
                except TimeoutError:
                    return
            await asyncio.sleep(cfg.retry_seconds)

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Wait to be elected, then run ``lead()`` while leading.

        Raises `LeadershipLost` once leadership is lost (``lead`` cancelled and awaited
        first), or whatever ``lead`` raises. Cancelled, or ``lead`` failed: ``lead`` is
        cancelled and awaited, then the Lease released when ``release_on_cancel``."""
        cfg = self.config
        log.info(
            "leader election: %s campaigning for lease %s/%s", cfg.identity, cfg.namespace, cfg.name
        )
        await self._acquire()
        log.info("leader election: %s leads (lease %s/%s)", cfg.identity, cfg.namespace, cfg.name)
        self.leading.set()
        self.metrics.leader.set(1)
        task = asyncio.ensure_future(lead())
        renewer = asyncio.ensure_future(self._renew())
        lost: BaseException | None = None
        try:
            await asyncio.wait({task, renewer}, return_when=asyncio.FIRST_COMPLETED)
            if renewer.done():
                error = renewer.exception()
                lost = error or LeadershipLost(
                    f"lease {cfg.namespace}/{cfg.name} not renewed within "
                    f"{cfg.renew_deadline_seconds}s"
                )
        finally:
            for t in (task, renewer):
                t.cancel()
            await asyncio.gather(task, renewer, return_exceptions=True)
            self.leading.clear()
            self.metrics.leader.set(0)
            if lost is None and cfg.release_on_cancel:
                await self.release()  # lead() has stopped: a successor may act now
        if lost is not None:
            log.error("leader election: %s stopped acting: %s", cfg.identity, lost)
            raise lost
        if task.cancelled():  # lead() was cancelled from inside: treat as a shutdown
            raise asyncio.CancelledError
        error = task.exception()
        if error is not None:
            raise error
        raise LeadershipLost("the leader's task ended")

    async def release(self) -> None:
        """Give the Lease up if this replica holds it (best effort, one attempt)."""
        cfg = self.config
        try:
            lease = await self.kube.get_lease(cfg.namespace, cfg.name)
            if lease is None or holder(lease) != cfg.identity:
                return
            await self.kube.update_lease(cfg.namespace, released(lease, self._now()))
        except KubeError as e:
            log.warning("leader election: releasing the lease: %s", e)
            return
        log.info("leader election: %s released lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
