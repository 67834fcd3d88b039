"""The demo's record of what happened (the live timeline) and its reports: the pods and
NodeClaims tables and the JSON summary."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TextIO

from controller.karpenter import unschedulable_condition
from controller.model import ScaleUpStatus
from gpu_intent.demo.manifests import INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from gpu_intent.demo.need import Balance, ClaimCost, Need, bought_claim
from gpu_intent.explain import ClaimIndex, resolve_claims
from intent.contract import (
    TRIGGER_LABEL,
    Intent,
    IntentError,
    Phase,
)
from intent.inference import infer
from intent.keys import NVIDIA_GPU
from intent.text import gpus_for_people, usd_for_people

log = logging.getLogger(__name__)

_FAILED_PREFIX = "Failed to schedule pod, "
_LEGACY_POOL = re.compile(r'^incompatible with nodepool "([^"]+)", daemonset overhead=\{[^}]*\}, ')
_POOL_REQUIREMENT = re.compile(r"karpenter\.sh/nodepool In \[([^\]]+)\]")


def shorten_failed_scheduling(message: str) -> str:
    """Karpenter's ``FailedScheduling`` message cut to what a reader of the timeline needs.

    Karpenter writes ``Failed to schedule pod, <reason>; <reason>; ...``, one reason per
    NodePool tried, each with the full requirements and resources
    (kubernetes-sigs/karpenter ``pkg/controllers/provisioning/scheduling/scheduler.go``;
    v1.0-v1.3 prefix each with ``incompatible with nodepool "<name>", daemonset
    overhead={...}``). This keeps each distinct reason once, without its
    ``requirements=`` and ``resources=`` detail, followed by the NodePools it came from
    when the message names them (or how many times it came) and the extended resources
    asked for (the usual cause), e.g. ``no instance type has enough resources (NodePools
    gpu-standard, gpu-hami; asks nvidia.com/gpu=1, nvidia.com/gpumem=8000)``. Pure; other messages are
    returned unchanged. The full message stays in the JSON summary.
    """
    if not message.startswith(_FAILED_PREFIX):
        return message
    reasons: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    asks: dict[str, dict[str, str]] = {}
    for part in message[len(_FAILED_PREFIX) :].split("; "):
        pool = None
        if legacy := _LEGACY_POOL.match(part):
            pool, part = legacy.group(1), part[legacy.end() :]
        elif named := _POOL_REQUIREMENT.search(part):
            pool = named.group(1)
        reason = re.split(r", (?:requirements|resources)=", part, maxsplit=1)[0].strip()
        reasons.setdefault(reason, [])
        counts[reason] = counts.get(reason, 0) + 1
        if pool and pool not in reasons[reason]:
            reasons[reason].append(pool)
        _, found, resources = part.partition("resources=")
        if found:
            try:
                requested = json.loads(resources)
            except ValueError:
                requested = {}
            extended = {k: str(v) for k, v in requested.items() if "/" in k}
            asks.setdefault(reason, {}).update(extended)
    shown = []
    for reason, pools in reasons.items():
        notes = []
        if pools:
            notes.append(f"NodePool{'s' if len(pools) > 1 else ''} {', '.join(pools)}")
        elif counts[reason] > 1:
            notes.append(f"{counts[reason]} NodePools")
        if asks.get(reason):
            notes.append("asks " + ", ".join(f"{k}={v}" for k, v in asks[reason].items()))
        shown.append(f"{reason} ({'; '.join(notes)})" if notes else reason)
    return "; ".join(shown)


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
    #: The NodeClaim the pod's last scale-up status names, if any.
    status_claim: str | None = None
    node: str | None = None
    bound_at: float | None = None
    karpenter_failed: str | None = None
    #: Its scheduler refused it (``PodScheduled=False``, reason ``Unschedulable``) before
    #: it was bound: the pod waited for capacity.
    refused: bool = False
    pod: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timeline:
    """Prints what happens, as it happens, and keeps what the final tables need.

    ``namespaces``: where the example pods live (every non-trigger pod there is one);
    ``opted_in``: those of them labelled for the webhook (`intent.contract.INJECT_LABEL`);
    ``claims``: every NodeClaim seen, in creation order, last state kept after deletion
    (``claims_deleted``)."""

    out: TextIO
    namespaces: frozenset[str] = frozenset({"ml"})
    opted_in: frozenset[str] = frozenset({"ml"})
    start: float = field(default_factory=time.monotonic)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims_deleted: set[str] = field(default_factory=set)
    claim_of_node: dict[str, str] = field(default_factory=dict)
    #: The examples' ResourceClaimTemplates and ResourceClaims
    #: (`gpu_intent.explain.claim_index`), which DRA pods' intents come from.
    dra_claims: ClaimIndex = field(default_factory=dict)
    triggers_live: set[str] = field(default_factory=set)
    triggers_seen: set[str] = field(default_factory=set)
    seen_events: set[tuple[str, str, str]] = field(default_factory=set)

    def now(self) -> float:
        return time.monotonic() - self.start

    def _infer(self, pod: Mapping[str, Any]) -> Intent | None:
        """The intent the webhook (or, for a DRA pod, the controller) would find: a DRA
        pod's claims are read from `dra_claims` (the examples' ResourceClaimTemplates and
        ResourceClaims), as `gpu-intent explain` reads them. Raises IntentError as
        `intent.inference.infer`."""
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        claimed = resolve_claims(pod, namespace, self.dra_claims)
        return infer(pod, reasons=False, claims=claimed).intent

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
                    record.intent = self._infer(pod)
            except IntentError:
                record.intent = None
            self.say(f"pod {key}", f"created; intent: {describe_intent(record.intent)}")
            if (
                record.intent is not None
                and not record.annotated
                and not spec.get("resourceClaims")
            ):
                why = (
                    "its namespace is opted in: the webhook's log says why"
                    if meta.get("namespace") in self.opted_in
                    else "namespace not opted in"
                )
                self.say(f"pod {key}", f"not annotated by the webhook ({why})")
        elif not record.annotated:
            try:
                recorded = Intent.from_annotations(meta.get("annotations"))
            except IntentError:
                recorded = None
            if recorded is not None:  # the controller recorded a DRA pod's intent
                record.intent, record.annotated = recorded, True
                self.say(f"pod {key}", f"intent recorded: {describe_intent(recorded)}")
        record.pod = pod
        status = ScaleUpStatus.from_annotation(
            (meta.get("annotations") or {}).get("gpu-intent.io/scale-up")
        )
        if status is not None:
            record.status_claim = status.node_claim
        if status is not None and status.phase != record.phase:
            record.phase = status.phase
            if status.trigger and status.trigger not in record.triggers:
                record.triggers.append(status.trigger)
        if not spec.get("nodeName") and unschedulable_condition(pod) is not None:
            record.refused = True
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
                f"created: {requests.get(NVIDIA_GPU)} {NVIDIA_GPU}, nodeSelector "
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
        text = str(event.get("message"))
        if source == "karpenter" and event.get("reason") == "FailedScheduling":
            text = shorten_failed_scheduling(text)
        self.say(f"{who} -> {target}", f"{event.get('reason')}: {text}")


def describe_intent(intent: Intent | None) -> str:
    if intent is None:
        return "none (not a GPU pod)"
    parts = [f"{gpus_for_people(intent.gpus)} GPU", intent.model or "any model"]
    if intent.gpu_memory_mib:
        parts.append(f"{intent.gpu_memory_mib} MiB")
    sources = sorted({s.where for s in intent.source})
    return (
        " ".join(parts[:2]) + "".join(f", {p}" for p in parts[2:]) + f" (from {'+'.join(sources)})"
    )


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
            "none (Karpenter native)" if record.phase == Phase.NATIVE else "none"
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
                usd_for_people(c.price_per_hour) if c.price_per_hour is not None else "-",
                ("deleted" if c.deleted else "live") + ("" if c.launched else ", not launched"),
                "BEYOND" if c.name in result.beyond else "ok",
            )
        )
    _print_rows(rows, out)


def format_models(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{model}={count}" for model, count in sorted(counts.items())) or "none"


def _usd(value: Decimal) -> float:
    return float(round(value, 4))


def _pod_json(timeline: Timeline, record: PodRecord) -> dict[str, Any]:
    """One entry of `summary_json`'s ``pods``."""
    namespace, _, name = record.name.partition("/")
    intent = record.intent
    return {
        "namespace": namespace,
        "name": name,
        "intent": None
        if intent is None
        else {
            "gpus": float(intent.gpus),
            "model": intent.model,
            "pool": intent.pool,
            "gpuMemoryMiB": intent.gpu_memory_mib,
            "source": [str(s) for s in intent.source],
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
    story: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--output json`` object.

    Keys: ``ok`` (bool); ``pods``: ``[{namespace, name, intent: {gpus (number), model,
    pool, gpuMemoryMiB, source (list), annotated} | null, node, nodeClaim, phase (the
    gpu-intent scale-up phase or null), secondsToNode (null while Pending),
    karpenterFailed}]``; ``nodeClaims`` (every one created, creation order): ``[{name,
    nodePool, instanceType, gpuModel, gpus, pricePerHour (USD, null if not launched),
    launched, deleted, beyondNeed (reason or null)}]``; ``nativeNodeClaims`` (the native
    solve's, same shape without state; the solve of the ideal native twin,
    `gpu_intent.demo.twin`); ``nativeUnplaced`` (twin -> message); ``gpusNeeded``
    (``ceil`` of summed intents), ``gpusLowerBound`` (the ideal twin's
    first-fit-decreasing packing), ``gpusBought``, ``gpusNative`` (the ideal twin's
    solve) (model -> count); ``costPerHour``: ``{bought, native}`` (USD/hour);
    ``idealCostPerHour`` (USD/hour the sim's Karpenter buys for the ideal twin, equal to
    ``costPerHour.native``); ``beyondNeed`` (NodeClaim -> reason, judged against the
    ideal twin); ``problems`` (why ``ok`` is false); ``warnings`` (e.g. a component that
    ignored cancellation at the end); ``triggersLeft``; ``withController``; ``timings``;
    ``seconds`` (wall clock of the run); ``story`` (when given): ``{pods, bound, closed,
    closedAfterSeconds (every pod closed; null: not within the timeout),
    endedAfterSeconds (the wait ended), timeoutSeconds}``, seconds from the first pod's
    creation.
    """
    pods = [
        _pod_json(timeline, record)
        for record in sorted(timeline.pods.values(), key=lambda r: r.name)
    ]

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
        "gpusLowerBound": dict(result.gpus_lower_bound),
        "gpusBought": dict(result.gpus_bought),
        "gpusNative": dict(result.gpus_native),
        "costPerHour": {"bought": _usd(result.cost_bought), "native": _usd(result.cost_native)},
        "idealCostPerHour": _usd(result.cost_native),
        "beyondNeed": dict(result.beyond),
        "problems": list(problems),
        "warnings": list(warnings),
        "triggersLeft": triggers_left,
        "withController": with_controller,
        "timings": timings,
        "seconds": round(seconds, 2),
        **({"story": dict(story)} if story is not None else {}),
    }
