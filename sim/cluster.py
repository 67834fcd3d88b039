"""`SimCluster`: the embedded simulated cluster the demo, tests and benchmarks run against.

One object starts, on loopback, everything a GPU cluster with Karpenter has that
gpu-intent interacts with: the API server over HTTPS (with mutating admission and the
Karpenter CRDs' validation), kube-scheduler and the GPU-sharing layers' schedulers (each
its own loop), a kubelet, Karpenter, and Dynamic Resource Allocation (the
``resource.k8s.io/v1`` API with NVIDIA's DeviceClasses, its DRA kubelet plugin's
ResourceSlices and the resourceclaim controller; `sim.dra`). Clients reach it only through its
kubeconfig, exactly as they would a real cluster.

Usage::

    async with SimCluster(workdir) as cluster:
        ...  # cluster.kubeconfig, cluster.url, cluster.store
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path
from types import TracebackType

from sim.admission import Admission
from sim.dra import DraDriver, ResourceClaimController, install_device_classes
from sim.faults import Faults
from sim.karpenter import KarpenterSim
from sim.kubelet import SimKubelet
from sim.nodeclaims import KarpenterTimings
from sim.providers import catalog_for
from sim.scheduler import (
    CLUSTER_SCHEDULER_NAMES,
    REAL_BACKOFF_SECONDS,
    ScoringStrategy,
    SimScheduler,
)
from sim.server import ApiServer
from sim.store import NAMESPACES, Store

log = logging.getLogger(__name__)

#: Namespaces every cluster starts with.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class SimCluster:
    """An API server, schedulers, kubelet and Karpenter simulator sharing one `Store`.

    Args:
        workdir: where the kubeconfig (``kubeconfig``) is written; must be writable.
        karpenter: Karpenter's batching windows and the NodeClaim lifecycle delays
            (seconds).
        karpenter_enabled: False leaves NodeClaims to the caller (tests of the API alone).
        karpenter_solve_in_thread: Karpenter's solves run in a thread (`KarpenterSim`), for
            benchmarks of a thousand nodes, where a solve takes seconds.
        scheduler_resync_seconds: how often each scheduler (kube-scheduler, HAMi's, KAI's,
            tensor-fusion's, Volcano's; one task each) retries without a change.
        scheduler_backoff_seconds: (initial, max) backoff of the pods of the schedulers
            built on kube-scheduler's queue after a failed attempt
            (`sim.scheduler.SimScheduler.backoff`); None: kube-scheduler's defaults (1 s,
            10 s) scaled as ``karpenter``'s batch window is to Karpenter's real 10 s, so
            fast timings keep the real race between a backing-off native pod and KAI's
            session.
        bookmark_seconds: how often idle watches get a BOOKMARK (kube-apiserver sends
            them about once a minute).
        provider: the Karpenter provider the cloud is (`sim.providers`: ``aws``,
            ``azure``, ``gcp``, ``tke``): Karpenter sells that provider's instance types,
            labelled as its Karpenter provider labels them.
        kube_scoring: kube-scheduler's NodeResourcesFit scoring strategy
            (`sim.scheduler.kube_score`): its default ``LeastAllocated``, or
            ``MostAllocated``, which packs GPU pods (docs/limits.md).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        karpenter: KarpenterTimings | None = None,
        karpenter_enabled: bool = True,
        karpenter_solve_in_thread: bool = False,
        scheduler_resync_seconds: float = 0.5,
        scheduler_backoff_seconds: tuple[float, float] | None = None,
        bookmark_seconds: float = 60.0,
        provider: str = "aws",
        kube_scoring: ScoringStrategy = "LeastAllocated",
    ) -> None:
        self.workdir = workdir
        self.provider = provider
        #: kube-scheduler's NodeResourcesFit scoring strategy (`sim.scheduler.kube_score`).
        self.kube_scoring: ScoringStrategy = kube_scoring
        self.catalog = catalog_for(provider)
        self.store = Store()
        self.admission = Admission(self.store)
        self.token = secrets.token_urlsafe(24)
        #: The API server's fault switches (`sim.faults`), all off until a test flips one.
        self.faults = Faults()
        self.api = ApiServer(
            self.store,
            token=self.token,
            admission=self.admission,
            bookmark_interval=bookmark_seconds,
            faults=self.faults,
        )
        timings = karpenter or KarpenterTimings()
        if scheduler_backoff_seconds is None:
            scale = timings.batch_max_seconds / KarpenterTimings().batch_max_seconds
            scheduler_backoff_seconds = (
                REAL_BACKOFF_SECONDS[0] * scale,
                REAL_BACKOFF_SECONDS[1] * scale,
            )
        self.scheduler = SimScheduler(
            self.store,
            scheduler_names=CLUSTER_SCHEDULER_NAMES,
            resync_seconds=scheduler_resync_seconds,
            backoff_seconds=scheduler_backoff_seconds,
            scoring=kube_scoring,
        )
        self.kubelet = SimKubelet(self.store)
        #: NVIDIA's DRA kubelet plugin on DRA nodes (ResourceSlices) and
        #: kube-controller-manager's resourceclaim controller (`sim.dra`).
        self.dra_driver = DraDriver(self.store)
        self.resourceclaims = ResourceClaimController(self.store)
        self.karpenter = (
            KarpenterSim(
                self.store,
                catalog=self.catalog,
                timings=timings,
                solve_in_thread=karpenter_solve_in_thread,
            )
            if karpenter_enabled
            else None
        )
        self.kubeconfig = workdir / "kubeconfig"
        self.url = ""
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Serve the API and start the in-process components. Raises OSError when the
        workdir is not writable or no loopback port can be bound."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in SYSTEM_NAMESPACES:
            self.store.create(NAMESPACES, {"metadata": {"name": name}})
        install_device_classes(self.store)  # NVIDIA's DRA driver chart
        self.url = await self.api.start()
        self.api.write_kubeconfig(self.kubeconfig)
        # One task per scheduler, as kube-scheduler and the sharing layers' schedulers are
        # separate processes: each has its own timer and view (see sim.scheduler).
        components = [(f"scheduler/{n}", loop) for n, loop in self.scheduler.loops().items()]
        components.append(("kubelet", self.kubelet.run()))
        components.append(("dra-driver", self.dra_driver.run()))
        components.append(("resourceclaim-controller", self.resourceclaims.run()))
        if self.karpenter is not None:
            components.append(("karpenter", self.karpenter.run()))
        for name, coro in components:
            self._tasks.append(asyncio.create_task(coro, name=f"sim-{name}"))
        log.info("simulated cluster serving %s (kubeconfig %s)", self.url, self.kubeconfig)

    async def stop(self) -> None:
        """Stop the components and the API server."""
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for task, result in zip(self._tasks, results, strict=True):
            if isinstance(result, Exception):
                log.error("sim component %s had failed: %r", task.get_name(), result)
        self._tasks.clear()
        await self.api.stop()
        await self.admission.close()

    def failed_components(self) -> list[str]:
        """Names of components that stopped with an error (they should never stop)."""
        return [
            t.get_name() for t in self._tasks if t.done() and not t.cancelled() and t.exception()
        ]

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
