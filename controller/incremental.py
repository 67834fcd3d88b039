"""A reconcile pass that costs what changed: `plan` over the informer cache and the
controller's memory (`controller.cache.InformerCache`, `controller.memory.Memory`),
re-planning only the partitions whose inputs changed since the previous pass.

`plan` is a pure function of the whole cluster; calling it on every pass walks every
pending pod (about 180 ms at 10,000 pods). But its decisions about the pods and triggers
of one `controller.plan.partition` (a GPU model on one NodePool) depend on those items
and on inputs every partition shares (NodePools, NodeClaims, nominations, NodeReady
covers, the configuration and ``now``), not on the items of another partition, with
four exceptions checked here: the trigger budget (``max_triggers``), a NodeClaim that
triggers of two partitions point to, a group that spans two partitions, and capacity on
its way for KAI's pods, which holds back other partitions' new triggers
(`controller.contests`). So a pass:

1. reads the cache's change journal (`InformerCache.changes`) and re-parses only the pods
   and triggers that changed, moving them between partitions;
2. per partition, reuses the previous pass's result when nothing it reads changed (the
   budget left included), the result decided nothing (a result that decided something
   carries the old time stamp) and no pod of it is `controller.plan.time_sensitive`;
   else plans the partition alone, with the whole budget left;
3. merges the results, unless they may have competed for the budget (some partition
   used all of it, or together they used more), two partitions share a NodeClaim or a
   group (`Plan.demand`), or KAI's pods have capacity on its way (or get some of no model
   this pass): then it plans the whole
   snapshot at once, as the plain loop would. With no budget left, partitions cannot
   compete: none creates anything.

The result is `plan` of the whole snapshot, action for action (the order of actions of
different partitions may differ; `tests/test_controller_incremental.py` checks this
against fresh plans through every kind of change).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from itertools import chain
from typing import NamedTuple

from controller.cache import InformerCache, Key, Kind, parse_served_pod, pool_label_keys
from controller.capacity import fresh_claims, nodes_to_label
from controller.contests import contesting, is_session, session_placements, waits_as
from controller.decisions import LabelNode, Plan, PlanConfig, Snapshot
from controller.failures import init_overdue
from controller.memory import Memory
from controller.model import (
    GroupKey,
    InvalidPod,
    PendingPod,
    RetryState,
    ScheduledPod,
    TriggerInfo,
    parse_trigger,
)
from controller.nodes import NodeClaimInfo, NodeInfo, NodePoolInfo, Nomination, Refusal
from controller.plan import is_native, native_reserved, partition, plan, time_sensitive
from controller.pools import PoolKey, pool_key, unplaced_layer
from controller.snapshot import used

log = logging.getLogger(__name__)

Pod = PendingPod | InvalidPod
Part = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class _Memo:
    """A partition's last result: planned at (partition version, shared version, budget)."""

    key: tuple[int, int, int]
    plan: Plan
    time_sensitive: bool


class _Contestable(NamedTuple):
    """What KAI's capacity on its way may do to a partition's pending pods
    (`IncrementalPlanner._contestable`): hold back those of a layer whose nodes KAI's
    pods run on, or of none, that name a model (``shared``); hold back KAI's own that
    name one (``own``); be borrowed by KAI's of no model (``roaming``)."""

    shared: bool = False
    own: bool = False
    roaming: bool = False


@dataclasses.dataclass(slots=True)
class _Partition:
    pods: dict[Key, Pod] = dataclasses.field(default_factory=dict)
    triggers: dict[Key, TriggerInfo] = dataclasses.field(default_factory=dict)
    #: Moves whenever a pod or trigger joins, leaves or changes.
    version: int = 0
    memo: _Memo | None = None
    #: (``version``, `IncrementalPlanner._contestable` at it)
    contestable: tuple[int, _Contestable] = (-1, _Contestable())


@dataclasses.dataclass(frozen=True, slots=True)
class Pass:
    """What one pass decided, with figures for metrics.

    Attributes:
        plan: equal to ``plan(snapshot, config)`` of the whole cache.
        phases: pending pods served, by scale-up phase (``New``: never told).
        replanned: partitions planned afresh (0 in a pass where nothing changed).
        whole: the whole snapshot was planned at once (budget, a shared NodeClaim or a
            group spanning partitions).
    """

    plan: Plan
    phases: Mapping[str, int]
    replanned: int
    whole: bool
    #: Pending pods no NodePool can place, by sharing layer (`unplaced_layer`).
    unplaceable: Mapping[str, int] = dataclasses.field(default_factory=dict)


class IncrementalPlanner:
    """Plans passes over ``cache`` and ``memory`` with ``config``, reusing what did not
    change.

    The planner is the only reader of ``cache``'s change journal. Not thread-safe; one
    per controller.
    """

    def __init__(self, cache: InformerCache, memory: Memory, config: PlanConfig) -> None:
        self._cache = cache
        self._memory = memory
        self._config = config
        self._parts: dict[Part, _Partition] = {}
        self._pod_part: dict[Key, Part] = {}
        self._pod_rv: dict[Key, str] = {}
        self._trigger_part: dict[Key, Part] = {}
        #: A pod's partition by what `resolve_pool` reads of it (cleared with the pools).
        self._part_of: dict[PoolKey, Part] = {}
        #: The same for the layer whose placement no NodePool meets (`unplaced_layer`),
        #: and the pods counted by layer.
        self._layer_of: dict[PoolKey, str] = {}
        self._pod_layer: dict[Key, str] = {}
        self._unplaced: Counter[str] = Counter()
        self._phases: Counter[str] = Counter()
        self._live = 0  # triggers not being deleted
        self._seen: tuple[int, ...] | None = None  # shared input versions last read
        self._shared_version = 0
        self._pools: dict[str, NodePoolInfo] = {}
        self._pool_keys: set[str] = set()
        self._claims: dict[str, NodeClaimInfo] = {}
        self._lost: dict[str, str] = {}
        self._nominations: dict[Key, Nomination] = {}
        self._undated = False
        self._covers: dict[Key, tuple[str, datetime]] = {}
        self._opted_in: frozenset[str] = frozenset()
        self._nodes: dict[str, NodeInfo] = {}
        self._used: dict[str, Decimal] = {}
        self._leaving: dict[str, Decimal] = {}
        self._reserved: dict[str, Decimal] = {}
        self._coupled = False
        self._retries: dict[Key, RetryState] = {}
        self._removals: dict[GroupKey, datetime] = {}
        self._refusals: dict[Key, Refusal] = {}
        self._tokens: int | None = None

    def run(self, now: datetime, create_tokens: int | None = None) -> Pass:
        """One pass at ``now`` (timezone-aware): refresh from the journal, plan what
        changed, merge. ``create_tokens``: trigger creations the rate limit allows (None:
        no limit). Pure apart from the cache it reads and its own memo."""
        self._tokens = create_tokens
        self._cache.expire_expectations()
        reparse, relink = self._refresh_shared(now)
        self._refresh_pods(reparse)
        self._refresh_reserved()
        relink |= self._refresh_triggers()
        if relink:
            self._coupled = self._shared_claims()
        results: list[Plan] = []
        replanned = 0
        budget = max(self._config.max_triggers - self._live, 0)
        if create_tokens is not None:
            budget = min(budget, max(create_tokens, 0))
        per_pool = self._config.max_triggers_per_pool > 0
        pool_live: Counter[str] = Counter()
        if per_pool:
            for part in self._parts.values():
                pool_live.update(t.pool for t in part.triggers.values() if not t.deleting)
        for name in sorted(self._parts):
            part = self._parts[name]
            if not part.pods and not part.triggers:
                del self._parts[name]
                continue
            key = (part.version, self._shared_version, budget)
            memo = part.memo
            if memo is None or memo.key != key or memo.plan or memo.time_sensitive:
                live = sum(not t.deleting for t in part.triggers.values())
                elsewhere = pool_live.copy()
                if per_pool:
                    elsewhere.subtract(t.pool for t in part.triggers.values() if not t.deleting)
                snapshot = self._snapshot(
                    part.pods.values(),
                    part.triggers.values(),
                    now,
                    (),
                    self._live - live,
                    dict(elsewhere),
                )
                planned = plan(snapshot, self._config)
                # A plan that wakes (a burst gathering, a hold's deadline) changes with
                # ``now`` alone: planned again every pass until it does not.
                sensitive = planned.wake is not None or any(
                    time_sensitive(p, self._covers, self._retries) for p in part.pods.values()
                )
                memo = part.memo = _Memo(key, planned, sensitive)
                replanned += 1
            results.append(memo.plan)
        scheduled = self._memory.scheduled()
        creates = [len(r.creates) for r in results]
        # A partition that used the whole budget may have wanted more: the partitions may
        # have competed for it, and only a whole plan says who gets it.
        competed = budget > 0 and (sum(creates) > budget or budget in creates)
        groups = sum(len(r.demand) for r in results)
        split = len({key for r in results for key in r.demand}) != groups
        # NodeReady covers and the free GPUs of new NodeClaims are shared by the groups a
        # NodeClaim can host, which may lie in two partitions (a model-less group on the
        # node of a model), and they change with ``now`` alone: plan those passes whole.
        capacity = bool(self._covers) or any(m.time_sensitive for m in self._memos())
        config = self._config
        last_bind = self._memory.last_bind()
        capacity = capacity or fresh_claims(
            self._claims, now, config.cover_seconds, config.cover_max_seconds, last_bind
        )
        # Failures and caps that reach across partitions or change with ``now`` alone:
        # a group's cooldown, a NodeClaim past the initialization timeout, and the
        # per-pool trigger cap when anything is created (partitions of one pool share it).
        capacity = capacity or bool(self._removals) or (per_pool and sum(creates) > 0)
        capacity = capacity or init_overdue(
            self._claims.values(), now, self._config.init_timeout_seconds
        )
        # Capacity on its way for KAI's pods holds back other layers' groups of any
        # partition, until a time that passes with ``now`` alone, and so do KAI's
        # triggers created this pass (`controller.contests`).
        capacity = capacity or self._contested()
        creating = [r for r in results if r.creates]
        session = [c for r in creating for c in r.creates if is_session(c.group, config.placement)]
        capacity = capacity or (len(creating) > 1 and bool(session))
        # A burst gathering or a ComingUp hold (`Plan.wake`) of KAI's pods of no model
        # holds other partitions' groups back as a trigger would (`controller.contests`).
        capacity = capacity or any(r.wake is not None for r in results)
        # A KAI trigger of no model created this pass withdraws KAI's triggers of a model
        # in other partitions that no NodeClaim was made for (`controller.plan._withdraw`).
        capacity = capacity or (
            any(c.group.model is None for c in session)
            and any(self._contestable(p).own for p in self._parts.values())
        )
        if self._coupled or split or competed or capacity:
            whole = self.snapshot(now, scheduled)
            return Pass(
                plan(whole, self._config), dict(self._phases), replanned, True, +self._unplaced
            )
        if scheduled:
            scheduled_only = self._snapshot((), (), now, scheduled, self._live)
            results.append(plan(scheduled_only, self._config))
        # Which nodes to label depends on every trigger (`nodes_to_label`), not on one
        # partition's: decided over all of them, whatever the partitions' plans said.
        labels = nodes_to_label(
            self._nodes,
            self._pools,
            self._claims,
            chain.from_iterable(p.triggers.values() for p in self._parts.values()),
        )
        merged = _merge(results, tuple(LabelNode(node, value) for node, value in labels))
        return Pass(merged, dict(self._phases), replanned, False, +self._unplaced)

    def _contestable(self, part: _Partition) -> _Contestable:
        """What KAI's capacity on its way may do to ``part``'s pending pods: hold back
        those that name a model (`controller.contests.contested`, by
        `controller.contests.waits_as`), or be borrowed by KAI's of no model
        (`controller.plan._borrow`); cached per partition version."""
        if part.contestable[0] != part.version:
            placements = self._config.placement
            session = session_placements(placements)
            kinds: set[str | None] = set()
            for p in part.pods.values():
                if not isinstance(p, PendingPod) or is_native(p):
                    continue
                placement = placements.for_intent(p.intent)
                if p.intent.model is not None:
                    kinds.add(waits_as(placement, placements))
                elif placement in session:
                    kinds.add("roaming")
            found = _Contestable("shared" in kinds, "own" in kinds, "roaming" in kinds)
            part.contestable = (part.version, found)
        return part.contestable[1]

    def _contested(self) -> bool:
        """Whether KAI's capacity on its way (`controller.contests.contesting`) may hold
        back a group of some partition: pods of a shared layer (or none) naming a model,
        or KAI's own naming one while some of that capacity names none; or whether
        KAI's pods of no model may borrow some of it that names a model."""
        kinds = [self._contestable(p) for p in self._parts.values()]
        shared, own = any(k.shared for k in kinds), any(k.own for k in kinds)
        if any(k.roaming for k in kinds) and contesting(
            chain.from_iterable(p.triggers.values() for n, p in self._parts.items() if n[0]),
            self._claims,
            self._config.placement,
        ):
            return True
        if not (shared or own):
            return False
        # KAI's own groups wait only for capacity of no model: the triggers of the
        # partitions of no model (`controller.plan.partition`) are all that can hold it.
        parts = (p for name, p in self._parts.items() if shared or not name[0])
        contests = contesting(
            chain.from_iterable(p.triggers.values() for p in parts),
            self._claims,
            self._config.placement,
        )
        return bool(contests) and (shared or any(c.group.model is None for c in contests))

    def _memos(self) -> Iterable[_Memo]:
        return (p.memo for p in self._parts.values() if p.memo is not None)

    def snapshot(self, now: datetime, scheduled: Sequence[ScheduledPod] = ()) -> Snapshot:
        """The whole snapshot as of the last `run` (what `plan` would be given)."""
        parts = self._parts.values()
        return self._snapshot(
            chain.from_iterable(p.pods.values() for p in parts),
            chain.from_iterable(p.triggers.values() for p in parts),
            now,
            scheduled,
            decide_labels=True,
        )

    def _snapshot(
        self,
        pods: Iterable[Pod],
        triggers: Iterable[TriggerInfo],
        now: datetime,
        scheduled: Sequence[ScheduledPod],
        live_elsewhere: int = 0,
        live_elsewhere_by_pool: Mapping[str, int] | None = None,
        *,
        decide_labels: bool = False,
    ) -> Snapshot:
        """A snapshot of ``pods`` and ``triggers`` over the shared inputs; node labels are
        decided only for the whole cluster (``decide_labels``, `snapshot`)."""
        return Snapshot(
            list(pods),
            list(triggers),
            self._claims,
            self._pools,
            now,
            list(scheduled),
            self._nominations,
            self._covers,
            self._used,
            self._nodes,
            live_elsewhere,
            live_elsewhere_by_pool or {},
            self._retries,
            self._refusals,
            self._removals,
            self._tokens,
            decide_labels,
            self._memory.last_bind(),
            self._lost,
            self._reserved,
            self._opted_in,
            self._leaving,
        )

    def _refresh_shared(self, now: datetime) -> tuple[bool, bool]:
        """Re-read the inputs every partition shares, where they changed. Returns
        (every pod must be re-parsed, the NodeClaim sharing check must run again)."""
        cache, memory = self._cache, self._memory
        seen = (
            cache.version(Kind.NODEPOOLS),
            cache.version(Kind.NODECLAIMS),
            cache.version(Kind.NOMINATIONS),
            memory.version(),
            cache.version(Kind.NAMESPACES),
            cache.version(Kind.NODES),
            cache.version(Kind.REFUSALS),
            cache.version(Kind.RESOURCESLICES),
        )
        before = self._seen or (-1,) * len(seen)
        self._seen = seen
        reparse = relink = shared = False
        if seen[0] != before[0]:
            pools = cache.nodepools()
            if pools != self._pools:
                # Which pool a pod resolves to may change: re-partition every pod.
                self._pools = pools
                self._pool_keys = pool_label_keys(pools)
                self._part_of.clear()
                self._layer_of.clear()
                shared = reparse = True
        if seen[1] != before[1] or seen[7] != before[7]:
            self._claims = cache.nodeclaims()
            self._lost = memory.lost_claims()
            shared = relink = True
        if seen[2] != before[2] or self._undated:
            # An undated nomination is compared with ``now``: read them every pass then.
            nominations = cache.nominations(now)
            self._undated = any(n.seen is None for n in nominations.values())
            if nominations != self._nominations:
                self._nominations = nominations
                shared = relink = True
        if seen[3] != before[3]:
            covers = memory.covers()
            if covers != self._covers:
                self._covers = covers
                shared = True
            retries, removals = memory.retries(), memory.removals()
            if retries != self._retries or removals != self._removals:
                self._retries, self._removals = retries, removals
                shared = True
        if seen[6] != before[6]:
            refusals = cache.refusals(now)
            if refusals != self._refusals:
                self._refusals = refusals
                shared = True
        if seen[4] != before[4]:
            opted_in = frozenset(cache.opted_in())
            if opted_in != self._opted_in:
                self._opted_in = opted_in
                reparse = shared = True
        if seen[5] != before[5]:
            nodes = cache.nodes()
            if nodes != self._nodes:
                self._nodes = nodes
                shared = True
        used_now = used(cache, memory)  # small (a few nodes): compared every pass
        if used_now != self._used:
            self._used = used_now
            shared = True
        leaving = memory.leaving()  # the pods not read back yet: a burst's worth at most
        if leaving != self._leaving:
            self._leaving = leaving
            shared = True
        if shared:
            self._shared_version += 1
        return reparse, relink

    def _refresh_reserved(self) -> None:
        """Re-sum the GPUs Karpenter's nominations reserve for pending native pods
        (`controller.plan.native_reserved`): a shared input, since a native pod and the
        pods told free GPUs on the same NodeClaim may lie in two partitions. Costs the
        nominations, not the pods."""
        nominated = []
        for key in self._nominations:
            part = self._pod_part.get(key)
            pod = self._parts[part].pods.get(key) if part in self._parts else None
            if pod is not None:
                nominated.append(pod)
        reserved = native_reserved(nominated, self._nominations)
        if reserved != self._reserved:
            self._reserved = reserved
            self._shared_version += 1

    def _refresh_pods(self, reparse: bool) -> None:
        """Re-parse the pending pods that changed (all of them when ``reparse``)."""
        cache = self._cache
        changed = cache.changes(Kind.PENDING_PODS)
        if changed is None or reparse:
            changed = set(self._pod_part) | set(cache.keys(Kind.PENDING_PODS))
        if reparse:
            self._pod_rv.clear()
        for key in changed:
            obj = cache.current(Kind.PENDING_PODS, key)
            rv = str(((obj or {}).get("metadata") or {}).get("resourceVersion", ""))
            if obj is not None and rv and self._pod_rv.get(key) == rv:
                continue  # the same object as before (a relist, an expectation met)
            self._remove_pod(key)
            if obj is None:
                continue
            parsed = parse_served_pod(obj, self._pool_keys)
            if parsed is None:
                continue
            if key[0] not in self._opted_in:
                cache.log_ignored(*key)
                continue
            self._add_pod(key, parsed, rv)

    def _add_pod(self, key: Key, pod: Pod, rv: str) -> None:
        if isinstance(pod, InvalidPod):
            name = partition(pod, self._pools, self._config)
        else:
            # a wrong partition would only cost a whole plan (see `run`)
            where = pool_key(pod)
            name = self._part_of.get(where) or self._part_of.setdefault(
                where, partition(pod, self._pools, self._config)
            )
            if (layer := self._layer_of.get(where)) is None:
                layer = self._layer_of[where] = unplaced_layer(pod, self._pools, self._config)
            if layer:
                self._pod_layer[key] = layer
                self._unplaced[layer] += 1
        part = self._parts.setdefault(name, _Partition())
        part.pods[key] = pod
        part.version += 1
        self._pod_part[key] = name
        if rv:
            self._pod_rv[key] = rv
        self._phases[pod.status.phase if pod.status else "New"] += 1

    def _remove_pod(self, key: Key) -> None:
        self._pod_rv.pop(key, None)
        if layer := self._pod_layer.pop(key, None):
            self._unplaced[layer] -= 1
        name = self._pod_part.pop(key, None)
        if name is None:
            return
        part = self._parts[name]
        pod = part.pods.pop(key)
        part.version += 1
        phase = pod.status.phase if pod.status else "New"
        self._phases[phase] -= 1
        if not self._phases[phase]:
            del self._phases[phase]

    def _refresh_triggers(self) -> bool:
        """Re-parse the trigger pods that changed; True when any did."""
        cache = self._cache
        changed = cache.changes(Kind.TRIGGERS)
        if changed is None:
            changed = set(self._trigger_part) | set(cache.keys(Kind.TRIGGERS))
        for key in changed:
            self._remove_trigger(key)
            obj = cache.current(Kind.TRIGGERS, key)
            if obj is None:
                continue
            trigger = parse_trigger(obj)
            if trigger is None:
                log.warning(
                    "pod %s/%s has trigger labels but no trigger annotations; leaving it alone",
                    *key,
                )
                continue
            name = partition(trigger, self._pools, self._config)
            part = self._parts.setdefault(name, _Partition())
            part.triggers[key] = trigger
            part.version += 1
            self._trigger_part[key] = name
            self._live += not trigger.deleting
        return bool(changed)

    def _remove_trigger(self, key: Key) -> None:
        name = self._trigger_part.pop(key, None)
        if name is None:
            return
        part = self._parts[name]
        trigger = part.triggers.pop(key)
        part.version += 1
        self._live -= not trigger.deleting

    def _shared_claims(self) -> bool:
        """Whether triggers of two partitions point to one NodeClaim (recorded link,
        nomination, or the node a binding trigger is bound to): then `plan` links them
        against each other's GPUs and partitions cannot be planned apart."""
        claim_of_node = {c.node_name: c.name for c in self._claims.values() if c.node_name}
        marked = {name: c.name for c in self._claims.values() for name in c.marked}
        owner: dict[str, Part] = {}
        for name, part in self._parts.items():
            for key, trigger in part.triggers.items():
                nominated = self._nominations.get(key)
                for claim in (
                    trigger.node_claim,
                    claim_of_node.get(trigger.node_name or ""),
                    nominated.node_claim if nominated is not None else None,
                    marked.get(key[1]),
                ):
                    if claim and owner.setdefault(claim, name) != name:
                        return True
        return False


def _merge(plans: Sequence[Plan], labels: tuple[LabelNode, ...]) -> Plan:
    """The union of partitions' plans (creates in group order, as `plan` makes them),
    with ``labels`` for the node labels."""
    return Plan(
        links=tuple(chain.from_iterable(p.links for p in plans)),
        statuses=tuple(chain.from_iterable(p.statuses for p in plans)),
        deletes=tuple(chain.from_iterable(p.deletes for p in plans)),
        creates=tuple(
            sorted(chain.from_iterable(p.creates for p in plans), key=lambda c: c.group.sort_key())
        ),
        demand={k: v for p in plans for k, v in p.demand.items()},
        marks=tuple(chain.from_iterable(p.marks for p in plans)),
        labels=labels,
        claim_deletes=tuple(chain.from_iterable(p.claim_deletes for p in plans)),
        wake=min((p.wake for p in plans if p.wake is not None), default=None),
    )
