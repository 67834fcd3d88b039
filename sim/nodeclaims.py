"""The simulated Karpenter's NodeClaim lifecycle, NodePool status and cluster-state view.

Sources (kubernetes-sigs/karpenter v1 unless noted):

- `existing_nodes`: ``pkg/controllers/state`` ``StateNode`` (a Node and its NodeClaim,
  linked by provider ID; an uninitialized managed node is judged by its NodeClaim's taints
  and allocatable, since the node has not reported them yet);
- `nodeclaim_object`: ``provisioning/scheduling/nodeclaimtemplate.go`` ``ToNodeClaim``;
- conditions: awslabs/operatorpkg ``status/condition_set.go`` (Unknown with reason
  ``AwaitingReconciliation``, True with the type as reason, root ``Ready`` recomputed
  from ``Launched``, ``Registered``, ``Initialized``; ``lastTransitionTime`` moves only
  when status, reason or message change);
- lifecycle: ``pkg/controllers/nodeclaim/lifecycle`` ``launch.go`` (cloud provider
  Create, then ``PopulateNodeClaimDetails``), ``registration.go`` (the Node joins, gets
  the NodeClaim's labels, ``karpenter.sh/registered`` and its taints),
  ``initialization.go`` (Ready, startup taints gone, extended resources registered), and
  ``termination`` (Node deleted, finalizer removed). The instance details follow the AWS
  provider (``pkg/cloudprovider/cloudprovider.go``, ``pkg/providers/instance``);
- insufficient capacity: `Lifecycle.no_capacity` (a fault switch) and the AWS provider's
  unavailable-offerings cache (`UnavailableOfferings`, read by `sim.karpenter.solve`).

The sim also plays the kubelet, the GPU agent (`sim.deviceplugins` decides which: NVIDIA's
DRA kubelet plugin, NVIDIA's device plugin with MIG, Alibaba's gpushare, Volcano's vGPU,
HAMi's or NVIDIA's device plugin) and GPU Feature Discovery of each new node.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from intent.contract import IntentError
from intent.quantity import parse_quantity
from sim import deviceplugins
from sim.catalog import CAPACITY_TYPES, ZONES, InstanceType, format_resources
from sim.requirements import NODEPOOL_LABEL, from_node_selector
from sim.scheduling import is_terminal, pod_requests
from sim.store import (
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    AlreadyExists,
    ApiError,
    NotFound,
    Store,
    rfc3339,
)

__all__ = [
    "TERMINATION_FINALIZER",
    "ExistingNode",
    "KarpenterTimings",
    "Lifecycle",
    "UnavailableOfferings",
    "condition_true",
    "existing_nodes",
    "initial_nodeclaim_status",
    "node_object",
    "nodeclaim_object",
    "nodepool_ready_status",
    "parse_resources",
    "set_condition",
    "subtract",
    "utc_now",
]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
TERMINATION_FINALIZER: Final = "karpenter.sh/termination"
NODECLAIM_CONDITIONS: Final = ("Launched", "Registered", "Initialized")
NODEPOOL_CONDITIONS: Final = ("ValidationSucceeded", "NodeClassReady")
#: ``scheduling.KnownEphemeralTaints``: ignored on nodes that are still initializing.
_EPHEMERAL_TAINTS: Final = (
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"),
    ("karpenter.sh/unregistered", "NoExecute"),
)


@dataclass(frozen=True)
class KarpenterTimings:
    """Delays in seconds. The batch windows and pod requeue are Karpenter's defaults
    (``BATCH_IDLE_DURATION`` 1 s, ``BATCH_MAX_DURATION`` 10 s, ``controller.go``
    ``RequeueAfter`` 10 s); launch, register and initialize are the sim's stand-ins for
    EC2, kubelet join and device plugin start-up; the timeouts are Karpenter's."""

    batch_idle_seconds: float = 1.0
    batch_max_seconds: float = 10.0
    requeue_seconds: float = 10.0
    launch_seconds: float = 1.0
    register_seconds: float = 2.0
    initialize_seconds: float = 1.0
    #: How long an offering that failed with insufficient capacity stays unavailable
    #: (aws/karpenter-provider-aws ``pkg/cache/cache.go`` ``UnavailableOfferingsTTL``).
    unavailable_offerings_ttl_seconds: float = 180.0
    #: ``lifecycle/liveness.go``: a NodeClaim not Launched this long after its Launched
    #: condition's ``lastTransitionTime`` (``LaunchTimeout``, 5 min), or not Registered
    #: this long after Registered's (``registrationTimeout``, 15 min), is deleted.
    launch_timeout_seconds: float = 300.0
    registration_timeout_seconds: float = 900.0
    #: ``disruption/emptiness.go``: an empty candidate is re-validated this long after it
    #: was found (``consolidationTTL``, 15 s) before it is disrupted (`sim.disruption`).
    consolidation_validation_seconds: float = 15.0

    def scaled(self, factor: float) -> KarpenterTimings:
        """Every delay multiplied by ``factor``."""
        return KarpenterTimings(*(getattr(self, f.name) * factor for f in dataclasses.fields(self)))


#: Fast enough for tests and benchmarks, keeping Karpenter's real ratio to the controller's
#: reaction (Karpenter: 1 s batch idle, 10 s requeue; controller: 0.1 s debounce; the
#: tests' controller debounces 0.02 s): a sharing layer may bind the real pod beside a
#: trigger, and the controller must act before Karpenter's next batch closes.
FAST_TIMINGS = KarpenterTimings(
    batch_idle_seconds=0.2,
    batch_max_seconds=1.0,
    requeue_seconds=2.0,
    launch_seconds=0.05,
    register_seconds=0.1,
    initialize_seconds=0.05,
)
#: EKS-like NodeClaim delays, about 60 s from creation to Ready, with Karpenter's default
#: batching: launch 2 s (the EC2 instance exists about 1 s after the request), register
#: 38 s (kubelet registration measured at 39 s, awslabs/amazon-eks-ami#1099; "about
#: 30-40s" to Ready, aws/karpenter-provider-aws#6165), initialize 20 s (node Ready plus
#: the NVIDIA device plugin advertising nvidia.com/gpu; an estimate). Users expect Ready
#: "in about 60 seconds" (aws/karpenter-provider-aws#3102).
EKS_TIMINGS = KarpenterTimings(launch_seconds=2.0, register_seconds=38.0, initialize_seconds=20.0)


@dataclass(frozen=True)
class ExistingNode:
    """One ``StateNode`` as the scheduler sees it: a Node, a NodeClaim not yet joined, or
    both. ``name`` is the node's, else the NodeClaim's; resources in base units (cores,
    bytes, counts); ``available`` is allocatable less the requests of non-terminal pods
    bound to the node, over the allocatable's resources only."""

    name: str
    labels: Mapping[str, str]
    taints: Sequence[Obj]
    available: Mapping[str, Decimal]
    capacity: Mapping[str, Decimal]
    initialized: bool
    nodeclaim: str | None = None
    node: str | None = None
    #: The non-terminal pods bound to the node (what pod anti-affinity counts).
    pods: tuple[Obj, ...] = ()


def parse_resources(resources: Obj | None) -> dict[str, Decimal]:
    """A resource list of quantity strings in base units; unparsable entries dropped."""
    out = {}
    for name, value in (resources or {}).items():
        try:
            out[name] = parse_quantity(value, name)
        except IntentError:
            log.debug("ignoring unparsable quantity %s=%r", name, value)
    return out


def subtract(lhs: Mapping[str, Decimal], rhs: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """``resources.Subtract``: ``lhs`` less ``rhs``, over ``lhs``'s keys only."""
    return {k: v - rhs.get(k, Decimal(0)) for k, v in lhs.items()}


def condition_true(obj: Obj, type_: str) -> bool:
    """Whether ``status.conditions`` has ``type_`` with status True."""
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def existing_nodes(
    nodes: Sequence[Obj], nodeclaims: Sequence[Obj], pods: Sequence[Obj]
) -> list[ExistingNode]:
    """The scheduler's view of capacity (``StateNode``): every Node and NodeClaim, joined
    by provider ID, except those ``MarkedForDeletion`` (NodeClaim deleting, or an
    unmanaged Node deleting). A managed node is registered and initialized once its Node
    has the ``karpenter.sh/registered`` and ``karpenter.sh/initialized`` labels; until it
    is registered it has the NodeClaim's labels and ``spec.taints``; until initialized its
    ephemeral and startup taints are ignored and its allocatable and capacity are the
    Node's, zero or missing values filled from the NodeClaim's estimate."""
    used: dict[str, dict[str, Decimal]] = {}
    bound: dict[str, list[Obj]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and not is_terminal(pod):
            bound.setdefault(node_name, []).append(pod)
            try:
                requests = pod_requests(pod)
            except ValueError:
                continue
            total = used.setdefault(node_name, {})
            for k, v in requests.items():
                total[k] = total.get(k, Decimal(0)) + v
    by_id = {
        (c.get("status") or {}).get("providerID"): c
        for c in nodeclaims
        if (c.get("status") or {}).get("providerID")
    }
    out, joined = [], set()
    for node in nodes:
        claim = by_id.get((node.get("spec") or {}).get("providerID"))
        if claim is not None:
            joined.add(claim["metadata"]["name"])
        deleting = (
            claim["metadata"].get("deletionTimestamp")
            if claim
            else node["metadata"].get("deletionTimestamp")
        )
        if not deleting:
            out.append(_state_node(node, claim, used, bound))
    for claim in nodeclaims:
        if claim["metadata"]["name"] not in joined and not claim["metadata"].get(
            "deletionTimestamp"
        ):
            out.append(_state_node(None, claim, used, bound))
    return out


def _fill(node_values: Obj | None, claim_values: Obj | None) -> dict[str, Decimal]:
    """The Node's resources, zero or missing ones taken from the NodeClaim's."""
    out = parse_resources(node_values)
    for k, v in parse_resources(claim_values).items():
        if not out.get(k):
            out[k] = v
    return out


def _state_node(
    node: Obj | None,
    claim: Obj | None,
    used: Mapping[str, Mapping[str, Decimal]],
    bound: Mapping[str, Sequence[Obj]],
) -> ExistingNode:
    node_labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    registered = claim is None or node_labels.get("karpenter.sh/registered") == "true"
    initialized = claim is None or node_labels.get("karpenter.sh/initialized") == "true"
    source: Obj = node if (node is not None and registered) else (claim or {})
    labels = dict((source.get("metadata") or {}).get("labels") or {})
    taints = list((source.get("spec") or {}).get("taints") or ())
    node_status, claim_status = (node or {}).get("status") or {}, (claim or {}).get("status") or {}
    if initialized:
        allocatable, capacity = (
            parse_resources(node_status.get("allocatable")),
            parse_resources(node_status.get("capacity")),
        )
    else:
        startup = [
            (t.get("key"), t.get("effect"))
            for t in ((claim or {}).get("spec") or {}).get("startupTaints") or ()
        ]
        # MatchTaint compares key and effect only.
        taints = [
            t
            for t in taints
            if (t.get("key"), t.get("effect")) not in (*_EPHEMERAL_TAINTS, *startup)
        ]
        allocatable = _fill(node_status.get("allocatable"), claim_status.get("allocatable"))
        capacity = _fill(node_status.get("capacity"), claim_status.get("capacity"))
    capacity["nodes"] = Decimal(1)
    name = node["metadata"]["name"] if node else str((claim or {})["metadata"]["name"])
    # StateNode.Available: resources.Subtract(allocatable, pod requests), which keeps only
    # the allocatable's keys: a request the node does not list (HAMi's nvidia.com/gpumem)
    # does not make it negative.
    available = subtract(allocatable, used.get(name, {}))
    return ExistingNode(
        name,
        labels,
        taints,
        available,
        capacity,
        initialized,
        claim["metadata"]["name"] if claim else None,
        name if node else None,
        tuple(bound.get(name, ())),
    )


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    generation: int,
) -> bool:
    """operatorpkg ``ConditionSet.Set``: replace ``type_``; ``lastTransitionTime`` only moves
    when status, reason or message change. Returns whether anything changed."""
    new = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "observedGeneration": generation,
    }
    for i, old in enumerate(conditions):
        if old.get("type") == type_:
            if all(
                old.get(k) == new[k] for k in ("status", "reason", "message", "observedGeneration")
            ):
                return False
            conditions[i] = new
            break
    else:
        conditions.append(new)
    conditions.sort(key=lambda c: str(c.get("type")))
    return True


def _recompute_ready(
    conditions: list[dict[str, Any]], dependents: Sequence[str], now: str, generation: int
) -> None:
    """``recomputeRootCondition``: Ready True once every dependent is, else Unknown with
    reason ``ReconcilingDependents`` listing them (False with ``UnhealthyDependents``)."""
    unhealthy = [c for c in conditions if c["type"] in dependents and c["status"] != "True"]
    if not unhealthy:
        set_condition(conditions, "Ready", "True", "Ready", "", now, generation)
        return
    false = any(c["status"] == "False" for c in unhealthy)
    message = ", ".join(f"{c['type']}={c['status']}" for c in unhealthy)
    set_condition(
        conditions,
        "Ready",
        "False" if false else "Unknown",
        "UnhealthyDependents" if false else "ReconcilingDependents",
        message,
        now,
        generation,
    )


def _conditions(
    dependents: Sequence[str], status: str, now: str, generation: int
) -> list[dict[str, Any]]:
    conditions: list[dict[str, Any]] = []
    for t in dependents:
        if status == "True":
            set_condition(conditions, t, "True", t, "", now, generation)
        else:
            set_condition(
                conditions,
                t,
                "Unknown",
                "AwaitingReconciliation",
                "object is awaiting reconciliation",
                now,
                generation,
            )
    _recompute_ready(conditions, dependents, now, generation)
    return conditions


def nodepool_ready_status(nodepool: Obj, now: datetime) -> dict[str, Any] | None:
    """The status to write on a NodePool that has no conditions yet (``Ready``,
    ``ValidationSucceeded``, ``NodeClassReady`` True, as Karpenter's NodePool readiness
    and validation controllers leave a valid pool with a ready node class), else None."""
    status = nodepool.get("status") or {}
    if status.get("conditions") or nodepool["metadata"].get("deletionTimestamp"):
        return None
    generation = int(nodepool["metadata"].get("generation", 1))
    return {
        **status,
        "conditions": _conditions(NODEPOOL_CONDITIONS, "True", rfc3339(now), generation),
    }


def nodepool_hash(nodepool: Obj) -> str:
    """A stable digest of the pool's template for ``karpenter.sh/nodepool-hash`` (not the
    same number Karpenter's hashstructure gives)."""
    template = json.dumps((nodepool.get("spec") or {}).get("template") or {}, sort_keys=True)
    return str(int(hashlib.sha256(template.encode()).hexdigest()[:15], 16))


def nodeclaim_object(
    nodepool: Obj,
    labels: Mapping[str, str],
    requirements: list[dict[str, Any]],
    requests: Mapping[str, Decimal],
) -> dict[str, Any]:
    """A NodeClaim to create for ``nodepool`` (``ToNodeClaim``): ``generateName``,
    ``labels`` (the pool's), the pool hash, an owner reference to the pool, the termination
    finalizer, and spec: ``nodeClassRef``, ``requirements``, ``resources.requests``,
    ``taints``, ``startupTaints``, ``expireAfter`` (default 720h), and
    ``terminationGracePeriod`` when the pool sets one."""
    meta, template = nodepool["metadata"], (nodepool.get("spec") or {}).get("template") or {}
    pool_spec = template.get("spec") or {}
    spec: dict[str, Any] = {
        "nodeClassRef": dict(pool_spec.get("nodeClassRef") or {}),
        "requirements": requirements,
        "resources": {"requests": format_resources(requests)},
        "expireAfter": pool_spec.get("expireAfter") or "720h",
    }
    for key in ("taints", "startupTaints", "terminationGracePeriod"):
        if pool_spec.get(key):
            spec[key] = pool_spec[key]
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    annotations.update(
        {
            "karpenter.sh/nodepool-hash": nodepool_hash(nodepool),
            "karpenter.sh/nodepool-hash-version": "v3",
        }
    )
    return {
        "metadata": {
            "generateName": f"{meta['name']}-",
            "labels": dict(labels),
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": [TERMINATION_FINALIZER],
        },
        "spec": spec,
    }


def initial_nodeclaim_status(now: datetime, generation: int = 1) -> dict[str, Any]:
    """``Launched``, ``Registered``, ``Initialized`` and ``Ready`` all Unknown."""
    return {"conditions": _conditions(NODECLAIM_CONDITIONS, "Unknown", rfc3339(now), generation)}


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


def _ami(gpu: bool) -> str:
    """A stable stand-in for the AL2023 AMI the EC2NodeClass resolves (NVIDIA variant on
    GPU types)."""
    return "ami-0" + hashlib.sha256(b"al2023-nvidia" if gpu else b"al2023").hexdigest()[:16]


def _ready_condition(ready: bool, stamp: str) -> dict[str, str]:
    """The kubelet's node ``Ready`` condition."""
    if ready:
        reason, message = "KubeletReady", "kubelet is posting ready status"
    else:
        reason, message = (
            "KubeletNotReady",
            "container runtime network not ready: cni plugin not initialized",
        )
    return {
        "type": "Ready",
        "status": str(ready),
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


#: Namespace of the DaemonSet pods every node runs (kube-proxy, the CNI, the GPU device
#: plugin); it never opts in to gpu-intent.
SYSTEM_NAMESPACE = "kube-system"


def device_plugin_pod(node: Obj, now: datetime) -> dict[str, Any]:
    """The GPU device plugin's DaemonSet pod, bound to ``node`` as the DaemonSet controller
    binds it once the Node exists (``pkg/controller/daemon``: it sets ``nodeName``
    through node affinity on ``metadata.name``): the agent `sim.deviceplugins.daemonset`
    picks for the node. Every real node runs such pods (and kube-proxy, the CNI); they
    are what makes a node "one that runs pods" for required pod anti-affinity
    (`sim.affinity`). No requests, so no capacity is taken."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    app = deviceplugins.daemonset(labels, deviceplugins.instance_type(labels))
    name = str(node["metadata"]["name"])
    return {
        "metadata": {
            "generateName": f"{app}-",
            "namespace": SYSTEM_NAMESPACE,
            "labels": {"app.kubernetes.io/name": app},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": app,
                    "uid": hashlib.sha256(app.encode()).hexdigest()[:32],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "plugin", "image": f"registry.example/{app}:1"}],
        },
        "status": {"phase": "Running", "startTime": rfc3339(now)},
    }


def node_object(claim: Obj, name: str, ip: str, now: datetime) -> dict[str, Any]:
    """The Node a launched NodeClaim's kubelet registers (``registration.go`` has synced
    the NodeClaim's labels and taints onto it): labels plus ``kubernetes.io/hostname`` and
    ``karpenter.sh/registered``, ``taints`` plus ``startupTaints``, an owner reference to
    the NodeClaim, capacity and allocatable without ``nvidia.com/gpu`` (no device plugin
    yet), Ready False."""
    meta, spec, status = claim["metadata"], claim.get("spec") or {}, claim.get("status") or {}
    without_gpus = {
        key: {k: v for k, v in (status.get(key) or {}).items() if k != "nvidia.com/gpu"}
        for key in ("capacity", "allocatable")
    }
    labels = {
        **(meta.get("labels") or {}),
        "kubernetes.io/hostname": name,
        "karpenter.sh/registered": "true",
    }
    owner = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }
    return {
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "providerID": status["providerID"],
            "taints": [*(spec.get("taints") or ()), *(spec.get("startupTaints") or ())],
        },
        "status": {
            **without_gpus,
            "conditions": [_ready_condition(False, rfc3339(now))],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": labels.get("kubernetes.io/arch", ""),
                "operatingSystem": labels.get("kubernetes.io/os", ""),
            },
        },
    }


class UnavailableOfferings:
    """The cloud provider's unavailable-offerings cache (aws/karpenter-provider-aws
    ``pkg/cache/unavailableofferings.go``): an (instance type, zone, capacity type) that
    failed with insufficient capacity is marked unavailable for ``ttl`` seconds; the
    instance type provider then reports that offering as not available, so the scheduler
    and the next launch pass over it (``pkg/providers/instancetype``, ``createOfferings``).
    Karpenter's default TTL is 3 minutes (``UnavailableOfferingsTTL``)."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl, self._clock = ttl, clock
        self._expiry: dict[tuple[str, str, str], float] = {}

    def mark(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """``MarkUnavailable``: the offering is unavailable for the next ``ttl`` seconds."""
        self._expiry[(instance_type, zone, capacity_type)] = self._clock() + self._ttl

    def current(self) -> frozenset[tuple[str, str, str]]:
        """The offerings unavailable now, expired entries dropped."""
        now = self._clock()
        self._expiry = {k: t for k, t in self._expiry.items() if t > now}
        return frozenset(self._expiry)


def _describe(claim: Obj) -> str:
    labels = claim["metadata"].get("labels") or {}
    return (
        f"nodeclaim {claim['metadata']['name']} (nodepool {labels.get(NODEPOOL_LABEL, '')}, "
        f"{labels.get('node.kubernetes.io/instance-type', 'not launched')})"
    )


class Lifecycle:
    """Walks NodeClaims to Ready and terminates deleted ones, as Karpenter's NodeClaim
    lifecycle and termination controllers do, with the cloud, kubelet, device plugin and
    GFD simulated: one asyncio task per NodeClaim sleeps ``launch_seconds``, launches the
    cheapest remaining instance type, sleeps ``register_seconds``, creates the Node, sleeps
    ``initialize_seconds`` and brings the GPUs up. `reconcile` also gives NodePools without
    conditions their Ready conditions; it is synchronous and writes nothing when nothing is
    due.

    Args:
        catalog: instance types to launch from.
        rng: source of zones, IPs and instance IDs (seed it for reproducible runs).
        now: wall clock for ``lastTransitionTime``.
        on_event: ``(involved, type, reason, message)`` for Warning events.
        unavailable: the unavailable-offerings cache launches consult and fill.

    Fault switches a test flips at will (all off by default):

    - ``no_capacity``: the (instance type, zone) pairs the simulated cloud has no capacity
      in (`_launch`);
    - ``launch_hangs``: the cloud never answers a launch, so the NodeClaim stays
      unlaunched until the launch timeout deletes it;
    - ``registration_hangs``: instances launch but their kubelet never joins, so the
      registration timeout deletes the NodeClaim;
    - ``unregistered_resources``: extended resources (e.g. ``nvidia.com/gpu``) the device
      plugin never advertises: the node turns Ready but Initialized stays Unknown with
      reason ``ResourceNotRegistered`` (there is no initialization timeout).
    """

    def __init__(
        self,
        store: Store,
        catalog: Sequence[InstanceType],
        timings: KarpenterTimings,
        *,
        rng: random.Random,
        now: Callable[[], datetime] = utc_now,
        on_event: Callable[[Obj, str, str, str], None] | None = None,
        unavailable: UnavailableOfferings | None = None,
    ) -> None:
        self._store, self._catalog, self._timings = store, catalog, timings
        self._rng, self._now, self._on_event = rng, now, on_event
        self.unavailable = unavailable or UnavailableOfferings(
            timings.unavailable_offerings_ttl_seconds
        )
        self.no_capacity: set[tuple[str, str]] = set()
        self.launch_hangs = False
        self.registration_hangs = False
        self.unregistered_resources: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def reconcile(self) -> None:
        """Set missing NodePool conditions, terminate NodeClaims being deleted and make sure
        every unfinished NodeClaim has a task (call from within a running event loop)."""
        for pool in self._store.list(NODEPOOLS, copy_objects=False)[0]:
            if (status := nodepool_ready_status(pool, self._now())) is not None:
                name = pool["metadata"]["name"]
                try:
                    self._store.mutate(
                        NODEPOOLS, None, name, _setter("status", status), subresource="status"
                    )
                except ApiError as e:
                    log.warning("setting nodepool %s ready failed: %s", name, e.message)
                else:
                    log.info("nodepool %s is ready", name)
        live = set()
        for claim in self._store.list(NODECLAIMS, copy_objects=False)[0]:
            uid, name = claim["metadata"]["uid"], claim["metadata"]["name"]
            live.add(uid)
            if claim["metadata"].get("deletionTimestamp"):
                if (task := self._tasks.pop(uid, None)) is not None:
                    task.cancel()
                if TERMINATION_FINALIZER in (claim["metadata"].get("finalizers") or ()):
                    self._terminate(claim)
            elif not condition_true(claim, "Initialized") and (
                uid not in self._tasks or self._tasks[uid].done()
            ):
                self._tasks[uid] = asyncio.get_running_loop().create_task(
                    self._drive(name, uid), name=f"nodeclaim/{name}"
                )
        for uid in set(self._tasks) - live:
            self._tasks.pop(uid).cancel()

    def close(self) -> None:
        """Cancel every NodeClaim task."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def _current(self, name: str, uid: str) -> Obj | None:
        """The NodeClaim as stored now, None if gone, replaced or being deleted."""
        try:
            claim = self._store.get(NODECLAIMS, None, name)
        except NotFound:
            return None
        if claim["metadata"]["uid"] != uid or claim["metadata"].get("deletionTimestamp"):
            return None
        return claim

    async def _drive(self, name: str, uid: str) -> None:
        """The NodeClaim's task: launch, register, initialize, each after its delay; a
        failed write is retried after the same delay. Until it is registered, the launch
        and registration timeouts (`_liveness`) apply; a hung step (fault switch) waits
        for them."""
        t = self._timings
        while (claim := self._current(name, uid)) is not None:
            if not (claim.get("status") or {}).get("providerID"):
                delay, step, hangs = t.launch_seconds, self._launch, self.launch_hangs
            elif not condition_true(claim, "Registered"):
                delay, step, hangs = t.register_seconds, self._register, self.registration_hangs
            elif not condition_true(claim, "Initialized"):
                delay, step, hangs = t.initialize_seconds, self._initialize, False
            else:
                return
            remaining = self._liveness(claim)
            if remaining is not None and (hangs or remaining <= delay):
                await asyncio.sleep(max(0.0, min(remaining, delay)))
                if (claim := self._current(name, uid)) is None:
                    return
                if (remaining := self._liveness(claim)) is not None and remaining <= 0:
                    self._timeout(claim)
                    return
                continue
            await asyncio.sleep(delay)
            if (claim := self._current(name, uid)) is None:
                return
            try:
                if not step(claim):
                    return
            except ApiError as e:
                log.warning(
                    "%s: %s failed, retrying: %s", _describe(claim), step.__name__[1:], e.message
                )
                await asyncio.sleep(max(delay, 0.05))

    def _liveness(self, claim: Obj) -> float | None:
        """``Liveness.Reconcile``: seconds until the NodeClaim times out (<= 0: it has),
        None once Registered. Not Launched: ``launch_timeout_seconds`` after Launched's
        ``lastTransitionTime``; then ``registration_timeout_seconds`` after Registered's
        (both set at creation, so in effect from creation; second precision)."""
        conditions = {c.get("type"): c for c in (claim.get("status") or {}).get("conditions") or ()}
        registered = conditions.get("Registered")
        if registered is not None and registered.get("status") == "True":
            return None
        now, t = self._now(), self._timings
        left: list[float] = []
        launched = conditions.get("Launched")
        if launched is not None and launched.get("status") != "True":
            left.append(t.launch_timeout_seconds - _since(launched, now))
        if registered is not None:
            left.append(t.registration_timeout_seconds - _since(registered, now))
        return min(left) if left else None

    def _timeout(self, claim: Obj) -> None:
        """``deleteNodeClaimForTimeout``: delete the NodeClaim (no event, a log line)."""
        reason = (
            "launch_timeout" if not condition_true(claim, "Launched") else ("registration_timeout")
        )
        log.info("%s: terminating due to timeout (%s)", _describe(claim), reason)
        try:
            self._store.delete(NODECLAIMS, None, claim["metadata"]["name"])
        except NotFound:
            return

    def _set_status(self, claim: Obj, changes: Mapping[str, Any], *conditions: str) -> None:
        """Update the NodeClaim's status with ``changes``, set ``conditions`` True, and
        recompute Ready."""
        stamp, generation = rfc3339(self._now()), int(claim["metadata"].get("generation", 1))

        def apply(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status.update(changes)
            conds = status.setdefault("conditions", [])
            for type_ in conditions:
                set_condition(conds, type_, "True", type_, "", stamp, generation)
            _recompute_ready(conds, NODECLAIM_CONDITIONS, stamp, generation)

        self._store.mutate(NODECLAIMS, None, claim["metadata"]["name"], apply, subresource="status")

    def _launch(self, claim: Obj) -> bool:
        """Cloud provider Create: the cheapest instance type the requirements allow with an
        available offering (zone, capacity type not in the unavailable-offerings cache), in
        a random such zone; then ``PopulateNodeClaimDetails`` (labels: the instance's,
        then single-valued requirements, then the NodeClaim's own; provider ID, image,
        capacity, allocatable).

        An offering in ``no_capacity`` fails as EC2 CreateFleet's
        ``InsufficientInstanceCapacity`` does: it is marked unavailable
        (``pkg/providers/instance`` ``updateUnavailableOfferingsCache``) and the fleet
        falls back to the next offering. No offering left: ``InsufficientCapacityError``;
        ``lifecycle/launch.go`` then publishes a Warning event of that reason and deletes
        the NodeClaim."""
        name = claim["metadata"]["name"]
        reqs = from_node_selector((claim.get("spec") or {}).get("requirements") or ())
        options = sorted(
            (it for it in self._catalog if it.requirements().intersects(reqs) is None),
            key=lambda it: (it.price, it.name),
        )
        zones = [z for z in ZONES if reqs.get_or_exists("topology.kubernetes.io/zone").has(z)]
        capacity = [
            c for c in CAPACITY_TYPES if reqs.get_or_exists("karpenter.sh/capacity-type").has(c)
        ]
        unavailable = self.unavailable.current()
        chosen: tuple[InstanceType, str, str] | None = None
        failed: list[str] = []
        for candidate in options if capacity else ():
            open_zones = [
                z for z in zones if any((candidate.name, z, c) not in unavailable for c in capacity)
            ]
            while open_zones and chosen is None:
                z = self._rng.choice(open_zones)
                ct = next(c for c in capacity if (candidate.name, z, c) not in unavailable)
                if (candidate.name, z) in self.no_capacity:
                    self.unavailable.mark(candidate.name, z, ct)
                    failed.append(f"{candidate.name} in {z}")
                    open_zones.remove(z)
                else:
                    chosen = (candidate, z, ct)
            if chosen is not None:
                break
        if chosen is None:
            log.warning("%s: launch failed, insufficient capacity; deleting it", _describe(claim))
            detail = (
                "with fleet error(s), InsufficientInstanceCapacity: no capacity for "
                + ", ".join(failed)
                if failed
                else "all requested instance types were unavailable during launch"
            )
            if self._on_event is not None:
                self._on_event(
                    claim,
                    "Warning",
                    "InsufficientCapacityError",
                    f"NodeClaim {name} event: creating instance, insufficient capacity, {detail}",
                )
            self._store.delete(NODECLAIMS, None, name)
            return False
        it, zone, capacity_type = chosen
        labels = {
            **it.labels(),
            "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": capacity_type,
            **reqs.labels(),
            **(claim["metadata"].get("labels") or {}),
        }
        self._store.mutate(NODECLAIMS, None, name, lambda o: o["metadata"].update(labels=labels))
        provider_id = f"aws:///{zone}/i-{self._rng.getrandbits(68):017x}"
        self._set_status(
            claim,
            {
                "providerID": provider_id,
                "imageID": _ami(bool(it.gpu_count)),
                "capacity": format_resources(it.capacity()),
                "allocatable": format_resources(it.allocatable()),
            },
            "Launched",
        )
        log.info(
            "launched nodeclaim %s (nodepool %s, %s) in %s: %s",
            name,
            labels.get(NODEPOOL_LABEL, ""),
            it.name,
            zone,
            provider_id,
        )
        return True

    def _node_for(self, claim: Obj) -> Obj | None:
        """The Node with the NodeClaim's provider ID, if any."""
        provider_id = (claim.get("status") or {}).get("providerID")
        nodes = self._store.list(NODES, copy_objects=False)[0]
        return next(
            (
                n
                for n in nodes
                if provider_id and (n.get("spec") or {}).get("providerID") == provider_id
            ),
            None,
        )

    def _register(self, claim: Obj) -> bool:
        """The kubelet joins (`node_object`, named ``ip-10-x-y-z.ec2.internal``); then
        NodeClaim ``status.nodeName`` and Registered True."""
        node = self._node_for(claim)
        if node is None:
            octets = [self._rng.randrange(1, 255) for _ in range(3)]
            name = "ip-10-{}-{}-{}.ec2.internal".format(*octets)
            if self._node_exists(name):  # ~1 in 16 million; retried on the next attempt
                raise AlreadyExists(f'nodes "{name}" already exists')
            node = node_object(claim, name, "10.{}.{}.{}".format(*octets), self._now())
            created = self._store.create(NODES, node)
            if created.get("status") != node["status"]:  # an apiserver may drop status on create
                self._store.mutate(
                    NODES, None, name, _setter("status", node["status"]), subresource="status"
                )
            try:
                self._store.create(PODS, device_plugin_pod(node, self._now()))
            except NotFound:  # a bare store without kube-system: no DaemonSets either
                log.debug("no namespace %s: node %s runs no DaemonSet pod", SYSTEM_NAMESPACE, name)
        self._set_status(claim, {"nodeName": node["metadata"]["name"]}, "Registered")
        log.info("registered %s as node %s", _describe(claim), node["metadata"]["name"])
        return True

    def _node_exists(self, name: str) -> bool:
        try:
            self._store.get(NODES, None, name)
        except NotFound:
            return False
        return True

    def _initialize(self, claim: Obj) -> bool:
        """The GPU agent and GFD come up: the Node gains its extended resources, the GFD
        labels and ``karpenter.sh/initialized``, loses its startup taints and turns Ready
        (``initialization.go`` waits for exactly that); then Initialized and Ready True.

        Which agent, and what it advertises, is `sim.deviceplugins`' call from the node's
        labels (e.g. from the NodePool template) and instance type: ``nvidia.com/gpu``
        one per GPU (NVIDIA's device plugin) or GPUs x 10 (HAMi's); nothing on a DRA node,
        whose GPUs are published as a ResourceSlice; ``nvidia.com/mig-<profile>`` (and the
        MIG labels of `sim.deviceplugins.mig_labels`) on a MIG node; ``aliyun.com/*`` on
        a gpushare node; ``volcano.sh/vgpu-*`` on a Volcano vGPU node. On the last four a
        NodeClaim that asked for ``nvidia.com/gpu`` stays Initialized
        Unknown/``ResourceNotRegistered``, as with real Karpenter. The NodeClaim keeps the
        instance type's estimate (one ``nvidia.com/gpu`` per GPU), as Karpenter's launch
        computes it."""
        spec, status = claim.get("spec") or {}, claim.get("status") or {}
        node_name = str(status.get("nodeName", ""))
        if not self._node_exists(node_name):
            log.warning("%s: node %s is gone, not initializing", _describe(claim), node_name)
            return False
        instance_type = (claim["metadata"].get("labels") or {}).get(
            "node.kubernetes.io/instance-type", ""
        )
        it = next((i for i in self._catalog if i.name == instance_type), None)
        gfd = it.gfd_labels() if it is not None else {}
        startup = [(t.get("key"), t.get("effect")) for t in spec.get("startupTaints") or ()]
        stamp = rfc3339(self._now())

        unregistered = self.unregistered_resources

        def node_meta(node: dict[str, Any]) -> None:
            labels = {**node["metadata"].get("labels", {}), **gfd}
            if it is not None:
                labels.update(deviceplugins.mig_labels(labels, it))
            node["metadata"]["labels"] = labels
            spec = node.setdefault("spec", {})
            spec["taints"] = [
                t
                for t in spec.get("taints") or ()
                if (t.get("key"), t.get("effect")) not in startup
            ]

        def node_status(node: dict[str, Any]) -> None:
            st = node.setdefault("status", {})
            labels = node["metadata"].get("labels") or {}
            for name, count in _advertised(labels, it, status).items():
                if name not in unregistered:
                    for key in ("capacity", "allocatable"):
                        st.setdefault(key, {})[name] = count
            if not _ready(node):
                others = [c for c in st.get("conditions") or () if c.get("type") != "Ready"]
                st["conditions"] = [*others, _ready_condition(True, stamp)]

        # Labels first: the device plugin that node_status plays depends on them.
        node = self._store.get(NODES, None, node_name)
        candidate = copy.deepcopy(node)
        node_meta(candidate)
        node_status(candidate)
        if candidate != node:  # a retry (ResourceNotRegistered) writes only what changed
            self._store.mutate(NODES, None, node_name, node_meta)
            node = self._store.mutate(NODES, None, node_name, node_status, subresource="status")
        if (missing := _unregistered(node, claim)) is not None:
            self._set_initialized_unknown(
                claim,
                "ResourceNotRegistered",
                f'Resource "{missing}" was requested but not registered',
            )
            log.info("%s: resource %s not registered", _describe(claim), missing)
            return True  # re-checked after initialize_seconds, as on each Node change
        self._store.mutate(
            NODES,
            None,
            node_name,
            lambda n: (
                n["metadata"].setdefault("labels", {}).update({"karpenter.sh/initialized": "true"})
            ),
        )
        self._set_status(claim, {}, "Initialized")
        log.info("%s is ready: node %s", _describe(claim), node_name)
        return True

    def _set_initialized_unknown(self, claim: Obj, reason: str, message: str) -> None:
        """Initialized Unknown with ``reason`` (v1 ``SetUnknownWithReason``), written only
        when it changes."""
        stamp, generation = rfc3339(self._now()), int(claim["metadata"].get("generation", 1))
        conds = [dict(c) for c in (claim.get("status") or {}).get("conditions") or ()]
        if not set_condition(conds, "Initialized", "Unknown", reason, message, stamp, generation):
            return

        def apply(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status["conditions"] = conds
            _recompute_ready(conds, NODECLAIM_CONDITIONS, stamp, generation)

        self._store.mutate(NODECLAIMS, None, claim["metadata"]["name"], apply, subresource="status")

    def _terminate(self, claim: Obj) -> None:
        """Termination: delete the NodeClaim's Node, then remove its finalizer."""
        node = self._node_for(claim)
        finalizers = [
            f for f in claim["metadata"].get("finalizers") or () if f != TERMINATION_FINALIZER
        ]
        try:
            if node is not None and not node["metadata"].get("deletionTimestamp"):
                self._store.delete(NODES, None, node["metadata"]["name"])
            self._store.mutate(
                NODECLAIMS,
                None,
                claim["metadata"]["name"],
                _setter("metadata.finalizers", finalizers),
            )
        except NotFound:
            return
        except ApiError as e:  # retried on the next pass
            log.warning("terminating %s failed: %s", _describe(claim), e.message)
            return
        log.info(
            "deleted %s%s",
            _describe(claim),
            f" and node {node['metadata']['name']}" if node else "",
        )


def _ready(node: Obj) -> bool:
    """Whether the node's kubelet ``Ready`` condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
    )


def _advertised(
    labels: Mapping[str, str], it: InstanceType | None, claim_status: Obj
) -> dict[str, str]:
    """The extended resources the node's GPU agent registers (`sim.deviceplugins.advertised`);
    for an instance type missing from the catalog, the NodeClaim's ``nvidia.com/gpu``
    estimate where a device plugin serving ``nvidia.com/gpu`` runs."""
    if it is not None:
        return deviceplugins.advertised(labels, it)
    estimate = (claim_status.get("allocatable") or {}).get("nvidia.com/gpu")
    if estimate is None or deviceplugins.plugin(labels) not in ("hami", "nvidia"):
        return {}
    return {"nvidia.com/gpu": str(estimate)}


def _unregistered(node: Obj, claim: Obj) -> str | None:
    """``RequestedResourcesRegistered``: the first resource the NodeClaim requests (non
    zero) that the node's allocatable lacks or has at zero, else None."""
    requests = parse_resources(((claim.get("spec") or {}).get("resources") or {}).get("requests"))
    allocatable = parse_resources((node.get("status") or {}).get("allocatable"))
    return next(
        (k for k, v in sorted(requests.items()) if v and not allocatable.get(k)),
        None,
    )


def _since(condition: Obj, now: datetime) -> float:
    """Seconds since the condition's ``lastTransitionTime`` (0 if it has none)."""
    stamp = condition.get("lastTransitionTime")
    if not stamp:
        return 0.0
    return (now - datetime.fromisoformat(str(stamp))).total_seconds()


def _setter(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit for `Store.mutate` that sets the dotted ``path`` to ``value``."""
    *parents, leaf = path.split(".")

    def edit(obj: dict[str, Any]) -> None:
        for key in parents:
            obj = obj.setdefault(key, {})
        obj[leaf] = value

    return edit
