"""The product against a sim API server that fails the ways a real one does
(`sim.faults`): the controller's informers must ride out dropped watches, 410 Gone, 500,
429 and slow answers, and every pod must still get its node."""

from __future__ import annotations

import asyncio

from e2e_support import EXAMPLE_PODS, TRIGGERS_NS, Env, eventually

from controller.reconciler import Controller
from gpu_intent.demo import apply, default_examples, load_manifests


def restarts(controller: Controller, reason: str) -> float:
    """``controller``'s informer relists for ``reason`` (``expired``, ``error``), all
    informers."""
    return sum(
        sample.value
        for metric in controller.metrics.informer_restarts.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("reason") == reason
    )


async def test_every_pod_binds_through_api_faults(env: Env) -> None:
    faults = env.cluster.faults
    controller = env.controller()
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 10)

        async def pod_watches_open() -> bool:  # an informer is synced after its list,
            return faults.open_watches("pods") >= 2  # its watch opens just after

        await eventually(pod_watches_open, 10)
        expired, errors = restarts(controller, "expired"), restarts(controller, "error")
        faults.add("latency", delay=0.02)
        gone = faults.add("gone", verb="watch", resource="pods", count=2)
        failed = faults.add("error", verb="list", resource="pods", count=1)
        throttled = faults.add("throttle", verb="list", resource="pods", count=1)
        assert faults.drop_watches("pods") >= 2  # they re-watch and meet the faults

        async def faults_spent() -> bool:  # before this test's own lists could meet them
            return (gone.hits, failed.hits, throttled.hits) == (2, 1, 1)

        await eventually(faults_spent, 30)
        # A 409 on the controller's first pod patches (trigger marks and links, status
        # annotations): each is written again by a later pass.
        conflicted = faults.add("conflict", verb="patch", resource="pods", count=3)
        for doc in load_manifests(default_examples()):
            if doc["kind"] == "Pod":
                await apply(env.api, doc)

        async def all_bound_no_triggers() -> bool:
            pods = await env.pods("ml")
            triggers = await env.pods(TRIGGERS_NS, "gpu-intent.io/trigger=true")
            return len(pods) == EXAMPLE_PODS and all(p["spec"].get("nodeName") for p in pods) and not triggers

        await eventually(all_bound_no_triggers, 60)
        assert (gone.hits, failed.hits, throttled.hits, conflicted.hits) == (2, 1, 1, 3)
        # Both 410s end pod watches; of the 500 and the 429 on listing pods, one may meet
        # the controller's one-off list of bound pods instead of an informer's relist.
        assert (
            restarts(controller, "expired") >= expired + 2
            and restarts(controller, "error") >= errors + 1
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
