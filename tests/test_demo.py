"""``gpu-intent demo``: the pure need and cost calculation, a JSON run over examples in
a namespace other than ``ml``, and malformed examples."""

from __future__ import annotations

import io
import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpu_intent import cli
from gpu_intent.demo import (
    ClaimCost,
    DemandPod,
    Need,
    balance,
    bought_claim,
    default_examples,
    load_manifests,
    native_need,
    native_twins,
    run_demo,
)
from intent.contract import Intent
from sim.catalog import by_name


def nodepools() -> list[dict[str, Any]]:
    return [d for d in load_manifests(default_examples()) if d["kind"] == "NodePool"]


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(name: str, cpu: str = "1", memory: str = "2Gi") -> dict[str, Any]:
    """A pod with cpu and memory requests that tolerates the GPU pools' taint."""
    return {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
        },
    }


def demand(name: str, gpus: str, model: str | None, pool: str | None = None) -> DemandPod:
    return DemandPod(f"team/{name}", Intent(Decimal(gpus), model=model, pool=pool), pod(name))


def bought(name: str, instance_type: str, pool: str = "gpu-standard", **kw: Any) -> ClaimCost:
    it = by_name(instance_type)
    return ClaimCost(name, pool, it.name, it.gpu_name or None, it.gpu_count, it.price, **kw)


def test_two_half_l4_pods_make_one_one_gpu_twin() -> None:
    twins = native_twins([demand("a", "0.5", "l4"), demand("b", "0.5", "l4")])
    assert len(twins) == 1
    (twin,) = twins
    requests = twin["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert twin["spec"]["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "l4"}
    assert twin["metadata"]["annotations"]["gpu-intent.io/native-twin-of"] == "team/a,team/b"


def test_twins_round_up_whole_pods_and_use_pools() -> None:
    twins = native_twins(
        [
            demand("big", "1.5", "a10g", pool="gpu-standard"),
            demand("anon", "1", None),
            DemandPod("team/cpu", None, pod("cpu")),
        ],
        default_nodepool="gpu-standard",
    )
    gpus = [
        t["spec"]["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu")
        for t in twins
    ]
    assert gpus == ["2", "1", None]
    assert twins[0]["spec"]["nodeSelector"] == {
        "karpenter.k8s.aws/instance-gpu-name": "a10g",
        "karpenter.sh/nodepool": "gpu-standard",
    }
    assert twins[1]["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu-standard"}
    assert twins[2]["metadata"]["name"] == "cpu"  # not a GPU pod: passed through


def test_native_need_of_two_half_l4_pods_is_one_g6_xlarge() -> None:
    need = native_need([demand("a", "0.5", "l4"), demand("b", "0.5", "l4")], nodepools())
    assert dict(need.gpus) == {"l4": 1}
    assert [(c.node_pool, c.instance_type, c.gpu_model, c.gpus) for c in need.claims] == [
        ("gpu-standard", "g6.xlarge", "l4", 1)
    ]
    assert need.claims[0].price_per_hour == by_name("g6.xlarge").price
    assert not need.unplaced

    result = balance([bought("gpu-standard-abcde", "g6.xlarge")], need)
    assert result.beyond == {}
    assert result.cost_bought == result.cost_native == by_name("g6.xlarge").price
    assert dict(result.gpus_bought) == dict(result.gpus_needed) == {"l4": 1}


def test_an_extra_nodeclaim_is_beyond_the_need() -> None:
    need = native_need([demand("a", "0.5", "l4"), demand("b", "0.5", "l4")], nodepools())
    claims = [bought("first", "g6.xlarge"), bought("second", "g6.xlarge", deleted=True)]
    result = balance(claims, need)
    assert list(result.beyond) == ["second"]
    assert (
        "NodeClaim 2 of 2 created (g6.xlarge, 1 l4); the ideal native twin's solve makes 1"
        in (result.beyond["second"])
    )
    assert result.cost_bought == 2 * result.cost_native
    assert dict(result.gpus_bought) == {"l4": 2}


def test_a_nodeclaim_of_an_unneeded_model_or_never_launched_is_beyond_the_need() -> None:
    need = native_need([demand("a", "1", "l4"), demand("b", "1", "t4")], nodepools())
    assert len(need.claims) == 2
    # Within the count, but t4 GPUs beyond what t4 needs.
    wrong = balance([bought("t4-a", "g4dn.xlarge"), bought("t4-b", "g4dn.xlarge")], need)
    assert list(wrong.beyond) == ["t4-b"]
    assert "t4 GPUs bought would reach 2, needed 1" in wrong.beyond["t4-b"]
    # A NodeClaim that never launched still counts.
    unlaunched = ClaimCost("ghost", "gpu-standard", None, None, 0, None, launched=False)
    counted = balance([bought("l4", "g6.xlarge"), bought("t4", "g4dn.xlarge"), unlaunched], need)
    assert list(counted.beyond) == ["ghost"]
    assert counted.claims_bought == 3 and counted.claims_native == 2


def test_more_smaller_nodeclaims_at_no_more_cost_are_not_beyond_the_need() -> None:
    one_big = (bought("big", "g6.12xlarge"),)  # 4 L4 GPUs
    need = Need({"l4": 4}, one_big, {}, {"l4": 4})
    smalls = [bought(f"small-{i}", "g6.xlarge") for i in range(4)]
    assert 4 * by_name("g6.xlarge").price <= by_name("g6.12xlarge").price
    assert balance(smalls, need).beyond == {}
    # Past the count and the cost: beyond, with the ideal's cost named.
    need = Need({"l4": 4}, (bought("one", "g6.xlarge"),), {}, {"l4": 4})
    over = balance([bought("a", "g6.xlarge"), bought("b", "g6.xlarge")], need)
    assert list(over.beyond) == ["b"]
    assert "the ideal native twin's solve makes 1 for $0.8048/h" in over.beyond["b"]


def test_gpus_of_another_model_may_serve_the_pods_of_no_model() -> None:
    """KAI puts a ``gpu-memory`` pod of no model on a card of any model: the model that
    took it may go beyond its own need by what the pods of no model need, while the GPUs
    of all models stay within the ideal's total."""
    need = native_need([demand("a", "1", "l4"), demand("b", "1", None)], nodepools())
    assert dict(need.lower_bound) == {"l4": 1, "any": 1}
    l4 = (bought("l4", "g6.xlarge"),)
    two = Need(need.gpus, (*l4, bought("t4", "g4dn.xlarge")), {}, need.lower_bound)
    assert balance([*l4, bought("l4-b", "g6.xlarge")], two).beyond == {}
    need = Need({"l4": 1, "any": 3}, two.claims, {}, {"l4": 1, "any": 3})
    assert balance([bought("t4x4", "g4dn.12xlarge")], need).beyond == {}
    over = balance([*l4, bought("t4x4", "g4dn.12xlarge")], need)
    assert list(over.beyond) == ["t4x4"]
    assert "t4 GPUs bought would reach 4, needed 1 and 3 of any model" in over.beyond["t4x4"]
    # More than the pods of no model need: beyond.
    need = Need({"l4": 1, "any": 1}, l4 * 2, {}, {"l4": 1, "any": 1})
    assert list(balance([bought("l4x4", "g6.12xlarge")], need).beyond) == ["l4x4"]


def test_bought_claim_reads_the_launched_instance_type() -> None:
    claim = {
        "metadata": {
            "name": "gpu-large-xyz12",
            "labels": {
                "karpenter.sh/nodepool": "gpu-large",
                "node.kubernetes.io/instance-type": "g6e.xlarge",
            },
        },
        "status": {"conditions": [{"type": "Launched", "status": "True"}]},
    }
    cost = bought_claim(claim)
    assert (cost.node_pool, cost.instance_type, cost.gpu_model, cost.gpus) == (
        "gpu-large", "g6e.xlarge", "l40s", 1,
    )  # fmt: skip
    assert cost.price_per_hour == by_name("g6e.xlarge").price and cost.launched
    fresh = bought_claim({"metadata": {"name": "n", "labels": {}}, "status": {}})
    assert not fresh.launched and fresh.price_per_hour is None and fresh.gpus == 0


def examples_in_namespace(tmp_path: Path, namespace: str) -> Path:
    """The default examples with their workload namespace ``ml`` renamed."""
    target = tmp_path / "examples"
    target.mkdir()
    for path in default_examples().glob("*.yaml"):
        text = path.read_text()
        text = text.replace("name: ml\n", f"name: {namespace}\n")
        text = text.replace("namespace: ml\n", f"namespace: {namespace}\n")
        (target / path.name).write_text(text)
    return target


async def test_json_run_follows_every_pod_of_another_namespace(tmp_path: Path) -> None:
    examples = examples_in_namespace(tmp_path, "research")
    expected = {
        (d["metadata"].get("name") or d["metadata"]["generateName"])
        for d in load_manifests(examples)
        if d["kind"] == "Pod"
    }
    assert {d["metadata"]["namespace"] for d in load_manifests(examples) if d["kind"] == "Pod"} == {
        "research"
    }
    out, err = io.StringIO(), io.StringIO()
    code = await run_demo(examples, output="json", out=out, err=err)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, out.getvalue()  # one JSON object, nothing else on stdout
    summary = json.loads(lines[0])
    assert "POD" in err.getvalue() and "Instance cost" in err.getvalue()
    for key in ("ok", "pods", "nodeClaims", "gpusNeeded", "gpusBought", "costPerHour"):
        assert key in summary
    assert isinstance(summary["ok"], bool) and (code == 0) == summary["ok"]
    assert set(summary["costPerHour"]) >= {"bought", "native"}
    pods = summary["pods"]
    assert {p["namespace"] for p in pods} == {"research"}
    names = {p["name"] for p in pods}
    assert len(pods) == len(expected)
    assert all(any(n == e or n.startswith(e) for n in names) for e in expected)
    for p in pods:
        assert set(p) >= {
            "namespace",
            "name",
            "intent",
            "node",
            "nodeClaim",
            "phase",
            "secondsToNode",
        }
        assert p["node"] and p["nodeClaim"] and p["secondsToNode"] > 0, p
        # Every bound pod's scale-up status is closed: Native or Scheduled, never left
        # at Triggered/Provisioning/NodeReady.
        assert p["phase"] in ("Native", "Scheduled"), p
    claims = summary["nodeClaims"]
    assert claims, summary
    for c in claims:
        assert set(c) >= {"name", "nodePool", "instanceType", "gpus", "pricePerHour"}
    assert {p["nodeClaim"] for p in pods} <= {c["name"] for c in claims}
    # Every NodeClaim bought is counted, and its GPUs and price add up.
    bought_gpus: dict[str, int] = {}
    for c in claims:
        if c["gpuModel"]:
            bought_gpus[c["gpuModel"]] = bought_gpus.get(c["gpuModel"], 0) + c["gpus"]
    assert summary["gpusBought"] == bought_gpus
    assert summary["costPerHour"]["bought"] == pytest.approx(
        sum(c["pricePerHour"] or 0 for c in claims), abs=1e-3
    )
    assert summary["gpusNeeded"] == {"a10g": 1, "l4": 2, "l40s": 1, "t4": 1}
    # The native whole-GPU demand: one NodeClaim per model and pool here (the DRA pod's
    # L4 is on gpu-dra, the KAI halves' on gpu-standard).
    assert len(summary["nativeNodeClaims"]) == 5
    # ok means nothing beyond the need; anything beyond is named.
    beyond = {c["name"] for c in claims if c["beyondNeed"]}
    assert beyond == set(summary["beyondNeed"])
    assert summary["ok"] == (not summary["problems"])
    if beyond:
        assert not summary["ok"]
        assert all(any(name in p for p in summary["problems"]) for name in beyond)


def test_malformed_examples_exit_2_with_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    shutil.copy(default_examples() / "10-nodepools.yaml", examples)
    bad = examples / "20-workloads.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n")
    assert cli.main(["demo", "--examples", str(examples)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in captured.err
    assert captured.out == ""

    bad.write_text("apiVersion: v1\nkind: Deployment\nmetadata: {name: x}\n")
    assert cli.main(["demo", "--examples", str(examples), "--output", "json"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Deployment" in lines[0]


def test_demo_takes_the_controller_planning_flags() -> None:
    parser = cli.build_parser()
    demo = parser.parse_args(["demo"])
    config = cli.plan_config(demo)
    assert config.default_nodepool == "gpu-standard"
    assert config.trigger.namespace == "gpu-intent-system"
    assert (demo.timings, demo.output, demo.timeout) == ("fast", "text", None)
    assert demo.kube_scoring == "LeastAllocated"  # kube-scheduler's own default
    packed = parser.parse_args(["demo", "--kube-scheduler-scoring", "MostAllocated"])
    assert packed.kube_scoring == "MostAllocated"
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--kube-scheduler-scoring", "Balanced"])
    args = parser.parse_args(
        ["demo", "--default-nodepool", "gpu-large", "--max-triggers", "3", "--cover-seconds", "5",
         "--trigger-image", "pause:1", "--trigger-priority-class", "low", "--timings", "eks"]
    )  # fmt: skip
    config = cli.plan_config(args)
    assert (config.default_nodepool, config.max_triggers, config.cover_seconds) == (
        "gpu-large", 3, 5.0,
    )  # fmt: skip
    assert (config.trigger.image, config.trigger.priority_class) == ("pause:1", "low")
    controller = cli.plan_config(parser.parse_args(["controller"]))
    assert controller.default_nodepool is None
    assert controller.trigger.binding is False
    assert controller.trigger.profile.gpu_memory_label == "karpenter.k8s.aws/instance-gpu-memory"
    chosen = cli.plan_config(
        parser.parse_args(["controller", "--binding-triggers", "--gpu-memory-label", "x/mem"])
    )
    assert (chosen.trigger.binding, chosen.trigger.profile.gpu_memory_label) == (True, "x/mem")
    tke = cli.plan_config(parser.parse_args(["controller", "--provider", "tke"]))
    assert tke.trigger.profile.model_label == "karpenter.k8s.tke/instance-family"


# --- Karpenter's FailedScheduling in the timeline ------------------------------------

# Messages as the sim's Karpenter writes them (current and v1.0-v1.3 wording), from a
# `gpu-intent demo --without-controller` run.
_REQS = (
    "requirements=karpenter.k8s.aws/ec2nodeclass In [gpu], karpenter.k8s.aws/instance-gpu-name"
    " In [{gpus}], karpenter.sh/capacity-type In [on-demand], karpenter.sh/nodepool In [{pool}]"
)
_RESOURCES = 'resources={"cpu":"1","memory":"4Gi","nvidia.com/gpu":"1","nvidia.com/gpumem":"8000","pods":"1"}'
HAMI_FAILED = "Failed to schedule pod, " + "; ".join(
    f"no instance type has enough resources, {_REQS.format(gpus=gpus, pool=pool)}, {_RESOURCES}"
    for gpus, pool in (("l4 t4", "gpu-standard"), ("a10g", "gpu-hami"), ("a100 h100", "gpu-large"))
)
UNKNOWN_LABEL = (
    'incompatible requirements, label "nvidia.com/gpu.product" does not have known values'
)


def test_failed_scheduling_keeps_each_reason_once_with_its_node_pools() -> None:
    from gpu_intent.demo.report import shorten_failed_scheduling

    assert len(HAMI_FAILED) > 700
    assert shorten_failed_scheduling(HAMI_FAILED) == (
        "no instance type has enough resources (NodePools gpu-standard, gpu-hami, gpu-large;"
        " asks nvidia.com/gpu=1, nvidia.com/gpumem=8000)"
    )
    three = "Failed to schedule pod, " + "; ".join([UNKNOWN_LABEL] * 3)
    assert shorten_failed_scheduling(three) == f"{UNKNOWN_LABEL} (3 NodePools)"
    legacy = "Failed to schedule pod, " + "; ".join(
        f'incompatible with nodepool "{p}", daemonset overhead={{"pods":"0"}}, did not tolerate'
        " gpu=true:NoSchedule"
        for p in ("gpu", "cpu")
    )
    assert shorten_failed_scheduling(legacy) == (
        "did not tolerate gpu=true:NoSchedule (NodePools gpu, cpu)"
    )
    mixed = f"Failed to schedule pod, {UNKNOWN_LABEL}; all available instance types exceed limits for nodepool"
    assert shorten_failed_scheduling(mixed) == mixed.removeprefix("Failed to schedule pod, ")
    assert shorten_failed_scheduling("0/3 nodes are available") == "0/3 nodes are available"


def test_the_timeline_prints_the_short_form_and_keeps_the_whole_message() -> None:
    from gpu_intent.demo.report import PodRecord, Timeline

    out = io.StringIO()
    timeline = Timeline(out)
    timeline.pods["ml/hami-vgpu"] = PodRecord("ml/hami-vgpu", 0.0)
    timeline.on_event({
        "source": {"component": "karpenter"}, "reason": "FailedScheduling", "message": HAMI_FAILED,
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "hami-vgpu"},
    })  # fmt: skip
    line = out.getvalue().strip()
    assert line.endswith(
        "karpenter -> ml/hami-vgpu    FailedScheduling: no instance type has enough resources"
        " (NodePools gpu-standard, gpu-hami, gpu-large; asks nvidia.com/gpu=1,"
        " nvidia.com/gpumem=8000)"
    )
    assert len(line) < 200
    assert timeline.pods["ml/hami-vgpu"].karpenter_failed == HAMI_FAILED
