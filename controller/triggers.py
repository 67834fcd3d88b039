"""Trigger pod specs: pods Karpenter can provision for, standing in for GPU demand it cannot see.

A trigger asks for whole ``nvidia.com/gpu`` (a resource every GPU instance type lists),
selects the NodePool and model through labels Karpenter resolves, tolerates the pool's
taints, and runs the pause image with nothing else: no service account token, no
privileges. It passes the ``restricted`` Pod Security Standard
(https://kubernetes.io/docs/concepts/security/pod-security-standards/: non-root at pod
and container level, no privilege escalation, every capability dropped, the
``RuntimeDefault`` seccomp profile, no volumes, no host namespaces or ports), so it can
live in a namespace labelled ``pod-security.kubernetes.io/enforce: restricted``.

Nothing of a user's pod is copied but the node-selector entries Karpenter can resolve
(`copyable_selector`): never its image, command, volumes, required node affinity (so no
``matchFields``), a ``kubernetes.io/hostname`` selector or a non-well-known
``karpenter.sh/`` key (Karpenter ignores pods that constrain those). Purely
computational: `trigger_pod` returns the JSON body to create.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from controller import placement
from controller.karpenter import is_copyable_label
from controller.messages import trigger_condition
from controller.model import (
    ANNOTATION_PLACEMENT,
    ANNOTATION_SELECTOR,
    ANNOTATION_SERVES,
    NODE_LABEL,
    NODEPOOL_LABEL,
    NON_BINDING_SCHEDULER,
    TRIGGER_MARKER_KEY,
    GroupKey,
    PodRef,
)
from controller.nodes import NodePoolInfo
from intent.contract import (
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPUS,
    ANNOTATION_MODEL,
    ANNOTATION_POOL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TRIGGER_LABEL,
    TRIGGER_LABEL_VALUE,
)
from intent.keys import (
    NVIDIA_GPU,
    POD_SCHEDULED,
    UNSCHEDULABLE,
)
from intent.providers import AWS, ProviderProfile, model_requirements
from intent.quantity import parse_quantity

#: HAMi's webhook skips pods with this label; without it HAMi would rewrite the trigger
#: into a pod Karpenter rejects (Project-HAMi/HAMi pkg/scheduler/webhook.go).
HAMI_IGNORE_LABEL = "hami.io/webhook"
HAMI_IGNORE_VALUE = "ignore"
#: Longest ``serves`` annotation we write: the pods' own annotations are the record;
#: until those are written a pod stays with the trigger this names (`controller.plan._stay`).
MAX_SERVES_CHARS = 1024


@dataclass(frozen=True, slots=True)
class TriggerSettings:
    """How trigger pods are built.

    Attributes:
        namespace: where triggers live (the controller's own namespace).
        image: the container image; pause does nothing and is tiny.
        provider: the Karpenter provider's profile (`intent.providers`): which node
            labels express a GPU model and memory (AWS ``karpenter.k8s.aws/instance-gpu-name``
            ``t4``, Azure ``karpenter.azure.com/sku-gpu-name`` ``T4``, GCP
            ``karpenter.k8s.gcp/instance-gpu-name`` ``nvidia-tesla-t4``, TKE
            ``karpenter.k8s.tke/instance-family In [GN7, ...]``; REFERENCE.md section 2).
        gpu_name_label: overrides the provider's GPU model label, whose values are then
            the canonical model (``t4``); None: the provider's.
        gpu_memory_label: overrides the provider's label carrying MiB of memory per GPU,
            for pods that name memory but no model; None: the provider's (AWS
            ``karpenter.k8s.aws/instance-gpu-memory``; the others have none and select
            the instance types, accelerators or families whose GPU has that memory).
        cpu: least CPU request per trigger (a quantity); a trigger asks for the CPU of
            the pods it stands for when that is more.
        memory: least memory request per trigger (a quantity), likewise.
        priority_class: optional PriorityClass name for triggers.
        deadline_seconds: the trigger's ``activeDeadlineSeconds``, a last resort. The
            kubelet counts it from the pod's ``status.startTime`` (when a kubelet first
            took it: kubelet ``pkg/kubelet/active_deadline.go``) and then fails the pod
            with reason ``DeadlineExceeded``, killing its container. So it bounds a
            *binding* trigger that sits on its new node holding GPUs: the controller
            deletes it within seconds of the node turning Ready, so one still running
            after this long (default 30 min, more than Karpenter's 5 min launch plus 15
            min registration timeouts) means the controller is gone or has a bug, and the
            kubelet frees the GPUs; a Failed pod is no longer provisionable, so Karpenter
            does not buy for it again. A non-binding trigger never reaches a kubelet, so
            for it the field is inert: the controller's own garbage collection ends those.
        binding: False (the default) makes *non-binding* triggers: ``schedulerName``
            `NON_BINDING_SCHEDULER`, which nothing serves, and the controller marks them
            ``PodScheduled=False, reason=Unschedulable`` itself until their NodeClaim is
            known, then `LINKED_REASON` (see `condition_patch`). Such a trigger never
            binds, never holds a GPU and never races the real pod for the new node. True
            makes ordinary pods that kube-scheduler binds (for clusters where something
            rejects pods with an unknown scheduler).
    """

    namespace: str = "gpu-intent-system"
    image: str = "registry.k8s.io/pause:3.10"
    provider: ProviderProfile = AWS
    gpu_name_label: str | None = None
    gpu_memory_label: str | None = None
    cpu: str = "10m"
    memory: str = "16Mi"
    priority_class: str | None = None
    binding: bool = False
    deadline_seconds: int = 1800

    @property
    def profile(self) -> ProviderProfile:
        """The provider's profile with the label overrides applied."""
        return self.provider.with_labels(self.gpu_name_label, self.gpu_memory_label)

    @property
    def min_cpu_millis(self) -> int:
        return _scaled_quantity(self.cpu, "trigger cpu", 1000)

    @property
    def min_memory_bytes(self) -> int:
        return _scaled_quantity(self.memory, "trigger memory", 1)


@functools.lru_cache(maxsize=64)
def _scaled_quantity(text: str, what: str, scale: int) -> int:
    """A quantity times ``scale``, rounded up (parsed once per distinct setting)."""
    return math.ceil(parse_quantity(text, what) * scale)


def _dns_label(text: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return cleaned[:20].rstrip("-") or "x"


def trigger_name(group: GroupKey, serves: Sequence[PodRef], stamp: str) -> str:
    """The name of the trigger for ``group`` standing for ``serves``, created at ``stamp``
    (RFC 3339, seconds): ``gi-<pool>-<model>-<10 base32 characters>`` (at most 55
    characters, a DNS-1123 label and a label value), the suffix a hash of all three.

    The controller names triggers itself instead of using ``generateName``, so that the
    name is known before the create: it goes into the trigger's NodeClaim marker
    (`controller.model.TRIGGER_MARKER_KEY`), and a create retried after an unknown
    outcome cannot make a second trigger (the API server answers 409 AlreadyExists).
    Pure."""
    refs = sorted(f"{r.namespace}/{r.name}/{r.uid}" for r in serves)
    text = "\n".join([*map(str, group.sort_key()), stamp, *refs])
    digest = hashlib.sha256(text.encode()).digest()
    suffix = base64.b32encode(digest[:7]).decode().lower()[:10]  # 50 bits
    return f"gi-{_dns_label(group.pool)}-{_dns_label(group.model or 'any')}-{suffix}"


#: The user id triggers run as (``nobody``; the pause image's own user is 65535 too).
TRIGGER_UID = 65535


def copyable_selector(
    selector: Sequence[tuple[str, str]], pool: NodePoolInfo, reserved: Collection[str] = ()
) -> dict[str, str]:
    """The entries of a group's copied node selector a trigger may carry: those
    `controller.karpenter.is_copyable_label` allows for ``pool`` (never
    ``kubernetes.io/hostname``, never a ``karpenter.sh/`` key Karpenter does not define,
    only keys Karpenter or the pool can resolve), and none of the ``reserved`` keys the
    trigger sets itself (its NodePool and model), which always win. The model's parser
    already filters (`controller.model.parse_pending_pod`); this is the second fence at
    the point where a user's value enters a pod we create. Pure."""
    keys = pool.label_keys()
    return {
        key: value
        for key, value in selector
        if key not in reserved and is_copyable_label(key, keys)
    }


def tolerations_for(pool: NodePoolInfo) -> list[dict[str, Any]]:
    """Tolerations for exactly the pool's ``taints`` (not ``startupTaints``: Karpenter
    does not require pods to tolerate those, karpenter pkg/apis/v1/nodepool.go)."""
    out: list[dict[str, Any]] = []
    for taint in pool.taints:
        toleration: dict[str, Any] = {
            "key": taint.get("key", ""),
            "effect": taint.get("effect", ""),
        }
        if taint.get("value"):
            toleration.update(operator="Equal", value=taint["value"])
        else:
            toleration["operator"] = "Exists"
        out.append(toleration)
    return out


#: ``PodScheduled`` reason of a non-binding trigger whose NodeClaim is known: anything but
#: ``Unschedulable`` makes Karpenter stop provisioning for it (IsProvisionable reads the
#: reason only), so nothing is bought twice while the node comes up.
LINKED_REASON = "NodeClaimLinked"


def condition_patch(stamp: str, node_claim: str | None = None) -> dict[str, Any]:
    """The status patch (strategic merge; ``conditions`` merge by ``type``) for a
    non-binding trigger's ``PodScheduled=False`` condition. Without ``node_claim``: reason
    ``Unschedulable``, what Karpenter's IsProvisionable reads
    (pkg/utils/pod/scheduling.go), so Karpenter provisions for it. With it: reason
    `LINKED_REASON`, so Karpenter leaves it alone while that NodeClaim comes up (and the
    real pods, or a KAI reservation pod, may take the GPU before the trigger is deleted
    without Karpenter buying again). ``stamp``: RFC 3339 time. The message is
    `controller.messages.trigger_condition`'s."""
    reason = UNSCHEDULABLE if node_claim is None else LINKED_REASON
    message = trigger_condition(node_claim)
    return {
        "status": {
            "conditions": [
                {
                    "type": POD_SCHEDULED,
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": stamp,
                    "lastProbeTime": None,
                }
            ]
        }
    }


def trigger_pod(
    group: GroupKey,
    gpus: int,
    pool: NodePoolInfo,
    serves: Sequence[PodRef],
    settings: TriggerSettings,
    *,
    name: str,
    cpu_millis: int = 0,
    memory_bytes: int = 0,
) -> dict[str, Any]:
    """The Pod body of one trigger for ``gpus`` whole GPUs of ``group``.

    Shape: ``metadata.name`` ``name`` (see `trigger_name`) in ``settings.namespace``,
    ownership labels (`intent.contract.TRIGGER_LABEL`, ``app.kubernetes.io/managed-by``)
    plus ``hami.io/webhook: ignore``; annotations recording pool, model, GPUs, the copied
    selector and the pods served; ``nodeSelector`` with ``karpenter.sh/nodepool``, the
    model label when the group has a model and the provider says it with one value
    (`_gpu_terms`), and the group's copied selector entries;
    required node affinity with one term: the marker ``gpu-intent.io/trigger-name NotIn
    [name]`` (`controller.model.TRIGGER_MARKER_KEY`: it names this trigger in the
    requirements of the NodeClaim Karpenter buys for it) and, for a group with
    ``min_memory_mib``, that memory as the provider expresses it (AWS
    ``<gpu_memory_label> Gt min-1``; the annotation ``gpu-intent.io/gpu-memory``), a model
    said by several values (TKE's instance families), and ``gpu-intent.io/node DoesNotExist``
    (`controller.model.NODE_LABEL`: nodes its pods' scheduler already refused carry it,
    see `controller.capacity.nodes_to_label`); the group's sharing-layer placement, as
    ``nodeSelector`` entries and affinity expressions Karpenter resolves for the pool
    (`controller.placement.trigger_terms`; annotation ``gpu-intent.io/placement``);
    tolerations for the pool's taints; a pod and a container ``securityContext`` that
    pass the restricted Pod Security Standard, no service account token,
    ``terminationGracePeriodSeconds: 0``, ``activeDeadlineSeconds``
    ``settings.deadline_seconds``; one pause container (``settings.image``) requesting ``gpus`` of
    ``nvidia.com/gpu`` (requests = limits, as Kubernetes requires for extended resources)
    and ``cpu_millis``/``memory_bytes`` (the pods' own, at least the settings' minimum);
    ``schedulerName`` `NON_BINDING_SCHEDULER` unless ``settings.binding``.
    Raises ValueError for ``gpus < 1``.
    """
    if gpus < 1:
        raise ValueError(f"a trigger needs at least one whole GPU, got {gpus}")
    spec: dict[str, Any] = {
        "nodeSelector": _node_selector(group, pool, settings),
        "tolerations": tolerations_for(pool),
        "containers": [_pause_container(gpus, settings, cpu_millis, memory_bytes)],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": TRIGGER_UID,
            "runAsGroup": TRIGGER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,
        "activeDeadlineSeconds": settings.deadline_seconds,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    if not settings.binding:
        spec["schedulerName"] = NON_BINDING_SCHEDULER
    spec["affinity"] = _required_affinity(group, name, settings, pool)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {
                TRIGGER_LABEL: TRIGGER_LABEL_VALUE,
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                HAMI_IGNORE_LABEL: HAMI_IGNORE_VALUE,
            },
            "annotations": _annotations(group, gpus, serves),
        },
        "spec": spec,
    }


def _node_selector(
    group: GroupKey, pool: NodePoolInfo, settings: TriggerSettings
) -> dict[str, str]:
    """A trigger's ``nodeSelector``: its NodePool, its model when the group has one, and
    the group's copied selector entries (`copyable_selector`)."""
    node_selector: dict[str, str] = {NODEPOOL_LABEL: group.pool}
    node_selector.update(_gpu_terms(group, settings)[0])
    # The sharing layer's placement: entries Karpenter resolves for the pool
    # (`controller.placement.trigger_terms`; the rest goes into the affinity).
    for key, value in placement.trigger_terms(group.placement, pool)[0].items():
        node_selector.setdefault(key, value)
    copied = copyable_selector(group.selector, pool, reserved=node_selector)
    node_selector.update(copied)
    return node_selector


def _gpu_terms(
    group: GroupKey, settings: TriggerSettings
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """How a trigger selects its group's GPU model and memory on the provider
    (`intent.providers.model_requirements`): requirements ``In`` one value as
    ``nodeSelector`` entries (AWS ``instance-gpu-name: t4``, Azure ``sku-gpu-name: T4``),
    the others (``Gt`` a memory, TKE's ``instance-family In [GI3X, GN7]``) as affinity
    expressions."""
    selector: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for r in model_requirements(settings.profile, group.model, group.min_memory_mib):
        if r["operator"] == "In" and len(r["values"]) == 1 and r["key"] not in selector:
            selector[r["key"]] = r["values"][0]
        else:
            expressions.append(dict(r))
    return selector, expressions


def _annotations(group: GroupKey, gpus: int, serves: Sequence[PodRef]) -> dict[str, str]:
    """A trigger's annotations: its pool, GPUs, group selector and the pods it serves (at
    most `MAX_SERVES_CHARS`), its model and GPU memory when the group has them."""
    serves_text = ",".join(str(ref) for ref in serves)
    if len(serves_text) > MAX_SERVES_CHARS:
        serves_text = serves_text[: MAX_SERVES_CHARS - 3] + "..."
    annotations = {
        ANNOTATION_POOL: group.pool,
        ANNOTATION_GPUS: str(gpus),
        # The group's selector as planned: the trigger's identity (parse_trigger reads
        # its group back from it), whatever the second filter dropped from the pod.
        ANNOTATION_SELECTOR: json.dumps(dict(group.selector), sort_keys=True),
        ANNOTATION_SERVES: serves_text,
    }
    if group.model:
        annotations[ANNOTATION_MODEL] = group.model
    if group.min_memory_mib:
        annotations[ANNOTATION_GPU_MEMORY] = str(group.min_memory_mib)
    if group.placement:
        annotations[ANNOTATION_PLACEMENT] = placement.to_annotation(group.placement)
    return annotations


def _pause_container(
    gpus: int, settings: TriggerSettings, cpu_millis: int, memory_bytes: int
) -> dict[str, Any]:
    """A trigger's one container: pause, requesting ``gpus`` GPUs and the pods' CPU and
    memory (at least the settings' minimum), under the restricted security context."""
    cpu = f"{max(cpu_millis, settings.min_cpu_millis)}m"
    memory = str(max(memory_bytes, settings.min_memory_bytes))
    resources = {
        "requests": {NVIDIA_GPU: str(gpus), "cpu": cpu, "memory": memory},
        "limits": {NVIDIA_GPU: str(gpus), "memory": memory},
    }
    return {
        "name": "pause",
        "image": settings.image,
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": TRIGGER_UID,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _required_affinity(
    group: GroupKey, name: str, settings: TriggerSettings, pool: NodePoolInfo
) -> dict[str, Any]:
    """A trigger's required node affinity: one term with its marker, the exclusion of
    labelled nodes, for a group with ``min_memory_mib`` the GPU memory it needs, and the
    placement requirements a node selector cannot say
    (`controller.placement.trigger_terms`)."""
    expressions: list[dict[str, Any]] = [
        {"key": TRIGGER_MARKER_KEY, "operator": "NotIn", "values": [name]}
    ]
    # One term excludes every labelled node, with no list growing with the pool (a list
    # of names, capped at 100, let later triggers be nominated onto older nodes at 729
    # nodes: bench.faults). Karpenter accepts DoesNotExist on a key no NodePool defines
    # (Requirements.Compatible, pkg/scheduling/requirements.go).
    expressions.append({"key": NODE_LABEL, "operator": "DoesNotExist"})
    # The model (when more than one value says it) and the GPU memory: Gt and In of
    # several values need node affinity (a nodeSelector only says equals); Karpenter then
    # picks the cheapest instance type whose GPUs have at least that much memory.
    expressions += _gpu_terms(group, settings)[1]
    expressions += placement.trigger_terms(group.placement, pool)[1]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }
