"""The demo's examples directory: reading, validating and applying its manifests, and
the webhook registration (MutatingWebhookConfiguration) the demo creates."""

from __future__ import annotations

import base64
import importlib.util
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes_asyncio import client

from intent.contract import (
    INJECT_LABEL,
    INJECT_VALUE,
)
from intent.keys import AWS_GPU_NAME_LABEL, KARPENTER_GROUP
from intent.keys import INSTANCE_TYPE_LABEL as INSTANCE_TYPE_LABEL
from intent.keys import NODEPOOL_LABEL as NODEPOOL_LABEL
from intent.kube import Kube, KubeError, object_path
from intent.runtime import SAFE_LOADER

log = logging.getLogger(__name__)

TRIGGER_NAMESPACE: Final = "gpu-intent-system"
DEFAULT_NODEPOOL: Final = "gpu-standard"
GPU_NAME_LABEL: Final = AWS_GPU_NAME_LABEL
#: The node-class kinds NodePools reference (``spec.template.spec.nodeClassRef``), by
#: API group: AWS (karpenter-provider-aws), Azure (karpenter-provider-azure), GCP
#: (cloudpilot-ai/karpenter-provider-gcp), Tencent Cloud TKE. An examples directory may
#: hold them; the demo does not apply them: the sim's instance-type catalog of the
#: provider (`sim.providers`) stands in for what they configure.
NODE_CLASS_KINDS: Final = {
    "EC2NodeClass": "karpenter.k8s.aws",
    "AKSNodeClass": "karpenter.azure.com",
    "GCENodeClass": "karpenter.k8s.gcp",
    "TKEMachineNodeClass": "karpenter.k8s.tke",
}
#: The kinds ``apply`` creates: the workloads, their namespaces and NodePools, DRA claims
#: and DeviceClasses (``resource.k8s.io/v1``).
APPLIED_KINDS: Final = (
    "Namespace",
    "NodePool",
    "DeviceClass",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
)
#: The kinds an examples directory may hold: `APPLIED_KINDS` and `NODE_CLASS_KINDS`.
EXAMPLE_KINDS: Final = (*APPLIED_KINDS, *NODE_CLASS_KINDS)
#: The namespaced DRA kinds (``resource.k8s.io/v1``) and their plurals.
DRA_KINDS: Final = {
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceClaim": "resourceclaims",
}
#: Key of ``gpusNeeded`` for intents that name no model.
ANY_MODEL: Final = "any"


class ExamplesError(ValueError):
    """An examples file cannot be read or applied; the message names the file."""


def default_examples(provider: str = "aws") -> Path:
    """The demo's manifests: the repository's top-level ``examples/``, installed as the
    data-only package ``gpu_intent.examples`` (pyproject.toml maps it), so the same call
    works in an editable install and from a wheel; for a ``provider`` other than ``aws``,
    its ``providers/<provider>/`` directory there (the same story on NodePools shaped
    for that provider's labels). Raises FileNotFoundError when the installation has no
    examples."""
    spec = importlib.util.find_spec("gpu_intent.examples")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise FileNotFoundError("the gpu_intent.examples package data is not installed")
    base = Path(locations[0])
    return base if provider == "aws" else base / "providers" / provider


def read_examples(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """``(file, document)`` for every YAML document in ``directory/*.yaml``, in file-name
    order; empty documents skipped, a Pod without a namespace put in ``default`` (as
    ``kubectl create`` would). Raises `ExamplesError` naming the file for unreadable or
    invalid YAML, a document that is not a mapping, a kind the demo does not model (not
    one of `EXAMPLE_KINDS`) or a missing ``metadata.name``/``generateName``;
    FileNotFoundError when there are none."""
    out: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            docs = list(yaml.load_all(path.read_text(), Loader=SAFE_LOADER))
        except (OSError, UnicodeDecodeError) as e:
            raise ExamplesError(f"{path}: cannot read: {e}") from None
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ExamplesError(f"{path}: not valid YAML{line}: {problem}") from None
        for i, doc in enumerate(docs, 1):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ExamplesError(
                    f"{path}: document {i} is a {type(doc).__name__}, not a mapping"
                )
            kind = doc.get("kind")
            if kind not in EXAMPLE_KINDS:
                raise ExamplesError(
                    f"{path}: document {i} has kind {kind!r}, which the demo does not model;"
                    f" it takes {', '.join(EXAMPLE_KINDS)}"
                )
            meta = doc.get("metadata")
            if not isinstance(meta, dict) or not (meta.get("name") or meta.get("generateName")):
                raise ExamplesError(f"{path}: document {i} ({kind}) has no metadata.name")
            if kind in ("Pod", *DRA_KINDS) and not meta.get("namespace"):
                doc = {**doc, "metadata": {**meta, "namespace": "default"}}
            out.append((path, doc))
    if not out:
        raise FileNotFoundError(f"no manifests in {directory}")
    return out


def load_manifests(directory: Path) -> list[dict[str, Any]]:
    """Every YAML document in ``directory/*.yaml``, in file-name order. Raises
    FileNotFoundError when there are none and `ExamplesError` (a ValueError naming the
    file) when one is malformed."""
    return [doc for _, doc in read_examples(directory)]


async def apply(api: Kube | client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Create one manifest through the API adapter (``kubectl create`` for the kinds the
    demo uses; ResourceClaims, their templates and DeviceClasses as
    ``resource.k8s.io/v1``) and return the stored object. A DeviceClass named like one
    that exists (the DRA driver's defaults the sim installs, `sim.dra`) replaces it, as
    ``kubectl apply`` would. ``api``: the adapter, or an ``ApiClient`` used through one
    (`intent.kube.Kube`; the caller closes it). Raises RuntimeError with the server's
    message when the API server refuses it, `intent.kube.KubeError` when it does not
    answer."""
    kind, meta = obj["kind"], obj.get("metadata", {})
    namespace = meta.get("namespace")
    paths: dict[str, str] = {
        "Namespace": object_path("v1", "namespaces"),
        "Pod": object_path("v1", "pods", namespace=namespace),
        "NodePool": object_path(f"{KARPENTER_GROUP}/v1", "nodepools"),
        "MutatingWebhookConfiguration": object_path(
            "admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"
        ),
        **{
            dra_kind: object_path("resource.k8s.io/v1", plural, namespace=namespace)
            for dra_kind, plural in DRA_KINDS.items()
        },
        "DeviceClass": object_path("resource.k8s.io/v1", "deviceclasses"),
    }
    if kind not in paths:
        raise ValueError(f"the demo does not apply {kind}")
    kube = api if isinstance(api, Kube) else Kube(api)
    name = meta.get("name") or meta.get("generateName")
    try:
        try:
            return await kube.create(paths[kind], obj, f"creating {kind} {name}")
        except KubeError as e:
            if not (e.conflict and kind == "DeviceClass" and meta.get("name")):
                raise
            path = object_path("resource.k8s.io/v1", "deviceclasses", name=meta["name"])
            return await _replace(kube, path, obj)
    except KubeError as e:
        if e.status == 0:  # no answer: not the manifest's fault
            raise
        raise RuntimeError(f"creating {kind} {name}: {e.detail}") from None


async def _replace(kube: Kube, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Replace the object at ``path`` with ``obj`` (carrying the stored
    resourceVersion). Raises `intent.kube.KubeError` as `Kube.replace`."""
    name = obj["metadata"]["name"]
    current = await kube.get(path, f"reading {obj['kind']} {name}") or {}
    version = (current.get("metadata") or {}).get("resourceVersion")
    body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
    return await kube.replace(path, body, f"replacing {obj['kind']} {name}")


def node_classes(docs: list[dict[str, Any]]) -> list[str]:
    """``Kind/name`` of each node-class document (`NODE_CLASS_KINDS`) in ``docs``."""
    return [
        f"{d['kind']}/{(d.get('metadata') or {}).get('name')}"
        for d in docs
        if d.get("kind") in NODE_CLASS_KINDS
    ]


def opted_in(docs: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the Namespaces in ``docs`` that the webhook's ``namespaceSelector``
    (`webhook_configuration`) matches: labelled ``INJECT_LABEL: INJECT_VALUE``."""
    return frozenset(
        d["metadata"]["name"]
        for d in docs
        if d.get("kind") == "Namespace"
        and ((d.get("metadata") or {}).get("labels") or {}).get(INJECT_LABEL) == INJECT_VALUE
    )


def webhook_configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration the Helm chart installs, pointed at ``url``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpu-intent"},
        "webhooks": [
            {
                "name": "pods.gpu-intent.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "reinvocationPolicy": "IfNeeded",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "namespaceSelector": {"matchLabels": {INJECT_LABEL: INJECT_VALUE}},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }


# --- The need and its cost: pure functions, no awaits. ---------------------------------
