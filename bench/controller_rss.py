"""The controller's memory with N pending GPU pods cached, measured on the real binary.

A sim API server (store and HTTPS only: no scheduler, kubelet or Karpenter, so nothing
moves) holds N pending pods with gpu-intent annotations and ``PodScheduled=False,
Unschedulable``, shaped like what kubectl creates (containers with env, volume mounts,
the projected service-account volume the apiserver adds), in 20 opted-in namespaces,
plus two NodePools. ``gpu-intent controller`` runs as its own process against it through
a kubeconfig, lists and watches everything, plans and creates its capped triggers and
writes every pod's status and Event; once its ``/readyz`` answers, its trigger count
stops moving, every pod carries its ``gpu-intent.io/scale-up`` status (so the peak
includes the cache after every pod was written once) and its peak resident set
(``VmHWM`` in /proc/<pid>/status, Linux) has not grown for 10 s, that peak is read.

The controller runs as the image runs it (`IMAGE_ENV`, the Dockerfile's ``ENV``:
``PYTHONOPTIMIZE=2``, so no docstring is loaded) and, for comparison in the same run, as
a plain ``python`` would. Both read bytecode compiled beforehand into a temporary
``PYTHONPYCACHEPREFIX`` (the image compiles its venv at build time), so that no
compilation at start-up counts in the peak. Printed: peak RSS in MiB, for N = 10,000
(the target is < 150 MB) both ways and, for the slope, N = 1,000 as the image runs it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp

from intent.contract import ANNOTATION_SCALE_UP, Intent, Source
from sim.server import ApiServer
from sim.store import NAMESPACES, NODEPOOLS, PODS, Store

EXE = str(Path(sys.executable).with_name("gpu-intent"))
ROOT = Path(__file__).resolve().parent.parent
#: What the Dockerfile's final stage sets that changes the controller's memory
#: (`tests/test_chart_image.py` checks that the Dockerfile sets it).
IMAGE_ENV = {"PYTHONOPTIMIZE": "2"}
#: (label, extra environment) of the ways the controller is run.
MODES: tuple[tuple[str, dict[str, str]], ...] = (("as the image runs it (PYTHONOPTIMIZE=2)", IMAGE_ENV), ("plain python", {}))


def precompile(prefix: str) -> None:
    """Compile the venv's packages and ours into ``prefix`` (a ``PYTHONPYCACHEPREFIX``),
    at optimization levels 0 and 2, as the image's build stage does for its venv.
    Raises `subprocess.CalledProcessError` when compileall fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    packages = [sysconfig.get_paths()["purelib"]]
    packages += [str(ROOT / d) for d in ("controller", "gpu_intent", "webhook", "certs", "sim")]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-o", "0", "-o", "2", *packages],
        env={**env, "PYTHONPYCACHEPREFIX": prefix},
        check=True,
        stdout=subprocess.DEVNULL,
    )
MODELS = ("t4", "l4", "a10g")


def pod(i: int) -> dict[str, Any]:
    """A pending KAI pod with an intent, about the size a real Deployment's pod has."""
    intent = Intent(Decimal("0.5"), model=MODELS[i % 3], source=(Source("kai", "gpu-fraction"),))
    env = [{"name": f"VAR_{k}", "value": f"value-{k}-{i}"} for k in range(10)]
    return {
        "metadata": {
            "name": f"infer-{i}",
            "namespace": f"team-{i % 20}",
            "labels": {"app": f"infer-{i % 50}", "pod-template-hash": "7d9f8c6b5"},
            "annotations": {**intent.to_annotations(), "gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": MODELS[i % 3]},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "infer",
                    "image": "example.registry/infer:7",
                    "env": env,
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                }
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}],
        },
    }


def nodepool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "gpu",
                    },
                    "requirements": [
                        {
                            "key": "karpenter.k8s.aws/instance-gpu-name",
                            "operator": "In",
                            "values": list(MODELS),
                        }
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                }
            }
        },
    }


def fill(store: Store, n: int) -> None:
    for k in range(20):
        store.create(
            NAMESPACES,
            {"metadata": {"name": f"team-{k}", "labels": {"gpu-intent.io/inject": "enabled"}}},
        )
    store.create(NAMESPACES, {"metadata": {"name": "gpu-intent-system"}})
    store.create(NODEPOOLS, nodepool("gpu"))
    for i in range(n):
        body = pod(i)
        created = store.create(PODS, body, body["metadata"]["namespace"])
        meta = created["metadata"]

        store.mutate(
            PODS,
            meta["namespace"],
            meta["name"],
            functools.partial(mark_unschedulable, stamp=str(meta["creationTimestamp"])),
            subresource="status",
        )


def mark_unschedulable(obj: dict[str, Any], stamp: str) -> None:
    """Set ``obj``'s status as kube-scheduler leaves a pod no node fits: Pending,
    ``PodScheduled=False, reason=Unschedulable`` since ``stamp`` (RFC 3339)."""
    obj["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/0 nodes are available",
                "lastTransitionTime": stamp,
            }
        ],
    }


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status (not Linux?)")


async def measure(n: int, port: int, env: dict[str, str] | None = None) -> float:
    """Peak RSS (MiB) of the controller, run with ``env`` added to this environment,
    with ``n`` pending pods cached."""
    store = Store()
    fill(store, n)
    with tempfile.TemporaryDirectory() as tmp:
        async with ApiServer(store, token="bench") as server:
            kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
            proc = await asyncio.create_subprocess_exec(
                EXE, "--log-level", "WARNING", "controller", "--kubeconfig", str(kubeconfig),
                "--metrics-address", f"127.0.0.1:{port}",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
            )  # fmt: skip
            try:
                await _until_settled(port, store)
                await _until_every_status(store)
                await _until_peak_holds(proc.pid)
                return peak_rss_mib(proc.pid)
            finally:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 120)


async def _until_ready(port: int, seconds: float = 300, poll: float = 0.5) -> None:
    """Wait until the controller's ``/readyz`` answers 200 (its caches are synced)."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(poll)


async def _until_settled(port: int, store: Store, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    await _until_ready(port, seconds)
    last, stable = -1, 0
    while time.monotonic() < deadline and stable < 6:  # 3 s without a new trigger
        count = len(store.list(PODS, "gpu-intent-system")[0])
        stable = stable + 1 if count == last else 0
        last = count
        await asyncio.sleep(0.5)


async def _until_every_status(store: Store, seconds: float = 1200) -> None:
    """Wait until every GPU pod carries the controller's status annotation (10,000 status
    writes and Events take it a few minutes at its default write rate)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pods = [p for k in range(20) for p in store.list(PODS, f"team-{k}")[0]]
        if all(ANNOTATION_SCALE_UP in (p["metadata"].get("annotations") or {}) for p in pods):
            return
        await asyncio.sleep(1.0)
    raise RuntimeError("the controller did not write every pod's status in time")


async def _until_peak_holds(pid: int, quiet: float = 10.0, seconds: float = 300) -> None:
    """Wait until the peak RSS has not grown for ``quiet`` seconds: after the triggers
    settle, the controller still writes a status and an Event per pod (10,000 of each
    take it about 50 s here), and its memory grows meanwhile."""
    deadline = time.monotonic() + seconds
    peak, since = peak_rss_mib(pid), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        await asyncio.sleep(0.5)
        if (now := peak_rss_mib(pid)) > peak:
            peak, since = now, time.monotonic()


def run(
    runs: tuple[tuple[int, int], ...] = ((1_000, 0), (10_000, 0), (10_000, 1)),
) -> None:
    """Measure and print each ``(pods, index into MODES)`` of ``runs``."""
    with tempfile.TemporaryDirectory() as prefix:
        precompile(prefix)
        for n, mode in runs:
            label, env = MODES[mode]
            started = time.monotonic()
            env = {**env, "PYTHONPYCACHEPREFIX": prefix}
            rss = asyncio.run(measure(n, 18000 + os.getpid() % 1000, env))
            print(
                f"controller process with {n:>6} pending GPU pods cached, {label}: peak RSS "
                f"{rss:6.1f} MiB (VmHWM; target < 150 MB at 10,000; "
                f"{time.monotonic() - started:.0f} s)"
            )


if __name__ == "__main__":
    run()
