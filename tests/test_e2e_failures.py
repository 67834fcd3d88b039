"""Failures, consolidation, orphans and caps, end to end: the real webhook and controller
against the sim over HTTP, with the sim's Karpenter failing as the real one does
(`sim.nodeclaims.Lifecycle` fault switches, `sim.disruption.Emptiness`, NodePool
``spec.limits``). Each test counts every NodeClaim the sim ever admitted
(`NodeClaimCount`) and ends with no trigger left."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from conftest import make_env
from e2e_support import (
    FAST,
    TRIGGERS_NS,
    Env,
    NodeClaimCount,
    TriggerCount,
    eventually,
    settled,
)
from test_e2e_exact import kai_pod, node_of, status_of

from controller.decisions import PlanConfig
from controller.model import RetryState, ScaleUpStatus
from controller.reconciler import Controller, ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.demo import apply
from sim import store as sim_store
from sim.catalog import CATALOG, ZONES

L4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}
L4_TYPES = [
    it.name for it in CATALOG if it.labels().get("karpenter.k8s.aws/instance-gpu-name") == "l4"
]
#: Retries a test can wait for: 0.3 s, then 0.6 s.
RETRIES: dict[str, Any] = {"retry_base_seconds": 0.3, "retry_max_seconds": 1.0, "retry_attempts": 2}


@asynccontextmanager
async def running(
    env: Env, *, protect_seconds: float = 120.0, rate: float = 0.0, **plan: Any
) -> AsyncIterator[tuple[Controller, NodeClaimCount, TriggerCount]]:
    """The controller with ``plan`` settings, running, and counts of every NodeClaim and
    trigger created from now on."""
    claims, triggers = NodeClaimCount(env.cluster), TriggerCount(env.cluster)
    config = ControllerConfig(
        plan=PlanConfig(
            trigger=TriggerSettings(namespace=TRIGGERS_NS), default_nodepool="gpu-standard", **plan
        ),
        idle_seconds=0.02,
        max_delay_seconds=0.2,
        resync_seconds=0.5,
        protect_seconds=protect_seconds,
        trigger_creates_per_second=rate,
    )
    controller = Controller(env.kube, config)
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(controller.ready.wait(), 5)
    env.running_controller = controller  # for `settled`
    try:
        yield controller, claims, triggers
    finally:
        env.running_controller = None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await claims.close()
        await triggers.close()


def told(env: Env, name: str, phase: str) -> Callable[[], Any]:
    async def check() -> ScaleUpStatus | None:
        status = await status_of(env, "ml", name)
        return status if status is not None and status.phase == phase else None

    check.__name__ = f"{name} told {phase}"
    return check


async def retry_of(env: Env, name: str) -> RetryState | None:
    pod = await env.core.read_namespaced_pod(name, "ml")
    return RetryState.from_annotation((pod.metadata.annotations or {}).get("gpu-intent.io/retry"))


async def no_triggers(env: Env) -> bool:
    return await env.pods(TRIGGERS_NS) == []


def live_claims(env: Env) -> list[dict[str, Any]]:
    return env.cluster.store.list(sim_store.NODECLAIMS)[0]


async def fails_for_good(env: Env, name: str) -> ScaleUpStatus:
    """Create KAI half-GPU L4 pod ``name`` and wait for it to be told ``Failed`` because
    its NodeClaims were deleted before they were Ready; then no trigger is left and,
    once settled (a Failed pod buys nothing more), no NodeClaim. Its status."""
    await apply(env.api, kai_pod(name, {"gpu-fraction": "0.5"}, node_selector=L4))
    status: ScaleUpStatus = await eventually(told(env, name, "Failed"), 20)
    assert "deleted before it was Ready" in status.message
    await eventually(lambda: no_triggers(env), 5)
    await settled(env)
    assert live_claims(env) == []
    return status


async def test_insufficient_capacity_then_a_retry_lands_in_another_zone(tmp_path: Path) -> None:
    """Every L4 offering is out: the NodeClaim is deleted (InsufficientCapacityError), the
    trigger has failed, the pod waits its backoff; meanwhile one zone gets capacity back,
    and the retry's NodeClaim launches there. Two NodeClaims in all, one of them used."""
    timings = dataclasses.replace(
        FAST, launch_seconds=1.5, unavailable_offerings_ttl_seconds=0.3
    )  # launch slower than the controller links, as EC2 is
    async with make_env(tmp_path, timings) as env:
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        karpenter.no_capacity.update((t, z) for t in L4_TYPES for z in ZONES)
        # A 2 s backoff: the test sees the first failure (the retry annotation) and gives a
        # zone its capacity back before the retry.
        retries = {"retry_base_seconds": 2.0, "retry_max_seconds": 2.0, "retry_attempts": 3}
        async with running(env, **retries) as (_, claims, triggers):
            await apply(env.api, kai_pod("ice", {"gpu-fraction": "0.5"}, node_selector=L4))

            async def failed_once() -> bool:
                retry = await retry_of(env, "ice")
                return retry is not None and retry.attempts >= 1

            await eventually(failed_once, 15)
            karpenter.no_capacity.clear()
            karpenter.no_capacity.update((t, z) for t in L4_TYPES for z in ZONES[:-1])

            async def bound() -> str | None:
                return await node_of(env, "ml", "ice")

            node = await eventually(bound, 15)
            await eventually(told(env, "ice", "Scheduled"), 10)
            await eventually(lambda: no_triggers(env), 5)
            await settled(env)  # a late extra NodeClaim would show up by then
        retry = await retry_of(env, "ice")
        assert retry is not None and retry.attempts == 1
        assert "deleted before it was Ready" in retry.reason
        assert triggers.adds == 2
        assert len(claims.created) == 2
        [used] = live_claims(env)
        assert used["status"]["nodeName"] == node
        assert used["metadata"]["labels"]["topology.kubernetes.io/zone"] == ZONES[-1]


async def test_insufficient_capacity_before_the_link_is_written_still_counts_as_a_failure(
    tmp_path: Path,
) -> None:
    """The launch fails as soon as the NodeClaim is created, before the controller has
    recorded a link on the trigger (``gpu-intent.io/nodeclaim``): the NodeClaim carried
    the trigger's marker, so the failure is still seen. Two attempts, two NodeClaims,
    then Failed; not a NodeClaim per Karpenter batch while the trigger looks merely
    unlinked."""
    timings = dataclasses.replace(FAST, launch_seconds=0.0, unavailable_offerings_ttl_seconds=0.3)
    async with make_env(tmp_path, timings) as env:
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        karpenter.no_capacity.update((t, z) for t in L4_TYPES for z in ZONES)
        async with running(env, **RETRIES) as (_, claims, triggers):
            await fails_for_good(env, "ice")
        assert len(claims.created) == 2
        assert triggers.adds == 2


async def test_a_launch_that_never_ends_is_retried_then_failed_and_recovers(
    tmp_path: Path,
) -> None:
    """The cloud never answers: Karpenter's launch timeout deletes each NodeClaim; after
    two attempts the pod is Failed, saying why and what to do. Doing it (removing the
    retry annotation once the cloud is back) gets the pod its node."""
    timings = dataclasses.replace(FAST, launch_timeout_seconds=1.0)
    async with make_env(tmp_path, timings) as env:
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        karpenter.lifecycle.launch_hangs = True
        async with running(env, **RETRIES) as (_, claims, triggers):
            status = await fails_for_good(env, "hang")
            assert "kubectl annotate pod -n ml hang gpu-intent.io/retry-" in status.message
            assert len(claims.created) == 2
            assert triggers.adds == 2
            reasons = [e["reason"] for e in await env.events("ml", "hang")]
            assert "ScaleUpRetry" in reasons and "ScaleUpFailed" in reasons

            karpenter.lifecycle.launch_hangs = False
            await env.kube.annotate_pod("ml", "hang", {"gpu-intent.io/retry": None})

            async def bound() -> str | None:
                return await node_of(env, "ml", "hang")

            await eventually(bound, 15)
            await eventually(lambda: no_triggers(env), 5)
        assert len(claims.created) == 3


async def test_a_node_that_never_registers_is_retried_then_failed(tmp_path: Path) -> None:
    """The instance launches but its node never joins: Karpenter's registration timeout
    (15 min; 1.5 s here) deletes each NodeClaim (launched, not registered). After two
    attempts the pod is Failed, two NodeClaims in all, none left, no trigger left."""
    timings = dataclasses.replace(FAST, registration_timeout_seconds=1.5)
    async with make_env(tmp_path, timings) as env:
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        karpenter.lifecycle.registration_hangs = True
        async with running(env, **RETRIES) as (_, claims, triggers):
            await fails_for_good(env, "noreg")
        assert len(claims.created) == 2
        assert all(
            any(
                c["type"] == "Launched" and c["status"] == "True"
                for c in claim["status"].get("conditions") or ()
            )
            for claim in claims.created.values()
        )  # each launched, then timed out waiting for its node
        assert triggers.adds == 2


async def test_a_nodeclaim_that_never_initializes_is_deleted_retried_then_failed(
    tmp_path: Path,
) -> None:
    """The device plugin never advertises nvidia.com/gpu: Initialized stays Unknown
    (ResourceNotRegistered) and Karpenter never gives up. The controller's own timeout
    fails the trigger and deletes the NodeClaim; after the second attempt the pod is
    Failed. No NodeClaim is left behind. (The sim's KAI scheduler places pods by GFD
    labels, which such a node has, so it is kept down here: the pod must not bind.)"""
    async with make_env(tmp_path, FAST) as env:
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        karpenter.lifecycle.unregistered_resources.add("nvidia.com/gpu")
        async with running(env, init_timeout_seconds=1.5, **RETRIES) as (_, claims, triggers):
            await apply(env.api, kai_pod("noinit", {"gpu-fraction": "0.5"}, node_selector=L4))
            await eventually(unschedulable(env, "noinit"), 10)
            await stop_kai_scheduler(env)
            status = await eventually(told(env, "noinit", "Failed"), 20)
            assert "was not Ready 1.5s after its creation" in status.message
            await eventually(lambda: no_triggers(env), 5)

            async def claims_gone() -> bool:
                return live_claims(env) == []

            await eventually(claims_gone, 10)
            await settled(env)
        assert len(claims.created) == 2
        assert triggers.adds == 2
        assert await node_of(env, "ml", "noinit") is None


def unschedulable(env: Env, name: str) -> Callable[[], Any]:
    async def check() -> bool:
        pod = await env.core.read_namespaced_pod(name, "ml")
        return any(c.reason == "Unschedulable" for c in pod.status.conditions or [])

    check.__name__ = f"{name} Unschedulable"
    return check


async def stop_kai_scheduler(env: Env) -> None:
    """Cancel the sim's KAI scheduler loop (the pods' scheduler is down)."""
    kai = next(t for t in env.cluster._tasks if t.get_name() == "sim-scheduler/kai-scheduler")
    kai.cancel()
    await asyncio.gather(kai, return_exceptions=True)


async def test_a_nodepool_at_its_limits_fails_with_karpenters_message(tmp_path: Path) -> None:
    async with make_env(tmp_path, FAST) as env:

        def no_gpus(pool: dict[str, Any]) -> None:
            pool["spec"]["limits"] = {"nvidia.com/gpu": "0"}

        env.cluster.store.mutate(sim_store.NODEPOOLS, None, "gpu-standard", no_gpus)
        async with running(env, **RETRIES) as (_, claims, triggers):
            await apply(env.api, kai_pod("capped", {"gpu-fraction": "0.5"}, node_selector=L4))
            status = await eventually(told(env, "capped", "Failed"), 20)
            assert "NodePool gpu-standard is at its limits" in status.message
            assert "exceed limits for nodepool" in status.message
            await eventually(lambda: no_triggers(env), 5)
        assert claims.created == {}
        assert triggers.adds == 2


async def test_a_new_node_survives_emptiness_consolidation_until_a_slow_scheduler_binds(
    tmp_path: Path,
) -> None:
    """Consolidation on, ``consolidateAfter: 0s``, re-validation 0.3 s: an empty new node
    would be gone within a second of Ready. KAI's scheduler is down while the node comes
    up and for 3 s after; the node carries karpenter.sh/do-not-disrupt, so the pod gets
    it when the scheduler is back, and exactly one NodeClaim is bought. Once the pod is
    bound the protection is removed, and the node, emptied, is consolidated."""
    timings = dataclasses.replace(FAST, consolidation_validation_seconds=0.3)
    async with make_env(tmp_path, timings) as env:
        cluster = env.cluster
        assert cluster.karpenter is not None

        def consolidate_at_once(pool: dict[str, Any]) -> None:
            pool["spec"]["disruption"] = {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "0s",
            }

        cluster.store.mutate(sim_store.NODEPOOLS, None, "gpu-standard", consolidate_at_once)
        cluster.karpenter.emptiness.enabled = True
        async with running(env, protect_seconds=30.0, cover_seconds=30.0) as (_, claims, _t):
            await apply(env.api, kai_pod("slow", {"gpu-fraction": "0.5"}, node_selector=L4))
            await eventually(unschedulable(env, "slow"), 10)
            await stop_kai_scheduler(env)  # the pod's scheduler goes down
            await eventually(told(env, "slow", "NodeReady"), 15)
            # Time, not an event: consolidateAfter 0 s plus 0.3 s re-validation, many
            # times over; an unprotected empty node would be gone by then.
            await asyncio.sleep(3.0)
            [claim] = live_claims(env)
            node_obj = cluster.store.get(sim_store.NODES, None, claim["status"]["nodeName"])
            for obj in (claim, node_obj):  # the Node's is the one Karpenter reads now
                assert obj["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
            back = asyncio.create_task(cluster.scheduler.run_loop("kai-scheduler"))
            try:

                async def bound() -> str | None:
                    return await node_of(env, "ml", "slow")

                node = await eventually(bound, 10)
                assert node == claim["status"]["nodeName"]

                async def unprotected() -> bool:
                    [now] = live_claims(env)
                    return "karpenter.sh/do-not-disrupt" not in (
                        now["metadata"].get("annotations") or {}
                    )

                await eventually(unprotected, 10)
                assert len(claims.created) == 1
                await env.core.delete_namespaced_pod("slow", "ml", grace_period_seconds=0)

                async def consolidated() -> bool:
                    return live_claims(env) == []

                await eventually(consolidated, 10)
            finally:
                back.cancel()
                await asyncio.gather(back, return_exceptions=True)
        assert len(claims.created) == 1


async def test_orphan_triggers_are_removed_and_a_flapping_group_cools_down(
    tmp_path: Path,
) -> None:
    """A pod deleted right after its trigger was made: the trigger is removed before
    Karpenter's batch closes (nothing bought). Its replacement, at once, waits out the
    cooldown (no trigger meanwhile) and then gets one: one NodeClaim in all."""
    timings = dataclasses.replace(FAST, batch_idle_seconds=2.0, batch_max_seconds=4.0)
    async with make_env(tmp_path, timings) as env:
        async with running(env, cooldown_seconds=2.0) as (_, claims, triggers):
            await apply(env.api, kai_pod("first", {"gpu-fraction": "0.5"}, node_selector=L4))
            await eventually(told(env, "first", "Triggered"), 10)
            await env.core.delete_namespaced_pod("first", "ml", grace_period_seconds=0)
            await eventually(lambda: no_triggers(env), 5)
            await apply(env.api, kai_pod("second", {"gpu-fraction": "0.5"}, node_selector=L4))
            status = await eventually(told(env, "second", "Waiting"), 10)
            assert "cooldown" in status.message
            assert await env.pods(TRIGGERS_NS) == []

            async def bound() -> str | None:
                return await node_of(env, "ml", "second")

            await eventually(bound, 15)
            await eventually(lambda: no_triggers(env), 5)
            await settled(env)
        assert triggers.adds == 2
        assert len(claims.created) == 1


async def test_caps_make_demand_wait_and_say_so(tmp_path: Path) -> None:
    """Per-trigger GPUs: a 2-GPU pod with a cap of 1 waits and nothing is bought for it.
    Per pool: with one live trigger allowed on gpu-standard, the second of two 1-GPU pods
    waits until the first one's trigger is gone, then gets its own node. (The rate limit
    is tested in tests/test_controller_failures.py.)"""
    async with make_env(tmp_path, FAST) as env:
        # A short cover: the second pod may first be told NodeReady on the first node's
        # GPU before the first pod is seen bound there ("Known limits").
        caps = {"max_gpus_per_trigger": 1, "max_triggers_per_pool": 1, "cover_seconds": 1.0}
        async with running(env, rate=5.0, **caps) as (
            _,
            claims,
            triggers,
        ):
            two = {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}
            await apply(env.api, kai_pod("two", two, node_selector=L4))
            status = await eventually(told(env, "two", "Waiting"), 10)
            assert "--max-gpus-per-trigger" in status.message
            for name in ("a", "b"):  # 16 GB each: two do not fit one 24 GB L4
                await apply(env.api, kai_pod(name, {"gpu-memory": "16000"}, node_selector=L4))

            async def one_waits_for_the_pool() -> bool:
                statuses = [await status_of(env, "ml", n) for n in ("a", "b")]
                return any(
                    s is not None and s.phase == "Waiting" and "NodePool gpu-standard" in s.message
                    for s in statuses
                )

            await eventually(one_waits_for_the_pool, 10)
            assert len(await env.pods(TRIGGERS_NS)) == 1

            async def both_bound() -> bool:
                return all([await node_of(env, "ml", n) for n in ("a", "b")])

            await eventually(both_bound, 20)
            await eventually(lambda: no_triggers(env), 5)
            await settled(env)
        assert await node_of(env, "ml", "two") is None
        assert (await status_of(env, "ml", "two")).phase == "Waiting"  # type: ignore[union-attr]
        assert triggers.adds == 2
        assert len(claims.created) == 2


async def test_the_retry_count_survives_a_controller_restart(tmp_path: Path) -> None:
    """After the first failed attempt the controller is replaced by a new one (nothing
    in memory): the count read from the pod's annotation goes on, and the pod is Failed
    after three attempts in all, three NodeClaims, not four."""
    timings = dataclasses.replace(FAST, launch_timeout_seconds=1.0)
    # A 2 s backoff: the restart falls inside it, while no trigger exists. (A trigger
    # whose NodeClaim fails while no controller runs is retried by Karpenter itself; see
    # docs/limits.md, "Failures the controller does not see".)
    three = {"retry_base_seconds": 2.0, "retry_max_seconds": 2.0, "retry_attempts": 3}
    async with make_env(tmp_path, timings) as env:
        karpenter = env.cluster.karpenter
        assert karpenter is not None
        karpenter.lifecycle.launch_hangs = True
        claims = NodeClaimCount(env.cluster)
        try:
            async with running(env, **three) as (first, _, _t):
                await apply(env.api, kai_pod("again", {"gpu-fraction": "0.5"}, node_selector=L4))

                async def one_attempt() -> bool:
                    retry = await retry_of(env, "again")
                    return retry is not None and retry.attempts == 1

                await eventually(one_attempt, 15)
                await first.flush_statuses()
            async with running(env, **three):
                status = await eventually(told(env, "again", "Failed"), 20)
                assert "3 failed scale-ups" in status.message
                await eventually(lambda: no_triggers(env), 5)
                await settled(env)
        finally:
            await claims.close()
        assert len(claims.created) == 3
