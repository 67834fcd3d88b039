"""Time to a node: how long a sharing-layer pod waits for its node through gpu-intent,
against a native whole-GPU pod that Karpenter provisions for by itself.

**Timings** (`sim.nodeclaims.EKS_TIMINGS`, the demo's ``--timings eks``, estimates with
their sources there): Karpenter's real batch windows (1 s idle, 10 s max) and pod requeue
(10 s), and a NodeClaim about 60 s from creation to Ready (launch 2 s, register 38 s,
initialize 20 s). ``--scale`` multiplies every delay (Karpenter's and the controller's debounce, resync and
cover) by one factor to shorten the run; the ratio is what matters and the output says
which factor was used.

**Scenarios**: (a) 5 sharing-layer pods (HAMi a10g, two KAI 0.5 L4 halves, tensor-fusion
L40S, KAI 0.25 T4); (b) a burst of 500 sharing-layer pods (`bench.cost.scenario` without
its whole-GPU pods) created at 100 pods/s. Each runs twice, in fresh `SimCluster`s one
after the other: (A) the pods through the real webhook and controller, (B) the same
demand as native whole-GPU pods (`bench.cost.native_pods`: fractions of one model summed
into whole GPUs, so B has fewer pods), created at an even pace over the same window, with
no webhook or controller.

**Measured** per pod, from a watch on the sim's store in the same process: seconds from
the pod's creation (its ADDED event) to its binding (the first event with
``spec.nodeName``). Printed: p50, p95 and max for each side and their ratios A/B (target
<= 1.02), the NodeClaims each side created, and the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench import cost
from controller.decisions import PlanConfig
from controller.reconciler import ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.demo import apply
from sim import store as sim_store
from sim.catalog import by_name
from sim.cluster import SimCluster
from sim.karpenter import is_provisionable
from sim.nodeclaims import EKS_TIMINGS, KarpenterTimings

BURST_PODS: Final = 500
BURST_RATE: Final = 100.0


#: ``--max-triggers`` for the runs: above what the 500-pod burst needs at once (about 190
#: triggers), so the comparison times the scale-up, not the safety cap (default 100; with
#: it, the pods beyond the cap wait for the first NodeClaims to be Ready).
MAX_TRIGGERS = 500


def controller_config(factor: float) -> ControllerConfig:
    """The controller's defaults (0.1 s idle, 0.5 s max debounce, 5 s resync, 60 s cover),
    every delay times ``factor``, and `MAX_TRIGGERS`."""
    defaults = ControllerConfig()
    return ControllerConfig(
        plan=PlanConfig(
            trigger=TriggerSettings(namespace=cost.TRIGGERS_NS),
            default_nodepool=cost.DEFAULT_NODEPOOL,
            cover_seconds=PlanConfig().cover_seconds * factor,
            cover_max_seconds=PlanConfig().cover_max_seconds * factor,
            max_triggers=MAX_TRIGGERS,
        ),
        idle_seconds=defaults.idle_seconds * factor,
        max_delay_seconds=defaults.max_delay_seconds * factor,
        resync_seconds=defaults.resync_seconds * factor,
    )


def five_pods() -> list[dict[str, Any]]:
    """Scenario (a): five sharing-layer pods of four models."""
    return [
        cost.hami("hami-a10g", "A10G", 8000),
        cost.kai_fraction("kai-half-a", "l4", "0.5"),
        cost.kai_fraction("kai-half-b", "l4", "0.5"),
        cost.tensor_fusion("tf-l40s", "l40s", "20Gi"),
        cost.kai_fraction("kai-quarter", "t4", "0.25"),
    ]


def burst_pods() -> list[dict[str, Any]]:
    """Scenario (b): `BURST_PODS` sharing-layer pods of the cost benchmark's mix."""
    pods = [p for p in cost.scenario() if not p["metadata"]["name"].startswith("whole-")]
    return pods[:BURST_PODS]


class BindTimer:
    """Per pod of a namespace: loop time of its ADDED event and of the first event that
    shows it bound, from a store watch."""

    def __init__(self, cluster: SimCluster, namespace: str, expected: int) -> None:
        self._watcher = cluster.store.watch(sim_store.PODS, namespace)
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.expected = expected
        self.all_bound = asyncio.Event()
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        async for event in self._watcher:
            name = event.obj["metadata"]["name"]
            now = loop.time()
            self.created.setdefault(name, now)
            if (event.obj.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
                if len(self.bound) >= self.expected:
                    self.all_bound.set()

    def durations(self) -> list[float]:
        return sorted(self.bound[n] - self.created[n] for n in self.bound if n in self.created)

    async def close(self) -> None:
        self._watcher.close()
        await asyncio.gather(self._task, return_exceptions=True)


class ProvisionableTimer:
    """Loop time at which each pod of a namespace was first seen provisionable
    (`sim.karpenter.is_provisionable`, Karpenter's ``IsProvisionable``), from a store
    watch: for the pods, when their scheduler gave up on them; for the triggers, when
    Karpenter can act on them."""

    def __init__(self, cluster: SimCluster, namespace: str) -> None:
        self._watcher = cluster.store.watch(sim_store.PODS, namespace)
        self.at: dict[str, float] = {}
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        async for event in self._watcher:
            name = event.obj["metadata"]["name"]
            if name not in self.at and is_provisionable(event.obj):
                self.at[name] = loop.time()

    async def close(self) -> None:
        self._watcher.close()
        await asyncio.gather(self._task, return_exceptions=True)


async def create_paced(
    side: cost.Side, pods: Sequence[dict[str, Any]], seconds: float, concurrency: int = 16
) -> float:
    """Create ``pods`` through the API, pod ``i`` not before ``i * seconds / len(pods)``
    after the start; returns the seconds the creations took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    step = seconds / max(1, len(pods))
    queue = list(reversed(list(enumerate(pods))))

    async def worker() -> None:
        while queue:
            i, pod = queue.pop()
            delay = start + i * step - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await apply(side.api, pod)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return loop.time() - start


@dataclass(frozen=True)
class Timing:
    pods: int
    bound: int
    durations: Sequence[float]
    create_seconds: float
    claims: int
    gpus: int
    unbound: Mapping[str, int]
    why: Sequence[str]
    #: When each NodeClaim was created, seconds after the first pod was, sorted.
    claim_times: Sequence[float] = ()
    #: When each pod, and each trigger, was first provisionable (seconds after the first
    #: pod was created), sorted.
    unschedulable_times: Sequence[float] = ()
    trigger_times: Sequence[float] = ()

    def pct(self, q: float) -> float:
        if not self.durations:
            return float("nan")
        return self.durations[min(len(self.durations) - 1, int(q * len(self.durations)))]


async def measure(
    pods: Sequence[dict[str, Any]],
    timings: KarpenterTimings,
    factor: float,
    *,
    with_controller: bool,
    window: float,
    wait_seconds: float,
) -> Timing:
    """One side in a fresh sim: create ``pods`` over ``window`` seconds, wait until all
    are bound (or ``wait_seconds``), and time each."""
    with tempfile.TemporaryDirectory() as tmp:
        async with cost.side(
            Path(tmp),
            timings,
            controller=controller_config(factor) if with_controller else None,
            scheduler_resync_seconds=0.5 * factor,
            processes=True,
        ) as s:
            timer = BindTimer(s.cluster, cost.NAMESPACE, len(pods))
            unschedulable = ProvisionableTimer(s.cluster, cost.NAMESPACE)
            provisionable = ProvisionableTimer(s.cluster, cost.TRIGGERS_NS)
            loop = asyncio.get_running_loop()
            start = loop.time()
            try:
                took = await create_paced(s, pods, window)
                remaining = wait_seconds - (loop.time() - start)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(timer.all_bound.wait(), max(0.0, remaining))
            finally:
                await timer.close()
                await unschedulable.close()
                await provisionable.close()
            gpus = 0
            for claim in s.claims.created.values():
                name = (claim["metadata"].get("labels") or {}).get(cost.INSTANCE_TYPE_LABEL)
                gpus += by_name(name).gpu_count if name else 0
            left = [n for n in (p["metadata"]["name"] for p in pods) if n not in timer.bound]
            kinds = Counter(n.rsplit("-", 1)[0] for n in left)
            return Timing(
                len(pods),
                len(timer.bound),
                timer.durations(),
                took,
                len(s.claims.created),
                gpus,
                dict(kinds),
                cost.why_unbound(s.cluster, left),
                sorted(t - start for t in s.claims.first_seen.values()),
                sorted(t - start for t in unschedulable.at.values()),
                sorted(t - start for t in provisionable.at.values()),
            )


def _line(name: str, t: Timing) -> str:
    return (
        f"  {name:<26} {t.bound:>3}/{t.pods:<3} bound  p50 {t.pct(0.5):6.1f}s  p95 {t.pct(0.95):6.1f}s"
        f"  max {t.pct(1.0):6.1f}s   created in {t.create_seconds:4.1f}s"
        f"  ({t.pods / max(t.create_seconds, 1e-9):5.1f} pods/s)  NodeClaims {t.claims} ({t.gpus} GPUs)"
    )


async def scenario(
    title: str,
    pods: Sequence[dict[str, Any]],
    window: float,
    timings: KarpenterTimings,
    factor: float,
    wait_seconds: float,
) -> None:
    natives = cost.native_pods(pods)
    wall = time.perf_counter()
    a = await measure(
        pods, timings, factor, with_controller=True, window=window, wait_seconds=wait_seconds
    )
    b = await measure(
        natives, timings, factor, with_controller=False, window=window, wait_seconds=wait_seconds
    )
    print(title)
    print(_line("A sharing-layer via gpu-intent", a))
    print(_line("B native whole-GPU", b))
    ratios = "  ".join(
        f"{label} {a.pct(q) / b.pct(q):.3f}"
        for label, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0))
    )
    print(f"  ratio A/B: {ratios}   (target <= 1.02)   wall {time.perf_counter() - wall:.1f}s")
    for side, t in (("A", a), ("B", b)):
        for what, times in (
            ("pods Unschedulable", t.unschedulable_times),
            ("triggers provisionable", t.trigger_times),
            ("NodeClaims created", t.claim_times),
        ):
            if times:
                print(
                    f"  {side}: {what} {times[0]:.1f}s to {times[-1]:.1f}s after the first pod "
                    f"(p50 {times[len(times) // 2]:.1f}s)"
                )
    for side, t in (("A", a), ("B", b)):
        if t.bound < t.pods:
            print(
                f"  !! {side}: {t.pods - t.bound} pods not bound within {wait_seconds:.0f}s: {t.unbound}"
            )
            for line in t.why:
                print(f"     {line}")


async def main_async(factor: float, burst: bool) -> None:
    tally = cost.LogTally()
    logging.getLogger().addHandler(tally)
    try:
        timings = EKS_TIMINGS.scaled(factor)
        ready = timings.launch_seconds + timings.register_seconds + timings.initialize_seconds
        print(
            f"Karpenter timings: EKS-like estimates x {factor:g}: batch {timings.batch_idle_seconds:g}s idle /"
            f" {timings.batch_max_seconds:g}s max, requeue {timings.requeue_seconds:g}s, NodeClaim launch"
            f" {timings.launch_seconds:g}s + register {timings.register_seconds:g}s + initialize"
            f" {timings.initialize_seconds:g}s = Ready {ready:g}s after creation; controller defaults x {factor:g},"
            f" --max-triggers {MAX_TRIGGERS}"
        )
        wait_seconds = 4 * ready + 60 * factor
        wall = time.perf_counter()
        await scenario("(a) 5 pods at once", five_pods(), 0.0, timings, factor, wait_seconds)
        if burst:
            pods = burst_pods()
            await scenario(
                f"(b) burst of {len(pods)} pods at {BURST_RATE:g} pods/s",
                pods,
                len(pods) / BURST_RATE,
                timings,
                factor,
                wait_seconds,
            )
        print(f"wall time: {time.perf_counter() - wall:.1f}s")
        tally.report()
    finally:
        logging.getLogger().removeHandler(tally)


def run(factor: float = 1.0, burst: bool = True) -> None:
    """Run scenario (a), and (b) when ``burst``, and print the figures."""
    asyncio.run(main_async(factor, burst))


def main() -> None:
    parser = argparse.ArgumentParser(description="time from pod creation to binding")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every delay")
    parser.add_argument("--no-burst", action="store_true", help="skip the 500-pod burst")
    args = parser.parse_args()
    run(args.scale, not args.no_burst)


if __name__ == "__main__":
    main()
