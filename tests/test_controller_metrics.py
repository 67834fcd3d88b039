"""The controller's Prometheus metrics after a short end-to-end run (issue 8): each
required family is exported on ``/metrics`` with the samples the run must have made."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from e2e_support import EXAMPLE_PODS, TRIGGERS_NS, Env, eventually
from prometheus_client.parser import text_string_to_metric_families

from controller import server as metrics_server
from controller.leader import LeaderElectionConfig, LeaderElector
from controller.metrics import provision_durations, scale_up_result
from controller.model import ANNOTATION_SCALE_UP, SCHEDULED, ScaleUpStatus
from gpu_intent.demo import apply, default_examples, load_manifests


async def scrape(url: str) -> dict[str, list[Any]]:
    """Family name -> its samples."""
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        text = await resp.text()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(families: dict[str, list[Any]], sample: str, **labels: str) -> float:
    """Sum of the samples named ``sample`` whose labels include ``labels``."""
    family = sample.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    return sum(
        s.value
        for s in families.get(family, [])
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_every_required_metric_is_exported_after_a_run(env: Env) -> None:
    controller = env.controller()
    controller.elector = LeaderElector(
        env.kube,
        LeaderElectionConfig(
            namespace=TRIGGERS_NS, identity="metrics-test", lease_seconds=3,
            renew_deadline_seconds=2, retry_seconds=0.5,
        ),
        metrics=controller.metrics,
    )  # fmt: skip
    runner = await metrics_server.start(controller, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    before = await scrape(url)
    errors_before = value(before, "gpu_intent_api_errors_total", verb="list", code="500")
    env.cluster.faults.add("error", verb="list", resource="nodepools", count=1)
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.ready.wait(), 20)
        for doc in load_manifests(default_examples()):
            if doc["kind"] == "Pod":
                await apply(env.api, doc)

        async def demand_shown() -> bool:  # while pods wait for GPUs
            return value(await scrape(url), "gpu_intent_demand_gpus") > 0

        await eventually(demand_shown, 20)

        async def all_bound() -> bool:
            pods = await env.pods("ml")
            return len(pods) == EXAMPLE_PODS and all(p["spec"].get("nodeName") for p in pods)

        await eventually(all_bound, 60)

        async def told_scheduled() -> dict[str, list[Any]] | None:
            """Once every pod told Scheduled is counted a success (and one is)."""
            scheduled = 0
            for pod in await env.pods("ml"):
                annotations = pod["metadata"].get("annotations") or {}
                status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
                scheduled += status is not None and status.phase == SCHEDULED
            families = await scrape(url)
            done = value(families, "gpu_intent_scale_ups_total", result="success") - value(
                before, "gpu_intent_scale_ups_total", result="success"
            )
            return families if scheduled and done == scheduled else None

        after = await eventually(told_scheduled, 30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()
    created = value(after, "gpu_intent_triggers_created_total") - value(
        before, "gpu_intent_triggers_created_total"
    )
    assert created >= 1
    assert "gpu_intent_triggers" in after  # triggers active (a gauge)
    for phase in ("Launched", "Registered", "Initialized", "Ready"):
        assert value(after, "gpu_intent_nodeclaim_provision_seconds_count", phase=phase) >= 1, phase
    for result in ("success", "failed", "cancelled"):  # all exported, so a rate has both sides
        assert any(s.labels.get("result") == result for s in after["gpu_intent_scale_ups"]), result
    assert value(after, "gpu_intent_pod_time_to_node_seconds_count") >= 1
    assert value(after, "gpu_intent_reconcile_seconds_count") >= 1
    assert value(after, "gpu_intent_plan_seconds_count") >= 1
    assert value(after, "gpu_intent_api_errors_total", verb="list", code="500") >= errors_before + 1
    assert value(after, "gpu_intent_leader") == 1


def test_provision_durations_per_phase() -> None:
    claim = {
        "metadata": {"creationTimestamp": "2026-11-21T12:00:00Z"},
        "status": {
            "conditions": [
                {
                    "type": "Launched",
                    "status": "True",
                    "lastTransitionTime": "2026-11-21T12:00:40Z",
                },
                {
                    "type": "Registered",
                    "status": "True",
                    "lastTransitionTime": "2026-11-21T12:01:30Z",
                },
                {
                    "type": "Initialized",
                    "status": "Unknown",
                    "lastTransitionTime": "2026-11-21T12:01:30Z",
                },
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-21T12:00:00Z"},
                {"type": "Drifted", "status": "True", "lastTransitionTime": "2026-11-21T12:09:00Z"},
            ]
        },
    }
    assert provision_durations(claim) == {"Launched": 40.0, "Registered": 90.0}
    assert scale_up_result("Scheduled") == "success" and scale_up_result("Failed") == "failed"
    assert scale_up_result("Provisioning") is None
