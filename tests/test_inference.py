"""infer_intent, canonical_model and the quantity helpers they rest on."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpu_intent.intent import Intent, IntentError
from gpu_intent.quantity import parse_count, parse_quantity, to_mib
from webhook.inference import canonical_model, infer_intent


def container(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if init is not None:
        spec["initContainers"] = init
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def required_affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": exprs} for exprs in terms]
            }
        }
    }


def intent_of(p: dict[str, Any]) -> Intent:
    result = infer_intent(p)
    assert result is not None
    return result


# --- HAMi -----------------------------------------------------------------------------


def test_hami_gpumem_in_k_is_mib_and_gpucores_sets_the_share() -> None:
    res = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": "30"}
    result = intent_of(pod(container(res, res), annotations={"nvidia.com/use-gputype": "a100"}))
    assert result.gpus == Decimal("0.3")
    assert result.gpu_memory_mib == 3000
    assert result.model == "a100"
    assert result.source == (
        "hami:nvidia.com/gpumem",
        "hami:nvidia.com/gpucores",
        "hami:nvidia.com/use-gputype",
    )
    assert result.to_annotations()["gpu-intent.io/gpus"] == "0.3"


def test_hami_gpumem_alone_counts_a_whole_gpu_per_vgpu() -> None:
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": 8000})))
    assert result.gpus == 2
    assert result.gpu_memory_mib == 8000
    assert result.source == ("hami:nvidia.com/gpumem",)


def test_hami_takes_the_larger_of_cores_and_memory_percentage() -> None:
    res = {"nvidia.com/gpucores": "20", "nvidia.com/gpumem-percentage": "50"}
    result = intent_of(pod(container(limits=res)))  # vGPU count defaults to 1
    assert result.gpus == Decimal("0.5")
    assert result.gpu_memory_mib is None


def test_hami_sums_vgpus_per_container() -> None:
    a = container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"})
    b = container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpucores": "25"})
    # 0.3 + 2 whole GPUs (b's two vGPUs sit on two distinct GPUs), no longer 0.3 + 2 x 0.25
    assert intent_of(pod(a, b)).gpus == Decimal("2.3")


def test_hami_sums_single_vgpu_shares_per_container() -> None:
    a = container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"})
    b = container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25"})
    assert intent_of(pod(a, b)).gpus == Decimal("0.55")


def test_hami_example_use_memory_fraction_is_two_gpus() -> None:
    # Project-HAMi/HAMi examples/nvidia/use_memory_fraction.yaml (pod gpu-pod, container
    # ubuntu-container): "nvidia.com/gpu: 2 # Declare how many physical GPUs the pod needs".
    limits = {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 50, "nvidia.com/gpucores": 30}
    result = intent_of(pod(container(limits=limits)))
    assert result.gpus == 2  # not 2 x 0.5 = 1
    assert result.gpu_memory_mib is None  # a percentage, not MiB
    assert result.source == (
        "hami:nvidia.com/gpu",
        "hami:nvidia.com/gpumem-percentage",
        "hami:nvidia.com/gpucores",
    )
    assert result.to_annotations()["gpu-intent.io/gpus"] == "2"


def test_hami_example_vllm_cross_vgpu_is_two_gpus() -> None:
    # Project-HAMi/HAMi examples/nvidia/vllm_cross_vgpu.yaml (Deployment vllm-cross-vgpu,
    # container vllm, --tensor-parallel-size 2): "Use 2 HAMi vGPUs for tensor parallel
    # workers", each with 30 % of a GPU's memory and cores.
    limits = {
        "cpu": "8",
        "memory": "20Gi",
        "nvidia.com/gpu": 2,
        "nvidia.com/gpumem-percentage": 30,
        "nvidia.com/gpucores": 30,
    }
    requests = {
        "cpu": "2",
        "memory": "6Gi",
        "nvidia.com/gpu": 2,
        "nvidia.com/gpumem-percentage": 30,
        "nvidia.com/gpucores": 30,
    }
    result = intent_of(pod(container(requests, limits)))
    assert result.gpus == 2  # not 2 x 0.3 = 0.6
    assert result.source == (
        "hami:nvidia.com/gpu",
        "hami:nvidia.com/gpumem-percentage",
        "hami:nvidia.com/gpucores",
    )


def test_hami_n_vgpus_with_gpumem_keep_mib_per_gpu() -> None:
    res = {"nvidia.com/gpu": "4", "nvidia.com/gpumem": "10000", "nvidia.com/gpucores": "50"}
    result = intent_of(pod(container(limits=res), annotations={"nvidia.com/use-gputype": "A100"}))
    assert result.gpus == 4  # not 4 x 0.5
    assert result.gpu_memory_mib == 10000  # per GPU, not 4 x 10000
    assert result.model == "a100"
    assert result.source == (
        "hami:nvidia.com/gpu",
        "hami:nvidia.com/gpumem",
        "hami:nvidia.com/gpucores",
        "hami:nvidia.com/use-gputype",
    )


def test_hami_one_vgpu_memory_percentage_stays_a_fraction() -> None:
    res = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}
    result = intent_of(pod(container(limits=res)))
    assert result == Intent(gpus=Decimal("0.5"), source=("hami:nvidia.com/gpumem-percentage",))


def test_hami_use_gputype_takes_the_first_entry_in_any_case() -> None:
    res = {"nvidia.com/gpumem": "4000"}
    for raw in ("A100,V100", "a100", " NVIDIA-A100 ,h100"):
        p = pod(container(limits=res), annotations={"nvidia.com/use-gputype": raw})
        assert intent_of(p).model == "a100", raw


def test_hami_wins_over_kai_and_whole_gpu() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "40"}),
        annotations={"gpu-fraction": "0.9"},
    )
    assert intent_of(p).gpus == Decimal("0.4")


def test_hami_percentage_over_100_is_an_error() -> None:
    with pytest.raises(IntentError, match="gpucores"):
        infer_intent(pod(container(limits={"nvidia.com/gpucores": "150"})))


# --- KAI ------------------------------------------------------------------------------


def test_kai_fraction() -> None:
    result = intent_of(pod(annotations={"gpu-fraction": "0.5"}))
    assert result == Intent(gpus=Decimal("0.5"), source=("kai:gpu-fraction",))


def test_kai_fraction_on_several_devices_is_whole_gpus() -> None:
    p = pod(annotations={"gpu-fraction": "0.25", "gpu-fraction-num-devices": "4"})
    assert intent_of(p).gpus == 4  # 4 distinct devices, no longer 4 x 0.25 = 1


def test_kai_half_on_two_devices_is_two_gpus() -> None:
    result = intent_of(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}))
    assert result == Intent(
        gpus=Decimal(2), source=("kai:gpu-fraction", "kai:gpu-fraction-num-devices")
    )


def test_kai_fraction_on_one_device_stays_a_fraction() -> None:
    result = intent_of(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1"}))
    assert result.gpus == Decimal("0.5")


def test_kai_memory_on_several_devices_keeps_mib_per_device() -> None:
    result = intent_of(pod(annotations={"gpu-memory": "2000", "gpu-fraction-num-devices": "3"}))
    assert result.gpus == 3
    assert result.gpu_memory_mib == 2000
    assert result.source == ("kai:gpu-memory", "kai:gpu-fraction-num-devices")


def test_kai_memory_alone_counts_a_tenth_of_a_gpu() -> None:
    result = intent_of(pod(annotations={"gpu-memory": "2000"}))
    assert result.gpus == Decimal("0.1")
    assert result.gpu_memory_mib == 2000
    assert result.source == ("kai:gpu-memory",)


@pytest.mark.parametrize("raw", ["abc", "0", "-0.5", "1.5", "NaN", "Infinity", ""])
def test_kai_bad_fraction_is_an_error(raw: str) -> None:
    with pytest.raises(IntentError, match="gpu-fraction"):
        infer_intent(pod(annotations={"gpu-fraction": raw}))


def test_kai_bad_device_count_is_an_error() -> None:
    with pytest.raises(IntentError, match="gpu-fraction-num-devices"):
        infer_intent(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1.5"}))


def test_a_third_is_rounded_up_to_a_millionth() -> None:
    result = intent_of(pod(annotations={"gpu-fraction": "0.33333333333333333"}))
    assert result.gpus == Decimal("0.333334")


# --- tensor-fusion --------------------------------------------------------------------


def test_tensor_fusion_model_vram_and_pool() -> None:
    annotations = {
        "tensor-fusion.ai/gpu-model": "A100",
        "tensor-fusion.ai/vram-request": "20Gi",
        "tensor-fusion.ai/gpupool": "shared-a100",
    }
    p = pod(labels={"tensor-fusion.ai/enabled": "true"}, annotations=annotations)
    result = intent_of(p)
    assert result.gpus == 1
    assert result.model == "a100"
    assert result.gpu_memory_mib == 20480
    assert result.pool == "shared-a100"
    assert result.source == (
        "tensor-fusion:tensor-fusion.ai/vram-request",
        "tensor-fusion:tensor-fusion.ai/gpu-model",
        "tensor-fusion:tensor-fusion.ai/gpupool",
    )


def test_tensor_fusion_count_with_compute_percent_is_whole_gpus() -> None:
    annotations = {
        "tensor-fusion.ai/gpu-count": "2",
        "tensor-fusion.ai/compute-percent-request": "25",
        "tensor-fusion.ai/gpu-pool": "pool-b",
    }
    result = intent_of(pod(annotations=annotations))
    assert result.gpus == 2  # 2 distinct GPUs, no longer 2 x 0.25 = 0.5
    assert result.pool == "pool-b"
    assert result.source == (
        "tensor-fusion:tensor-fusion.ai/gpu-count",
        "tensor-fusion:tensor-fusion.ai/compute-percent-request",
        "tensor-fusion:tensor-fusion.ai/gpu-pool",
    )


def test_tensor_fusion_count_with_vram_keeps_mib_per_gpu() -> None:
    annotations = {
        "tensor-fusion.ai/gpu-count": "3",
        "tensor-fusion.ai/vram-request": "20Gi",
        "tensor-fusion.ai/compute-percent-request": "40",
    }
    result = intent_of(pod(labels={"tensor-fusion.ai/enabled": "true"}, annotations=annotations))
    assert result.gpus == 3
    assert result.gpu_memory_mib == 20480  # per GPU, not 3 x 20Gi
    assert result.source == (
        "tensor-fusion:tensor-fusion.ai/gpu-count",
        "tensor-fusion:tensor-fusion.ai/compute-percent-request",
        "tensor-fusion:tensor-fusion.ai/vram-request",
    )


def test_tensor_fusion_one_gpu_keeps_the_compute_share() -> None:
    annotations = {
        "tensor-fusion.ai/gpu-count": "1",
        "tensor-fusion.ai/compute-percent-request": "25",
    }
    assert intent_of(pod(annotations=annotations)).gpus == Decimal("0.25")


def test_tensor_fusion_label_alone_is_one_gpu() -> None:
    result = intent_of(pod(labels={"tensor-fusion.ai/enabled": "true"}))
    assert result == Intent(gpus=Decimal(1), source=("tensor-fusion:tensor-fusion.ai/enabled",))


def test_tensor_fusion_label_false_is_no_demand() -> None:
    assert infer_intent(pod(labels={"tensor-fusion.ai/enabled": "false"})) is None


def test_nodepool_selector_wins_over_tensor_fusion_pool() -> None:
    p = pod(
        annotations={"tensor-fusion.ai/gpu-count": "1", "tensor-fusion.ai/gpupool": "tf-pool"},
        node_selector={"karpenter.sh/nodepool": "gpu"},
    )
    result = intent_of(p)
    assert result.pool == "gpu"
    assert "nodeSelector:karpenter.sh/nodepool" in result.source
    assert "tensor-fusion:tensor-fusion.ai/gpupool" not in result.source


def test_tensor_fusion_bad_vram_is_an_error() -> None:
    with pytest.raises(IntentError, match="vram-request"):
        infer_intent(pod(annotations={"tensor-fusion.ai/vram-request": "lots"}))


# --- whole GPUs and scheduling constraints --------------------------------------------


def test_whole_gpus_with_aws_gpu_name_selector() -> None:
    p = pod(
        container({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"}),
        node_selector={"karpenter.k8s.aws/instance-gpu-name": "a100"},
    )
    assert intent_of(p) == Intent(
        gpus=Decimal(2),
        model="a100",
        source=("resources:nvidia.com/gpu", "nodeSelector:karpenter.k8s.aws/instance-gpu-name"),
    )


def test_gpu_feature_discovery_product_label() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "1"}),
        node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
    )
    assert intent_of(p).model == "l4"


def test_node_affinity_in_gives_model_and_pool() -> None:
    affinity = required_affinity(
        [{"key": "zone", "operator": "In", "values": ["a"]}],
        [
            {"key": "cloud.google.com/gke-accelerator", "operator": "In",
             "values": ["nvidia-tesla-t4", "nvidia-l4"]},
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu-t4"]},
        ],
    )  # fmt: skip
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert result.model == "t4"
    assert result.pool == "gpu-t4"
    assert result.source == (
        "resources:nvidia.com/gpu",
        "nodeAffinity:cloud.google.com/gke-accelerator",
        "nodeAffinity:karpenter.sh/nodepool",
    )


def test_node_affinity_not_in_is_ignored() -> None:
    affinity = required_affinity(
        [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "NotIn", "values": ["t4"]}]
    )
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert result.model is None


def test_sharing_layer_model_wins_over_selector() -> None:
    p = pod(
        annotations={"tensor-fusion.ai/gpu-model": "H100"},
        node_selector={"karpenter.k8s.aws/instance-gpu-name": "a100"},
    )
    result = intent_of(p)
    assert result.model == "h100"
    assert "nodeSelector:karpenter.k8s.aws/instance-gpu-name" not in result.source


def test_init_container_peak_beats_smaller_sum() -> None:
    init = [container(limits={"nvidia.com/gpu": "4"})]
    p = pod(container(limits={"nvidia.com/gpu": "1"}), container(limits={"nvidia.com/gpu": "2"}),
            init=init)  # fmt: skip
    assert intent_of(p).gpus == 4


def test_container_sum_beats_smaller_init_peak() -> None:
    init = [container(limits={"nvidia.com/gpu": "2"})]
    p = pod(container(limits={"nvidia.com/gpu": "2"}), container(limits={"nvidia.com/gpu": "1"}),
            init=init)  # fmt: skip
    assert intent_of(p).gpus == 3


def test_sidecar_init_container_adds_to_the_sum() -> None:
    init = [container(limits={"nvidia.com/gpu": "1"}, restartPolicy="Always")]
    p = pod(container(limits={"nvidia.com/gpu": "1"}), init=init)
    assert intent_of(p).gpus == 2


def test_requests_win_over_limits_per_key() -> None:
    c = container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "3"})
    assert intent_of(pod(c)).gpus == 1


def test_gpu_selector_without_demand_is_untouched() -> None:
    p = pod(
        container({"cpu": "1", "memory": "1Gi"}),
        node_selector={"karpenter.k8s.aws/instance-gpu-name": "a100"},
    )
    assert infer_intent(p) is None


def test_zero_gpus_is_no_demand() -> None:
    assert infer_intent(pod(container(limits={"nvidia.com/gpu": "0"}))) is None


def test_pod_without_spec_is_no_demand() -> None:
    assert infer_intent({"metadata": {"name": "x", "annotations": None}}) is None


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"spec": {"containers": {"name": "c"}}}, "spec.containers must be a list"),
        ({"spec": {"containers": ["c"]}}, r"spec.containers\[0\] must be an object"),
        (pod(container(limits={"nvidia.com/gpu": "two"})), "nvidia.com/gpu"),
        (pod(container(limits={"nvidia.com/gpu": "-1"})), "must not be negative"),
        (pod(container(limits={"nvidia.com/gpu": "0.5"})), "whole number"),
        (pod(container(limits={"nvidia.com/gpu": "1e6"})), "more than"),
        (pod(container(limits={"nvidia.com/gpumem": "3X"})), "nvidia.com/gpumem"),
        (pod(container(limits={"nvidia.com/gpu": ["1"]})), "not a quantity"),
        ({"metadata": {"annotations": ["x"]}}, "metadata.annotations must be an object"),
        ({"metadata": {"annotations": {"gpu-fraction": 0.5}}}, "must be a string"),
        ({"spec": {"containers": [{"resources": "big"}]}}, "resources must be an object"),
    ],
)
def test_malformed_fields_raise_intent_error(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(IntentError, match=match):
        infer_intent(bad)


def test_malformed_affinity_raises_only_for_gpu_pods() -> None:
    bad_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": "x"}}}  # fmt: skip
    assert infer_intent(pod(affinity=bad_affinity)) is None
    with pytest.raises(IntentError, match="nodeSelectorTerms"):
        infer_intent(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=bad_affinity))


def test_not_a_mapping_raises() -> None:
    with pytest.raises(IntentError):
        infer_intent([])  # type: ignore[arg-type]


# --- canonical_model ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("NVIDIA-A100-SXM4-80GB", "a100"),
        ("NVIDIA-A100-PCIE-40GB", "a100"),
        ("Tesla-T4", "t4"),
        ("NVIDIA-L4", "l4"),
        ("nvidia-tesla-t4", "t4"),
        ("nvidia-tesla-a100", "a100"),
        ("nvidia-tesla-v100", "v100"),
        ("nvidia-l4", "l4"),
        ("A10G", "a10g"),
        ("NVIDIA-A10", "a10"),
        ("T4", "t4"),
        ("A100", "a100"),
        ("L40S", "l40s"),
        ("NVIDIA-L40S", "l40s"),
        ("l40", "l40"),
        ("NVIDIA-H100-80GB-HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA_B200", "b200"),
        ("GB200", "gb200"),
        ("  a100  ", "a100"),
        ("nvidia-tesla-p100", "p100"),
        ("NVIDIA-RTX-4090", "rtx-4090"),
        ("a100x", "a100x"),
        ("nvidia-", "nvidia-"),
        ("", None),
        ("   ", None),
    ],
)
def test_canonical_model(raw: str, expected: str | None) -> None:
    assert canonical_model(raw) == expected


# --- quantities -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("3k", Decimal(3000)),
        ("20Gi", Decimal(20 * 1024**3)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
        ("1E", Decimal(10**18)),
        (".5Ki", Decimal(512)),
        (8000, Decimal(8000)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity(raw: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(raw, "f") == expected


@pytest.mark.parametrize("raw", ["abc", "", "1K", "1Kib", "1e", "0x10", "1e40", "nan", "9" * 65])
def test_parse_quantity_rejects(raw: str) -> None:
    with pytest.raises(IntentError, match=r"^the-field: "):
        parse_quantity(raw, "the-field")


def test_parse_quantity_rejects_bool() -> None:
    with pytest.raises(IntentError, match="not a quantity"):
        parse_quantity(True, "f")


def test_counts_and_mib_round_up() -> None:
    assert parse_count("3k", "f") == 3000
    assert parse_count("1.2", "f") == 2
    assert to_mib("20Gi", "f") == 20480
    assert to_mib("1G", "f") == 954  # 1e9 B / 1048576 = 953.67
    assert to_mib("1Mi", "f") == 1
