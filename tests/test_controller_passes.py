"""The loop's pure rules (`controller.passes`): what a pass applies of a plan, what the
controller's memory records of it, and when a pass is worth running while creates are in
flight; and the memory applying that record (`controller.memory.Memory.remember`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controller.decisions import (
    Bookkeeping,
    CreateTrigger,
    DeleteTrigger,
    Plan,
    PlanConfig,
)
from controller.memory import Memory
from controller.model import GroupKey, PodRef, RetryState
from controller.passes import (
    INFLIGHT_PASS_SECONDS,
    RETRY_HOLD_SECONDS,
    bookkeeping,
    inflight_wait,
    to_apply,
)

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
CONFIG = PlanConfig(cover_seconds=60, cover_max_seconds=300, cooldown_seconds=10)
GROUP = GroupKey("gpu", "l4")
RETRY = RetryState(1, "2026-11-21T12:00:30Z", "failed")


def create(name: str) -> CreateTrigger:
    return CreateTrigger(GROUP, 1, {"metadata": {"name": name}}, (PodRef("ml", name),))


def deletes() -> tuple[DeleteTrigger, ...]:
    """A delete with a NodeReady cover, one of a failed trigger, one of an orphan."""
    trigger = PodRef("gpu-intent-system", "gi-1", "u1")
    return (
        DeleteTrigger(trigger, "covered", (PodRef("ml", "a"), PodRef("ml", "b")), "nc-1"),
        DeleteTrigger(trigger, "failed", retries=((PodRef("ml", "c"), RETRY),)),
        DeleteTrigger(trigger, "no pending pod needs it", orphan=GROUP),
        DeleteTrigger(trigger, "no claim", (PodRef("ml", "d"),), None),
    )


def test_bookkeeping_records_covers_retries_and_cooldowns_with_their_cut_offs() -> None:
    kept = bookkeeping(Plan(deletes=deletes()), NOW, CONFIG, 2)
    assert kept == Bookkeeping(
        at=NOW,
        covers=((("ml", "a"), "nc-1"), (("ml", "b"), "nc-1")),
        retries=((("ml", "c"), RETRY),),
        removals=(GROUP,),
        covers_before=NOW - timedelta(seconds=300),  # the longer of the two cover bounds
        retries_before=NOW - timedelta(seconds=RETRY_HOLD_SECONDS),
        removals_before=NOW - timedelta(seconds=10),
        create_tokens=2,
    )


def test_a_pass_keeps_its_creates_and_spends_a_token_each() -> None:
    decided = Plan(creates=(create("gi-a"), create("gi-b")))
    applied = to_apply(decided, NOW, CONFIG, creating=False)
    assert applied.creates == decided.creates
    assert applied.bookkeeping.create_tokens == 2 and applied.bookkeeping.at == NOW


def test_a_pass_while_creates_are_in_flight_creates_nothing_and_spends_nothing() -> None:
    decided = Plan(deletes=deletes()[:1], creates=(create("gi-a"),))
    applied = to_apply(decided, NOW, CONFIG, creating=True)
    assert applied.creates == () and applied.deletes == decided.deletes
    assert applied.bookkeeping.create_tokens == 0
    assert applied.bookkeeping.covers == ((("ml", "a"), "nc-1"), (("ml", "b"), "nc-1"))
    # A plan of creates alone applies nothing then.
    assert not to_apply(Plan(creates=(create("gi-a"),)), NOW, CONFIG, creating=True)


def test_the_plan_as_planned_carries_no_bookkeeping() -> None:
    assert Plan().bookkeeping == Bookkeeping() and not Plan()


def test_inflight_pass_runs_only_when_money_inputs_moved_and_not_sooner_than_the_window() -> None:
    assert inflight_wait((1, 2), (1, 2), 10.0, 10.5) is None  # nothing moved: skip
    assert inflight_wait((1, 3), (1, 2), 10.0, 10.25) == INFLIGHT_PASS_SECONDS - 0.25
    wait = inflight_wait((1, 3), (1, 2), 10.0, 12.0)
    assert wait is not None and wait <= 0  # the window is over: at once


def test_memory_remembers_a_plans_bookkeeping_and_forgets_past_the_cut_offs() -> None:
    memory = Memory(lambda: 0.0)
    memory.remember(bookkeeping(Plan(deletes=deletes()), NOW, CONFIG))
    assert memory.covers() == {("ml", "a"): ("nc-1", NOW), ("ml", "b"): ("nc-1", NOW)}
    assert memory.retries() == {("ml", "c"): RETRY}
    assert memory.removals() == {GROUP: NOW}
    version = memory.version()
    memory.remember(Bookkeeping())  # records and forgets nothing
    assert memory.version() == version
    later = NOW + timedelta(seconds=11)
    memory.remember(bookkeeping(Plan(), later, CONFIG))  # the cooldown is over
    assert memory.removals() == {} and memory.retries() and memory.covers()
    much_later = NOW + timedelta(seconds=301)
    memory.remember(bookkeeping(Plan(), much_later, CONFIG))
    assert memory.covers() == {} and memory.retries() == {}
