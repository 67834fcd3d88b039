"""Karpenter's node requirement algebra (a purely computational module, no side effects).

Ported from kubernetes-sigs/karpenter v1: ``pkg/scheduling/requirement.go`` (one key's
allowed set: In values, NotIn complement, Exists, DoesNotExist, Gt/Lt bounds),
``pkg/scheduling/requirements.go`` (``Add`` intersects, ``Compatible``, ``Intersects``,
``Labels``, ``String``), ``pkg/apis/v1/labels.go`` with the AWS provider's additions
(aws/karpenter-provider-aws ``pkg/apis/v1/labels.go``: the ``karpenter.k8s.aws/*`` well
known labels and restricted domain), and the pod validation of
``pkg/controllers/provisioning/provisioner.go`` ``Validate`` /
``pkg/apis/v1/nodeclaim_validation.go`` ``ValidateRequirement``.

Errors are returned as message strings (None when fine), worded as Karpenter words them,
because they end up in ``FailedScheduling`` events and logs.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from intent import keys

__all__ = [
    "AWS_INSTANCE_LABELS",
    "HOSTNAME_LABEL",
    "INSTANCE_LABELS",
    "NODEPOOL_LABEL",
    "NORMALIZED_LABELS",
    "WELL_KNOWN_LABELS",
    "Requirement",
    "Requirements",
    "from_labels",
    "from_node_selector",
    "is_restricted_label",
    "nodeclass_label_key",
    "nodepool_labels",
    "nodepool_requirements",
    "pod_requirements",
    "preferred_terms",
    "required_terms",
    "validate_pod",
    "validate_requirement",
]

IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
_OPERATORS: Final = frozenset({IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT})
#: Go's math.MaxInt64: the "size" of a complement set (``Requirement.Len``).
_UNBOUNDED: Final = sys.maxsize

NODEPOOL_LABEL: Final = keys.NODEPOOL_LABEL
HOSTNAME_LABEL: Final = keys.HOSTNAME_LABEL

#: ``karpenter.k8s.aws/*`` instance labels the AWS provider registers as well known
#: (``pkg/apis/v1/labels.go``); an instance type lacking one has a DoesNotExist
#: requirement on it (``computeRequirements``).
AWS_INSTANCE_LABELS: Final = (
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
)

#: The other providers' instance labels (`sim.providers`): Azure
#: (Azure/karpenter-provider-azure pkg/apis/v1beta1/labels.go ``AzureWellKnownLabels``, the
#: ones the sim sets), GCP (cloudpilot-ai/karpenter-provider-gcp pkg/apis/v1alpha1/labels.go;
#: manufacturer and memory registered but only ever DoesNotExist) and TKE
#: (TencentCloud/karpenter-provider-tke pkg/apis/v1beta1/labels.go: no GPU label).
AZURE_INSTANCE_LABELS: Final = (
    keys.AZURE_SKU_NAME_LABEL,
    keys.AZURE_SKU_FAMILY_LABEL,
    "karpenter.azure.com/sku-cpu",
    "karpenter.azure.com/sku-memory",
    keys.AZURE_GPU_NAME_LABEL,
    keys.AZURE_GPU_MANUFACTURER_LABEL,
    keys.AZURE_GPU_COUNT_LABEL,
)
GCP_INSTANCE_LABELS: Final = (
    keys.GCP_INSTANCE_FAMILY_LABEL,
    "karpenter.k8s.gcp/instance-cpu",
    "karpenter.k8s.gcp/instance-memory",
    keys.GCP_GPU_NAME_LABEL,
    "karpenter.k8s.gcp/instance-gpu-manufacturer",
    keys.GCP_GPU_COUNT_LABEL,
    "karpenter.k8s.gcp/instance-gpu-memory",
    keys.GKE_ACCELERATOR_LABEL,
)
TKE_INSTANCE_LABELS: Final = (
    keys.TKE_INSTANCE_FAMILY_LABEL,
    keys.TKE_INSTANCE_CPU_LABEL,
    keys.TKE_INSTANCE_MEMORY_LABEL,
)
#: Each provider's instance labels: an instance type lacking one has a DoesNotExist
#: requirement on it.
INSTANCE_LABELS: Final = {
    "aws": AWS_INSTANCE_LABELS,
    "azure": AZURE_INSTANCE_LABELS,
    "gcp": GCP_INSTANCE_LABELS,
    "tke": TKE_INSTANCE_LABELS,
}

#: ``v1.WellKnownLabels`` with the AWS provider's ``init`` additions: a pod may require
#: these even when a NodePool does not define them (``AllowUndefinedWellKnownLabels``).
#: The sim plays every provider (`sim.providers`), so the other providers' instance
#: labels are well known too; a cluster's instance types carry only their provider's.
WELL_KNOWN_LABELS: Final = frozenset(
    {
        NODEPOOL_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported",
        "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
        "karpenter.k8s.aws/instance-ebs-bandwidth",
        "karpenter.k8s.aws/instance-network-bandwidth",
        "topology.k8s.aws/zone-id",
    }
) | frozenset(label for labels in INSTANCE_LABELS.values() for label in labels)
#: ``v1.NormalizedLabels``: deprecated aliases rewritten to the stable key.
NORMALIZED_LABELS: Final = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
}
_RESTRICTED_DOMAINS: Final = ("kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws")
_DOMAIN_EXCEPTIONS: Final = ("kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io")
_NAME_RE: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_PREFIX_RE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _normalize(key: str) -> str:
    return NORMALIZED_LABELS.get(key, key)


def _int_or_none(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _within(value: str, gt: int | None, lt: int | None) -> bool:
    if gt is None and lt is None:
        return True
    number = _int_or_none(value)
    if number is None:
        return False
    return (gt is None or number > gt) and (lt is None or number < lt)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True, slots=True)
class Requirement:
    """The set of values one label key may take (``requirement.go``): ``values`` when
    ``complement`` is False, everything but ``values`` when True, further bounded by
    ``greater_than``/``less_than`` (integers, exclusive). DoesNotExist is the empty
    non-complement set; Exists the empty complement."""

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None
    min_values: int | None = None

    @classmethod
    def new(
        cls, key: str, operator: str, values: Iterable[str] = (), min_values: int | None = None
    ) -> Requirement:
        """``NewRequirementWithFlexibility``; Gt/Lt values must be prevalidated integers."""
        key, values = _normalize(key), tuple(values)
        if operator == IN:
            return cls(key, False, frozenset(values), min_values=min_values)
        if operator == DOES_NOT_EXIST:
            return cls(key, False, min_values=min_values)
        if operator == NOT_IN:
            return cls(key, True, frozenset(values), min_values=min_values)
        gt = int(values[0]) if operator == GT else None
        lt = int(values[0]) if operator == LT else None
        return cls(key, True, greater_than=gt, less_than=lt, min_values=min_values)

    @property
    def operator(self) -> str:
        """In / NotIn / Exists / DoesNotExist (Gt and Lt read as Exists with bounds)."""
        if self.complement:
            return NOT_IN if self.values else EXISTS
        return IN if self.values else DOES_NOT_EXIST

    def size(self) -> int:
        """``Len``: the number of values, or MaxInt64 minus the excluded ones."""
        return _UNBOUNDED - len(self.values) if self.complement else len(self.values)

    def has(self, value: str) -> bool:
        """Whether ``value`` is allowed."""
        if not _within(value, self.greater_than, self.less_than):
            return False
        return (value not in self.values) if self.complement else (value in self.values)

    def intersection(self, other: Requirement) -> Requirement:
        """The values allowed by both (``Intersection``)."""
        complement = self.complement and other.complement
        gt = _max(self.greater_than, other.greater_than)
        lt = _min(self.less_than, other.less_than)
        min_values = _max(self.min_values, other.min_values)
        if gt is not None and lt is not None and gt >= lt:
            return Requirement(self.key, False, min_values=min_values)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        values = frozenset(v for v in values if _within(v, gt, lt))
        if not complement:
            gt = lt = None
        return Requirement(self.key, complement, values, gt, lt, min_values)

    def has_intersection(self, other: Requirement) -> bool:
        """Whether some value satisfies both (``HasIntersection``)."""
        return self.intersection(other).size() > 0

    def any_value(self) -> str:
        """A value the requirement allows, "" for DoesNotExist (``Any``; Karpenter picks
        at random, this picks the smallest, or the smallest integer in bounds)."""
        if not self.complement:
            return min(self.values) if self.values else ""
        number = (self.greater_than + 1) if self.greater_than is not None else 0
        while str(number) in self.values:
            number += 1
        return str(number)

    def node_selector_requirements(self) -> list[dict[str, Any]]:
        """As NodeClaim ``spec.requirements`` entries (``NodeSelectorRequirement``;
        both bounds give two entries)."""
        extra: dict[str, Any] = {} if self.min_values is None else {"minValues": self.min_values}
        bounds = [(GT, self.greater_than), (LT, self.less_than)]
        if any(b is not None for _, b in bounds):
            return [
                {"key": self.key, "operator": op, "values": [str(b)], **extra}
                for op, b in bounds
                if b is not None
            ]
        entry: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            entry["values"] = sorted(self.values)
        return [{**entry, **extra}]

    def __str__(self) -> str:
        """Karpenter's ``String``: ``key In [a b]`` (first five values), ``key Exists``."""
        operator = self.operator
        if operator in (EXISTS, DOES_NOT_EXIST):
            text = f"{self.key} {operator}"
        else:
            values = sorted(self.values)
            if len(values) > 5:
                values = [*values[:5], f"and {len(values) - 5} others"]
            text = f"{self.key} {operator} [{' '.join(values)}]"
        if self.greater_than is not None:
            text += f" >{self.greater_than}"
        if self.less_than is not None:
            text += f" <{self.less_than}"
        if self.min_values is not None:
            text += f" minValues {self.min_values}"
        return text


class Requirements(Mapping[str, Requirement]):
    """Requirements per label key (``requirements.go``); immutable: `add` returns a new
    object in which a repeated key holds the intersection."""

    __slots__ = ("_reqs",)

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        self._reqs: dict[str, Requirement] = {}
        for req in requirements:
            existing = self._reqs.get(req.key)
            self._reqs[req.key] = req if existing is None else req.intersection(existing)

    def __getitem__(self, key: str) -> Requirement:
        return self._reqs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reqs)

    def __len__(self) -> int:
        return len(self._reqs)

    def add(self, *more: Requirement | Requirements) -> Requirements:
        """These requirements intersected with ``more``."""
        flat: list[Requirement] = list(self._reqs.values())
        for item in more:
            flat.extend(item.values() if isinstance(item, Requirements) else [item])
        return Requirements(flat)

    def get_or_exists(self, key: str) -> Requirement:
        """``Get``: the requirement on ``key``, or Exists when undefined."""
        return self._reqs.get(key) or Requirement(key, True)

    def compatible(
        self, incoming: Requirements, allow_undefined: frozenset[str] = frozenset()
    ) -> str | None:
        """``Compatible``: None if ``incoming`` (a pod's) can be met by these (a node's or
        NodePool's), else the first reason. A key these do not define is an error unless it
        is in ``allow_undefined`` or incoming only excludes values (NotIn/DoesNotExist)."""
        for key in sorted(incoming):
            if key in allow_undefined or key in self._reqs:
                continue
            if incoming[key].operator in (NOT_IN, DOES_NOT_EXIST):
                continue
            return f'label "{key}" does not have known values{self._hint(key, allow_undefined)}'
        return self.intersects(incoming)

    def can_meet(
        self, incoming: Requirements, allow_undefined: frozenset[str] = frozenset()
    ) -> bool:
        """Whether `compatible` (with the same ``allow_undefined``) would return None,
        without composing the reason: Karpenter's existing-node check and its in-flight
        NodeClaims discard it, and a solve over a thousand nodes spent most of its time
        writing reasons nobody read."""
        mine = self._reqs
        for key, new in incoming._reqs.items():
            existing = mine.get(key)
            if existing is None:
                if key not in allow_undefined and new.operator not in (NOT_IN, DOES_NOT_EXIST):
                    return False
                continue
            if existing.has_intersection(new):
                continue
            excluding = (NOT_IN, DOES_NOT_EXIST)
            if not (new.operator in excluding and existing.operator in excluding):
                return False
        return True

    def _hint(self, key: str, allow_undefined: frozenset[str]) -> str:
        """``labelHint``: a well-known or defined key that ``key`` may be a typo of."""
        suffix = key.split("/", 1)[1] if "/" in key else key
        for known in (*sorted(allow_undefined), *sorted(self._reqs)):
            if key in known or known.endswith(suffix):
                return f' (typo of "{known}"?)'
        return ""

    def intersects(self, incoming: Requirements) -> str | None:
        """``Intersects``: None if every key both define has a common value (both sides
        excluding-only counts as common), else the errors joined as multierr does."""
        errors = []
        for key in sorted(self._reqs.keys() & incoming.keys()):
            existing, new = self._reqs[key], incoming[key]
            if existing.has_intersection(new):
                continue
            excluding = (NOT_IN, DOES_NOT_EXIST)
            if new.operator in excluding and existing.operator in excluding:
                continue
            errors.append(f"key {key}, {new} not in {existing}")
        return "; ".join(errors) or None

    def labels(self) -> dict[str, str]:
        """``Labels``: one value per key that may be put on a node (not restricted)."""
        out = {}
        for key, req in self._reqs.items():
            if not _is_restricted_node_label(key) and (value := req.any_value()):
                out[key] = value
        return out

    def node_selector_requirements(self) -> list[dict[str, Any]]:
        """All requirements as NodeClaim ``spec.requirements`` entries, sorted by key."""
        return [
            e for key in sorted(self._reqs) for e in self._reqs[key].node_selector_requirements()
        ]

    def __str__(self) -> str:
        """``String``: sorted, the restricted hostname key left out, ", "-joined."""
        return ", ".join(sorted(str(r) for k, r in self._reqs.items() if k != HOSTNAME_LABEL))

    def __repr__(self) -> str:
        return f"Requirements({self})"


def from_node_selector(expressions: Iterable[Mapping[str, Any]]) -> Requirements:
    """Requirements from ``matchExpressions`` or NodePool ``requirements`` (prevalidated)."""
    return Requirements(
        Requirement.new(
            str(e["key"]), str(e["operator"]), e.get("values") or (), e.get("minValues")
        )
        for e in expressions
    )


def from_labels(labels: Mapping[str, str]) -> Requirements:
    """``NewLabelRequirements``: key In [value] for each label."""
    return Requirements(Requirement.new(k, IN, [v]) for k, v in labels.items())


def nodeclass_label_key(node_class_ref: Mapping[str, Any]) -> str:
    """``NodeClassLabelKey``: ``<group>/<lowercased kind>``, e.g.
    ``karpenter.k8s.aws/ec2nodeclass``."""
    return f"{node_class_ref.get('group', '')}/{str(node_class_ref.get('kind', '')).lower()}"


def nodepool_labels(nodepool: Mapping[str, Any]) -> dict[str, str]:
    """The labels every NodeClaim of the pool gets (``NewNodeClaimTemplate``): template
    labels plus ``karpenter.sh/nodepool`` and the node class label."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    ref = (template.get("spec") or {}).get("nodeClassRef") or {}
    return {
        **((template.get("metadata") or {}).get("labels") or {}),
        NODEPOOL_LABEL: nodepool["metadata"]["name"],
        nodeclass_label_key(ref): str(ref.get("name", "")),
    }


def nodepool_requirements(nodepool: Mapping[str, Any]) -> Requirements:
    """A NodePool's template requirements intersected with its labels (`nodepool_labels`)."""
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    return from_node_selector(spec.get("requirements") or ()).add(
        from_labels(nodepool_labels(nodepool))
    )


def _node_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}


def required_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's required ``nodeSelectorTerms`` (ORed)."""
    required = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or ())


def preferred_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's preferred terms, heaviest first (stable)."""
    preferred = _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return sorted(preferred, key=lambda t: -int(t.get("weight", 0)))


def pod_requirements(
    pod: Mapping[str, Any], *, skip_required: int = 0, skip_preferred: int = 0
) -> Requirements:
    """``NewPodRequirements``: ``nodeSelector`` plus the heaviest preferred term plus the
    first required term, after dropping ``skip_*`` terms as preference relaxation does
    (``preferences.go``: it drops required terms while more than one remains, then
    preferred terms heaviest first)."""
    reqs = from_labels((pod.get("spec") or {}).get("nodeSelector") or {})
    preferred = preferred_terms(pod)[skip_preferred:]
    if preferred:
        reqs = reqs.add(
            from_node_selector((preferred[0].get("preference") or {}).get("matchExpressions") or ())
        )
    required = required_terms(pod)
    if required:
        term = required[min(skip_required, len(required) - 1)]
        reqs = reqs.add(from_node_selector(term.get("matchExpressions") or ()))
    return reqs


def _label_domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def _is_restricted_node_label(key: str) -> bool:
    """``IsRestrictedNodeLabel``: well known, or in a restricted domain (not excepted)."""
    if key in WELL_KNOWN_LABELS:
        return True
    domain = _label_domain(key)
    if any(domain.endswith(exception) for exception in _DOMAIN_EXCEPTIONS):
        return False
    return any(domain.endswith(d) for d in _RESTRICTED_DOMAINS) or key == HOSTNAME_LABEL


def is_restricted_label(key: str) -> str | None:
    """``IsRestrictedLabel``: why a pod or NodePool may not use ``key``, or None."""
    if key in WELL_KNOWN_LABELS or not _is_restricted_node_label(key):
        return None
    return (
        f"label {key} is restricted; specify a well known label: [{' '.join(sorted(WELL_KNOWN_LABELS))}], "
        f"or a custom label that does not use a restricted domain: [{' '.join(sorted(_RESTRICTED_DOMAINS))}]"
    )


def _qualified_name_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX_RE.fullmatch(prefix)):
        return f"key {key} is not a qualified name, prefix part must be a DNS-1123 subdomain"
    if not name or len(name) > 63 or not _NAME_RE.fullmatch(name):
        return (
            f"key {key} is not a qualified name, name part must consist of alphanumeric characters"
        )
    return None


def validate_requirement(expr: Mapping[str, Any]) -> list[str]:
    """``ValidateRequirement`` for one node selector requirement: its problems."""
    key = _normalize(str(expr.get("key", "")))
    operator = str(expr.get("operator", ""))
    values: Sequence[str] = expr.get("values") or ()
    errors = []
    if operator not in _OPERATORS:
        errors.append(f"key {key} has an unsupported operator {operator}")
    if restricted := is_restricted_label(key):
        errors.append(restricted)
    if qualified := _qualified_name_error(key):
        errors.append(qualified)
    for value in values:
        if len(str(value)) > 63 or (value and not _NAME_RE.fullmatch(str(value))):
            errors.append(
                f"invalid value {value} for key {key}, a valid label must be 63 characters or less"
            )
    if operator == IN and not values:
        errors.append(f"key {key} with operator {operator} must have a value defined")
    bound = _int_or_none(str(values[0])) if len(values) == 1 else None
    if operator in (GT, LT) and (bound is None or bound < 0):
        errors.append(
            f"key {key} with operator {operator} must have a single positive integer value"
        )
    return errors


def validate_pod(pod: Mapping[str, Any]) -> str | None:
    """Why Karpenter ignores a pending pod (``Provisioner.Validate``, without PVCs), or
    None: an invalid or restricted key in ``nodeSelector`` or in any required or preferred
    node affinity term (``kubernetes.io/hostname``, undefined ``karpenter.sh/*`` and
    ``karpenter.k8s.aws/*`` keys), any ``matchFields``, or ``karpenter.sh/nodepool
    DoesNotExist`` in its requirements."""
    errors: list[str] = []
    for key, value in ((pod.get("spec") or {}).get("nodeSelector") or {}).items():
        errors += validate_requirement({"key": key, "operator": IN, "values": [value]})
    terms = [*required_terms(pod), *(t.get("preference") or {} for t in preferred_terms(pod))]
    for term in terms:
        if term.get("matchFields") is not None:
            errors.append("node selector term with matchFields is not supported")
        for expr in term.get("matchExpressions") or ():
            errors += validate_requirement(expr)
    if not errors:
        nodepool = pod_requirements(pod).get(NODEPOOL_LABEL)
        if nodepool is not None and nodepool.operator == DOES_NOT_EXIST:
            errors.append(
                f"configured to not run on a Karpenter provisioned node via the {NODEPOOL_LABEL} DoesNotExist requirement"
            )
    return "; ".join(errors) or None
