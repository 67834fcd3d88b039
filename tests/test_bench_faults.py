"""The pure parts of `bench.faults`: the NodeClaims a burst needs, the controller's
counters over a window (across a restart) and the p99 bucket."""

from __future__ import annotations

from bench.faults import Sample, burst_pods, nodeclaims_needed, p99_bucket, window
from intent.inference import infer_intent


def test_each_burst_pod_needs_one_whole_instance() -> None:
    pods = burst_pods(4)
    intents = [infer_intent(p) for p in pods]
    assert [i.model for i in intents if i] == ["t4", "l4", "t4", "l4"]
    assert all(i is not None and i.gpus == 4 for i in intents)
    assert nodeclaims_needed(4) == 4  # 4 GPUs fill a g4dn.12xlarge or a g6.12xlarge


def test_p99_bucket_between_two_samples() -> None:
    first = Sample(0, 0, 0, 0, 0, 0, 10, 0.0, {0.1: 5, 1.0: 10, float("inf"): 10})
    last = Sample(5, 0, 0, 0, 0, 0, 110, 0.0, {0.1: 85, 1.0: 109, float("inf"): 110})
    # 100 passes between: 80 under 0.1 s, 99 under 1 s, all under +Inf.
    assert p99_bucket(window([first, last])) == 1.0


def test_a_window_spanning_a_restart_counts_from_zero_after_it() -> None:
    """The restarted controller's counters begin again: the window never goes negative
    (it printed "-3 passes" before), and the passes after the restart are counted."""
    before = Sample(0, 0, 0, 0, 0, 0, 10, 5.0, {1.0: 10}, 1.0)
    later = Sample(5, 0, 0, 0, 0, 0, 14, 9.0, {1.0: 14}, 2.0)
    restarted = Sample(10, 0, 0, 0, 0, 0, 3, 0.6, {1.0: 3}, 0.3)
    counted = window([before, later, restarted])
    assert counted.passes == 4 + 3
    assert counted.reconcile_sum == 4.0 + 0.6
    assert counted.plan_sum == 1.0 + 0.3
    assert counted.buckets == {1.0: 7}
