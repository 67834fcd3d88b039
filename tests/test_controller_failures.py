"""Failed scale-ups, node protection, cooldown and caps: the pure rules
(`controller.failures`) and how `controller.plan.plan` applies them."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from controller_fixtures import T0, gpu_pod, nodeclaim
from test_controller_plan import CONFIG, KAI, NOW, live_trigger, snapshot

from controller.failures import (
    TokenBucket,
    backoff_seconds,
    protections,
    stamp,
)
from controller.model import FAILED, WAITING, GroupKey, RetryState
from controller.nodes import parse_node, parse_nodeclaim, parse_refusal
from controller.plan import plan

FAST = dataclasses.replace(CONFIG, retry_base_seconds=10, retry_max_seconds=25, retry_attempts=3)


def test_backoff_doubles_up_to_its_maximum() -> None:
    assert [backoff_seconds(n, 10, 25) for n in (1, 2, 3, 4)] == [10, 20, 25, 25]


def test_retry_state_round_trips_and_rejects_garbage() -> None:
    state = RetryState(2, "2026-11-21T12:00:40Z", "why")
    assert RetryState.from_annotation(state.to_annotation()) == state
    for raw in (None, "", "nope", "[]", '{"attempts":-1,"retryAt":"x"}', '{"attempts":1}'):
        assert RetryState.from_annotation(raw) is None


def failed_trigger(**claim: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pod's trigger linked to NodeClaim ``nc-1``, and the claims (``claim`` None: gone)."""
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    trigger = live_trigger(first, node_claim="nc-1")
    claims = [nodeclaim("nc-1", "gpu-standard", model="l4", **claim)] if claim else []
    return trigger, claims


def test_a_nodeclaim_deleted_before_ready_fails_the_trigger_and_the_pod_backs_off() -> None:
    trigger, _ = failed_trigger()
    result = plan(snapshot([gpu_pod("a", "1", model="l4")], triggers=[trigger]), FAST)
    [delete] = result.deletes
    assert "deleted before it was Ready" in delete.reason
    [(ref, retry)] = delete.retries
    assert (str(ref), retry.attempts, retry.retry_at) == (
        "ml/a",
        1,
        stamp(NOW + timedelta(seconds=10)),
    )
    [told] = result.statuses
    assert told.status.phase == WAITING and told.retry == retry
    assert told.event is not None and told.event.reason == "ScaleUpRetry"
    assert result.creates == ()  # no new trigger in the same pass


def test_a_marked_nodeclaim_lost_before_the_link_was_written_fails_the_trigger() -> None:
    """Karpenter deleted the NodeClaim it bought for the trigger (insufficient capacity
    within a second) before the controller recorded the link: the trigger carries no
    ``gpu-intent.io/nodeclaim``, and only the cache's memory of the marked NodeClaim
    (`Snapshot.lost`) says its scale-up failed. Without it the trigger would look merely
    unlinked and Karpenter would buy for it again, without backoff."""
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    trigger = live_trigger(first, name="gi-x")
    base = snapshot([gpu_pod("a", "1", model="l4")], triggers=[trigger])
    assert plan(base, FAST).deletes == ()  # unlinked, nothing lost: it waits
    lost = dataclasses.replace(base, lost={"gi-x": "nc-9"})
    result = plan(lost, FAST)
    [delete] = result.deletes
    assert delete.reason.startswith("failed: NodeClaim nc-9 was deleted before it was Ready")
    [(ref, retry)] = delete.retries
    assert (str(ref), retry.attempts) == ("ml/a", 1)
    assert result.creates == ()
    # Karpenter already bought again for it (a newer NodeClaim carries its marker): that
    # one is its link, and nothing failed.
    again = snapshot(
        [gpu_pod("a", "1", model="l4")],
        triggers=[trigger],
        claims=[nodeclaim("nc-10", "gpu-standard", model="l4", marked=["gi-x"])],
    )
    assert plan(dataclasses.replace(again, lost={"gi-x": "nc-9"}), FAST).deletes == ()
    # Another trigger's loss is not this one's.
    assert plan(dataclasses.replace(base, lost={"gi-y": "nc-9"}), FAST).deletes == ()


def test_a_pod_in_backoff_waits_then_gets_a_new_trigger() -> None:
    retry = RetryState(1, stamp(NOW + timedelta(seconds=10)), "NodeClaim nc-1 was deleted")
    pod = gpu_pod(
        "a", "1", model="l4", extra_annotations={"gpu-intent.io/retry": retry.to_annotation()}
    )
    waiting = plan(snapshot([pod]), FAST)
    assert waiting.creates == ()
    assert [s.status.phase for s in waiting.statuses] == [WAITING]
    assert "1 of 3" in waiting.statuses[0].status.message
    later = plan(snapshot([pod], now=NOW + timedelta(seconds=10)), FAST)
    assert [str(r) for r in later.creates[0].serves] == ["ml/a"]  # told Triggered on create


def test_the_held_retry_counts_before_the_annotation_is_written() -> None:
    held = RetryState(1, stamp(NOW + timedelta(seconds=10)), "x")
    base = snapshot([gpu_pod("a", "1", model="l4")])
    result = plan(dataclasses.replace(base, retries={("ml", "a"): held}), FAST)
    assert result.creates == ()


def test_after_the_last_attempt_the_pod_is_failed_with_what_to_do() -> None:
    two = RetryState(2, stamp(NOW - timedelta(seconds=1)), "earlier")
    pod = gpu_pod(
        "a", "1", model="l4", extra_annotations={"gpu-intent.io/retry": two.to_annotation()}
    )
    trigger, _ = failed_trigger()
    result = plan(snapshot([pod], triggers=[trigger]), FAST)
    [told] = result.statuses
    assert told.status.phase == FAILED
    assert told.retry is not None and told.retry.attempts == 3
    assert told.event is not None and (told.event.type, told.event.reason) == (
        "Warning",
        "ScaleUpFailed",
    )
    assert "kubectl annotate pod -n ml a gpu-intent.io/retry-" in told.status.message
    # Failed stays failed: no trigger on the next passes, however late.
    failed = gpu_pod(
        "a", "1", model="l4", extra_annotations={"gpu-intent.io/retry": told.retry.to_annotation()}
    )
    again = plan(snapshot([failed], now=NOW + timedelta(hours=1)), FAST)
    assert again.creates == ()
    assert [s.status.phase for s in again.statuses] == [FAILED]


def test_a_nodeclaim_never_initialized_fails_after_the_timeout_and_is_deleted() -> None:
    config = dataclasses.replace(FAST, init_timeout_seconds=60)
    trigger, claims = failed_trigger(launched=True, created="2026-11-21T11:59:00Z")
    pods = [gpu_pod("a", "1", model="l4")]
    assert (
        plan(
            snapshot(pods, triggers=[trigger], claims=claims, now=NOW - timedelta(seconds=10)),
            config,
        ).deletes
        == ()
    )
    result = plan(snapshot(pods, triggers=[trigger], claims=claims), config)
    [delete] = result.deletes
    assert "not Ready 60s after its creation" in delete.reason
    assert [c.name for c in result.claim_deletes] == ["nc-1"]


def refusal_event(trigger: dict[str, Any], message: str) -> dict[str, Any]:
    return {
        "reason": "FailedScheduling",
        "message": message,
        "involvedObject": {
            "kind": "Pod",
            "namespace": trigger["metadata"]["namespace"],
            "name": trigger["metadata"]["name"],
            "uid": trigger["metadata"]["uid"],
        },
        "lastTimestamp": T0,
    }


def test_a_nodepool_at_its_limits_fails_the_trigger_with_karpenters_words() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    trigger = live_trigger(first)
    words = 'Failed to schedule pod, all available instance types exceed limits for nodepool: "gpu-standard"'
    refusal = parse_refusal(refusal_event(trigger, words))
    assert refusal is not None
    assert parse_refusal(refusal_event(trigger, "0/3 nodes are available")) is None
    base = snapshot([gpu_pod("a", "1", model="l4")], triggers=[trigger])
    result = plan(dataclasses.replace(base, refusals={refusal.pod: refusal}), FAST)
    [delete] = result.deletes
    assert "NodePool gpu-standard is at its limits" in delete.reason and words in delete.reason
    # A refusal of an earlier pod of the same name is not this trigger's.
    stale = dataclasses.replace(refusal, uid="another")
    assert plan(dataclasses.replace(base, refusals={refusal.pod: stale}), FAST).deletes == ()


def test_an_orphan_trigger_is_removed_and_its_group_cools_down() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    trigger = live_trigger(first)
    gone = plan(snapshot([], triggers=[trigger]), FAST)
    [delete] = gone.deletes
    assert delete.orphan == GroupKey("gpu-standard", "l4", placement=KAI)
    config = dataclasses.replace(FAST, cooldown_seconds=5)
    again = snapshot([gpu_pod("b", "1", model="l4")])
    removals = {GroupKey("gpu-standard", "l4", placement=KAI): NOW - timedelta(seconds=2)}
    cooling = plan(dataclasses.replace(again, removals=removals), config)
    assert cooling.creates == ()
    assert [s.status.phase for s in cooling.statuses] == [WAITING]
    assert "cooldown" in cooling.statuses[0].status.message
    # Another group is not held back, and the pods still pending after it get a trigger.
    other = snapshot([gpu_pod("c", "1", model="t4")])
    assert len(plan(dataclasses.replace(other, removals=removals), config).creates) == 1
    after = dataclasses.replace(again, removals=removals, now=NOW + timedelta(seconds=3))
    assert len(plan(after, config).creates) == 1


def test_a_trigger_emptied_by_a_new_packing_starts_no_cooldown() -> None:
    """A pass that deletes a trigger no bin needs while it makes a new trigger of the
    same group did not see pods come and go: its demand was packed anew (in a
    1,000-pod burst, HAMi's 1-card pods moved onto the cards of a 2-vGPU pod, leaving
    a 1-GPU trigger empty beside new 2-GPU ones). A cooldown would hold back the rest
    of the burst for 10 s."""
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    trigger = live_trigger(first)
    moved = plan(snapshot([gpu_pod("b", "2", model="l4")], triggers=[trigger]), FAST)
    [delete] = moved.deletes
    assert [c.gpus for c in moved.creates] == [2]
    assert delete.orphan is None  # the group's demand stands: no cooldown
    gone = plan(snapshot([], triggers=[trigger]), FAST)
    assert gone.deletes[0].orphan == GroupKey("gpu-standard", "l4", placement=KAI)


def test_a_pod_above_the_gpus_per_trigger_cap_waits_and_says_so() -> None:
    config = dataclasses.replace(CONFIG, max_gpus_per_trigger=4)
    result = plan(
        snapshot([gpu_pod("big", "8", model="l4"), gpu_pod("ok", "4", model="l4")]), config
    )
    assert [c.gpus for c in result.creates] == [4]
    phases = {str(s.ref): (s.status.phase, s.status.message) for s in result.statuses}
    assert phases["ml/big"][0] == WAITING and "--max-gpus-per-trigger" in phases["ml/big"][1]


def test_the_per_pool_trigger_cap_counts_live_triggers_of_the_pool() -> None:
    config = dataclasses.replace(CONFIG, max_triggers_per_pool=2)
    pods = [gpu_pod(f"p{i}", "1", model="l4") for i in range(3)] + [gpu_pod("l", "1", model="l40s")]
    result = plan(snapshot(pods), config)
    assert sorted(c.group.pool for c in result.creates) == [
        "gpu-large",
        "gpu-standard",
        "gpu-standard",
    ]
    waiting = [s for s in result.statuses if s.status.phase == WAITING]
    assert len(waiting) == 1 and "NodePool gpu-standard" in waiting[0].status.message
    # Triggers of the pool planned elsewhere (another partition) count too.
    elsewhere = dataclasses.replace(snapshot(pods), live_elsewhere_by_pool={"gpu-standard": 2})
    assert [c.group.pool for c in plan(elsewhere, config).creates] == ["gpu-large"]


def test_the_rate_limit_tokens_bound_creations_per_pass() -> None:
    pods = [gpu_pod(f"p{i}", "1", model="l4") for i in range(3)]
    result = plan(dataclasses.replace(snapshot(pods), create_tokens=1), CONFIG)
    assert len(result.creates) == 1
    assert sum("rate limit" in s.status.message for s in result.statuses) == 2


def test_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(2.0, 2.0, now=0.0)
    assert bucket.available(0.0) == 2
    bucket.take(2, 0.0)
    assert bucket.available(0.0) == 0
    assert bucket.seconds_to_next(0.0) == pytest.approx(0.5)
    assert bucket.available(0.5) == 1
    assert bucket.available(100.0) == 2
    with pytest.raises(ValueError):
        TokenBucket(0, 1, 0.0)


def test_protection_while_a_trigger_stands_and_until_pods_bind_or_time_passes() -> None:
    launching = parse_nodeclaim(nodeclaim("nc-1", "gpu-standard", launched=True, marked=["gi-x"]))
    ready = parse_nodeclaim(
        nodeclaim("nc-2", "gpu-standard", ready=True, node="n2", marked=["gi-y"], created=T0)
    )
    foreign = parse_nodeclaim(nodeclaim("nc-3", "gpu-standard", ready=True, node="n3"))
    claims = {c.name: c for c in (launching, ready, foreign)}
    nodes = {"n2": parse_node({"metadata": {"name": "n2"}})}
    changes = protections(claims, nodes, frozenset({"gi-x"}), {}, NOW, 60)
    assert [(c.kind, c.name, c.protect) for c in changes] == [
        ("nodeclaim", "nc-1", True),
        ("nodeclaim", "nc-2", True),
        ("node", "n2", True),  # Karpenter reads a registered node's own annotations
    ]
    # A pod we served is bound on nc-2's node: protection is no longer needed there.
    protected = {
        name: dataclasses.replace(c, protected=name != "nc-3") for name, c in claims.items()
    }
    nodes = {"n2": dataclasses.replace(nodes["n2"], protected=True)}
    bound = protections(protected, nodes, frozenset({"gi-x"}), {"n2": Decimal(1)}, NOW, 60)
    assert [(c.name, c.protect) for c in bound] == [("nc-2", False), ("n2", False)]
    # Or the grace period passed (nc-2 Ready at T0, 5 s before NOW).
    late = protections(protected, nodes, frozenset({"gi-x"}), {}, NOW, 4)
    assert [(c.name, c.protect) for c in late] == [("nc-2", False), ("n2", False)]
    # A NodeClaim nobody bought through gpu-intent is never touched.
    assert all(c.name not in ("nc-3", "n3") for c in changes + bound + late)
