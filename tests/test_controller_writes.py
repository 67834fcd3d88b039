"""The executor's write order: money (trigger creates and deletes) before statuses."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from controller.kube import Kube
from controller.model import GroupKey, PodRef, ScaleUpStatus
from controller.plan import CreateTrigger, Plan, SetStatus
from controller.reconciler import Controller, ControllerConfig


class RecordingKube:
    """Records API calls; trigger creates wait until ``release`` is set."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()

    async def create_pod(self, namespace: str, body: Any) -> dict[str, Any]:
        self.calls.append("create")
        await self.release.wait()
        meta = {"namespace": namespace, "name": "gi-1", "resourceVersion": "5", "uid": "t1"}
        return {"metadata": meta, "spec": {}}

    async def annotate_pod(self, namespace: str, name: str, annotations: Any) -> dict[str, Any]:
        self.calls.append(f"annotate {name}")
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}

    async def create_event(self, namespace: str, body: Any) -> None:
        self.calls.append("event")


async def test_status_writes_wait_while_a_pass_creates_triggers() -> None:
    kube = RecordingKube()
    controller = Controller(cast(Kube, kube), ControllerConfig())
    waiting = SetStatus(PodRef("ml", "old"), ScaleUpStatus("Triggered", "m", "t"), None)
    create = CreateTrigger(GroupKey("gpu", "t4"), 1, {"metadata": {}}, (PodRef("ml", "new"),))
    applying = asyncio.create_task(controller.apply(Plan(statuses=(waiting,))))
    await applying
    kube.release.clear()
    controller._queue_statuses([SetStatus(PodRef("ml", "late"), waiting.status, None)])
    money = asyncio.create_task(controller.apply(Plan(creates=(create,))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert "create" in kube.calls
    assert "annotate late" not in kube.calls  # held back while the create is in flight
    kube.release.set()
    await money
    await controller.flush_statuses()
    assert kube.calls.index("create") < kube.calls.index("annotate late")
    assert "annotate new" in kube.calls
