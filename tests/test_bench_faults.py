"""The pure parts of `bench.faults`: the NodeClaims a burst needs and the p99 bucket."""

from __future__ import annotations

from bench.faults import Sample, burst_pods, nodeclaims_needed, p99_bucket
from webhook.inference import infer_intent


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
    assert p99_bucket(first, last) == 1.0
