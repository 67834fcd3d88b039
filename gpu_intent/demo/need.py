"""What the demo's demand needs and what was bought: the ideal native twin
(`gpu_intent.demo.twin`) solved by the sim's Karpenter, GPUs and instance cost per model,
NodeClaims beyond the need. Purely computational (see the package docstring for the
rules)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from gpu_intent.demo.manifests import ANY_MODEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from gpu_intent.demo.twin import DemandPod, Ideal, gpus_lower_bound, ideal_twins
from intent.providers import AWS, ProviderProfile
from intent.text import usd_for_people
from sim.catalog import CATALOG, InstanceType, by_name
from sim.karpenter import Snapshot, solve
from sim.providers import ALL_INSTANCE_TYPES

log = logging.getLogger(__name__)

#: Namespace of the twin pods handed to the solve (they are never created).
TWIN_NAMESPACE: Final = "native-twins"

__all__ = [
    "TWIN_NAMESPACE",
    "Balance",
    "ClaimCost",
    "DemandPod",
    "Need",
    "balance",
    "bought_claim",
    "gpus_needed",
    "native_need",
    "native_twins",
]


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
    for intents without a model), the ideal twin's NodeClaims as the sim's Karpenter
    solves them (`ClaimCost`, cheapest instance type each), the twins it could not place
    (twin name -> Karpenter's message) and ``lower_bound``: whole GPUs per model of the
    ideal twin's packing (`gpu_intent.demo.twin.gpus_lower_bound`)."""

    gpus: Mapping[str, int]
    claims: tuple[ClaimCost, ...]
    unplaced: Mapping[str, str]
    lower_bound: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Balance:
    """Bought against needed: GPUs per model (needed: ``ceil`` of summed intents; the
    ideal twin's packing, ``lower_bound``; bought; the ideal twin's solve, ``native``),
    instance cost in USD/hour (bought; ``native``: the ideal twin's solve), and the
    NodeClaims beyond the need (name -> why)."""

    gpus_needed: Mapping[str, int]
    gpus_bought: Mapping[str, int]
    gpus_native: Mapping[str, int]
    cost_bought: Decimal
    cost_native: Decimal
    claims_bought: int
    claims_native: int
    beyond: Mapping[str, str]
    gpus_lower_bound: Mapping[str, int] = field(default_factory=dict)


def native_twins(
    pods: Sequence[DemandPod],
    nodepools: Sequence[Mapping[str, Any]] = (),
    *,
    default_nodepool: str | None = None,
    catalog: Sequence[InstanceType] = CATALOG,
    provider: ProviderProfile = AWS,
) -> list[dict[str, Any]]:
    """The ideal twin of ``pods`` (`gpu_intent.demo.twin.ideal_twins`) as Pod objects for
    the solve: ``native-<n>`` in namespace ``native-twins`` with a fixed uid and
    creation time (the solve orders pods by them), then the pods without a GPU intent
    unchanged."""
    return _solve_pods(
        ideal_twins(
            pods, nodepools, default_nodepool=default_nodepool, catalog=catalog, provider=provider
        )
    )


def _solve_pods(ideal: Ideal) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, twin in enumerate(ideal.twins):
        pod = twin.pod(f"native-{index}", TWIN_NAMESPACE)
        pod["metadata"]["uid"] = f"native-twin-{index:06d}"
        pod["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
        out.append(pod)
    out.extend(dict(p) for p in ideal.others)
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
    provider: ProviderProfile = AWS,
) -> Need:
    """What Karpenter would buy for the ideal twin of the demand: `solve` over
    `native_twins` (packed within the instance types of ``nodepools``) with
    ``nodepools`` and no existing capacity. Each NodeClaim of the solve is priced at its
    cheapest remaining instance type (the one launched). ``catalog`` and ``provider``:
    the cluster's cloud (`sim.providers`) and its Karpenter provider's labels."""
    ideal = ideal_twins(
        pods, nodepools, default_nodepool=default_nodepool, catalog=catalog, provider=provider
    )
    results = solve(
        Snapshot(pods=_solve_pods(ideal), nodepools=list(nodepools), existing=(), catalog=catalog)
    )
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
    return Need(
        gpus_needed(pods), tuple(claims), dict(results.errors), gpus_lower_bound(ideal.twins)
    )


def bought_claim(
    claim: Mapping[str, Any],
    *,
    deleted: bool = False,
    catalog: Sequence[InstanceType] = ALL_INSTANCE_TYPES,
) -> ClaimCost:
    """A created NodeClaim object as a `ClaimCost`: pool from ``karpenter.sh/nodepool``,
    instance type from ``node.kubernetes.io/instance-type`` (set at launch) looked up in
    ``catalog`` (every provider's by default) for GPUs and price; ``launched`` from condition ``Launched=True``."""
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
    ``len(need.claims)`` (the ideal twin's solve) that never launched, or whose price
    takes the cost of those kept above the ideal solve's (more, smaller NodeClaims for
    the same GPUs at no more cost are not beyond it); a launched one whose GPUs take its
    model's running total above ``max(need.lower_bound[model], ideal solve's GPUs of
    model)``, unless what is left of the need of pods of no model (`ANY_MODEL`: their
    sharing scheduler puts them on a card of any model, KAI's ``gpu-memory`` pods on a
    node bought for tensor-fusion's L40S pods) takes the excess and the GPUs of all
    models stay within the larger of the two totals (the solve places the pods of no
    model on some model: they are not counted twice); a launched one without GPUs once
    the ideal solve's GPU-less NodeClaims are used up. Costs in USD/hour.
    """
    native_gpus = _per_model(need.claims)
    allowed = {
        m: max(need.lower_bound.get(m, 0), native_gpus.get(m, 0))
        for m in {*need.lower_bound, *native_gpus}
    }
    any_left = need.lower_bound.get(ANY_MODEL, 0)
    total = max(sum(native_gpus.values()), sum(need.lower_bound.values()))
    gpu_less_allowed = sum(1 for c in need.claims if c.instance_type and not c.gpus)
    beyond: dict[str, str] = {}
    kept = gpu_less = total_used = 0
    ideal_cost = sum((c.price_per_hour or Decimal(0) for c in need.claims), Decimal(0))
    kept_cost = Decimal(0)
    used: dict[str, int] = defaultdict(int)
    for index, claim in enumerate(bought, 1):
        what = f"{claim.instance_type or 'not launched'}" + (
            f", {claim.gpus} {claim.gpu_model}" if claim.gpu_model else ""
        )
        price = claim.price_per_hour
        if kept >= len(need.claims) and (price is None or kept_cost + price > ideal_cost):
            beyond[claim.name] = (
                f"NodeClaim {index} of {len(bought)} created ({what}); the ideal native"
                f" twin's solve makes {len(need.claims)}"
                + ("" if price is None else f" for ${usd_for_people(ideal_cost)}/h")
            )
            continue
        if claim.gpu_model and claim.gpus:
            limit = allowed.get(claim.gpu_model, 0)
            reach = used[claim.gpu_model] + claim.gpus
            over = reach - max(limit, used[claim.gpu_model])
            if over > 0 and (over > any_left or total_used + claim.gpus > total):
                beyond[claim.name] = (
                    f"{claim.gpu_model} GPUs bought would reach {reach}, needed {limit}"
                    + (f" and {any_left} of any model" if any_left else "")
                    + f" ({what})"
                )
                continue
            any_left -= max(over, 0)
            used[claim.gpu_model] = reach
            total_used += claim.gpus
        elif claim.instance_type:
            if gpu_less >= gpu_less_allowed:
                beyond[claim.name] = (
                    f"no GPU and the ideal twin's solve buys no such NodeClaim ({what})"
                )
                continue
            gpu_less += 1
        kept += 1
        kept_cost += price or Decimal(0)
    return Balance(
        gpus_needed=dict(need.gpus),
        gpus_bought=_per_model(bought),
        gpus_native=native_gpus,
        gpus_lower_bound=dict(need.lower_bound),
        cost_bought=sum((c.price_per_hour or Decimal(0) for c in bought), Decimal(0)),
        cost_native=ideal_cost,
        claims_bought=len(bought),
        claims_native=len(need.claims),
        beyond=beyond,
    )


# --- The timeline: what the watches saw. ------------------------------------------------
