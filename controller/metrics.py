"""The controller's Prometheus registry and the metrics the reconciler updates.

Informer metrics live beside the informer, API errors beside the API adapter
(``gpu_intent_api_errors_total{verb,code}``, `controller.kube`). Buckets: reconcile passes are expected to
take milliseconds; a pod's time to a node is tens of seconds to minutes (cloud launch
plus registration, REFERENCE.md 1: launch timeout 5 min, registration 15 min).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.model import TRIGGER_MARKER_KEY

REGISTRY = CollectorRegistry()

PENDING_PODS = Gauge(
    "gpu_intent_pending_gpu_pods",
    "Unschedulable pods with a GPU intent, by scale-up phase.",
    ["phase"],
    registry=REGISTRY,
)
TRIGGERS = Gauge("gpu_intent_triggers", "Live trigger pods.", registry=REGISTRY)
DEMAND_GPUS = Gauge(
    "gpu_intent_demand_gpus",
    "GPUs (possibly fractional) wanted by pods that need a trigger, by NodePool and model.",
    ["nodepool", "model"],
    registry=REGISTRY,
)
OPERATIONS = Counter(
    "gpu_intent_operations_total",
    "API writes the controller made, by operation and result.",
    ["operation", "result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "gpu_intent_reconcile_seconds",
    "Duration of one plan-and-apply pass (its writes included).",
    # Up to a minute: a pass whose writes meet 429s and 500s waits out their retries.
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    registry=REGISTRY,
)
PLAN_SECONDS = Histogram(
    "gpu_intent_plan_seconds",
    "The deciding part of a pass (snapshot and plan, no API call): the controller's own "
    "CPU per pass, apart from waiting on its writes.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
TIME_TO_NODE = Histogram(
    "gpu_intent_pod_time_to_node_seconds",
    "From the creation of a pod gpu-intent scaled up for to its binding to a node.",
    buckets=(5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800),
    registry=REGISTRY,
)
LEADER = Gauge(
    "gpu_intent_leader",
    "1 while this replica holds the leader Lease and acts, else 0.",
    registry=REGISTRY,
)
TRIGGERS_CREATED = Counter(
    "gpu_intent_triggers_created_total",
    "Trigger pods created, by NodePool.",
    ["nodepool"],
    registry=REGISTRY,
)
SCALE_UPS = Counter(
    "gpu_intent_scale_ups_total",
    "Pods whose scale-up ended, by result: success (bound to a node, told Scheduled), "
    "failed (told Failed), cancelled (deleted before it got a node). Success rate: "
    'sum(rate(gpu_intent_scale_ups_total{result="success"}[1h])) / '
    "sum(rate(gpu_intent_scale_ups_total[1h])).",
    ["result"],
    registry=REGISTRY,
)
#: Karpenter's NodeClaim conditions in the order a NodeClaim passes them (karpenter
#: pkg/apis/v1/nodeclaim_status.go: ConditionTypeLaunched, ConditionTypeRegistered,
#: ConditionTypeInitialized, and the root Ready condition).
NODECLAIM_PHASES: tuple[str, ...] = ("Launched", "Registered", "Initialized", "Ready")
NODECLAIM_PROVISION_SECONDS = Histogram(
    "gpu_intent_nodeclaim_provision_seconds",
    "From the creation of a NodeClaim bought for gpu-intent triggers to each of its "
    "conditions turning True (phase: Launched, Registered, Initialized, Ready), by NodePool.",
    ["nodepool", "phase"],
    buckets=(1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1200, 1800),
    registry=REGISTRY,
)

for _result in ("success", "failed", "cancelled"):
    SCALE_UPS.labels(_result)  # exported at 0 from the start, so a rate has both sides


def scale_up_result(phase: str) -> str | None:
    """The `SCALE_UPS` result a written status phase ends a scale-up with (``Scheduled``:
    success, ``Failed``: failed), or None for a phase on the way. Pure."""
    return {"Scheduled": "success", "Failed": "failed"}.get(phase)


def _time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def provision_durations(nodeclaim: Mapping[str, Any]) -> dict[str, float]:
    """Seconds from a NodeClaim's ``creationTimestamp`` to the ``lastTransitionTime`` of
    each of its `NODECLAIM_PHASES` conditions that is True now (a condition's transition
    time is when it last changed: when it turned True). Pure."""
    meta = nodeclaim.get("metadata") or {}
    created = _time(meta.get("creationTimestamp"))
    if created is None:
        return {}
    out: dict[str, float] = {}
    for condition in (nodeclaim.get("status") or {}).get("conditions") or []:
        if not isinstance(condition, Mapping):
            continue
        phase = condition.get("type")
        when = _time(condition.get("lastTransitionTime"))
        if phase in NODECLAIM_PHASES and condition.get("status") == "True" and when:
            out[str(phase)] = max(0.0, (when - created).total_seconds())
    return out


def bought_for_triggers(nodeclaim: Mapping[str, Any]) -> bool:
    """Whether Karpenter bought the NodeClaim for gpu-intent triggers: its requirements
    carry the trigger marker (`controller.model.TRIGGER_MARKER_KEY`). Pure."""
    requirements = (nodeclaim.get("spec") or {}).get("requirements") or []
    return any(isinstance(r, Mapping) and r.get("key") == TRIGGER_MARKER_KEY for r in requirements)


class NodeClaimPhases:
    """Observes each phase of each NodeClaim bought for triggers once, into
    `NODECLAIM_PROVISION_SECONDS`, from the NodeClaims informer (`observe` is its hook).
    The first list only records what is True already (a previous process observed it);
    later lists and watch events observe what is new. Memory: the phases seen per live
    NodeClaim, forgotten when it is deleted."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}
        self._primed = False

    def observe(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One NodeClaim from a list (``LISTED``; ``SYNCED`` once a list is in) or a
        watch event."""
        if event_type == "SYNCED":
            self._primed = True
            return
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name") or "")
        if event_type == "DELETED":
            self._seen.pop(uid, None)
            return
        if not bought_for_triggers(obj):
            return
        seen = self._seen.setdefault(uid, set())
        pool = str((meta.get("labels") or {}).get("karpenter.sh/nodepool", ""))
        for phase, seconds in provision_durations(obj).items():
            if phase not in seen:
                seen.add(phase)
                if self._primed or event_type != "LISTED":
                    NODECLAIM_PROVISION_SECONDS.labels(pool, phase).observe(seconds)


def record_scale_up(phase: str | None) -> None:
    """Count the end of a pod's scale-up: ``phase`` is the status just written
    (`scale_up_result`), or None for a pod found deleted before it got a node
    (cancelled)."""
    result = "cancelled" if phase is None else scale_up_result(phase)
    if result is not None:
        SCALE_UPS.labels(result).inc()
