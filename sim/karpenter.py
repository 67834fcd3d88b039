"""Karpenter's provisioner, simulated against the sim's object store.

`solve` is a purely computational function (Karpenter's ``Scheduler.Solve``,
kubernetes-sigs/karpenter ``pkg/controllers/provisioning/scheduling/scheduler.go``); the
side effects (NodeClaims, events, logs) happen in `KarpenterSim`, whose loop is the
provisioner's (``provisioning/provisioner.go``, ``batcher.go``, ``controller.go``). The
NodeClaim lifecycle, NodePool status and the cluster-state view live in
`sim.nodeclaims`.

Pod error messages follow current Karpenter (v1.4+, checked against v1.8), whose
structured ``serrors`` keep the NodePool name and the taint out of the text:
``no instance type has enough resources, requirements=..., resources=...``, ``did not
tolerate taint``, ``all available instance types exceed limits for nodepool``, joined by
"; " across NodePools. ``legacy_messages=True`` gives the v1.0-v1.3 wording instead:
``incompatible with nodepool "gpu", daemonset overhead={"pods":"0"}, <reason>``, ``did not
tolerate <key>=<value>:<effect>``, ``... exceed limits for nodepool: "gpu"``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from intent.quantity import parse_quantity
from sim import dra
from sim import nodeclaims as lifecycle
from sim.affinity import anti_affinity_conflict, required_anti_affinity
from sim.catalog import (
    CAPACITY_TYPES,
    CATALOG,
    ZONES,
    InstanceType,
    format_resources,
    offering_requirements,
)
from sim.disruption import Emptiness
from sim.events import EventRecorder
from sim.nodeclaims import ExistingNode, KarpenterTimings, Lifecycle
from sim.podview import PodView
from sim.requirements import (
    NODEPOOL_LABEL,
    WELL_KNOWN_LABELS,
    Requirement,
    Requirements,
    from_labels,
    nodepool_labels,
    nodepool_requirements,
    pod_requirements,
    preferred_terms,
    required_terms,
    validate_pod,
)
from sim.scheduling import pod_requests, tolerates
from sim.store import NAMESPACES, NODECLAIMS, NODEPOOLS, NODES, PODS, ApiError, Store

__all__ = [
    "Batcher",
    "KarpenterSim",
    "KarpenterTimings",
    "NewNodeClaim",
    "Results",
    "Snapshot",
    "fits",
    "is_provisionable",
    "solve",
]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
_ZERO: Final = Decimal(0)
#: ``RequestsForPods()`` of no DaemonSet pods, as Karpenter prints the overhead.
_DAEMON_OVERHEAD: Final = '{"pods":"0"}'
_PREFER_NO_SCHEDULE: Final = {"operator": "Exists", "effect": "PreferNoSchedule"}


def is_provisionable(pod: Obj) -> bool:
    """``IsProvisionable`` (``pkg/utils/pod/scheduling.go``): condition PodScheduled with
    reason Unschedulable (status not read), no ``spec.nodeName``, no
    ``status.nominatedNodeName``, not owned by a ``apps/v1`` DaemonSet or a ``v1`` Node.
    Terminal and terminating pods are not excluded; scheduler name and priority not read."""
    status = pod.get("status") or {}
    if not any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or ()
    ):
        return False
    if (pod.get("spec") or {}).get("nodeName") or status.get("nominatedNodeName"):
        return False
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return not any(
        (o.get("apiVersion"), o.get("kind")) in (("apps/v1", "DaemonSet"), ("v1", "Node"))
        for o in owners
    )


@functools.cache
def _allocatable(it: InstanceType) -> dict[str, Decimal]:
    return it.allocatable()


@functools.cache
def _capacity(it: InstanceType) -> dict[str, Decimal]:
    return it.capacity()


def fits(requests: Mapping[str, Decimal], allocatable: Mapping[str, Decimal]) -> bool:
    """``resources.Fits``: every request within allocatable, a resource it does not list
    counting as 0 (so ``nvidia.com/gpumem`` never fits); any negative allocatable fails."""
    if any(v < 0 for v in allocatable.values()):
        return False
    return all(q <= allocatable.get(k, _ZERO) for k, q in requests.items())


@functools.cache
def _offering_keys() -> tuple[tuple[str, str], ...]:
    """(zone, capacity type) of each of `offering_requirements`, in its order."""
    return tuple((z, c) for z in ZONES for c in CAPACITY_TYPES)


def _merge(*lists: Mapping[str, Decimal]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for resources in lists:
        for k, v in resources.items():
            out[k] = out.get(k, _ZERO) + v
    return out


def _concise(resources: Mapping[str, Decimal]) -> str:
    """``resources.String``: the resource list as compact JSON, keys sorted."""
    return json.dumps(format_resources(resources), separators=(",", ":"))


def _untolerated(
    taints: Sequence[Obj], tolerations: Sequence[Obj], legacy: bool = False
) -> str | None:
    """``Taints.Tolerates``: every taint, whatever its effect, must be tolerated."""
    errors = [
        f"did not tolerate {t.get('key', '')}={t.get('value', '')}:{t.get('effect', '')}"
        if legacy
        else "did not tolerate taint"
        for t in taints
        if not any(tolerates(tol, t) for tol in tolerations)
    ]
    return "; ".join(errors) or None


def _filter_instance_types(
    options: Sequence[InstanceType],
    reqs: Requirements,
    requests: Mapping[str, Decimal],
    total: Mapping[str, Decimal],
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
) -> tuple[list[InstanceType], str | None]:
    """``filterInstanceTypesByRequirements`` and ``InstanceTypeFilterError``'s wording
    (``scheduling/nodeclaim.go``): the options meeting ``reqs``, fitting ``total`` and
    having an available offering compatible with ``reqs`` (``Offerings.Available()
    .HasCompatible``), or the reason none does. ``unavailable`` holds the (instance type,
    zone, capacity type) offerings the unavailable-offerings cache has marked."""
    remaining: list[InstanceType] = []
    met = fit = offer = met_fit = met_offer = fit_offer = False
    compatible = [
        (zone, capacity_type)
        for (zone, capacity_type), o in zip(_offering_keys(), offering_requirements(), strict=True)
        if reqs.compatible(o, WELL_KNOWN_LABELS) is None
    ]
    # Every type has the same offerings (zones x capacity types) but for those marked
    # unavailable, so without any this is per call.
    any_offering = bool(compatible)
    for it in options:
        has_offering = any_offering and (
            not unavailable or any((it.name, z, c) not in unavailable for z, c in compatible)
        )
        compat = it.requirements().intersects(reqs) is None
        it_fits = fits(total, _allocatable(it))
        met, fit, offer = met or compat, fit or it_fits, offer or has_offering
        met_fit = met_fit or (compat and it_fits and not has_offering)
        met_offer = met_offer or (compat and has_offering and not it_fits)
        fit_offer = fit_offer or (it_fits and has_offering and not compat)
        if compat and it_fits and has_offering:
            remaining.append(it)
    if remaining:
        return remaining, None
    if not (met or fit or offer):
        what = "met the scheduling requirements or had enough resources or had a required offering"
    elif not (met or fit):
        what = "met the scheduling requirements or had enough resources"
    elif not (met or offer):
        what = "met the scheduling requirements or had a required offering"
    elif not (fit or offer):
        what = "had enough resources or had a required offering"
    elif not met:
        what = "met all requirements"
    elif not fit:
        what = "has enough resources"
    elif not offer:
        what = "has the required offering"
    elif met_fit:
        what = "which met the scheduling requirements and had enough resources, had a required offering"
    elif fit_offer:
        what = (
            "which had enough resources and the required offering met the scheduling requirements"
        )
    elif met_offer:
        what = "which met the scheduling requirements and the required offering had the required resources"
    else:
        what = "met the requirements/resources/offering tuple"
    message = f"no instance type {what}, requirements={reqs}, resources={_concise(_merge({'pods': _ZERO}, requests))}"
    if not fit and requests.get("cpu", _ZERO) >= 1_000_000:
        message += " (CPU request >= 1 Million, m vs M typo?)"
    return [], message


@dataclass(frozen=True)
class Snapshot:
    """What one provisioning pass decides from: ``pods`` pending (provisionable and
    valid), ``nodepools`` Ready and not deleting, ``existing`` capacity (Nodes and
    in-flight NodeClaims, taken before the pods, as ``Provisioner.Schedule`` does), and
    whether errors use the v1.0-v1.3 wording (see the module docstring), and the labels
    of each namespace (for pod anti-affinity ``namespaceSelector`` terms, `sim.affinity`),
    and the offerings marked unavailable after insufficient capacity."""

    pods: Sequence[Obj]
    nodepools: Sequence[Obj]
    existing: Sequence[ExistingNode] = ()
    catalog: Sequence[InstanceType] = CATALOG
    legacy_messages: bool = False
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Offerings (instance type, zone, capacity type) the unavailable-offerings cache holds.
    unavailable: frozenset[tuple[str, str, str]] = frozenset()


@dataclass
class NewNodeClaim:
    """A NodeClaim the solve wants: its pool, the requirements it accumulated, the
    instance types still fitting all its ``pods`` (cheapest first) and summed requests."""

    nodepool: str
    requirements: Requirements
    instance_types: list[InstanceType]
    requests: dict[str, Decimal]
    pods: list[Obj] = field(default_factory=list)
    taints: Sequence[Obj] = ()
    #: The most of each resource any of ``instance_types`` allocates (`_may_fit`); None
    #: until read, and again whenever ``instance_types`` changes.
    ceiling: dict[str, Decimal] | None = None
    #: How many of ``pods`` have required hostname anti-affinity: with none there and none
    #: on the incoming pod, no anti-affinity check is needed.
    repelling: int = 0


def _may_fit(claim: NewNodeClaim, requests: Mapping[str, Decimal]) -> bool:
    """False when no instance type of ``claim`` can hold its pods and ``requests``: some
    resource would exceed the most any of them allocates. A necessary condition for the
    `fits` test `_Solver._add` makes per instance type, so the verdict is the same; it
    spares that test on the hundreds of full NodeClaims of a large solve."""
    if claim.ceiling is None:
        ceiling: dict[str, Decimal] = {}
        for it in claim.instance_types:
            for k, v in _allocatable(it).items():
                if v > ceiling.get(k, _ZERO):
                    ceiling[k] = v
        claim.ceiling = ceiling
    ceiling = claim.ceiling
    have = claim.requests
    return all(have.get(k, _ZERO) + q <= ceiling.get(k, _ZERO) for k, q in requests.items() if q > 0)


@dataclass
class Results:
    """``scheduling.Results``: ``new_nodeclaims`` to create, pods placed on ``existing``
    capacity (by `ExistingNode`), and why the others fit nowhere (pod ``ns/name`` ->
    message without the ``Failed to schedule pod,`` prefix)."""

    new_nodeclaims: list[NewNodeClaim]
    existing: list[tuple[ExistingNode, list[Obj]]]
    errors: dict[str, str]


def _pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _pod_order(item: tuple[Obj, dict[str, Decimal]]) -> tuple[Decimal, Decimal, str, str]:
    """``byCPUAndMemoryDescending`` (``scheduling/queue.go``): cpu, memory descending,
    then creation time and uid ascending."""
    pod, requests = item
    meta = pod.get("metadata") or {}
    return (
        -requests.get("cpu", _ZERO),
        -requests.get("memory", _ZERO),
        str(meta.get("creationTimestamp", "")),
        str(meta.get("uid", "")),
    )


@dataclass
class _Template:
    name: str
    requirements: Requirements
    taints: list[Obj]
    options: list[InstanceType]


@dataclass
class _Existing:
    node: ExistingNode
    requirements: Requirements
    remaining: dict[str, Decimal]
    pods: list[Obj] = field(default_factory=list)


class _Solver:
    """One ``Scheduler``: templates by weight, existing capacity, NodeClaims in the making."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.legacy = snapshot.legacy_messages
        self.unavailable = snapshot.unavailable
        self.namespace_labels = snapshot.namespace_labels
        self.templates: list[_Template] = []
        pools = sorted(
            snapshot.nodepools,
            key=lambda p: (-int((p.get("spec") or {}).get("weight") or 0), p["metadata"]["name"]),
        )
        self.remaining: dict[str, dict[str, Decimal]] = {}
        for pool in pools:
            name, spec = pool["metadata"]["name"], (pool.get("spec") or {})
            reqs = nodepool_requirements(pool)
            options, _ = _filter_instance_types(
                snapshot.catalog, reqs, {}, {}, snapshot.unavailable
            )
            if not options:  # NewScheduler drops pools whose requirements match no type
                log.debug(
                    "skipping nodepool %s: requirements filtered out all instance types", name
                )
                continue
            options.sort(key=lambda it: it.price)
            taints = list(((spec.get("template") or {}).get("spec") or {}).get("taints") or ())
            self.templates.append(_Template(name, reqs, taints, options))
            if spec.get("limits"):
                try:
                    self.remaining[name] = {
                        k: parse_quantity(v, f"nodepool {name} spec.limits[{k!r}]")
                        for k, v in spec["limits"].items()
                    }
                except ValueError as e:  # the CRD's pattern makes this unreachable in a cluster
                    log.warning("ignoring limits: %s", e)
        self.tolerate_prefer_no_schedule = any(
            t.get("effect") == "PreferNoSchedule" for p in self.templates for t in p.taints
        )
        for node in snapshot.existing:  # updateRemainingResources: subtract node capacity
            pool_limits = self.remaining.get(node.labels.get(NODEPOOL_LABEL, ""))
            if pool_limits is not None:
                for k in pool_limits:
                    pool_limits[k] -= node.capacity.get(k, _ZERO)
        existing = sorted(snapshot.existing, key=lambda n: (not n.initialized, n.name))
        self.existing = [
            _Existing(
                n, from_labels({**n.labels, "kubernetes.io/hostname": n.name}), dict(n.available)
            )
            for n in existing
        ]
        self.new: list[NewNodeClaim] = []
        self._tolerations: dict[tuple[int, str], bool] = {}
        #: (pod signature and relaxation step, id of a NodeClaim of ``new``) pairs where
        #: the claim refused such a pod. Adding pods to a claim only narrows what it can
        #: take (more requests, fewer instance types, tighter requirements, more
        #: anti-affinity), so a refusal holds for the rest of the solve.
        self._refused: set[tuple[str, int]] = set()

    def schedule(self, pod: Obj, requests: dict[str, Decimal], signature: str = "") -> str | None:
        """``trySchedule``: add the pod, relaxing preferences after each failure.
        ``signature``: `_solver_signature` of the pod, to skip the in-flight NodeClaims
        that refused an identical pod (empty: no skipping)."""
        skip_required = skip_preferred = 0
        tolerations = list((pod.get("spec") or {}).get("tolerations") or ())
        n_required, n_preferred = len(required_terms(pod)), len(preferred_terms(pod))
        while True:
            reqs = pod_requirements(pod, skip_required=skip_required, skip_preferred=skip_preferred)
            step = f"{skip_required}/{skip_preferred}/{len(tolerations)}/"
            key = step + signature if signature else ""
            error = self._add(pod, requests, reqs, tolerations, key)
            if error is None:
                return None
            if skip_required < n_required - 1:
                skip_required += 1
            elif skip_preferred < n_preferred:
                skip_preferred += 1
            elif self.tolerate_prefer_no_schedule and _PREFER_NO_SCHEDULE not in tolerations:
                tolerations.append(_PREFER_NO_SCHEDULE)
            else:
                return error

    def _add(
        self,
        pod: Obj,
        requests: dict[str, Decimal],
        reqs: Requirements,
        tolerations: list[Obj],
        key: str = "",
    ) -> str | None:
        """``Scheduler.add``: the first existing node, else in-flight NodeClaim, else new
        NodeClaim that takes the pod; the error when none does. ``key`` names the pod's
        signature and relaxation step for `_refused` (empty: not remembered)."""
        tolerations_key = repr(tolerations)
        for ex in self.existing:  # addToExistingNode: first that fits (ExistingNode.CanAdd)
            if (
                fits(requests, ex.remaining)  # first: the cheapest test, and most often false
                and ex.requirements.can_meet(reqs)  # = compatible(reqs) is None
                and self._tolerated(ex, tolerations, tolerations_key)
                and anti_affinity_conflict(pod, (*ex.node.pods, *ex.pods), self.namespace_labels)
                is None
            ):
                ex.pods.append(pod)
                # ExistingNode.Add: resources.Subtract, over the node's resources only.
                ex.remaining = lifecycle.subtract(ex.remaining, requests)
                ex.requirements = ex.requirements.add(reqs)
                return None
        self.new.sort(key=lambda n: len(n.pods))  # addToInflightNode: fewest pods first
        repels = bool(required_anti_affinity(pod))
        for claim in self.new:
            if key and (key, id(claim)) in self._refused:
                continue
            if not self._in_flight_may_take(claim, pod, requests, repels):
                if key:
                    self._refused.add((key, id(claim)))
                continue
            added = self._can_add(
                claim.taints,
                claim.requirements,
                claim.requests,
                claim.instance_types,
                requests,
                reqs,
                tolerations,
                explain=False,  # in-flight failures are never reported
            )
            if not isinstance(added, str):
                claim.requirements, claim.instance_types = added
                claim.ceiling = None
                claim.requests = _merge(claim.requests, requests)
                claim.pods.append(pod)
                claim.repelling += repels
                return None
            if key:
                self._refused.add((key, id(claim)))
        if not self.templates:
            return "nodepool requirements filtered out all available instance types"
        errors = []
        for t in self.templates:  # addToNewNodeClaim, by weight
            options = t.options
            limits = self.remaining.get(t.name)
            if limits is not None:
                options = [
                    it
                    for it in options
                    if all(_capacity(it).get(k, _ZERO) <= v for k, v in limits.items())
                ]
                if not options:
                    errors.append(
                        f'all available instance types exceed limits for nodepool: "{t.name}"'
                        if self.legacy
                        else "all available instance types exceed limits for nodepool"
                    )
                    continue
            added = self._can_add(
                t.taints, t.requirements, {"pods": _ZERO}, options, requests, reqs, tolerations
            )
            if isinstance(added, str):
                if self.legacy:
                    added = f'incompatible with nodepool "{t.name}", daemonset overhead={_DAEMON_OVERHEAD}, {added}'
                errors.append(added)
                continue
            claim_reqs, its = added
            self.new.append(
                NewNodeClaim(
                    t.name,
                    claim_reqs,
                    its,
                    _merge({"pods": _ZERO}, requests),
                    [pod],
                    t.taints,
                    repelling=int(repels),
                )
            )
            if limits is not None:  # subtractMax: assume the biggest option launches
                for k in limits:
                    limits[k] -= max(_capacity(it).get(k, _ZERO) for it in its)
            return None
        return "; ".join(errors)

    def _in_flight_may_take(
        self, claim: NewNodeClaim, pod: Obj, requests: Mapping[str, Decimal], repels: bool
    ) -> bool:
        """The cheap tests before ``CanAdd`` on a NodeClaim of this solve: room on some
        instance type, and no hostname anti-affinity conflict (in-flight failures are
        never reported, so no reason is kept)."""
        if not _may_fit(claim, requests):
            return False  # full: no instance type of it has room
        total = _merge(claim.requests, requests)
        if not any(fits(total, _allocatable(it)) for it in claim.instance_types):
            return False
        return not (
            (repels or claim.repelling)
            and anti_affinity_conflict(pod, claim.pods, self.namespace_labels) is not None
        )  # Topology.AddRequirements: this hostname domain is taken

    def _tolerated(self, ex: _Existing, tolerations: list[Obj], tolerations_key: str) -> bool:
        """``_untolerated(ex.node.taints, tolerations) is None``, remembered per node and
        tolerations (``tolerations_key``: their repr) for the solve (nodes' taints do not
        change within it)."""
        key = (id(ex), tolerations_key)
        verdict = self._tolerations.get(key)
        if verdict is None:
            verdict = self._tolerations[key] = _untolerated(ex.node.taints, tolerations) is None
        return verdict

    def _can_add(
        self,
        taints: Sequence[Obj],
        claim_reqs: Requirements,
        claim_requests: Mapping[str, Decimal],
        options: Sequence[InstanceType],
        requests: Mapping[str, Decimal],
        reqs: Requirements,
        tolerations: list[Obj],
        *,
        explain: bool = True,
    ) -> tuple[Requirements, list[InstanceType]] | str:
        """``NodeClaim.CanAdd``: taints (``taints``, not ``startupTaints``), requirements,
        then the instance types that fit everything. ``explain`` False: a failed
        requirements check returns a bare reason (the caller discards it) instead of
        composing Karpenter's."""
        if error := _untolerated(taints, tolerations, self.legacy):
            return error
        if not explain and not claim_reqs.can_meet(reqs, WELL_KNOWN_LABELS):
            return "incompatible requirements"
        if error := claim_reqs.compatible(reqs, WELL_KNOWN_LABELS):
            return f"incompatible requirements, {error}"
        merged = claim_reqs.add(reqs)
        remaining, error = _filter_instance_types(
            options, merged, requests, _merge(claim_requests, requests), self.unavailable
        )
        return error if error is not None else (merged, remaining)


def solve(snapshot: Snapshot) -> Results:
    """Decide where the snapshot's pending pods go (``Scheduler.Solve``), purely.

    Pods are taken in ``byCPUAndMemoryDescending`` order; each goes to the first existing
    Node or in-flight NodeClaim (initialized first, then by name) it tolerates, matches and
    fits (allocatable minus bound pods and pods placed earlier in this solve), else to a
    NodeClaim being built in this solve (fewest pods first; its instance types narrow to
    those still fitting all its pods), else to a new NodeClaim from the first NodePool (by
    weight desc, name) it tolerates and is compatible with, that some instance type fits
    and whose ``spec.limits`` leave room. Failing that, after preference relaxation, the
    pod gets the error Karpenter would report. A pod with DRA requirements
    (`sim.dra.has_dra_requirements`) is not scheduled at all: it gets
    `sim.dra.KARPENTER_DRA_ERROR` (kubernetes-sigs/karpenter#2384).
    """
    solver = _Solver(snapshot)
    errors: dict[str, str] = {}
    queue = []
    for pod in snapshot.pods:
        if dra.has_dra_requirements(pod):
            # kubernetes-sigs/karpenter#2384: Scheduler.add returns a DRAError first (with
            # the default IgnoreDRARequests), never relaxed; such a pod gets no capacity.
            errors[_pod_key(pod)] = dra.KARPENTER_DRA_ERROR
            continue
        try:
            queue.append((pod, pod_requests(pod)))
        except ValueError as e:
            errors[_pod_key(pod)] = f"invalid resource requests, {e}"
    # A pod that fails changes nothing, so a pod that the solver reads identically to one
    # that just failed fails the same way until a pod is placed: the verdict is reused
    # (the sim's shortcut; Karpenter evaluates each pod, with the same result).
    failed: dict[str, str] = {}
    for pod, requests in sorted(queue, key=_pod_order):
        signature = _solver_signature(pod)
        error = failed.get(signature)
        if error is None:
            error = solver.schedule(pod, requests, signature)
            if error is None:
                failed.clear()
            else:
                failed[signature] = error
        if error is not None:
            errors[_pod_key(pod)] = error
    for claim in solver.new:
        claim.instance_types.sort(key=lambda it: it.price)
    placed = [(ex.node, ex.pods) for ex in solver.existing if ex.pods]
    return Results(solver.new, placed, errors)


def _solver_signature(pod: Obj) -> str:
    """Everything `solve` reads from a pod: its namespace and labels (anti-affinity), its
    containers' and init containers' resources (requests, DRA claims; an init container's
    ``restartPolicy`` makes it a sidecar), and `_SOLVER_SPEC_FIELDS`; not its name,
    status, annotations, volumes or anything else two replicas of a workload differ in
    (a ServiceAccount token volume has a random name per pod)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return json.dumps(
        [
            meta.get("namespace"),
            meta.get("labels"),
            [c.get("resources") for c in spec.get("containers") or ()],
            [[c.get("resources"), c.get("restartPolicy")] for c in spec.get("initContainers") or ()],
            [spec.get(k) for k in _SOLVER_SPEC_FIELDS],
        ],
        sort_keys=True,
        default=str,
    )


#: The pod spec fields `solve` reads besides containers: requests (``overhead``),
#: requirements (``nodeSelector``, ``affinity``), taints, DRA claims, topology.
_SOLVER_SPEC_FIELDS: Final = (
    "overhead",
    "nodeSelector",
    "affinity",
    "tolerations",
    "resourceClaims",
    "topologySpreadConstraints",
)


class Batcher:
    """``batcher.go``: the first trigger opens a window; it closes `idle` seconds after the
    last new key or `maximum` seconds after opening. A key already in the window does not
    extend it (``Trigger`` dedupes by pod UID). Times come from the caller's clock."""

    def __init__(self, idle: float, maximum: float) -> None:
        self.idle, self.maximum = idle, maximum
        self._keys: set[str] = set()
        self._opened: float | None = None
        self._last = 0.0

    def trigger(self, key: str, now: float) -> None:
        """Record ``key`` at ``now`` (seconds)."""
        if key in self._keys:
            return
        self._keys.add(key)
        if self._opened is None:
            self._opened = now
        self._last = now

    @property
    def deadline(self) -> float | None:
        """When the open window closes, or None when no window is open."""
        if self._opened is None:
            return None
        return min(self._last + self.idle, self._opened + self.maximum)

    def take(self, now: float) -> bool:
        """True, and the window reset, if a window closed by ``now``."""
        deadline = self.deadline
        if deadline is None or now < deadline:
            return False
        self._keys.clear()
        self._opened = None
        return True


def _instance_list(names: Sequence[str]) -> str:
    """``instanceTypeList``: the first five names, then "and N other(s)"."""
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} other(s)" if len(names) > 5 else "")


#: How often a pass looks whether a solve running in its thread has ended (seconds).
_SOLVE_POLL_SECONDS = 0.05


class KarpenterSim:
    """Karpenter, simulated: NodePool status, provisioning and the NodeClaim lifecycle.

    `run` loops until cancelled: each pass (`reconcile`) is synchronous and writes only
    when something is due. A provisionable pod triggers the batcher when first seen, when
    its resourceVersion changes and every ``requeue_seconds`` (``controller.go``); a
    closed batch window provisions (`solve`, then NodeClaims and events) unless some
    NodeClaim has no ``status.providerID`` yet (``Cluster.Synced``), in which case the
    batch is dropped and the pods' requeue brings it back.

    Args:
        store: the sim's object store, used in-process.
        catalog: instance types the simulated cloud offers.
        timings: batch windows, requeue and lifecycle delays (seconds).
        recorder: where Events go; a ``karpenter`` `EventRecorder` by default.
        clock: monotonic seconds for batching, requeue and event dedupe (inject in tests).
        rng: zones, node IPs and instance IDs.
        legacy_messages: FailedScheduling in Karpenter v1.0-v1.3 wording.
        solve_in_thread: run each solve in a thread (see ``_solver_thread``); off, a solve
            runs within the pass (tests see its NodeClaims when `reconcile` returns).
    """

    def __init__(
        self,
        store: Store,
        *,
        catalog: Sequence[InstanceType] = CATALOG,
        timings: KarpenterTimings = KarpenterTimings(),  # noqa: B008 - frozen dataclass
        recorder: EventRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        legacy_messages: bool = False,
        solve_in_thread: bool = False,
    ) -> None:
        self._store, self._catalog, self._timings = store, tuple(catalog), timings
        self._clock, self._legacy = clock, legacy_messages
        self._recorder = recorder or EventRecorder(store, "karpenter", monotonic=clock)
        self._batcher = Batcher(timings.batch_idle_seconds, timings.batch_max_seconds)
        self._requeue: dict[str, tuple[str, float]] = {}  # pod uid -> (resourceVersion, due)
        self._view = PodView(store)  # pods with no node: the only ones IsProvisionable takes
        self._dedupe: dict[tuple[str, str], float] = {}  # (reason, pod uid) -> expiry
        self._dedupe_swept = float("-inf")
        self._tokens, self._tokens_at = 10.0, clock()
        self._lifecycle = Lifecycle(
            store,
            self._catalog,
            timings,
            rng=rng or random.Random(),
            on_event=self._event,
            unavailable=lifecycle.UnavailableOfferings(
                timings.unavailable_offerings_ttl_seconds, clock
            ),
        )
        self._emptiness = Emptiness(store, timings, clock)
        #: ``solve_in_thread``: solves run in a thread of their own, as Karpenter runs in a
        #: process of its own, so that a solve of a thousand pods over a thousand nodes
        #: (seconds) does not stop the sim's API server answering meanwhile; the results
        #: are applied by the first pass after it ends (the cluster may have moved on, as
        #: it does under a real Karpenter's solve). One solve at a time, as the
        #: provisioner's singleton reconcile.
        self._solver_thread = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="karpenter-solve")
            if solve_in_thread
            else None
        )
        self._solving: (
            tuple[concurrent.futures.Future[Results], Sequence[Obj], Mapping[str, Obj]] | None
        ) = None
        #: Provisioning batches completed (`batches`), and the store's resourceVersion
        #: the last pass started at (it saw every write up to it): what a test waits on
        #: instead of sleeping.
        self.batches_done = 0
        self.seen_version = 0
        self._batch_done_event: asyncio.Event | None = None
        #: The pods (``namespace/name``) each NodeClaim was created for: what the real
        #: Karpenter tells in its Nominated events, kept whole for benchmarks and tests
        #: (the events are rate limited).
        self.created_for: dict[str, tuple[str, ...]] = {}

    @property
    def emptiness(self) -> Emptiness:
        """Emptiness consolidation; set its ``enabled`` to turn it on (off by default)."""
        return self._emptiness

    @property
    def lifecycle(self) -> Lifecycle:
        """The NodeClaim lifecycle, whose fault switches a test flips."""
        return self._lifecycle

    @property
    def no_capacity(self) -> set[tuple[str, str]]:
        """The simulated cloud's fault switch: (instance type, zone) pairs without
        capacity; launching there fails with insufficient capacity (`Lifecycle`)."""
        return self._lifecycle.no_capacity

    @property
    def unavailable_offerings(self) -> frozenset[tuple[str, str, str]]:
        """The offerings the unavailable-offerings cache holds now."""
        return self._lifecycle.unavailable.current()

    @property
    def quiet(self) -> bool:
        """Nothing on its way to a batch: no provisionable pod waiting to trigger again
        (``controller.go``'s requeue), no batch window open (``batcher.go``) and no solve
        in flight. Read once a pass saw the writes of interest (`seen_version`)."""
        return not self._requeue and self._batcher.deadline is None and self._solving is None

    async def batches(self, n: int = 1, *, within: float) -> None:
        """Wait until ``n`` more provisioning batches than now have completed: a window
        closed (``batcher.go``'s ``Wait`` returned) and ``Provisioner.Reconcile`` ran to
        its end, its solve applied (NodeClaims created, pods nominated, events told) or
        the batch dropped (cluster not synced, no pending pod, no NodePool). After one
        completes, anything it would have bought exists. Raises `TimeoutError` after
        ``within`` seconds."""
        target = self.batches_done + n
        async with asyncio.timeout(within):
            while self.batches_done < target:
                if self._batch_done_event is None:
                    self._batch_done_event = asyncio.Event()
                await self._batch_done_event.wait()

    def _batch_done(self) -> None:
        """Count a completed batch and wake `batches` (a pass runs in the event loop's
        thread, `Store.run_passes`, so setting the event from it is safe)."""
        self.batches_done += 1
        if self._batch_done_event is not None:
            self._batch_done_event.set()
            self._batch_done_event = None

    async def run(self) -> None:
        """Reconcile on every store change and timer until cancelled; a failed pass is
        logged and retried a second later."""
        try:
            await self._store.run_passes(self.reconcile, "karpenter")
        finally:
            self.close()

    def close(self) -> None:
        """Cancel the NodeClaim lifecycle tasks (`run` does so when cancelled)."""
        self._lifecycle.close()
        if self._solver_thread is not None:
            self._solver_thread.shutdown(wait=False, cancel_futures=True)

    def reconcile(self) -> float | None:
        """One pass; returns the seconds until timed work is due (None: none pending)."""
        self.seen_version = self._store.resource_version
        self._lifecycle.reconcile()
        now = self._clock()
        self._view.refresh()
        self._trigger(list(self._view.unbound.values()), now)
        solving = self._finish_solve()
        if not solving and self._batcher.take(now):
            self._provision()
            solving = self._solving is not None
            if not solving:  # solved within the pass, or dropped
                self._batch_done()
        due = [t for _, t in self._requeue.values()]
        if solving:
            due.append(now + _SOLVE_POLL_SECONDS)
        if (empty := self._emptiness.reconcile()) is not None:
            due.append(now + empty)
        if self._batcher.deadline is not None:
            due.append(self._batcher.deadline)
        return max(0.0, min(due) - now) if due else None

    def _trigger(self, pods: Sequence[Obj], now: float) -> None:
        """The pod controller's ``Trigger``: a provisionable pod starts or extends the
        batch when it is new or changed, and again every ``requeue_seconds`` while it
        stays provisionable (Karpenter's provisioning pod controller requeues it)."""
        seen = set()
        for pod in pods:
            uid, rv = pod["metadata"]["uid"], str(pod["metadata"].get("resourceVersion", ""))
            last = self._requeue.get(uid)
            if last is not None and last[0] == rv and now < last[1]:
                seen.add(uid)  # provisionable at this version already, and not due yet
                continue
            if not is_provisionable(pod):
                continue
            seen.add(uid)
            self._batcher.trigger(uid, now)
            self._requeue[uid] = (rv, now + self._timings.requeue_seconds)
        for uid in set(self._requeue) - seen:
            del self._requeue[uid]

    def _provision(self) -> None:
        """``Provisioner.Reconcile`` after a batch: capacity first, then pending pods."""
        nodes = self._store.list(NODES, copy_objects=False)[0]
        claims = self._store.list(NODECLAIMS, copy_objects=False)[0]
        if any(not (c.get("status") or {}).get("providerID") for c in claims):
            log.debug("waiting on cluster sync: a nodeclaim has no provider ID yet")
            return
        pods = self._store.list(PODS, copy_objects=False)[0]
        existing = lifecycle.existing_nodes(nodes, claims, pods)
        pending = []
        for pod in pods:
            if is_provisionable(pod):
                if (reason := validate_pod(pod)) is None:
                    pending.append(pod)
                else:
                    log.debug("ignoring pod %s, %s", _pod_key(pod), reason)
        if not pending:
            return
        pools = {
            p["metadata"]["name"]: p
            for p in self._store.list(NODEPOOLS, copy_objects=False)[0]
            if lifecycle.condition_true(p, "Ready") and not p["metadata"].get("deletionTimestamp")
        }
        if not pools:
            log.info("no nodepools found")
            return
        namespaces = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in self._store.list(NAMESPACES, copy_objects=False)[0]
        }
        snapshot = Snapshot(
            pending,
            list(pools.values()),
            existing,
            self._catalog,
            self._legacy,
            namespaces,
            self._lifecycle.unavailable.current(),
        )
        if self._solver_thread is None:
            self._apply(solve(snapshot), pending, pools)
        else:
            self._solving = (self._solver_thread.submit(solve, snapshot), pending, pools)

    def _finish_solve(self) -> bool:
        """With ``solve_in_thread``: apply a finished solve's results; True while one is
        still running."""
        if self._solving is None:
            return False
        future, pending, pools = self._solving
        if not future.done():
            return True
        self._solving = None
        try:
            self._apply(future.result(), pending, pools)
        finally:
            self._batch_done()  # a solve that failed ended its batch too
        return False

    def _apply(self, results: Results, pending: Sequence[Obj], pools: Mapping[str, Obj]) -> None:
        """Events, nominations and NodeClaims of a solve's ``results``."""
        by_key = {_pod_key(p): p for p in pending}
        for key, error in results.errors.items():
            if self._dedupe_ok("FailedScheduling", by_key[key], 300.0):
                if error == dra.KARPENTER_DRA_ERROR:  # Results.Record: Info, not Error
                    log.info("%s, pod %s", dra.KARPENTER_DRA_LOG, key)
                else:
                    log.info("could not schedule pod %s: %s", key, error)
                self._event(
                    by_key[key], "Warning", "FailedScheduling", f"Failed to schedule pod, {error}"
                )
        for node, placed in results.existing:
            for placed_pod in placed:
                self._nominate(placed_pod, node.nodeclaim, node.node)
        for claim in results.new_nodeclaims:
            name = self._create(claim, pools[claim.nodepool])
            if name:
                self.created_for[name] = tuple(_pod_key(p) for p in claim.pods)
            for placed_pod in claim.pods if name else ():
                self._nominate(placed_pod, name, None)

    def _create(self, claim: NewNodeClaim, pool: Obj) -> str | None:
        """``Provisioner.Create``: the NodeClaim for ``claim``, conditions Unknown."""
        names = [it.name for it in claim.instance_types]
        reqs = claim.requirements.add(
            Requirement.new("node.kubernetes.io/instance-type", "In", names)
        )
        obj = lifecycle.nodeclaim_object(
            pool, nodepool_labels(pool), reqs.node_selector_requirements(), claim.requests
        )
        obj["status"] = lifecycle.initial_nodeclaim_status(lifecycle.utc_now())
        try:
            created = self._store.create(NODECLAIMS, obj)
            if not (created.get("status") or {}).get("conditions"):  # status dropped on create
                self._store.update(
                    NODECLAIMS, {**created, "status": obj["status"]}, subresource="status"
                )
        except ApiError as e:
            log.error("creating nodeclaim for nodepool %s: %s", claim.nodepool, e.message)
            return None
        name = str(created["metadata"]["name"])
        log.info(
            "created nodeclaim %s (nodepool %s) for %d pod(s), instance types: %s",
            name,
            claim.nodepool,
            len(claim.pods),
            _instance_list(names),
        )
        return name

    def _dedupe_ok(self, reason: str, pod: Obj, seconds: float) -> bool:
        """Karpenter's recorder dedupe: once per (reason, pod UID) per ``seconds``."""
        now, key = self._clock(), (reason, str(pod["metadata"].get("uid", "")))
        if now >= self._dedupe_swept + 1.0:  # expired keys go once a second, not per call
            self._dedupe = {k: t for k, t in self._dedupe.items() if t > now}
            self._dedupe_swept = now
        expiry = self._dedupe.get(key)
        if expiry is not None and expiry > now:
            return False
        self._dedupe[key] = now + seconds
        return True

    def _nominate(self, pod: Obj, nodeclaim: str | None, node: str | None) -> None:
        """``NominatePodEvent``: deduped per pod for 2 minutes, then rate limited
        (``PodNominationRateLimiter``: 5 per second, burst 10). The nomination itself
        (``Cluster.NominateNodeForPod``, which protects the node from disruption) is
        recorded every time."""
        self._emptiness.nominate(nodeclaim, node)
        if not self._dedupe_ok("Nominated", pod, 120.0):
            return
        now = self._clock()
        self._tokens = min(10.0, self._tokens + (now - self._tokens_at) * 5)
        self._tokens_at = now
        if self._tokens < 1:
            return
        self._tokens -= 1
        where = [f"nodeclaim/{nodeclaim}"] if nodeclaim else []
        where += [f"node/{node}"] if node else []
        self._event(pod, "Normal", "Nominated", f"Pod should schedule on: {', '.join(where)}")

    def _event(self, involved: Obj, type_: str, reason: str, message: str) -> None:
        self._recorder.record(involved, type_, reason, message)
