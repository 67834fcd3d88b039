"""``gpu-intent demo``: the story ends when every pod is closed (not at the timeout),
progress goes to stderr only, and ``--examples`` takes DeviceClasses and node classes
(any other kind it does not model is one line and exit 2)."""

from __future__ import annotations

import io
import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from gpu_intent import cli
from gpu_intent.demo import apply, default_examples, run_demo
from gpu_intent.demo.manifests import ExamplesError, opted_in, read_examples
from gpu_intent.demo.progress import Counts, StoryProgress
from gpu_intent.demo.report import PodRecord, Timeline
from gpu_intent.demo.story import CREATES_AT_ONCE, _create_pods, _story_problems, closed
from intent.contract import INJECT_LABEL, INJECT_VALUE, Intent, Phase
from intent.kube import Kube, load_configuration
from sim import store as sim_store
from sim.cluster import SimCluster

#: Far above how long the default examples' story takes (about 6 s): a demo that waited
#: for the timeout instead of the story's end would show it.
TIMEOUT = 120.0

DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "l4.example.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'
                }
            }
        ]
    },
}
NODE_CLASSES = [
    {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
     "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole"}},
    {"apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass",
     "metadata": {"name": "default"}, "spec": {"imageFamily": "AzureLinux"}},
    {"apiVersion": "karpenter.k8s.tke/v1beta1", "kind": "TKEMachineNodeClass",
     "metadata": {"name": "default"}, "spec": {}},
]  # fmt: skip


def examples_with(tmp_path: Path, name: str, docs: list[dict[str, Any]]) -> Path:
    """The default examples plus ``docs`` in ``<name>`` (a file name sorted after them)."""
    target = tmp_path / "examples"
    shutil.copytree(default_examples(), target, ignore=shutil.ignore_patterns("*.py"))
    (target / name).write_text(yaml.safe_dump_all(docs))
    return target


def test_json_output_keeps_stdout_pure_and_the_demo_ends_when_the_story_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["demo", "--output", "json", "--timeout", f"{TIMEOUT:g}"])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 1, captured.out  # one JSON object, no progress, nothing else
    summary = json.loads(lines[0])
    assert code == 0 and summary["ok"], summary["problems"]
    assert "progress: " in captured.err  # the plain progress lines went to stderr
    story = summary["story"]
    assert story["pods"] == story["bound"] == story["closed"] == 6
    assert story["timeoutSeconds"] == TIMEOUT
    # It stopped waiting as soon as every pod closed and the NodeClaims settled, not at
    # the timeout.
    assert story["closedAfterSeconds"] is not None
    assert story["endedAfterSeconds"] - story["closedAfterSeconds"] < 5
    assert story["endedAfterSeconds"] < TIMEOUT / 4
    assert {p["phase"] for p in summary["pods"]} <= {"Scheduled", "Native"}
    # The need is the ideal twin's, and its cost what the sim's Karpenter buys for it.
    assert summary["gpusLowerBound"] == {"a10g": 1, "l4": 2, "l40s": 1, "t4": 1}
    assert summary["idealCostPerHour"] == summary["costPerHour"]["native"] > 0
    assert summary["nativeUnplaced"] == {}


async def test_a_pod_no_nodepool_serves_closes_unbound_and_the_story_still_ends(
    tmp_path: Path,
) -> None:
    v100 = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kai-v100", "namespace": "ml", "annotations": {"gpu-fraction": "0.5"}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "example.registry/infer:7"}],
        },
    }
    examples = examples_with(tmp_path, "40-v100.yaml", [v100])
    out, err = io.StringIO(), io.StringIO()
    code = await run_demo(examples, output="json", out=out, err=err, max_seconds=TIMEOUT)
    summary = json.loads(out.getvalue())
    assert code == 1 and not summary["ok"]
    (pod,) = [p for p in summary["pods"] if p["name"] == "kai-v100"]
    assert pod["phase"] == Phase.UNRESOLVABLE and pod["node"] is None
    assert any("kai-v100" in p for p in summary["problems"])
    story = summary["story"]
    assert story["closed"] == story["pods"] == 7 and story["bound"] == 6
    assert story["closedAfterSeconds"] is not None
    assert story["endedAfterSeconds"] < TIMEOUT / 4


async def test_examples_take_device_classes_and_node_classes(tmp_path: Path) -> None:
    examples = examples_with(tmp_path, "05-classes.yaml", [DEVICE_CLASS, *NODE_CLASSES])
    out, err = io.StringIO(), io.StringIO()
    code = await run_demo(examples, output="text", out=out, err=err, max_seconds=TIMEOUT)
    text = out.getvalue()
    assert code == 0, text[-2000:]
    (line,) = [t for t in text.splitlines() if "node classes" in t]
    assert "EC2NodeClass/gpu, AKSNodeClass/default, TKEMachineNodeClass/default" in line
    assert "the sim's instance-type catalog stands in for them" in line


async def test_a_device_class_is_applied_as_given_beside_the_drivers_defaults(
    tmp_path: Path,
) -> None:
    mine = {**DEVICE_CLASS, "metadata": {"name": "gpu.nvidia.com"}}
    async with SimCluster(tmp_path / "cluster", karpenter_enabled=False) as cluster:
        kube = Kube(
            client.ApiClient(configuration=await load_configuration(str(cluster.kubeconfig)))
        )
        try:
            await apply(kube, json.loads(json.dumps(DEVICE_CLASS)))
            await apply(kube, mine)  # same name as a driver default: replaces it
        finally:
            await kube.close()
        items, _ = cluster.store.list(sim_store.DEVICECLASSES)
        classes = {d["metadata"]["name"]: d["spec"] for d in items}
    assert classes["l4.example.com"] == DEVICE_CLASS["spec"]
    assert classes["gpu.nvidia.com"] == DEVICE_CLASS["spec"]
    assert "mig.nvidia.com" in classes


def _pod(name: str, namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_every_pod_is_created_and_a_refused_one_names_its_manifest(
    tmp_path: Path,
) -> None:
    """The demo creates its pods `CREATES_AT_ONCE` at a time, as a workload controller
    does (one by one, a 1,000-pod mix took 30 s to arrive). Every pod is created, and
    one the API server refuses stops the rest with one error naming its manifest, as a
    single create did."""
    pods = [(tmp_path / f"{i}.yaml", _pod(f"p-{i:02d}")) for i in range(3 * CREATES_AT_ONCE)]
    bad = (tmp_path / "bad.yaml", _pod("p-x", namespace="missing"))
    refused = [(tmp_path / "y.yaml", _pod("p-y")), bad, (tmp_path / "z.yaml", _pod("p-z"))]
    async with SimCluster(tmp_path / "cluster", karpenter_enabled=False) as cluster:
        kube = Kube(
            client.ApiClient(configuration=await load_configuration(str(cluster.kubeconfig)))
        )
        try:
            await apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
            await _create_pods(kube, pods)
            with pytest.raises(ExamplesError) as raised:
                await _create_pods(kube, refused)
        finally:
            await kube.close()
        items, _ = cluster.store.list(sim_store.PODS)
    names = {p["metadata"]["name"] for p in items}
    assert {f"p-{i:02d}" for i in range(3 * CREATES_AT_ONCE)} <= names
    assert "p-x" not in names
    assert str(raised.value).startswith(f"{tmp_path / 'bad.yaml'}: creating Pod p-x: ")


def test_yaml_the_demo_cannot_parse_names_its_file_and_line(tmp_path: Path) -> None:
    """Read with libyaml's loader (`intent.runtime.SAFE_LOADER`), the error still names
    the file and the line, in one line."""
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n")
    with pytest.raises(ExamplesError) as raised:
        read_examples(tmp_path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'a.yaml'}: not valid YAML (line 4): ")


def test_a_kind_the_demo_does_not_model_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    )
    with pytest.raises(ExamplesError) as raised:
        read_examples(tmp_path)
    message = str(raised.value)
    assert "\n" not in message and "'ConfigMap', which the demo does not model" in message
    assert "DeviceClass" in message and "EC2NodeClass" in message


def record(
    phase: str = "", node: str | None = None, annotated: bool = True, refused: bool = True
) -> PodRecord:
    r = PodRecord("ml/p", 0.0, intent=Intent(Decimal("0.5"), model="l4"), annotated=annotated)
    r.phase, r.node, r.refused = phase, node, refused
    return r


def test_a_pod_is_closed_bound_with_a_closing_status_or_given_up() -> None:
    assert closed(record(Phase.SCHEDULED, "n")) and closed(record(Phase.NATIVE, "n"))
    assert not closed(record(Phase.NODE_READY, "n")) and not closed(record("", "n"))
    assert closed(record("", "n", annotated=False))  # the controller does not follow it
    # Bound before its scheduler ever refused it: nothing was pending, nothing is owed.
    assert closed(record("", "n", refused=False))
    assert not closed(record(Phase.NODE_READY, "n", refused=False))
    assert closed(record(Phase.UNRESOLVABLE)) and closed(record(Phase.INVALID))
    assert closed(record(Phase.FAILED)) and not closed(record(Phase.FAILED, "n"))
    assert not closed(record(Phase.TRIGGERED)) and not closed(record())


def test_the_timeline_knows_which_pods_their_scheduler_refused_before_binding() -> None:
    timeline = Timeline(io.StringIO())
    annotations = Intent(Decimal("0.5"), model="l4").to_annotations()

    def pod(name: str, node: str | None, unschedulable: bool) -> dict[str, Any]:
        conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        return {
            "metadata": {"namespace": "ml", "name": name, "annotations": annotations},
            "spec": {"nodeName": node} if node else {},
            "status": {"conditions": conditions if unschedulable else []},
        }

    timeline.on_pod("ADDED", pod("waited", None, True))
    timeline.on_pod("MODIFIED", pod("waited", "n", False))
    timeline.on_pod("ADDED", pod("placed", None, False))
    timeline.on_pod("MODIFIED", pod("placed", "n", False))
    waited, placed = timeline.pods["ml/waited"], timeline.pods["ml/placed"]
    assert waited.refused and not closed(waited)
    assert not placed.refused and closed(placed)


def test_an_unannotated_gpu_pod_is_told_whether_its_namespace_is_opted_in() -> None:
    out = io.StringIO()
    namespaces = [
        {"kind": "Namespace", "metadata": {"name": "ml", "labels": {INJECT_LABEL: INJECT_VALUE}}},
        {"kind": "Namespace", "metadata": {"name": "plain"}},
    ]
    timeline = Timeline(out, frozenset({"ml", "plain"}), opted_in(namespaces))
    assert timeline.opted_in == {"ml"}
    for namespace in ("ml", "plain"):
        limits = {"nvidia.com/gpu": "1"}
        container = {"name": "c", "resources": {"limits": limits}}
        metadata = {"namespace": namespace, "name": "p"}
        timeline.on_pod("ADDED", {"metadata": metadata, "spec": {"containers": [container]}})
    said = out.getvalue()
    assert "ml/p" in said and "plain/p" in said
    assert "not annotated by the webhook (its namespace is opted in: the webhook's log says why)" in said
    assert said.count("namespace not opted in") == 1


def test_a_launched_nodeclaim_no_example_pod_runs_on_is_a_problem() -> None:
    timeline = Timeline(io.StringIO())

    def claim(name: str, node: str | None, launched: bool) -> dict[str, Any]:
        labels = {"node.kubernetes.io/instance-type": "g6.xlarge"} if launched else {}
        conditions = [{"type": "Launched", "status": "True"}] if launched else []
        status: dict[str, Any] = {"conditions": conditions}
        if node:
            status["nodeName"] = node
        return {"metadata": {"name": name, "labels": labels}, "status": status}

    timeline.on_nodeclaim("ADDED", claim("used", "n1", True))
    timeline.on_nodeclaim("ADDED", claim("empty", "n2", True))
    timeline.on_nodeclaim("ADDED", claim("gone-empty", "n3", True))
    timeline.on_nodeclaim("DELETED", claim("gone-empty", "n3", True))
    timeline.on_nodeclaim("ADDED", claim("never-launched", None, False))
    pod = {
        "metadata": {"namespace": "ml", "name": "p"},
        "spec": {"nodeName": "n1"},
        "status": {},
    }
    timeline.on_pod("ADDED", pod)
    problems = _story_problems(timeline, 1, 0)
    assert problems == ["launched NodeClaims no example pod runs on: empty, gone-empty"]


def test_progress_is_a_plain_line_every_few_seconds_off_a_terminal() -> None:
    stream, now = io.StringIO(), [0.0]
    with StoryProgress(stream, every=5.0, clock=lambda: now[0]) as progress:
        for t in (1.0, 4.0, 5.5, 7.0, 11.0):
            now[0] = t
            progress.update(
                Counts(pods=6, bound=int(t) // 2, closed=int(t) // 3, claims=5, elapsed=t)
            )
    assert stream.getvalue().splitlines() == [
        "progress: 2/6 bound, 1/6 closed, 5 NodeClaims, 5.5s",
        "progress: 5/6 bound, 3/6 closed, 5 NodeClaims, 11.0s",
        "progress: 5/6 bound, 3/6 closed, 5 NodeClaims, 11.0s (story ended)",
    ]
