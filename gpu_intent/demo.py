"""``gpu-intent demo``: the whole story on an embedded simulated cluster, in one process.

It starts the sim (API server over HTTPS, scheduler, kubelet, Karpenter), the real
webhook over HTTPS and the real controller (talking to the sim through kubernetes_asyncio
and a kubeconfig, exactly as to a real cluster), applies an examples directory (default
``examples/``, installed as ``gpu_intent.examples``), prints a live timeline and final
tables. ``--without-controller`` shows the other side: the sharing-layer pods stay
Pending with Karpenter's ``FailedScheduling`` while whole-GPU pods get a node.

**What is followed.** Every Pod manifest in the directory, in whatever namespace, is a
*GPU pod* the demo follows to a node. Pods, NodeClaims and Events are listed and then
watched from that list's resourceVersion *before* the first pod is created, so every
NodeClaim Karpenter creates is recorded, including ones deleted later. At the end the
demo waits (within ``--timeout``) until each NodeClaim has launched (condition
``Launched=True``) or is gone, and reconciles its record with a fresh list.

**The need.** What the same demand, written as native whole-GPU pods, makes the same
Karpenter buy: the sim's pure `sim.karpenter.solve` (Karpenter's ``Scheduler.Solve``)
on an otherwise empty cluster with the same NodePools (as stored by the API server).
Each GPU pod becomes a *native twin* (`native_twins`): a pod requesting
``ceil(intent.gpus)`` whole ``nvidia.com/gpu`` plus the pod's own cpu and memory
requests, selecting the model on ``karpenter.k8s.aws/instance-gpu-name`` and the pool on
``karpenter.sh/nodepool`` (the intent's pool; for an intent without a model, the default
NodePool the controller would use), tolerating every taint. Pods with a fractional
intent (< 1 GPU) of the same model and pool are summed first, so two 0.5-GPU L4 pods make
one 1-GPU twin. A pod with no GPU intent enters the solve as it is. The intent is the
webhook's annotation, or for a pod the webhook did not annotate (its namespace is not
opted in) what `webhook.inference.infer_intent` finds in the pod.

From that solve (`native_need`) and the NodeClaims created, `balance` computes:

- ``gpusNeeded``: per model, ``ceil`` of the summed intents (``any`` for intents naming
  no model); ``gpusBought``: per model, the GPUs of every NodeClaim created (instance
  type from the sim catalog);
- ``costPerHour``: ``bought`` sums the on-demand price (sim catalog, USD/hour) of every
  launched NodeClaim created, deleted ones included; ``native`` sums the cheapest
  instance type of each NodeClaim of the native solve (the one the sim launches);
- NodeClaims *beyond the need*, taken in creation order: every NodeClaim after as many
  as the native solve makes; a launched one whose GPUs take its model's bought total
  above ``max(needed, native solve)`` for that model; a launched one without GPUs
  beyond the native solve's count of GPU-less NodeClaims. Any NodeClaim beyond the need
  fails the demo (exit 1), named in the message.

**Timings** (`TIMINGS`). ``fast`` (default) is the sim's own (`KarpenterTimings()`:
launch 1 s, register 2 s, initialize 1 s). ``eks`` keeps Karpenter's batching and takes
the NodeClaim lifecycle to about 60 s from creation to Ready, estimated from public
measurements: EC2 ``Instance Created`` about 1 s after the request and kubelet node
registration at 39 s for a c5.xlarge (awslabs/amazon-eks-ami#1099, the EKS team's
node-latency measurements); "new nodes come up in about 30-40s in a ready state" for
general instance types, with GPU types taking longer to boot (Karpenter maintainer in
aws/karpenter-provider-aws#6165, and amazon-eks-ami#1099); users expect Ready "in about
60 seconds" (aws/karpenter-provider-aws#3102). So launch 2 s (the CreateFleet call),
register 38 s, initialize 20 s (node Ready plus the NVIDIA device plugin advertising
``nvidia.com/gpu``; the 20 s is an estimate). The default timeout scales with them
(`default_timeout`).

**Output.** ``output="text"`` prints the timeline, the tables and the summary lines on
``out``. ``output="json"`` prints the same human text on ``err`` and one JSON object on
``out`` (`summary_json` gives the shape).

Exit codes: 0 every example pod bound, no trigger left, every NodeClaim launched or
gone and none beyond the need (``with_controller=False``: whole-GPU pods bound, the
sharing-layer pods Pending with Karpenter's FailedScheduling, none beyond the need);
1 otherwise; 2 when the examples cannot be read or applied (one line on ``err``).
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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, TextIO

import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

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
from sim.catalog import CATALOG, InstanceType, by_name, format_quantity
from sim.cluster import SimCluster
from sim.karpenter import Snapshot, solve
from sim.nodeclaims import KarpenterTimings
from sim.scheduling import pod_requests
from webhook import server as webhook_server
from webhook.inference import infer_intent

log = logging.getLogger(__name__)

TRIGGER_NAMESPACE: Final = "gpu-intent-system"
DEFAULT_NODEPOOL: Final = "gpu-standard"
GPU_NAME_LABEL: Final = "karpenter.k8s.aws/instance-gpu-name"
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
#: The kinds an examples directory may hold (``apply`` creates them).
EXAMPLE_KINDS: Final = ("Namespace", "NodePool", "Pod")
#: NodeClaim lifecycle delays by ``--timings`` name (seconds; see the module docstring).
TIMINGS: Final[Mapping[str, KarpenterTimings]] = {
    "fast": KarpenterTimings(),
    "eks": KarpenterTimings(launch_seconds=2.0, register_seconds=38.0, initialize_seconds=20.0),
}
#: Key of ``gpusNeeded`` for intents that name no model.
ANY_MODEL: Final = "any"


class ExamplesError(ValueError):
    """An examples file cannot be read or applied; the message names the file."""


def default_timeout(timings: KarpenterTimings) -> float:
    """Seconds the demo waits by default: five NodeClaim lifetimes (launch + register +
    initialize) and at least 60 (fast: 60 s; eks: 300 s)."""
    ready = timings.launch_seconds + timings.register_seconds + timings.initialize_seconds
    return max(60.0, 5 * ready)


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


def _read_examples(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """``(file, document)`` for every YAML document in ``directory/*.yaml``, in file-name
    order; empty documents skipped, a Pod without a namespace put in ``default`` (as
    ``kubectl create`` would). Raises `ExamplesError` naming the file for unreadable or
    invalid YAML, a document that is not a mapping, a kind the demo does not apply or a
    missing ``metadata.name``/``generateName``; FileNotFoundError when there are none."""
    out: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except (OSError, UnicodeDecodeError) as e:
            raise ExamplesError(f"{path}: cannot read: {e}") from None
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ExamplesError(f"{path}: not valid YAML{line}: {problem}") from None
        for i, doc in enumerate(docs, 1):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ExamplesError(
                    f"{path}: document {i} is a {type(doc).__name__}, not a mapping"
                )
            kind = doc.get("kind")
            if kind not in EXAMPLE_KINDS:
                raise ExamplesError(
                    f"{path}: document {i} has kind {kind!r}; the demo applies {', '.join(EXAMPLE_KINDS)}"
                )
            meta = doc.get("metadata")
            if not isinstance(meta, dict) or not (meta.get("name") or meta.get("generateName")):
                raise ExamplesError(f"{path}: document {i} ({kind}) has no metadata.name")
            if kind == "Pod" and not meta.get("namespace"):
                doc = {**doc, "metadata": {**meta, "namespace": "default"}}
            out.append((path, doc))
    if not out:
        raise FileNotFoundError(f"no manifests in {directory}")
    return out


def load_manifests(directory: Path) -> list[dict[str, Any]]:
    """Every YAML document in ``directory/*.yaml``, in file-name order. Raises
    FileNotFoundError when there are none and `ExamplesError` (a ValueError naming the
    file) when one is malformed."""
    return [doc for _, doc in _read_examples(directory)]


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


# --- The need and its cost: pure functions, no awaits. ---------------------------------


@dataclass(frozen=True, slots=True)
class DemandPod:
    """One example pod's demand: ``key`` ``namespace/name``, its GPU ``intent`` (None: not
    a GPU pod) and the ``pod`` object (its cpu and memory requests are read from it)."""

    key: str
    intent: Intent | None
    pod: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ClaimCost:
    """One NodeClaim, created or of the native solve: ``name`` (``native-<n>`` for the
    solve's), its NodePool, instance type (None: not launched), GPU model (None: no GPU or
    not launched), ``gpus`` on the instance, on-demand ``price_per_hour`` in USD (None:
    not launched), whether it ``launched`` and was ``deleted``, and for the native solve
    the twins it holds."""

    name: str
    node_pool: str
    instance_type: str | None
    gpu_model: str | None
    gpus: int
    price_per_hour: Decimal | None
    launched: bool = True
    deleted: bool = False
    pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Need:
    """What the demand needs: ``gpus`` per model (``ceil`` of summed intents; `ANY_MODEL`
    for intents without a model), the native solve's NodeClaims (`ClaimCost`, cheapest
    instance type each) and the twins it could not place (twin name -> Karpenter's
    message)."""

    gpus: Mapping[str, int]
    claims: tuple[ClaimCost, ...]
    unplaced: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Balance:
    """Bought against needed: GPUs per model (needed, bought, native solve), instance
    cost in USD/hour (bought, native), and the NodeClaims beyond the need (name -> why)."""

    gpus_needed: Mapping[str, int]
    gpus_bought: Mapping[str, int]
    gpus_native: Mapping[str, int]
    cost_bought: Decimal
    cost_native: Decimal
    claims_bought: int
    claims_native: int
    beyond: Mapping[str, str]


def _cpu_memory(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """The pod's effective cpu (cores) and memory (bytes) requests; none if unparsable."""
    try:
        requests = pod_requests(pod)
    except ValueError:
        return {}
    return {k: v for k, v in requests.items() if k in ("cpu", "memory") and v > 0}


def _twin(
    index: int,
    gpus: int,
    model: str | None,
    pool: str | None,
    resources: Mapping[str, Decimal],
    serves: Sequence[str],
) -> dict[str, Any]:
    selector = {}
    if model:
        selector[GPU_NAME_LABEL] = model
    if pool:
        selector[NODEPOOL_LABEL] = pool
    requests = {k: format_quantity(k, v) for k, v in sorted(resources.items())}
    requests["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"native-{index}",
            "namespace": "native-twins",
            "uid": f"native-twin-{index:06d}",
            "creationTimestamp": "2000-01-01T00:00:00Z",
            "annotations": {"gpu-intent.io/native-twin-of": ",".join(serves)},
        },
        "spec": {
            "nodeSelector": selector,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "gpu",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": requests,
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def native_twins(
    pods: Sequence[DemandPod], *, default_nodepool: str | None = None
) -> list[dict[str, Any]]:
    """The same demand written as native whole-GPU pods (see the module docstring).

    A GPU pod needing ``g >= 1`` GPUs gets a twin of ``ceil(g)``; pods needing less than
    one GPU are summed per (model, pool) into one twin of ``ceil(sum)``. Each twin
    requests its pods' summed cpu and memory, selects ``GPU_NAME_LABEL=model`` and
    ``NODEPOOL_LABEL=pool`` (the intent's pool, or ``default_nodepool`` for an intent
    without a model; no pool selector otherwise) and tolerates every taint; its
    ``gpu-intent.io/native-twin-of`` annotation lists the pods it stands for. Pods
    without an intent are passed through unchanged. Returned in input order of first
    pod, fractional groups after the whole ones.
    """
    out: list[dict[str, Any]] = []
    fractional: dict[tuple[str | None, str | None], list[DemandPod]] = defaultdict(list)
    for demand in pods:
        intent = demand.intent
        if intent is None:
            out.append(dict(demand.pod))
            continue
        pool = intent.pool or (None if intent.model else default_nodepool)
        if intent.gpus < 1:
            fractional[(intent.model, pool)].append(demand)
            continue
        out.append(
            _twin(
                len(out),
                math.ceil(intent.gpus),
                intent.model,
                pool,
                _cpu_memory(demand.pod),
                [demand.key],
            )
        )
    for (model, pool), group in fractional.items():
        total = sum((d.intent.gpus for d in group if d.intent is not None), Decimal(0))
        resources: dict[str, Decimal] = defaultdict(Decimal)
        for d in group:
            for k, v in _cpu_memory(d.pod).items():
                resources[k] += v
        out.append(
            _twin(len(out), math.ceil(total), model, pool, resources, [d.key for d in group])
        )
    return out


def gpus_needed(pods: Sequence[DemandPod]) -> dict[str, int]:
    """GPUs per model: ``ceil`` of the summed intents (`ANY_MODEL` without a model)."""
    wanted: dict[str, Decimal] = defaultdict(Decimal)
    for demand in pods:
        if demand.intent is not None:
            wanted[demand.intent.model or ANY_MODEL] += demand.intent.gpus
    return {model: math.ceil(gpus) for model, gpus in sorted(wanted.items())}


def native_need(
    pods: Sequence[DemandPod],
    nodepools: Sequence[Mapping[str, Any]],
    *,
    default_nodepool: str | None = None,
    catalog: Sequence[InstanceType] = CATALOG,
) -> Need:
    """What Karpenter would buy for the same demand as native whole-GPU pods: `solve`
    over `native_twins` with ``nodepools`` and no existing capacity. Each NodeClaim of
    the solve is priced at its cheapest remaining instance type (the one launched)."""
    twins = native_twins(pods, default_nodepool=default_nodepool)
    results = solve(Snapshot(pods=twins, nodepools=list(nodepools), existing=(), catalog=catalog))
    claims = []
    for i, new in enumerate(results.new_nodeclaims):
        it = min(new.instance_types, key=lambda t: t.price)
        claims.append(
            ClaimCost(
                f"native-{i}",
                new.nodepool,
                it.name,
                it.gpu_name or None,
                it.gpu_count,
                it.price,
                pods=tuple(str((p.get("metadata") or {}).get("name")) for p in new.pods),
            )
        )
    return Need(gpus_needed(pods), tuple(claims), dict(results.errors))


def bought_claim(
    claim: Mapping[str, Any], *, deleted: bool = False, catalog: Sequence[InstanceType] = CATALOG
) -> ClaimCost:
    """A created NodeClaim object as a `ClaimCost`: pool from ``karpenter.sh/nodepool``,
    instance type from ``node.kubernetes.io/instance-type`` (set at launch) looked up in
    ``catalog`` for GPUs and price; ``launched`` from condition ``Launched=True``."""
    meta = claim.get("metadata") or {}
    labels = meta.get("labels") or {}
    conditions = (claim.get("status") or {}).get("conditions") or ()
    launched = any(c.get("type") == "Launched" and c.get("status") == "True" for c in conditions)
    name = labels.get(INSTANCE_TYPE_LABEL)
    it = None
    if name:
        with contextlib.suppress(KeyError):
            it = by_name(name, tuple(catalog))
    return ClaimCost(
        str(meta.get("name", "")),
        str(labels.get(NODEPOOL_LABEL, "")),
        name,
        (it.gpu_name or None) if it else None,
        it.gpu_count if it else 0,
        it.price if it else None,
        launched=launched or it is not None,
        deleted=deleted,
    )


def _per_model(claims: Sequence[ClaimCost]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in claims:
        if c.gpu_model and c.gpus:
            out[c.gpu_model] += c.gpus
    return dict(sorted(out.items()))


def balance(bought: Sequence[ClaimCost], need: Need) -> Balance:
    """Compare the NodeClaims created (``bought``, in creation order) with ``need``.

    Beyond the need, each with the reason: a NodeClaim after the first
    ``len(need.claims)``; a launched one whose GPUs take its model's running total above
    ``max(need.gpus[model], native solve's GPUs of model)``; a launched one without GPUs
    once the native solve's GPU-less NodeClaims are used up. Costs in USD/hour.
    """
    native_gpus = _per_model(need.claims)
    allowed = {
        m: max(need.gpus.get(m, 0), native_gpus.get(m, 0)) for m in {*need.gpus, *native_gpus}
    }
    gpu_less_allowed = sum(1 for c in need.claims if c.instance_type and not c.gpus)
    beyond: dict[str, str] = {}
    kept = gpu_less = 0
    used: dict[str, int] = defaultdict(int)
    for index, claim in enumerate(bought, 1):
        what = f"{claim.instance_type or 'not launched'}" + (
            f", {claim.gpus} {claim.gpu_model}" if claim.gpu_model else ""
        )
        if kept >= len(need.claims):
            beyond[claim.name] = (
                f"NodeClaim {index} of {len(bought)} created ({what}); the native whole-GPU"
                f" solve makes {len(need.claims)}"
            )
            continue
        if claim.gpu_model and claim.gpus:
            limit = allowed.get(claim.gpu_model, 0)
            if used[claim.gpu_model] + claim.gpus > limit:
                beyond[claim.name] = (
                    f"{claim.gpu_model} GPUs bought would reach"
                    f" {used[claim.gpu_model] + claim.gpus}, needed {limit} ({what})"
                )
                continue
            used[claim.gpu_model] += claim.gpus
        elif claim.instance_type:
            if gpu_less >= gpu_less_allowed:
                beyond[claim.name] = f"no GPU and the native solve buys no such NodeClaim ({what})"
                continue
            gpu_less += 1
        kept += 1
    return Balance(
        gpus_needed=dict(need.gpus),
        gpus_bought=_per_model(bought),
        gpus_native=native_gpus,
        cost_bought=sum((c.price_per_hour or Decimal(0) for c in bought), Decimal(0)),
        cost_native=sum((c.price_per_hour or Decimal(0) for c in need.claims), Decimal(0)),
        claims_bought=len(bought),
        claims_native=len(need.claims),
        beyond=beyond,
    )


# --- The timeline: what the watches saw. ------------------------------------------------


@dataclass
class PodRecord:
    """What the timeline learned about one example pod (``name`` is ``namespace/name``).
    ``annotated``: the intent came from the webhook's annotations (else inferred here)."""

    name: str
    created_at: float
    intent: Intent | None = None
    annotated: bool = False
    triggers: list[str] = field(default_factory=list)
    phase: str = ""
    node: str | None = None
    bound_at: float | None = None
    karpenter_failed: str | None = None
    pod: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timeline:
    """Prints what happens, as it happens, and keeps what the final tables need.

    ``namespaces``: where the example pods live (every non-trigger pod there is one);
    ``claims``: every NodeClaim seen, in creation order, last state kept after deletion
    (``claims_deleted``)."""

    out: TextIO
    namespaces: frozenset[str] = frozenset({"ml"})
    start: float = field(default_factory=time.monotonic)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims_deleted: set[str] = field(default_factory=set)
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
        if meta.get("namespace") not in self.namespaces:
            return
        record = self.pods.get(key)
        if record is None:
            record = self.pods[key] = PodRecord(key, self.now())
            try:
                record.intent = Intent.from_annotations(meta.get("annotations"))
                record.annotated = record.intent is not None
                if record.intent is None:
                    record.intent = infer_intent(pod)
            except IntentError:
                record.intent = None
            self.say(f"pod {key}", f"created; intent: {describe_intent(record.intent)}")
            if record.intent is not None and not record.annotated:
                self.say(f"pod {key}", "not annotated by the webhook (namespace not opted in)")
        record.pod = pod
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
                f"created by Karpenter (NodePool {(meta.get('labels') or {}).get(NODEPOOL_LABEL)})",
            )
        for condition in ("Launched", "Registered", "Initialized", "Ready"):
            if conditions.get(condition) == "True" and old.get(condition) != "True":
                labels = meta.get("labels") or {}
                detail = {
                    "Launched": f"{labels.get(INSTANCE_TYPE_LABEL)} in {labels.get('topology.kubernetes.io/zone')}",
                    "Registered": f"node {status.get('nodeName')}",
                    "Initialized": "GPUs advertised",
                    "Ready": "",
                }[condition]
                self.say(who, f"{condition} {detail}".rstrip())
        if event_type == "DELETED":
            self._claim_gone(name)

    def _claim_gone(self, name: str) -> None:
        if name not in self.claims_deleted:
            self.claims_deleted.add(name)
            self.say(f"nodeclaim/{name}", "deleted")

    def sync_nodeclaims(self, items: Sequence[dict[str, Any]]) -> None:
        """Reconcile with a full list: record new NodeClaims, mark missing ones deleted."""
        names = set()
        for item in items:
            names.add((item.get("metadata") or {}).get("name", ""))
            self.on_nodeclaim("ADDED", item)
        for name in list(self.claims):
            if name not in names:
                self._claim_gone(name)

    def claims_bought(self) -> list[ClaimCost]:
        """Every NodeClaim seen, in creation order, as `ClaimCost`."""
        return [
            bought_claim(claim, deleted=name in self.claims_deleted)
            for name, claim in self.claims.items()
        ]

    def unsettled_claims(self) -> list[str]:
        """NodeClaims neither launched nor gone."""
        return [c.name for c in self.claims_bought() if not c.launched and not c.deleted]

    def on_event(self, event: dict[str, Any]) -> None:
        source = (
            (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
        )
        if source not in ("karpenter", "gpu-intent-controller"):
            return
        involved = event.get("involvedObject") or {}
        target = f"{involved.get('namespace')}/{involved.get('name')}"
        if involved.get("namespace") not in self.namespaces:
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
    list_fn: Callable[..., Any],
    args: tuple[Any, ...],
    handle: Callable[[str, dict[str, Any]], None],
    listed: asyncio.Event,
    on_list: Callable[[list[dict[str, Any]]], None] | None = None,
) -> None:
    """List, hand every item to ``handle`` as ADDED (or the whole list to ``on_list``),
    set ``listed``, then watch from the list's resourceVersion, resuming from the last
    one seen when a watch ends; relist after 410 Gone. Nothing created after the list
    is missed."""
    rv: str | None = None
    while True:
        if rv is None:
            response = await list_fn(*args, _preload_content=False)
            body = await response.json()
            items = [i for i in body.get("items") or [] if isinstance(i, dict)]
            if on_list is not None:
                on_list(items)
            else:
                for item in items:
                    handle("ADDED", item)
            rv = str((body.get("metadata") or {}).get("resourceVersion") or "0")
            listed.set()
        stream = watch.Watch(return_type="object")
        try:
            async with stream.stream(
                list_fn, *args, resource_version=rv, timeout_seconds=300
            ) as events:
                async for event in events:
                    obj = event.get("raw_object")
                    if not isinstance(obj, dict):
                        continue
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") != "BOOKMARK":
                        handle(str(event["type"]), obj)
        except ApiException as e:
            if e.status != 410:
                raise
            rv = None


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


def _print_rows(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(file=out)
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(), file=out)


def final_table(timeline: Timeline, out: TextIO) -> None:
    """The pods table: intent, trigger, NodeClaim and instance type, time to node."""
    rows = [("POD", "INTENT", "TRIGGER", "NODECLAIM (INSTANCE TYPE)", "TO NODE")]
    for record in sorted(timeline.pods.values(), key=lambda r: r.name):
        claim_name = timeline.claim_of_node.get(record.node or "", "")
        claim = timeline.claims.get(claim_name) or {}
        itype = ((claim.get("metadata") or {}).get("labels") or {}).get(INSTANCE_TYPE_LABEL, "")
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
    _print_rows(rows, out)


def claims_table(claims: Sequence[ClaimCost], result: Balance, out: TextIO) -> None:
    """Every NodeClaim created: pool, instance type, GPUs, USD/hour, state, need."""
    if not claims:
        print("\nNo NodeClaim was created.", file=out)
        return
    rows = [("NODECLAIM", "NODEPOOL", "INSTANCE TYPE", "GPUS", "USD/H", "STATE", "NEED")]
    for c in claims:
        rows.append(
            (
                c.name,
                c.node_pool,
                c.instance_type or "-",
                f"{c.gpus} {c.gpu_model}" if c.gpu_model else "0",
                f"{c.price_per_hour}" if c.price_per_hour is not None else "-",
                ("deleted" if c.deleted else "live") + ("" if c.launched else ", not launched"),
                "BEYOND" if c.name in result.beyond else "ok",
            )
        )
    _print_rows(rows, out)


def _models(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{model}={count}" for model, count in sorted(counts.items())) or "none"


def _usd(value: Decimal) -> float:
    return float(round(value, 4))


def summary_json(
    timeline: Timeline,
    claims: Sequence[ClaimCost],
    need: Need,
    result: Balance,
    *,
    ok: bool,
    problems: Sequence[str],
    warnings: Sequence[str] = (),
    triggers_left: int,
    with_controller: bool,
    timings: str,
    seconds: float,
) -> dict[str, Any]:
    """The ``--output json`` object.

    Keys: ``ok`` (bool); ``pods``: ``[{namespace, name, intent: {gpus (number), model,
    pool, gpuMemoryMiB, source (list), annotated} | null, node, nodeClaim, phase (the
    gpu-intent scale-up phase or null), secondsToNode (null while Pending),
    karpenterFailed}]``; ``nodeClaims`` (every one created, creation order): ``[{name,
    nodePool, instanceType, gpuModel, gpus, pricePerHour (USD, null if not launched),
    launched, deleted, beyondNeed (reason or null)}]``; ``nativeNodeClaims`` (the native
    solve's, same shape without state); ``nativeUnplaced`` (twin -> message);
    ``gpusNeeded``, ``gpusBought``, ``gpusNative`` (model -> count); ``costPerHour``:
    ``{bought, native}`` (USD/hour); ``beyondNeed`` (NodeClaim -> reason); ``problems``
    (why ``ok`` is false); ``warnings`` (e.g. a component that ignored cancellation at
    the end); ``triggersLeft``; ``withController``; ``timings``;
    ``seconds`` (wall clock of the run).
    """
    pods = []
    for record in sorted(timeline.pods.values(), key=lambda r: r.name):
        namespace, _, name = record.name.partition("/")
        intent = record.intent
        pods.append(
            {
                "namespace": namespace,
                "name": name,
                "intent": None
                if intent is None
                else {
                    "gpus": float(intent.gpus),
                    "model": intent.model,
                    "pool": intent.pool,
                    "gpuMemoryMiB": intent.gpu_memory_mib,
                    "source": list(intent.source),
                    "annotated": record.annotated,
                },
                "node": record.node,
                "nodeClaim": timeline.claim_of_node.get(record.node or "") or None,
                "phase": record.phase or None,
                "secondsToNode": round(record.bound_at - record.created_at, 2)
                if record.bound_at is not None
                else None,
                "karpenterFailed": record.karpenter_failed,
            }
        )

    def claim_json(c: ClaimCost) -> dict[str, Any]:
        return {
            "name": c.name,
            "nodePool": c.node_pool,
            "instanceType": c.instance_type,
            "gpuModel": c.gpu_model,
            "gpus": c.gpus,
            "pricePerHour": _usd(c.price_per_hour) if c.price_per_hour is not None else None,
        }

    return {
        "ok": ok,
        "pods": pods,
        "nodeClaims": [
            {
                **claim_json(c),
                "launched": c.launched,
                "deleted": c.deleted,
                "beyondNeed": result.beyond.get(c.name),
            }
            for c in claims
        ],
        "nativeNodeClaims": [{**claim_json(c), "pods": list(c.pods)} for c in need.claims],
        "nativeUnplaced": dict(need.unplaced),
        "gpusNeeded": dict(result.gpus_needed),
        "gpusBought": dict(result.gpus_bought),
        "gpusNative": dict(result.gpus_native),
        "costPerHour": {"bought": _usd(result.cost_bought), "native": _usd(result.cost_native)},
        "beyondNeed": dict(result.beyond),
        "problems": list(problems),
        "warnings": list(warnings),
        "triggersLeft": triggers_left,
        "withController": with_controller,
        "timings": timings,
        "seconds": round(seconds, 2),
    }


def _demo_plan() -> PlanConfig:
    return PlanConfig(
        trigger=TriggerSettings(namespace=TRIGGER_NAMESPACE, gpu_name_label=GPU_NAME_LABEL),
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
            ``gpu-intent-system``, default NodePool ``gpu-standard``).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    if output not in ("text", "json"):
        raise ValueError(f"output must be 'text' or 'json', got {output!r}")
    if isinstance(timings, str):
        timings_name, karpenter = timings, TIMINGS[timings]
    else:
        timings_name, karpenter = "custom", timings
    directory = examples or default_examples()
    try:
        manifests = _read_examples(directory)
    except (ExamplesError, FileNotFoundError) as e:
        print(f"gpu-intent demo: {e}", file=err)
        return 2
    # The timeline tells the story; component INFO logs would interleave with it.
    for noisy in ("sim", "controller", "webhook"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    story = _Story(
        manifests=manifests,
        plan=plan or _demo_plan(),
        timings=karpenter,
        timings_name=timings_name,
        max_seconds=max_seconds if max_seconds is not None else default_timeout(karpenter),
        with_controller=with_controller,
        text=err if output == "json" else out,
    )
    with tempfile.TemporaryDirectory(prefix="gpu-intent-demo-") as tmp:
        work = Path(tmp)
        tls = write_tls_files(work / "webhook", ["localhost"], ["127.0.0.1"])
        async with SimCluster(work / "cluster", karpenter=karpenter) as cluster:
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
    #: Tasks that ignored a cancellation when the demo stopped them.
    stubborn: list[str] = field(default_factory=list)

    async def _apply_setup(self, api: client.ApiClient, ca_pem: bytes, port: int) -> None:
        namespaces = set()
        for path, doc in self.manifests:
            if doc["kind"] == "Pod":
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
        self, cluster: SimCluster, ca_pem: bytes, port: int
    ) -> tuple[int, dict[str, Any]]:
        text = self.text
        print(
            f"gpu-intent demo: simulated cluster at {cluster.url}, webhook at https://127.0.0.1:{port}/mutate"
            f" (timings {self.timings_name}, timeout {self.max_seconds:g}s)",
            file=text,
        )
        wall = time.monotonic()
        cfg = await load_configuration(str(cluster.kubeconfig))
        api = client.ApiClient(configuration=cfg)
        workloads = [(p, d) for p, d in self.manifests if d["kind"] == "Pod"]
        timeline = Timeline(
            text, namespaces=frozenset(d["metadata"]["namespace"] for _, d in workloads)
        )
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        controller_kube = Kube(client.ApiClient(configuration=cfg))
        try:
            await self._apply_setup(api, ca_pem, port)
            controller = Controller(controller_kube, ControllerConfig(plan=self.plan))
            listed = [asyncio.Event() for _ in range(3)]
            follows: dict[str, Any] = {
                "watch-pods": _follow(
                    core.list_pod_for_all_namespaces, (), timeline.on_pod, listed[0]
                ),
                "watch-nodeclaims": _follow(
                    custom.list_cluster_custom_object,
                    ("karpenter.sh", "v1", "nodeclaims"),
                    timeline.on_nodeclaim,
                    listed[1],
                    timeline.sync_nodeclaims,
                ),
                "watch-events": _follow(
                    core.list_event_for_all_namespaces,
                    (),
                    lambda _t, e: timeline.on_event(e),
                    listed[2],
                ),
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
                for path, doc in workloads:
                    try:
                        await apply(api, json.loads(json.dumps(doc)))
                    except RuntimeError as e:
                        raise ExamplesError(f"{path}: {e}") from None
                deadline = time.monotonic() + self.max_seconds
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.25)
                    if self._finished(timeline, len(workloads)):
                        break
                # Every NodeClaim launched or gone, checked against a fresh list.
                while True:
                    response = await custom.list_cluster_custom_object(
                        "karpenter.sh", "v1", "nodeclaims", _preload_content=False
                    )
                    timeline.sync_nodeclaims(list((await response.json()).get("items") or []))
                    if not timeline.unsettled_claims() or time.monotonic() >= deadline:
                        break
                    await asyncio.sleep(0.25)
            nodepools_response = await custom.list_cluster_custom_object(
                "karpenter.sh", "v1", "nodepools", _preload_content=False
            )
            nodepools = list((await nodepools_response.json()).get("items") or [])
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
        need = native_need(demand, nodepools, default_nodepool=self.plan.default_nodepool)
        claims = timeline.claims_bought()
        result = balance(claims, need)
        final_table(timeline, text)
        claims_table(claims, result, text)
        native = ", ".join(
            f"{c.node_pool} {c.instance_type} ({c.gpus} {c.gpu_model})" for c in need.claims
        )
        print(f"\nGPUs needed:      {_models(result.gpus_needed)}", file=text)
        print(f"GPUs provisioned: {_models(result.gpus_bought)}", file=text)
        print(
            f"NodeClaims created: {result.claims_bought}; the same demand as native whole-GPU"
            f" pods: {result.claims_native} ({native or 'none'})",
            file=text,
        )
        print(
            f"Instance cost: ${result.cost_bought:.4f}/h bought; ${result.cost_native:.4f}/h"
            " for the same demand as native whole-GPU pods (sim catalog, on-demand)",
            file=text,
        )
        for twin, message in need.unplaced.items():
            print(f"native twin {twin} fits no NodePool: {message}", file=text)
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
            pending = sorted(r.name for r in timeline.pods.values() if not r.node)
            if len(timeline.pods) != expected:
                problems.append(f"saw {len(timeline.pods)} of {expected} example pods")
            if pending:
                problems.append(f"pods without a node: {', '.join(pending)}")
            if triggers_left:
                problems.append(f"{triggers_left} trigger pod(s) left")
            ok = not problems
            print(
                "\nOK: every GPU pod got a node, no trigger remains and no NodeClaim is beyond"
                " the need."
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
        )
        return (0 if ok else 1), summary


def _done(timeline: Timeline, expected: int) -> bool:
    pods = timeline.pods.values()
    return (
        len(timeline.pods) == expected and all(p.node for p in pods) and not timeline.triggers_live
    )


def _is_native(record: PodRecord) -> bool:
    """Karpenter provisions for the pod by itself: no GPU intent, or whole GPUs asked as
    ``nvidia.com/gpu`` resources."""
    return record.intent is None or "resources:nvidia.com/gpu" in record.intent.source


def _shown_stuck(timeline: Timeline, expected: int) -> bool:
    if len(timeline.pods) != expected:
        return False
    native = [p for p in timeline.pods.values() if _is_native(p)]
    shared = [p for p in timeline.pods.values() if not _is_native(p)]
    return all(p.node for p in native) and all(
        p.node is None and p.karpenter_failed for p in shared
    )
