"""bench.mix: issue 26's 160-pod mix written as manifests the demo reads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.mix import MIX_PODS, mix_pods, write_mix
from gpu_intent.demo.manifests import read_examples
from intent.inference import infer_intent


def test_the_mix_is_the_issue_s_160_pods_by_layer() -> None:
    pods = mix_pods()
    assert len(pods) == MIX_PODS == 160
    assert len({p["metadata"]["name"] for p in pods}) == 160
    by_scheduler = Counter(p["spec"].get("schedulerName", "default-scheduler") for p in pods)
    assert by_scheduler == {
        "hami-scheduler": 34,
        "kai-scheduler": 102,
        "tensor-fusion-scheduler": 8,
        "default-scheduler": 16,
    }
    intents = [infer_intent(p) for p in pods]
    assert all(i is not None for i in intents)
    assert Counter(i.model for i in intents if i is not None) == {
        "a10g": 34, "t4": 58, "l4": 54, None: 6, "l40s": 8
    }  # fmt: skip


def test_the_demo_reads_the_written_mix_and_it_repeats_to_any_size(tmp_path: Path) -> None:
    paths = write_mix(tmp_path / "mix", 1000)
    assert [p.name for p in paths] == ["00-setup.yaml", "20-pods.yaml"]
    docs = [d for _, d in read_examples(tmp_path / "mix")]
    kinds = Counter(d["kind"] for d in docs)
    assert kinds["Pod"] == 1000 and kinds["NodePool"] >= 3 and kinds["Namespace"] >= 1
    limits = [d["spec"]["limits"]["nvidia.com/gpu"] for d in docs if d["kind"] == "NodePool"]
    assert set(limits) == {"1000"}  # raised: 1,000 pods need more than the examples allow
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]
    assert names[0] == "hami-a10g-0000" and names[160] == "hami-a10g-0160"
    with pytest.raises(ValueError, match="at least 1"):
        mix_pods(0)
