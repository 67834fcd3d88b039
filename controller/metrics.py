"""The controller's Prometheus metrics: `ControllerMetrics`, one per controller,
registered on the registry its ``/metrics`` serves.

The composition root (`gpu_intent.cli.controller`) creates one on a new
`CollectorRegistry` and hands it to everything that updates a metric: the `Kube` adapter
(API errors), the informers, the leader elector, the status writer and the `Controller`.
Nothing here is module-global, so two controllers in one process (tests, the demo)
count apart. Buckets: reconcile passes are expected to take milliseconds; a pod's time
to a node is tens of seconds to minutes (cloud launch plus registration, REFERENCE.md 1:
launch timeout 5 min, registration 15 min).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from controller.model import TRIGGER_MARKER_KEY
from controller.placement import LAYERS
from intent.contract import Phase

#: Karpenter's NodeClaim conditions in the order a NodeClaim passes them (karpenter
#: pkg/apis/v1/nodeclaim_status.go: ConditionTypeLaunched, ConditionTypeRegistered,
#: ConditionTypeInitialized, and the root Ready condition).
NODECLAIM_PHASES: tuple[str, ...] = ("Launched", "Registered", "Initialized", "Ready")
#: Seconds: a pass whose writes meet 429s and 500s waits out their retries, up to a minute.
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Lane(enum.StrEnum):
    """The kinds of API write the controller makes: the ``operation`` label of
    ``gpu_intent_operations_total``, and the write slots of `controller.executor.Executor`."""

    CREATE = "create"
    DELETE = "delete"
    MARK = "mark"
    LINK = "link"
    LABEL = "label"
    PROTECT = "protect"
    DELETE_NODECLAIM = "delete-nodeclaim"
    #: Reports (`controller.reports.StatusWriter`): scale-up statuses and their Events.
    STATUS = "status"
    EVENT = "event"
    #: DRA pods' intents (`controller.dra_intents.DraIntents`).
    INTENT = "intent"


#: The results of a scale-up (`scale_up_result`; ``cancelled``: deleted before a node).
SCALE_UP_RESULTS: tuple[str, ...] = ("success", "failed", "cancelled")


class ControllerMetrics:
    """The controller's metrics, registered on one `CollectorRegistry`.

    Reconciler (`controller.reconciler.Controller`):

    - ``gpu_intent_pending_gpu_pods{phase}`` (gauge): unschedulable pods with a GPU
      intent, by scale-up phase;
    - ``gpu_intent_triggers`` (gauge): live trigger pods;
    - ``gpu_intent_demand_gpus{nodepool,model}`` (gauge): GPUs, possibly fractional,
      wanted by pods that need a trigger (``model`` ``any`` when unnamed);
    - ``gpu_intent_operations_total{operation,result}``: API writes made, ``result``
      ``ok`` or ``error``;
    - ``gpu_intent_reconcile_seconds`` (histogram, seconds): one plan-and-apply pass,
      writes included;
    - ``gpu_intent_plan_seconds`` (histogram, seconds): the deciding part of a pass;
    - ``gpu_intent_triggers_created_total{nodepool}``: trigger pods created;
    - ``gpu_intent_unplaceable_pods{layer}`` (gauge): pending pods of a GPU-sharing
      layer that no NodePool can place, because none makes nodes with the labels the
      layer runs on (`controller.placement`; the pods are told ``Unresolvable``, with a
      Warning Event naming the label and the ``--placement`` setting), each layer
      exported at 0 from the start.

    Status writer (`controller.reports.StatusWriter`) and reconciler:

    - ``gpu_intent_scale_ups_total{result}``: ended scale-ups, ``success``, ``failed``
      or ``cancelled``, each exported at 0 from the start (`record_scale_up`);
    - ``gpu_intent_pod_time_to_node_seconds`` (histogram, seconds): a scaled-up pod's
      creation to its binding.

    NodeClaims informer hook (`NodeClaimPhases`):

    - ``gpu_intent_nodeclaim_provision_seconds{nodepool,phase}`` (histogram, seconds):
      a NodeClaim bought for triggers, creation to each `NODECLAIM_PHASES` condition.

    Leader elector (`controller.leader.LeaderElector`, or the command without election):

    - ``gpu_intent_leader`` (gauge): 1 while this replica acts, else 0.

    API adapter (`intent.kube.Kube`):

    - ``gpu_intent_api_errors_total{verb,code}``: failed API calls by Kubernetes verb
      (`intent.kube.KubeError.verb`) and HTTP code (0: no answer).

    Informers (`controller.informer.Informer`):

    - ``gpu_intent_informer_restarts_total{informer,reason}``: relists after the first
      list (``expired``: 410 Gone, ``throttled``: 429, ``error``: anything else);
    - ``gpu_intent_informer_events_total{informer,type}``: watch events applied;
    - ``gpu_intent_informer_synced{informer}`` (gauge): 1 once the first list is in;
    - ``gpu_intent_informer_backoff_seconds_total{informer}``: seconds waited before
      relisting.

    The registry also gets prometheus_client's `ProcessCollector` (``process_*``: CPU
    seconds, resident memory, open file descriptors) and `PlatformCollector`
    (``python_info``), as the webhook's does. Registering a second `ControllerMetrics`
    on the same registry raises ValueError (duplicated timeseries).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        """Create every metric on ``registry``, each scale-up result starting at 0."""
        self.registry = registry
        self.pending_pods = Gauge(
            "gpu_intent_pending_gpu_pods",
            "Unschedulable pods with a GPU intent, by scale-up phase.",
            ["phase"],
            registry=registry,
        )
        self.triggers = Gauge("gpu_intent_triggers", "Live trigger pods.", registry=registry)
        self.demand_gpus = Gauge(
            "gpu_intent_demand_gpus",
            "GPUs (possibly fractional) wanted by pods that need a trigger, by NodePool and model.",
            ["nodepool", "model"],
            registry=registry,
        )
        self.operations = Counter(
            "gpu_intent_operations_total",
            "API writes the controller made, by operation and result.",
            ["operation", "result"],
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "gpu_intent_reconcile_seconds",
            "Duration of one plan-and-apply pass (its writes included).",
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.plan_seconds = Histogram(
            "gpu_intent_plan_seconds",
            "The deciding part of a pass (snapshot and plan, no API call): the controller's "
            "own CPU per pass, apart from waiting on its writes.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        self.time_to_node = Histogram(
            "gpu_intent_pod_time_to_node_seconds",
            "From the creation of a pod gpu-intent scaled up for to its binding to a node.",
            buckets=(5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800),
            registry=registry,
        )
        self.leader = Gauge(
            "gpu_intent_leader",
            "1 while this replica holds the leader Lease and acts, else 0.",
            registry=registry,
        )
        self.triggers_created = Counter(
            "gpu_intent_triggers_created_total",
            "Trigger pods created, by NodePool.",
            ["nodepool"],
            registry=registry,
        )
        self.scale_ups = Counter(
            "gpu_intent_scale_ups_total",
            "Pods whose scale-up ended, by result: success (bound to a node, told Scheduled), "
            "failed (told Failed), cancelled (deleted before it got a node). Success rate: "
            'sum(rate(gpu_intent_scale_ups_total{result="success"}[1h])) / '
            "sum(rate(gpu_intent_scale_ups_total[1h])).",
            ["result"],
            registry=registry,
        )
        for result in SCALE_UP_RESULTS:
            self.scale_ups.labels(result)  # exported at 0 from the start: a rate has both sides
        self.unplaceable = Gauge(
            "gpu_intent_unplaceable_pods",
            "Pending pods of a GPU-sharing layer no NodePool can place (none makes nodes with "
            "the labels the layer runs on, --placement), by layer.",
            ["layer"],
            registry=registry,
        )
        self.set_unplaceable({})
        self._add_watch_metrics(registry)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)

    def _add_watch_metrics(self, registry: CollectorRegistry) -> None:
        """The metrics of what the controller watches: NodeClaims' provisioning, API
        errors and the informers."""
        self.nodeclaim_provision_seconds = Histogram(
            "gpu_intent_nodeclaim_provision_seconds",
            "From the creation of a NodeClaim bought for gpu-intent triggers to each of its "
            "conditions turning True (phase: Launched, Registered, Initialized, Ready), by "
            "NodePool.",
            ["nodepool", "phase"],
            buckets=(1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1200, 1800),
            registry=registry,
        )
        self.api_errors = Counter(
            "gpu_intent_api_errors_total",
            "API calls that failed, by Kubernetes verb and HTTP code (0: no answer: "
            "connection refused or lost, timeout).",
            ["verb", "code"],
            registry=registry,
        )
        self.informer_restarts = Counter(
            "gpu_intent_informer_restarts_total",
            "Informer relists after the initial list, by resource and reason (expired: 410 "
            "Gone; throttled: 429; error: anything else).",
            ["informer", "reason"],
            registry=registry,
        )
        self.informer_events = Counter(
            "gpu_intent_informer_events_total",
            "Watch events applied to the cache, by informer and type.",
            ["informer", "type"],
            registry=registry,
        )
        self.informer_synced = Gauge(
            "gpu_intent_informer_synced",
            "1 once the informer's first list is in the cache, else 0.",
            ["informer"],
            registry=registry,
        )
        self.informer_backoff_seconds = Counter(
            "gpu_intent_informer_backoff_seconds_total",
            "Seconds informers waited before relisting after a failure.",
            ["informer"],
            registry=registry,
        )

    def count_api_error(self, verb: str, code: int) -> None:
        """One failed API call (`intent.kube.ApiErrorCounter`, how the `intent.kube.Kube`
        adapter counts): ``gpu_intent_api_errors_total{verb,code}``."""
        self.api_errors.labels(verb, str(code)).inc()

    def set_unplaceable(self, by_layer: Mapping[str, int]) -> None:
        """Set ``gpu_intent_unplaceable_pods`` to ``by_layer`` (0 for the layers absent)."""
        for layer in LAYERS:
            self.unplaceable.labels(layer).set(by_layer.get(layer, 0))

    def record_scale_up(self, phase: str | None) -> None:
        """Count the end of a pod's scale-up: ``phase`` is the status just written
        (`scale_up_result`), or None for a pod found deleted before it got a node
        (cancelled). A phase on the way counts nothing."""
        result = "cancelled" if phase is None else scale_up_result(phase)
        if result is not None:
            self.scale_ups.labels(result).inc()


def scale_up_result(phase: str) -> str | None:
    """The ``gpu_intent_scale_ups_total`` result a written status phase ends a scale-up
    with (``Scheduled``: success, ``Failed``: failed), or None for a phase on the way.
    Pure."""
    results: dict[str, str] = {Phase.SCHEDULED: "success", Phase.FAILED: "failed"}
    return results.get(phase)


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
    time is when it last changed: when it turned True), by phase; {} without a readable
    creation time. Pure; raises nothing."""
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
    """Observes each phase of each NodeClaim bought for triggers once, into ``metrics``'
    ``gpu_intent_nodeclaim_provision_seconds``, from the NodeClaims informer (`observe`
    is its hook). The first list only records what is True already (a previous process
    observed it); later lists and watch events observe what is new. Memory: the phases
    seen per live NodeClaim, forgotten when it is deleted."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self._metrics = metrics
        self._seen: dict[str, set[str]] = {}
        self._primed = False

    def observe(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One NodeClaim from a list (``LISTED``; ``SYNCED`` once a list is in) or a
        watch event (``ADDED``, ``MODIFIED``, ``DELETED``). Raises nothing."""
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
                    self._metrics.nodeclaim_provision_seconds.labels(pool, phase).observe(seconds)
