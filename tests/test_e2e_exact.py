"""Exact scale-up, end to end: what is bought is what is needed, and only for who asked.

Each scenario runs the real webhook and controller against the sim and counts every
NodeClaim the sim's store ever admitted (`NodeClaimCount`), deleted ones included.
"""

from __future__ import annotations

import asyncio
from typing import Any

from e2e_support import TRIGGERS_NS, Env, NodeClaimCount, eventually, settled

from controller.model import ScaleUpStatus
from gpu_intent.demo import apply
from intent.quantity import parse_quantity

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def kai_pod(
    name: str,
    annotations: dict[str, str],
    *,
    namespace: str = "ml",
    cpu: str = "1",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A KAI-Scheduler pod asking for GPU through annotations only."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeSelector": node_selector or {},
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "c",
                    "image": "example.registry/infer:7",
                    "resources": {"requests": {"cpu": cpu, "memory": "2Gi"}},
                }
            ],
        },
    }


async def status_of(env: Env, namespace: str, name: str) -> ScaleUpStatus | None:
    pod = await env.core.read_namespaced_pod(name, namespace, _preload_content=False)
    annotations = (await pod.json())["metadata"].get("annotations") or {}
    return ScaleUpStatus.from_annotation(annotations.get("gpu-intent.io/scale-up"))


async def node_of(env: Env, namespace: str, name: str) -> str | None:
    pod = await env.core.read_namespaced_pod(name, namespace)
    return pod.spec.node_name  # type: ignore[no-any-return]


async def test_a_memory_only_pod_gets_the_cheapest_gpu_with_that_memory(
    running: tuple[Env, NodeClaimCount],
) -> None:
    env, count = running
    await apply(env.api, kai_pod("mem", {"gpu-memory": "20000"}))

    async def bound() -> str | None:
        return await node_of(env, "ml", "mem")

    await eventually(bound, 20)
    await settled(env)  # a late extra NodeClaim would show up by then
    [claim] = count.created.values()
    labels = claim["metadata"]["labels"]
    # Cheapest GPU with more than 20000 MiB per GPU among the pool's (t4 16 GB is too small).
    assert int(labels["karpenter.k8s.aws/instance-gpu-memory"]) > 20000
    assert labels["karpenter.k8s.aws/instance-gpu-name"] in ("a10g", "l4")

    async def closed() -> bool:
        status = await status_of(env, "ml", "mem")
        return status is not None and status.phase == "Scheduled"

    await eventually(closed, 10)
    status = await status_of(env, "ml", "mem")
    assert status is not None and status.node_claim == claim["metadata"]["name"]


async def test_two_kai_halves_needing_3_cpu_each_fit_the_node_their_trigger_buys(
    env: Env,
) -> None:
    """Both halves exist before the controller starts, so it sees them together: this
    tests trigger sizing, not the timing of two applies (see docs/limits.md, "Pods that
    arrive apart": they may be bound into a trigger sized for fewer of them)."""
    count = NodeClaimCount(env.cluster)
    selector = {"nvidia.com/gpu.product": "NVIDIA-L4"}
    for name in ("half-a", "half-b"):
        await apply(
            env.api, kai_pod(name, {"gpu-fraction": "0.5"}, cpu="3", node_selector=selector)
        )

    async def both_unschedulable() -> bool:
        pods = [await env.core.read_namespaced_pod(n, "ml") for n in ("half-a", "half-b")]
        return all(
            any(c.reason == "Unschedulable" for c in p.status.conditions or []) for p in pods
        )

    await eventually(both_unschedulable, 10)
    controller = env.controller()
    task = asyncio.create_task(controller.run())

    async def both_bound() -> bool:
        return all([await node_of(env, "ml", n) for n in ("half-a", "half-b")])

    try:
        await eventually(both_bound, 20)
        await settled(env, controller)  # a late extra NodeClaim would show up by then
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await count.close()
    [claim] = count.created.values()
    # The trigger asked for both pods' 6 CPUs, so Karpenter picked a node that holds them
    # (a g6.xlarge has 4 vCPUs), and both halves share its one L4.
    assert parse_quantity(claim["status"]["allocatable"]["cpu"], "cpu") >= 6
    assert claim["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] == "l4"
    assert await node_of(env, "ml", "half-a") == await node_of(env, "ml", "half-b")


async def test_pods_of_namespaces_that_did_not_opt_in_get_nothing_bought(
    running: tuple[Env, NodeClaimCount],
) -> None:
    env, count = running
    await apply(env.api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev"}})
    hand_written = {
        "gpu-fraction": "0.5",
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "8",
        "gpu-intent.io/model": "a100",
        "gpu-intent.io/source": "hand:written",
    }
    # The GFD selector keeps Karpenter from provisioning for the pod by itself (no
    # NodePool defines the label), so any NodeClaim would be one gpu-intent caused.
    gfd = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    await apply(env.api, kai_pod("sneaky", hand_written, namespace="dev", node_selector=gfd))

    async def unschedulable() -> bool:
        pod = await env.core.read_namespaced_pod("sneaky", "dev")
        return any(c.reason == "Unschedulable" for c in pod.status.conditions or [])

    await eventually(unschedulable, 10)
    await settled(env)  # controller passes, then a Karpenter batch or nothing pending
    assert count.created == {}
    assert await env.pods(TRIGGERS_NS) == []
    assert await status_of(env, "dev", "sneaky") is None


async def test_a_pod_whose_selector_no_node_will_match_is_told_why_and_nothing_is_bought(
    running: tuple[Env, NodeClaimCount],
) -> None:
    env, count = running
    await apply(
        env.api,
        kai_pod(
            "nowhere",
            {"gpu-fraction": "0.5"},
            node_selector={"nvidia.com/gpu.product": "NVIDIA-L4", "example.com/nowhere": "yes"},
        ),
    )

    async def told() -> ScaleUpStatus | None:
        status = await status_of(env, "ml", "nowhere")
        return status if status is not None and status.phase == "Unresolvable" else None

    status = await eventually(told, 10)
    assert "example.com/nowhere=yes" in status.message
    await settled(env)
    assert count.created == {}
    assert await env.pods(TRIGGERS_NS) == []
    reasons = [e["reason"] for e in await env.events("ml", "nowhere")]
    assert "NoNodePool" in reasons


def hami_pod(name: str, gpumem: str) -> dict[str, Any]:
    """A HAMi vGPU pod: one A10G slot with ``gpumem`` MiB of its memory."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {"nvidia.com/use-gputype": "A10G"},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "c",
                    "image": "example.registry/notebook:3",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi"},
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": gpumem},
                    },
                }
            ],
        },
    }


async def test_a_hami_pod_a_full_hami_node_cannot_take_gets_a_new_node(
    running: tuple[Env, NodeClaimCount],
) -> None:
    """The first HAMi pod's node advertises 10 nvidia.com/gpu for its one A10G, so in
    Karpenter's simulation a 1-GPU trigger fits there although the card's memory is
    taken: the second pod's trigger must not count that node (it runs pods), and a
    second node is bought: two NodeClaims in all, one pod on each."""
    env, count = running
    await apply(env.api, hami_pod("vgpu-1", "16000"))

    async def first() -> str | None:
        return await node_of(env, "ml", "vgpu-1")

    node_1 = await eventually(first, 20)
    await apply(env.api, hami_pod("vgpu-2", "16000"))

    async def second() -> str | None:
        return await node_of(env, "ml", "vgpu-2")

    node_2 = await eventually(second, 20)
    await settled(env)  # a late extra NodeClaim would show up by then
    assert node_1 != node_2
    assert len(count.created) == 2
    assert {c["metadata"]["labels"]["karpenter.sh/nodepool"] for c in count.created.values()} == {
        "gpu-hami"
    }
