"""The controller's view of the cluster as frozen values, parsed from API objects.

Parsing is the boundary where raw JSON dicts from the API server become typed values
the planner can trust; a pod whose gpu-intent annotations do not parse becomes an
`InvalidPod` that the planner reports and never acts on. Purely computational.

This module holds the pods' side (pending, served and trigger pods, their statuses and
retry states, the slimmed pods the caches keep); Karpenter's objects (NodePools,
NodeClaims, Nodes, its Events on triggers) are in `controller.nodes`, and what a pod
takes of a GPU in `controller.packing`.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
    Phase,
)
from intent.keys import DO_NOT_DISRUPT_ANNOTATION, POD_SCHEDULED
from intent.keys import NODEPOOL_LABEL as NODEPOOL_LABEL
from intent.quantity import parse_quantity

#: Trigger pod annotation naming the NodeClaim the controller linked it to.
ANNOTATION_NODECLAIM = f"{DOMAIN}/nodeclaim"
#: Trigger pod annotation listing the pods it stands for (``ns/name`` comma list).
ANNOTATION_SERVES = f"{DOMAIN}/serves"
#: Trigger pod annotation with the group's copied node selector, as JSON.
ANNOTATION_SELECTOR = f"{DOMAIN}/selector"
#: Trigger pod annotation with the group's placement (`controller.placement`), as JSON.
ANNOTATION_PLACEMENT = f"{DOMAIN}/placement"
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
#: (`controller.nodes.node_label_value`) that triggers can exclude with ``NotIn``.
#: Karpenter drops pods that name ``kubernetes.io/hostname`` (a restricted label,
#: pkg/apis/v1/labels.go), so this label is how a trigger says "not on these nodes":
#: the pods it stands for were refused by their own scheduler on every node that
#: existed, even where Karpenter's simulation sees free ``nvidia.com/gpu`` (a HAMi node
#: advertises 10 per GPU, so one whose card memory is full still fits a 1-GPU trigger,
#: REFERENCE.md section 3).
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
    """A pod's identity: namespace, name and uid (the uid guards deletes), and the
    ``resourceVersion`` of the object it was read from (``version``; empty when not
    read from one): the pod state a decision about it was made on."""

    namespace: str
    name: str
    uid: str = field(default="", compare=False)
    version: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# The phases of the scale-up status annotation under their former names (the controller
# spells them `Phase.X`; these stay for importers).
NATIVE = Phase.NATIVE
UNRESOLVABLE = Phase.UNRESOLVABLE
INVALID = Phase.INVALID
TRIGGERED = Phase.TRIGGERED
PROVISIONING = Phase.PROVISIONING
NODE_READY = Phase.NODE_READY
SCHEDULED = Phase.SCHEDULED
WAITING = Phase.WAITING
FAILED = Phase.FAILED

#: Pod annotation with the scale-up retry state (`RetryState`), kept apart from the
#: status annotation so that a later status does not erase the count.
ANNOTATION_RETRY = f"{DOMAIN}/retry"
#: NodeClaim annotation the controller sets beside ``karpenter.sh/do-not-disrupt`` so it
#: removes only the protection it set (see `controller.failures.protections`).
ANNOTATION_PROTECTED = f"{DOMAIN}/protected"
#: Karpenter's annotation that blocks voluntary disruption of a Node or NodeClaim
#: (`intent.keys.DO_NOT_DISRUPT_ANNOTATION`; REFERENCE.md section 1).
DO_NOT_DISRUPT = DO_NOT_DISRUPT_ANNOTATION


#: The phases as strings, to tell a known one from an unknown one.
_PHASES: frozenset[str] = frozenset(Phase)


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

    #: A `Phase`; one this version does not know (a newer controller wrote it) stays the
    #: string read.
    phase: Phase | str
    message: str = ""
    trigger: str | None = None
    node_claim: str | None = None
    node: str | None = None
    since: str | None = None
    #: The ``resourceVersion`` of the pod this status was decided on (JSON
    #: ``podResourceVersion``; None when unknown, as in statuses written before it was
    #: added): a reader tells a status older than the pod it is on by it.
    observed: str | None = None

    def to_annotation(self) -> str:
        data = {
            "phase": self.phase,
            "message": self.message,
            "trigger": self.trigger,
            "nodeClaim": self.node_claim,
            "node": self.node,
            "since": self.since,
            "podResourceVersion": self.observed,
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

        phase: str = data["phase"]
        return cls(
            phase=Phase(phase) if phase in _PHASES else phase,
            message=text("message") or "",
            trigger=text("trigger"),
            node_claim=text("nodeClaim"),
            node=text("node"),
            since=text("since"),
            observed=text("podResourceVersion"),
        )

    def same_state(self, other: ScaleUpStatus | None) -> bool:
        """Equal but for ``since``, ``message`` and ``observed``: no need to write it
        again."""
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
        meta = object_meta(obj)
        annotations = meta.get("annotations") or {}
        created = parse_time(meta.get("creationTimestamp"))
        bound = next(
            (
                parse_time(c.get("lastTransitionTime"))
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, Mapping)
                and c.get("type") == POD_SCHEDULED
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
    placement: tuple[Requirement, ...] = ()
    #: The pods it was made for, ``(namespace, name)`` (its ``serves`` annotation, as
    #: far as that was not cut short): they stay with it while their own status does not
    #: say so yet (`controller.plan._stay`).
    serves: frozenset[tuple[str, str]] = frozenset()

    @property
    def group(self) -> GroupKey:
        return GroupKey(self.pool, self.model, self.selector, self.min_memory_mib, self.placement)


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Pods whose GPUs may be bought together: same NodePool, model, copied selector, the
    GPU memory they need (MiB per GPU, 0: none) and their sharing layer's placement
    (`controller.placement`: where its nodes must be)."""

    pool: str
    model: str | None
    selector: tuple[tuple[str, str], ...] = ()
    min_memory_mib: int = 0
    placement: tuple[Requirement, ...] = ()

    def sort_key(self) -> tuple[str, str, tuple[tuple[str, str], ...], int, tuple[Any, ...]]:
        """A total order (a model-less group sorts first; None and str do not compare)."""
        where = tuple((r.key, r.operator, r.values) for r in self.placement)
        return (self.pool, self.model or "", self.selector, self.min_memory_mib, where)

    def __str__(self) -> str:
        parts = [f"pool={self.pool}", f"model={self.model or 'any'}"]
        if self.min_memory_mib:
            parts.append(f"gpu-memory>={self.min_memory_mib}Mi")
        parts += [f"{k}={v}" for k, v in self.selector]
        parts += [f"{r.key} {r.operator} {list(r.values)}" for r in self.placement]
        return ",".join(parts)


def object_meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An API object's ``metadata`` (empty when absent or not an object)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def pod_ref(obj: Mapping[str, Any]) -> PodRef:
    meta = object_meta(obj)
    return PodRef(
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        str(meta.get("resourceVersion", "")),
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
    meta = object_meta(obj)
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
        if isinstance(c, Mapping) and c.get("type") == POD_SCHEDULED
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
    identity, the gpu-intent annotations, the ``serves`` list included, container
    resources, ``schedulerName``, ``nodeName``, the ``PodScheduled`` condition), not its
    required node affinity (its marker and node exclusion) or tolerations, so
    5,000 cached triggers cost a few MiB, not the ~60 MiB of their full bodies. Pure."""
    return slim_pod(obj, placement=False)


def parse_serves(text: str) -> frozenset[tuple[str, str]]:
    """The pods of a trigger's ``serves`` annotation (``ns/name,ns/name``), as
    ``(namespace, name)``; an entry cut short (``...``, `MAX_SERVES_CHARS`) or not of
    that shape is left out. Pure."""
    out: set[tuple[str, str]] = set()
    for entry in text.split(","):
        namespace, _, name = entry.strip().partition("/")
        if namespace and name and not name.endswith("...") and "/" not in name:
            out.add((namespace, name))
    return frozenset(out)


def parse_pending_pod(
    obj: Mapping[str, Any], nodepool_keys: set[str]
) -> PendingPod | InvalidPod | None:
    """A pending pod with an intent, an `InvalidPod` if its intent does not parse, or
    None when it is not ours to look at (no intent, bound, not Unschedulable, a trigger)."""
    meta = object_meta(obj)
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


def parse_trigger(obj: Mapping[str, Any]) -> TriggerInfo | None:
    """A trigger pod's value, or None when its annotations are not ours (then it is left
    alone: the controller never deletes what it cannot identify)."""
    meta = object_meta(obj)
    annotations = meta.get("annotations") or {}
    pool = annotations.get(ANNOTATION_POOL)
    try:
        gpus = int(annotations.get(ANNOTATION_GPUS, ""))
        selector_raw = json.loads(annotations.get(ANNOTATION_SELECTOR) or "{}")
        min_memory = int(annotations.get(ANNOTATION_GPU_MEMORY) or 0)
        placement = parse_requirements(json.loads(annotations.get(ANNOTATION_PLACEMENT) or "[]"))
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
        serves=parse_serves(str(annotations.get(ANNOTATION_SERVES) or "")),
        condition_reason=next(
            (
                str(c.get("reason"))
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, Mapping) and c.get("type") == POD_SCHEDULED
            ),
            None,
        ),
        placement=placement,
    )


#: ``spec.schedulerName`` of non-binding triggers: no scheduler serves it, so the pod is
#: never bound; the controller marks it Unschedulable itself, which is all Karpenter's
#: IsProvisionable reads (pkg/utils/pod/scheduling.go; KAI-Scheduler's node-scale-adjuster
#: does the same for its scaling pods, REFERENCE.md section 1).
NON_BINDING_SCHEDULER = "gpu-intent-non-binding"
