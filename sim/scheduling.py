"""Scheduling predicates shared by the sim's scheduler, kubelet and Karpenter simulator.

A purely computational module with no side effects: every function reads plain JSON
dicts (pods and nodes as the store holds them) and returns a value.

Sources of each rule:

- effective requests: kubernetes ``pkg/api/v1/resource/helpers.go`` ``PodRequests``
  (sum over containers, max with each init container, restartable init containers
  ("sidecars") added to the sum, ``spec.overhead`` added), with the apiserver's defaulting
  of an absent request to its limit (``pkg/apis/core/v1/defaults.go``
  ``SetDefaults_ResourceRequirements``, applied per container and key);
- node selectors: ``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``
  (``spec.nodeSelector`` AND the required ``nodeSelectorTerms``; terms ORed, a term's
  requirements ANDed, an empty or invalid term matches nothing);
- taints: ``k8s.io/api/core/v1/toleration.go`` ``ToleratesTaint`` and
  ``component-helpers/scheduling/corev1`` ``FindMatchingUntoleratedTaint``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

from intent.quantity import parse_quantity

__all__ = [
    "effective_requests",
    "fit_error_message",
    "is_bound",
    "is_live",
    "is_terminal",
    "is_terminating",
    "matches_node_selector",
    "node_is_ready",
    "node_taints",
    "pod_requests",
    "quantity",
    "tolerates",
    "untolerated_taint",
]

_ONE = Decimal(1)


@functools.lru_cache(maxsize=4096)
def _parsed(value: str | int | float) -> Decimal:
    return parse_quantity(value, "quantity")


def quantity(value: Any, where: str) -> Decimal:
    """`intent.quantity.parse_quantity` of ``value``, memoized: the sim's loops read
    the same few quantity strings (``"100m"``, ``"8"``, ``"16Gi"``) on every pass, and a
    `Decimal` is immutable, so one parse serves them all.

    Raises:
        ValueError: ``value`` does not parse (the message names ``where``).
    """
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return _parsed(value)
        except ValueError:
            pass  # parse again below for the message that names ``where``
    return parse_quantity(value, where)


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, Decimal]:
    """One container's requests, an absent request defaulting to its limit."""
    resources = container.get("resources") or {}
    merged: dict[str, Any] = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    out: dict[str, Decimal] = {}
    for key, value in merged.items():
        out[key] = quantity(value, f"{where}.resources[{key!r}]")
    return out


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, Decimal(0)) + value


def _max_into(total: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for key, value in other.items():
        if value > total.get(key, Decimal(0)):
            total[key] = value


#: ``(uid, resourceVersion)`` -> `pod_requests` result, for stored pods (a stored pod's
#: uid and resourceVersion name one content). Cleared whole when it reaches the bound.
_REQUESTS: dict[tuple[str, str], dict[str, Decimal]] = {}
_REQUESTS_BOUND: Final = 65536


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """`effective_requests` of ``pod`` (a fresh dict), memoized per uid and
    resourceVersion for pods read from the store: the scheduler, the kubelet and
    Karpenter read every bound pod's requests on every pass.

    Raises:
        ValueError: as `effective_requests`.
    """
    meta = pod.get("metadata") or {}
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not rv:
        return effective_requests(pod)
    key = (str(uid), str(rv))
    cached = _REQUESTS.get(key)
    if cached is None:
        cached = effective_requests(pod)
        if len(_REQUESTS) >= _REQUESTS_BOUND:
            _REQUESTS.clear()
        _REQUESTS[key] = cached
    return dict(cached)


def effective_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """The pod's effective resource requests, as kube-scheduler's NodeResourcesFit sees them.

    Per resource: ``max(sum over containers + sidecars, max over init containers of (its
    request + the sidecars started before it))``, plus ``spec.overhead``. A key absent
    from a container's ``requests`` falls back to its ``limits``. Units are the
    quantity's base unit: cpu in cores (``"100m"`` -> ``0.1``), memory and
    ephemeral-storage in bytes, extended resources (``nvidia.com/gpu``,
    ``nvidia.com/gpumem`` in MiB as HAMi defines it) as plain counts. Always includes
    ``"pods": Decimal(1)``.

    Raises:
        ValueError: a quantity does not parse (`intent.contract.IntentError`, a
            ValueError subclass, whose message names the container and key).
    """
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("containers") or ()):
        _add(total, _container_requests(container, f"spec.containers[{i}]"))
    init_max: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("initContainers") or ()):
        requests = _container_requests(container, f"spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _add(total, requests)
            _max_into(init_max, sidecars)
        else:
            running = dict(sidecars)
            _add(running, requests)
            _max_into(init_max, running)
    _max_into(total, init_max)
    for key, value in (spec.get("overhead") or {}).items():
        _add(total, {key: quantity(value, f"spec.overhead[{key!r}]")})
    total["pods"] = _ONE
    return total


def _requirement_matches(expr: Mapping[str, Any], value: str | None) -> bool:
    """One NodeSelectorRequirement against one label (or field) value, None if absent."""
    operator = expr.get("operator")
    values: Sequence[str] = expr.get("values") or ()
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False  # an unknown operator makes the term invalid: it matches nothing


def _term_matches(
    term: Mapping[str, Any], labels: Mapping[str, str], node_name: str | None
) -> bool:
    expressions: Iterable[Mapping[str, Any]] = term.get("matchExpressions") or ()
    fields: Iterable[Mapping[str, Any]] = term.get("matchFields") or ()
    if not term.get("matchExpressions") and not term.get("matchFields"):
        return False  # an empty term matches no objects (nodeaffinity.go)
    for expr in expressions:
        if not _requirement_matches(expr, labels.get(str(expr.get("key", "")))):
            return False
    for expr in fields:
        # Only metadata.name is supported, with In/NotIn (validation.go).
        if expr.get("key") != "metadata.name" or expr.get("operator") not in ("In", "NotIn"):
            return False
        if node_name is None or not _requirement_matches(expr, node_name):
            return False
    return True


def matches_node_selector(
    pod: Mapping[str, Any], labels: Mapping[str, str], *, node_name: str | None = None
) -> bool:
    """Whether a node with ``labels`` (and name ``node_name``) satisfies the pod's
    ``spec.nodeSelector`` and required node affinity (kube-scheduler NodeAffinity filter).

    ``matchFields`` can only name ``metadata.name``; without ``node_name`` (e.g. for a
    Karpenter instance type that has no name yet) such a requirement never matches.
    """
    spec = pod.get("spec") or {}
    for key, want in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != want:
            return False
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    # A present selector with no terms matches nothing (LazyErrorNodeSelector.Match).
    terms = required.get("nodeSelectorTerms") or ()
    return any(_term_matches(term, labels, node_name) for term in terms)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint`` (k8s.io/api core/v1): an empty effect matches all
    effects, an empty key matches all keys, operator ``Exists`` ignores the value and an
    empty operator means ``Equal``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    tolerations: Sequence[Mapping[str, Any]],
    taints: Sequence[Mapping[str, Any]],
    effects: Collection[str] = ("NoSchedule", "NoExecute"),
) -> Mapping[str, Any] | None:
    """The first taint whose effect is in ``effects`` that no toleration tolerates, or
    None. The default effects are the ones kube-scheduler's TaintToleration filter
    checks (``helper.DoNotScheduleTaintsFilterFunc``)."""
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(toleration, taint) for toleration in tolerations):
            return taint
    return None


def is_bound(pod: Mapping[str, Any]) -> bool:
    """The pod has ``spec.nodeName`` (it was bound, or created with a node)."""
    return bool((pod.get("spec") or {}).get("nodeName"))


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """The pod has ``metadata.deletionTimestamp`` (graceful deletion in progress)."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_live(pod: Mapping[str, Any]) -> bool:
    """``status.phase`` is Pending or Running; a pod without a phase counts as Pending,
    as the apiserver creates pods (KAI's binder keeps a GPU group while one of its pods
    is live)."""
    return (pod.get("status") or {}).get("phase") in (None, "", "Pending", "Running")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """``status.phase`` is Succeeded or Failed: the pod holds no resources any more
    (kube-scheduler's cache and the kubelet's admission both skip such pods)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """Condition ``Ready`` is ``True`` and ``spec.unschedulable`` is not set."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``spec.taints`` plus the ``NoSchedule`` taint the node lifecycle controller puts on
    a node that is not Ready (``TaintNodesByCondition``): ``node.kubernetes.io/unreachable``
    when Ready is Unknown, ``node.kubernetes.io/not-ready`` when it is False or absent."""
    taints: list[Mapping[str, Any]] = list((node.get("spec") or {}).get("taints") or ())
    conditions = (node.get("status") or {}).get("conditions") or ()
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    if ready != "True":
        key = f"node.kubernetes.io/{'unreachable' if ready == 'Unknown' else 'not-ready'}"
        if not any(t.get("key") == key and t.get("effect") == "NoSchedule" for t in taints):
            taints.append({"key": key, "effect": "NoSchedule"})
    return taints


def fit_error_message(
    num_nodes: int, node_reasons: Iterable[Sequence[str]], post_filter: str = ""
) -> str:
    """kube-scheduler's ``FitError.Error()`` (``pkg/scheduler/framework/types.go``):
    ``0/<num_nodes> nodes are available: <histogram>.`` where the histogram is each
    distinct reason of the failed nodes as ``"<count> <reason>"``, sorted as strings and
    joined by ``", "``; then `` <post_filter>.`` if given (DefaultPreemption's message,
    which itself ends with a period, hence the real ``..``)."""
    histogram = Counter(reason for reasons in node_reasons for reason in reasons)
    message = f"0/{num_nodes} nodes are available:"
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    if parts:
        message += f" {', '.join(parts)}."
    if post_filter:
        message += f" {post_filter}."
    return message
