"""Required pod anti-affinity on ``kubernetes.io/hostname``, as the sim's Karpenter honours it.

Karpenter's scheduler keeps a topology group per pod (anti-)affinity term
(kubernetes-sigs/karpenter ``pkg/controllers/provisioning/scheduling/topology.go``):

- the term's namespaces are the pod's own when it names neither ``namespaces`` nor a
  ``namespaceSelector``, else the listed ones plus those the selector picks (an empty
  selector ``{}`` picks every namespace; ``buildNamespaceList``);
- its ``labelSelector`` (``matchLabels`` and ``matchExpressions``, ``metav1
  .LabelSelectorAsSelector``; a null selector matches no pod) is counted against the pods
  bound to each node (``countDomains``: pods with a node, not terminal), and against the
  pods placed on new NodeClaims in the same solve (``Topology.Record``);
- anti-affinity is symmetric: a pod may not land beside a pod whose own required
  anti-affinity selects it (``inverseTopologies``, ``updateInverseAffinities``).

Only what the sim needs is modelled: required terms with topology key
``kubernetes.io/hostname`` (one node, one domain); other topology keys and preferred
terms are ignored. Non-empty ``namespaceSelector`` terms match against the namespace
labels the caller passes. Purely computational.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from intent.keys import HOSTNAME_LABEL

Obj = Mapping[str, Any]
HOSTNAME = HOSTNAME_LABEL


def required_anti_affinity(pod: Obj) -> list[Obj]:
    """The pod's required anti-affinity terms on ``kubernetes.io/hostname``."""
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return [
        t
        for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
        if isinstance(t, Mapping) and t.get("topologyKey") == HOSTNAME
    ]


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """``LabelSelectorAsSelector(selector).Matches(labels)``: None matches nothing, ``{}``
    everything; ``matchLabels`` and every ``matchExpressions`` entry must hold (operators
    In, NotIn, Exists, DoesNotExist)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or ()
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _namespace_selected(
    term: Obj, owner_namespace: str, namespace: str, namespace_labels: Mapping[str, Obj]
) -> bool:
    """Whether ``term`` of a pod in ``owner_namespace`` covers pods of ``namespace``."""
    names = term.get("namespaces") or ()
    selector = term.get("namespaceSelector")
    if not names and selector is None:
        return namespace == owner_namespace
    if namespace in names:
        return True
    return selector is not None and selector_matches(
        selector, namespace_labels.get(namespace) or {}
    )


def _meta(pod: Obj) -> tuple[str, Mapping[str, str]]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), meta.get("labels") or {}


def _repels(owner: Obj, other: Obj, namespace_labels: Mapping[str, Obj]) -> bool:
    """Whether a required hostname anti-affinity term of ``owner`` selects ``other``."""
    owner_ns, _ = _meta(owner)
    other_ns, other_labels = _meta(other)
    return any(
        _namespace_selected(term, owner_ns, other_ns, namespace_labels)
        and selector_matches(term.get("labelSelector"), other_labels)
        for term in required_anti_affinity(owner)
    )


def anti_affinity_conflict(
    pod: Obj, neighbours: Iterable[Obj], namespace_labels: Mapping[str, Obj] | None = None
) -> str | None:
    """Why ``pod`` may not share a node with ``neighbours`` (the pods bound there or
    placed there in this solve), or None: its required hostname anti-affinity selects one
    of them, or one of theirs selects it. The wording follows Karpenter's
    ``unsatisfiable topology constraint for pod-anti-affinity``."""
    labels = namespace_labels or {}
    mine = bool(required_anti_affinity(pod))
    for other in neighbours:
        if (mine and _repels(pod, other, labels)) or _repels(other, pod, labels):
            namespace, _ = _meta(other)
            name = (other.get("metadata") or {}).get("name", "")
            return (
                f"unsatisfiable topology constraint for pod-anti-affinity, key={HOSTNAME} "
                f"(pod {namespace}/{name} is there)"
            )
    return None
