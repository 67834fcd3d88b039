"""The loop's rules, decided without awaits or clock reads (the caller passes the times):
what a pass applies of a plan (`to_apply`), what the controller's memory records of it
(`bookkeeping`), and whether a pass is worth running while creates are in flight
(`inflight_wait`). The side effects happen in `controller.reconciler.Controller`, which
applies the memory's part to `controller.memory.Memory` and the writes through
`controller.executor.Executor`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from controller.decisions import Bookkeeping, Plan, PlanConfig, without_creates

#: Seconds the controller's memory holds a pod's new retry state after its trigger
#: failed (the status writer, rate limited, writes the annotation well within that).
RETRY_HOLD_SECONDS = 120.0

#: While creates are in flight, seconds between passes at least (`inflight_wait`):
#: Karpenter's batch idle window (1 s, ``BATCH_IDLE_DURATION``), within which a trigger
#: whose pods got a node must be deleted or marked.
INFLIGHT_PASS_SECONDS = 1.0


def bookkeeping(
    decided: Plan, now: datetime, config: PlanConfig, create_tokens: int = 0
) -> Bookkeeping:
    """What the memory records when ``decided`` is applied at ``now``: the NodeReady
    covers of the pods of deleted triggers (`controller.decisions.DeleteTrigger.cover`),
    the retry states of failed triggers' pods and the cooldowns of orphaned groups, and
    the cut-offs past which such records are forgotten: a cover may outlive
    ``cover_seconds`` while the schedulers are binding
    (`controller.capacity.cover_holds`), so it is kept as long as it may hold; a retry
    state until the status writer has surely written it (`RETRY_HOLD_SECONDS`); a
    removal for ``cooldown_seconds``. ``create_tokens``: creations spent. Pure."""
    deletes = decided.deletes
    return Bookkeeping(
        at=now,
        covers=tuple(
            ((ref.namespace, ref.name), delete.node_claim)
            for delete in deletes
            if delete.node_claim and delete.cover
            for ref in delete.cover
        ),
        retries=tuple(
            ((ref.namespace, ref.name), retry)
            for delete in deletes
            for ref, retry in delete.retries
        ),
        removals=tuple(delete.orphan for delete in deletes if delete.orphan is not None),
        covers_before=now - timedelta(seconds=max(config.cover_seconds, config.cover_max_seconds)),
        retries_before=now - timedelta(seconds=RETRY_HOLD_SECONDS),
        removals_before=now - timedelta(seconds=config.cooldown_seconds),
        create_tokens=create_tokens,
    )


def to_apply(decided: Plan, now: datetime, config: PlanConfig, *, creating: bool) -> Plan:
    """The plan a pass applies at ``now``: ``decided`` with its `bookkeeping` (the
    creates it keeps spend as many tokens of the rate limit), and without its creates
    while the last pass's are still in flight (``creating``): that pass deletes, marks,
    links, labels and reports, and leaves creating to a pass after them (a trigger's
    name carries the second it was planned in, so creating again for the same pods now
    could make a second trigger for them). Pure."""
    if creating and decided.creates:
        decided = without_creates(decided)
    return replace(decided, bookkeeping=bookkeeping(decided, now, config, len(decided.creates)))


def inflight_wait(
    inputs: tuple[int, ...], seen: tuple[int, ...], last_pass: float, now: float
) -> float | None:
    """While creates are in flight, a pass can only delete, mark, link, label and report,
    and planning 10,000 pods each time would take the CPU the creates need: one runs only
    when something it could act on moved since the last pass (``inputs``, the versions of
    what can make deletes and marks, differ from ``seen``, those the last pass saw), at
    most once per `INFLIGHT_PASS_SECONDS` (``last_pass``, ``now``: monotonic seconds).
    Returns None to skip this turn, else the seconds to wait first (none when not
    positive). Pure."""
    if inputs == seen:
        return None
    return last_pass + INFLIGHT_PASS_SECONDS - now
