"""The executor (`controller.executor.Executor`) on its own: it performs a plan's writes,
counts each under its lane's ``operation`` label, records what the API answered in the
informer cache, and decides nothing (the memory is the loop's to update)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, cast

from prometheus_client import CollectorRegistry

from controller.cache import InformerCache, Kind
from controller.decisions import CreateTrigger, DeleteTrigger, MarkTrigger, Plan
from controller.executor import Executor
from controller.memory import Memory
from controller.metrics import ControllerMetrics, Lane
from controller.model import GroupKey, PodRef
from intent.kube import Kube, KubeError

NS = "gpu-intent-system"


class Api:
    """Answers at once; the mark of ``gi-bad`` fails."""

    async def create_pod(self, namespace: str, body: Any) -> dict[str, Any]:
        meta = {"namespace": namespace, "name": body["metadata"]["name"], "resourceVersion": "5"}
        return {"metadata": meta, "spec": {}}

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        return True

    async def patch_pod_status(self, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        if name == "gi-bad":
            raise KubeError(f"patching pod {namespace}/{name}", 500, "InternalError", "")
        return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": "6"}}

    async def annotate_pod(self, namespace: str, name: str, annotations: Any) -> dict[str, Any]:
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}

    async def create_event(self, namespace: str, body: Any) -> None:
        return None


def executor() -> tuple[Executor, InformerCache, Memory, ControllerMetrics]:
    memory = Memory(time.monotonic)
    cache = InformerCache(time.monotonic, observer=memory)
    metrics = ControllerMetrics(CollectorRegistry())
    done = Executor(
        cast(Kube, Api()),
        cache,
        memory,
        namespace=NS,
        concurrency=4,
        report_writes_per_second=1000,
        now=lambda: datetime(2026, 11, 21, tzinfo=UTC),
        poke=lambda: None,
        instance="test",
        metrics=metrics,
    )
    return done, cache, memory, metrics


def written(metrics: ControllerMetrics, operation: str, result: str) -> float:
    labels = {"operation": operation, "result": result}
    return metrics.registry.get_sample_value("gpu_intent_operations_total", labels) or 0.0


async def test_writes_are_counted_by_lane_and_recorded_as_expectations() -> None:
    run, cache, memory, metrics = executor()
    old = PodRef(NS, "gi-old", "u1")
    covered = DeleteTrigger(old, "covered", (PodRef("ml", "a"),), "nc-1")
    create = CreateTrigger(GroupKey("gpu", "l4"), 1, {"metadata": {"name": "gi-new"}}, ())
    plan = Plan(
        deletes=(covered,),
        marks=(MarkTrigger(PodRef(NS, "gi-bad"), None),),
        creates=(create,),
    )
    await run.apply(plan)
    assert run.creating  # the creates run on in the background
    await run.wait_creates()
    # The lanes are the metric's label values, as they always were.
    assert {str(lane) for lane in Lane} == {
        "create", "delete", "mark", "link", "label", "protect", "delete-nodeclaim",
        "status", "event", "intent",
    }  # fmt: skip
    assert written(metrics, "delete", "ok") == 1
    assert written(metrics, "mark", "error") == 1  # logged; the next pass retries
    assert written(metrics, "create", "ok") == 1
    assert cache.current(Kind.TRIGGERS, (NS, "gi-old")) is None  # expected deleted
    assert cache.current(Kind.TRIGGERS, (NS, "gi-new")) is not None  # expected created
    assert memory.covers() == {}  # the cover is the loop's to record (`Plan.bookkeeping`)
