"""Issue 28: the GPU requests of every widely used sharing layer, provider and workload
kind, read from manifests written after their public samples (tests/manifests/ecosystem/,
each file naming its sample). Expected values are what a platform engineer reads from each
pod template: status, GPUs, model and GPU memory (MiB per GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_intent.cli import main
from gpu_intent.kinds import KINDS
from intent.inference import infer

ROOT = Path(__file__).resolve().parent.parent
ECOSYSTEM = ROOT / "tests" / "manifests" / "ecosystem"

#: (file, name, template path) -> (status, gpus, model, gpu-memory)
EXPECTED: dict[tuple[str, str, str], tuple[str, str, str, str]] = {
    ("aliyun-gpushare.yaml", "binpack-1", "spec.template"): ("annotated", "0.25", "v100", "8192"),
    ("amd-gpu.yaml", "rocm-mi300x", ""): ("annotated", "8", "mi300x", ""),
    ("argo.yaml", "validate-gpu-workflow-template", "spec.templates[1]"): ("annotated", "1", "a10g", ""),
    ("argo.yaml", "nightly-eval", "spec.workflowSpec.templates[0]"): ("annotated", "2", "l4", ""),
    ("argo.yaml", "script-gpu-*", "spec.templates[0]"): ("annotated", "2", "", ""),
    ("dra-mig.yaml", "pod0", ""): ("annotated", "0.571429", "a100", ""),
    ("intel-gpu.yaml", "intelgpu-demo", ""): ("error", "", "", ""),
    ("kaito.yaml", "workspace-deepseek-r1-0528", "resource"): ("annotated", "2", "h100-nvl", ""),
    ("kaito.yaml", "ragengine-start", "spec.compute"): ("annotated", "1", "v100", ""),
    ("kserve.yaml", "flowers-sample-gpu", "spec.predictor"): ("annotated", "1", "t4", ""),
    ("kserve.yaml", "llama-multinode", "spec.predictor"): ("annotated", "8", "h100", ""),
    ("kserve.yaml", "llama-multinode", "spec.predictor.workerSpec"): ("annotated", "8", "h100", ""),
    ("kserve.yaml", "deepseek-r1-pd", "spec.template"): ("annotated", "8", "", ""),
    ("kserve.yaml", "deepseek-r1-pd", "spec.worker"): ("annotated", "8", "", ""),
    ("kserve.yaml", "deepseek-r1-pd", "spec.prefill.template"): ("annotated", "8", "", ""),
    ("kserve.yaml", "deepseek-r1-pd", "spec.prefill.worker"): ("annotated", "8", "", ""),
    ("kubeflow.yaml", "nccl-tests", "spec.mpiReplicaSpecs.Launcher.template"): ("not-gpu", "", "", ""),
    ("kubeflow.yaml", "nccl-tests", "spec.mpiReplicaSpecs.Worker.template"): ("annotated", "8", "h100", ""),
    ("kubeflow.yaml", "tf-mnist", "spec.tfReplicaSpecs.Worker.template"): ("annotated", "1", "", ""),
    ("kubeflow.yaml", "lammps-gpus", "spec.trainer"): ("annotated", "1", "", ""),
    ("kubeflow.yaml", "torch-distributed-gpu", "spec.template.spec.replicatedJobs[0].template.spec.template"): ("annotated", "4", "l40s", ""),
    ("lws-volcano.yaml", "vllm-405b", "spec.leaderWorkerTemplate.leaderTemplate"): ("annotated", "8", "h100", ""),
    ("lws-volcano.yaml", "vllm-405b", "spec.leaderWorkerTemplate.workerTemplate"): ("annotated", "8", "h100", ""),
    ("lws-volcano.yaml", "tensorflow-benchmark", "spec.tasks[0].template"): ("not-gpu", "", "", ""),
    ("lws-volcano.yaml", "tensorflow-benchmark", "spec.tasks[1].template"): ("annotated", "1", "", ""),
    ("lws-volcano.yaml", "unknown", ""): ("unknown-kind", "", "", ""),
    ("mig-mixed.yaml", "mig-four-slices", ""): ("annotated", "0.571429", "a100", "5120"),
    ("mig-mixed.yaml", "mig-a30-half", ""): ("annotated", "0.5", "a30", "12288"),
    ("providers.yaml", "sagemaker-p4d", ""): ("annotated", "8", "a100", ""),
    ("providers.yaml", "azure-nc-a100", ""): ("annotated", "1", "a100", ""),
    ("providers.yaml", "azure-sku-gpu-name", ""): ("annotated", "1", "t4", ""),
    ("providers.yaml", "gke-a100-80gb", ""): ("annotated", "2", "a100", ""),
    ("providers.yaml", "gcp-karpenter-l4", ""): ("annotated", "1", "l4", ""),
    ("providers.yaml", "oci-a100-v2", ""): ("annotated", "8", "a100", ""),
    ("providers.yaml", "oci-bm-gpu4", ""): ("annotated", "8", "a100", ""),
    ("providers.yaml", "oci-vm-a10", ""): ("annotated", "1", "a10", ""),
    ("providers.yaml", "oci-h100", ""): ("annotated", "8", "h100", ""),
    ("providers.yaml", "tencent-gn10xp", ""): ("annotated", "1", "v100", ""),
    ("providers.yaml", "alibaba-gn7i", ""): ("annotated", "1", "a10", ""),
    ("providers.yaml", "alibaba-family", ""): ("annotated", "1", "a100", ""),
    ("providers.yaml", "lambda-h100", ""): ("annotated", "8", "h100", ""),
    ("providers.yaml", "coreweave-v100", ""): ("annotated", "4", "v100", ""),
    ("providers.yaml", "coreweave-a100-40", ""): ("annotated", "8", "a100", ""),
    ("ray.yaml", "raycluster-half-gpu", "spec.headGroupSpec.template"): ("not-gpu", "", "", ""),
    ("ray.yaml", "raycluster-half-gpu", "spec.workerGroupSpecs[0].template"): ("annotated", "0.5", "", ""),
    ("ray.yaml", "rayjob-batch-inference", "spec.rayClusterSpec.headGroupSpec.template"): ("annotated", "4", "t4", ""),
    ("ray.yaml", "ray-service-deepseek", "spec.rayClusterConfig.headGroupSpec.template"): ("not-gpu", "", "", ""),
    ("ray.yaml", "ray-service-deepseek", "spec.rayClusterConfig.workerGroupSpecs[0].template"): ("annotated", "8", "h100", ""),
    ("tencent-qgpu.yaml", "qgpu-half", ""): ("annotated", "0.5", "t4", "8192"),
    ("tkestack-vcuda.yaml", "vcuda-two-cards", ""): ("annotated", "2", "", "7680"),
    ("volcano-vgpu.yaml", "volcano-vgpu", ""): ("annotated", "0.5", "", "10240"),
}  # fmt: skip


def explain_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    code = main(["explain", "-o", "json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    result: list[dict[str, Any]] = json.loads(out)
    return result


def test_every_ecosystem_manifest_gets_model_gpus_and_memory_right(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = {
        (Path(e["file"]).name, e["name"], e["template"]): (
            e["status"],
            e["annotations"].get("gpu-intent.io/gpus", ""),
            e["annotations"].get("gpu-intent.io/model", ""),
            e["annotations"].get("gpu-intent.io/gpu-memory", ""),
        )
        for e in explain_json(capsys, "-f", str(ECOSYSTEM))
    }
    assert got == EXPECTED


def test_sources_name_the_layer_and_resource(capsys: pytest.CaptureFixture[str]) -> None:
    by_name = {e["name"]: e for e in explain_json(capsys, "-f", str(ECOSYSTEM))}
    source = {n: by_name[n]["annotations"].get("gpu-intent.io/source", "") for n in by_name}
    assert source["volcano-vgpu"] == ("volcano:volcano.sh/vgpu-number,volcano:volcano.sh/vgpu-cores,"
                                      "volcano:volcano.sh/vgpu-memory")  # fmt: skip
    assert source["binpack-1"] == "aliyun:aliyun.com/gpu-mem,nodeSelector:aliyun.accelerator/nvidia_name"
    assert source["qgpu-half"].startswith("qgpu:tke.cloud.tencent.com/qgpu-core,")
    assert source["vcuda-two-cards"].startswith("vcuda:tencent.com/vcuda-core")
    assert source["mig-four-slices"] == "mig:nvidia.com/mig-1g.5gb"
    assert source["ray-service-deepseek"] == "resources:nvidia.com/gpu,ray-serve:accelerator_type"
    assert "intel" in by_name["intelgpu-demo"]["error"] and "no intent" in by_name["intelgpu-demo"]["error"]


def test_an_unknown_kind_is_said_with_the_kinds_explain_knows(capsys: pytest.CaptureFixture[str]) -> None:
    (unknown,) = [e for e in explain_json(capsys, "-f", str(ECOSYSTEM / "lws-volcano.yaml"))
                  if e["status"] == "unknown-kind"]  # fmt: skip
    assert unknown["error"].startswith("kind MysteryJob is not one gpu-intent explain knows; it reads ")
    assert all(kind.split("/")[-1] in unknown["error"] for kind in KINDS)


@pytest.mark.parametrize(
    ("limits", "selector", "gpus", "model", "memory"),
    [
        # Alibaba gpu-mem over 512 is MiB (--memory-unit=MiB): no GPU has 512 GiB
        ({"aliyun.com/gpu-mem": 4096}, {}, "1", None, 4096),
        ({"aliyun.com/gpu-count": 2, "aliyun.com/gpu-mem": 16}, {}, "2", None, 8192),
        ({"aliyun.com/gpu-core.percentage": 25, "aliyun.com/gpu-mem": 4}, {}, "0.25", None, 4096),
        ({"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 3000}, {}, "2", None, 3000),
        ({"volcano.sh/gpu-memory": 1024}, {}, "1", None, 1024),
        ({"tke.cloud.tencent.com/qgpu-core": 200}, {}, "2", None, None),
        ({"tencent.com/vcuda-core": 20}, {}, "0.2", None, None),
        ({"nvidia.com/mig-3g.40gb": 2}, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "0.857143", "h100", 40960),
        ({"nvidia.com/mig-1g.10gb.me": 1}, {}, "0.142858", None, 10240),
        ({"nvidia.com/mig-1g.18gb": 7}, {}, "1", "h200", 18432),
        ({"amd.com/gpu": 1}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, "1", "mi300x", None),
    ],
)
def test_sharing_layer_readings(
    limits: dict[str, int], selector: dict[str, str], gpus: str, model: str | None, memory: int | None
) -> None:
    pod = {"spec": {"nodeSelector": selector, "containers": [{"name": "c", "resources": {"limits": limits}}]}}
    intent = infer(pod).intent
    assert intent is not None
    assert (str(intent.gpus), intent.model, intent.gpu_memory_mib) == (gpus, model, memory)


def test_vcuda_core_between_whole_cards_is_refused() -> None:
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"tencent.com/vcuda-core": 150}}}]}}
    with pytest.raises(Exception, match="not a whole number"):
        infer(pod)
