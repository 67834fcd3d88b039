"""What the demo's demand needs and what was bought: native whole-GPU twins solved by the
sim's Karpenter, GPUs and instance cost per model, NodeClaims beyond the need. Purely
computational (see the package docstring for the rules)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_intent.demo.manifests import ANY_MODEL, GPU_NAME_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from intent.contract import Intent
from intent.keys import NVIDIA_GPU
from sim.catalog import CATALOG, InstanceType, by_name, format_quantity
from sim.karpenter import Snapshot, solve
from sim.scheduling import pod_requests

log = logging.getLogger(__name__)


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
    requests[NVIDIA_GPU] = str(gpus)
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
                        "limits": {NVIDIA_GPU: str(gpus)},
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
