"""A burst of GPU pods against an API server that keeps failing: does the backlog drain?

**Cluster**: a fresh `SimCluster` (API server, schedulers, kubelets, Karpenter) with
EKS-like NodeClaim delays (`sim.nodeclaims.EKS_TIMINGS` x ``--scale``, default 1: batch
1 s idle / 10 s max, NodeClaim Ready about 60 s after creation, so that the whole burst
is in flight together before the first NodeClaims are Ready), the examples' namespaces and
NodePools (GPU limits raised), and the product as its own processes: the real webhook
over TLS and the real ``gpu-intent controller`` at its default timings, with
``--max-triggers`` above the need (`bench.cost.product_processes`).

**Burst**: ``--pods`` (default 1,000) tensor-fusion pods asking for 4 GPUs each,
alternately T4 and L4, created through the API at ``--rate`` pods per second (default
100). Four GPUs of either model fill one instance of the sim's catalog (``g4dn.12xlarge``,
``g6.12xlarge``), so each pod needs exactly one NodeClaim: 1,000 NodeClaims are in
flight together at the peak. The burst's own creates meet the faults too and are retried
(tenacity, Retry-After honoured), as any client's.

**Faults**, at a steady rate for the whole run (`sim.faults`): ``--error-rate`` of all
API requests answered 500 (default 5 %), ``--throttle-rate`` answered 429 with
``Retry-After: 1`` (default 2 %), and every open watch dropped every
``--drop-every`` seconds (default 10).

**Printed** every ``--every`` seconds (default 5): pods created, pods pending (not bound),
live triggers, NodeClaims in flight (created, not Ready) and Ready, and the controller's
reconcile passes since the last line with their mean duration, writes included, and of it
the planning (its ``/metrics``), and how long the sim's API server took to answer a
discovery GET (how loaded it is: it runs in this process with the sim's schedulers,
kubelets and Karpenter). At the
end: when every pod was bound, whether the backlog (pending pods, live triggers) grew
after the burst ended, the reconcile time while at least 90 % of the needed NodeClaims
(or of the peak, when fewer were ever in flight together) were in flight (passes, mean,
of it the planning, and the histogram bucket holding the 99th percentile), every
NodeClaim created (deleted ones too) against the NodeClaims needed, the story of the
first NodeClaims whose node hosts no pod of the burst (`explain_extras`), and the faults
the API server injected, with the controller's own counts of API errors and relists.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from bench.cost import (
    NAMESPACE,
    TRIGGERS_NS,
    ClaimCounter,
    _free_port,
    example_setup,
    product_processes,
    tensor_fusion,
)
from controller.decisions import PlanConfig
from controller.reconciler import ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.demo import apply
from intent.kube import load_configuration, retry_after_seconds
from sim import store as sim_store
from sim.catalog import CATALOG
from sim.cluster import SimCluster
from sim.nodeclaims import EKS_TIMINGS

MODELS = ("t4", "l4")
GPUS_PER_POD = 4
#: Video memory asked per GPU: more than half of the model's card, so no two pods share
#: a GPU and the need is exact (a T4 has 15,360 MiB, an L4 23,034 MiB: `sim.catalog`).
VRAM = {"t4": "12Gi", "l4": "16Gi"}
POOL = "gpu-standard"
#: NodePool GPU limit for the run: 4,000 GPUs at 1,000 pods, and room.
POOL_GPU_LIMIT = "100000"


def burst_pods(n: int) -> list[dict[str, Any]]:
    """``n`` tensor-fusion pods of `GPUS_PER_POD` GPUs, alternately of each of `MODELS`."""
    return [
        tensor_fusion(
            f"burst-{i:05d}", MODELS[i % len(MODELS)], VRAM[MODELS[i % len(MODELS)]], GPUS_PER_POD
        )
        for i in range(n)
    ]


def nodeclaims_needed(n: int) -> int:
    """NodeClaims the burst needs at least: per pod, its GPUs over the most GPUs of its
    model any instance type of the sim's catalog has. Pure."""
    most = {model: max(it.gpu_count for it in CATALOG if it.gpu_name == model) for model in MODELS}
    return sum(math.ceil(GPUS_PER_POD / most[MODELS[i % len(MODELS)]]) for i in range(n))


class Refused(Exception):
    """The API server answered a create with a status worth retrying (429, 5xx)."""

    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


def _wait(state: RetryCallState) -> float:
    error = state.outcome.exception() if state.outcome is not None else None
    backoff = wait_random_exponential(multiplier=0.2, max=5)(state)
    if isinstance(error, Refused) and error.retry_after is not None:
        return max(backoff, error.retry_after)
    return backoff


@dataclass
class Burst:
    """What creating the burst took: pods created, retries, when it ended (monotonic)."""

    created: int = 0
    retries: int = 0
    ended: float | None = None
    failures: list[str] = field(default_factory=list)


async def create_pod(core: Any, body: Mapping[str, Any], burst: Burst) -> None:
    """Create one pod, retrying 429 and 5xx answers (at least Retry-After)."""

    async def before_sleep(state: RetryCallState) -> None:
        burst.retries += 1

    retrying = AsyncRetrying(
        retry=retry_if_exception(lambda e: isinstance(e, Refused | aiohttp.ClientError)),
        wait=_wait,
        stop=stop_after_attempt(30),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                response = await core.create_namespaced_pod(
                    NAMESPACE, dict(body), _preload_content=False
                )
                text = await response.text()
                if response.status == 429 or response.status >= 500:
                    raise Refused(response.status, retry_after_seconds(response.headers))
                if response.status >= 400 and response.status != 409:
                    raise RuntimeError(f"HTTP {response.status}: {text[:200]}")
    except Exception as e:  # reported, the run goes on
        burst.failures.append(f"{body['metadata']['name']}: {e}")
        return
    burst.created += 1


async def run_burst(api: client.ApiClient, pods: Sequence[Mapping[str, Any]], rate: float,
                    burst: Burst) -> None:  # fmt: skip
    """Start one create every ``1/rate`` seconds (each retried on its own), then wait for
    all of them."""
    core: Any = client.CoreV1Api(api)
    started = time.monotonic()
    tasks = []
    for i, body in enumerate(pods):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(create_pod(core, body, burst)))
    await asyncio.gather(*tasks)
    burst.ended = time.monotonic()


def _ready(claim: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (claim.get("status") or {}).get("conditions") or []
    )


@dataclass
class Sample:
    """One line of the backlog, at ``t`` seconds after the burst started."""

    t: float
    created: int
    pending: int
    triggers: int
    in_flight: int
    ready: int
    passes: float
    reconcile_sum: float
    buckets: dict[float, float]
    plan_sum: float = 0.0
    api_ms: float = 0.0


def observe(
    store: sim_store.Store, t: float, created: int, scraped: Mapping[str, Any], api_ms: float
) -> Sample:
    """The backlog now, from the sim's store (a scan, no API request) and the
    controller's metrics."""
    pending = triggers = 0
    for pod in store.iter_objects(sim_store.PODS):
        namespace = pod["metadata"]["namespace"]
        if namespace == TRIGGERS_NS:
            triggers += 1
        elif namespace == NAMESPACE and not pod["spec"].get("nodeName"):
            pending += 1
    claims = list(store.iter_objects(sim_store.NODECLAIMS))
    ready = sum(1 for c in claims if _ready(c))
    return Sample(
        t,
        created,
        pending,
        triggers,
        len(claims) - ready,
        ready,
        scraped.get("count", 0.0),
        scraped.get("sum", 0.0),
        scraped.get("buckets", {}),
        scraped.get("plan_sum", 0.0),
        api_ms,
    )


async def scrape(session: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    """The controller's reconcile histogram (count, sum, cumulative buckets by upper
    bound) and its API error and relist totals."""
    out: dict[str, Any] = {"buckets": {}, "api_errors": 0.0, "relists": 0.0}
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            text = await resp.text()
    except aiohttp.ClientError:
        return out
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "gpu_intent_reconcile_seconds_count":
                out["count"] = s.value
            elif s.name == "gpu_intent_reconcile_seconds_sum":
                out["sum"] = s.value
            elif s.name == "gpu_intent_plan_seconds_sum":
                out["plan_sum"] = s.value
            elif s.name == "gpu_intent_reconcile_seconds_bucket":
                out["buckets"][float(s.labels["le"])] = s.value
            elif s.name == "gpu_intent_api_errors_total":
                out["api_errors"] += s.value
            elif s.name == "gpu_intent_informer_restarts_total":
                out["relists"] += s.value
    return out


async def api_latency(api: client.ApiClient) -> float:
    """Milliseconds the sim's API server takes to answer ``GET /api/v1`` (discovery: no
    fault applies to it), a measure of how loaded it is."""
    began = time.perf_counter()
    try:
        await client.CoreV1Api(api).get_api_resources(_preload_content=False)
    except (aiohttp.ClientError, TimeoutError):
        return math.nan
    return (time.perf_counter() - began) * 1000


def _since(prev: Sample, sample: Sample) -> Sample:
    """The controller's counters between two samples (passes, sums, buckets), counting
    from zero when they fell (the controller was restarted and its counters began again).
    Only the counter fields of the result mean anything. Pure."""
    if sample.passes < prev.passes:
        prev = Sample(prev.t, 0, 0, 0, 0, 0, 0.0, 0.0, {})
    return Sample(
        sample.t, 0, 0, 0, 0, 0,
        sample.passes - prev.passes,
        sample.reconcile_sum - prev.reconcile_sum,
        {b: n - prev.buckets.get(b, 0.0) for b, n in sample.buckets.items()},
        sample.plan_sum - prev.plan_sum,
    )  # fmt: skip


def window(samples: Sequence[Sample]) -> Sample:
    """The controller's counters over consecutive ``samples`` (`_since` summed pair by
    pair, so a restart inside the window loses only the passes of its own interval).
    Pure."""
    total = Sample(samples[-1].t, 0, 0, 0, 0, 0, 0.0, 0.0, {})
    for prev, sample in itertools.pairwise(samples):
        part = _since(prev, sample)
        total.passes += part.passes
        total.reconcile_sum += part.reconcile_sum
        total.plan_sum += part.plan_sum
        for bound, count in part.buckets.items():
            total.buckets[bound] = total.buckets.get(bound, 0.0) + count
    return total


def p99_bucket(counted: Sample) -> float:
    """Upper bound (seconds) of the histogram bucket holding the 99th percentile of the
    passes ``counted`` (a `window`). Pure."""
    for bound in sorted(counted.buckets):
        if counted.buckets[bound] >= 0.99 * counted.passes:
            return bound
    return math.inf


async def drop_watches_every(cluster: SimCluster, seconds: float, dropped: list[int]) -> None:
    while True:
        await asyncio.sleep(seconds)
        dropped.append(cluster.faults.drop_watches())


async def main_async(args: argparse.Namespace) -> None:
    pods = burst_pods(args.pods)
    needed = nodeclaims_needed(args.pods)
    timings = EKS_TIMINGS.scaled(args.scale)
    print(
        f"{args.pods} tensor-fusion pods of {GPUS_PER_POD} GPUs ({'/'.join(MODELS)}) at "
        f"{args.rate:g} pods/s; NodeClaims needed {needed}; Karpenter EKS-like x {args.scale:g} (batch "
        f"{timings.batch_idle_seconds:g}s idle / {timings.batch_max_seconds:g}s max, NodeClaim "
        f"Ready {timings.launch_seconds + timings.register_seconds + timings.initialize_seconds:g}s"
        f" after creation); faults: {args.error_rate:.0%} 500, {args.throttle_rate:.0%} 429 "
        f"(Retry-After 1), every watch dropped every {args.drop_every:g}s"
    )
    config = ControllerConfig(
        plan=PlanConfig(
            trigger=TriggerSettings(namespace=TRIGGERS_NS),
            default_nodepool=POOL,
            max_triggers=2 * needed + 100,
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with SimCluster(
            workdir / "cluster", karpenter=timings, karpenter_solve_in_thread=True
        ) as cluster:
            cfg = await load_configuration(str(cluster.kubeconfig))
            api = client.ApiClient(configuration=cfg)
            claims = ClaimCounter(cluster)
            try:
                for doc in example_setup():
                    if doc["kind"] == "NodePool" and "limits" in doc["spec"]:
                        doc["spec"]["limits"]["nvidia.com/gpu"] = POOL_GPU_LIMIT
                    await apply(api, doc)
                port = _free_port()
                restarts: list[int] = []
                log_path = Path(args.controller_log) if args.controller_log else workdir / "c.log"
                async with product_processes(
                    workdir, cluster, api, config, metrics_port=port,
                    controller_log=log_path, restarts=restarts,
                ), aiohttp.ClientSession() as session:  # fmt: skip
                    await measure(
                        args, cluster, api, session, port, pods, needed, claims,
                        2 * timings.batch_max_seconds,
                    )  # fmt: skip
                report_log(log_path, restarts)
            finally:
                await claims.close()
                await api.close()


async def measure(
    args: argparse.Namespace,
    cluster: SimCluster,
    api: client.ApiClient,
    session: aiohttp.ClientSession,
    port: int,
    pods: Sequence[Mapping[str, Any]],
    needed: int,
    claims: ClaimCounter,
    settle_seconds: float,
) -> None:
    """The run itself, with the product ready: faults on, burst, lines, summary."""
    faults = cluster.faults
    errors = faults.add("error", rate=args.error_rate, message="injected by bench.faults")
    throttles = faults.add("throttle", rate=args.throttle_rate, retry_after=1)
    dropped: list[int] = []
    dropper = asyncio.create_task(drop_watches_every(cluster, args.drop_every, dropped))
    burst = Burst()
    started = time.monotonic()
    history = History(cluster, started)
    burster = asyncio.create_task(run_burst(api, pods, args.rate, burst))
    samples = [observe(cluster.store, 0.0, 0, await scrape(session, port), await api_latency(api))]
    print(
        f"{'t (s)':>6} {'created':>8} {'pending':>8} {'triggers':>9} {'NC in flight':>13} "
        f"{'NC Ready':>9} {'passes':>7} {'mean pass':>10} {'of it plan':>10} {'API GET':>9}"
    )
    bound_at: float | None = None
    while time.monotonic() - started < args.timeout:
        await asyncio.sleep(args.every)
        sample = observe(
            cluster.store,
            time.monotonic() - started,
            burst.created,
            await scrape(session, port),
            await api_latency(api),
        )
        prev = samples[-1]
        passes = sample.passes - prev.passes
        if passes < 0:  # the controller was restarted: its counters began again
            prev = Sample(prev.t, 0, 0, 0, 0, 0, 0.0, 0.0, {})
            passes = sample.passes
        mean = (sample.reconcile_sum - prev.reconcile_sum) / passes * 1000 if passes else 0.0
        plan = (sample.plan_sum - prev.plan_sum) / passes * 1000 if passes else 0.0
        samples.append(sample)
        print(
            f"{sample.t:6.0f} {sample.created:8d} {sample.pending:8d} {sample.triggers:9d} "
            f"{sample.in_flight:13d} {sample.ready:9d} {passes:7.0f} {mean:8.1f}ms {plan:8.1f}ms "
            f"{sample.api_ms:7.0f}ms"
        )
        if burster.done() and sample.pending == 0 and sample.triggers == 0:
            bound_at = sample.t
            break
    await asyncio.sleep(settle_seconds)  # late NodeClaims would show up by now
    dropper.cancel()
    if not burster.done():
        burster.cancel()
    await asyncio.gather(dropper, burster, return_exceptions=True)
    faults.clear()
    diagnose(cluster.store)
    final = await scrape(session, port)
    summary(args, samples, burst, started, bound_at, needed, claims)
    explain_extras(cluster, claims, history)
    await history.close()
    print(
        f"faults injected: {errors.hits} x 500, {throttles.hits} x 429, {sum(dropped)} watches "
        f"dropped ({len(dropped)} times); the controller (since its last start) counted {final['api_errors']:.0f} API "
        f"errors and {final['relists']:.0f} informer relists"
    )


def summary(
    args: argparse.Namespace,
    samples: Sequence[Sample],
    burst: Burst,
    started: float,
    bound_at: float | None,
    needed: int,
    claims: ClaimCounter,
) -> None:
    """Print the run's figures (see the module docstring)."""
    ended = (burst.ended - started) if burst.ended is not None else math.nan
    print(
        f"burst: {burst.created}/{args.pods} pods created in {ended:.1f}s, {burst.retries} "
        f"creates retried after injected faults"
        + (
            f", {len(burst.failures)} gave up (first: {burst.failures[0]})"
            if burst.failures
            else ""
        )
    )
    print(
        "every pod bound and no trigger left after "
        + (f"{bound_at:.0f}s" if bound_at is not None else f"more than {args.timeout:g}s (timeout)")
    )
    after = [s for s in samples if s.t >= ended]
    growth = [
        (b.t, b.pending - a.pending, b.triggers - a.triggers) for a, b in itertools.pairwise(after)
    ]
    grew = [(t, dp, dt) for t, dp, dt in growth if dp > 0 or dt > 0]
    print(
        "backlog after the burst ended: "
        + (
            "never grew (pending pods and live triggers only fell)"
            if not grew
            else "grew at "
            + ", ".join(f"{t:.0f}s (pending {dp:+d}, triggers {dt:+d})" for t, dp, dt in grew)
        )
    )
    peak = max(samples, key=lambda s: s.in_flight)
    floor = math.ceil(0.9 * min(needed, peak.in_flight))
    crowded = [s for s in samples if s.in_flight >= floor]
    if len(crowded) >= 2:
        first, last = crowded[0], crowded[-1]
        counted = window(samples[samples.index(first) : samples.index(last) + 1])
        passes = counted.passes
        mean = counted.reconcile_sum / passes * 1000 if passes else math.nan
        plan = counted.plan_sum / passes * 1000 if passes else math.nan
        print(
            f"reconcile with >= {floor} NodeClaims in flight ({first.t:.0f}-"
            f"{last.t:.0f}s, peak {peak.in_flight} at {peak.t:.0f}s): {passes:.0f} passes, mean "
            f"{mean:.1f} ms (of it planning {plan:.1f} ms), p99 <= "
            f"{p99_bucket(counted) * 1000:g} ms (histogram bucket)"
        )
    else:
        print(f"NodeClaims in flight peaked at {peak.in_flight} ({peak.t:.0f}s), at one sample "
              f"only: no reconcile figure at that load")  # fmt: skip
    deleted = len(claims.deleted)
    print(
        f"NodeClaims created (all, deleted ones too): {len(claims.created)} vs needed {needed} "
        f"({len(claims.created) - needed:+d}); deleted {deleted}"
    )


class History:
    """When each trigger and NodeClaim changed state, from store watches (seconds since
    ``started``): a trigger's creation, ``PodScheduled`` reason, NodeClaim link and
    deletion; a NodeClaim's creation, its first condition turning True, its node and its
    deletion. Read by `explain_extras`."""

    def __init__(self, cluster: SimCluster, started: float) -> None:
        self.started = started
        self.story: dict[str, list[tuple[float, str]]] = {}
        self._last: dict[str, tuple[str, ...]] = {}
        self.serves: dict[str, str] = {}
        self._watchers = [
            cluster.store.watch(sim_store.PODS, TRIGGERS_NS),
            cluster.store.watch(sim_store.PODS, NAMESPACE),
            cluster.store.watch(sim_store.NODECLAIMS, None),
        ]
        self._tasks = [asyncio.create_task(self._follow(w)) for w in self._watchers]

    async def _follow(self, watcher: sim_store.Watcher) -> None:
        async for event in watcher:
            obj = event.obj
            meta = obj["metadata"]
            key = f"{meta.get('namespace') or 'nodeclaim'}/{meta['name']}"
            conditions = (obj.get("status") or {}).get("conditions") or ()
            if watcher.rt is sim_store.PODS and watcher.namespace == NAMESPACE:
                raw = (meta.get("annotations") or {}).get("gpu-intent.io/scale-up", "")
                phase = raw.split('"phase":"')[1].split('"')[0] if '"phase":"' in raw else ""
                where = raw.split('"nodeClaim":"')[1].split('"')[0] if '"nodeClaim":"' in raw else ""
                node = (obj.get("spec") or {}).get("nodeName", "")
                state: tuple[str, ...] = (phase, f"({where})" if where else "", f"on {node}" if node else "")
            elif watcher.rt is sim_store.PODS:
                self.serves.setdefault(key, (meta.get("annotations") or {}).get("gpu-intent.io/serves", ""))
                reason = next(
                    (c.get("reason", "") for c in conditions if c.get("type") == "PodScheduled"),
                    "unmarked",
                )
                link = (meta.get("annotations") or {}).get("gpu-intent.io/nodeclaim", "")
                state = (reason, f"link={link}" if link else "")
            else:
                true = sorted(c["type"] for c in conditions if c.get("status") == "True")
                state = (",".join(true), (obj.get("status") or {}).get("nodeName", ""))
            if event.type == "DELETED":
                state = ("DELETED",)
            if self._last.get(key) != state:
                self._last[key] = state
                t = time.monotonic() - self.started
                self.story.setdefault(key, []).append((t, " ".join(x for x in state if x)))

    def told(self, key: str) -> str:
        return "; ".join(f"{t:.1f}s {what}" for t, what in self.story.get(key, ()))

    async def close(self) -> None:
        for watcher in self._watchers:
            watcher.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def explain_extras(cluster: SimCluster, claims: ClaimCounter, history: History) -> None:
    """The NodeClaims whose node hosts no pod of the burst (bought for nothing, or gone),
    each with its story and that of the triggers Karpenter created it for, so that an
    extra NodeClaim says how it came about."""
    store = cluster.store
    used = {
        (p.get("spec") or {}).get("nodeName")
        for p in store.iter_objects(sim_store.PODS)
        if p["metadata"]["namespace"] == NAMESPACE
    }
    live = {c["metadata"]["name"]: c for c in store.iter_objects(sim_store.NODECLAIMS)}
    empty = [
        name
        for name in claims.created
        if name not in live or (live[name].get("status") or {}).get("nodeName") not in used
    ]
    if not empty:
        return
    created_for = cluster.karpenter.created_for if cluster.karpenter is not None else {}
    print(f"NodeClaims with no pod of the burst on their node: {len(empty)} (the first 5)")
    for name in empty[:5]:
        print(f"  nodeclaim/{name}: {history.told('nodeclaim/' + name)}")
        for pod in created_for.get(name, ()):
            print(f"    created for {pod}: {history.told(pod)}")
            for served in filter(None, history.serves.get(pod, "").split(",")):
                print(f"      serving {served}: {history.told(served)}")


def diagnose(store: sim_store.Store) -> None:
    """When pods are left pending: their scale-up phases, and the live triggers by
    ``PodScheduled`` reason and by whether the NodeClaim they are linked to exists."""
    phases: dict[str, int] = {}
    for pod in store.iter_objects(sim_store.PODS):
        if pod["metadata"]["namespace"] == NAMESPACE and not pod["spec"].get("nodeName"):
            raw = (pod["metadata"].get("annotations") or {}).get("gpu-intent.io/scale-up", "")
            phase = raw.split('"phase":"')[1].split('"')[0] if '"phase":"' in raw else "none"
            phases[phase] = phases.get(phase, 0) + 1
    if not phases:
        return
    claims = {c["metadata"]["name"]: c for c in store.iter_objects(sim_store.NODECLAIMS)}
    reasons: dict[str, int] = {}
    for trigger in store.iter_objects(sim_store.PODS):
        if trigger["metadata"]["namespace"] != TRIGGERS_NS:
            continue
        reason = next(
            (c.get("reason", "") for c in (trigger.get("status") or {}).get("conditions") or []
             if c.get("type") == "PodScheduled"),
            "unmarked",
        )  # fmt: skip
        linked = (trigger["metadata"].get("annotations") or {}).get("gpu-intent.io/nodeclaim")
        where = "no link" if not linked else ("linked" if linked in claims else "linked, gone")
        reasons[f"{reason} ({where})"] = reasons.get(f"{reason} ({where})", 0) + 1
    # Every trigger excludes the labelled nodes (gpu-intent.io/node DoesNotExist).
    labelled = sum(
        1
        for n in store.iter_objects(sim_store.NODES)
        if "gpu-intent.io/node" in (n["metadata"].get("labels") or {})
    )
    nodes = sum(1 for _ in store.iter_objects(sim_store.NODES))
    nominated = sum(
        1
        for e in store.iter_objects(sim_store.EVENTS)
        if e.get("reason") == "Nominated" and e["metadata"]["namespace"] == TRIGGERS_NS
    )
    print(
        f"left pending by scale-up phase: {phases}; live triggers: {reasons}; nodes {nodes}; "
        f"of them labelled (excluded by every trigger) {labelled}; Nominated events "
        f"for triggers: {nominated}"
    )


def report_log(path: Path, restarts: Sequence[int]) -> None:
    """Print how often the controller exited (and was started again, as the kubelet
    would) and what it logged at WARNING and above, counted by the logger's first words."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    kinds: dict[str, int] = {}
    for line in lines:
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[2] in ("WARNING", "ERROR", "CRITICAL"):
            key = f"{parts[2]} {parts[3]} {' '.join(parts[4].split()[:3])}"
            kinds[key] = kinds.get(key, 0) + 1
    print(
        f"controller exits (restarted at once, as the kubelet would): {len(restarts)}"
        + (f" (exit codes {', '.join(map(str, restarts))})" if restarts else "")
    )
    for key, count in sorted(kinds.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  logged {count:5d} x {key}")
    for line in lines:
        if " ERROR " in line:
            print(f"  first error: {line[:300]}")
            break


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run the benchmark."""
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply Karpenter's delays")
    parser.add_argument("--rate", type=float, default=100.0, help="pods created per second")
    parser.add_argument("--error-rate", type=float, default=0.05)
    parser.add_argument("--throttle-rate", type=float, default=0.02)
    parser.add_argument("--drop-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between lines")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--controller-log", help="keep the controller's log in this file")
    asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
