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
pods never starves another layer. Groups of `SHARED_LAYERS` (or of no layer) wait for
KAI's capacity of their model or of none; KAI's own groups only for KAI's capacity of
no model on another NodePool (KAI's pods of one model or NodePool share its GPUs as
they like, but a memory-only pod takes an A100 bought for A100 fractions as readily as
the L4 bought for it). Groups
whose nodes KAI's pods cannot run on never wait (HAMi's, DRA's and the other layers
whose plugin replaces NVIDIA's; another model; too little memory; a NodePool outside
KAI's placement).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from controller.decisions import CreateTrigger
from controller.model import GroupKey, PendingPod, Requirement, TriggerInfo, parse_time
from controller.nodes import NodeClaimInfo, NodePoolInfo
from controller.placement import Placements, unmet
from controller.reasons import Contested
from intent.catalog import default_catalog
from intent.contract import Phase

__all__ = [
    "SESSION_LAYERS",
    "SHARED_LAYERS",
    "Contest",
    "contested",
    "contesting",
    "is_session",
    "of_create",
    "session_placements",
    "shared_placements",
    "waits_as",
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
    """Capacity on its way for the pods of a `SESSION_LAYERS` layer: the ``group`` of a
    trigger of that layer's placement not Ready yet, or of one created this pass, and
    when that trigger was ``created`` (None: unknown)."""

    group: GroupKey
    created: datetime | None


def session_placements(placements: Placements) -> set[tuple[Requirement, ...]]:
    """The placements of the `SESSION_LAYERS` layers."""
    return {placements.of(layer) for layer in SESSION_LAYERS}


def shared_placements(placements: Placements) -> set[tuple[Requirement, ...]]:
    """The placements of groups whose nodes KAI's pods run on besides KAI's own: no
    layer's (``()``) and `SHARED_LAYERS`'."""
    return {(), *(placements.of(layer) for layer in SHARED_LAYERS)}


def waits_as(placement: tuple[Requirement, ...], placements: Placements) -> str | None:
    """How a group of ``placement`` may wait for KAI's capacity (`contested`): ``"own"``
    for a `SESSION_LAYERS` layer's, ``"shared"`` for a `SHARED_LAYERS` layer's or no
    layer's (`shared_placements`), None for a layer whose nodes KAI's pods never run on."""
    if placement in session_placements(placements):
        return "own"
    return "shared" if placement in shared_placements(placements) else None


def is_session(group: GroupKey, placements: Placements) -> bool:
    """Whether ``group``'s placement is a `SESSION_LAYERS` layer's."""
    return group.placement in session_placements(placements)


def contesting(
    triggers: Iterable[TriggerInfo],
    claims: Mapping[str, NodeClaimInfo],
    placements: Placements,
) -> tuple[Contest, ...]:
    """The live triggers of a `SESSION_LAYERS` layer (`is_session`) whose capacity is on
    its way: no NodeClaim recorded yet, or one not Ready."""
    session = session_placements(placements)
    out: list[Contest] = []
    for trigger in triggers:
        if trigger.deleting or trigger.placement not in session:
            continue
        claim = claims.get(trigger.node_claim) if trigger.node_claim else None
        if claim is None or not claim.ready:
            out.append(Contest(trigger.group, trigger.created))
    return tuple(out)


def of_create(create: CreateTrigger, now: datetime) -> Contest:
    """The capacity a trigger created this pass (at ``now``) brings (a `SESSION_LAYERS`
    one's)."""
    return Contest(create.group, now)


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
    when it need not: the group names no model; it is of a layer whose nodes KAI's pods
    never run on (HAMi's, DRA's, ...: not `SHARED_LAYERS`, no layer or KAI's own); no
    contest's pods could run on its nodes (the same model, or no model and at most the
    model's memory per GPU; a NodePool that meets the contest's placement; a contest
    that copies a node selector only on its own NodePool), where for KAI's own groups
    only contests of no model on another NodePool count (KAI's pods of one model, or on
    one NodePool, share its GPUs as they like; those of no model take another pool's
    model); or ``seconds`` have passed since the oldest of ``pods`` became
    Unschedulable (else was created).

    A group of `SHARED_LAYERS` or of no layer waits once, and only for what was on its
    way when it began to: none of ``pods`` may have been told more than ``Waiting`` (a
    pod triggered before is never held again), and for one told ``Waiting`` only
    contests created by then count, so a stream of KAI pods bought one after another
    does not hold it round after round. KAI's own groups wait while any contest counts,
    whatever they were told: KAI binds its pods of no model before or after them as it
    orders its jobs, so only nodes that come up after theirs are safe from them; and a
    trigger of theirs no NodeClaim was made for yet is withdrawn by the same rule
    (`controller.plan`), so holding and withdrawing never disagree."""
    if key.model is None or not contests or not pods:
        return None
    kind = waits_as(key.placement, placements)
    if kind is None:
        return None
    own = kind == "own"
    cutoff: datetime | None = None
    for pod in pods if not own else ():
        status = pod.status
        if status is None:
            continue
        if status.phase != Phase.WAITING:
            return None
        began = parse_time(status.since)
        if began is not None and (cutoff is None or began < cutoff):
            cutoff = began
    pool = pools.get(key.pool)
    if pool is None:
        return None
    since = min((p.unschedulable_since or p.created or now) for p in pods)
    until = since + timedelta(seconds=seconds)
    if now >= until:
        return None
    memory = _memory_mib(key.model)
    for contest in contests:
        if cutoff is not None and (contest.created is None or contest.created > cutoff):
            continue
        group = contest.group
        if own and (group.model is not None or group.pool == key.pool):
            continue  # KAI's pods of one model, or of one NodePool, share its GPUs
        if group.model is None:
            if memory is not None and group.min_memory_mib > memory:
                continue
        elif group.model != key.model:
            continue
        if group.selector and group.pool != key.pool:
            continue
        if unmet(group.placement, pool) is not None:
            continue
        return Contested(until)
    return None


@functools.cache
def _memory_mib(model: str) -> int | None:
    """The most MiB per GPU of any variant of ``model`` in the default catalog, None for
    a model it does not know (then any memory may fit)."""
    variants = default_catalog().variants(model)
    return max((v.memory_mib for v in variants), default=None)
