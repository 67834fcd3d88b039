"""Karpenter's side of the cluster as frozen values, parsed from API objects: NodePools,
NodeClaims, the Nodes of Karpenter NodePools (and what the node cache keeps of them),
and the Events Karpenter records on triggers (``Nominated``, limits
``FailedScheduling``). Purely computational; the pods' side is `controller.model`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from controller import karpenter
from controller.model import (
    ANNOTATION_PROTECTED,
    NODE_LABEL,
    NODEPOOL_LABEL,
    TRIGGER_MARKER_KEY,
    Requirement,
    object_meta,
    parse_requirements,
    parse_time,
)
from intent.contract import IntentError, is_label_value, parse_gpus
from intent.keys import KARPENTER_API_VERSION, KARPENTER_GROUP, NVIDIA_GPU
from intent.quantity import quantity_or_reason
from intent.sharing import LAYERS, MIG_PREFIX

#: The extended resources a GPU-sharing device plugin advertises on a node in place of
#: ``nvidia.com/gpu`` (`intent.sharing.LAYERS`, docs/sources/ecosystem.md part A): Volcano's
#: vGPU plugin (``volcano.sh/vgpu-number``), gpushare (``aliyun.com/gpu-mem``), qGPU,
#: vcuda; NVIDIA's MIG slices (``nvidia.com/mig-<profile>``, mixed strategy) by prefix.
PLUGIN_RESOURCES: frozenset[str] = frozenset(
    key for layer in LAYERS if not layer.refuse for key in layer.keys
)


def plugin_resource(name: str) -> bool:
    """Whether extended resource ``name`` is one a GPU-sharing device plugin advertises
    instead of ``nvidia.com/gpu`` (`PLUGIN_RESOURCES`, or a MIG slice)."""
    return name in PLUGIN_RESOURCES or name.startswith(MIG_PREFIX)


def advertised(allocatable: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The `plugin_resource` entries of a Node's ``status.allocatable`` that are not
    zero, sorted: ``(("nvidia.com/mig-1g.5gb", "7"),)``. Pure."""
    found = []
    for name, value in allocatable.items():
        if isinstance(name, str) and plugin_resource(name) and isinstance(value, str | int):
            amount = quantity_or_reason(value)
            if isinstance(amount, Decimal) and amount > 0:
                found.append((name, str(value)))
    return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class NodePoolInfo:
    """A Karpenter NodePool as far as trigger planning needs it."""

    name: str
    weight: int
    ready: bool
    requirements: tuple[Requirement, ...]
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]

    def label_keys(self) -> set[str]:
        """Label keys this pool defines (requirements and template labels)."""
        return {r.key for r in self.requirements} | set(self.labels)

    def makes_gpus(self) -> bool:
        """Whether the pool says it makes GPU nodes: a GPU-ish requirement or label key,
        or a taint on ``nvidia.com/gpu``."""
        keys = self.label_keys() | {str(t.get("key", "")) for t in self.taints}
        return any("gpu" in key for key in keys)

    def admits(self, key: str, value: str) -> bool:
        """Whether this pool can make nodes with label ``key=value``."""
        if key in self.labels:
            return self.labels[key] == value
        return all(r.admits(value) for r in self.requirements if r.key == key)


@dataclass(frozen=True, slots=True)
class NodeClaimInfo:
    """A Karpenter NodeClaim: its pool, GPU requests, model constraint and progress."""

    name: str
    pool: str | None
    created: datetime | None
    gpu_requests: Decimal
    labels: Mapping[str, str]
    requirements: tuple[Requirement, ...]
    node_name: str | None
    conditions: Mapping[str, str]
    deleting: bool
    #: Names of the trigger pods whose `TRIGGER_MARKER_KEY` marker this NodeClaim's
    #: requirements carry: the triggers Karpenter bought it for.
    marked: frozenset[str] = frozenset()
    #: Whole GPUs of the instance launched (``status.capacity["nvidia.com/gpu"]``, set
    #: by Karpenter at launch from the instance type); 0 while unknown.
    gpu_capacity: Decimal = Decimal(0)
    #: When the ``Ready`` condition turned True (its ``lastTransitionTime``), if it is.
    ready_since: datetime | None = None
    #: The controller protects it from disruption (`ANNOTATION_PROTECTED` is set).
    protected: bool = False
    #: GPU devices the DRA ResourceSlices of its node publish (`controller.dra`), 0
    #: when none.
    devices: int = 0
    #: What a GPU-sharing device plugin advertises on its node in place of
    #: ``nvidia.com/gpu`` (`advertised`; `NodeInfo.advertised`), empty when nothing.
    advertised: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> Decimal:
        """GPUs this NodeClaim brings: its capacity once launched, else what it requests."""
        return self.gpu_capacity or self.gpu_requests

    @property
    def ready(self) -> bool:
        """Its capacity is usable: ``Ready`` True, or registered with its node offering
        the GPUs another way: ResourceSlices publishing GPU devices (DRA), or a sharing
        layer's device plugin advertising its own resources (`advertised`: Volcano vGPU,
        gpushare, MIG slices). On such a node ``nvidia.com/gpu`` never registers, so
        Karpenter's ``Initialized`` stays Unknown (``ResourceNotRegistered``, karpenter
        pkg/controllers/nodeclaim/lifecycle/initialization.go ``RequestedResourcesRegistered``)
        and ``Ready`` never turns True, though the GPUs are there for the layer's pods
        (REFERENCE.md sections 1 and 7)."""
        if self.conditions.get("Ready") == "True":
            return True
        return bool(self.devices > 0 or self.advertised) and (
            self.conditions.get("Registered") == "True"
        )

    @property
    def dra_ready(self) -> bool:
        """`ready` only by its ResourceSlices (Karpenter's ``Ready`` is not True)."""
        return self.ready and self.devices > 0 and self.conditions.get("Ready") != "True"

    @property
    def plugin_ready(self) -> bool:
        """`ready` only by what a sharing device plugin advertises (`advertised`),
        Karpenter's ``Ready`` not True and no DRA devices."""
        return self.ready and not self.devices and self.conditions.get("Ready") != "True"

    @property
    def launched(self) -> bool:
        return self.conditions.get("Launched") == "True"

    def admits(self, key: str, value: str) -> bool:
        """Whether this NodeClaim's node has, or may get, label ``key=value``."""
        if key in self.labels:
            return self.labels[key] == value
        return all(r.admits(value) for r in self.requirements if r.key == key)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A Node of a Karpenter NodePool: its pool, whether it is Ready, and its
    `NODE_LABEL` value (None until the controller has set it)."""

    name: str
    pool: str | None
    ready: bool
    label: str | None
    #: The controller protects it from disruption (`ANNOTATION_PROTECTED` is set).
    protected: bool = False
    #: The NodeClaim that owns it (its ``karpenter.sh`` NodeClaim ownerReference, which
    #: Karpenter's registration sets), None when it has none.
    claim: str | None = None
    #: What a GPU-sharing device plugin advertises on it in place of ``nvidia.com/gpu``
    #: (`advertised`).
    advertised: tuple[tuple[str, str], ...] = ()


def _owner_claim(meta: Mapping[str, Any]) -> str | None:
    """The name in a ``karpenter.sh/*`` ``NodeClaim`` ownerReference of ``meta``: Karpenter
    registration makes the NodeClaim the owner of its Node (karpenter
    pkg/controllers/nodeclaim/lifecycle/registration.go, syncNode)."""
    for owner in meta.get("ownerReferences") or ():
        if (
            isinstance(owner, Mapping)
            and owner.get("kind") == "NodeClaim"
            and str(owner.get("apiVersion", "")).startswith(f"{KARPENTER_GROUP}/")
            and isinstance(owner.get("name"), str)
        ):
            return str(owner["name"])
    return None


def node_label_value(name: str) -> str:
    """The `NODE_LABEL` value for node ``name``: the name itself when it is a valid label
    value (``ip-10-1-2-3.ec2.internal``), else ``n-`` and 20 hex digits of its SHA-256."""
    if is_label_value(name):
        return name
    return "n-" + hashlib.sha256(name.encode()).hexdigest()[:20]


def slim_node(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the node cache keeps: name, resourceVersion, the pool and `NODE_LABEL`
    labels, the `ANNOTATION_PROTECTED` annotation, its NodeClaim ownerReference, the
    Ready condition and what a sharing device plugin advertises (`advertised`). Pure."""
    meta = object_meta(obj)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    slim_meta = {
        "name": meta.get("name", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
        "labels": {k: labels[k] for k in (NODEPOOL_LABEL, NODE_LABEL) if k in labels},
    }
    if ANNOTATION_PROTECTED in annotations:
        slim_meta["annotations"] = {ANNOTATION_PROTECTED: annotations[ANNOTATION_PROTECTED]}
    if (claim := _owner_claim(meta)) is not None:
        slim_meta["ownerReferences"] = [
            {"apiVersion": KARPENTER_API_VERSION, "kind": "NodeClaim", "name": claim}
        ]
    status = obj.get("status") or {}
    slim_status: dict[str, Any] = {
        "conditions": [
            c
            for c in status.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == "Ready"
        ]
    }
    if plugin := advertised(status.get("allocatable") or {}):
        slim_status["allocatable"] = dict(plugin)
    return {"metadata": slim_meta, "status": slim_status}


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    meta = object_meta(obj)
    labels = meta.get("labels") or {}
    return NodeInfo(
        name=str(meta.get("name", "")),
        pool=labels.get(NODEPOOL_LABEL),
        ready=any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in (obj.get("status") or {}).get("conditions") or []
        ),
        label=labels.get(NODE_LABEL),
        protected=bool((meta.get("annotations") or {}).get(ANNOTATION_PROTECTED)),
        claim=_owner_claim(meta),
        advertised=advertised((obj.get("status") or {}).get("allocatable") or {}),
    )


def parse_nodepool(obj: Mapping[str, Any]) -> NodePoolInfo:
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    conditions = {
        c.get("type"): c.get("status")
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping)
    }
    try:
        weight = int(spec.get("weight") or 0)
    except (TypeError, ValueError):
        weight = 0
    return NodePoolInfo(
        name=str(object_meta(obj).get("name", "")),
        weight=weight,
        # A NodePool Karpenter has not reconciled yet has no conditions; Karpenter skips
        # pools whose Ready condition is False (pkg/controllers/provisioning/provisioner.go).
        ready=conditions.get("Ready", "True") == "True",
        requirements=parse_requirements(tspec.get("requirements")),
        labels={
            str(k): str(v)
            for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
        },
        taints=tuple(t for t in tspec.get("taints") or [] if isinstance(t, Mapping)),
    )


def parse_nodeclaim(obj: Mapping[str, Any]) -> NodeClaimInfo:
    meta = object_meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    requests = (spec.get("resources") or {}).get("requests") or {}
    requirements = parse_requirements(spec.get("requirements"))
    try:
        gpus = parse_gpus(str(requests.get(NVIDIA_GPU, "0")))
    except IntentError:
        gpus = Decimal(0)
    try:
        capacity = parse_gpus(str((status.get("capacity") or {}).get(NVIDIA_GPU, "0")))
    except IntentError:
        capacity = Decimal(0)
    ready_since = next(
        (
            parse_time(c.get("lastTransitionTime"))
            for c in status.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        ),
        None,
    )
    return NodeClaimInfo(
        name=str(meta.get("name", "")),
        pool=labels.get(NODEPOOL_LABEL),
        created=parse_time(meta.get("creationTimestamp")),
        gpu_requests=gpus,
        labels=labels,
        requirements=requirements,
        node_name=status.get("nodeName") or None,
        conditions={
            str(c.get("type")): str(c.get("status"))
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
        },
        deleting=bool(meta.get("deletionTimestamp")),
        marked=frozenset(
            v
            for r in requirements
            if r.key == TRIGGER_MARKER_KEY and r.operator == "NotIn"
            for v in r.values
        ),
        gpu_capacity=capacity,
        ready_since=ready_since,
        protected=bool((meta.get("annotations") or {}).get(ANNOTATION_PROTECTED)),
    )


_NOMINATED = re.compile(r"nodeclaim/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


@dataclass(frozen=True, slots=True)
class Nomination:
    """Karpenter's ``Nominated`` event on a trigger: the NodeClaim it said the trigger
    should schedule on (``Pod should schedule on: nodeclaim/<name>[, node/<node>]``,
    kubernetes-sigs/karpenter pkg/controllers/provisioning/provisioner.go and
    pkg/events). ``pod``: the trigger's ``(namespace, name)``; ``uid`` guards against a
    later pod of the same name; ``seen``: the event's last timestamp."""

    pod: tuple[str, str]
    uid: str
    node_claim: str
    seen: datetime | None


def parse_nomination(obj: Mapping[str, Any]) -> Nomination | None:
    """A ``Nominated`` Event about a pod that names a NodeClaim, else None."""
    if obj.get("reason") != "Nominated":
        return None
    involved = obj.get("involvedObject") or {}
    if involved.get("kind") != "Pod":
        return None
    match = _NOMINATED.search(str(obj.get("message") or ""))
    if match is None:
        return None
    seen = parse_time(obj.get("lastTimestamp")) or parse_time(obj.get("eventTime"))
    return Nomination(
        (str(involved.get("namespace", "")), str(involved.get("name", ""))),
        str(involved.get("uid", "")),
        match.group(1),
        seen,
    )


@dataclass(frozen=True, slots=True)
class Refusal:
    """Karpenter's ``FailedScheduling`` event on a trigger saying its NodePool is at its
    ``spec.limits`` (`controller.karpenter.at_limits`): nothing is launched for it.
    ``pod``: the trigger's ``(namespace, name)``; ``uid`` guards against a later pod of
    the same name; ``message``: Karpenter's words; ``seen``: the event's last time."""

    pod: tuple[str, str]
    uid: str
    message: str
    seen: datetime | None


def parse_refusal(obj: Mapping[str, Any]) -> Refusal | None:
    """A ``FailedScheduling`` Event about a pod that says its NodePool is at its limits,
    else None."""
    if obj.get("reason") != "FailedScheduling":
        return None
    involved = obj.get("involvedObject") or {}
    message = str(obj.get("message") or "")
    if involved.get("kind") != "Pod" or not karpenter.at_limits(message):
        return None
    return Refusal(
        (str(involved.get("namespace", "")), str(involved.get("name", ""))),
        str(involved.get("uid", "")),
        message,
        parse_time(obj.get("lastTimestamp")) or parse_time(obj.get("eventTime")),
    )
