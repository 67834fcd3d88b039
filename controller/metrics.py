"""The controller's Prometheus registry and the metrics the reconciler updates.

Informer metrics live beside the informer. Buckets: reconcile passes are expected to
take milliseconds; a pod's time to a node is tens of seconds to minutes (cloud launch
plus registration, REFERENCE.md 1: launch timeout 5 min, registration 15 min).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
    "Duration of one plan-and-apply pass.",
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
