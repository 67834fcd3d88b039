"""Capacity another layer's scheduler would take first: when a new trigger waits for the
capacity on its way for KAI's pods. Pure.

KAI-Scheduler binds in sessions, one every ``--schedule-period`` (1 s by default,
kai-scheduler ``cmd/scheduler/app/options/options.go`` ``defaultSchedulerPeriod``), and
each session puts every pending pod it can on the fitting node with the fewest idle
GPUs (KAI ``nodeplacement``; ``nodepack_test.go``). The schedulers built on
kube-scheduler's queue (kube-scheduler, HAMi's, tensor-fusion's) try a pod again only
after its backoff, 1 s doubling to 10 s per failed attempt (kube-scheduler
``pkg/scheduler/backend/queue/scheduling_queue.go`` ``calculateBackoffDuration``). So
when the nodes bought for both come up together, KAI's next session takes a node bought
for another layer's pods whenever its own pods fit it and it has fewer idle GPUs (a
1-GPU L40S node before a 4-GPU L4 node): a KAI pod that names no GPU model and asks
20000 MiB takes the L40S node bought for two tensor-fusion pods, which then need
another. The sim and the real Karpenter both showed it (docs/limits.md).

So a new trigger for a group that names a model waits while capacity bought for KAI
pods that could run on its nodes is on its way (a live trigger of KAI's placement whose
NodeClaim is not Ready, `contesting`): KAI's pods then find their own nodes first, and
the group's nodes come up after them. The wait is bounded (`contested`): at most
``seconds`` from when the group's oldest pod became Unschedulable, so a stream of KAI
pods never starves another layer. Only groups of `SHARED_LAYERS` (or of no layer)
wait: KAI's own groups never do (KAI places its pods among its nodes as it likes; the
GPUs bought add up the same), nor do groups whose nodes KAI's pods cannot run on
(HAMi's, DRA's and the other layers whose plugin replaces NVIDIA's; another model; too
little memory; a NodePool outside KAI's placement).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from controller.decisions import CreateTrigger
from controller.model import GroupKey, PendingPod, Requirement, TriggerInfo
from controller.nodes import NodeClaimInfo, NodePoolInfo
from controller.placement import Placements, unmet
from controller.reasons import Contested
from intent.catalog import default_catalog

__all__ = [
    "SESSION_LAYERS",
    "SHARED_LAYERS",
    "Contest",
    "contested",
    "contesting",
    "is_session",
    "of_create",
]

#: The sharing layers whose scheduler binds in periodic sessions, taking any idle GPU
#: its pending pods fit (module doc).
SESSION_LAYERS: Final = ("kai",)
#: The layers whose pods run on the nodes KAI's pods run on, those of NVIDIA's plain
#: device plugin: tensor-fusion's (any NVIDIA GPU node), as do pods of no layer. HAMi's
#: device plugin, the DRA driver, Volcano's and gpushare's plugins and MIG's mixed
#: strategy replace it, so KAI's pods never run on their nodes
#: (`controller.placement`; docs/sources/placement.md).
SHARED_LAYERS: Final = ("tensor-fusion",)


@dataclass(frozen=True, slots=True)
class Contest:
    """Capacity on its way for the pods of a `SESSION_LAYERS` layer: a trigger of that
    layer's placement not Ready yet, or one created this pass. ``name``: its NodeClaim,
    else the trigger (``namespace/name``); the rest is the trigger's group
    (`controller.model.GroupKey`)."""

    name: str
    pool: str
    model: str | None
    min_memory_mib: int
    selector: tuple[tuple[str, str], ...]
    placement: tuple[Requirement, ...]


def is_session(group: GroupKey, placements: Placements) -> bool:
    """Whether ``group``'s placement is a `SESSION_LAYERS` layer's."""
    return any(group.placement == placements.of(layer) for layer in SESSION_LAYERS)


def contesting(
    triggers: Iterable[TriggerInfo],
    claims: Mapping[str, NodeClaimInfo],
    placements: Placements,
) -> tuple[Contest, ...]:
    """The live triggers of a `SESSION_LAYERS` layer (`is_session`) whose capacity is on
    its way: no NodeClaim recorded yet, or one not Ready."""
    out: list[Contest] = []
    for trigger in triggers:
        if trigger.deleting or not is_session(trigger.group, placements):
            continue
        claim = claims.get(trigger.node_claim) if trigger.node_claim else None
        if claim is None or not claim.ready:
            name = trigger.node_claim or f"{trigger.ref.namespace}/{trigger.ref.name}"
            out.append(_of(name, trigger.group))
    return tuple(out)


def of_create(create: CreateTrigger) -> Contest:
    """The capacity a trigger created this pass brings (a `SESSION_LAYERS` one's)."""
    meta = create.body.get("metadata")
    name = meta.get("name", "") if isinstance(meta, Mapping) else ""
    namespace = meta.get("namespace", "") if isinstance(meta, Mapping) else ""
    return _of(f"{namespace}/{name}", create.group)


def _of(name: str, group: GroupKey) -> Contest:
    return Contest(
        name, group.pool, group.model, group.min_memory_mib, group.selector, group.placement
    )


def contested(
    key: GroupKey,
    pods: Sequence[PendingPod],
    contests: Sequence[Contest],
    pools: Mapping[str, NodePoolInfo],
    placements: Placements,
    now: datetime,
    seconds: float,
) -> Contested | None:
    """Why a new trigger for ``pods`` of group ``key`` waits for the capacity on its way
    for KAI's pods (``contests``: `contesting`, and `of_create` for this pass's), None
    when it need not: the group names no model, or its placement is not that of a
    `SHARED_LAYERS` layer or of no layer (KAI's own groups, HAMi's, DRA's, ...); no
    contest's pods could run on its nodes (the same model, or no model and at
    most the model's memory per GPU; a NodePool that meets the contest's placement; a
    contest that copies a node selector only on its own NodePool); or ``seconds`` have
    passed since the oldest of ``pods`` became Unschedulable (else was created)."""
    if key.model is None or not contests or not pods:
        return None
    if key.placement and key.placement not in {placements.of(x) for x in SHARED_LAYERS}:
        return None
    pool = pools.get(key.pool)
    if pool is None:
        return None
    since = min((p.unschedulable_since or p.created or now) for p in pods)
    until = since + timedelta(seconds=seconds)
    if now >= until:
        return None
    memory = _memory_mib(key.model)
    names: set[str] = set()
    for contest in contests:
        if contest.model is None:
            if memory is not None and contest.min_memory_mib > memory:
                continue
        elif contest.model != key.model:
            continue
        if contest.selector and contest.pool != key.pool:
            continue
        if unmet(contest.placement, pool) is not None:
            continue
        names.add(contest.name)
    if not names:
        return None
    return Contested(tuple(sorted(names)), until)


@functools.cache
def _memory_mib(model: str) -> int | None:
    """The most MiB per GPU of any variant of ``model`` in the default catalog, None for
    a model it does not know (then any memory may fit)."""
    variants = default_catalog().variants(model)
    return max((v.memory_mib for v in variants), default=None)
