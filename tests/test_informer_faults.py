"""The controller's informers against a sim API server that fails on demand
(`sim.faults`): each recovers, and the waits between relists are bounded (issue 8)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import eventually, free_port
from kubernetes_asyncio import client

from controller.cache import InformerCache, Kind
from controller.informer import Informer, InformerSpec, retry_delay
from intent.kube import PODS, Kube, KubeError, load_configuration
from sim.faults import Faults
from sim.server import ApiServer
from sim.store import NAMESPACES, Store
from sim.store import PODS as SIM_PODS

MAX_BACKOFF = 2.0


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


class Rig:
    """One pods informer against a sim API server; ``waits`` records every backoff
    asked for (each then sleeps 10 ms, so the test does not wait out real backoffs)."""

    def __init__(self, server: ApiServer, faults: Faults, store: Store, kube: Kube) -> None:
        self.server, self.faults, self.store, self.kube = server, faults, store, kube
        self.state = InformerCache(time.monotonic)
        self.waits: list[float] = []
        self.informer = Informer(
            kube,
            InformerSpec(Kind.PENDING_PODS, PODS, field_selector="spec.nodeName="),
            self.state,
            lambda: None,
            max_backoff=MAX_BACKOFF,
            sleep=self._sleep,
        )

    def restarts(self, reason: str) -> float:
        """The informer's relists for ``reason``, from the registry it counts on."""
        value = self.informer.metrics.registry.get_sample_value(
            "gpu_intent_informer_restarts_total", {"informer": Kind.PENDING_PODS, "reason": reason}
        )
        return value or 0.0

    async def _sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0.01)

    async def sees(self, name: str, seconds: float = 10.0) -> None:
        async def cached() -> bool:
            return self.state.current(Kind.PENDING_PODS, ("default", name)) is not None

        await eventually(cached, seconds)

    async def watching(self) -> None:
        async def open_() -> bool:
            return self.faults.open_watches("pods") >= 1

        await eventually(open_, 10)
        await asyncio.sleep(1.1)  # older than a "very short watch"


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = Store()
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    faults = Faults()
    async with ApiServer(store, token="t", faults=faults) as server:
        cfg = await load_configuration(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        kube = Kube(client.ApiClient(configuration=cfg))
        made = Rig(server, faults, store, kube)
        task = asyncio.create_task(made.informer.run())
        try:
            await asyncio.wait_for(made.informer.synced.wait(), 10)
            yield made
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await kube.close()


async def test_recovers_from_429_honouring_retry_after(rig: Rig) -> None:
    await rig.watching()
    throttled = rig.faults.add("throttle", resource="pods", count=3, retry_after=1.5)
    before = rig.restarts("throttled")
    rig.faults.drop_watches("pods")
    rig.store.create(SIM_PODS, pod("after-429"))
    await rig.sees("after-429")
    assert throttled.hits == 3
    assert rig.restarts("throttled") == before + 3
    assert len(rig.waits) == 3 and all(1.5 <= w <= MAX_BACKOFF for w in rig.waits), rig.waits


async def test_retry_after_beyond_the_cap_waits_the_cap(rig: Rig) -> None:
    await rig.watching()
    rig.faults.add("throttle", resource="pods", count=1, retry_after=3600)
    rig.faults.drop_watches("pods")
    rig.store.create(SIM_PODS, pod("p"))
    await rig.sees("p")
    assert rig.waits == [MAX_BACKOFF]


async def test_recovers_from_500s_with_bounded_jittered_backoff(rig: Rig) -> None:
    await rig.watching()
    failed = rig.faults.add("error", resource="pods", count=8)
    rig.faults.drop_watches("pods")
    rig.store.create(SIM_PODS, pod("after-500"))
    await rig.sees("after-500")
    assert failed.hits == 8 and len(rig.waits) == 8
    # The n-th wait is drawn from [0.1, min(cap, 0.5 * 2**(n-1))]: the windows grow,
    # none exceeds the cap, and they are not all equal (jitter).
    for n, wait in enumerate(rig.waits, start=1):
        assert 0.1 <= wait <= min(MAX_BACKOFF, 0.5 * 2 ** (n - 1)), rig.waits
    assert len(set(rig.waits)) > 1


async def test_a_dropped_watch_is_resumed_without_a_relist(rig: Rig) -> None:
    before = rig.restarts("error") + rig.restarts("expired")
    for i in range(3):
        await rig.watching()
        assert rig.faults.drop_watches("pods") == 1
        rig.store.create(SIM_PODS, pod(f"after-drop-{i}"))
        await rig.sees(f"after-drop-{i}")
    assert rig.restarts("error") + rig.restarts("expired") == before and rig.waits == []


async def test_410_relists_at_once(rig: Rig) -> None:
    await rig.watching()
    gone = rig.faults.add("gone", verb="watch", resource="pods", count=1)
    before = rig.restarts("expired")
    rig.faults.drop_watches("pods")
    rig.store.create(SIM_PODS, pod("after-410"))
    await rig.sees("after-410")
    assert gone.hits == 1 and rig.restarts("expired") == before + 1
    assert rig.waits == [0.0]


async def test_lost_connection_backs_off_within_the_cap(tmp_path: Path) -> None:
    """No API server at all (connection refused): the informer keeps trying, each wait
    within the cap, and never reports synced."""
    store = Store()
    async with ApiServer(store, token="t", port=free_port()) as server:
        path = server.write_kubeconfig(tmp_path / "kubeconfig")
    cfg = await load_configuration(str(path))  # the server is gone now
    kube = Kube(client.ApiClient(configuration=cfg))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    informer = Informer(
        kube,
        InformerSpec(Kind.PENDING_PODS, PODS),
        InformerCache(time.monotonic),
        lambda: None,
        max_backoff=MAX_BACKOFF,
        sleep=sleep,
    )
    task = asyncio.create_task(informer.run())
    try:

        async def tried() -> bool:
            return len(waits) >= 10

        await eventually(tried, 20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()
    assert not informer.synced.is_set()
    assert all(0.1 <= w <= MAX_BACKOFF for w in waits) and max(waits[6:]) > 0.5


def test_retry_delay() -> None:
    gone = KubeError("watching pods", 410, "Expired", "too old")
    throttled = KubeError("listing pods", 429, "TooManyRequests", "", retry_after=5)
    failed = KubeError("listing pods", 500, "InternalError", "")
    assert retry_delay(gone, 0.7, 30) == 0.0
    assert retry_delay(throttled, 0.7, 30) == 5
    assert retry_delay(throttled, 0.7, 2) == 2
    assert retry_delay(throttled, 9.0, 30) == 9.0
    assert retry_delay(failed, 0.7, 30) == 0.7
