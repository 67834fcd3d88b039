"""The demo's run: start the sim, the webhook and the controller, apply the examples,
follow pods, NodeClaims and Events until done, then report (`run_demo`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from kubernetes_asyncio import client
from tenacity import RetryCallState

from certs import write_tls_files
from controller.plan import PlanConfig
from controller.reconciler import Controller, ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.demo.manifests import (
    DEFAULT_NODEPOOL,
    NODE_CLASS_KINDS,
    TRIGGER_NAMESPACE,
    ExamplesError,
    apply,
    default_examples,
    node_classes,
    opted_in,
    read_examples,
    webhook_configuration,
)
from gpu_intent.demo.need import Balance, DemandPod, Need, balance, native_need
from gpu_intent.demo.progress import Counts, StoryProgress
from gpu_intent.demo.report import (
    PodRecord,
    Timeline,
    claims_table,
    final_table,
    format_models,
    summary_json,
)
from gpu_intent.explain import claim_index
from intent.contract import TRIGGER_LABEL, Phase, Source
from intent.keys import NVIDIA_GPU
from intent.kube import (
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
    PODS,
    Kube,
    KubeError,
    Resource,
    load_configuration,
)
from intent.retry import retrying
from intent.text import usd_for_people
from sim.nodeclaims import EKS_TIMINGS, KarpenterTimings
from sim.process import SimProcess, sim_process
from sim.providers import catalog_for
from sim.scheduler import ScoringStrategy
from webhook import server as webhook_server

log = logging.getLogger(__name__)

#: NodeClaim lifecycle delays by ``--timings`` name (seconds; sources in `sim.nodeclaims`).
TIMINGS: Final[Mapping[str, KarpenterTimings]] = {"fast": KarpenterTimings(), "eks": EKS_TIMINGS}


#: Pods the demo creates at once. A workload controller creates a ReplicaSet's or a
#: Job's pods in concurrent batches (kube-controller-manager's ``slowStartBatch``,
#: pkg/controller/replicaset/replica_set.go and pkg/controller/job), not one by one:
#: created one at a time through the webhook, a 1,000-pod mix took 30 s to arrive.
CREATES_AT_ONCE: Final = 8


async def _create_pods(api: Kube, pods: Sequence[tuple[Path, dict[str, Any]]]) -> None:
    """Create ``pods`` ((manifest path, Pod), in order) through the API adapter, at
    most `CREATES_AT_ONCE` at a time, each started in order. Raises `ExamplesError`
    naming the manifest of the first the API server refuses (`intent.kube.KubeError`
    when it does not answer); the creates under way are then cancelled."""
    slots = asyncio.Semaphore(CREATES_AT_ONCE)

    async def create(path: Path, doc: dict[str, Any]) -> None:
        try:
            await apply(api, json.loads(json.dumps(doc)))
        except RuntimeError as e:
            raise ExamplesError(f"{path}: {e}") from None
        finally:
            slots.release()

    try:
        async with asyncio.TaskGroup() as group:
            for path, doc in pods:
                await slots.acquire()
                group.create_task(create(path, doc))
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # as one create at a time raised it


async def _follow(
    kube: Kube,
    resource: Resource,
    handle: Callable[[str, dict[str, Any]], None],
    listed: asyncio.Event,
    on_list: Callable[[list[dict[str, Any]]], None] | None = None,
) -> None:
    """List ``resource`` (all namespaces), hand every item to ``handle`` as ADDED (or the
    whole list to ``on_list``), set ``listed``, then watch from the list's
    resourceVersion, resuming from the last one seen when a watch ends; relist after 410
    Gone. Nothing created after the list is missed. A call that fails retryably (no
    answer, 429, 5xx) is tried again by the adapter's policy (`intent.retry.retrying`:
    Retry-After, else jittered backoff; a run of 5 failures ends it); any other
    `KubeError` ends it."""
    rv: str | None = None

    def retry_log(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.info(
            "demo watch of %s: %s; again in %.2fs", resource.plural, error, state.upcoming_sleep
        )

    async for attempt in retrying(before_sleep=retry_log):
        with attempt:
            while True:
                if rv is None:
                    items, version = await kube.list(resource)
                    if on_list is not None:
                        on_list(items)
                    else:
                        for item in items:
                            handle("ADDED", item)
                    rv = version or "0"
                    listed.set()
                try:
                    async for kind, obj in kube.watch(resource, rv):
                        rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                        if kind != "BOOKMARK":
                            handle(kind, obj)
                except KubeError as e:
                    if not e.gone:
                        raise
                    rv = None
                attempt.retry_state.attempt_number = 1  # a call that worked: a new run


async def _stop(tasks: Sequence[asyncio.Task[Any]], first_wait: float = 2.0) -> list[str]:
    """Cancel ``tasks`` and wait for them; cancel again, up to 20 times, any that survive
    a cancellation (a task that swallows ``CancelledError``, as ``asyncio.wait_for`` can
    on Python 3.11 when its inner future completes at the same moment, would otherwise
    hang the demo). Returns the names of the tasks that needed more than one cancel."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=first_wait)
    stubborn = [t.get_name() for t in tasks if not t.done()]
    for _ in range(20):
        pending = [t for t in tasks if not t.done()]
        if not pending:
            break
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.5)
    await asyncio.gather(*(t for t in tasks if t.done()), return_exceptions=True)
    return stubborn


@contextlib.asynccontextmanager
async def _tasks(
    named: Mapping[str, Any], stubborn: list[str]
) -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Run the coroutines of ``named`` (task name -> coroutine) as tasks for the block's
    duration; on exit `_stop` them and add to ``stubborn`` those that ignored a cancel."""
    tasks = [asyncio.create_task(coro, name=name) for name, coro in named.items()]
    try:
        yield tasks
    finally:
        stubborn += await _stop(tasks)


def default_timeout(timings: KarpenterTimings) -> float:
    """Seconds the demo waits by default: five NodeClaim lifetimes (launch + register +
    initialize) and at least 60 (fast: 60 s; eks: 300 s)."""
    ready = timings.launch_seconds + timings.register_seconds + timings.initialize_seconds
    return max(60.0, 5 * ready)


def _demo_plan() -> PlanConfig:
    return PlanConfig(
        trigger=TriggerSettings(namespace=TRIGGER_NAMESPACE),
        default_nodepool=DEFAULT_NODEPOOL,
    )


async def run_demo(
    examples: Path | None,
    *,
    max_seconds: float | None = None,
    with_controller: bool = True,
    out: TextIO | None = None,
    output: str = "text",
    err: TextIO | None = None,
    timings: str | KarpenterTimings = "fast",
    plan: PlanConfig | None = None,
    kube_scoring: ScoringStrategy = "LeastAllocated",
) -> int:
    """Run the story; return the exit code (see the module docstring: 0 success, 1
    failure, 2 unreadable or unappliable examples).

    Args:
        examples: manifests directory; None for `default_examples`.
        max_seconds: give up after this long (default `default_timeout` of the timings).
        with_controller: False runs the webhook and Karpenter only.
        out: where the text (``output="text"``) or the JSON object (``"json"``) goes;
            stdout by default.
        err: where the human text goes with ``output="json"``, and error lines; stderr
            by default.
        timings: a `TIMINGS` name or explicit `KarpenterTimings`.
        plan: the controller's planning settings (default: triggers in
            ``gpu-intent-system``, default NodePool ``gpu-standard``, provider AWS). Its
            provider (`controller.triggers.TriggerSettings.provider`) is also the sim's
            cloud (`sim.providers`) and picks the default examples
            (`default_examples`).
        kube_scoring: the sim's kube-scheduler NodeResourcesFit scoring strategy
            (`sim.scheduler.kube_score`): its default ``LeastAllocated``, or
            ``MostAllocated``, which packs native GPU pods.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    if output not in ("text", "json"):
        raise ValueError(f"output must be 'text' or 'json', got {output!r}")
    if isinstance(timings, str):
        timings_name, karpenter = timings, TIMINGS[timings]
    else:
        timings_name, karpenter = "custom", timings
    plan = plan or _demo_plan()
    # The cloud and the examples follow the controller's provider (``--provider``).
    provider = plan.trigger.provider.name
    directory = examples or default_examples(provider)
    try:
        manifests = read_examples(directory)
    except (ExamplesError, FileNotFoundError) as e:
        print(f"gpu-intent demo: {e}", file=err)
        return 2
    # The timeline tells the story; component INFO logs would interleave with it.
    for noisy in ("sim", "controller", "webhook"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    story = _Story(
        manifests=manifests,
        plan=plan,
        timings=karpenter,
        timings_name=timings_name,
        max_seconds=max_seconds if max_seconds is not None else default_timeout(karpenter),
        with_controller=with_controller,
        text=err if output == "json" else out,
        progress=err,
    )
    with tempfile.TemporaryDirectory(prefix="gpu-intent-demo-") as tmp:
        work = Path(tmp)
        tls = write_tls_files(work / "webhook", ["localhost"], ["127.0.0.1"])
        # The sim in a process of its own (its own core, `sim.process`); the webhook,
        # the controller and the demo's watches here.
        async with sim_process(
            work / "cluster", karpenter=karpenter, provider=provider, kube_scoring=kube_scoring
        ) as cluster:
            runner = await webhook_server.start(
                webhook_server.make_app(),
                "127.0.0.1",
                0,
                webhook_server.ssl_context(str(tls.cert), str(tls.key)),
            )
            port = runner.addresses[0][1]
            try:
                code, summary = await story.run(cluster, tls.ca_cert.read_bytes(), port)
            except ExamplesError as e:
                print(f"gpu-intent demo: {e}", file=err)
                return 2
            finally:
                await runner.cleanup()
    if output == "json":
        print(json.dumps(summary), file=out, flush=True)
    return code


@dataclass
class _Story:
    """One run of the demo against a started cluster and webhook."""

    manifests: list[tuple[Path, dict[str, Any]]]
    plan: PlanConfig
    timings: KarpenterTimings
    timings_name: str
    max_seconds: float
    with_controller: bool
    text: TextIO
    #: Where progress goes while the demo waits (`StoryProgress`; stderr).
    progress: TextIO
    #: Tasks that ignored a cancellation when the demo stopped them.
    stubborn: list[str] = field(default_factory=list)
    #: Seconds from the first pod's creation until the story ended (every pod closed;
    #: None: not within the timeout), and until the demo stopped waiting.
    closed_after: float | None = None
    ended_after: float | None = None

    async def _apply_setup(self, api: Kube, ca_pem: bytes, port: int) -> None:
        namespaces = set()
        classes = node_classes([doc for _, doc in self.manifests])
        if classes:
            print(
                f"node classes accepted, not applied: {', '.join(classes)}; the sim's"
                " instance-type catalog stands in for them",
                file=self.text,
            )
        for path, doc in self.manifests:
            if doc["kind"] == "Pod" or doc["kind"] in NODE_CLASS_KINDS:
                continue
            if doc["kind"] == "Namespace":
                namespaces.add(doc["metadata"].get("name"))
            try:
                await apply(api, doc)
            except RuntimeError as e:
                raise ExamplesError(f"{path}: {e}") from None
        trigger_ns = self.plan.trigger.namespace
        if self.with_controller and trigger_ns not in namespaces:
            await apply(
                api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": trigger_ns}}
            )
        await apply(api, webhook_configuration(f"https://127.0.0.1:{port}/mutate", ca_pem))

    async def run(
        self, cluster: SimProcess, ca_pem: bytes, port: int
    ) -> tuple[int, dict[str, Any]]:
        text = self.text
        print(
            f"gpu-intent demo: simulated cluster at {cluster.url}, webhook at https://127.0.0.1:{port}/mutate"
            f" (provider {self.plan.trigger.provider.name}, timings {self.timings_name},"
            f"{_scoring_note(cluster.kube_scoring)} timeout {self.max_seconds:g}s)",
            file=text,
        )
        wall = time.monotonic()
        cfg = await load_configuration(str(cluster.kubeconfig))
        api = Kube(client.ApiClient(configuration=cfg))
        workloads = [(p, d) for p, d in self.manifests if d["kind"] == "Pod"]
        timeline = Timeline(
            text,
            namespaces=frozenset(d["metadata"]["namespace"] for _, d in workloads),
            opted_in=opted_in(d for _, d in self.manifests),
            dra_claims=claim_index(d for _, d in self.manifests),
        )
        controller_kube = Kube(client.ApiClient(configuration=cfg))
        try:
            await self._apply_setup(api, ca_pem, port)
            controller = Controller(controller_kube, ControllerConfig(plan=self.plan))
            listed = [asyncio.Event() for _ in range(3)]
            follows: dict[str, Any] = {
                "watch-pods": _follow(api, PODS, timeline.on_pod, listed[0]),
                "watch-nodeclaims": _follow(
                    api, NODECLAIMS, timeline.on_nodeclaim, listed[1], timeline.sync_nodeclaims
                ),
                "watch-events": _follow(api, EVENTS, lambda _t, e: timeline.on_event(e), listed[2]),
            }
            if self.with_controller:
                follows["controller"] = controller.run()
            async with _tasks(follows, self.stubborn) as tasks:
                waits = [asyncio.create_task(e.wait()) for e in listed]
                if self.with_controller:
                    waits.append(asyncio.create_task(controller.ready.wait()))
                _, pending = await asyncio.wait(waits, timeout=10)
                for task in pending:
                    task.cancel()
                failed = [t for t in tasks if t.done() and t.exception() is not None]
                if pending or failed:
                    raise RuntimeError(
                        f"the demo's watches or controller did not start: {[t.exception() for t in failed]}"
                    )
                timeline.start = time.monotonic()
                await _create_pods(api, workloads)
                deadline = time.monotonic() + self.max_seconds
                expected = len(workloads)
                with StoryProgress(self.progress) as progress:
                    shown, timeline.out = timeline.out, progress.above(timeline.out)
                    try:
                        while time.monotonic() < deadline:
                            await asyncio.sleep(0.25)
                            progress.update(_counts(timeline, expected))
                            if self._finished(timeline, expected):
                                self.closed_after = timeline.now()
                                break
                        # Every NodeClaim launched or gone, checked against a fresh list.
                        while True:
                            timeline.sync_nodeclaims((await api.list(NODECLAIMS))[0])
                            progress.update(_counts(timeline, expected))
                            if not timeline.unsettled_claims() or time.monotonic() >= deadline:
                                break
                            await asyncio.sleep(0.25)
                    finally:
                        self.ended_after = timeline.now()
                        timeline.out = shown
            nodepools, _ = await api.list(NODEPOOLS)
            triggers, _ = await controller_kube.list(
                PODS,
                namespace=self.plan.trigger.namespace,
                label_selector=f"{TRIGGER_LABEL}=true",
            )
            return self._report(timeline, len(workloads), nodepools, len(triggers), wall)
        finally:
            await controller_kube.close()
            await api.close()

    def _finished(self, timeline: Timeline, expected: int) -> bool:
        if self.with_controller:
            return _done(timeline, expected)
        return _shown_stuck(timeline, expected)

    def _report(
        self,
        timeline: Timeline,
        expected: int,
        nodepools: list[dict[str, Any]],
        triggers_left: int,
        wall: float,
    ) -> tuple[int, dict[str, Any]]:
        text = self.text
        demand = [DemandPod(r.name, r.intent, r.pod) for r in timeline.pods.values()]
        need = native_need(
            demand,
            nodepools,
            default_nodepool=self.plan.default_nodepool,
            catalog=catalog_for(self.plan.trigger.provider.name),
            provider=self.plan.trigger.profile,
        )
        claims = timeline.claims_bought()
        result = balance(claims, need)
        final_table(timeline, text)
        claims_table(claims, result, text)
        _print_balance(text, result, need)
        print(f"trigger pods left: {triggers_left}", file=text)
        warnings = [
            f"task {name} ignored a cancellation and had to be cancelled again"
            for name in self.stubborn
        ]
        for warning in warnings:
            print(f"warning: {warning}", file=text)
        problems = [
            f"NodeClaim {name} is beyond the need: {why}" for name, why in result.beyond.items()
        ]
        unsettled = timeline.unsettled_claims()
        if unsettled:
            problems.append(
                f"NodeClaim(s) neither launched nor gone within the timeout: {', '.join(unsettled)}"
            )
        if self.with_controller:
            problems += _story_problems(timeline, expected, triggers_left)
            ok = not problems
            print(
                "\nOK: every GPU pod got a node and a closed status naming its NodeClaim, no trigger"
                " remains and no"
                " NodeClaim is beyond the need."
                if ok
                else "\nFAILED:\n  " + "\n  ".join(problems),
                file=text,
            )
        else:
            if not _shown_stuck(timeline, expected):
                problems.insert(0, "unexpected outcome without the controller")
            ok = not problems
            print(
                "\nWithout gpu-intent, Karpenter provisioned only for the whole-GPU pods; the"
                " sharing-layer pods stay Pending."
                if ok
                else "\nFAILED:\n  " + "\n  ".join(problems),
                file=text,
            )
        summary = summary_json(
            timeline,
            claims,
            need,
            result,
            ok=ok,
            problems=problems,
            warnings=warnings,
            triggers_left=triggers_left,
            with_controller=self.with_controller,
            timings=self.timings_name,
            seconds=time.monotonic() - wall,
            story={
                "pods": expected,
                "bound": sum(1 for r in timeline.pods.values() if r.node),
                "closed": sum(1 for r in timeline.pods.values() if closed(r)),
                "closedAfterSeconds": _seconds(self.closed_after),
                "endedAfterSeconds": _seconds(self.ended_after),
                "timeoutSeconds": self.max_seconds,
            },
        )
        return (0 if ok else 1), summary


def _scoring_note(scoring: ScoringStrategy) -> str:
    """The header's word on kube-scheduler's scoring when it is not its default."""
    return "" if scoring == "LeastAllocated" else f" kube-scheduler scoring {scoring},"


def _print_balance(text: TextIO, result: Balance, need: Need) -> None:
    """The GPUs and cost lines under the tables: needed, lower bound, provisioned,
    NodeClaims and cost against the ideal native twin."""
    native = ", ".join(
        f"{c.node_pool} {c.instance_type} ({c.gpus} {c.gpu_model})" for c in need.claims
    )
    print(f"\nGPUs needed:      {format_models(result.gpus_needed)}", file=text)
    print(
        f"GPUs lower bound: {format_models(result.gpus_lower_bound)} (the ideal native"
        " twin: shared pods packed first-fit-decreasing into whole GPUs)",
        file=text,
    )
    print(f"GPUs provisioned: {format_models(result.gpus_bought)}", file=text)
    print(
        f"NodeClaims created: {result.claims_bought}; for the ideal native twin:"
        f" {result.claims_native} ({native or 'none'})",
        file=text,
    )
    print(
        f"Instance cost: ${usd_for_people(result.cost_bought)}/h bought;"
        f" ${usd_for_people(result.cost_native)}/h for the ideal native twin"
        " (sim catalog, on-demand)",
        file=text,
    )
    for twin, message in need.unplaced.items():
        print(f"native twin {twin} fits no NodePool: {message}", file=text)


def _story_problems(timeline: Timeline, expected: int, triggers_left: int) -> list[str]:
    """What keeps a story with the controller from ending well: example pods not seen,
    pods without a node, bound pods whose status is not closed or names another
    NodeClaim, launched NodeClaims no example pod runs on, triggers left."""
    problems = []
    pending = sorted(r.name for r in timeline.pods.values() if not r.node)
    if len(timeline.pods) != expected:
        problems.append(f"saw {len(timeline.pods)} of {expected} example pods")
    if pending:
        problems.append(f"pods without a node: {', '.join(pending)}")
    if unclosed := _unclosed(timeline):
        problems.append(f"bound pods whose status was not closed: {', '.join(unclosed)}")
    if misnamed := _misnamed(timeline):
        problems.append(
            "bound pods whose Scheduled status does not name the NodeClaim they run "
            f"on: {', '.join(misnamed)}"
        )
    if empty := _empty_claims(timeline):
        problems.append(f"launched NodeClaims no example pod runs on: {', '.join(empty)}")
    if triggers_left:
        problems.append(f"{triggers_left} trigger pod(s) left")
    return problems


def _empty_claims(timeline: Timeline) -> list[str]:
    """Launched NodeClaims (deleted ones too) whose node no example pod was bound to:
    bought for nothing, however the cost compares."""
    running = {timeline.claim_of_node.get(r.node) for r in timeline.pods.values() if r.node}
    return sorted(
        c.name for c in timeline.claims_bought() if c.launched and c.name not in running
    )


def _unclosed(timeline: Timeline) -> list[str]:
    """Bound pods whose story has not ended (`closed`): a scale-up status still open
    (``Triggered``, ``Provisioning``, ``NodeReady``, ``Waiting``, ``Failed``) or none yet
    from the controller that follows them, each with its phase."""
    return sorted(
        f"{r.name} ({r.phase or 'no status'})"
        for r in timeline.pods.values()
        if r.node and not closed(r)
    )


def _misnamed(timeline: Timeline) -> list[str]:
    """Bound pods told ``Scheduled`` whose status names another NodeClaim, or none, than
    the one that made their node (``name (says X, runs on Y)``)."""
    return sorted(
        f"{r.name} (says {r.status_claim or 'none'}, runs on {actual or 'unknown'})"
        for r in timeline.pods.values()
        if r.node
        and r.phase == Phase.SCHEDULED
        and r.status_claim != (actual := timeline.claim_of_node.get(r.node))
    )


#: Phases that end a bound pod's story: the controller owes it nothing more.
BOUND_CLOSED_PHASES: frozenset[str] = frozenset({Phase.SCHEDULED, Phase.NATIVE})
#: Phases that end a pod's story bound or not: no NodePool serves it, its intent does not
#: parse. ``Failed`` (the controller gave up) ends it while the pod is unbound; once
#: bound, the pod is owed ``Scheduled`` (``controller.state.TRACKED_PHASES``).
GIVEN_UP_PHASES: frozenset[str] = frozenset({Phase.UNRESOLVABLE, Phase.INVALID})


def _followed(record: PodRecord) -> bool:
    """The controller writes the pod a scale-up status: it has a GPU intent that the
    webhook annotated, or it asks for GPUs through DRA claims."""
    spec = record.pod.get("spec") or {}
    return record.intent is not None and (record.annotated or bool(spec.get("resourceClaims")))


def closed(record: PodRecord) -> bool:
    """The pod's story has ended: bound with a closed status (`BOUND_CLOSED_PHASES`), or
    with no status when the controller does not follow it (`_followed`) or its
    scheduler bound it before ever refusing it (nothing was pending, so nothing is
    owed), or given up (`GIVEN_UP_PHASES`, or ``Failed`` while unbound)."""
    if record.phase in GIVEN_UP_PHASES:
        return True
    if not record.node:
        return record.phase == Phase.FAILED
    if record.phase in BOUND_CLOSED_PHASES:
        return True
    return not record.phase and not (_followed(record) and record.refused)


def _done(timeline: Timeline, expected: int) -> bool:
    """Every example pod seen and `closed`, and no trigger pod left."""
    return (
        len(timeline.pods) == expected
        and all(closed(p) for p in timeline.pods.values())
        and not timeline.triggers_live
    )


def _counts(timeline: Timeline, expected: int) -> Counts:
    pods = timeline.pods.values()
    return Counts(
        pods=max(expected, len(timeline.pods)),
        bound=sum(1 for p in pods if p.node),
        closed=sum(1 for p in pods if closed(p)),
        claims=len(timeline.claims),
        elapsed=timeline.now(),
    )


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _is_native(record: PodRecord) -> bool:
    """Karpenter provisions for the pod by itself: no GPU intent, or whole GPUs asked as
    ``nvidia.com/gpu`` resources."""
    return record.intent is None or Source("resources", NVIDIA_GPU) in record.intent.source


def _shown_stuck(timeline: Timeline, expected: int) -> bool:
    if len(timeline.pods) != expected:
        return False
    native = [p for p in timeline.pods.values() if _is_native(p)]
    shared = [p for p in timeline.pods.values() if not _is_native(p)]
    return all(p.node for p in native) and all(
        p.node is None and p.karpenter_failed for p in shared
    )
