"""Status truth at scale: how long after a pod binds its scale-up status is closed, and
how many statuses are left saying something older than the cluster shows.

**Workload**: ``--pods`` (default 1,000) pods of the cost benchmark's mix
(`bench.cost.scenario`: KAI fractions and memory-only pods, HAMi, tensor-fusion, a few
native whole-GPU pods), created through the API at ``--rate`` pods per second (default
100), through the real webhook and controller, each in its own ``gpu-intent`` process
(`bench.cost.product_processes`), on a fresh `SimCluster` with the e2e tests' fast
Karpenter (`sim.nodeclaims.FAST_TIMINGS` times ``--scale``).

**Measured**, from watches on the sim's store in this process (the loop's clock):

- per pod, the seconds from its binding (the first event showing ``spec.nodeName``) to
  the first event at or after it whose ``gpu-intent.io/scale-up`` phase is closing
  (``Scheduled``, or ``Native`` for a pod Karpenter provisions for by itself): p50, p99
  and max (target: p99 <= 2 s);
- **stale statuses at the end**: bound pods whose annotation still shows an open phase
  (``Triggered``, ``Provisioning``, ``NodeReady``, ``Waiting``) (target 0; a pod bound
  on capacity that was already there before it was told anything has no status, counted
  apart);
- **open after closed**: pods whose annotation showed an open phase after a closing one
  was seen (target 0), and open-phase Events (``Triggered``, ``Provisioning``,
  ``NodeReady``) recorded after the pod was bound;
- NodeClaims created, and the wall time.

``--status-delay`` adds the sim's ``latency`` fault to every write of a scale-up status
(`sim.faults.Fault.body_contains`): a slow API server, under which a status decided
before a pod bound lands after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench import cost, scaleup_time
from controller.model import ScaleUpStatus
from intent.contract import ANNOTATION_SCALE_UP, Phase
from sim import store as sim_store
from sim.cluster import SimCluster
from sim.nodeclaims import FAST_TIMINGS

#: Phases that end a pod's story once it is bound.
CLOSING: Final = frozenset({Phase.SCHEDULED, Phase.NATIVE})
#: Phases that say the pod is still waiting for capacity.
OPEN: Final = frozenset({Phase.TRIGGERED, Phase.PROVISIONING, Phase.NODE_READY, Phase.WAITING})
#: Event reasons that go with the open phases (`controller.statuses`).
OPEN_REASONS: Final = frozenset({"Triggered", "Provisioning", "NodeReady"})


def _phase(pod: dict[str, Any]) -> str | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SCALE_UP)
    status = ScaleUpStatus.from_annotation(raw)
    return str(status.phase) if status is not None else None


class StatusTimer:
    """Per pod of ``namespace``: when it was bound, when its status was first closed at or
    after that, its last phase, and whether an open phase followed a closing one; per
    Event: open-phase Events recorded after their pod was bound."""

    def __init__(self, cluster: SimCluster, namespace: str, expected: int) -> None:
        self._pods = cluster.store.watch(sim_store.PODS, namespace)
        self._events = cluster.store.watch(sim_store.EVENTS, namespace)
        self.expected = expected
        self.bound: dict[str, float] = {}
        self.closed: dict[str, float] = {}
        self.last_phase: dict[str, str | None] = {}
        self.ever_closed: set[str] = set()
        self.reopened: set[str] = set()
        self.late_events: list[str] = []
        self.deleted: set[str] = set()
        #: Bound pods not showing a closing phase now.
        self._unclosed: set[str] = set()
        #: Set once every pod is bound and shows a closing phase.
        self.all_closed = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._follow_pods()),
            asyncio.create_task(self._follow_events()),
        ]

    async def _follow_pods(self) -> None:
        loop = asyncio.get_running_loop()
        async for event in self._pods:
            pod = event.obj
            name = pod["metadata"]["name"]
            now = loop.time()
            if event.type == "DELETED":
                self.deleted.add(name)
                continue
            phase = _phase(pod)
            self.last_phase[name] = phase
            if phase in CLOSING:
                self.ever_closed.add(name)
            elif phase in OPEN and name in self.ever_closed:
                self.reopened.add(name)
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
                if phase in CLOSING:
                    self.closed.setdefault(name, now)
            if name in self.bound and phase not in CLOSING:
                self._unclosed.add(name)
            else:
                self._unclosed.discard(name)
            if len(self.bound) >= self.expected and not self._unclosed:
                self.all_closed.set()

    async def _follow_events(self) -> None:
        async for event in self._events:
            if event.type != "ADDED":
                continue
            obj = event.obj
            pod = (obj.get("involvedObject") or {}).get("name", "")
            if obj.get("reason") in OPEN_REASONS and pod in self.bound:
                self.late_events.append(f"{pod}: {obj.get('reason')}")

    def delays(self) -> list[float]:
        """Seconds from binding to a closed status, sorted, for the pods closed."""
        return sorted(self.closed[n] - self.bound[n] for n in self.closed if n in self.bound)

    def stale(self) -> dict[str, str | None]:
        """Bound pods whose status shows an open phase now: name -> that phase (a pod
        bound before it was told anything has no status, which is not a lie)."""
        return {
            n: self.last_phase.get(n)
            for n in self.bound
            if n not in self.deleted and self.last_phase.get(n) in OPEN
        }

    def untold(self) -> int:
        """Bound pods with no status at all."""
        return sum(1 for n in self.bound if self.last_phase.get(n) is None)

    async def close(self) -> None:
        self._pods.close()
        self._events.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass(frozen=True)
class Result:
    pods: int
    bound: int
    delays: Sequence[float]
    stale: dict[str, str | None]
    untold: int
    reopened: int
    late_events: Sequence[str]
    claims: int
    create_seconds: float
    wall_seconds: float

    def pct(self, q: float) -> float:
        if not self.delays:
            return float("nan")
        return self.delays[min(len(self.delays) - 1, int(q * len(self.delays)))]


def workload(pods: int) -> list[dict[str, Any]]:
    """``pods`` pods of the cost benchmark's mix (as many copies of it as needed)."""
    copies = 1 + pods // max(1, len(cost.scenario()))
    return cost.scenario(copies)[:pods]


async def measure(
    pods: Sequence[dict[str, Any]],
    rate: float,
    scale: float,
    wait_seconds: float,
    status_delay: float,
) -> Result:
    """Run the workload once and read the figures (see the module docstring)."""
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        async with cost.side(
            Path(tmp),
            FAST_TIMINGS.scaled(scale),
            controller=scaleup_time.controller_config(0.1 * scale),
            scheduler_resync_seconds=0.5 * scale,
            processes=True,
        ) as s:
            if status_delay > 0:
                s.cluster.faults.add(
                    "latency",
                    verb="patch",
                    resource="pods",
                    delay=status_delay,
                    body_contains=ANNOTATION_SCALE_UP,
                )
            timer = StatusTimer(s.cluster, cost.NAMESPACE, len(pods))
            loop = asyncio.get_running_loop()
            start = loop.time()
            try:
                took = await scaleup_time.create_paced(s, pods, len(pods) / rate)
                remaining = wait_seconds - (loop.time() - start)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(timer.all_closed.wait(), max(0.0, remaining))
                # Statuses written after the last pod closed would show up now: wait two
                # controller resyncs' worth of the store's events before judging.
                await asyncio.sleep(2.0 * scale)
            finally:
                await timer.close()
            return Result(
                len(pods),
                len(timer.bound),
                timer.delays(),
                timer.stale(),
                timer.untold(),
                len(timer.reopened),
                list(timer.late_events),
                len(s.claims.created),
                took,
                time.perf_counter() - wall,
            )


def report(r: Result, title: str) -> None:
    print(title)
    print(
        f"  bound {r.bound}/{r.pods}, created in {r.create_seconds:.1f}s; binding -> closed "
        f"status: p50 {r.pct(0.5):.2f}s  p99 {r.pct(0.99):.2f}s  max {r.pct(1.0):.2f}s "
        f"over {len(r.delays)} pods   (target p99 <= 2 s)"
    )
    print(
        f"  stale statuses at the end: {len(r.stale)} (target 0); open after closed: "
        f"{r.reopened}; open-phase Events after binding: {len(r.late_events)}; "
        f"bound with no status {r.untold}; NodeClaims {r.claims}; wall {r.wall_seconds:.1f}s"
    )
    for name, phase in list(r.stale.items())[:5]:
        print(f"     stale: {name} shows {phase}")
    for line in r.late_events[:5]:
        print(f"     late Event: {line}")


async def main_async(pods: int, rate: float, scale: float, status_delay: float) -> None:
    tally = cost.LogTally()
    logging.getLogger().addHandler(tally)
    try:
        work = workload(pods)
        wait_seconds = 60.0 + 3 * len(work) / rate
        result = await measure(work, rate, scale, wait_seconds, 0.0)
        report(result, f"{len(work)} pods at {rate:g}/s, fast Karpenter x {scale:g}")
        if status_delay > 0:
            delayed = await measure(work, rate, scale, wait_seconds, status_delay)
            report(delayed, f"the same, every status write delayed {status_delay:g}s")
        tally.report()
    finally:
        logging.getLogger().removeHandler(tally)


def run(
    pods: int = 1000, rate: float = 100.0, scale: float = 2.0, status_delay: float = 0.5
) -> None:
    """Run the benchmark and print its figures (see the module docstring)."""
    asyncio.run(main_async(pods, rate, scale, status_delay))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0, help="pods created per second")
    parser.add_argument("--scale", type=float, default=2.0, help="multiply Karpenter's delays")
    parser.add_argument(
        "--status-delay",
        type=float,
        default=0.5,
        help="a second run with every status write delayed this long (0: none)",
    )
    args = parser.parse_args(argv)
    run(args.pods, args.rate, args.scale, args.status_delay)


if __name__ == "__main__":
    main()
