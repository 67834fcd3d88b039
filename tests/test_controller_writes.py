"""The executor's write slots: money (trigger creates, deletes, marks) never waits behind
status and Event writes, which have slots of their own."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from controller.kube import Kube, KubeError
from controller.model import GroupKey, PodRef, ScaleUpStatus
from controller.plan import CreateTrigger, Plan, SetStatus
from controller.reconciler import Controller, ControllerConfig
from controller.state import PENDING_PODS


class StuckStatusKube:
    """Records API calls; status annotations hang until ``release`` is set (a slow or
    overloaded API server), creates and status patches answer at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()

    async def create_pod(self, namespace: str, body: Any) -> dict[str, Any]:
        self.calls.append("create")
        meta = {"namespace": namespace, "name": "gi-1", "resourceVersion": "5", "uid": "t1"}
        return {"metadata": meta, "spec": {"schedulerName": "gpu-intent-non-binding"}}

    async def patch_pod_status(self, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        self.calls.append(f"mark {name}")
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}

    async def annotate_pod(self, namespace: str, name: str, annotations: Any) -> dict[str, Any]:
        self.calls.append(f"annotate {name}")
        await self.release.wait()
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}

    async def create_event(self, namespace: str, body: Any) -> None:
        self.calls.append("event")


async def test_trigger_creates_and_marks_never_wait_behind_status_writes() -> None:
    kube = StuckStatusKube()
    controller = Controller(cast(Kube, kube), ControllerConfig(concurrency=4))
    told = ScaleUpStatus("Triggered", "m", "t")
    controller._queue_statuses([SetStatus(PodRef("ml", f"p{i}"), told, None) for i in range(20)])
    for _ in range(20):
        await asyncio.sleep(0)
    assert sum(c.startswith("annotate") for c in kube.calls) == 4  # every report slot busy
    create = CreateTrigger(GroupKey("gpu", "t4"), 1, {"metadata": {}}, (PodRef("ml", "new"),))
    await asyncio.wait_for(controller.apply(Plan(creates=(create,))), 5)
    assert "create" in kube.calls and "mark gi-1" in kube.calls  # not held up
    kube.release.set()
    await controller.flush_statuses()
    assert "annotate new" in kube.calls and "annotate p19" in kube.calls


async def test_status_and_event_writes_are_rate_limited_and_trigger_writes_are_not() -> None:
    kube = StuckStatusKube()
    kube.release.set()  # the API answers at once: only the rate limit holds writes back
    config = ControllerConfig(concurrency=8, report_writes_per_second=2)
    controller = Controller(cast(Kube, kube), config)
    told = ScaleUpStatus("Triggered", "m", "t")
    controller._queue_statuses([SetStatus(PodRef("ml", f"p{i}"), told, None) for i in range(6)])
    for _ in range(50):
        await asyncio.sleep(0)
    assert sum(c.startswith("annotate") for c in kube.calls) == 2  # the bucket's 2 a second
    create = CreateTrigger(GroupKey("gpu", "t4"), 1, {"metadata": {}}, (PodRef("ml", "new"),))
    await asyncio.wait_for(controller.apply(Plan(creates=(create,))), 5)
    assert "create" in kube.calls and "mark gi-1" in kube.calls
    assert sum(c.startswith("annotate") for c in kube.calls) == 2
    assert controller._writer is not None
    controller._writer.cancel()


class ReadKube:
    """Reads of pods that left the pending set: failing while ``down``, else bound."""

    def __init__(self) -> None:
        self.down = True
        self.reads = 0

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.down:
            raise KubeError(f"reading pod {namespace}/{name}", 503, "ServiceUnavailable", "")
        meta = {"namespace": namespace, "name": name, "annotations": {}}
        return {"metadata": meta, "spec": {"nodeName": "n1"}}


async def test_failed_read_backs_wait_for_the_next_pass_and_settled_ones_poke_it() -> None:
    kube = ReadKube()
    controller = Controller(cast(Kube, kube), ControllerConfig())
    gone = {
        "metadata": {
            "namespace": "ml",
            "name": "a",
            "annotations": {"gpu-intent.io/scale-up": '{"phase":"Triggered"}'},
        }
    }
    controller.state.apply(PENDING_PODS, "ADDED", gone)
    controller.state.apply(PENDING_PODS, "DELETED", gone)
    assert controller.state.left() == [("ml", "a")]
    await controller.read_left()
    assert kube.reads == 1 and not controller._poked.is_set()  # no pass per failed round
    kube.down = False
    await controller.read_left()
    assert controller.state.left() == [] and controller._poked.is_set()
