"""Graceful shutdown and readiness of the controller (issue 8): a real ``gpu-intent
controller`` process, in the middle of a scale-up, exits 0 within ``--shutdown-timeout``
of SIGTERM and releases its Lease; ``/readyz`` names the caches not synced."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO

import aiohttp
from e2e_support import TRIGGERS_NS, Env, eventually, free_port

from controller import server as metrics_server
from gpu_intent.demo import apply, default_examples, load_manifests

EXE = str(Path(sys.executable).with_name("gpu-intent"))
GRACE = 3.0


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text()


async def test_sigterm_stops_the_controller_within_the_bound(env: Env, tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "controller.log"
    with log_path.open("w") as log:
        took, code = await _run_and_terminate(env, port, log)
    output = log_path.read_text()
    assert code == 0, output[-3000:]
    # The bound plus the interpreter's own exit (no process is killed to meet it).
    assert took < GRACE + 2, (took, output[-3000:])
    assert "shutting down: no new pass" in output and "released lease" in output
    lease = await env.kube.get_lease(TRIGGERS_NS, "gpu-intent-controller")
    assert lease is not None and not lease["spec"].get("holderIdentity")


async def _run_and_terminate(env: Env, port: int, log: IO[str]) -> tuple[float, int]:
    """Start the controller, wait until it leads and creates triggers, SIGTERM it:
    (seconds from the signal to its exit, exit code)."""
    proc = await asyncio.create_subprocess_exec(
        EXE, "controller", "--kubeconfig", str(env.cluster.kubeconfig),
        "--metrics-address", f"127.0.0.1:{port}", "--namespace", TRIGGERS_NS,
        "--default-nodepool", "gpu-standard", "--shutdown-timeout", str(GRACE),
        stdout=log, stderr=log, env={**os.environ, "POD_NAME": "replica-a"},
    )  # fmt: skip
    try:

        async def ready() -> bool:
            try:
                return (await get(f"http://127.0.0.1:{port}/readyz"))[0] == 200
            except aiohttp.ClientError:
                return False

        await eventually(ready, 30)

        async def leads() -> bool:
            lease = await env.kube.get_lease(TRIGGERS_NS, "gpu-intent-controller")
            return lease is not None and lease["spec"].get("holderIdentity") == "replica-a"

        await eventually(leads, 15)
        for doc in load_manifests(default_examples()):
            if doc["kind"] == "Pod":
                await apply(env.api, doc)

        async def creating() -> bool:  # SIGTERM while it scales up
            return bool(await env.pods(TRIGGERS_NS, "gpu-intent.io/trigger=true"))

        await eventually(creating, 20)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), GRACE + 10)
        took = time.monotonic() - sent
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return took, code


async def test_readyz_names_the_caches_not_synced(env: Env) -> None:
    failing = env.cluster.faults.add("error", verb="list", resource="nodeclaims")
    controller = env.controller()
    runner = await metrics_server.start(controller, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/readyz"
    task = asyncio.create_task(controller.run())
    try:

        async def others_synced() -> bool:
            return (
                sum(i.synced.is_set() for i in controller.informers)
                == len(controller.informers) - 1
            )

        await eventually(others_synced, 10)
        assert await get(url) == (503, "caches not synced: nodeclaims")
        assert not controller.ready.is_set()  # and nothing is decided
        env.cluster.faults.remove(failing)
        await asyncio.wait_for(controller.ready.wait(), 40)
        assert await get(url) == (200, "ok")
        controller.stopping.set()
        assert await get(url) == (503, "shutting down")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()
