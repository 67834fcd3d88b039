"""The controller's view of the cluster as frozen values, parsed from API objects.

Parsing is the boundary where raw JSON dicts from the API server become typed values
the planner can trust; a pod whose gpu-intent annotations do not parse becomes an
`InvalidPod` that the planner reports and never acts on. Purely computational.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import orjson

from controller import karpenter
from intent.contract import (
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPUS,
    ANNOTATION_MODEL,
    ANNOTATION_POOL,
    ANNOTATION_SCALE_UP,
    DOMAIN,
    INTENT_ANNOTATIONS,
    Intent,
    IntentError,
    is_label_value,
    parse_gpus,
)
from intent.quantity import parse_quantity

#: Trigger pod annotation naming the NodeClaim the controller linked it to.
ANNOTATION_NODECLAIM = f"{DOMAIN}/nodeclaim"
#: Trigger pod annotation listing the pods it stands for (``ns/name`` comma list).
ANNOTATION_SERVES = f"{DOMAIN}/serves"
#: Trigger pod annotation with the group's copied node selector, as JSON.
ANNOTATION_SELECTOR = f"{DOMAIN}/selector"
#: Label on NodeClaims and NodePools naming the pool (karpenter pkg/apis/v1/labels.go).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
#: Node label key of the *marker* each trigger carries in its required node affinity:
#: ``gpu-intent.io/trigger-name NotIn [<trigger name>]``. No node has this label, so the
#: term never restricts where the trigger fits (Karpenter allows ``NotIn`` on keys no
#: NodePool defines: ``Requirements.Compatible``, pkg/scheduling/requirements.go).
#: Karpenter merges the requirements of every pod it packs into a new NodeClaim into
#: that NodeClaim's ``spec.requirements`` (``NodeClaim.Add`` then
#: ``NodeClaimTemplate.ToNodeClaim``, pkg/controllers/provisioning/scheduling/), where
#: NotIn values of one key add up: a NodeClaim created for triggers ``a`` and ``b``
#: carries ``gpu-intent.io/trigger-name NotIn [a b]``. That is the evidence linking a
#: trigger to the NodeClaim bought for it, present from the NodeClaim's creation and
#: not rate limited as Karpenter's ``Nominated`` events are.
TRIGGER_MARKER_KEY = f"{DOMAIN}/trigger-name"
#: Node label the controller sets on the Ready nodes of GPU NodePools: a per-node value
#: (`node_label_value`) that triggers can exclude with ``NotIn``. Karpenter drops pods
#: that name ``kubernetes.io/hostname`` (a restricted label, pkg/apis/v1/labels.go), so
#: this label is how a trigger says "not on these nodes": the pods it stands for were
#: refused by their own scheduler on every node that existed, even where Karpenter's
#: simulation sees free ``nvidia.com/gpu`` (a HAMi node advertises 10 per GPU, so one
#: whose card memory is full still fits a 1-GPU trigger, REFERENCE.md section 3).
NODE_LABEL = f"{DOMAIN}/node"


def parse_time(value: object) -> datetime | None:
    """Parse a Kubernetes RFC 3339 timestamp (``2026-11-21T11:21:32Z``); None if absent
    or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    """A pod's identity: namespace, name and uid (the uid guards deletes)."""

    namespace: str
    name: str
    uid: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# Phases of the scale-up status annotation (see `ScaleUpStatus`).
NATIVE = "Native"
UNRESOLVABLE = "Unresolvable"
INVALID = "InvalidIntent"
TRIGGERED = "Triggered"
PROVISIONING = "Provisioning"
NODE_READY = "NodeReady"
SCHEDULED = "Scheduled"
WAITING = "Waiting"
FAILED = "Failed"

#: Pod annotation with the scale-up retry state (`RetryState`), kept apart from the
#: status annotation so that a later status does not erase the count.
ANNOTATION_RETRY = f"{DOMAIN}/retry"
#: NodeClaim annotation the controller sets beside ``karpenter.sh/do-not-disrupt`` so it
#: removes only the protection it set (see `controller.failures.protections`).
ANNOTATION_PROTECTED = f"{DOMAIN}/protected"
#: Karpenter's annotation that blocks voluntary disruption of a Node or NodeClaim
#: (``"true"``; kubernetes-sigs/karpenter pkg/apis/v1/labels.go ``DoNotDisruptAnnotationKey``,
#: read by pkg/controllers/disruption/types.go ``NewCandidate``; REFERENCE.md section 1).
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def _json_object(raw: str | None) -> dict[str, Any] | None:
    """An annotation's JSON object, or None when absent, not JSON or not an object."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True)
class ScaleUpStatus:
    """What the controller last told a pod, kept in its ``gpu-intent.io/scale-up``
    annotation as compact JSON so that it survives controller restarts.

    ``phase``: ``Native`` (Karpenter provisions for it itself), ``Unresolvable`` (no
    NodePool fits), ``Waiting`` (demand held back: a safety cap, a retry backoff or the
    cooldown after a trigger was removed; the message says which), ``Failed`` (retries
    used up; the message says why and what to do), ``Triggered`` (a trigger pod stands for it), ``Provisioning`` (the
    trigger's NodeClaim is launching), ``NodeReady`` (the NodeClaim is Ready and the
    trigger was removed: the pod's scheduler can place it), ``Scheduled`` (the pod got
    a node; the scale-up is complete), ``InvalidIntent``.
    """

    phase: str
    message: str = ""
    trigger: str | None = None
    node_claim: str | None = None
    node: str | None = None
    since: str | None = None

    def to_annotation(self) -> str:
        data = {
            "phase": self.phase,
            "message": self.message,
            "trigger": self.trigger,
            "nodeClaim": self.node_claim,
            "node": self.node,
            "since": self.since,
        }
        return json.dumps({k: v for k, v in data.items() if v}, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, raw: str | None) -> ScaleUpStatus | None:
        """Parse the annotation; None when absent or not ours to understand."""
        data = _json_object(raw)
        if data is None or not isinstance(data.get("phase"), str):
            return None

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(
            phase=data["phase"],
            message=text("message") or "",
            trigger=text("trigger"),
            node_claim=text("nodeClaim"),
            node=text("node"),
            since=text("since"),
        )

    def same_state(self, other: ScaleUpStatus | None) -> bool:
        """Equal but for ``since`` and ``message``: no need to write it again."""
        return other is not None and (
            self.phase,
            self.trigger,
            self.node_claim,
            self.node,
        ) == (other.phase, other.trigger, other.node_claim, other.node)


@dataclass(frozen=True, slots=True)
class RetryState:
    """The scale-up failures a pod has seen, in its ``gpu-intent.io/retry`` annotation
    (compact JSON) so that a restarted controller keeps counting: ``attempts`` failed so
    far, ``retry_at`` (RFC 3339) before which no new trigger is made for it, and the
    last ``reason``."""

    attempts: int
    retry_at: str
    reason: str = ""

    def to_annotation(self) -> str:
        return json.dumps(
            {"attempts": self.attempts, "retryAt": self.retry_at, "reason": self.reason},
            separators=(",", ":"),
        )

    @classmethod
    def from_annotation(cls, raw: str | None) -> RetryState | None:
        """Parse the annotation; None when absent or malformed."""
        data = _json_object(raw)
        if data is None:
            return None
        attempts, retry_at = data.get("attempts"), data.get("retryAt")
        if not isinstance(attempts, int) or attempts < 0 or not isinstance(retry_at, str):
            return None
        reason = data.get("reason")
        return cls(attempts, retry_at, reason if isinstance(reason, str) else "")


#: Intent source tokens that state a share of one GPU (`gpu_need`): HAMi cores and
#: memory percentage, KAI's fraction, tensor-fusion's compute, the user's own ``gpus``.
SHARE_SOURCES = frozenset(
    {
        "hami:nvidia.com/gpucores",
        "hami:nvidia.com/gpumem-percentage",
        "kai:gpu-fraction",
        "tensor-fusion:tensor-fusion.ai/compute-percent-request",
        "tensor-fusion:tensor-fusion.ai/tflops-request",
        "user:gpu-intent.io/gpus",
    }
)


#: The least of a GPU one HAMi vGPU takes: a device holds at most ``deviceSplitCount``
#: vGPUs (default 10; HAMi's device plugin advertises ``nvidia.com/gpu`` = GPUs x 10).
HAMI_MIN_SHARE = Decimal("0.1")


def gpu_need(intent: Intent) -> Decimal:
    """GPUs a pod takes when packed with others (`controller.plan.pack`, free GPUs and
    NodeReady covers in `controller.capacity`, GPUs found used on a node): a share of one
    GPU (< 1, it can share a card), or whole GPUs (an integer, it shares none).

    - A pod that states no GPU memory: the intent's ``gpus`` (a share from its layer, or
      GPUs; a bin of ``ceil(gpus)`` may share what is left).
    - A pod that states GPU memory on several devices (``gpus`` > 1): whole GPUs,
      ``ceil(gpus)``, shared with none.
    - A pod that states GPU memory (``gpu_memory_mib``, MiB per GPU) on a card of known
      memory (``model_memory_mib``: it names the model) takes the larger of that memory's
      share of the card and the share its sharing layer states (`SHARE_SOURCES`; without
      one, the intent's ``gpus`` is a placeholder: 1 for HAMi ``gpumem`` and
      tensor-fusion ``vram-request``, 0.1 for KAI ``gpu-memory``, intent.demand). The
      layers place such pods by memory: HAMi's ``Fit`` checks ``nvidia.com/gpumem``
      against each device's free memory (pkg/device/nvidia/device.go), KAI a
      ``gpu-memory`` pod against the device's memory. A HAMi pod takes at least
      `HAMI_MIN_SHARE` (ten vGPUs to a device). A share of 1 or more is one whole GPU.
    - A pod that states GPU memory on a card of unknown memory: one whole GPU (its share
      cannot be judged: ten KAI ``gpu-memory`` pods counted 0.1 each would not fit).
    Pure."""
    gpus = intent.gpus
    if not intent.gpu_memory_mib:
        return gpus
    if gpus > 1:
        return Decimal(math.ceil(gpus))
    card = _card_share(intent)
    if card is None:
        return Decimal(1)
    stated = gpus if SHARE_SOURCES.intersection(intent.source) else Decimal(0)
    return min(max(stated, card), Decimal(1))


def _card_share(intent: Intent) -> Decimal | None:
    """The share of one card the intent's GPU memory (MiB per GPU) takes: at least
    `HAMI_MIN_SHARE` for HAMi, at most one GPU; None when no memory is stated or the
    card's memory is unknown. Pure."""
    if not intent.gpu_memory_mib or not intent.model_memory_mib:
        return None
    share = Decimal(intent.gpu_memory_mib) / Decimal(intent.model_memory_mib)
    if any(token.startswith("hami:") for token in intent.source):
        share = max(share, HAMI_MIN_SHARE)
    return min(share, Decimal(1))


def gpu_use(intent: Intent) -> Decimal:
    """GPUs a pod found bound to a node takes of that node's GPUs (`ClusterState.used`,
    the room behind NodeReady covers and free GPUs in `controller.capacity`): its
    `gpu_need`, except for a pod that states GPU memory on several devices. Buying for
    such a pod needs ``ceil(gpus)`` whole GPUs on one node (its vGPUs go to distinct
    devices), but once bound it takes each device's memory share only, and other pods
    share those devices: HAMi's ``Fit`` places each of a container's
    ``nvidia.com/gpu`` vGPUs by ``nvidia.com/gpumem`` against a device's free memory
    (pkg/device/nvidia/device.go), tensor-fusion each of ``gpu-count`` GPUs by its
    ``vram-request``. So: ``ceil(gpus)`` x that memory's share of the card (at least
    `HAMI_MIN_SHARE` for HAMi, at most one GPU), or ``ceil(gpus)`` when the card's
    memory is unknown. Two tensor-fusion pods of two 10 GiB vGPUs on the same two L4
    cards take 2 x 2 x 0.44 of the node's GPUs, not 2 x 2. Pure."""
    if not intent.gpu_memory_mib or intent.gpus <= 1:
        return gpu_need(intent)
    devices = Decimal(math.ceil(intent.gpus))
    card = _card_share(intent)
    return devices if card is None else devices * card


def largest_need_first(pods: Iterable[PendingPod]) -> list[tuple[PendingPod, Decimal]]:
    """``pods`` with their `gpu_need` (GPUs), largest need first, then oldest, then by
    ref: the order packing (`controller.plan.pack`) and free-GPU placement
    (`controller.capacity.place_on_free`) take pods in. Pure."""
    needs = [(pod, gpu_need(pod.intent)) for pod in pods]
    needs.sort(key=lambda item: (-item[1], item[0].created or datetime.min, item[0].ref))
    return needs


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod with a GPU intent that failed to schedule.

    ``unsimulatable``: why Karpenter cannot provision for it itself (empty: it can, so
    gpu-intent makes no trigger). ``selector``: its node-selector entries a trigger may
    copy, sorted. ``unschedulable_since``: when PodScheduled turned Unschedulable.
    """

    ref: PodRef
    intent: Intent
    created: datetime | None
    unschedulable_since: datetime | None
    unsimulatable: tuple[str, ...]
    selector: tuple[tuple[str, str], ...]
    status: ScaleUpStatus | None
    #: The pod's effective CPU (millicores) and memory (bytes) requests: a trigger asks
    #: for those of the pods it stands for, so the node Karpenter picks can hold them.
    cpu_millis: int = 0
    memory_bytes: int = 0
    #: Every ``nodeSelector`` entry (not only the copyable ones), sorted, and the required
    #: node affinity terms (ORed; each an ANDed tuple of requirements): what the node a
    #: trigger buys must satisfy for the pod to run there.
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()
    #: Its scale-up failures so far (`RetryState`), None when none.
    retry: RetryState | None = None
    #: Its tolerations (`parse_tolerations`): which NodePools' taints it can run under.
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class InvalidPod:
    """A pending pod whose gpu-intent annotations do not parse: reported, never acted on."""

    ref: PodRef
    error: str
    status: ScaleUpStatus | None


@dataclass(frozen=True, slots=True)
class ScheduledPod:
    """A pod that got a node while the controller was scaling up for it: it is owed a
    final ``Scheduled`` status. ``status`` is what it was last told."""

    ref: PodRef
    node: str
    status: ScaleUpStatus | None
    #: Seconds from the pod's creation to ``PodScheduled=True``, when both are known.
    seconds_to_node: float | None = None
    #: When ``PodScheduled`` turned True, if known.
    bound_at: datetime | None = None

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> ScheduledPod:
        meta = _meta(obj)
        annotations = meta.get("annotations") or {}
        created = parse_time(meta.get("creationTimestamp"))
        bound = next(
            (
                parse_time(c.get("lastTransitionTime"))
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, Mapping)
                and c.get("type") == "PodScheduled"
                and c.get("status") == "True"
            ),
            None,
        )
        return cls(
            pod_ref(obj),
            str((obj.get("spec") or {}).get("nodeName", "")),
            ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP)),
            (bound - created).total_seconds() if created and bound else None,
            bound,
        )


@dataclass(frozen=True, slots=True)
class Requirement:
    """One NodePool requirement (key, operator In/NotIn/Exists/DoesNotExist/Gt/Lt, values)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def admits(self, value: str) -> bool:
        """Whether a node with label value ``value`` for ``key`` satisfies this."""
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator == "Exists":
            return True
        if self.operator == "DoesNotExist":
            return False
        try:
            number, bound = int(value), int(self.values[0])
        except (ValueError, IndexError):
            return False
        return number > bound if self.operator == "Gt" else number < bound


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

    @property
    def gpus(self) -> Decimal:
        """GPUs this NodeClaim brings: its capacity once launched, else what it requests."""
        return self.gpu_capacity or self.gpu_requests

    @property
    def ready(self) -> bool:
        """Its capacity is usable: ``Ready`` True, or (DRA) registered with its node's
        ResourceSlices publishing GPU devices. On a DRA node the device plugin's
        ``nvidia.com/gpu`` never registers, so Karpenter's ``Initialized`` stays Unknown
        (``ResourceNotRegistered``, karpenter pkg/controllers/nodeclaim/lifecycle/
        initialization.go) and ``Ready`` never turns True, though the GPUs are there for
        pods that claim them (REFERENCE.md section 7)."""
        if self.conditions.get("Ready") == "True":
            return True
        return self.devices > 0 and self.conditions.get("Registered") == "True"

    @property
    def dra_ready(self) -> bool:
        """`ready` only by its ResourceSlices (Karpenter's ``Ready`` is not True)."""
        return self.ready and self.conditions.get("Ready") != "True"

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


def _owner_claim(meta: Mapping[str, Any]) -> str | None:
    """The name in a ``karpenter.sh/*`` ``NodeClaim`` ownerReference of ``meta``: Karpenter
    registration makes the NodeClaim the owner of its Node (karpenter
    pkg/controllers/nodeclaim/lifecycle/registration.go, syncNode)."""
    for owner in meta.get("ownerReferences") or ():
        if (
            isinstance(owner, Mapping)
            and owner.get("kind") == "NodeClaim"
            and str(owner.get("apiVersion", "")).startswith("karpenter.sh/")
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
    labels, the `ANNOTATION_PROTECTED` annotation, its NodeClaim ownerReference, and the
    Ready condition. Pure."""
    meta = _meta(obj)
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
            {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim}
        ]
    return {
        "metadata": slim_meta,
        "status": {
            "conditions": [
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, Mapping) and c.get("type") == "Ready"
            ]
        },
    }


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    meta = _meta(obj)
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
    )


@dataclass(frozen=True, slots=True)
class TriggerInfo:
    """A trigger pod this controller created (both ownership labels present).

    ``cpu_millis``/``memory_bytes``: what it requests (millicores, bytes).
    ``condition_reason``: the reason of its ``PodScheduled`` condition (``Unschedulable``
    makes Karpenter provision for it). ``binding``: a scheduler may bind it (it is not
    a non-binding trigger, see `controller.triggers`).
    """

    ref: PodRef
    pool: str
    model: str | None
    selector: tuple[tuple[str, str], ...]
    gpus: int
    created: datetime | None
    node_claim: str | None
    node_name: str | None
    deleting: bool
    cpu_millis: int = 0
    memory_bytes: int = 0
    binding: bool = True
    min_memory_mib: int = 0
    condition_reason: str | None = None

    @property
    def group(self) -> GroupKey:
        return GroupKey(self.pool, self.model, self.selector, self.min_memory_mib)


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Pods whose GPUs may be bought together: same NodePool, model, copied selector and,
    for pods that name no model, the GPU memory they need (MiB per GPU, 0: none)."""

    pool: str
    model: str | None
    selector: tuple[tuple[str, str], ...] = ()
    min_memory_mib: int = 0

    def sort_key(self) -> tuple[str, str, tuple[tuple[str, str], ...], int]:
        """A total order (a model-less group sorts first; None and str do not compare)."""
        return (self.pool, self.model or "", self.selector, self.min_memory_mib)

    def __str__(self) -> str:
        parts = [f"pool={self.pool}", f"model={self.model or 'any'}"]
        if self.min_memory_mib:
            parts.append(f"gpu-memory>={self.min_memory_mib}Mi")
        parts += [f"{k}={v}" for k, v in self.selector]
        return ",".join(parts)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def pod_ref(obj: Mapping[str, Any]) -> PodRef:
    meta = _meta(obj)
    return PodRef(
        str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
    )


def parse_requirements(raw: object) -> tuple[Requirement, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if isinstance(item, Mapping) and "key" in item and "operator" in item:
            values = tuple(str(v) for v in item.get("values") or [])
            out.append(Requirement(str(item["key"]), str(item["operator"]), values))
    return tuple(out)


#: Longest string value `shared` interns: label values, quantities, operators, models,
#: reasons (longer ones, such as messages and the status annotation, are rarely equal).
_SHARED_TEXT = 64


def shared(value: Any) -> Any:
    """``value`` (decoded JSON) copied with every dict key and every string of at most
    `_SHARED_TEXT` characters interned (``sys.intern``), so the cached pods share one
    copy of each: each watch event is decoded on its own, and without this every cached
    pod held its own copies of the same keys and values (``nvidia.com/gpu``,
    ``PodScheduled``, ``Unschedulable``, annotation keys...), about half of the cache
    (tracemalloc at 10,000 pods, `bench.controller_rss`). Leaves are handled inline, not
    by a call each (a watch event's pod goes through here). Pure."""
    kind = type(value)
    if kind is dict:
        return {
            (_intern(k) if type(k) is str else k): (
                (_intern(v) if len(v) <= _SHARED_TEXT else v) if type(v) is str
                else shared(v) if type(v) in _CONTAINERS else v
            )
            for k, v in value.items()
        }  # fmt: skip
    if kind is list:
        return [
            (_intern(v) if len(v) <= _SHARED_TEXT else v) if type(v) is str
            else shared(v) if type(v) in _CONTAINERS else v
            for v in value
        ]  # fmt: skip
    if kind is str:
        return _intern(value) if len(value) <= _SHARED_TEXT else value
    return value


_intern = sys.intern
_CONTAINERS = (dict, list)


def slim_pod(obj: Mapping[str, Any], *, placement: bool = True) -> dict[str, Any]:
    """The fields of a pod the controller reads, and nothing else: what the pending-pod
    cache keeps, so 10,000 cached pods cost a few MiB, not the full objects (volumes,
    env, managedFields...), with its keys and short strings `shared`. Every parse
    function of this module reads a slim pod as it reads the full one. ``placement``
    False leaves out its node selector, required node affinity and tolerations (what
    `slim_trigger` does not keep). Pure."""
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    slim_meta: dict[str, Any] = {
        k: meta[k]
        for k in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "labels",
        )
        if k in meta
    }
    slim_meta["annotations"] = {
        k: v for k, v in annotations.items() if str(k).startswith(f"{DOMAIN}/")
    }
    owners = [
        {"kind": o.get("kind")} for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)
    ]
    if owners:
        slim_meta["ownerReferences"] = owners

    def container(c: Mapping[str, Any]) -> dict[str, Any]:
        return {"resources": c.get("resources") or {}}

    slim_spec: dict[str, Any] = {
        "containers": [
            container(c) for c in spec.get("containers") or [] if isinstance(c, Mapping)
        ],
    }
    kept = ("nodeName", "overhead", "schedulerName", "resourceClaims")
    for key in (*kept, "nodeSelector", "tolerations") if placement else kept:
        if spec.get(key):
            slim_spec[key] = spec[key]
    if spec.get("initContainers"):
        slim_spec["initContainers"] = [
            container(c) for c in spec["initContainers"] if isinstance(c, Mapping)
        ]
    required = placement and ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required:
        slim_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    slim_status: dict[str, Any] = {
        k: status[k]
        for k in ("phase", "nominatedNodeName", "resourceClaimStatuses")
        if status.get(k)
    }
    conditions = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled"
    ]
    if conditions:
        slim_status["conditions"] = conditions
    # name, uid, resourceVersion and timestamps are one pod's own: not worth interning
    for key in ("namespace", "labels", "annotations", "ownerReferences"):
        if key in slim_meta:
            slim_meta[key] = shared(slim_meta[key])
    return {"metadata": slim_meta, "spec": _shared_spec(slim_spec), "status": shared(slim_status)}


def _shared_spec(slim_spec: dict[str, Any]) -> dict[str, Any]:
    """``slim_spec`` `shared`, or the equal one a pod seen before got: the pods of one
    workload have the same slim spec (requests, scheduler, selectors, tolerations), so
    they share one dict (`one_copy`, keyed by its sorted JSON: about 1 us, where
    `shared` takes about 7). Never mutated once cached, as `one_copy` requires."""
    try:
        key = ("spec", orjson.dumps(slim_spec, option=orjson.OPT_SORT_KEYS))
    except TypeError:  # not JSON (a test's hand-made pod): no sharing
        return shared(slim_spec)  # type: ignore[no-any-return]
    found = _COPIES.get(key)
    return found if found is not None else one_copy(key, shared(slim_spec))


_T = TypeVar("_T")

#: One copy of each distinct value `one_copy` saw, by its key (bounded).
_COPIES: dict[object, Any] = {}


def one_copy(key: object, value: _T) -> _T:
    """``value``, or the value first seen under ``key`` (a hashable that identifies it),
    so that the pods of one workload share one copy of what they have in common (their
    tolerations, raw in the cache and parsed). Values must never be mutated. Bounded:
    forgets everything past 4,096 keys."""
    if len(_COPIES) > 4096:
        _COPIES.clear()
    return _COPIES.setdefault(key, value)  # type: ignore[no-any-return]


def slim_trigger(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the trigger cache keeps of a trigger pod: what `parse_trigger` reads (its
    identity, the gpu-intent annotations but the informational ``serves`` list, container
    resources, ``schedulerName``, ``nodeName``, the ``PodScheduled`` condition), not its
    required node affinity (its marker and node exclusion) or tolerations, so
    5,000 cached triggers cost a few MiB, not the ~60 MiB of their full bodies. Pure."""
    slim = slim_pod(obj, placement=False)
    slim["metadata"]["annotations"].pop(ANNOTATION_SERVES, None)
    return slim


def parse_pending_pod(
    obj: Mapping[str, Any], nodepool_keys: set[str]
) -> PendingPod | InvalidPod | None:
    """A pending pod with an intent, an `InvalidPod` if its intent does not parse, or
    None when it is not ours to look at (no intent, bound, not Unschedulable, a trigger)."""
    meta = _meta(obj)
    annotations = meta.get("annotations") or {}
    if not karpenter.is_provisionable(obj):
        return None
    ref = pod_ref(obj)
    status = ScaleUpStatus.from_annotation(annotations.get(ANNOTATION_SCALE_UP))
    try:
        intent = _intent(tuple(annotations.get(k) for k in INTENT_ANNOTATIONS))
    except IntentError as e:
        return InvalidPod(ref, str(e), status)
    if intent is None:
        return None
    condition = karpenter.unschedulable_condition(obj) or {}
    spec = obj.get("spec") or {}
    selector = tuple(
        sorted(
            (str(k), str(v))
            for k, v in (spec.get("nodeSelector") or {}).items()
            if karpenter.is_copyable_label(str(k), nodepool_keys)
        )
    )
    cpu, memory = pod_requests(obj)
    return PendingPod(
        ref=ref,
        intent=intent,
        created=parse_time(meta.get("creationTimestamp")),
        unschedulable_since=parse_time(condition.get("lastTransitionTime")),
        unsimulatable=tuple(karpenter.unsimulatable(obj, nodepool_keys)),
        selector=selector,
        status=status,
        cpu_millis=cpu,
        memory_bytes=memory,
        node_selector=tuple(
            sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())
        ),
        affinity_terms=required_affinity_terms(spec),
        retry=RetryState.from_annotation(annotations.get(ANNOTATION_RETRY)),
        tolerations=parse_tolerations(spec),
    )


@functools.lru_cache(maxsize=1024)
def _intent(values: tuple[str | None, ...]) -> Intent | None:
    """`Intent.from_annotations` of the intent annotations' values (in
    `INTENT_ANNOTATIONS` order, None for absent ones), remembered: the pods of one
    workload carry the same intent, so a burst of 10,000 parses a handful. Raises
    `IntentError` (never remembered)."""
    return Intent.from_annotations(
        {k: v for k, v in zip(INTENT_ANNOTATIONS, values, strict=True) if v is not None}
    )


def _quantity(value: object, scale: int) -> int:
    """A quantity times ``scale``, rounded up; 0 when absent or malformed (sizing only)."""
    if not isinstance(value, str | int | float):
        return 0
    return _scaled_quantity(value, scale)


@functools.lru_cache(maxsize=1024)
def _scaled_quantity(value: str | int | float, scale: int) -> int:
    """`_quantity` of a str or number, remembered (pods repeat a few request values)."""
    try:
        return math.ceil(parse_quantity(value, "resources") * scale)
    except IntentError:
        return 0


def pod_requests(obj: Mapping[str, Any]) -> tuple[int, int]:
    """A pod's effective CPU (millicores) and memory (bytes) requests, as kube-scheduler
    computes them (k8s.io/component-helpers resource ``PodRequests``): the larger of the
    containers' sum and any one init container, plus ``spec.overhead``. Requests default
    to limits when only limits are set. Malformed quantities count as 0."""
    spec = obj.get("spec") or {}

    def requests(container: Mapping[str, Any]) -> tuple[int, int]:
        resources = container.get("resources") or {}
        values = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return _quantity(values.get("cpu"), 1000), _quantity(values.get("memory"), 1)

    main = [requests(c) for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    init = [requests(c) for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    cpu = max([sum(c for c, _ in main), *(c for c, _ in init)])
    memory = max([sum(m for _, m in main), *(m for _, m in init)])
    overhead = spec.get("overhead") or {}
    return cpu + _quantity(overhead.get("cpu"), 1000), memory + _quantity(overhead.get("memory"), 1)


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's toleration (``spec.tolerations[]``); empty strings where a field is unset."""

    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        """Whether this toleration tolerates ``taint`` (a NodePool template taint):
        ``Toleration.ToleratesTaint``, k8s.io/api core/v1/toleration.go. An empty effect
        matches every effect, an empty key with ``Exists`` every taint; ``Exists``
        matches any value, ``Equal`` (or unset) the taint's value."""
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == str(taint.get("value") or "")


def parse_tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """A pod spec's tolerations, sorted; pods with the same ones share one tuple."""
    parsed = tuple(
        sorted(
            {
                Toleration(
                    str(t.get("key") or ""),
                    str(t.get("operator") or ""),
                    str(t.get("value") or ""),
                    str(t.get("effect") or ""),
                )
                for t in spec.get("tolerations") or []
                if isinstance(t, Mapping)
            },
            key=lambda t: (t.key, t.operator, t.value, t.effect),
        )
    )
    return one_copy(parsed, parsed)


def untolerated_taint(
    tolerations: tuple[Toleration, ...], taints: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first taint that keeps a pod with ``tolerations`` off the node (effect
    ``NoSchedule`` or ``NoExecute`` and no toleration for it, as kube-scheduler's
    TaintToleration filter judges, pkg/scheduler/framework/plugins/tainttoleration),
    None when the pod tolerates them all. ``PreferNoSchedule`` keeps no pod off."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def required_affinity_terms(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    """The ``matchExpressions`` of the pod's required node affinity terms (ORed terms of
    ANDed requirements). ``matchFields`` are not node labels and are left out."""
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = []
    for term in affinity.get("nodeSelectorTerms") or []:
        if isinstance(term, Mapping):
            terms.append(parse_requirements(term.get("matchExpressions")))
    return tuple(t for t in terms if t)


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
        name=str(_meta(obj).get("name", "")),
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
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    requests = (spec.get("resources") or {}).get("requests") or {}
    requirements = parse_requirements(spec.get("requirements"))
    try:
        gpus = parse_gpus(str(requests.get("nvidia.com/gpu", "0")))
    except IntentError:
        gpus = Decimal(0)
    try:
        capacity = parse_gpus(str((status.get("capacity") or {}).get("nvidia.com/gpu", "0")))
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


def parse_trigger(obj: Mapping[str, Any]) -> TriggerInfo | None:
    """A trigger pod's value, or None when its annotations are not ours (then it is left
    alone: the controller never deletes what it cannot identify)."""
    meta = _meta(obj)
    annotations = meta.get("annotations") or {}
    pool = annotations.get(ANNOTATION_POOL)
    try:
        gpus = int(annotations.get(ANNOTATION_GPUS, ""))
        selector_raw = json.loads(annotations.get(ANNOTATION_SELECTOR) or "{}")
        min_memory = int(annotations.get(ANNOTATION_GPU_MEMORY) or 0)
    except ValueError:
        return None
    if not pool or gpus <= 0 or not isinstance(selector_raw, dict):
        return None
    spec = obj.get("spec") or {}
    cpu, memory = pod_requests(obj)
    return TriggerInfo(
        ref=pod_ref(obj),
        pool=str(pool),
        model=annotations.get(ANNOTATION_MODEL) or None,
        selector=tuple(sorted((str(k), str(v)) for k, v in selector_raw.items())),
        gpus=gpus,
        created=parse_time(meta.get("creationTimestamp")),
        node_claim=annotations.get(ANNOTATION_NODECLAIM) or None,
        node_name=spec.get("nodeName") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        cpu_millis=cpu,
        memory_bytes=memory,
        binding=spec.get("schedulerName") != NON_BINDING_SCHEDULER,
        min_memory_mib=max(min_memory, 0),
        condition_reason=next(
            (
                str(c.get("reason"))
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, Mapping) and c.get("type") == "PodScheduled"
            ),
            None,
        ),
    )


#: ``spec.schedulerName`` of non-binding triggers: no scheduler serves it, so the pod is
#: never bound; the controller marks it Unschedulable itself, which is all Karpenter's
#: IsProvisionable reads (pkg/utils/pod/scheduling.go; KAI-Scheduler's node-scale-adjuster
#: does the same for its scaling pods, REFERENCE.md section 1).
NON_BINDING_SCHEDULER = "gpu-intent-non-binding"

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
