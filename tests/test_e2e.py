"""Both sides of the story, end to end: the real webhook over TLS, the real controller
through kubernetes_asyncio, against the simulated cluster's HTTPS API."""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from decimal import Decimal
from typing import Any

from e2e_support import TRIGGERS_NS, Env, NodeClaimCount, eventually, settled

from controller.model import ScaleUpStatus
from gpu_intent.demo import apply, default_examples, load_manifests
from intent.contract import Intent, Source


async def create_workloads(env: Env) -> list[dict[str, Any]]:
    return [
        await apply(env.api, doc)
        for doc in load_manifests(default_examples())
        if doc["kind"] == "Pod"
    ]


def intent_of(pod: dict[str, Any]) -> Intent | None:
    return Intent.from_annotations(pod["metadata"].get("annotations"))


def is_native(pod: dict[str, Any]) -> bool:
    intent = intent_of(pod)
    return intent is not None and Source("resources", "nvidia.com/gpu") in intent.source


async def test_without_controller_sharing_layer_pods_stay_pending_while_whole_gpu_pod_gets_a_node(
    env: Env,
) -> None:
    await create_workloads(env)

    async def native_bound_and_others_refused() -> bool:
        pods = await env.pods("ml")
        native = [p for p in pods if is_native(p)]
        shared = [p for p in pods if not is_native(p)]
        # the HAMi, two KAI, tensor-fusion and DRA pods (the DRA pod has no intent yet:
        # the webhook cannot read its claim, and no controller runs to record it)
        if len(native) != 1 or len(shared) != 5 or not native[0]["spec"].get("nodeName"):
            return False
        for pod in shared:
            events = await env.events("ml", pod["metadata"]["name"])
            if not any(
                e["reason"] == "FailedScheduling" and e["source"].get("component") == "karpenter"
                for e in events
            ):
                return False
        return True

    await eventually(native_bound_and_others_refused)
    # Karpenter keeps re-evaluating the pods (requeued every 2 s here): a batch that
    # closes from now would have bought for them.
    karpenter = env.cluster.karpenter
    assert karpenter is not None
    await karpenter.batches(1, within=10)
    pods = await env.pods("ml")
    shared = [p for p in pods if not is_native(p)]
    assert all(not p["spec"].get("nodeName") and p["status"]["phase"] == "Pending" for p in shared)
    for pod in shared:
        condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        events = await env.events("ml", pod["metadata"]["name"])
        karpenter = [e for e in events if e["source"].get("component") == "karpenter"]
        assert any("Failed to schedule pod" in e["message"] for e in karpenter)
    claims = await env.nodeclaims()
    assert len(claims) == 1, "only the whole-GPU pod's NodeClaim"
    assert claims[0]["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g4dn.xlarge"


async def test_with_controller_every_pod_binds_triggers_go_and_gpus_match_the_need(
    env: Env,
) -> None:
    controller = env.controller()
    count = NodeClaimCount(env.cluster)  # every NodeClaim ever created, deleted ones too
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 5)
        await create_workloads(env)

        async def all_bound_no_triggers() -> bool:
            pods = await env.pods("ml")
            triggers = await env.pods(TRIGGERS_NS, "gpu-intent.io/trigger=true")
            return len(pods) == 6 and all(p["spec"].get("nodeName") for p in pods) and not triggers

        await eventually(all_bound_no_triggers, 20)
        pods = await env.pods("ml")
        await settled(env, controller)  # a NodeClaim bought late would appear by then

        async def every_claim_launched() -> bool:
            return all(
                "karpenter.k8s.aws/instance-gpu-count" in c["metadata"].get("labels", {})
                for c in count.created.values()
            )

        await eventually(every_claim_launched, 10)
        claims = list(count.created.values())
        # GPUs bought per model equal the pods' needs, fractions summed and rounded up.
        needed: dict[str, Decimal] = defaultdict(Decimal)
        for pod in pods:
            intent = intent_of(pod)
            assert intent is not None and intent.model is not None
            needed[intent.model] += intent.gpus
        bought: dict[str, int] = defaultdict(int)
        for claim in claims:
            labels = claim["metadata"]["labels"]
            bought[labels["karpenter.k8s.aws/instance-gpu-name"]] += int(
                labels["karpenter.k8s.aws/instance-gpu-count"]
            )
        assert dict(bought) == {model: math.ceil(gpus) for model, gpus in needed.items()}
        assert dict(bought) == {"t4": 1, "a10g": 1, "l4": 2, "l40s": 1}  # an L4 for the DRA pod
        # Both KAI halves share one L4 node.
        kai_nodes = {
            p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("kai-half")
        }
        assert len(kai_nodes) == 1
        # What `kubectl describe pod` shows: intent, scale-up status, events from gpu-intent.
        hami = next(p for p in pods if p["metadata"]["name"] == "hami-vgpu")
        annotations = hami["metadata"]["annotations"]
        assert annotations["gpu-intent.io/model"] == "a10g"
        assert annotations["gpu-intent.io/gpu-memory"] == "8000"

        async def final_statuses() -> bool:
            pods = await env.pods("ml")
            return all(
                (
                    status := ScaleUpStatus.from_annotation(
                        p["metadata"]["annotations"].get("gpu-intent.io/scale-up")
                    )
                )
                is not None
                and status.phase == ("Native" if is_native(p) else "Scheduled")
                and (is_native(p) or status.node == p["spec"]["nodeName"])
                for p in pods
            )

        await eventually(final_statuses, 10)
        # Each closed status names the NodeClaim of the node the pod runs on.
        claim_of_node = {
            c["status"]["nodeName"]: name
            for name, c in count.created.items()
            if (c.get("status") or {}).get("nodeName")
        }
        for pod in await env.pods("ml"):
            if is_native(pod):
                continue
            status = ScaleUpStatus.from_annotation(
                pod["metadata"]["annotations"]["gpu-intent.io/scale-up"]
            )
            assert status is not None
            assert status.node_claim == claim_of_node[pod["spec"]["nodeName"]]
        for pod in pods:
            if is_native(pod):
                continue
            events = await env.events("ml", pod["metadata"]["name"])
            reasons = [
                e["reason"]
                for e in events
                if e["source"].get("component") == "gpu-intent-controller"
            ]
            assert reasons[0] == "Triggered" and reasons[-1] == "ScaleUpComplete", reasons
        # Settled: another pass decides nothing.
        assert not await controller.reconcile_once()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await count.close()


async def test_controller_never_deletes_a_pod_it_did_not_create(env: Env) -> None:
    decoys = [
        # Trigger labels but none of our annotations: unidentifiable, left alone.
        {
            "metadata": {
                "name": "decoy-labels",
                "labels": {
                    "gpu-intent.io/trigger": "true",
                    "app.kubernetes.io/managed-by": "gpu-intent",
                },
            }
        },
        # An ordinary pod in our namespace.
        {"metadata": {"name": "decoy-plain"}},
    ]
    for decoy in decoys:
        body = {"apiVersion": "v1", "kind": "Pod", **decoy}
        body["metadata"]["namespace"] = TRIGGERS_NS
        body["spec"] = {
            "containers": [{"name": "c", "image": "busybox:1"}],
            "nodeSelector": {"none": "none"},
        }
        await apply(env.api, body)
    controller = env.controller()
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 5)
        for _ in range(5):
            await controller.reconcile_once()
            await controller.wait_creates()
        names = sorted(p["metadata"]["name"] for p in await env.pods(TRIGGERS_NS))
        assert names == ["decoy-labels", "decoy-plain"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_informer_relists_after_410_and_sees_later_changes(env: Env) -> None:
    controller = env.controller()
    for informer in controller.informers:
        informer.watch_seconds = 1  # the server ends each watch after 1 s

    def expired() -> float:
        value = controller.metrics.registry.get_sample_value(
            "gpu_intent_informer_restarts_total", {"informer": "pending-pods", "reason": "expired"}
        )
        return value or 0.0

    before = expired()
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 5)
        # A write the pod informers never see (bookmarks would otherwise keep their
        # resourceVersion current), then etcd compaction: their next watch from the
        # older resourceVersion gets 410 Gone.
        await apply(
            env.api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "unrelated"}}
        )
        env.cluster.store.compact()
        await eventually(lambda: asyncio.sleep(0, expired() > before), 5)
        await create_workloads(env)

        async def relisted_and_caught_up() -> bool:
            pending = controller.cache.objects("pending-pods")
            return (
                expired() > before
                and len([p for p in pending if p["metadata"]["namespace"] == "ml"]) == 5
            )

        await eventually(relisted_and_caught_up, 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_pending_pod_informer_leaves_triggers_to_their_own(env: Env) -> None:
    """Triggers are pending pods too, but the pending-pod watch selects
    ``metadata.namespace!=<trigger namespace>``: each trigger write reaches the
    controller once, through the trigger informer, not twice."""
    controller = env.controller()
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 5)
        await create_workloads(env)

        async def triggers_cached() -> bool:
            return bool(await env.pods(TRIGGERS_NS)) and bool(controller.cache.objects("triggers"))

        await eventually(triggers_cached, 10)
        pending = controller.cache.objects("pending-pods")
        assert pending and all(p["metadata"]["namespace"] != TRIGGERS_NS for p in pending)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_gathered_burst_gets_its_trigger_when_the_wait_ends_with_nothing_else_changing(
    env: Env,
) -> None:
    """A burst's new pods wait ``gather_seconds`` for more of their group, told nothing
    (`controller.plan._gathering`); then nothing else may change, and the trigger must
    not wait for the resync period (30 s here): the pass asks to run again when the
    wait ends (`Plan.wake`)."""
    controller = env.controller(resync_seconds=30.0)
    kai = [
        doc
        for doc in load_manifests(default_examples())
        if doc["kind"] == "Pod" and doc["spec"].get("schedulerName") == "kai-scheduler"
    ]
    assert kai
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 5)
        started = time.monotonic()
        for doc in kai:
            await apply(env.api, doc)

        async def triggered() -> bool:
            return bool(await env.pods(TRIGGERS_NS, "gpu-intent.io/trigger=true"))

        await eventually(triggered, 10)
        # at most 2 s of gathering (the default; whole seconds of creationTimestamp)
        assert time.monotonic() - started < 5.0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
