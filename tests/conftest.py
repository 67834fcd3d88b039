"""Fixtures shared by the end-to-end tests (helpers live in `e2e_support`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from e2e_support import FAST, Env, NodeClaimCount
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from certs import write_tls_files
from controller.metrics import ControllerMetrics
from gpu_intent.demo import apply, default_examples, load_manifests, webhook_configuration
from intent.kube import Kube, load_configuration
from sim.cluster import SimCluster
from sim.nodeclaims import KarpenterTimings
from webhook import server as webhook_server


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    """The examples' namespaces and NodePools on a sim with the real webhook registered
    (the workload pods are left to each test)."""
    async with make_env(tmp_path, FAST) as made:
        yield made


@asynccontextmanager
async def make_env(tmp_path: Path, timings: KarpenterTimings) -> AsyncIterator[Env]:
    """`env` with Karpenter ``timings`` of one's choice."""
    tls = write_tls_files(tmp_path / "webhook", ["localhost"], ["127.0.0.1"])
    async with SimCluster(
        tmp_path / "cluster", karpenter=timings, scheduler_resync_seconds=0.1
    ) as cluster:
        runner = await webhook_server.start(
            webhook_server.make_app(),
            "127.0.0.1",
            0,
            webhook_server.ssl_context(str(tls.cert), str(tls.key)),
        )
        cfg = await load_configuration(str(cluster.kubeconfig))
        api = client.ApiClient(configuration=cfg)
        kube = Kube(client.ApiClient(configuration=cfg), ControllerMetrics(CollectorRegistry()))
        try:
            for doc in load_manifests(default_examples()):
                if doc["kind"] != "Pod":
                    await apply(api, doc)
            url = f"https://127.0.0.1:{runner.addresses[0][1]}/mutate"
            await apply(api, webhook_configuration(url, tls.ca_cert.read_bytes()))
            yield Env(cluster, api, kube)
            assert cluster.failed_components() == []
        finally:
            await kube.close()
            await api.close()
            await runner.cleanup()


@pytest.fixture
async def running(env: Env) -> AsyncIterator[tuple[Env, NodeClaimCount]]:
    """The controller running (``env.running_controller`` while it runs, for `settled`)
    and a count of every NodeClaim created from now on."""
    count = NodeClaimCount(env.cluster)
    controller = env.controller()
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(controller.ready.wait(), 5)
    env.running_controller = controller
    try:
        yield env, count
    finally:
        env.running_controller = None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await count.close()
