"""What the controller must know about Karpenter to decide, as pure functions of pod dicts.

Every rule here restates Karpenter's own source (kubernetes-sigs/karpenter v1) or the
provider's, because gpu-intent must predict what Karpenter will and will not do with a
pod: make a trigger where Karpenter cannot help, and none where it can (a trigger there
would buy a second node).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from intent.keys import (
    AMD_GPU,
    ARCH_LABEL,
    CAPACITY_TYPE_LABEL,
    HOSTNAME_LABEL,
    INSTANCE_TYPE_LABEL,
    KARPENTER_GROUP,
    NODEPOOL_LABEL,
    NVIDIA_GPU,
    OS_LABEL,
    POD_SCHEDULED,
    REGION_LABEL,
    UNSCHEDULABLE,
    WINDOWS_BUILD_LABEL,
    ZONE_LABEL,
)

#: Resources Karpenter's instance types can offer on AWS; any other requested resource
#: makes every instance type fail the fit test (it counts as 0 available).
#: Source: karpenter-provider-aws pkg/providers/instancetype/types.go computeCapacity,
#: plus the core resources (REFERENCE.md section 1, "Resources it cannot simulate").
KARPENTER_RESOURCES: frozenset[str] = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "pods",
        NVIDIA_GPU,
        AMD_GPU,
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "aws.amazon.com/neurondevice",
        "habana.ai/gaudi",
        "vpc.amazonaws.com/efa",
    }
)

#: Label keys Karpenter can always satisfy (core well-known labels, karpenter
#: pkg/apis/v1/labels.go WellKnownLabels, and the AWS provider's instance labels).
WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        ARCH_LABEL,
        OS_LABEL,
        INSTANCE_TYPE_LABEL,
        WINDOWS_BUILD_LABEL,
        ZONE_LABEL,
        REGION_LABEL,
        CAPACITY_TYPE_LABEL,
        NODEPOOL_LABEL,
    }
)
#: Provider label domains whose keys are well known to the respective provider.
WELL_KNOWN_LABEL_PREFIXES: tuple[str, ...] = (
    "karpenter.k8s.aws/",
    "karpenter.azure.com/",
    "karpenter.k8s.gcp/",
    "karpenter.k8s.alicloud/",
    "karpenter.k8s.tke/",
)

#: Label keys a trigger must never copy: Karpenter ignores pods that constrain them
#: (REFERENCE.md section 1, "Karpenter drops ... a pod whose nodeSelector ... uses").
RESTRICTED_LABELS: frozenset[str] = frozenset({HOSTNAME_LABEL})


def is_well_known_label(key: str) -> bool:
    """True when Karpenter can resolve ``key`` without a NodePool defining it."""
    return key in WELL_KNOWN_LABELS or key.startswith(WELL_KNOWN_LABEL_PREFIXES)


def is_copyable_label(key: str, nodepool_keys: Collection[str]) -> bool:
    """True when a trigger may carry a node selector on ``key``: Karpenter understands
    it (well known, or defined by a NodePool's requirements or template labels) and it is
    not one of the keys that make Karpenter ignore a pod (``kubernetes.io/hostname``, a
    non-well-known ``karpenter.sh/`` key)."""
    if key in RESTRICTED_LABELS:
        return False
    if key.startswith(f"{KARPENTER_GROUP}/") and key not in WELL_KNOWN_LABELS:
        return False
    return is_well_known_label(key) or key in nodepool_keys


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return [c for c in conditions if isinstance(c, Mapping)]


def unschedulable_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's ``PodScheduled`` condition when its reason is ``Unschedulable``, else None.

    Karpenter checks the reason only, not the status (pkg/utils/pod/scheduling.go
    FailedToSchedule).
    """
    for condition in _conditions(pod):
        if condition.get("type") == POD_SCHEDULED and condition.get("reason") == UNSCHEDULABLE:
            return condition
    return None


def is_provisionable(pod: Mapping[str, Any]) -> bool:
    """Karpenter's ``IsProvisionable`` (pkg/utils/pod/scheduling.go): the pod failed to
    schedule (``PodScheduled`` reason ``Unschedulable``), is not bound
    (``spec.nodeName`` empty), is not being preempted for (``status.nominatedNodeName``
    empty), is not owned by a DaemonSet or a Node, and is not terminating or terminal."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("nodeName") or status.get("nominatedNodeName"):
        return False
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    for owner in meta.get("ownerReferences") or []:
        if isinstance(owner, Mapping) and owner.get("kind") in ("DaemonSet", "Node"):
            return False
    return unschedulable_condition(pod) is not None


def _containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, Mapping):
                yield container


def requested_resources(pod: Mapping[str, Any]) -> set[str]:
    """Names of every resource any container requests or limits."""
    names: set[str] = set()
    for container in _containers(pod):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            names.update((resources.get(part) or {}).keys())
    return names


def node_selector_keys(pod: Mapping[str, Any]) -> set[str]:
    """Keys the pod constrains through ``nodeSelector`` and required node affinity."""
    spec = pod.get("spec") or {}
    keys = set((spec.get("nodeSelector") or {}).keys())
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expression in (term or {}).get("matchExpressions") or []:
            if isinstance(expression, Mapping) and "key" in expression:
                keys.add(str(expression["key"]))
    return keys


def unsimulatable(pod: Mapping[str, Any], nodepool_keys: Collection[str]) -> list[str]:
    """Why Karpenter cannot provision for ``pod`` by itself, or ``[]`` if it can.

    Reasons: a requested resource outside `KARPENTER_RESOURCES` (no instance type offers
    it), a node-selector key that no NodePool defines and that is not well known
    (Karpenter: ``label "<key>" does not have known values``), or DRA ResourceClaims
    (``spec.resourceClaims``: Karpenter skips pods with DRA requirements,
    kubernetes-sigs/karpenter#2384; its DRA support is tracked in #3228).
    ``nodepool_keys``: every key the NodePools define in requirements or template labels.
    """
    reasons = [
        "asks for devices through DRA ResourceClaims, which Karpenter skips"
        for _ in ((pod.get("spec") or {}).get("resourceClaims") or ())[:1]
    ]
    reasons += [
        f"requests {name}, a resource Karpenter cannot simulate"
        for name in sorted(requested_resources(pod) - KARPENTER_RESOURCES)
        if not name.startswith("hugepages-")
    ]
    reasons += [
        f"selects node label {key}, which no NodePool defines"
        for key in sorted(node_selector_keys(pod))
        if not is_well_known_label(key) and key not in nodepool_keys
    ]
    return reasons


#: What Karpenter's ``FailedScheduling`` message says when a NodePool's ``spec.limits``
#: leave no instance type: ``all available instance types exceed limits for nodepool``
#: (v1.0-v1.3) or ``... exceed limits for nodepool: "<name>"`` (later), from
#: pkg/controllers/provisioning/scheduling/nodeclaim.go (REFERENCE.md section 1).
LIMITS_MESSAGE = "exceed limits for nodepool"


def at_limits(message: str) -> bool:
    """Whether a Karpenter ``FailedScheduling`` message says a NodePool is at its limits."""
    return LIMITS_MESSAGE in message
