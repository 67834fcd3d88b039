"""DRA (Dynamic Resource Allocation, ``resource.k8s.io``) for the controller: what it keeps
of ResourceClaims and ResourceSlices, the GPU devices nodes publish, and the intents it
records on pods that ask for GPUs through claims. Pure: the reconciler does the I/O.

Karpenter skips pods with DRA requirements (kubernetes-sigs/karpenter#2384; DRA support is
tracked in #3228), so such pods stay Pending on a Karpenter cluster (REFERENCE.md section
7). The webhook cannot read a ResourceClaim (it may not exist yet at admission): the
controller, which watches them, records the pod's intent from its claims
(`intents_to_record`, source tokens ``dra:<claim>``), and from then on the pod is served
like any other with an intent: a trigger asks for whole ``nvidia.com/gpu`` of the model on
a matching NodePool. On the node that comes up the GPUs are published as ResourceSlice
devices, not as the device plugin's extended resource, so Karpenter's ``Initialized``
stays Unknown (``ResourceNotRegistered``); the NodeClaim counts as usable once its node's
slices publish GPU devices (`node_devices`, `controller.nodes.NodeClaimInfo.ready`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller import karpenter
from controller.model import NODEPOOL_LABEL, PodRef, pod_ref
from intent.catalog import Catalog
from intent.contract import ANNOTATION_SOURCE, ANNOTATION_VERSION, IntentError
from intent.dra import ClaimSource, pod_claims
from intent.inference import infer

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]

#: ResourceSlice drivers whose devices are GPUs: NVIDIA's DRA driver
#: (NVIDIA/k8s-dra-driver-gpu: ``gpu.nvidia.com``; MIG devices are published by the same
#: driver) and AMD's (``gpu.amd.com``).
GPU_DRIVERS = frozenset({"gpu.nvidia.com", "gpu.amd.com"})

#: Intent source token prefix for a claim: ``dra:<ResourceClaim name>``.
SOURCE_PREFIX = "dra:"


def slim_claim(obj: Mapping[str, Any]) -> Obj:
    """What the ResourceClaim cache keeps: name, namespace, resourceVersion, the ``spec``
    (what intent inference reads) and whether it is allocated. Pure."""
    meta = obj.get("metadata") or {}
    out: Obj = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "spec": obj.get("spec") or {},
    }
    if ((obj.get("status") or {}).get("allocation")) is not None:
        out["status"] = {"allocation": {}}
    return out


def slim_slice(obj: Mapping[str, Any]) -> Obj:
    """What the ResourceSlice cache keeps: name, resourceVersion, ``spec.nodeName``,
    ``spec.driver`` and the device names. Pure."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "resourceVersion") if k in meta},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "driver": spec.get("driver"),
            "devices": [
                {"name": d.get("name")} for d in spec.get("devices") or () if isinstance(d, Mapping)
            ],
        },
    }


def node_devices(slices: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPU devices published per node: the devices of every ResourceSlice with a
    ``spec.nodeName`` and a `GPU_DRIVERS` driver, summed by node. Pure."""
    out: dict[str, int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node or spec.get("driver") not in GPU_DRIVERS:
            continue
        count = len(spec.get("devices") or ())
        if count:
            out[node] = out.get(node, 0) + count
    return out


def claimed_by(pod: Mapping[str, Any]) -> set[Key]:
    """The ``(namespace, claim)`` keys an annotated pod's intent came from (its
    ``dra:<claim>`` source tokens)."""
    meta = pod.get("metadata") or {}
    source = str((meta.get("annotations") or {}).get(ANNOTATION_SOURCE, ""))
    namespace = str(meta.get("namespace", ""))
    return {
        (namespace, token[len(SOURCE_PREFIX) :])
        for token in source.split(",")
        if token.startswith(SOURCE_PREFIX)
    }


@dataclass(frozen=True, slots=True)
class DraIntent:
    """Intent annotations to write on a DRA pod (``gpu-intent.io/*``, from
    `intent.contract.Intent.to_annotations`), and the warnings inference gave."""

    ref: PodRef
    annotations: dict[str, str]
    warnings: tuple[str, ...]


def intents_to_record(
    pods: Iterable[Mapping[str, Any]],
    claims: Mapping[Key, Mapping[str, Any]],
    opted_in: set[str],
    *,
    can_serve: Callable[[str | None, str | None, str | None], bool] | None = None,
    allocated: set[Key] | None = None,
    catalog: Catalog | None = None,
) -> tuple[list[DraIntent], list[tuple[PodRef, str]]]:
    """The intents to record on pending DRA pods, and the pods whose claims do not parse.

    ``pods``: the pending pods (slim or full); those considered are Unschedulable and
    provisionable (`controller.karpenter.is_provisionable`), in an ``opted_in``
    namespace, with ``spec.resourceClaims`` and no ``gpu-intent.io/intent-version``
    annotation yet. ``claims``: ResourceClaim ``spec`` by ``(namespace, name)``.
    A pod waits (is left out) while any of its claims is not in ``claims`` (the
    resourceclaim controller has not created it yet, or the cache has not seen it).

    A claim shared by several pods is counted once: the first pod by name that needs it
    takes it; a claim already counted by an annotated pending pod (``pods`` with
    ``dra:<claim>`` sources) or ``allocated`` (on a node already) is left out of the
    others' demand, and a pod left with no GPU demand gets no intent (it follows the
    claim to its node). ``can_serve(pool, model, vendor)``: whether a NodePool (``pool``,
    the one the pod selects by ``karpenter.sh/nodepool``, or None: any) can make such
    GPUs, for ``firstAvailable`` alternatives. ``catalog``: the GPU catalog inference
    reads (None: `intent.inference.infer`'s default). Returns ``(intents, [(pod,
    error)])``.
    """
    considered: list[Mapping[str, Any]] = []
    taken: set[Key] = set(allocated or ())
    for pod in pods:
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if not (pod.get("spec") or {}).get("resourceClaims"):
            continue
        if ANNOTATION_VERSION in annotations:
            taken |= claimed_by(pod)
            continue
        if meta.get("namespace") not in opted_in or not karpenter.is_provisionable(pod):
            continue
        considered.append(pod)
    considered.sort(key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"]))
    intents: list[DraIntent] = []
    errors: list[tuple[PodRef, str]] = []
    for pod in considered:
        ref = pod_ref(pod)
        try:
            refs = pod_claims(pod)
        except IntentError as e:
            errors.append((ref, str(e)))
            continue
        if any(r.claim is None or (ref.namespace, r.claim) not in claims for r in refs):
            continue  # a claim is not created (or not seen) yet: next pass
        sources = [
            ClaimSource(r.entry, r.claim, claims[(ref.namespace, r.claim)])
            for r in refs
            if r.claim is not None and (ref.namespace, r.claim) not in taken
        ]
        if not sources:
            continue
        selected = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(NODEPOOL_LABEL)
        serve = functools.partial(can_serve, selected) if can_serve is not None else None
        try:
            inferred = infer(pod, reasons=False, claims=sources, can_serve=serve, catalog=catalog)
        except IntentError as e:
            errors.append((ref, str(e)))
            continue
        if inferred.intent is None:
            continue
        taken |= {(ref.namespace, s.name) for s in sources}
        intents.append(DraIntent(ref, inferred.intent.to_annotations(), inferred.warnings))
    return intents, errors
