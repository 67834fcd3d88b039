"""``gpu-intent demo``: the whole story on an embedded simulated cluster, in one process.

It starts the sim (API server over HTTPS, scheduler, kubelet, Karpenter), the real
webhook over HTTPS and the real controller (talking to the sim through kubernetes_asyncio
and a kubeconfig, exactly as to a real cluster), applies ``examples/``, prints a live
timeline and a final table, and exits 0 only when every example pod is bound and no
trigger pod remains. ``--without-controller`` shows the other side: the sharing-layer
pods stay Pending with Karpenter's ``FailedScheduling`` while the whole-GPU pod gets a node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import json
import logging
import math
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes_asyncio import client, watch

from certs import write_tls_files
from controller.kube import PODS, Kube, load_configuration
from controller.model import ScaleUpStatus
from controller.plan import PlanConfig
from controller.reconciler import Controller, ControllerConfig
from controller.triggers import TriggerSettings
from gpu_intent.intent import (
    INJECT_LABEL,
    INJECT_VALUE,
    TRIGGER_LABEL,
    Intent,
    IntentError,
    format_gpus,
)
from sim.cluster import SimCluster
from webhook import server as webhook_server

log = logging.getLogger(__name__)

TRIGGER_NAMESPACE = "gpu-intent-system"
DEFAULT_NODEPOOL = "gpu-standard"
GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"


def default_examples() -> Path:
    """The demo's manifests: the repository's top-level ``examples/``, installed as the
    data-only package ``gpu_intent.examples`` (pyproject.toml maps it), so the same call
    works in an editable install and from a wheel. Raises FileNotFoundError when the
    installation has no examples."""
    spec = importlib.util.find_spec("gpu_intent.examples")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise FileNotFoundError("the gpu_intent.examples package data is not installed")
    return Path(locations[0])


def load_manifests(directory: Path) -> list[dict[str, Any]]:
    """Every YAML document in ``directory/*.yaml``, in file-name order. Raises
    FileNotFoundError when there are none."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    if not docs:
        raise FileNotFoundError(f"no manifests in {directory}")
    return docs


async def apply(api: client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Create one manifest through the API (``kubectl create`` for the kinds the demo
    uses) and return the stored object. Raises RuntimeError with the server's message."""
    kind, meta = obj["kind"], obj.get("metadata", {})
    # The generated client types bodies as models; manifests are dicts, which it sends
    # as they are. Any keeps mypy from insisting on models here.
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    admission: Any = client.AdmissionregistrationV1Api(api)
    calls: dict[str, Any] = {
        "Namespace": lambda: core.create_namespace(obj, _preload_content=False),
        "Pod": lambda: core.create_namespaced_pod(meta["namespace"], obj, _preload_content=False),
        "NodePool": lambda: custom.create_cluster_custom_object(
            "karpenter.sh", "v1", "nodepools", obj, _preload_content=False
        ),
        "MutatingWebhookConfiguration": lambda: admission.create_mutating_webhook_configuration(
            obj, _preload_content=False
        ),
    }
    if kind not in calls:
        raise ValueError(f"the demo does not apply {kind}")
    response = await calls[kind]()
    body = await response.json()
    if response.status >= 400:
        raise RuntimeError(
            f"creating {kind} {meta.get('name') or meta.get('generateName')}: {body.get('message')}"
        )
    return dict(body)


def webhook_configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration the Helm chart installs, pointed at ``url``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpu-intent"},
        "webhooks": [
            {
                "name": "pods.gpu-intent.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "reinvocationPolicy": "IfNeeded",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "namespaceSelector": {"matchLabels": {INJECT_LABEL: INJECT_VALUE}},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }


@dataclass
class PodRecord:
    """What the timeline learned about one example pod."""

    name: str
    created_at: float
    intent: Intent | None = None
    triggers: list[str] = field(default_factory=list)
    phase: str = ""
    node: str | None = None
    bound_at: float | None = None
    karpenter_failed: str | None = None


@dataclass
class Timeline:
    """Prints what happens, as it happens, and keeps what the final table needs."""

    out: TextIO
    start: float = field(default_factory=time.monotonic)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    claim_of_node: dict[str, str] = field(default_factory=dict)
    triggers_live: set[str] = field(default_factory=set)
    triggers_seen: set[str] = field(default_factory=set)
    seen_events: set[tuple[str, str, str]] = field(default_factory=set)

    def now(self) -> float:
        return time.monotonic() - self.start

    def say(self, who: str, what: str) -> None:
        print(f"{self.now():6.2f}s  {who:<28} {what}", file=self.out, flush=True)

    def on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        labels = meta.get("labels") or {}
        if labels.get(TRIGGER_LABEL) == "true":
            self._on_trigger(event_type, key, pod)
            return
        if meta.get("namespace") != "ml":
            return
        record = self.pods.get(key)
        if record is None:
            record = self.pods[key] = PodRecord(key, self.now())
            try:
                record.intent = Intent.from_annotations(meta.get("annotations"))
            except IntentError:
                record.intent = None
            self.say(f"pod {key}", f"created; intent: {describe_intent(record.intent)}")
        status = ScaleUpStatus.from_annotation(
            (meta.get("annotations") or {}).get("gpu-intent.io/scale-up")
        )
        if status is not None and status.phase != record.phase:
            record.phase = status.phase
            if status.trigger and status.trigger not in record.triggers:
                record.triggers.append(status.trigger)
        if spec.get("nodeName") and record.node is None:
            record.node, record.bound_at = spec["nodeName"], self.now()
            self.say(
                f"pod {key}",
                f"bound to node {record.node} ({record.bound_at - record.created_at:.1f}s after creation)",
            )

    def _on_trigger(self, event_type: str, key: str, pod: dict[str, Any]) -> None:
        requests = (
            ((pod.get("spec") or {}).get("containers") or [{}])[0]
            .get("resources", {})
            .get("requests", {})
        )
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        if event_type == "DELETED":
            if key in self.triggers_live:
                self.triggers_live.discard(key)
                self.say(f"trigger {key}", "deleted")
        elif key not in self.triggers_seen:
            self.triggers_seen.add(key)
            self.triggers_live.add(key)
            self.say(
                f"trigger {key}",
                f"created: {requests.get('nvidia.com/gpu')} nvidia.com/gpu, nodeSelector "
                + ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
            )

    def on_nodeclaim(self, event_type: str, claim: dict[str, Any]) -> None:
        meta, status = claim.get("metadata") or {}, claim.get("status") or {}
        name = meta.get("name", "")
        before = self.claims.get(name)
        self.claims[name] = claim
        if status.get("nodeName"):
            self.claim_of_node[status["nodeName"]] = name
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        old = {
            c.get("type"): c.get("status")
            for c in ((before or {}).get("status") or {}).get("conditions") or []
        }
        who = f"nodeclaim/{name}"
        if before is None:
            self.say(
                who,
                f"created by Karpenter (NodePool {(meta.get('labels') or {}).get('karpenter.sh/nodepool')})",
            )
        for condition in ("Launched", "Registered", "Initialized", "Ready"):
            if conditions.get(condition) == "True" and old.get(condition) != "True":
                labels = meta.get("labels") or {}
                detail = {
                    "Launched": f"{labels.get('node.kubernetes.io/instance-type')} in {labels.get('topology.kubernetes.io/zone')}",
                    "Registered": f"node {status.get('nodeName')}",
                    "Initialized": "GPUs advertised",
                    "Ready": "",
                }[condition]
                self.say(who, f"{condition} {detail}".rstrip())

    def on_event(self, event: dict[str, Any]) -> None:
        source = (
            (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
        )
        if source not in ("karpenter", "gpu-intent-controller"):
            return
        involved = event.get("involvedObject") or {}
        target = f"{involved.get('namespace')}/{involved.get('name')}"
        if involved.get("namespace") != "ml":
            return
        dedupe = (target, str(event.get("reason")), str(event.get("message")))
        if dedupe in self.seen_events:
            return
        self.seen_events.add(dedupe)
        record = self.pods.get(target)
        if (
            source == "karpenter"
            and event.get("reason") == "FailedScheduling"
            and record is not None
        ):
            record.karpenter_failed = str(event.get("message"))
        who = "karpenter" if source == "karpenter" else "gpu-intent"
        self.say(f"{who} -> {target}", f"{event.get('reason')}: {event.get('message')}")


def describe_intent(intent: Intent | None) -> str:
    if intent is None:
        return "none (not a GPU pod)"
    parts = [f"{format_gpus(intent.gpus)} GPU", intent.model or "any model"]
    if intent.gpu_memory_mib:
        parts.append(f"{intent.gpu_memory_mib} MiB")
    sources = sorted({token.split(":")[0] for token in intent.source})
    return (
        " ".join(parts[:2]) + "".join(f", {p}" for p in parts[2:]) + f" (from {'+'.join(sources)})"
    )


async def _follow(
    api: client.ApiClient,
    list_fn: Callable[..., Any],
    args: tuple[Any, ...],
    handle: Callable[[str, dict[str, Any]], None],
) -> None:
    while True:
        stream = watch.Watch(return_type="object")
        async with stream.stream(list_fn, *args, timeout_seconds=300) as events:
            async for event in events:
                obj = event.get("raw_object")
                if isinstance(obj, dict) and event.get("type") != "BOOKMARK":
                    handle(str(event["type"]), obj)


@contextlib.asynccontextmanager
async def _tasks(*coros: Any) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def final_table(timeline: Timeline, out: TextIO) -> None:
    rows = [("POD", "INTENT", "TRIGGER", "NODECLAIM (INSTANCE TYPE)", "TO NODE")]
    for record in sorted(timeline.pods.values(), key=lambda r: r.name):
        claim_name = timeline.claim_of_node.get(record.node or "", "")
        claim = timeline.claims.get(claim_name) or {}
        itype = ((claim.get("metadata") or {}).get("labels") or {}).get(
            "node.kubernetes.io/instance-type", ""
        )
        trigger = ", ".join(t.split("/")[-1] for t in record.triggers) or (
            "none (Karpenter native)" if record.phase == "Native" else "none"
        )
        rows.append(
            (
                record.name,
                describe_intent(record.intent),
                trigger,
                f"{claim_name} ({itype})" if claim_name else "-",
                f"{record.bound_at - record.created_at:.1f}s"
                if record.bound_at is not None
                else "Pending",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(file=out)
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(), file=out)


def gpu_balance(timeline: Timeline) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs the example pods need (per model, fractions summed and rounded up; whole-GPU
    pods counted as asked) and GPUs on the NodeClaims that were made, per model."""
    wanted: dict[str, Decimal] = defaultdict(Decimal)
    for record in timeline.pods.values():
        if record.intent is not None:
            wanted[record.intent.model or "any"] += record.intent.gpus
    needed = {model: math.ceil(gpus) for model, gpus in wanted.items()}
    provisioned: dict[str, int] = defaultdict(int)
    for claim in timeline.claims.values():
        labels = (claim.get("metadata") or {}).get("labels") or {}
        count = labels.get("karpenter.k8s.aws/instance-gpu-count")
        if count:
            provisioned[labels.get(GPU_NAME_LABEL, "?")] += int(count)
    return needed, dict(provisioned)


async def run_demo(
    examples: Path | None,
    *,
    max_seconds: float = 60.0,
    with_controller: bool = True,
    out: TextIO = sys.stdout,
) -> int:
    """Run the story; return the exit code (0: every example pod bound, no trigger left;
    with ``with_controller=False``: the whole-GPU pod bound and every sharing-layer pod
    still Pending with Karpenter's FailedScheduling)."""
    docs = load_manifests(examples or default_examples())
    # The timeline tells the story; component INFO logs would interleave with it.
    for noisy in ("sim", "controller", "webhook"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="gpu-intent-demo-") as tmp:
        work = Path(tmp)
        tls = write_tls_files(work / "webhook", ["localhost"], ["127.0.0.1"])
        async with SimCluster(work / "cluster") as cluster:
            runner = await webhook_server.start(
                webhook_server.make_app(),
                "127.0.0.1",
                0,
                webhook_server.ssl_context(str(tls.cert), str(tls.key)),
            )
            port = runner.addresses[0][1]
            try:
                return await _story(
                    cluster, docs, tls.ca_cert.read_bytes(), port, max_seconds, with_controller, out
                )
            finally:
                await runner.cleanup()


async def _story(
    cluster: SimCluster,
    docs: list[dict[str, Any]],
    ca_pem: bytes,
    port: int,
    max_seconds: float,
    with_controller: bool,
    out: TextIO,
) -> int:
    print(
        f"gpu-intent demo: simulated cluster at {cluster.url}, webhook at https://127.0.0.1:{port}/mutate",
        file=out,
    )
    cfg = await load_configuration(str(cluster.kubeconfig))
    api = client.ApiClient(configuration=cfg)
    timeline = Timeline(out)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    controller_kube = Kube(client.ApiClient(configuration=cfg))
    try:
        workloads = [d for d in docs if d["kind"] == "Pod"]
        for doc in docs:
            if doc["kind"] != "Pod":
                await apply(api, doc)
        await apply(api, webhook_configuration(f"https://127.0.0.1:{port}/mutate", ca_pem))
        controller = Controller(
            controller_kube,
            ControllerConfig(
                plan=PlanConfig(
                    trigger=TriggerSettings(
                        namespace=TRIGGER_NAMESPACE, gpu_name_label=GPU_NAME_LABEL
                    ),
                    default_nodepool=DEFAULT_NODEPOOL,
                )
            ),
        )
        follows = [
            _follow(api, core.list_pod_for_all_namespaces, (), timeline.on_pod),
            _follow(
                api,
                custom.list_cluster_custom_object,
                ("karpenter.sh", "v1", "nodeclaims"),
                timeline.on_nodeclaim,
            ),
            _follow(
                api, core.list_event_for_all_namespaces, (), lambda _t, e: timeline.on_event(e)
            ),
        ]
        if with_controller:
            follows.append(controller.run())
        async with _tasks(*follows):
            if with_controller:
                await asyncio.wait_for(controller.ready.wait(), 10)
            timeline.start = time.monotonic()
            for doc in workloads:
                await apply(api, json.loads(json.dumps(doc)))
            deadline = time.monotonic() + max_seconds
            while time.monotonic() < deadline:
                await asyncio.sleep(0.25)
                if with_controller and _done(timeline, len(workloads)):
                    break
                if not with_controller and _shown_stuck(timeline, len(workloads)):
                    break
        final_table(timeline, out)
        needed, provisioned = gpu_balance(timeline)
        print(f"\nGPUs needed:      {_models(needed)}", file=out)
        print(f"GPUs provisioned: {_models(provisioned)}", file=out)
        triggers, _ = await _list_triggers(controller_kube)
        print(f"trigger pods left: {len(triggers)}", file=out)
        if with_controller:
            ok = _done(timeline, len(workloads)) and not triggers
            print(
                "\nOK: every GPU pod got a node and no trigger remains."
                if ok
                else "\nFAILED: see above.",
                file=out,
            )
        else:
            ok = _shown_stuck(timeline, len(workloads))
            print(
                "\nWithout gpu-intent, Karpenter provisioned only for the whole-GPU pod; the"
                " sharing-layer pods stay Pending."
                if ok
                else "\nFAILED: unexpected outcome without the controller.",
                file=out,
            )
        return 0 if ok else 1
    finally:
        await controller_kube.close()
        await api.close()


def _models(counts: dict[str, int]) -> str:
    return ", ".join(f"{model}={count}" for model, count in sorted(counts.items())) or "none"


def _done(timeline: Timeline, expected: int) -> bool:
    pods = timeline.pods.values()
    return (
        len(timeline.pods) == expected and all(p.node for p in pods) and not timeline.triggers_live
    )


def _shown_stuck(timeline: Timeline, expected: int) -> bool:
    if len(timeline.pods) != expected:
        return False
    native = [
        p
        for p in timeline.pods.values()
        if p.intent and "resources:nvidia.com/gpu" in p.intent.source
    ]
    shared = [p for p in timeline.pods.values() if p not in native]
    return all(p.node for p in native) and all(
        p.node is None and p.karpenter_failed for p in shared
    )


async def _list_triggers(kube: Kube) -> tuple[list[dict[str, Any]], str]:
    return await kube.list(
        PODS, namespace=TRIGGER_NAMESPACE, label_selector=f"{TRIGGER_LABEL}=true"
    )
