"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from controller.decisions import PlanConfig
from controller.reconciler import Controller, ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.demo import default_examples, load_manifests
from intent.kube import NODECLAIMS, PODS, Kube
from sim import store as sim_store
from sim.cluster import SimCluster
from sim.nodeclaims import FAST_TIMINGS

#: Karpenter fast enough for tests (see `sim.nodeclaims.FAST_TIMINGS`).
FAST = FAST_TIMINGS
TRIGGERS_NS = "gpu-intent-system"
#: How many pods the examples hold (all in ``ml``): the native T4 trainer, HAMi, two KAI
#: halves, tensor-fusion and the DRA pod.
EXAMPLE_PODS = sum(doc["kind"] == "Pod" for doc in load_manifests(default_examples()))


async def eventually(check: Callable[[], Awaitable[Any]], seconds: float = 15.0) -> Any:
    """Poll ``check()`` until it returns something truthy, or fail the test."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"condition not met within {seconds}s: {getattr(check, '__name__', check)}")
        await asyncio.sleep(0.05)


async def settled(env: Env, controller: Controller | None = None, seconds: float = 15.0) -> None:
    """Wait for the point after which a trigger or NodeClaim the test says must not
    appear would have appeared: ``controller`` (the ``running`` fixture's by default) has
    completed two passes after the call with no creates in flight, and then Karpenter
    has completed a provisioning batch (`KarpenterSim.batches`), or a pass of it that
    saw those passes' writes shows it `quiet` (nothing on its way to a batch). Events,
    not a sleep."""
    controller = controller or env.running_controller
    karpenter = env.cluster.karpenter
    assert controller is not None and karpenter is not None
    start = controller.passes_done

    async def passed() -> bool:
        return controller.passes_done >= start + 2 and not controller.creating

    await eventually(passed, seconds)
    version, batches = env.cluster.store.resource_version, karpenter.batches_done

    async def karpenter_done() -> bool:
        if karpenter.batches_done > batches:
            return True
        return karpenter.seen_version >= version and karpenter.quiet

    await eventually(karpenter_done, seconds)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Env:
    cluster: SimCluster
    api: client.ApiClient
    kube: Kube
    #: The controller the ``running`` fixture runs, while it runs.
    running_controller: Controller | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    async def pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        items, _ = await self.kube.list(PODS, namespace=namespace, label_selector=label_selector)
        return items

    async def nodeclaims(self) -> list[dict[str, Any]]:
        items, _ = await self.kube.list(NODECLAIMS)
        return items

    async def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        response = await self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}", _preload_content=False
        )
        return list((await response.json())["items"])

    def controller(self, *, resync_seconds: float = 0.5, **plan: Any) -> Controller:
        config = ControllerConfig(
            plan=PlanConfig(
                trigger=TriggerSettings(namespace=TRIGGERS_NS),
                default_nodepool="gpu-standard",
                **plan,
            ),
            idle_seconds=0.02,
            max_delay_seconds=0.2,
            resync_seconds=resync_seconds,
        )
        # The controller counts on the registry its API adapter counts API errors on, as
        # the command wires them (one registry per controller).
        return Controller(self.kube, config, metrics=self.kube.metrics)


class NodeClaimCount:
    """Every NodeClaim the sim's store ever admitted since `start`, deleted ones too, read
    from a store watcher (the tests' view of what was bought)."""

    def __init__(self, cluster: SimCluster) -> None:
        self._watcher = cluster.store.watch(sim_store.NODECLAIMS)
        self.created: dict[str, dict[str, Any]] = {}
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        async for event in self._watcher:
            if event.type == "ADDED" or event.type == "MODIFIED":
                self.created[event.obj["metadata"]["name"]] = event.obj

    async def close(self) -> None:
        self._watcher.close()
        await asyncio.gather(self._task, return_exceptions=True)


class TriggerCount:
    """Every trigger pod the sim's store ever admitted in the trigger namespace since
    `start`, by name, with the pods it served (``gpu-intent.io/serves``)."""

    def __init__(self, cluster: SimCluster) -> None:
        self._watcher = cluster.store.watch(sim_store.PODS, TRIGGERS_NS)
        self.created: dict[str, tuple[str, ...]] = {}
        self.adds = 0
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        async for event in self._watcher:
            if event.type == "ADDED":
                meta = event.obj["metadata"]
                self.adds += 1
                serves = (meta.get("annotations") or {}).get("gpu-intent.io/serves", "")
                self.created[meta["name"]] = tuple(s for s in serves.split(",") if s)

    def triggers_per_pod(self) -> dict[str, int]:
        """How many triggers were ever created for each served pod (``ns/name``)."""
        out: dict[str, int] = {}
        for serves in self.created.values():
            for ref in serves:
                out[ref] = out.get(ref, 0) + 1
        return out

    async def close(self) -> None:
        self._watcher.close()
        await asyncio.gather(self._task, return_exceptions=True)
