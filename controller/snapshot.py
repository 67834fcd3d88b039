"""The planner's input (`controller.decisions.Snapshot`), read from the informer cache
(`controller.cache.InformerCache`: the cluster) and the controller's memory
(`controller.memory.Memory`: covers, retries, cooldowns, pods that got a node).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from controller.cache import InformerCache, Kind
from controller.decisions import Snapshot
from controller.memory import Memory
from controller.plan import native_reserved


def used(cache: InformerCache, memory: Memory) -> dict[str, Decimal]:
    """GPUs of the pods we served found bound, by node name (`Memory.used`), nodes no
    cached NodeClaim names any more forgotten once they add up."""
    return memory.used(
        cache.held(Kind.NODECLAIMS),
        lambda: {c.node_name for c in cache.nodeclaims().values() if c.node_name},
    )


def snapshot(cache: InformerCache, memory: Memory, now: datetime) -> Snapshot:
    """Parse the cache into the planner's input, at ``now`` (timezone-aware; pure apart
    from the clock read for expectation expiry). Parses only what changed since the last
    call, but walks every object: `controller.incremental` is the pass that costs what
    changed."""
    nodepools = cache.nodepools()
    nodeclaims = cache.nodeclaims()
    pods = cache.served_pods(nodepools)
    nominations = cache.nominations(now)
    triggers = cache.triggers()
    return Snapshot(
        pods,
        triggers,
        nodeclaims,
        nodepools,
        now,
        memory.scheduled(),
        nominations,
        memory.covers(),
        used(cache, memory),
        cache.nodes(),
        retries=memory.retries(),
        refusals=cache.refusals(now),
        removals=memory.removals(),
        last_bind=memory.last_bind(),
        lost=memory.lost_claims(),
        reserved=native_reserved(pods, nominations),
        opted_in=frozenset(cache.opted_in()),
        leaving=memory.leaving(),
    )
