"""Builders of API objects for the controller's unit tests (plain dicts, as the API sends)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from intent.contract import Intent, Source

T0 = "2026-11-21T12:00:00Z"


def gpu_pod(
    name: str,
    gpus: str,
    *,
    model: str | None = None,
    pool: str | None = None,
    source: tuple[str, ...] = ("kai:gpu-fraction",),
    namespace: str = "ml",
    resources: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
    unschedulable: bool = True,
    status_annotation: str | None = None,
    created: str = T0,
    extra_annotations: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A pending pod carrying a webhook-written intent, tolerating the ``nvidia.com/gpu``
    taint of the `nodepool` builder's pools unless ``tolerations`` says otherwise."""
    sources = tuple(Source.parse(token) for token in source)
    annotations = Intent(Decimal(gpus), model=model, pool=pool, source=sources).to_annotations()
    if status_annotation is not None:
        annotations["gpu-intent.io/scale-up"] = status_annotation
    annotations.update(extra_annotations or {})
    conditions = (
        [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/0 nodes are available",
                "lastTransitionTime": created,
            }
        ]
        if unschedulable
        else []
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "resourceVersion": "1",
            "annotations": annotations,
        },
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": resources or {}}],
            "nodeSelector": node_selector or {},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]
            if tolerations is None
            else tolerations,
        },
        "status": {"phase": "Pending", "conditions": conditions},
    }


def nodepool(
    name: str,
    *,
    models: list[str] | None = None,
    weight: int | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    label: str = "karpenter.k8s.aws/instance-gpu-name",
) -> dict[str, Any]:
    requirements: list[dict[str, Any]] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]
    if models is not None:
        requirements.append({"key": label, "operator": "In", "values": models})
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass",
                    "name": "default",
                },
                "requirements": requirements,
                "taints": taints
                if taints is not None
                else [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            }
        }
    }
    if weight is not None:
        spec["weight"] = weight
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def nodeclaim(
    name: str,
    pool: str,
    *,
    gpus: int = 1,
    model: str | None = None,
    created: str = T0,
    ready: bool = False,
    launched: bool = False,
    node: str | None = None,
    deleting: bool = False,
    marked: Sequence[str] = (),
) -> dict[str, Any]:
    """A NodeClaim as Karpenter stores it; ``marked``: trigger names whose markers it
    carries (the triggers it was bought for)."""
    requirements: list[dict[str, Any]] = [
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool]}
    ]
    if marked:
        requirements.append(
            {"key": "gpu-intent.io/trigger-name", "operator": "NotIn", "values": sorted(marked)}
        )
    if model:
        requirements.append(
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": [model]}
        )
    conditions = [
        {"type": "Launched", "status": "True" if launched or ready else "Unknown"},
        {"type": "Ready", "status": "True" if ready else "Unknown", "lastTransitionTime": created},
    ]
    meta: dict[str, Any] = {
        "name": name,
        "creationTimestamp": created,
        "labels": {"karpenter.sh/nodepool": pool},
    }
    if deleting:
        meta["deletionTimestamp"] = created
    status: dict[str, Any] = {"conditions": conditions}
    if node:
        status["nodeName"] = node
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "spec": {
            "requirements": requirements,
            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}},
        },
        "status": status,
    }
