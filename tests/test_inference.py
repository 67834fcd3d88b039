"""infer_intent, canonical_model and the quantity helpers they rest on."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from intent.contract import Intent, IntentError, Source
from intent.inference import canonical_model, infer, infer_intent
from intent.quantity import parse_count, parse_quantity, to_mib


def tokens(intent: Intent | None) -> tuple[str, ...]:
    """The source tokens of ``intent`` as its annotation writes them."""
    assert intent is not None
    return tuple(map(str, intent.source))


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
    assert tokens(result) == (
        "hami:nvidia.com/gpumem",
        "hami:nvidia.com/gpucores",
        "hami:nvidia.com/use-gputype",
    )
    assert result.to_annotations()["gpu-intent.io/gpus"] == "0.3"


def test_hami_gpumem_alone_counts_a_whole_gpu_per_vgpu() -> None:
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": 8000})))
    assert result.gpus == 2
    assert result.gpu_memory_mib == 8000
    assert tokens(result) == ("hami:nvidia.com/gpumem",)


def test_hami_takes_the_larger_of_cores_and_memory_percentage() -> None:
    res = {"nvidia.com/gpucores": "20", "nvidia.com/gpumem-percentage": "50"}
    result = intent_of(pod(container(limits=res)))  # vGPU count defaults to 1
    assert result.gpus == Decimal("0.5")
    assert result.gpu_memory_mib is None


def test_hami_sums_vgpus_per_container() -> None:
    a = container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"})
    b = container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpucores": "25"})
    # 0.3 + 2 whole GPUs (b's two vGPUs sit on two distinct GPUs), not 0.3 + 2 x 0.25
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
    assert tokens(result) == (
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
    assert tokens(result) == (
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
    assert tokens(result) == (
        "hami:nvidia.com/gpu",
        "hami:nvidia.com/gpumem",
        "hami:nvidia.com/gpucores",
        "hami:nvidia.com/use-gputype",
    )


def test_hami_one_vgpu_memory_percentage_stays_a_fraction() -> None:
    res = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}
    result = intent_of(pod(container(limits=res)))
    assert result == Intent(
        gpus=Decimal("0.5"), source=(Source("hami", "nvidia.com/gpumem-percentage"),)
    )


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
    assert result == Intent(gpus=Decimal("0.5"), source=(Source("kai", "gpu-fraction"),))


def test_kai_fraction_on_several_devices_is_whole_gpus() -> None:
    p = pod(annotations={"gpu-fraction": "0.25", "gpu-fraction-num-devices": "4"})
    assert intent_of(p).gpus == 4  # 4 distinct devices, not 4 x 0.25 = 1


def test_kai_half_on_two_devices_is_two_gpus() -> None:
    result = intent_of(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}))
    assert result == Intent(
        gpus=Decimal(2),
        source=(Source("kai", "gpu-fraction"), Source("kai", "gpu-fraction-num-devices")),
    )


def test_kai_fraction_on_one_device_stays_a_fraction() -> None:
    result = intent_of(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1"}))
    assert result.gpus == Decimal("0.5")


def test_kai_memory_on_several_devices_keeps_mib_per_device() -> None:
    result = intent_of(pod(annotations={"gpu-memory": "2000", "gpu-fraction-num-devices": "3"}))
    assert result.gpus == 3
    assert result.gpu_memory_mib == 2000
    assert tokens(result) == ("kai:gpu-memory", "kai:gpu-fraction-num-devices")


def test_kai_memory_alone_counts_a_tenth_of_a_gpu() -> None:
    result = intent_of(pod(annotations={"gpu-memory": "2000"}))
    assert result.gpus == Decimal("0.1")
    assert result.gpu_memory_mib == 2000
    assert tokens(result) == ("kai:gpu-memory",)


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
    assert tokens(result) == (
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
    assert result.gpus == 2  # 2 distinct GPUs, not 2 x 0.25 = 0.5
    assert result.pool == "pool-b"
    assert tokens(result) == (
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
    assert tokens(result) == (
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
    assert result == Intent(
        gpus=Decimal(1), source=(Source("tensor-fusion", "tensor-fusion.ai/enabled"),)
    )


def test_tensor_fusion_label_false_is_no_demand() -> None:
    assert infer_intent(pod(labels={"tensor-fusion.ai/enabled": "false"})) is None


def test_nodepool_selector_wins_over_tensor_fusion_pool() -> None:
    p = pod(
        annotations={"tensor-fusion.ai/gpu-count": "1", "tensor-fusion.ai/gpupool": "tf-pool"},
        node_selector={"karpenter.sh/nodepool": "gpu"},
    )
    result = intent_of(p)
    assert result.pool == "gpu"
    assert "nodeSelector:karpenter.sh/nodepool" in tokens(result)
    assert "tensor-fusion:tensor-fusion.ai/gpupool" not in tokens(result)


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
        source=(
            Source("resources", "nvidia.com/gpu"),
            Source("nodeSelector", "karpenter.k8s.aws/instance-gpu-name"),
        ),
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
    inference = infer(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    result = inference.intent
    assert result is not None
    assert result.model == "t4"  # the first listed of two: an ambiguity resolved by rule
    assert result.pool == "gpu-t4"
    assert tokens(result) == (
        "resources:nvidia.com/gpu",
        "nodeAffinity:cloud.google.com/gke-accelerator",
        "rule:model-first-listed",
        "nodeAffinity:karpenter.sh/nodepool",
    )
    assert inference.warnings == (
        "model: chose nvidia-tesla-t4 of nvidia-tesla-t4,nvidia-l4 (first listed in nodeAffinity "
        "gke-accelerator)",
    )


def test_node_affinity_not_in_is_ignored() -> None:
    affinity = required_affinity(
        [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "NotIn", "values": ["t4"]}]
    )
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert result.model is None


def test_node_constraint_wins_over_a_disagreeing_sharing_layer_model() -> None:
    # The node must carry the selector's label: a trigger for the H100 would buy a node the
    # pod can never run on. The disagreement is a warning and a rule token.
    p = pod(
        annotations={"tensor-fusion.ai/gpu-model": "H100"},
        node_selector={"karpenter.k8s.aws/instance-gpu-name": "a100"},
    )
    inference = infer(p)
    assert inference.intent is not None
    assert inference.intent.model == "a100"
    assert tokens(inference.intent)[-2:] == (
        "nodeSelector:karpenter.k8s.aws/instance-gpu-name",
        "rule:model-earlier-source",
    )
    assert inference.warnings == (
        "model: kept a100 (nodeSelector instance-gpu-name), not h100 (tensor-fusion gpu-model)",
    )
    assert all(len("gpu-intent: " + w) <= 120 for w in inference.warnings)


def test_sharing_layer_model_that_agrees_with_the_selector_is_recorded_too() -> None:
    p = pod(
        annotations={"tensor-fusion.ai/gpu-model": "A100"},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    )
    result = intent_of(p)
    assert (result.model, result.model_memory_mib) == ("a100", 81920)
    assert "nodeSelector:nvidia.com/gpu.product" in tokens(result)
    assert "tensor-fusion:tensor-fusion.ai/gpu-model" in tokens(result)
    assert result is not None and all(s.where != "rule" for s in result.source)


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


def test_malformed_affinity_costs_only_the_constraints() -> None:
    bad_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": "x"}}}  # fmt: skip
    assert infer_intent(pod(affinity=bad_affinity)) is None
    inference = infer(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=bad_affinity))
    assert inference.intent == Intent(
        gpus=Decimal(1), source=(Source("resources", "nvidia.com/gpu"),)
    )
    assert any("nodeSelectorTerms is not a list" in w for w in inference.warnings)


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


# --- sources added with the catalog -------------------------------------------------------


def aff_in(key: str, *values: str) -> dict[str, Any]:
    return required_affinity([{"key": key, "operator": "In", "values": list(values)}])


def test_hami_n_vgpus_with_memory_percentage_alone_are_n_gpus() -> None:
    res = {"nvidia.com/gpu": "3", "nvidia.com/gpumem-percentage": "25"}
    result = intent_of(pod(container(limits=res)))
    assert result.gpus == 3  # not 3 x 0.25
    assert tokens(result)[:2] == ("hami:nvidia.com/gpu", "hami:nvidia.com/gpumem-percentage")


def test_aks_mi300x_pod_asking_amd_gpu_gets_an_intent() -> None:
    # An AKS ND MI300X v5 node pool pod: amd.com/gpu (AMD's device plugin), instance type
    # selector. Before the catalog no intent was written for it at all.
    p = pod(
        container(limits={"amd.com/gpu": "1"}),
        node_selector={"node.kubernetes.io/instance-type": "Standard_ND96isr_MI300X_v5"},
    )
    result = intent_of(p)
    assert (result.gpus, result.model, result.model_memory_mib) == (1, "mi300x", 196608)
    assert tokens(result) == (
        "resources:amd.com/gpu",
        "nodeSelector:node.kubernetes.io/instance-type",
    )


def test_amd_gpu_alone_is_whole_gpus_with_no_model() -> None:
    result = intent_of(pod(container(requests={"amd.com/gpu": "8"}, limits={"amd.com/gpu": "8"})))
    assert result == Intent(gpus=Decimal(8), source=(Source("resources", "amd.com/gpu"),))


def test_instance_type_selector_names_the_40gb_a100() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "8"}),
        node_selector={"node.kubernetes.io/instance-type": "p4d.24xlarge"},
    )
    inference = infer(p)
    assert inference.intent is not None
    assert (inference.intent.model, inference.intent.model_memory_mib) == ("a100", 40960)
    assert inference.warnings == ()
    (model,) = [r for r in inference.reasons if r.part == "model"]
    assert model.why.startswith("p4d.24xlarge has 8 x a100 40 GB (nvidia)")


def test_instance_types_of_one_gpu_are_no_ambiguity() -> None:
    affinity = aff_in("node.kubernetes.io/instance-type", "g6e.2xlarge", "g6e.4xlarge")
    inference = infer(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert inference.intent is not None
    assert inference.intent.model == "l40s"
    assert tokens(inference.intent) == (
        "resources:nvidia.com/gpu",
        "nodeAffinity:node.kubernetes.io/instance-type",
    )
    assert inference.warnings == ()


def test_instance_types_of_two_gpus_take_the_first_with_a_warning() -> None:
    affinity = aff_in("node.kubernetes.io/instance-type", "g6e.2xlarge", "p4d.24xlarge")
    inference = infer(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert inference.intent is not None and inference.intent.model == "l40s"
    assert "rule:model-first-listed" in tokens(inference.intent)
    assert inference.warnings == (
        "model: chose g6e.2xlarge of g6e.2xlarge,p4d.24xlarge (first listed in nodeAffinity "
        "instance-type)",
    )


def test_more_gpus_than_the_instance_type_has_is_a_warning() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "16"}),
        node_selector={"node.kubernetes.io/instance-type": "p4d.24xlarge"},
    )
    assert infer(p).warnings == ("gpus: 16 is more than the 8 GPUs of p4d.24xlarge",)


def test_eks_auto_mode_gpu_name_label() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "1"}),
        node_selector={"eks.amazonaws.com/instance-gpu-name": "l40s",
                       "eks.amazonaws.com/compute-type": "auto"},
    )  # fmt: skip
    result = intent_of(p)
    assert result.model == "l40s"
    assert "nodeSelector:eks.amazonaws.com/instance-gpu-name" in tokens(result)


def test_hami_use_gputype_alone_with_whole_gpus_names_the_model() -> None:
    # Project-HAMi/HAMi examples/nvidia/specify_card_type_to_use.yaml: A100 or V100, 2 GPUs.
    p = pod(container(limits={"nvidia.com/gpu": 2}),
            annotations={"nvidia.com/use-gputype": "A100,V100"})  # fmt: skip
    inference = infer(p)
    assert inference.intent is not None
    assert (inference.intent.gpus, inference.intent.model) == (2, "a100")
    assert tokens(inference.intent) == (
        "resources:nvidia.com/gpu",
        "hami:nvidia.com/use-gputype",
        "rule:model-first-listed",
    )
    assert inference.warnings == (
        "model: chose A100 of A100,V100 (first listed in hami use-gputype)",
    )


def test_hami_nouse_gputype_alone_names_no_model() -> None:
    # Project-HAMi/HAMi examples/nvidia/specify_card_type_not_use.yaml
    p = pod(container(limits={"nvidia.com/gpu": 2}),
            annotations={"nvidia.com/nouse-gputype": "1080,2080"})  # fmt: skip
    result = intent_of(p)
    assert (result.gpus, result.model) == (2, None)


def test_hami_nouse_gputype_excludes_listed_candidates_as_substrings() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": 1}),
        annotations={"nvidia.com/nouse-gputype": "T4"},
        affinity=aff_in("cloud.google.com/gke-accelerator", "nvidia-tesla-t4", "nvidia-l4"),
    )
    inference = infer(p)
    assert inference.intent is not None and inference.intent.model == "l4"
    assert "hami:nvidia.com/nouse-gputype" in tokens(inference.intent)
    assert inference.warnings == ()  # one candidate left: nothing ambiguous


def test_affinity_not_in_excludes_a_model() -> None:
    affinity = required_affinity([
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["t4", "l4"]},
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "NotIn", "values": ["t4"]},
    ])  # fmt: skip
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert result.model == "l4"


@pytest.mark.parametrize(
    ("key", "value", "model", "memory"),
    [
        ("node.kubernetes.io/instance-type", "GN7.2XLARGE32", "t4", 16384),
        ("node.kubernetes.io/instance-type", "GT4.4XLARGE96", "a100", 40960),
        ("node.kubernetes.io/instance-type", "PNV4.7XLARGE116", "a10", 24576),
        ("karpenter.k8s.tke/instance-family", "GN10Xp", "v100", 32768),
    ],
)
def test_tencent_tke_gpu_families(key: str, value: str, model: str, memory: int) -> None:
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "1"}), node_selector={key: value}))
    assert (result.model, result.model_memory_mib) == (model, memory)


@pytest.mark.parametrize(
    ("product", "memory"),
    [("NVIDIA-A100-SXM4-80GB", 81920), ("nvidia-a100-80gb", 81920), ("A100-SXM4-80GB", 81920),
     ("NVIDIA-A100-SXM4-40GB", 40960), ("nvidia-tesla-a100", 40960)],
)  # fmt: skip
def test_memory_variants_stay_apart(product: str, memory: int) -> None:
    key = "cloud.google.com/gke-accelerator" if product.startswith("nvidia-") else \
        "nvidia.com/gpu.product"  # fmt: skip
    result = intent_of(pod(container(limits={"nvidia.com/gpu": "1"}), node_selector={key: product}))
    assert (result.model, result.model_memory_mib) == ("a100", memory)
    assert result.to_annotations()["gpu-intent.io/model-memory"] == str(memory)


def test_mig_slice_product_is_a_seventh_of_the_40gb_a100() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "1"}),
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
    )
    result = intent_of(p)
    assert (result.model, result.model_memory_mib) == ("a100", 40960)
    assert result.gpus == Decimal("0.142858")  # 1/7 rounded up to a millionth
    assert "mig:1g.5gb" in tokens(result)


def test_memory_the_pod_states_picks_the_model_that_fits() -> None:
    p = pod(
        annotations={"gpu-memory": "30000"},
        affinity=aff_in("karpenter.k8s.aws/instance-gpu-name", "l4", "l40s"),
    )
    inference = infer(p)
    assert inference.intent is not None and inference.intent.model == "l40s"  # l4: 22888 MiB
    assert "rule:model-memory-fits" in tokens(inference.intent)
    assert inference.warnings == (
        "model: chose l40s of l4,l40s (first with 30000 MiB in nodeAffinity instance-gpu-name)",
    )


# --- a part that does not parse costs only that part ---------------------------------------


def test_product_name_with_spaces_is_normalized() -> None:
    p = pod(container(limits={"nvidia.com/gpu": "1"}),
            node_selector={"nvidia.com/gpu.product": "NVIDIA GeForce RTX 3090"})  # fmt: skip
    inference = infer(p)
    assert inference.intent is not None and inference.intent.model == "rtx-3090"
    assert inference.warnings == ()


def test_unsubstituted_placeholder_is_left_out_and_the_rest_stands() -> None:
    p = pod(
        labels={"tensor-fusion.ai/enabled": "true"},
        annotations={"tensor-fusion.ai/gpu-model": "${GPU_TYPE}",
                     "tensor-fusion.ai/vram-request": "10Gi"},
    )  # fmt: skip
    inference = infer(p)
    assert inference.intent is not None
    assert (inference.intent.gpus, inference.intent.model) == (1, None)
    assert inference.intent.gpu_memory_mib == 10240
    assert inference.warnings == (
        "model: tensor-fusion:tensor-fusion.ai/gpu-model '${GPU_TYPE}' is an unsubstituted "
        "placeholder; left out",
    )


def test_unknown_model_is_used_as_a_label_value_with_a_warning() -> None:
    p = pod(container(limits={"nvidia.com/gpu": "1"}),
            node_selector={"accelerator": "Quadro RTX 8000!"})  # fmt: skip
    inference = infer(p)
    assert inference.intent is not None and inference.intent.model == "quadro-rtx-8000"
    assert inference.warnings == (
        "model: nodeSelector:accelerator 'Quadro RTX 8000!' is not in the GPU catalog; used as "
        "quadro-rtx-8000",
    )


def test_pool_that_is_not_a_nodepool_name_is_left_out() -> None:
    p = pod(annotations={"tensor-fusion.ai/gpu-count": "1", "tensor-fusion.ai/gpupool": "Pool_A"})
    inference = infer(p)
    assert inference.intent is not None and inference.intent.pool is None
    assert inference.warnings == (
        "pool: tensor-fusion:tensor-fusion.ai/gpupool 'Pool_A' is not a NodePool name; left out",
    )


def test_broken_sharing_layer_falls_back_to_the_whole_gpu_request() -> None:
    res = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}
    inference = infer(pod(container(limits=res)))
    assert inference.intent == Intent(
        gpus=Decimal(1), source=(Source("resources", "nvidia.com/gpu"),)
    )
    (warning,) = inference.warnings
    assert warning.startswith("hami ignored: ") and "gpucores" in warning


def test_nodepool_in_list_takes_the_first_with_a_warning() -> None:
    affinity = aff_in("karpenter.sh/nodepool", "gpu-a", "gpu-b")
    inference = infer(pod(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity))
    assert inference.intent is not None and inference.intent.pool == "gpu-a"
    assert "rule:pool-first-listed" in tokens(inference.intent)
    assert inference.warnings == ("pool: chose gpu-a of gpu-a,gpu-b (first listed in nodeAffinity nodepool)",)


def test_sharing_layers_that_disagree_keep_the_first_with_a_warning() -> None:
    p = pod(annotations={"gpu-fraction": "0.5", "tensor-fusion.ai/compute-percent-request": "20"})
    inference = infer(p)
    assert inference.intent is not None and inference.intent.gpus == Decimal("0.5")
    assert "rule:gpus-earlier-source" in tokens(inference.intent)
    assert inference.warnings == (
        "gpus: kept 0.5 (kai gpu-fraction), not 0.2 (tensor-fusion compute-percent-request)",
    )


# --- user annotations -----------------------------------------------------------------------


def test_user_gpus_win_and_are_recorded() -> None:
    p = pod(container(limits={"nvidia.com/gpu": "1"}), annotations={"gpu-intent.io/gpus": "0.25"})
    inference = infer(p)
    assert inference.intent is not None
    assert inference.intent.gpus == Decimal("0.25")
    assert tokens(inference.intent) == ("user:gpu-intent.io/gpus",)
    assert inference.warnings == (
        "gpus: kept your 0.25 (gpu-intent.io/gpus), not 1 (resources gpu)",
    )


def test_user_gpus_alone_make_a_gpu_pod() -> None:
    result = intent_of(pod(annotations={"gpu-intent.io/gpus": "0.25"}))
    assert result == Intent(gpus=Decimal("0.25"), source=(Source("user", "gpu-intent.io/gpus"),))


def test_user_model_is_normalized_through_the_catalog_and_wins() -> None:
    p = pod(
        container(limits={"nvidia.com/gpu": "1"}),
        annotations={"gpu-intent.io/model": "A100-SXM4-80GB"},
        node_selector={"karpenter.k8s.aws/instance-gpu-name": "a100"},
    )
    result = intent_of(p)
    assert (result.model, result.model_memory_mib) == ("a100", 81920)
    assert tokens(result)[1:] == (
        "user:gpu-intent.io/model",
        "nodeSelector:karpenter.k8s.aws/instance-gpu-name",
    )


@pytest.mark.parametrize(
    ("annotations", "warning"),
    [
        ({"gpu-intent.io/gpus": "-1"}, "gpu-intent.io/gpus: '-1' is not a GPU count"),
        ({"gpu-intent.io/pool": "Not A Pool"}, "pool: user:gpu-intent.io/pool 'Not A Pool' is not"),
        ({"gpu-intent.io/gpu-memory": "lots"}, "gpu-intent.io/gpu-memory: 'lots' is not a MiB count"),
        ({"gpu-intent.io/model": "${MODEL}"}, "model: user:gpu-intent.io/model '${MODEL}' is an"),
    ],
)
def test_invalid_user_annotations_are_ignored_with_a_warning(
    annotations: dict[str, str], warning: str
) -> None:
    inference = infer(pod(container(limits={"nvidia.com/gpu": "1"}), annotations=annotations))
    assert inference.intent is not None and inference.intent.gpus == 1
    assert any(w.startswith(warning) for w in inference.warnings), inference.warnings


def test_user_gpu_memory_quantity_is_read_as_mib() -> None:
    p = pod(container(limits={"nvidia.com/gpu": "1"}), annotations={"gpu-intent.io/gpu-memory": "20Gi"})
    inference = infer(p)
    assert inference.intent is not None and inference.intent.gpu_memory_mib == 20480
    assert inference.warnings == ("gpu-intent.io/gpu-memory: '20Gi' read as 20480 MiB",)


def test_every_warning_fits_120_characters_with_the_prefix() -> None:
    long = "x" * 300
    p = pod(
        container(limits={"nvidia.com/gpu": "1"}),
        annotations={"tensor-fusion.ai/gpu-model": "${" + long + "}", "gpu-intent.io/pool": long},
        node_selector={"accelerator": long},
    )
    inference = infer(p)
    assert len(inference.warnings) >= 3
    assert all(len("gpu-intent: " + w) <= 120 for w in inference.warnings)


def _every_manifest_template() -> list[Any]:
    from pathlib import Path

    from gpu_intent.explain import find_templates, read_documents

    root = Path(__file__).resolve().parent.parent
    files = sorted(str(p) for d in (root / "tests/fixtures/manifests", root / "examples")
                   for p in d.glob("*.yaml"))  # fmt: skip
    return [t.pod for document in read_documents(files) for t in find_templates(document)]


def test_without_reasons_the_intent_and_warnings_are_the_same() -> None:
    templates = _every_manifest_template()
    assert len(templates) > 30
    for template in templates:
        try:
            full = infer(template)
        except IntentError as e:
            with pytest.raises(IntentError, match=f"^{re.escape(str(e))}$"):
                infer(template, reasons=False)
            continue
        lean = infer(template, reasons=False)
        assert (lean.intent, lean.warnings, lean.reasons) == (full.intent, full.warnings, ())
        assert full.intent is None or len(full.reasons) == 5
