"""Pool resolution, pure: the NodePool a pod's trigger targets (`resolve_pool`) and
whether a new node of that pool can run the pod at all (`unmet_constraint`: its node
selector and required node affinity against what the pool's nodes will carry). Where
there is none it says why as a typed reason (`controller.reasons.NoPool`,
`controller.reasons.Constraint`); `controller.messages` words it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from controller import karpenter, placement
from controller.decisions import PlanConfig
from controller.model import PendingPod, Requirement, Toleration, untolerated_taint
from controller.nodes import NodePoolInfo
from controller.reasons import (
    AffinityUnmet,
    Constraint,
    DefaultPoolMissing,
    NoDefaultPool,
    NoNodeRuns,
    NoPool,
    NoPoolOffers,
    OfferingPoolsRefuse,
    SelectorLabelUnknown,
    SelectorNotAdmitted,
    TaintRefused,
)
from intent.providers import pool_admits_model

#: What `resolve_pool` reads of a pod (`pool_key`): its intent's pool, model and GPU
#: memory, its tolerations and its sharing layers (`controller.placement.layers_of`).
PoolKey = tuple[str | None, str | None, int | None, tuple[Toleration, ...], tuple[str, ...]]


def pool_key(pod: PendingPod) -> PoolKey:
    """Everything `resolve_pool` reads of ``pod``: pods with equal keys resolve to the same
    pool (the planner and `controller.incremental` cache the resolution by it). Pure."""
    intent = pod.intent
    layers = placement.layers_of(intent)
    return (intent.pool, intent.model, intent.gpu_memory_mib, pod.tolerations, layers)


def resolve_pool(
    pod: PendingPod, pools: Mapping[str, NodePoolInfo], config: PlanConfig
) -> tuple[NodePoolInfo | None, NoPool | None]:
    """The NodePool a pod's trigger should target (`_resolve_any`), among the pools that
    make nodes where the pod's GPU-sharing layer runs (`controller.placement.unmet`
    against ``config.placement``), and why there is none (None when there is one). When
    only a pool that makes no such node would do, there is none, and the reason
    (`controller.reasons.NoPoolPlaces`, `controller.placement.unplaceable`) names the
    requirement no NodePool's nodes meet: buying that node would not run the pod."""
    needs = config.placement.for_intent(pod.intent)
    if not needs:
        return _resolve_any(pod, pools, config)
    fit = {name: p for name, p in pools.items() if placement.unmet(needs, p) is None}
    pool, why = _resolve_any(pod, fit, config)
    if pool is None and config.default_nodepool and config.default_nodepool not in fit:
        # The default pool cannot place the layer: an intent that states GPU memory
        # takes the first GPU pool that can (its trigger asks for that memory).
        anywhere = dataclasses.replace(config, default_nodepool=None)
        if (other := _resolve_any(pod, fit, anywhere)[0]) is not None:
            pool, why = other, None
    if pool is None and len(fit) < len(pools):
        other, _ = _resolve_any(pod, pools, config)
        if other is not None:
            return None, placement.unplaceable(pod.intent, config.placement, other)
    return pool, why


def unplaced_layer(pod: PendingPod, pools: Mapping[str, NodePoolInfo], config: PlanConfig) -> str:
    """The sharing layer (`controller.placement.LAYERS`) whose placement alone keeps
    ``pod`` from a NodePool (`resolve_pool` finds none, though one would serve it but for
    the placement), ``""`` otherwise: the ``gpu_intent_unplaceable_pods`` gauge."""
    if not config.placement.for_intent(pod.intent) or resolve_pool(pod, pools, config)[0]:
        return ""
    other, _ = _resolve_any(pod, pools, config)
    if other is None:
        return ""
    return placement.unplaceable_layer(pod.intent, config.placement, other)


def _resolve_any(
    pod: PendingPod, pools: Mapping[str, NodePoolInfo], config: PlanConfig
) -> tuple[NodePoolInfo | None, NoPool | None]:
    """The NodePool a pod's trigger should target, and why there is none (None when
    there is one).

    Order: the pool the intent names if it exists, is Ready and admits the model; for a
    model, the Ready pools that explicitly admit it (requirement ``In`` or template
    label on the provider's model label, `intent.providers.ProviderProfile.model_label`,
    admitting one of the model's values: on TKE an instance family holding that GPU,
    `intent.providers.pool_admits_model`), else GPU pools that do not exclude it, by weight then
    name (Karpenter picks the highest weight among matching pools); without a model, the
    configured default pool, or for an intent that states GPU memory the first GPU pool
    (its trigger then asks for that much GPU memory, so Karpenter picks the cheapest
    GPU that fits). Only pools whose ``NoSchedule``/``NoExecute`` taints the pod
    tolerates count (`controller.model.untolerated_taint`, kube-scheduler's matching):
    a trigger tolerates its pool's taints, but the pod must run on the node, and a pool
    tainted for DRA pods only took KAI pods' A100 triggers in `bench.scaleup_time`
    before. A pod that tolerates none of the pools that would do gets no pool, and the
    reason names the taint (`controller.reasons.TaintRefused`).
    """
    profile = config.trigger.profile
    label = profile.model_label

    def offers(pool: NodePoolInfo, model: str) -> bool:
        # the provider's model values (TKE: a family holding that GPU), `intent.providers`
        return pool_admits_model(profile, pool.admits, model)

    model = pod.intent.model
    ready = sorted((p for p in pools.values() if p.ready), key=lambda p: (-p.weight, p.name))

    def refused(pool: NodePoolInfo) -> TaintRefused:
        taint = untolerated_taint(pod.tolerations, pool.taints) or {}
        value = str(taint["value"]) if taint.get("value") else ""
        return TaintRefused(
            pool.name, str(taint.get("key", "")), value, str(taint.get("effect", ""))
        )

    def tolerated(pool: NodePoolInfo) -> bool:
        return untolerated_taint(pod.tolerations, pool.taints) is None

    named = pools.get(pod.intent.pool or "")
    if named is not None and named.ready and (model is None or offers(named, model)):
        return (named, None) if tolerated(named) else (None, refused(named))
    if model is None:
        default = pools.get(config.default_nodepool or "")
        if default is not None and default.ready:
            return (default, None) if tolerated(default) else (None, refused(default))
        gpu_pools = [p for p in ready if p.makes_gpus()]
        if pod.intent.gpu_memory_mib and gpu_pools and not config.default_nodepool:
            # the memory requirement lets Karpenter pick the GPU
            usable = [p for p in gpu_pools if tolerated(p)]
            return (usable[0], None) if usable else (None, refused(gpu_pools[0]))
        if config.default_nodepool:
            return None, DefaultPoolMissing(config.default_nodepool)
        return None, NoDefaultPool()
    explicit = [p for p in ready if offers(p, model) and label in p.label_keys()]
    implicit = [p for p in ready if offers(p, model) and p.makes_gpus()]
    if not (explicit or implicit):
        return None, NoPoolOffers(model, label)
    for candidates in (explicit, implicit):
        usable = [p for p in candidates if tolerated(p)]
        if usable:
            return usable[0], None
    return None, OfferingPoolsRefuse(model, refused((explicit or implicit)[0]))


#: Label domains that agents running on GPU nodes set once the node has joined (NVIDIA
#: GPU Feature Discovery ``nvidia.com/gpu.*``, Node Feature Discovery
#: ``feature.node.kubernetes.io/*``, AMD's node labeller ``amd.com/*``): Karpenter cannot
#: know them, yet a GPU node it makes will carry them, so a pod selecting them can run
#: there (the webhook reads the GPU model out of them).
RUNTIME_LABEL_PREFIXES: tuple[str, ...] = ("nvidia.com/", "feature.node.kubernetes.io/", "amd.com/")


def _knowable(key: str) -> bool:
    """A label key a new node can carry without any NodePool defining it."""
    return karpenter.is_well_known_label(key) or key.startswith(RUNTIME_LABEL_PREFIXES)


def _expression_met(r: Requirement, pool: NodePoolInfo) -> bool:
    """Whether some node of ``pool`` can satisfy node-selector requirement ``r``."""
    if r.key not in pool.label_keys():
        return _knowable(r.key) or r.operator in ("NotIn", "DoesNotExist")
    own = [q for q in pool.requirements if q.key == r.key]
    if r.operator == "In":
        return any(pool.admits(r.key, v) for v in r.values)
    if r.operator == "NotIn":
        if r.key in pool.labels:
            return pool.labels[r.key] not in r.values
        return not any(q.operator == "In" and set(q.values) <= set(r.values) for q in own)
    if r.operator == "Exists":
        return not any(q.operator == "DoesNotExist" for q in own)
    if r.operator == "DoesNotExist":
        return r.key not in pool.labels and not any(q.operator in ("In", "Exists") for q in own)
    return True  # Gt/Lt: numeric ranges are left to Karpenter


def unmet_constraint(pod: PendingPod, pool: NodePoolInfo) -> Constraint | None:
    """The first term of ``pod``'s node selector or required node affinity that no node
    ``pool`` makes can satisfy (`controller.reasons.Constraint`); None when a new node of
    the pool can run it. A key is satisfiable when the pool defines it (template label or
    requirement) and admits the value, or when nodes carry it without the pool
    (Karpenter's well-known labels, `RUNTIME_LABEL_PREFIXES`). Affinity terms are ORed:
    one satisfiable term is enough."""
    for key, value in pod.node_selector:
        if key in pool.label_keys():
            if not pool.admits(key, value):
                return SelectorNotAdmitted(key, value, pool.name)
        elif not _knowable(key):
            return SelectorLabelUnknown(key, value, pool.name)
    if pod.affinity_terms:
        failed = [
            next((r for r in term if not _expression_met(r, pool)), None)
            for term in pod.affinity_terms
        ]
        if all(f is not None for f in failed):
            r = failed[0]
            assert r is not None
            return AffinityUnmet(r, pool.name)
    return None


class PoolResolver:
    """`resolve_pool` and `unmet_constraint` for the pods of one pass, each decided once
    per distinct input: the pods of one workload share their pool choice and their
    constraints."""

    def __init__(self, pools: Mapping[str, NodePoolInfo], config: PlanConfig) -> None:
        self._pools = pools
        self._config = config
        self._resolved: dict[PoolKey, tuple[NodePoolInfo | None, NoPool | None]] = {}
        self._unmet: dict[tuple[str, object, object], Constraint | None] = {}

    def resolve(self, pod: PendingPod) -> NodePoolInfo | NoPool:
        """The NodePool ``pod``'s trigger targets, else why there is none: no pool will
        take it (`resolve_pool`), or no node of it can run the pod (`NoNodeRuns`, with
        what `unmet_constraint` found)."""
        where = pool_key(pod)
        if (resolved := self._resolved.get(where)) is None:
            resolved = self._resolved[where] = resolve_pool(pod, self._pools, self._config)
        pool, why = resolved
        if pool is None:
            assert why is not None  # resolve_pool gives a reason whenever it gives no pool
            return why
        constraints = (pool.name, pod.node_selector, pod.affinity_terms)
        if constraints not in self._unmet:
            self._unmet[constraints] = unmet_constraint(pod, pool)
        unmet = self._unmet[constraints]
        return pool if unmet is None else NoNodeRuns(unmet)
