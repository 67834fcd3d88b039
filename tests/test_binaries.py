"""The installed ``gpu-intent`` command, run as separate processes: ``certs``, ``webhook``
and ``controller`` do the whole job against the simulated cluster through nothing but a
kubeconfig and HTTPS, as they would against a real cluster, and stop cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import sys
from pathlib import Path

import aiohttp
from e2e_support import FAST, TRIGGERS_NS, eventually, free_port
from kubernetes_asyncio import client

from gpu_intent.demo import apply, default_examples, load_manifests, webhook_configuration
from intent.kube import PODS, Kube, load_configuration
from sim.cluster import SimCluster

EXE = str(Path(sys.executable).with_name("gpu-intent"))


async def run(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        EXE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode()


async def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, ssl=context or False) as resp,
        ):
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def stop(proc: asyncio.subprocess.Process) -> int:
    proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), 15)


async def test_certs_webhook_and_controller_binaries_run_the_story(tmp_path: Path) -> None:
    code, out = await run(
        "certs", "--dns-name", "localhost", "--ip", "127.0.0.1", "--out-dir", str(tmp_path / "tls")
    )
    assert code == 0, out
    tls = tmp_path / "tls"
    assert {p.name for p in tls.iterdir()} == {"ca.crt", "tls.crt", "tls.key"}
    code, out = await run("certs", "--out-dir", str(tmp_path / "none"))
    assert code == 2 and "--dns-name" in out

    webhook_port, metrics_port = free_port(), free_port()
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    async with SimCluster(
        tmp_path / "cluster", karpenter=FAST, scheduler_resync_seconds=0.1
    ) as cluster:
        webhook = await asyncio.create_subprocess_exec(
            EXE,
            "webhook",
            f"--listen=127.0.0.1:{webhook_port}",
            f"--tls-cert-file={tls / 'tls.crt'}",
            f"--tls-key-file={tls / 'tls.key'}",
            env=env,
        )
        controller = await asyncio.create_subprocess_exec(
            EXE,
            "controller",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--namespace={TRIGGERS_NS}",
            "--default-nodepool=gpu-standard",
            f"--metrics-address=127.0.0.1:{metrics_port}",
            env=env,
        )
        cfg = await load_configuration(str(cluster.kubeconfig))
        api = client.ApiClient(configuration=cfg)
        kube = Kube(client.ApiClient(configuration=cfg))
        try:
            ca = ssl.create_default_context(cafile=str(tls / "ca.crt"))
            await eventually(lambda: http_ok(f"https://127.0.0.1:{webhook_port}/healthz", ca))
            await eventually(lambda: http_ok(f"http://127.0.0.1:{metrics_port}/readyz"))
            docs = load_manifests(default_examples())
            for doc in docs:
                if doc["kind"] != "Pod":
                    await apply(api, doc)
            await apply(
                api,
                webhook_configuration(
                    f"https://127.0.0.1:{webhook_port}/mutate", (tls / "ca.crt").read_bytes()
                ),
            )
            for doc in docs:
                if doc["kind"] == "Pod":
                    created = await apply(api, doc)
                    annotations = created["metadata"].get("annotations") or {}
                    # A DRA pod's intent is recorded by the controller, from its claim.
                    dra = bool(created["spec"].get("resourceClaims"))
                    assert ("gpu-intent.io/intent-version" in annotations) != dra

            async def all_bound_no_triggers() -> bool:
                pods, _ = await kube.list(PODS, namespace="ml")
                triggers, _ = await kube.list(PODS, namespace=TRIGGERS_NS)
                return (
                    len(pods) == 6 and all(p["spec"].get("nodeName") for p in pods) and not triggers
                )

            await eventually(all_bound_no_triggers, 30)
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            async with aiohttp.ClientSession() as session, session.get(url) as resp:
                metrics = await resp.text()
            created = re.search(
                r'gpu_intent_operations_total\{operation="create",result="ok"\} (\S+)', metrics
            )
            deleted = re.search(
                r'gpu_intent_operations_total\{operation="delete",result="ok"\} (\S+)', metrics
            )
            assert created and deleted and float(created.group(1)) == float(deleted.group(1)) == 4.0
        finally:
            codes = [await stop(proc) for proc in (webhook, controller)]
            await kube.close()
            await api.close()
        assert codes == [0, 0]
