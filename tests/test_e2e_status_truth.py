"""A status is never older than the truth, end to end: with every scale-up status write
delayed by the API server (the sim's ``latency`` fault on writes that carry the status
annotation, `sim.faults.Fault.body_contains`), statuses decided before a pod was bound
land after it; none survives. Every pod ends bound and told ``Scheduled``, and no
open-phase Event is recorded after its pod was bound (the sim's store orders every
write by one resourceVersion)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from conftest import make_env
from e2e_support import FAST, NodeClaimCount, eventually, settled
from test_e2e_exact import kai_pod
from test_e2e_failures import running

from gpu_intent.demo import apply
from intent.contract import ANNOTATION_SCALE_UP, Phase
from sim import store as sim_store

L4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}
OPEN = {Phase.TRIGGERED, Phase.PROVISIONING, Phase.NODE_READY, Phase.WAITING}
OPEN_REASONS = {"Triggered", "Provisioning", "NodeReady"}


def phase_of(pod: dict[str, Any]) -> str | None:
    raw = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_SCALE_UP)
    return json.loads(raw).get("phase") if raw else None


class History:
    """From store watches: per pod, the resourceVersion it was bound at and its phase
    after each write; every Event recorded in the namespace with its resourceVersion."""

    def __init__(self, store: sim_store.Store) -> None:
        self._pods = store.watch(sim_store.PODS, "ml")
        self._events = store.watch(sim_store.EVENTS, "ml")
        self.bound_at: dict[str, int] = {}
        self.phases: dict[str, list[tuple[int, str | None]]] = {}
        self.events: list[tuple[int, str, str]] = []
        self._tasks = [
            asyncio.create_task(self._follow_pods()),
            asyncio.create_task(self._follow_events()),
        ]

    async def _follow_pods(self) -> None:
        async for event in self._pods:
            pod = event.obj
            name, rv = pod["metadata"]["name"], int(pod["metadata"]["resourceVersion"])
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound_at.setdefault(name, rv)
            self.phases.setdefault(name, []).append((rv, phase_of(pod)))

    async def _follow_events(self) -> None:
        async for event in self._events:
            obj = event.obj
            if event.type == "ADDED":
                rv = int(obj["metadata"]["resourceVersion"])
                self.events.append((rv, obj["involvedObject"]["name"], obj.get("reason", "")))

    async def close(self) -> None:
        self._pods.close()
        self._events.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def test_no_stale_status_survives_slow_status_writes(tmp_path: Path) -> None:
    async with make_env(tmp_path, FAST) as env:
        env.cluster.faults.add(
            "latency", verb="patch", resource="pods", delay=0.8, body_contains=ANNOTATION_SCALE_UP
        )
        history = History(env.cluster.store)
        names = [f"half-{i}" for i in range(10)]
        async with running(env) as (controller, claims, _):
            for name in names:
                await apply(env.api, kai_pod(name, {"gpu-fraction": "0.5"}, node_selector=L4))

            async def all_scheduled() -> bool:
                last = {n: (history.phases.get(n) or [(0, None)])[-1][1] for n in names}
                return all(n in history.bound_at for n in names) and all(
                    p == Phase.SCHEDULED for p in last.values()
                )

            await eventually(all_scheduled, 40)
            await settled(env, controller)
            await controller.executor.reports.flush()
            dropped = controller.executor.reports.dropped
            count: NodeClaimCount = claims
        await history.close()
    # Some statuses were decided before their pod was bound and landed (or would have)
    # after it: the knob did its work, and the writer noticed.
    assert dropped > 0
    for name in names:
        _, last_phase = history.phases[name][-1]
        assert last_phase == Phase.SCHEDULED, (name, history.phases[name])
        bound = history.bound_at[name]
        closed = [
            rv for rv, phase in history.phases[name] if rv >= bound and phase == Phase.SCHEDULED
        ]
        reopened = [
            rv for rv, phase in history.phases[name] if closed and rv > closed[0] and phase in OPEN
        ]
        assert not reopened, (name, history.phases[name])
    late = [
        (n, r)
        for rv, n, r in history.events
        if r in OPEN_REASONS and n in history.bound_at and rv > history.bound_at[n]
    ]
    assert late == [], late
    # Ten halves of L4 fit five L4 GPUs: every NodeClaim created counted, none beyond.
    gpus = sum(
        int((c["metadata"].get("labels") or {}).get("karpenter.k8s.aws/instance-gpu-count", "0"))
        for c in count.created.values()
    )
    assert gpus == 5, gpus
