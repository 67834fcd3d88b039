"""``gpu-intent explain``: pod templates found generically, the webhook's inference on each,
text and JSON output, offline."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_intent.cli import main

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "tests" / "fixtures" / "manifests"

#: (file, name, template path) -> (status, gpus, model, model-memory)
EXPECTED: dict[tuple[str, str, str], tuple[str, str, str, str]] = {
    ("aks.yaml", "rocm-mi300x", ""): ("annotated", "8", "mi300x", "196608"),
    ("aks.yaml", "samples-tf-mnist-demo", "spec.template"): ("annotated", "1", "v100", "16384"),
    ("eks.yaml", "nvidia-smi", ""): ("annotated", "1", "l40s", "45776"),
    ("eks.yaml", "p4d-train", "spec.template"): ("annotated", "8", "a100", "40960"),
    ("eks.yaml", "g6e-serving", "spec.template"): ("annotated", "1", "l40s", "45776"),
    ("eks.yaml", "t4-or-l4", "spec.template"): ("annotated", "1", "t4", "16384"),
    ("gke.yaml", "vllm-gemma", "spec.template"): ("annotated", "1", "l4", "22888"),
    ("gke.yaml", "a100-80gb", ""): ("annotated", "2", "a100", "81920"),
    ("gke.yaml", "nightly-eval", "spec.jobTemplate.spec.template"): ("annotated", "1", "a100", "40960"),
    ("hami.yaml", "gpu-pod", ""): ("annotated", "2", "", ""),
    ("hami.yaml", "vllm-cross-vgpu", "spec.template"): ("annotated", "2", "", ""),
    ("hami.yaml", "gpu-pod-card-type", ""): ("annotated", "2", "a100", ""),
    ("hami.yaml", "gpu-pod-not-card-type", ""): ("annotated", "2", "", ""),
    ("hami.yaml", "gpu-pod-gpumem", ""): ("annotated", "0.3", "a10", "24576"),
    ("kai.yaml", "gpu-sharing", ""): ("annotated", "0.5", "", ""),
    ("kai.yaml", "gpu-memory", ""): ("annotated", "0.1", "", ""),
    ("kai.yaml", "kai-multi-device", "spec.template"): ("annotated", "2", "l4", "22888"),
    ("operators.yaml", "pytorch-simple", "spec.pytorchReplicaSpecs.Master.template"): ("annotated", "1", "", ""),
    ("operators.yaml", "pytorch-simple", "spec.pytorchReplicaSpecs.Worker.template"): ("annotated", "2", "a100", "81920"),
    ("operators.yaml", "raycluster-gpu", "spec.headGroupSpec.template"): ("not-gpu", "", "", ""),
    ("operators.yaml", "raycluster-gpu", "spec.workerGroupSpecs[0].template"): ("annotated", "1", "t4", "16384"),
    ("operators.yaml", "vllm", "spec.leaderWorkerTemplate.leaderTemplate"): ("annotated", "8", "h100", "81920"),
    ("operators.yaml", "vllm", "spec.leaderWorkerTemplate.workerTemplate"): ("annotated", "8", "h100", "81920"),
    ("operators.yaml", "gpu-burn-in", "spec.template"): ("annotated", "1", "v100", "16384"),
    ("quirks.yaml", "rtx-3090", ""): ("annotated", "1", "rtx-3090", "24576"),
    ("quirks.yaml", "placeholder", ""): ("annotated", "1", "", ""),
    ("quirks.yaml", "user-quarter", ""): ("annotated", "0.25", "", ""),
    ("quirks.yaml", "mig-slice", ""): ("annotated", "0.142858", "a100", "40960"),
    ("quirks.yaml", "hand-annotated", ""): ("already-annotated", "0.5", "h100", ""),
    ("quirks.yaml", "web", ""): ("not-gpu", "", "", ""),
    ("tensor-fusion.yaml", "tf-pytorch", "spec.template"): ("annotated", "0.5", "l40s", "45776"),
    ("tensor-fusion.yaml", "tf-two-gpus", "spec.template"): ("annotated", "2", "h100", "81920"),
    ("tke.yaml", "tke-infer", "spec.template"): ("annotated", "1", "t4", "16384"),
    ("tke.yaml", "tke-gt4", ""): ("annotated", "4", "a100", "40960"),
}  # fmt: skip

#: The demo's examples: name -> (gpus, model); Namespaces and NodePools have no template.
EXAMPLES = {
    "trainer-*": ("1", "t4"),
    "hami-vgpu": ("1", "a10g"),
    "kai-half-a": ("0.5", "l4"),
    "kai-half-b": ("0.5", "l4"),
    "tf-infer": ("1", "l40s"),
    "dra-l4": ("1", "l4"),
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def explain_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    code, out, err = run(capsys, "-o", "json", *argv)
    assert code == 0, err
    result: list[dict[str, Any]] = json.loads(out)
    return result


def test_every_fixture_manifest_gets_model_and_gpus_right(capsys: pytest.CaptureFixture[str]) -> None:
    got = {
        (Path(e["file"]).name, e["name"], e["template"]): (
            e["status"],
            e["annotations"].get("gpu-intent.io/gpus", ""),
            e["annotations"].get("gpu-intent.io/model", ""),
            e["annotations"].get("gpu-intent.io/model-memory", ""),
        )
        for e in explain_json(capsys, "-f", str(MANIFESTS))
    }
    assert got == EXPECTED


def test_every_example_gets_model_and_gpus_right(capsys: pytest.CaptureFixture[str]) -> None:
    result = explain_json(capsys, "-f", str(ROOT / "examples"))
    got = {e["name"]: (e["annotations"]["gpu-intent.io/gpus"],
                       e["annotations"].get("gpu-intent.io/model")) for e in result}  # fmt: skip
    assert got == EXAMPLES
    assert all(e["status"] == "annotated" and e["warnings"] == [] for e in result)


def test_json_carries_the_annotation_values_reasons_and_warnings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (card,) = [e for e in explain_json(capsys, "-f", str(MANIFESTS / "hami.yaml"))
               if e["name"] == "gpu-pod-card-type"]  # fmt: skip
    assert card["annotations"] == {
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "2",
        "gpu-intent.io/model": "a100",
        "gpu-intent.io/source": "resources:nvidia.com/gpu,hami:nvidia.com/use-gputype,"
        "rule:model-first-listed",
    }
    assert card["warnings"] == ["model: chose A100 of A100,V100 (first listed in hami use-gputype)"]
    parts = {r["part"]: r for r in card["reasons"]}
    assert set(parts) == {"gpus", "model", "model-memory", "gpu-memory", "pool"}
    assert parts["model"]["source"] == "hami:nvidia.com/use-gputype,rule:model-first-listed"


def test_text_output_gives_every_part_and_its_reasoning(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", str(MANIFESTS / "eks.yaml"))
    assert code == 0
    assert "Job ml/p4d-train spec.template (" in out
    assert "p4d.24xlarge has 8 x a100 40 GB (nvidia) (catalog aws instance type p4d.24xlarge)" in out
    assert "warning: model: chose t4 of t4,l4 (first listed in nodeAffinity instance-gpu-name)" in out


def test_stdin_and_several_documents(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (MANIFESTS / "kai.yaml").read_text() + "\n---\n" + (MANIFESTS / "aks.yaml").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    result = explain_json(capsys, "-f", "-")
    assert [(e["file"], e["document"], e["name"]) for e in result] == [
        ("-", 1, "gpu-sharing"), ("-", 2, "gpu-memory"), ("-", 3, "kai-multi-device"),
        ("-", 4, "rocm-mi300x"), ("-", 5, "samples-tf-mnist-demo"),
    ]  # fmt: skip


def test_list_items_and_inference_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    manifest = tmp_path / "list.json"
    manifest.write_text(json.dumps({"kind": "List", "items": [
        {"kind": "Pod", "metadata": {"name": "bad", "annotations": {"gpu-fraction": "abc"}},
         "spec": {"containers": [{"name": "c"}]}},
        {"kind": "Pod", "metadata": {"generateName": "ok-"},
         "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
    ]}))  # fmt: skip
    bad, ok = explain_json(capsys, "-f", str(manifest))
    assert bad["status"] == "error" and "gpu-fraction" in bad["error"]
    assert (ok["name"], ok["annotations"]["gpu-intent.io/gpus"]) == ("ok-*", "1")


DRA_MANIFESTS = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-a100, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: gpu.nvidia.com
            count: 2
            selectors:
              - cel:
                  expression: >-
                    device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")
                    && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: shared-l4}
spec:
  devices:
    requests:
      - {name: gpu, deviceClassName: gpu.nvidia.com, count: 1,
         selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'}}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      nodeSelector: {karpenter.sh/nodepool: gpu}
      resourceClaims:
        - {name: gpu, resourceClaimTemplateName: two-a100}
      containers:
        - {name: train, image: x, resources: {claims: [{name: gpu}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: infer, namespace: ml}
spec:
  resourceClaims:
    - {name: gpu, resourceClaimName: shared-l4}
  containers:
    - {name: c, image: x, resources: {claims: [{name: gpu}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: ml}
spec:
  resourceClaims:
    - {name: gpu, resourceClaimTemplateName: not-in-this-file}
  containers:
    - {name: c, image: x, resources: {claims: [{name: gpu}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: other-namespace, namespace: research}
spec:
  resourceClaims:
    - {name: gpu, resourceClaimTemplateName: two-a100}
  containers:
    - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}, claims: [{name: gpu}]}}
"""


def test_dra_claims_resolve_against_the_claims_in_the_same_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "dra.yaml"
    manifest.write_text(DRA_MANIFESTS)
    train, infer_pod, elsewhere, other = explain_json(capsys, "-f", str(manifest))
    assert (train["name"], train["status"]) == ("train", "annotated")
    assert train["annotations"] == {
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "2",
        "gpu-intent.io/model": "a100",
        "gpu-intent.io/model-memory": "81920",
        "gpu-intent.io/gpu-memory": "81920",
        "gpu-intent.io/pool": "gpu",
        "gpu-intent.io/source": "dra:two-a100,nodeSelector:karpenter.sh/nodepool",
    }
    assert train["warnings"] == []
    gpus = next(r for r in train["reasons"] if r["part"] == "gpus")
    assert gpus["why"] == ("DRA claim two-a100: request gpu asks for 2 x gpu.nvidia.com; "
                           "selectors match a100, at least 81920 MiB")  # fmt: skip
    # a v1beta1 ResourceClaim without a namespace serves a pod of any namespace
    assert (infer_pod["annotations"]["gpu-intent.io/gpus"], infer_pod["annotations"]["gpu-intent.io/model"]) == (
        "1", "l4",
    )
    assert infer_pod["annotations"]["gpu-intent.io/source"] == "dra:shared-l4"
    # a template not in the file: no intent, and the warning says who records it
    assert elsewhere["status"] == "not-gpu"
    assert elsewhere["warnings"] == [
        "dra: claim from template not-in-this-file could not be read; the controller records the intent from it"
    ]
    # a template of another namespace does not resolve: the device-plugin request stands
    assert other["annotations"]["gpu-intent.io/gpus"] == "1"
    assert other["warnings"] == [
        "dra: claim from template two-a100 could not be read; the controller records the intent from it"
    ]
    code, out, _ = run(capsys, "-f", str(manifest))
    assert code == 0
    assert "  gpus          2        from dra:two-a100" in out


def test_catalog_flag_is_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("families:\n  tke:\n    GN7: l4\n")
    result = explain_json(capsys, "--catalog", str(catalog), "-f", str(MANIFESTS / "tke.yaml"))
    assert result[0]["annotations"]["gpu-intent.io/model"] == "l4"
    # the next run, in the same process, without the flag: the built-in catalog
    result = explain_json(capsys, "-f", str(MANIFESTS / "tke.yaml"))
    assert result[0]["annotations"]["gpu-intent.io/model"] == "t4"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["does-not-exist.yaml"], "does-not-exist.yaml: cannot read"),
        (["BAD"], "not YAML"),
    ],
)
def test_unreadable_input_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: list[str], message: str
) -> None:
    (tmp_path / "BAD").write_text("kind: Pod\nmetadata: {name: [\n")
    argv = [a for f in files for a in ("-f", str(tmp_path / f))]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err


def test_malformed_catalog_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("gpus: [1]\n")
    code, _, err = run(capsys, "--catalog", str(catalog), "-f", str(MANIFESTS / "tke.yaml"))
    assert code == 2
    assert f"{catalog}: gpus: must be a mapping" in err


def test_webhook_refuses_to_start_on_a_malformed_catalog(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("instance_types:\n  aws:\n    x.y: [1, nope]\n")
    code = main(["webhook", "--catalog", str(catalog), "--tls-cert-file", "c", "--tls-key-file", "k"])
    assert code == 2
    assert "names GPU 'nope'" in capsys.readouterr().err
