"""The executor's write slots: money (trigger creates, deletes, marks) never waits behind
status and Event writes, which have slots of their own; deletes and marks never wait
for creates still in flight."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from controller_fixtures import nodeclaim

from controller.cache import Kind
from controller.decisions import CreateTrigger, DeleteTrigger, Plan, SetStatus
from controller.incremental import Pass
from controller.model import GroupKey, PodRef, ScaleUpStatus
from controller.reconciler import Controller, ControllerConfig
from intent.kube import Kube, KubeError


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


def pending(controller: Controller, *names: str) -> None:
    """Put pods ``ml/<name>`` in the controller's pending-pods cache, as the informer
    does (the status writer tells only pods still pending)."""
    for name in names:
        obj = {"metadata": {"namespace": "ml", "name": name, "resourceVersion": "1"}}
        controller.cache.apply(Kind.PENDING_PODS, "ADDED", obj)


async def six_open_statuses_at_two_a_second() -> tuple[StuckStatusKube, Controller]:
    """A controller writing reports at 2 a second, with six open statuses (pods p0 to
    p5) queued and the first two written."""
    kube = StuckStatusKube()
    kube.release.set()
    config = ControllerConfig(concurrency=8, report_writes_per_second=2)
    controller = Controller(cast(Kube, kube), config)
    pending(controller, *(f"p{i}" for i in range(6)))
    told = ScaleUpStatus("Triggered", "m", "t")
    controller.executor.reports.queue(
        [SetStatus(PodRef("ml", f"p{i}"), told, None) for i in range(6)]
    )
    for _ in range(50):
        await asyncio.sleep(0)
    return kube, controller


async def tell_scheduled(controller: Controller, name: str) -> None:
    """Queue pod ``ml/<name>``'s final Scheduled, owed as after a read-back found it
    bound, and let the writers run."""
    done = ScaleUpStatus("Scheduled", "scheduled on node n1", None, "c1", "n1")
    controller.memory.owe_final(("ml", name), {"metadata": {"name": name}})
    controller.executor.reports.queue([SetStatus(PodRef("ml", name), done, None)])
    for _ in range(50):
        await asyncio.sleep(0)


async def test_trigger_creates_and_marks_never_wait_behind_status_writes() -> None:
    kube = StuckStatusKube()
    controller = Controller(cast(Kube, kube), ControllerConfig(concurrency=4))
    pending(controller, "new", *(f"p{i}" for i in range(20)))
    told = ScaleUpStatus("Triggered", "m", "t")
    controller.executor.queue_statuses(
        [SetStatus(PodRef("ml", f"p{i}"), told, None) for i in range(20)]
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert sum(c.startswith("annotate") for c in kube.calls) == 4  # every report slot busy
    create = CreateTrigger(GroupKey("gpu", "t4"), 1, {"metadata": {}}, (PodRef("ml", "new"),))
    await asyncio.wait_for(controller.apply(Plan(creates=(create,))), 5)
    await asyncio.wait_for(controller.wait_creates(), 5)
    assert "create" in kube.calls and "mark gi-1" in kube.calls  # not held up
    kube.release.set()
    await controller.flush_statuses()
    assert "annotate new" in kube.calls and "annotate p19" in kube.calls


async def test_status_and_event_writes_are_rate_limited_and_trigger_writes_are_not() -> None:
    kube = StuckStatusKube()
    kube.release.set()  # the API answers at once: only the rate limit holds writes back
    config = ControllerConfig(concurrency=8, report_writes_per_second=2)
    controller = Controller(cast(Kube, kube), config)
    pending(controller, *(f"p{i}" for i in range(6)))
    told = ScaleUpStatus("Triggered", "m", "t")
    controller.executor.queue_statuses(
        [SetStatus(PodRef("ml", f"p{i}"), told, None) for i in range(6)]
    )
    for _ in range(50):
        await asyncio.sleep(0)
    assert sum(c.startswith("annotate") for c in kube.calls) == 2  # the bucket's 2 a second
    create = CreateTrigger(GroupKey("gpu", "t4"), 1, {"metadata": {}}, (PodRef("ml", "new"),))
    await asyncio.wait_for(controller.apply(Plan(creates=(create,))), 5)
    await asyncio.wait_for(controller.wait_creates(), 5)
    assert "create" in kube.calls and "mark gi-1" in kube.calls
    assert sum(c.startswith("annotate") for c in kube.calls) == 2
    assert controller.executor.reports.task is not None
    controller.executor.reports.task.cancel()


async def test_a_pod_whose_open_status_is_written_gets_scheduled_before_the_batch_ends() -> None:
    """Six open statuses at 2 writes a second: p0's is written at once, the last ones
    wait seconds for the rate limit. p0 then binds: its Scheduled goes out at once,
    not after the whole batch of open statuses (they once all counted as being written
    until the last of them was)."""
    kube, controller = await six_open_statuses_at_two_a_second()
    writer = controller.executor.reports
    assert kube.calls.count("annotate p0") == 1
    assert sum(c.startswith("annotate") for c in kube.calls) == 2  # the rate limit holds
    await tell_scheduled(controller, "p0")
    assert kube.calls.count("annotate p0") == 2
    assert sum(c.startswith("annotate") for c in kube.calls) == 3  # the others still wait
    for task in (writer.task, writer.closing_task):
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

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


def leave(controller: Controller, name: str) -> None:
    """Pod ``ml/<name>``, told Triggered, leaves the pending set, as the informer sees a
    binding (a DELETED from the ``spec.nodeName=`` watch)."""
    told = {"gpu-intent.io/scale-up": '{"phase":"Triggered"}'}
    obj = {"metadata": {"namespace": "ml", "name": name, "annotations": told}}
    controller.cache.apply(Kind.PENDING_PODS, "ADDED", obj)
    controller.cache.apply(Kind.PENDING_PODS, "DELETED", obj)


async def test_failed_read_backs_wait_for_the_next_pass_and_settled_ones_poke_it() -> None:
    kube = ReadKube()
    controller = Controller(cast(Kube, kube), ControllerConfig())
    leave(controller, "a")
    assert controller.memory.left() == [("ml", "a")]
    await controller.read_left()
    assert kube.reads == 1 and not controller._poked.is_set()  # no pass per failed round
    kube.down = False
    await controller.read_left()
    assert controller.memory.left() == [] and controller._poked.is_set()


class BoundKube(ReadKube):
    """Reads answer a pod bound on node n1; status annotations and Events are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls: list[tuple[str, str, Any]] = []

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        told = {"gpu-intent.io/scale-up": '{"phase":"Triggered"}'}
        return {
            "metadata": {"namespace": namespace, "name": name, "annotations": told},
            "spec": {"nodeName": "n1"},
        }

    async def annotate_pod(self, namespace: str, name: str, annotations: Any) -> dict[str, Any]:
        self.calls.append(("annotate", name, annotations))
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {"nodeName": "n1"}}

    async def create_event(self, namespace: str, body: Any) -> None:
        self.calls.append(("event", body["involvedObject"]["name"], body["reason"]))


async def test_a_pod_found_bound_is_told_scheduled_without_waiting_for_a_pass() -> None:
    """The read-back that finds a pod bound queues its final Scheduled (naming the
    NodeClaim of its node) at once: no pass runs here. A pass that planned the same
    status before that write landed writes nothing twice."""
    kube = BoundKube()
    controller = Controller(cast(Kube, kube), ControllerConfig())
    controller._leading = True
    claim = nodeclaim("c1", "gpu-standard", model="l4", ready=True, node="n1")
    controller.cache.apply(Kind.NODECLAIMS, "ADDED", claim)
    leave(controller, "a")
    owed = controller.memory.left()
    await controller.read_left()
    await controller.flush_statuses()
    [(_, name, annotations)] = [c for c in kube.calls if c[0] == "annotate"]
    status = ScaleUpStatus.from_annotation(annotations["gpu-intent.io/scale-up"])
    assert (name, status and status.phase, status and status.node_claim) == ("a", "Scheduled", "c1")
    assert ("event", "a", "ScaleUpComplete") in kube.calls
    assert owed == [("ml", "a")] and controller.memory.scheduled() == []
    late = SetStatus(PodRef("ml", "a"), status or ScaleUpStatus("Scheduled", "m"), None)
    controller.executor.queue_statuses([late])
    await controller.flush_statuses()
    assert len([c for c in kube.calls if c[0] == "annotate"]) == 1


async def test_pods_that_leave_during_a_read_back_are_read_in_the_same_call() -> None:
    """Pod b leaves the pending set while pod a is being read back: the same read_left
    call reads b in a second round, and both are told Scheduled, without waiting for
    another informer event or pass."""
    kube = BoundKube()
    controller = Controller(cast(Kube, kube), ControllerConfig())
    controller._leading = True

    read = kube.get_pod

    async def get_pod(namespace: str, name: str) -> dict[str, Any] | None:
        if name == "a":
            leave(controller, "b")
        return await read(namespace, name)

    kube.get_pod = get_pod  # type: ignore[method-assign]
    leave(controller, "a")
    await controller.read_left()
    await controller.flush_statuses()
    assert kube.reads == 2 and controller.memory.left() == []
    assert sorted(c[1] for c in kube.calls if c[0] == "annotate") == ["a", "b"]

class SlowCreateKube:
    """Records API calls; trigger creates hang until ``release`` is set (a slow or
    overloaded API server); deletes, marks and statuses answer at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()

    async def create_pod(self, namespace: str, body: Any) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(f"create {name}")
        await self.release.wait()
        meta = {"namespace": namespace, "name": name, "resourceVersion": "5", "uid": name}
        return {"metadata": meta, "spec": {"schedulerName": "gpu-intent-non-binding"}}

    async def patch_pod_status(self, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        self.calls.append(f"mark {name}")
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(f"delete {name}")
        return True

    async def annotate_pod(self, namespace: str, name: str, annotations: Any) -> dict[str, Any]:
        self.calls.append(f"annotate {name}")
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}

    async def create_event(self, namespace: str, body: Any) -> None:
        self.calls.append("event")


def _create(name: str, pod: str) -> CreateTrigger:
    return CreateTrigger(
        GroupKey("gpu", "t4"), 1, {"metadata": {"name": name}}, (PodRef("ml", pod),)
    )


async def test_deletes_and_marks_do_not_wait_for_creates_in_flight() -> None:
    """A pass's creates run on in the background; the next passes delete and mark at once
    (a trigger whose pods got a node must go within Karpenter's batch window), and plan
    no create while creates are in flight (a trigger planned again in another second has
    another name: it would be a second trigger for the same pods)."""
    kube = SlowCreateKube()
    controller = Controller(cast(Kube, kube), ControllerConfig(concurrency=2))
    await asyncio.wait_for(controller.apply(Plan(creates=(_create("gi-a", "a"),))), 1)
    assert kube.calls == ["create gi-a"] and controller.creating  # apply did not wait
    gone = PodRef("gpu-intent-system", "gi-old", "u1")
    again = Plan(deletes=(DeleteTrigger(gone, "no pending pod needs it"),),
                 creates=(_create("gi-b", "b"),))  # fmt: skip
    controller.planner.run = lambda now, tokens=None: Pass(again, {}, 1, False)  # type: ignore[method-assign]
    applied = await asyncio.wait_for(controller.reconcile_once(), 1)
    assert "delete gi-old" in kube.calls  # not held behind the hanging create
    assert applied.deletes and not applied.creates
    assert "create gi-b" not in kube.calls
    kube.release.set()
    await asyncio.wait_for(controller.wait_creates(), 1)
    assert "mark gi-a" in kube.calls and not controller.creating
    assert controller._poked.is_set()  # the pods left out are planned for again at once
    applied = await asyncio.wait_for(controller.reconcile_once(), 1)
    await asyncio.wait_for(controller.wait_creates(), 1)
    assert applied.creates and "create gi-b" in kube.calls
    if controller.executor.reports.task is not None:
        controller.executor.reports.task.cancel()


async def test_deletes_take_no_slot_of_the_creates_in_flight() -> None:
    """Creates have write slots of their own: with every create slot busy on a hanging
    create, a delete still goes out at once."""
    kube = SlowCreateKube()
    controller = Controller(cast(Kube, kube), ControllerConfig(concurrency=2))
    creates = tuple(_create(f"gi-{i}", f"p{i}") for i in range(5))
    await asyncio.wait_for(controller.apply(Plan(creates=creates)), 1)
    for _ in range(5):
        await asyncio.sleep(0)
    assert sum(c.startswith("create") for c in kube.calls) == 2  # both create slots busy
    gone = PodRef("gpu-intent-system", "gi-old", "u1")
    plan = Plan(deletes=(DeleteTrigger(gone, "no pending pod needs it"),))
    await asyncio.wait_for(controller.apply(plan), 1)
    assert "delete gi-old" in kube.calls
    kube.release.set()
    await asyncio.wait_for(controller.wait_creates(), 1)
    assert sum(c.startswith("create") for c in kube.calls) == 5
    if controller.executor.reports.task is not None:
        controller.executor.reports.task.cancel()


async def test_changes_that_waited_behind_creates_are_not_debounced_again() -> None:
    """In a burst changes never go quiet, so the debounce runs to its maximum delay.
    Changes that came in while a pass's creates were in flight have waited already: the
    pass after the creates comes at once, not a maximum delay later. Changes after a
    pass that could create are debounced as before."""
    controller = Controller(
        cast(Kube, StuckStatusKube()),
        ControllerConfig(idle_seconds=0.2, max_delay_seconds=1.5, resync_seconds=30),
    )
    loop = asyncio.get_running_loop()

    async def settle_under_a_stream_of_changes() -> float:
        async def stream() -> None:
            while True:
                controller._poke()
                await asyncio.sleep(0.02)

        streaming = asyncio.create_task(stream())
        start = loop.time()
        try:
            await asyncio.wait_for(controller._settle(), 10)
        finally:
            streaming.cancel()
        return loop.time() - start

    controller._poke()
    controller._waiting_since = (controller._waiting_since or 0.0) - 1.5  # waited meanwhile
    assert await settle_under_a_stream_of_changes() < 0.75
    await controller.reconcile_once()  # nothing in the cache; it answers every change
    assert controller._waiting_since is None
    assert await settle_under_a_stream_of_changes() >= 1.4


async def test_scheduled_statuses_never_wait_behind_the_report_rate_limit() -> None:
    """Six open statuses queued at 2 writes a second would hold a seventh write for 2 s;
    a pod that got its node is told Scheduled at once, through slots of its own."""
    kube, controller = await six_open_statuses_at_two_a_second()
    writer = controller.executor.reports
    assert sum(c.startswith("annotate") for c in kube.calls) == 2  # the rate limit holds
    await tell_scheduled(controller, "bound")
    assert "annotate bound" in kube.calls
    assert sum(c.startswith("annotate") for c in kube.calls) == 3  # the others still wait
    assert writer.task is not None
    writer.task.cancel()
    await asyncio.gather(writer.task, return_exceptions=True)
