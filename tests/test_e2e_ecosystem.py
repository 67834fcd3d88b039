"""The layers whose device plugins replace NVIDIA's on their nodes, served end to end: the
demo on `examples/ecosystem` (Volcano vGPU on L4s, gpushare on T4s, MIG 1g.5gb slices of
A100s), with the sim playing each layer's device plugin and scheduler. Karpenter cannot
simulate their resources; gpu-intent's triggers buy in the pool each layer runs in, and
no NodeClaim goes beyond what the same Karpenter buys for the ideal native twin."""

from __future__ import annotations

import io
import json
from pathlib import Path

from gpu_intent import cli
from gpu_intent.demo.story import run_demo

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "ecosystem"

#: The pool each layer's pods must land in: the only one whose nodes run its device plugin.
POOL_OF = {"volcano-vgpu": "gpu-volcano", "gpushare": "gpu-gpushare", "mig-slice": "gpu-mig"}


async def test_volcano_gpushare_and_mig_pods_bind_with_nothing_beyond_the_ideal_twin() -> None:
    args = cli.build_parser().parse_args(
        ["demo", "--placement", "volcano=volcano.sh/vgpu.enabled=true"]
    )
    out, err = io.StringIO(), io.StringIO()
    code = await run_demo(EXAMPLES, output="json", out=out, err=err, plan=cli.plan_config(args))
    summary = json.loads(out.getvalue())
    assert code == 0 and summary["ok"], (summary["problems"], err.getvalue()[-3000:])
    pods = summary["pods"]
    assert len(pods) == 20
    claims = {c["name"]: c for c in summary["nodeClaims"]}
    for pod in pods:
        assert pod["phase"] == "Scheduled", pod
        prefix = pod["name"].rsplit("-", 1)[0]
        assert claims[pod["nodeClaim"]]["nodePool"] == POOL_OF[prefix], pod
    # Every NodeClaim created is counted: as many as, and no dearer than, the twin's.
    assert len(claims) == len(summary["nativeNodeClaims"]) == 3
    assert summary["costPerHour"]["bought"] <= summary["idealCostPerHour"]
    assert summary["gpusLowerBound"] == {"a100": 2, "l4": 3, "t4": 2}
    assert not summary["beyondNeed"] and summary["triggersLeft"] == 0
    # Their NodeClaims never turn Ready in Karpenter (nvidia.com/gpu never registers);
    # the statuses say what the node offers instead.
    for resource in (
        "volcano.sh/vgpu-number=",
        "aliyun.com/gpu-mem=60",
        "nvidia.com/mig-1g.5gb=56",
    ):
        assert f"{resource}" in err.getvalue() and "its node advertises" in err.getvalue()
