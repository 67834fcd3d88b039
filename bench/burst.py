"""A burst of N pending GPU pods: how long until every trigger they need exists.

A sim API server (store and HTTPS only, as in `bench.controller_rss`: no scheduler,
kubelet or Karpenter) holds two NodePools and 20 opted-in namespaces. The real
``gpu-intent controller`` binary runs against it with no creation rate limit
(``--trigger-creates-per-second 0``) and ``--max-triggers`` above what the
burst needs, and is ready (``/readyz``) before the burst. Then N pods with intents
(KAI halves of three models, shaped as in `bench.controller_rss`) are created and marked
``PodScheduled=False, Unschedulable`` as fast as the in-process store takes them. The
triggers needed are what `controller.plan.plan` makes of those pods with no cap. Printed:
seconds from the first and from the last pod turning Unschedulable to the last needed
trigger being provisionable (created and marked ``PodScheduled=False, Unschedulable``,
which is when Karpenter can act on it; the target is < 10 s at 10,000 pods), the
triggers needed and created, how long creating the burst took, and the CPU seconds the
controller and this process (the simulated API server, which also creates the burst)
used from the first pod to the last trigger: on a machine with few cores the two
processes share them, so the CPU figures are the steadier ones to compare runs by.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.controller_rss import EXE, _until_ready, mark_unschedulable, nodepool, pod
from controller.decisions import PlanConfig, Snapshot
from controller.model import parse_pending_pod
from controller.nodes import parse_nodepool
from controller.plan import plan
from controller.triggers import TriggerSettings
from sim.karpenter import is_provisionable
from sim.server import ApiServer
from sim.store import NAMESPACES, NODEPOOLS, PODS, Store

TRIGGER_NAMESPACE = "gpu-intent-system"


def needed_triggers(pods: list[dict[str, Any]], pools: list[dict[str, Any]]) -> int:
    """Triggers `plan` makes for ``pods`` with no trigger cap and nothing in flight."""
    parsed_pools = {p.name: p for p in map(parse_nodepool, pools)}
    keys: set[str] = set()
    for pool in parsed_pools.values():
        keys |= pool.label_keys()
    parsed = [p for p in (parse_pending_pod(o, keys) for o in pods) if p is not None]
    config = PlanConfig(trigger=TriggerSettings(namespace=TRIGGER_NAMESPACE), max_triggers=10**9)
    snapshot = Snapshot(parsed, [], {}, parsed_pools, datetime.now(UTC))
    return len(plan(snapshot, config).creates)


class TriggerCount:
    """Pods in the trigger namespace, and those of them Karpenter can provision for
    (`sim.karpenter.is_provisionable`), kept up to date from the store's write history
    (`Store.changes_since`) instead of a scan of every pod per poll: polling 15,000 pods
    ten times a second took a sixth of the CPU of the process that also serves the
    controller's writes."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._rv = 0
        self._provisionable: dict[str, bool] = {}
        self.rescans = 0
        self._rescan()

    def _rescan(self) -> None:
        self.rescans += 1
        self._rv = self._store.resource_version
        self._provisionable = {
            o["metadata"]["name"]: is_provisionable(o)
            for o in self._store.iter_objects(PODS)
            if o["metadata"]["namespace"] == TRIGGER_NAMESPACE
        }

    def read(self) -> tuple[int, int]:
        """(created, provisionable) now; a full scan if the history no longer reaches
        back to the last read."""
        rv = self._store.resource_version
        changes = self._store.changes_since(PODS, self._rv)
        self._rv = rv
        if changes is None:
            self._rescan()
        else:
            for change in changes:
                meta = change.obj["metadata"]
                if meta["namespace"] != TRIGGER_NAMESPACE:
                    continue
                if change.type == "DELETED":
                    self._provisionable.pop(meta["name"], None)
                else:
                    self._provisionable[meta["name"]] = is_provisionable(change.obj)
        return len(self._provisionable), sum(self._provisionable.values())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc/<pid>/stat``
    fields 14 and 15, in clock ticks), NaN where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _unschedulable(obj: dict[str, Any]) -> None:
    mark_unschedulable(obj, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


async def measure(n: int, port: int, progress: bool = False) -> dict[str, float]:
    """Run one burst of ``n`` pods; figures in seconds and counts. ``progress``: print
    the triggers created and provisionable every second to stderr."""
    store = Store()
    for k in range(20):
        store.create(
            NAMESPACES,
            {"metadata": {"name": f"team-{k}", "labels": {"gpu-intent.io/inject": "enabled"}}},
        )
    store.create(NAMESPACES, {"metadata": {"name": TRIGGER_NAMESPACE}})
    pools = [nodepool("gpu")]
    for body in pools:
        store.create(NODEPOOLS, body)
    bodies = [pod(i) for i in range(n)]
    needed = needed_triggers(
        [{**b, "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                          "reason": "Unschedulable"}]}} for b in bodies],
        [store.get(NODEPOOLS, "", "gpu")],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        async with ApiServer(store, token="bench") as server:
            kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
            proc = await asyncio.create_subprocess_exec(
                EXE, "--log-level", "WARNING", "controller", "--kubeconfig", str(kubeconfig),
                "--metrics-address", f"127.0.0.1:{port}", "--max-triggers", str(2 * needed + 100),
                "--trigger-creates-per-second", "0",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                await _until_ready(port, poll=0.05)
                controller_cpu = cpu_seconds(proc.pid)
                sim_cpu = time.process_time()
                first = time.monotonic()
                for i, body in enumerate(bodies):
                    # kube-scheduler's status write after the create, as its own event; the
                    # bodies are handed to the store (owned=True: no copies)
                    ns = body["metadata"]["namespace"]
                    meta = store.create(PODS, body, ns, owned=True)["metadata"]
                    status = {"metadata": {"name": meta["name"], "namespace": ns}}
                    _unschedulable(status)
                    store.update(PODS, status, subresource="status", owned=True)
                    if i % 200 == 199:
                        await asyncio.sleep(0)  # let the API server serve meanwhile
                last = time.monotonic()
                created = 0
                done = last
                deadline = last + 300
                count = TriggerCount(store)
                shown = first
                while time.monotonic() < deadline:
                    created, provisionable = count.read()
                    if progress and time.monotonic() - shown >= 1.0:
                        shown = time.monotonic()
                        print(
                            f"  {shown - first:5.1f} s: {created} triggers, "
                            f"{provisionable} provisionable",
                            file=sys.stderr,
                        )
                    if provisionable >= needed:
                        done = time.monotonic()
                        controller_cpu = cpu_seconds(proc.pid) - controller_cpu
                        sim_cpu = time.process_time() - sim_cpu
                        break
                    await asyncio.sleep(0.1)
                else:
                    done = controller_cpu = sim_cpu = float("nan")
                await asyncio.sleep(2)  # anything beyond the need shows up here
                created, provisionable = count.read()
            finally:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 120)
    return {
        "from_first": done - first,
        "from_last": done - last,
        "burst": last - first,
        "needed": needed,
        "created": created,
        "controller_cpu": controller_cpu,
        "sim_cpu": sim_cpu,
    }


def run(sizes: tuple[int, ...] = (10_000,), progress: bool = False) -> None:
    for n in sizes:
        r = asyncio.run(measure(n, 18000 + os.getpid() % 1000, progress))
        print(
            f"burst of {n:>6} pending GPU pods: last needed trigger provisionable "
            f"{r['from_first']:5.1f} s after "
            f"the first pod turned Unschedulable, {r['from_last']:5.1f} s after the last "
            f"(target < 10 s); triggers needed {r['needed']:.0f}, created {r['created']:.0f}; "
            f"creating the burst took {r['burst']:.1f} s; CPU meanwhile: controller "
            f"{r['controller_cpu']:.1f} s, simulated API server {r['sim_cpu']:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.burst", description=__doc__)
    parser.add_argument("--pods", type=int, nargs="+", default=[10_000])
    parser.add_argument(
        "--progress", action="store_true", help="print triggers every second to stderr"
    )
    args = parser.parse_args()
    run(tuple(args.pods), args.progress)


if __name__ == "__main__":
    main()
