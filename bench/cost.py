"""Cost of exact scale-up: what gpu-intent makes Karpenter buy for a mixed sharing-layer
workload, against what the same demand written as native whole-GPU pods makes it buy.

**Workload** (`scenario`, 500+ pods in the opted-in namespace ``ml``, label
``gpu-intent.io/inject=enabled``): KAI ``gpu-fraction`` 0.25 and 0.5 pods selecting their
model by the GPU Feature Discovery label ``nvidia.com/gpu.product`` (t4, l4, l40s, memory-only KAI ``gpu-memory`` pods; HAMi ``nvidia.com/gpumem`` pods with
``nvidia.com/use-gputype``; tensor-fusion ``gpu-model`` + ``vram-request`` pods;
multi-GPU pods (HAMi ``nvidia.com/gpu: 2`` + ``gpumem``, tensor-fusion ``gpu-count: 2``);
a few native whole-GPU pods. Both NodePools of ``examples/10-nodepools.yaml`` are used,
with their ``nvidia.com/gpu`` limits raised (`POOL_GPU_LIMIT`) since 500 pods of at least
a quarter GPU need more than the examples' 32 + 16 GPUs.

**A, gpu-intent**: a fresh `SimCluster`, the real webhook over TLS and the real
controller (through kubernetes_asyncio, as in ``tests/conftest.py``); the pods are
created through the API; the run ends when every pod is bound and no trigger is left
(or at the timeout, reported), then waits two Karpenter max batch windows for late
NodeClaims.

**B, native**: another fresh `SimCluster`, no webhook, no controller. The same demand as
native whole-GPU pods: the *ideal twin* the demo judges by too
(`gpu_intent.demo.twin.ideal_twins`, used through `native_pods`; the intent of each pod
is what the webhook's own `intent.inference.infer_intent` finds): per (model, pool), the
pods sharing a GPU packed first-fit-decreasing into 1-GPU pods (a HAMi card at most
``deviceSplitCount`` = 10 vGPUs, the members' cpu and memory carried, no twin larger
than an instance of the example NodePools holds), multi-GPU pods as they are
(``ceil``), a memory-only pod as one whole GPU with the required node affinity
``karpenter.k8s.aws/instance-gpu-memory Gt (MiB - 1)``; the twin of HAMi pods is
scheduled by HAMi's scheduler (one physical GPU per ``nvidia.com/gpu``).

**Counted** on both sides from a watch on the sim's store (`ClaimCounter`): every
NodeClaim ever created, deleted ones included; GPUs bought per model and the instance
cost per hour (on-demand prices of `sim.catalog.CATALOG`, summed over the instance types
of every NodeClaim created); on side A also every trigger pod created and the GPUs they
asked for; at the end, the GPU nodes no pod of the workload is bound to
(`idle_gpu_nodes`). Printed side by side with the ratio cost(A)/cost(B), A against the
ideal twin (target <= 1.02), the cost the sim's pure Karpenter solve gives the ideal twin
(`ideal_cost`, which B should match) and NodeClaims created (A) vs needed (B); pods left unbound are named with their scale-up
status and scheduler message, and warnings and errors logged during the runs are counted.

**Timings**: the e2e tests' fast Karpenter (`sim.nodeclaims.FAST_TIMINGS`: batch
0.2 s idle / 1 s max, requeue 2 s, NodeClaim Ready 0.2 s after creation) and controller
(0.02 s idle, 0.2 s max debounce, 0.5 s resync), all multiplied by ``scale`` (default 2,
for headroom on a loaded 2-core machine); they keep Karpenter's real ratio to the
controller's reaction. The controller's ``cover_seconds`` stays at its 60 s default, as
in the e2e tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import logging
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client

from certs import write_tls_files
from controller.decisions import PlanConfig
from controller.reconciler import Controller, ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.demo import apply, default_examples, load_manifests, webhook_configuration
from gpu_intent.demo.need import native_need
from gpu_intent.demo.twin import DemandPod, Ideal, gpus_lower_bound, ideal_twins
from intent.contract import Intent
from intent.inference import infer_intent
from intent.kube import Kube, load_configuration
from sim import store as sim_store
from sim.catalog import by_name
from sim.cluster import SimCluster
from sim.nodeclaims import FAST_TIMINGS, KarpenterTimings
from webhook import server as webhook_server

NAMESPACE: Final = "ml"
TRIGGERS_NS: Final = "gpu-intent-system"
DEFAULT_NODEPOOL: Final = "gpu-standard"
GPU_NAME_LABEL: Final = "karpenter.k8s.aws/instance-gpu-name"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
GFD_PRODUCT: Final = "nvidia.com/gpu.product"
#: Target of cost(gpu-intent) / cost(ideal native twin) (issue 26).
TARGET_RATIO: Final = Decimal("1.02")
#: ``nvidia.com/gpu`` limit given to each example NodePool (the examples say 32 and 16).
POOL_GPU_LIMIT: Final = "1000"
GPU_TOLERATION: Final = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
#: GFD ``nvidia.com/gpu.product`` of each model (as `sim.catalog` labels the nodes).
GFD_PRODUCTS: Final = {
    "t4": "Tesla-T4",
    "a10g": "NVIDIA-A10G",
    "l4": "NVIDIA-L4",
    "l40s": "NVIDIA-L40S",
    "a100": "NVIDIA-A100-SXM4-40GB",
}

log = logging.getLogger(__name__)


def fast_controller_config(factor: float = 1.0) -> ControllerConfig:
    """The e2e tests' controller settings (``Env.controller``), delays times ``factor``."""
    return ControllerConfig(
        plan=PlanConfig(
            trigger=TriggerSettings(namespace=TRIGGERS_NS), default_nodepool=DEFAULT_NODEPOOL
        ),
        idle_seconds=0.02 * factor,
        max_delay_seconds=0.2 * factor,
        resync_seconds=0.5 * factor,
    )


# --- The workload: pure data. ------------------------------------------------------------


def _pod(
    name: str,
    *,
    scheduler: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    cpu: str = "500m",
    memory: str = "1Gi",
    limits: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c",
        "image": "example.registry/infer:7",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if limits:
        container["resources"]["limits"] = dict(limits)
    spec: dict[str, Any] = {"tolerations": [GPU_TOLERATION], "containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def kai_fraction(name: str, model: str, fraction: str, cpu: str = "500m") -> dict[str, Any]:
    """A KAI pod taking ``fraction`` of a GPU of ``model``, selected by its GFD label."""
    return _pod(
        name,
        scheduler="kai-scheduler",
        annotations={"gpu-fraction": fraction},
        labels={"kai.scheduler/queue": "team-a"},
        node_selector={GFD_PRODUCT: GFD_PRODUCTS[model]},
        cpu=cpu,
    )


def kai_memory(name: str, mib: int) -> dict[str, Any]:
    """A KAI pod asking for ``mib`` MiB of one GPU, any model."""
    return _pod(
        name,
        scheduler="kai-scheduler",
        annotations={"gpu-memory": str(mib)},
        labels={"kai.scheduler/queue": "team-a"},
    )


def hami(name: str, gputype: str, gpumem: int, gpus: int = 1) -> dict[str, Any]:
    """A HAMi pod: ``gpus`` vGPUs of ``gpumem`` MiB each, type ``gputype``."""
    limits = {"nvidia.com/gpumem": str(gpumem)}
    if gpus > 1:
        limits["nvidia.com/gpu"] = str(gpus)
    return _pod(
        name,
        scheduler="hami-scheduler",
        annotations={"nvidia.com/use-gputype": gputype},
        cpu="1",
        memory="4Gi",
        limits=limits,
    )


def tensor_fusion(name: str, model: str, vram: str, count: int = 1) -> dict[str, Any]:
    """A tensor-fusion pod: ``vram`` per GPU of ``model`` on ``count`` GPUs."""
    annotations = {
        "tensor-fusion.ai/gpu-model": model.upper(),
        "tensor-fusion.ai/vram-request": vram,
    }
    if count > 1:
        annotations["tensor-fusion.ai/gpu-count"] = str(count)
    return _pod(
        name,
        scheduler="tensor-fusion-scheduler",
        annotations=annotations,
        labels={"tensor-fusion.ai/enabled": "true"},
        node_selector={"nvidia.com/gpu.present": "true"},
        cpu="1",
        memory="4Gi",
    )


def whole_gpu(name: str, model: str, gpus: int = 1) -> dict[str, Any]:
    """A native pod: ``gpus`` whole ``nvidia.com/gpu`` of ``model`` (Karpenter serves it)."""
    return _pod(
        name,
        node_selector={GPU_NAME_LABEL: model},
        cpu="2",
        memory="8Gi",
        limits={"nvidia.com/gpu": str(gpus)},
    )


def scenario(copies: int = 1) -> list[dict[str, Any]]:
    """The mixed workload (see the module docstring), ``copies`` times."""
    pods: list[dict[str, Any]] = []

    def add(count: int, prefix: str, make: Any, *args: Any) -> None:
        for _ in range(count * copies):
            pods.append(make(f"{prefix}-{len(pods):04d}", *args))

    # KAI pods on the KAI-served pools; the a10g pool (gpu-hami) runs HAMi's device plugin
    # and serves the HAMi pods (a GPU node runs one sharing layer).
    for model, quarters, halves in (
        ("t4", 160, 16),
        ("l4", 160, 16),
        ("l40s", 48, 8),
        ("a100", 24, 4),
    ):
        add(quarters, f"kai-q-{model}", kai_fraction, model, "0.25")
        add(halves, f"kai-h-{model}", kai_fraction, model, "0.5", "1")
    add(8, "kai-mem", kai_memory, 20000)
    add(24, "hami-a10g", hami, "A10G", 8000)
    add(24, "hami-a10g-small", hami, "A10G", 6000)
    add(4, "tf-l40s", tensor_fusion, "l40s", "20Gi")
    add(4, "tf-l4", tensor_fusion, "l4", "10Gi")
    add(2, "hami-x2-a10g", hami, "A10G", 10000, 2)
    add(2, "tf-x2-l4", tensor_fusion, "l4", "10Gi", 2)
    add(4, "whole-t4", whole_gpu, "t4")
    return pods


# --- The same demand as native whole-GPU pods: the shared ideal twin, pure. -------------


def intent_of(pod: Mapping[str, Any]) -> Intent:
    """The intent the webhook writes for ``pod`` (raises ValueError if it has none)."""
    intent = infer_intent(pod)
    if intent is None:
        raise ValueError(f"{pod['metadata']['name']}: not a GPU pod")
    return intent


def example_nodepools() -> list[dict[str, Any]]:
    """The NodePools of `example_setup` (limits raised), which bound the twins' size."""
    return [doc for doc in example_setup() if doc["kind"] == "NodePool"]


def ideal(pods: Iterable[Mapping[str, Any]]) -> Ideal:
    """The shared ideal twin (`gpu_intent.demo.twin.ideal_twins`) of ``pods`` over the
    example NodePools, intents as the webhook infers them, modelless intents in
    `DEFAULT_NODEPOOL` as the controller places them."""
    demand = [DemandPod(p["metadata"]["name"], intent_of(p), p) for p in pods]
    return ideal_twins(demand, example_nodepools(), default_nodepool=DEFAULT_NODEPOOL)


def native_pods(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The same demand as native whole-GPU pods: the twins of `ideal` as Pods
    ``native-<nnnn>`` in `NAMESPACE` (see the module docstring)."""
    return [t.pod(f"native-{i:04d}", NAMESPACE) for i, t in enumerate(ideal(pods).twins)]


def demand_gpus(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Whole GPUs per model (``any`` for memory-only pods) of the ideal twin's packing
    (`gpu_intent.demo.twin.gpus_lower_bound`)."""
    return gpus_lower_bound(ideal(pods).twins)


def ideal_cost(pods: Sequence[Mapping[str, Any]]) -> Decimal:
    """USD/hour of what the sim's Karpenter solve buys for the ideal twin of ``pods`` on
    an empty cluster (`gpu_intent.demo.need.native_need`, cheapest instance type of each
    NodeClaim): the pure counterpart of side B."""
    demand = [DemandPod(p["metadata"]["name"], intent_of(p), p) for p in pods]
    need = native_need(demand, example_nodepools(), default_nodepool=DEFAULT_NODEPOOL)
    return sum((c.price_per_hour or Decimal(0) for c in need.claims), Decimal(0))


# --- Running a side. ----------------------------------------------------------------------


class ClaimCounter:
    """Every object of a kind (default NodeClaims) the sim's store admitted since
    creation, deleted ones too (the last state seen of each), from a store watch."""

    def __init__(
        self,
        cluster: SimCluster,
        rt: sim_store.ResourceType = sim_store.NODECLAIMS,
        namespace: str | None = None,
    ) -> None:
        self._watcher = cluster.store.watch(rt, namespace)
        self.created: dict[str, dict[str, Any]] = {}
        #: When each object was first seen (the event loop's clock, seconds).
        self.first_seen: dict[str, float] = {}
        self.deleted: set[str] = set()
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        async for event in self._watcher:
            name = event.obj["metadata"]["name"]
            if event.type == "DELETED":
                self.deleted.add(name)
            else:
                self.created[name] = event.obj
                self.first_seen.setdefault(name, asyncio.get_running_loop().time())

    async def close(self) -> None:
        self._watcher.close()
        await asyncio.gather(self._task, return_exceptions=True)


class LogTally(logging.Handler):
    """Counts warnings and errors logged by the product and the sim during a run, keeping
    the first few messages (a benchmark run should log none)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.first: list[str] = []
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1
        if len(self.first) < 5:
            self.first.append(f"{record.levelname} {record.name}: {record.getMessage()[:300]}")
        if record.levelno >= logging.ERROR and len(self.errors) < 3:
            where = ""
            if record.exc_info and record.exc_info[1] is not None:
                frames = traceback.extract_tb(record.exc_info[2])[-2:]
                where = " | " + repr(record.exc_info[1])[:400]
                where += " at " + "; ".join(f"{f.filename}:{f.lineno} {f.name}" for f in frames)
            self.errors.append(f"{record.name}: {record.getMessage()[:300]}{where}")

    def report(self) -> None:
        """Print shutdown problems and what was logged (nothing when the run was clean)."""
        if SHUTDOWN_PROBLEMS:
            print(f"!! shutdown: {'; '.join(SHUTDOWN_PROBLEMS)}")
        if self.counts:
            print(f"logged during the runs: {dict(self.counts)}")
            for line in self.first + self.errors:
                print(f"  {line}")


@dataclass
class Side:
    """A running side: the sim, an API client, and (side A) the controller."""

    cluster: SimCluster
    api: client.ApiClient
    claims: ClaimCounter
    triggers: ClaimCounter
    controller: Controller | None = None
    created_at: dict[str, float] = field(default_factory=dict)


def example_setup() -> list[dict[str, Any]]:
    """The examples' Namespaces and NodePools, the pools' GPU limits raised."""
    docs = []
    for doc in load_manifests(default_examples()):
        if doc["kind"] == "Pod":
            continue
        doc = copy.deepcopy(doc)
        if doc["kind"] == "NodePool" and "limits" in doc["spec"]:
            doc["spec"]["limits"]["nvidia.com/gpu"] = POOL_GPU_LIMIT
        docs.append(doc)
    return docs


#: The installed ``gpu-intent`` command, for the product run as its own processes.
EXE: Final = str(Path(sys.executable).with_name("gpu-intent"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def controller_flags(config: ControllerConfig) -> list[str]:
    """``gpu-intent controller`` flags for ``config`` (the settings the benchmarks vary)."""
    plan = config.plan
    flags = [
        "--namespace", plan.trigger.namespace,
        "--cover-seconds", f"{plan.cover_seconds:g}",
        "--cover-max-seconds", f"{plan.cover_max_seconds:g}",
        "--max-triggers", str(plan.max_triggers),
        "--pass-idle-seconds", f"{config.idle_seconds:g}",
        "--pass-max-delay-seconds", f"{config.max_delay_seconds:g}",
        "--resync-seconds", f"{config.resync_seconds:g}",
        "--report-writes-per-second", f"{config.report_writes_per_second:g}",
        # the caps and failure handling as ``config`` has them (the CLI's defaults differ:
        # it limits trigger creations to 50/s, the library config does not)
        "--trigger-creates-per-second", f"{config.trigger_creates_per_second:g}",
        "--max-gpus-per-trigger", str(plan.max_gpus_per_trigger),
        "--max-triggers-per-pool", str(plan.max_triggers_per_pool),
        "--cooldown-seconds", f"{plan.cooldown_seconds:g}",
        "--gather-seconds", f"{plan.gather_seconds:g}",
        "--gather-max-seconds", f"{plan.gather_max_seconds:g}",
        "--retry-base-seconds", f"{plan.retry_base_seconds:g}",
        "--retry-max-seconds", f"{plan.retry_max_seconds:g}",
        "--retry-attempts", str(plan.retry_attempts),
        "--init-timeout-seconds", f"{plan.init_timeout_seconds:g}",
        "--protect-seconds", f"{config.protect_seconds:g}",
    ]  # fmt: skip
    if plan.default_nodepool:
        flags += ["--default-nodepool", plan.default_nodepool]
    return flags


async def _until_http_ok(url: str, seconds: float = 60.0, **kwargs: Any) -> None:
    """Poll ``url`` until it answers 200. Raises TimeoutError."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url, **kwargs) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"{url} did not answer 200 within {seconds:g}s")


@contextlib.asynccontextmanager
async def product_processes(
    workdir: Path,
    cluster: SimCluster,
    api: client.ApiClient,
    config: ControllerConfig,
    *,
    metrics_port: int | None = None,
    extra_flags: Sequence[str] = (),
    controller_log: Path | None = None,
    restarts: list[int] | None = None,
) -> AsyncIterator[None]:
    """The webhook and the controller as their own ``gpu-intent`` processes, as they run
    in a cluster (own pods, own CPU), against the sim's API server; ready on entry,
    stopped with SIGTERM on exit. ``metrics_port``: the controller's metrics port (a
    free one when None); ``extra_flags``: more ``gpu-intent controller`` flags;
    ``controller_log``: a file for the controller's log (warnings and above);
    ``restarts``: when given, a controller that exits is started again at once, as the
    kubelet restarts a Deployment's container, and its exit code appended there."""
    tls = write_tls_files(workdir / "webhook", ["localhost"], ["127.0.0.1"])
    hook_port, metrics_port = _free_port(), metrics_port or _free_port()
    null = asyncio.subprocess.DEVNULL
    log = controller_log.open("w") if controller_log is not None else None

    async def start_controller() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            EXE, "--log-level", "WARNING", "controller", "--kubeconfig", str(cluster.kubeconfig),
            "--metrics-address", f"127.0.0.1:{metrics_port}", *controller_flags(config),
            *extra_flags,
            stdout=null, stderr=log if log is not None else null,
        )  # fmt: skip

    procs = [
        await asyncio.create_subprocess_exec(
            EXE, "--log-level", "WARNING", "webhook", "--listen", f"127.0.0.1:{hook_port}",
            "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key),
            stdout=null, stderr=null,
        ),
        await start_controller(),
    ]  # fmt: skip
    stopping = False

    async def supervise(record: list[int]) -> None:
        while not stopping:
            code = await procs[1].wait()
            if stopping:
                return
            record.append(code)
            procs[1] = await start_controller()

    supervisor = asyncio.create_task(supervise(restarts)) if restarts is not None else None
    try:
        await _until_http_ok(f"https://127.0.0.1:{hook_port}/healthz", ssl=False)
        url = f"https://127.0.0.1:{hook_port}/mutate"
        await apply(api, webhook_configuration(url, tls.ca_cert.read_bytes()))
        await _until_http_ok(f"http://127.0.0.1:{metrics_port}/readyz")
        yield
    finally:
        stopping = True
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                SHUTDOWN_PROBLEMS.append(f"{EXE} pid {proc.pid} killed after 30 s")
        if log is not None:
            log.close()


@contextlib.asynccontextmanager
async def side(
    workdir: Path,
    timings: KarpenterTimings,
    *,
    controller: ControllerConfig | None,
    scheduler_resync_seconds: float,
    processes: bool = False,
) -> AsyncIterator[Side]:
    """A fresh sim with the examples' namespaces and pools; with ``controller`` also the
    real webhook over TLS and the real controller (running, ready): in this process, or
    with ``processes`` as their own ``gpu-intent`` processes (`product_processes`)."""
    async with SimCluster(
        workdir / "cluster", karpenter=timings, scheduler_resync_seconds=scheduler_resync_seconds
    ) as cluster:
        cfg = await load_configuration(str(cluster.kubeconfig))
        api = client.ApiClient(configuration=cfg)
        kube = Kube(client.ApiClient(configuration=cfg))
        runner = None
        task: asyncio.Task[None] | None = None
        claims = ClaimCounter(cluster)
        triggers = ClaimCounter(cluster, sim_store.PODS, TRIGGERS_NS)
        try:
            for doc in example_setup():
                await apply(api, doc)
            running = None
            if controller is not None and processes:
                async with product_processes(workdir, cluster, api, controller):
                    yield Side(cluster, api, claims, triggers, None)
                return
            if controller is not None:
                tls = write_tls_files(workdir / "webhook", ["localhost"], ["127.0.0.1"])
                runner = await webhook_server.start(
                    webhook_server.make_app(),
                    "127.0.0.1",
                    0,
                    webhook_server.ssl_context(str(tls.cert), str(tls.key)),
                )
                url = f"https://127.0.0.1:{runner.addresses[0][1]}/mutate"
                await apply(api, webhook_configuration(url, tls.ca_cert.read_bytes()))
                running = Controller(kube, controller)
                task = asyncio.create_task(running.run())
                await asyncio.wait_for(running.ready.wait(), 30)
            yield Side(cluster, api, claims, triggers, running)
            failed = cluster.failed_components()
            if failed:
                print(f"  !! sim components failed: {failed}")
        finally:
            if task is not None:
                task.cancel()
                await bounded(
                    "controller task cancel", asyncio.gather(task, return_exceptions=True)
                )
            await claims.close()
            await triggers.close()
            await bounded("controller client close", kube.close())
            await bounded("client close", api.close())
            if runner is not None:
                await bounded("webhook server cleanup", runner.cleanup())


#: Shutdown steps of a side that did not finish in time (printed by the benchmarks).
SHUTDOWN_PROBLEMS: list[str] = []


async def bounded(what: str, step: Awaitable[Any], seconds: float = 15.0) -> None:
    """Await ``step`` for at most ``seconds`` (without waiting for it to be cancelled, as
    `asyncio.wait_for` would); note it in `SHUTDOWN_PROBLEMS` if it hangs."""
    future = asyncio.ensure_future(step)
    _, pending = await asyncio.wait({future}, timeout=seconds)
    if pending:
        SHUTDOWN_PROBLEMS.append(f"{what} did not finish within {seconds:g}s")


async def create_all(
    api: client.ApiClient, pods: Sequence[dict[str, Any]], concurrency: int = 8
) -> None:
    """Create ``pods`` through the API, ``concurrency`` requests in flight."""
    queue = list(reversed(pods))

    async def worker() -> None:
        while queue:
            await apply(api, queue.pop())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def why_unbound(cluster: SimCluster, names: Sequence[str], limit: int = 3) -> list[str]:
    """For the first ``limit`` of ``names``: the pod's gpu-intent scale-up status and its
    PodScheduled condition message."""
    out = []
    for name in names[:limit]:
        pod = cluster.store.get(sim_store.PODS, NAMESPACE, name)
        status = (pod["metadata"].get("annotations") or {}).get("gpu-intent.io/scale-up", "-")
        condition = next(
            (
                c.get("message", "")
                for c in (pod.get("status") or {}).get("conditions") or ()
                if c.get("type") == "PodScheduled"
            ),
            "-",
        )
        out.append(f"{name}: scale-up {status[:300]}; PodScheduled: {condition[:200]}")
    return out


def unbound(cluster: SimCluster, namespace: str = NAMESPACE) -> list[str]:
    """Names of the pods in ``namespace`` without a node (read from the sim's store)."""
    items, _ = cluster.store.list(sim_store.PODS, namespace, copy_objects=False)
    return [p["metadata"]["name"] for p in items if not (p.get("spec") or {}).get("nodeName")]


def idle_gpu_nodes(cluster: SimCluster, namespace: str = NAMESPACE) -> dict[str, int]:
    """Instance type -> how many GPU nodes of it (by its GPU count in the sim's catalog)
    no pod of ``namespace`` is bound to: capacity bought that no workload uses,
    the "GPU nodes left with no workload pod" the issue counted. Trigger, DaemonSet and
    reservation pods do not count as workload."""
    items, _ = cluster.store.list(sim_store.PODS, namespace, copy_objects=False)
    used = {(p.get("spec") or {}).get("nodeName") for p in items}
    nodes, _ = cluster.store.list(sim_store.NODES, copy_objects=False)
    idle: Counter[str] = Counter()
    for node in nodes:
        meta = node["metadata"]
        instance_type = (meta.get("labels") or {}).get(INSTANCE_TYPE_LABEL)
        if instance_type and by_name(instance_type).gpu_count and meta["name"] not in used:
            idle[instance_type] += 1
    return dict(sorted(idle.items()))


def triggers_left(cluster: SimCluster) -> int:
    items, _ = cluster.store.list(sim_store.PODS, TRIGGERS_NS, copy_objects=False)
    return len(items)


@dataclass(frozen=True)
class Outcome:
    """What one side bought and how far it got."""

    pods: int
    bound: int
    claims: int
    deleted: int
    not_launched: int
    gpus: Mapping[str, int]
    instance_types: Mapping[str, int]
    cost: Decimal
    seconds_to_bound: float | None
    triggers_left: int
    stuck: Sequence[str]
    why: Sequence[str] = ()
    triggers_created: int = 0
    trigger_gpus: Mapping[str, int] = field(default_factory=dict)
    idle_gpu_nodes: Mapping[str, int] = field(default_factory=dict)


def outcome(s: Side, pods: int, bound_after: float | None) -> Outcome:
    gpus: Counter[str] = Counter()
    types: Counter[str] = Counter()
    cost = Decimal(0)
    not_launched = 0
    for claim in s.claims.created.values():
        name = (claim["metadata"].get("labels") or {}).get(INSTANCE_TYPE_LABEL)
        if not name:
            not_launched += 1
            continue
        it = by_name(name)
        types[name] += 1
        cost += it.price
        if it.gpu_count:
            gpus[it.gpu_name] += it.gpu_count
    left = unbound(s.cluster)
    trigger_gpus: Counter[str] = Counter()
    for trigger in s.triggers.created.values():
        requests = trigger["spec"]["containers"][0]["resources"]["requests"]
        model = (trigger["metadata"].get("annotations") or {}).get("gpu-intent.io/model", "any")
        trigger_gpus[model] += int(requests.get("nvidia.com/gpu", 0))
    return Outcome(
        pods,
        pods - len(left),
        len(s.claims.created),
        len(s.claims.deleted),
        not_launched,
        dict(sorted(gpus.items())),
        dict(sorted(types.items())),
        cost,
        bound_after,
        triggers_left(s.cluster),
        left,
        why_unbound(s.cluster, left),
        len(s.triggers.created),
        dict(sorted(trigger_gpus.items())),
        idle_gpu_nodes(s.cluster),
    )


async def run_side(
    pods: Sequence[dict[str, Any]],
    timings: KarpenterTimings,
    *,
    controller: ControllerConfig | None,
    wait_seconds: float,
    scheduler_resync_seconds: float,
) -> Outcome:
    """Create ``pods`` in a fresh sim and wait until all are bound (and, with a
    controller, no trigger is left), then two max batch windows more."""
    with tempfile.TemporaryDirectory() as tmp:
        async with side(
            Path(tmp),
            timings,
            controller=controller,
            scheduler_resync_seconds=scheduler_resync_seconds,
            processes=True,
        ) as s:
            loop = asyncio.get_running_loop()
            start = loop.time()
            await create_all(s.api, pods)
            done_at = None
            while loop.time() - start < wait_seconds:
                if not unbound(s.cluster) and (controller is None or not triggers_left(s.cluster)):
                    done_at = loop.time() - start
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(2 * timings.batch_max_seconds)
            return outcome(s, len(pods), done_at)


# --- Printing. ----------------------------------------------------------------------------


def _models(values: Mapping[str, int]) -> str:
    return ", ".join(f"{m}={n}" for m, n in values.items()) or "-"


def print_outcomes(
    a: Outcome,
    b: Outcome,
    demand: Mapping[str, int],
    timeout: float,
    ideal: Decimal | None = None,
) -> None:
    def when(o: Outcome) -> str:
        return (
            f"{o.seconds_to_bound:.1f}s"
            if o.seconds_to_bound is not None
            else f"NOT within {timeout:.0f}s"
        )

    def idle(o: Outcome) -> str:
        count = sum(o.idle_gpu_nodes.values())
        return f"{count} ({_models(o.idle_gpu_nodes)})" if count else "0"

    rows = [
        ("pods (demand written as)", f"{a.pods} sharing-layer", f"{b.pods} native whole-GPU"),
        ("pods bound / total", f"{a.bound}/{a.pods}", f"{b.bound}/{b.pods}"),
        ("all bound after", when(a), when(b)),
        ("NodeClaims created", str(a.claims), str(b.claims)),
        (
            "  of which deleted / not launched",
            f"{a.deleted} / {a.not_launched}",
            f"{b.deleted} / {b.not_launched}",
        ),
        ("GPUs bought per model", _models(a.gpus), _models(b.gpus)),
        ("GPUs bought", str(sum(a.gpus.values())), str(sum(b.gpus.values()))),
        ("GPU nodes no workload pod is on", idle(a), idle(b)),
        ("instance types", _models(a.instance_types), _models(b.instance_types)),
        ("instance cost USD/hour", f"{a.cost:.4f}", f"{b.cost:.4f}"),
        ("trigger pods created", str(a.triggers_created), "-"),
        ("GPUs the triggers asked for", _models(a.trigger_gpus), "-"),
        ("trigger pods left", str(a.triggers_left), "-"),
    ]
    width = max(len(r[0]) for r in rows)
    col = max(len(r[1]) for r in rows)
    print(f"{'':<{width}}  {'A gpu-intent':<{col}}  B native")
    for label, x, y in rows:
        print(f"{label:<{width}}  {x:<{col}}  {y}")
    print(
        "GPU lower bound (the ideal twin's first-fit-decreasing packing per model):"
        f" {_models(demand)}"
    )
    ratio = a.cost / b.cost if b.cost else Decimal(0)
    print(
        f"cost ratio gpu-intent / ideal native twin: {ratio:.3f}"
        f" ({'met' if b.cost and ratio <= TARGET_RATIO else 'NOT met'}: target <= {TARGET_RATIO})"
    )
    if ideal is not None:
        print(f"ideal twin as the pure Karpenter solve buys it: {ideal:.4f} USD/hour")
    print(
        f"NodeClaims created by gpu-intent vs needed (native): {a.claims} vs {b.claims} ({a.claims - b.claims:+d})"
    )
    for name, o in (("A", a), ("B", b)):
        if o.stuck:
            print(f"  {name}: {len(o.stuck)} pods never bound, e.g. {', '.join(o.stuck[:5])}")
            for line in o.why:
                print(f"    {line}")


async def main_async(scale: float, wait_seconds: float, copies: int, only: str = "") -> None:
    tally = LogTally()
    logging.getLogger().addHandler(tally)
    try:
        pods = [p for p in scenario(copies) if p["metadata"]["name"].startswith(only)]
        natives = native_pods(pods)
        demand = demand_gpus(pods)
        timings = FAST_TIMINGS.scaled(scale)
        kinds = Counter(p["metadata"]["name"].rsplit("-", 1)[0] for p in pods)
        print(
            f"{len(pods)} GPU pods in namespace {NAMESPACE} ({', '.join(f'{k} {n}' for k, n in kinds.items())});"
            f" native: {len(natives)} whole-GPU pods"
        )
        print(
            f"Karpenter timings: e2e FAST x {scale:g} (batch {timings.batch_idle_seconds:g}s idle /"
            f" {timings.batch_max_seconds:g}s max, NodeClaim Ready"
            f" {timings.launch_seconds + timings.register_seconds + timings.initialize_seconds:g}s after creation);"
            f" NodePool GPU limits raised to {POOL_GPU_LIMIT}"
        )
        wall = time.perf_counter()
        a = await run_side(
            pods,
            timings,
            controller=fast_controller_config(scale),
            wait_seconds=wait_seconds,
            scheduler_resync_seconds=0.1 * scale,
        )
        wall_a = time.perf_counter() - wall
        b = await run_side(
            natives,
            timings,
            controller=None,
            wait_seconds=wait_seconds,
            scheduler_resync_seconds=0.1 * scale,
        )
        wall_b = time.perf_counter() - wall - wall_a
        print_outcomes(a, b, demand, wait_seconds, ideal_cost(pods))
        print(f"wall time: A {wall_a:.1f}s, B {wall_b:.1f}s, total {wall_a + wall_b:.1f}s")
        tally.report()
    finally:
        logging.getLogger().removeHandler(tally)


def run(scale: float = 2.0, timeout: float = 120.0, copies: int = 1, only: str = "") -> None:
    """Run both sides one after the other and print the comparison (``only``: the pods
    whose name starts with it)."""
    asyncio.run(main_async(scale, timeout, copies, only))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=2.0, help="multiply the fast timings")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per side")
    parser.add_argument("--copies", type=int, default=1, help="workload copies")
    parser.add_argument("--only", default="", help="only the pods whose name starts with this")
    args = parser.parse_args()
    run(args.scale, args.timeout, args.copies, args.only)


if __name__ == "__main__":
    main()
