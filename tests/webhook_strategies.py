"""Hypothesis strategies for AdmissionReviews: pods that look like GPU pods of every
sharing layer, with values from sane to hostile, in envelopes from valid to broken."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures" / "admission-reviews"
CAPTURED = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]

RESOURCE_KEYS = [
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores", "cpu", "memory", "amd.com/gpu",
]  # fmt: skip
ANNOTATION_KEYS = [
    "nvidia.com/use-gputype", "nvidia.com/nouse-gputype", "gpu-fraction", "gpu-memory",
    "gpu-fraction-num-devices", "tensor-fusion.ai/gpupool", "tensor-fusion.ai/gpu-pool",
    "tensor-fusion.ai/gpu-model", "tensor-fusion.ai/gpu-count",
    "tensor-fusion.ai/tflops-request", "tensor-fusion.ai/vram-request",
    "tensor-fusion.ai/compute-percent-request", "gpu-intent.io/intent-version",
    "gpu-intent.io/gpus", "gpu-intent.io/model", "gpu-intent.io/pool", "gpu-intent.io/gpu-memory",
    "gpu-intent.io/model-memory", "gpu-intent.io/source", "a~b/c", "",
]  # fmt: skip
LABEL_KEYS = [
    "tensor-fusion.ai/enabled", "gpu-intent.io/trigger", "app.kubernetes.io/managed-by",
    "app", "hami.io/webhook",
]  # fmt: skip
SELECTOR_KEYS = [
    "karpenter.k8s.aws/instance-gpu-name", "nvidia.com/gpu.product", "accelerator",
    "karpenter.sh/nodepool", "cloud.google.com/gke-accelerator",
    "karpenter.azure.com/sku-gpu-name", "kubernetes.io/hostname",
]  # fmt: skip
NAMESPACES = ["ml", "kube-system", "gpu-intent-system", "", "default"]

quantities = st.from_regex(
    r"[+-]?[0-9]{0,4}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,9}|Ki|Mi|Gi|Ei|m|k|M|G|n)?",
    fullmatch=True,
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
#: What a field might hold: mostly quantities and words a sharing layer uses, sometimes
#: anything JSON can say.
sane = st.sampled_from(["1", "0.5", "2", "3000", "30", "true", "A100", "NVIDIA-L4", "l40s",
                        "gpu-standard", "gpu-intent", "20Gi", "0.25"])  # fmt: skip
hostile = st.sampled_from([
    "0e9999999", "1e40", "-1", "0", "", "1e-40", "NaN", "Infinity", "10000000000000", "1Ei",
    "Bad_Pool!", "${GPU_TYPE}", "a,,b",
])  # fmt: skip
values = st.one_of(sane, sane, sane, quantities, hostile, json_values)
strings = st.one_of(
    quantities, st.sampled_from(["true", "A100,H100", "gpu-intent", "0.25"]), st.text(max_size=10)
)


def _mapping(keys: list[str], vals: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a map of the given keys; sometimes other keys, null or any JSON."""
    known = st.dictionaries(st.sampled_from(keys), vals, max_size=4)
    other = st.dictionaries(st.sampled_from(keys) | st.text(max_size=8), vals, max_size=5)
    return st.one_of(known, known, known, other, st.none(), json_values)


resources = st.fixed_dictionaries(
    {}, optional={"limits": _mapping(RESOURCE_KEYS, values), "requests": _mapping(RESOURCE_KEYS, values)}
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.text(max_size=5)},
        optional={"resources": st.one_of(resources, resources, resources, json_values)},
    ),
    min_size=0,
    max_size=3,
)
affinity = st.builds(
    lambda key, values: {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
                ]
            }
        }
    },
    st.sampled_from(SELECTOR_KEYS),
    st.lists(strings, max_size=2),
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.one_of(containers, containers, containers, json_values),
        "initContainers": containers,
        "nodeSelector": _mapping(SELECTOR_KEYS, strings),
        "affinity": affinity | json_values,
        "schedulerName": st.sampled_from(["hami-scheduler", "kai-scheduler", "default-scheduler"]),
    },
)
metadatas = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=10),
        "generateName": st.text(max_size=10),
        "namespace": st.sampled_from(NAMESPACES),
        "labels": _mapping(LABEL_KEYS, strings),
        "annotations": _mapping(ANNOTATION_KEYS, values),
    },
)
def _layer_pod(
    limits: dict[str, Any], annotations: dict[str, Any], labels: dict[str, Any],
    selector: dict[str, Any], extra: dict[str, Any], annotations_shape: str,
) -> dict[str, Any]:
    """A pod shaped the way one sharing layer asks, with fuzzed values."""
    metadata: dict[str, Any] = {"generateName": "p-", "labels": labels}
    merged = {**extra, **annotations}
    if annotations_shape == "map":
        metadata["annotations"] = merged
    elif annotations_shape == "null" and not merged:
        metadata["annotations"] = None
    elif merged:
        metadata["annotations"] = merged
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _layer(limit_keys: list[str], annotation_keys: list[str], labels: dict[str, str]) -> Any:
    return st.builds(
        _layer_pod,
        st.fixed_dictionaries({}, optional={k: values for k in limit_keys}),
        st.fixed_dictionaries({}, optional={k: values for k in annotation_keys}),
        st.just(labels),
        st.dictionaries(st.sampled_from(SELECTOR_KEYS), strings, max_size=2),
        st.dictionaries(st.sampled_from(ANNOTATION_KEYS) | st.text(max_size=6), strings, max_size=2),
        st.sampled_from(["map", "absent", "null"]),
    )


#: Pods of each sharing layer (HAMi, KAI, tensor-fusion, whole GPUs) with fuzzed values.
gpu_pods = st.one_of(
    _layer(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
            "nvidia.com/gpumem-percentage"], ["nvidia.com/use-gputype"], {}),
    _layer([], ["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices"], {}),
    _layer([], ["tensor-fusion.ai/gpu-model", "tensor-fusion.ai/gpu-count",
                "tensor-fusion.ai/vram-request", "tensor-fusion.ai/gpupool"],
           {"tensor-fusion.ai/enabled": "true"}),
    _layer(["nvidia.com/gpu"], [], {}),
)  # fmt: skip

pods = st.one_of(
    gpu_pods,
    gpu_pods,
    st.fixed_dictionaries({"apiVersion": st.just("v1"), "kind": st.just("Pod")},
                          optional={"metadata": metadatas | json_values, "spec": specs | json_values}),
    st.fixed_dictionaries({"metadata": metadatas, "spec": specs}),
)  # fmt: skip


def _envelope(pod: Any, namespace: str, operation: str, kind: Any, uid: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "object": pod,
            "dryRun": False,
        },
    }


POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}


def _mostly(value: Any, otherwise: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``value`` about 9 times in 10, else a draw of ``otherwise`` (one_of would pick
    the simpler branch far more often)."""
    return st.tuples(st.integers(0, 9), otherwise).map(lambda t: t[1] if t[0] == 5 else value)

#: Mostly valid Pod CREATE reviews; some with a broken envelope.
reviews = st.builds(
    _envelope,
    pods,
    st.sampled_from(NAMESPACES),
    st.sampled_from(["CREATE"] * 12 + ["UPDATE", "DELETE", "x"]),
    _mostly(POD_KIND, st.just({"group": "apps", "version": "v1", "kind": "Deployment"}) | json_values),
    _mostly("uid-1", st.just("") | json_scalars),
)


def _captured_with(index: int, path: list[str], value: Any) -> dict[str, Any]:
    """A captured review with one field of its pod replaced."""
    body = copy.deepcopy(CAPTURED[index % len(CAPTURED)])
    node: Any = body["request"]["object"]
    for key in path[:-1]:
        if not isinstance(node, dict):
            return body
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = value
    return body


captured_variants = st.builds(
    _captured_with,
    st.integers(min_value=0, max_value=len(CAPTURED) - 1),
    st.sampled_from(
        [["metadata", "annotations", k] for k in ANNOTATION_KEYS]
        + [["metadata", "labels", k] for k in LABEL_KEYS]
        + [["spec", "nodeSelector", k] for k in SELECTOR_KEYS]
        + [["metadata", "annotations"], ["metadata"], ["spec"], ["spec", "containers"]]
    ),
    values,
)

#: Anything a client could POST: reviews, variants of the captured ones, broken envelopes.
bodies = st.one_of(reviews, reviews, captured_variants, json_values)
