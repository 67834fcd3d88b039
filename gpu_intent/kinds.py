"""Where each workload kind keeps its pod templates: the table ``gpu-intent explain`` reads.

Pure: a function of the object and the catalog. `KINDS` maps a kind (or ``<group>/<kind>``
where two groups share a kind name: Volcano's ``batch.volcano.sh/Job``) to ``(path,
shape)`` pairs. A path is dot-separated keys; ``key[]`` is every item of a list, ``*``
every value of a map. The shape says what sits there and how it becomes a pod:

- ``pod``: a PodTemplateSpec (``metadata`` + ``spec``), or the Pod itself (path ``""``).
- ``podspec``: a PodSpec (KServe's ``workerSpec``, LLMInferenceService's ``template``).
- ``kserve``: a KServe component (``predictor``, ``transformer``, ``explainer``): an
  inline PodSpec whose ``model`` or framework key (``tensorflow``, ``pytorch``...) is one
  more container; the InferenceService's ``serving.kserve.io/gke-accelerator`` annotation
  becomes the ``cloud.google.com/gke-accelerator`` node selector KServe's pod webhook
  adds (kserve/kserve ``pkg/webhook/admission/pod/accelerator_injector.go``).
- ``argo``: an Argo template: ``container``, ``script`` or ``containerSet.containers``,
  its ``initContainers`` and ``sidecars``, its or the workflow's ``nodeSelector`` and
  ``affinity`` (argoproj/argo-workflows ``IoArgoprojWorkflowV1alpha1Template.md``).
- ``kaito``: a KAITO ``resource`` (``instanceType``, ``count``): the pods KAITO makes ask
  for every GPU of a node of that instance type (the catalog's count) and run on it
  (kaito-project/kaito ``examples/inference/kaito_workspace_deepseek_r1.yaml``).
- ``trainjob``: Kubeflow Trainer v2 ``spec.trainer``: ``resourcesPerNode`` is one node's
  container resources (kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go``).
- ``ray-serve``: a RayService worker group's pod template, with the ``accelerator_type``
  its ``serveConfigV2`` (a YAML string) names as a model hint (ray-project/kuberay
  ``ray-operator/config/samples/ray-service.deepseek.yaml``).

Research 28 part C lists each kind's template paths with a public sample.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from intent.catalog import Catalog
from intent.contract import Source

__all__ = ["KINDS", "NO_TEMPLATES", "Found", "templates"]

#: Kubeflow training-operator kinds -> their ``<prefix>ReplicaSpecs`` (kubeflow/training-operator
#: pkg/apis/kubeflow.org/v1; kubeflow/mpi-operator v2beta1).
_KFTO: Final = {
    "PyTorchJob": "pytorch", "TFJob": "tf", "MPIJob": "mpi", "XGBoostJob": "xgb",
    "PaddleJob": "paddle", "JAXJob": "jax", "MXJob": "mx",
}  # fmt: skip
_KSERVE: Final = ("predictor", "transformer", "explainer")
#: KServe v1beta1 predictor framework keys, each a Container (kserve/kserve
#: ``pkg/apis/serving/v1beta1/predictor.go``).
KSERVE_FRAMEWORKS: Final = (
    "model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface",
    "pmml", "lightgbm", "paddle",
)  # fmt: skip
_RAY_HEAD: Final = "headGroupSpec.template"
_RAY_WORKERS: Final = "workerGroupSpecs[].template"

KINDS: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "Pod": (("", "pod"),),
    **{k: (("spec.template", "pod"),) for k in (
        "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController",
    )},
    "CronJob": (("spec.jobTemplate.spec.template", "pod"),),
    "PodTemplate": (("template", "pod"),),
    # Argo Workflows (argoproj.io/v1alpha1)
    **{k: (("spec.templates[]", "argo"),) for k in (
        "Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate",
    )},
    "CronWorkflow": (("spec.workflowSpec.templates[]", "argo"),),
    # KServe (serving.kserve.io v1beta1; v1alpha1/v1alpha2 for runtimes and LLMs)
    "InferenceService": tuple(
        (f"spec.{c}{w}", shape) for c in _KSERVE
        for w, shape in (("", "kserve"), (".workerSpec", "podspec"))
    ),
    **{k: (("spec", "podspec"), ("spec.workerSpec", "podspec")) for k in (
        "ServingRuntime", "ClusterServingRuntime",
    )},
    "LLMInferenceService": tuple((f"spec.{p}", "podspec") for p in (
        "template", "worker", "prefill.template", "prefill.worker",
    )),
    # KAITO (kaito.sh)
    "Workspace": (("resource", "kaito"),),
    "InferenceSet": (("spec.template.resource", "kaito"),),
    "RAGEngine": (("spec.compute", "kaito"),),
    "MultiRoleInference": (("spec.roles[]", "kaito"),),
    # KubeRay (ray.io/v1)
    "RayCluster": ((f"spec.{_RAY_HEAD}", "pod"), (f"spec.{_RAY_WORKERS}", "pod")),
    "RayJob": (
        (f"spec.rayClusterSpec.{_RAY_HEAD}", "pod"), (f"spec.rayClusterSpec.{_RAY_WORKERS}", "pod"),
        ("spec.submitterPodTemplate", "pod"),
    ),
    "RayService": (
        (f"spec.rayClusterConfig.{_RAY_HEAD}", "ray-serve"),
        (f"spec.rayClusterConfig.{_RAY_WORKERS}", "ray-serve"),
    ),
    # Kubeflow training-operator (kubeflow.org/v1, MPIJob v2beta1) and Trainer v2
    **{kind: ((f"spec.{prefix}ReplicaSpecs.*.template", "pod"),) for kind, prefix in _KFTO.items()},
    "TrainJob": (("spec.trainer", "trainjob"),),
    **{k: (("spec.template.spec.replicatedJobs[].template.spec.template", "pod"),) for k in (
        "TrainingRuntime", "ClusterTrainingRuntime",
    )},
    "JobSet": (("spec.replicatedJobs[].template.spec.template", "pod"),),
    # LeaderWorkerSet (leaderworkerset.x-k8s.io/v1)
    "LeaderWorkerSet": (
        ("spec.leaderWorkerTemplate.leaderTemplate", "pod"),
        ("spec.leaderWorkerTemplate.workerTemplate", "pod"),
    ),
    # Volcano (batch.volcano.sh/v1alpha1): its Job shares batch/v1's kind name
    "batch.volcano.sh/Job": (("spec.tasks[].template", "pod"),),
}  # fmt: skip

#: Kinds that hold no pod template: read silently.
NO_TEMPLATES: Final = frozenset({
    "Namespace", "NodePool", "NodeClaim", "EC2NodeClass", "AKSNodeClass", "GCENodeClass",
    "TKEMachineNodeClass", "ECSNodeClass", "ResourceClaim", "ResourceClaimTemplate",
    "DeviceClass", "ResourceSlice", "ConfigMap", "Secret", "Service", "ServiceAccount",
    "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "PersistentVolumeClaim",
    "PriorityClass", "Queue", "PodGroup", "Ingress", "InferenceGraph",
    "LLMInferenceServiceConfig", "CustomResourceDefinition",
})  # fmt: skip
#: Longest ``serveConfigV2`` read for a model hint (real ones are a few KiB).
MAX_SERVE_CONFIG: Final = 64 * 1024
_RAY_HINT: Final = Source("ray-serve", "accelerator_type")
_GKE_ANNOTATION: Final = "serving.kserve.io/gke-accelerator"
_GKE_LABEL: Final = "cloud.google.com/gke-accelerator"
_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
_VENDOR_RESOURCE: Final = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


@dataclass(frozen=True, slots=True)
class Found:
    """One template as a pod, where it sits, the model hints and why none could be read."""

    path: str
    pod: Mapping[str, Any]
    hints: tuple[tuple[Source, str], ...] = ()
    error: str = ""


def _resolve(node: object, parts: list[str], path: str) -> Iterator[tuple[str, Any]]:
    """The values at ``parts`` below ``node`` with their paths (wildcards expanded)."""
    if not parts:
        yield path, node
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, Mapping):
            for key, value in node.items():
                yield from _resolve(value, rest, f"{path}.{key}")
        return
    many = head.endswith("[]")
    key = head[:-2] if many else head
    value = node.get(key) if isinstance(node, Mapping) else None
    here = f"{path}.{key}" if path else key
    if not many:
        if value is not None:
            yield from _resolve(value, rest, here)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _resolve(item, rest, f"{here}[{i}]")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _kserve(component: Mapping[str, Any], body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    extra = [_mapping(component[k]) for k in KSERVE_FRAMEWORKS if isinstance(component.get(k), Mapping)]
    containers = [*extra, *(component.get("containers") or [])]
    if not containers:
        return None
    spec = {k: v for k, v in component.items() if k not in KSERVE_FRAMEWORKS}
    spec["containers"] = containers
    annotations = _mapping(_mapping(body.get("metadata")).get("annotations"))
    accelerator = annotations.get(_GKE_ANNOTATION)
    if isinstance(accelerator, str) and accelerator:
        spec["nodeSelector"] = {**_mapping(spec.get("nodeSelector")), _GKE_LABEL: accelerator}
    return {"metadata": {"annotations": dict(annotations)}, "spec": spec}


def _argo(template: Mapping[str, Any], workflow: Mapping[str, Any]) -> Mapping[str, Any] | None:
    containers: list[Any] = []
    for key in ("container", "script"):
        if isinstance(template.get(key), Mapping):
            containers.append(template[key])
    containers += list(_mapping(template.get("containerSet")).get("containers") or [])
    if not containers:
        return None  # steps, dag, resource, suspend: no pod of its own
    containers += list(template.get("sidecars") or [])
    spec: dict[str, Any] = {"containers": containers}
    if template.get("initContainers"):
        spec["initContainers"] = template["initContainers"]
    for key in ("nodeSelector", "affinity", "tolerations", "schedulerName"):
        value = template.get(key, workflow.get(key))
        if value is not None:
            spec[key] = value
    return {"metadata": _mapping(template.get("metadata")), "spec": spec}


def _kaito(resource: Mapping[str, Any], catalog: Catalog) -> Mapping[str, Any] | str:
    name = resource.get("instanceType")
    if not isinstance(name, str) or not name:
        return "no instanceType: KAITO picks nodes by labelSelector; no GPU named"
    found = catalog.instance_type(name)
    if found is None or found.count is None:
        return f"instance type {name} is not in the GPU catalog (add it with --catalog)"
    resource_name = _VENDOR_RESOURCE.get(found.gpu.vendor, "nvidia.com/gpu")
    container = {"name": "kaito", "resources": {"limits": {resource_name: found.count}}}
    return {"spec": {"nodeSelector": {_INSTANCE_TYPE: name}, "containers": [container]}}


def _accelerator_types(config: object, out: dict[str, None], budget: list[int]) -> None:
    """Every ``accelerator_type`` string in a parsed serveConfigV2, visiting at most
    ``budget[0]`` nodes."""
    budget[0] -= 1
    if budget[0] < 0:
        return
    if isinstance(config, Mapping):
        for key, value in config.items():
            if key == "accelerator_type" and isinstance(value, str) and value:
                out[value] = None
            else:
                _accelerator_types(value, out, budget)
    elif isinstance(config, list):
        for item in config:
            _accelerator_types(item, out, budget)


def _ray_hints(body: Mapping[str, Any]) -> tuple[tuple[Source, str], ...]:
    raw = _mapping(body.get("spec")).get("serveConfigV2")
    if not isinstance(raw, str) or len(raw) > MAX_SERVE_CONFIG:
        return ()
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError:
        return ()
    found: dict[str, None] = {}
    _accelerator_types(config, found, [10_000])
    return ((_RAY_HINT, next(iter(found))),) if len(found) == 1 else ()


def _as_pod(shape: str, node: object, body: Mapping[str, Any], catalog: Catalog,
            parent: Mapping[str, Any]) -> Found | Mapping[str, Any] | None:  # fmt: skip
    """The pod ``node`` of ``shape`` stands for (None: none there), or a `Found` error."""
    if not isinstance(node, Mapping):
        return None
    if shape in ("pod", "ray-serve"):
        return node if isinstance(node.get("spec"), Mapping) else None
    if shape == "podspec":
        return {"spec": node} if node.get("containers") else None
    if shape == "kserve":
        return _kserve(node, body)
    if shape == "argo":
        return _argo(node, parent)
    if shape == "trainjob":
        resources = node.get("resourcesPerNode")
        if not isinstance(resources, Mapping):
            return None
        return {"spec": {"containers": [{"name": "node", "resources": resources}]}}
    kaito = _kaito(node, catalog)
    return Found("", {}, error=kaito) if isinstance(kaito, str) else kaito


def templates(body: Mapping[str, Any], catalog: Catalog) -> list[Found]:
    """The pod templates of one top-level object, by `KINDS` (module docstring)."""
    kind = str(body.get("kind") or "?")
    group = str(body.get("apiVersion") or "").rpartition("/")[0]
    table = KINDS.get(f"{group}/{kind}") or KINDS.get(kind)
    if table is None:
        if kind in NO_TEMPLATES:
            return []
        known = ", ".join(sorted(KINDS, key=str.lower))
        return [Found("", {}, error=f"kind {kind} is not one gpu-intent explain knows; it reads {known}")]
    out: list[Found] = []
    for pattern, shape in table:
        if pattern == "":
            if isinstance(body.get("spec"), Mapping):
                out.append(Found("", body))
            continue
        parts = pattern.split(".")
        parent = body
        if shape == "argo":  # the workflow's own spec: the templates' defaults
            parent = _mapping(next((v for _, v in _resolve(body, parts[:-1], "")), None))
        hints = _ray_hints(body) if shape == "ray-serve" else ()
        for path, node in _resolve(body, parts, ""):
            pod = _as_pod(shape, node, body, catalog, parent)
            if isinstance(pod, Found):
                out.append(Found(path, {}, error=pod.error))
            elif pod is not None:
                out.append(Found(path, pod, hints))
    return out
