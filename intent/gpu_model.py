"""Which GPU model a pod's node constraints and sharing-layer annotations name.

A purely computational module: no I/O, no awaits. `intent.inference.infer` reads the
pod's hard node constraints (`read_constraints`: ``nodeSelector`` and required node
affinity on GPU-name labels, instance types, families and the NodePool), gathers every
source that names GPUs (`model_sources`), the exclusions (`model_deny`), and chooses the
model all of them allow (`choose_model`); the rules and their sources are in
`intent.inference`'s module docstring. Work is linear in the pod and bounded: at most
`MAX_LIST_ENTRIES` entries of a list, `MAX_EXPRESSIONS` affinity expressions and names of
`MAX_NAME_LENGTH` characters are read, each cut said in a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, NamedTuple, TypeGuard

from intent.catalog import Catalog, GpuMatch, default_catalog, normalize
from intent.contract import ANNOTATION_MODEL, Source, is_label_value
from intent.demand import HAMI_NOUSE_GPUTYPE, HAMI_USE_GPUTYPE, TF_GPU_MODEL, brief, short, show
from intent.keys import (
    AWS_GPU_NAME_LABEL,
    AWS_INSTANCE_FAMILY_LABEL,
    INSTANCE_TYPE_BETA_LABEL,
    INSTANCE_TYPE_LABEL,
    NVIDIA_GPU_PRODUCT_LABEL,
)
from intent.keys import NODEPOOL_LABEL as NODEPOOL_LABEL  # re-exported: Karpenter's NodePool label

__all__ = [
    "FAMILY_LABELS",
    "INSTANCE_TYPE_LABELS",
    "MAX_EXPRESSIONS",
    "MAX_LIST_ENTRIES",
    "MAX_NAME_LENGTH",
    "MODEL_LABELS",
    "NODEPOOL_LABEL",
    "ModelChoice",
    "Named",
    "NodeConstraints",
    "bounded",
    "canonical_model",
    "choose_model",
    "model_deny",
    "model_sources",
    "read_constraints",
]

#: Node label keys whose value names the GPU model, in order of preference (REFERENCE §2:
#: Karpenter AWS, Azure, GCP and Alibaba providers, GKE, NVIDIA GPU Feature Discovery, the
#: plain-cluster ``accelerator`` convention; EKS Auto Mode's ``eks.amazonaws.com/
#: instance-gpu-name``, same values as Karpenter AWS (AWS EKS user guide, "Create a Node
#: Pool for EKS Auto Mode", supported labels); AMD's node labeller ``amd.com/
#: gpu.product-name`` and its legacy ``beta.`` key (ROCm/k8s-device-plugin); Alibaba ACK's
#: ``aliyun.accelerator/nvidia_name`` (``Tesla-V100-SXM2-32GB``: help.aliyun.com ACK "enable
#: scheduling"); CoreWeave's ``gpu.nvidia.com/class`` (``A100_NVLINK_80GB``; CoreWeave node
#: types docs) and CKS's ``gpu.nvidia.com/model`` (docs/sources/ecosystem.md B6, B7)).
MODEL_LABELS: Final = (
    AWS_GPU_NAME_LABEL,
    "eks.amazonaws.com/instance-gpu-name",
    "karpenter.azure.com/sku-gpu-name",
    "karpenter.k8s.gcp/instance-gpu-name",
    "karpenter.k8s.alicloud/instance-gpu-name",
    "cloud.google.com/gke-accelerator",
    "aliyun.accelerator/nvidia_name",
    "gpu.nvidia.com/class",
    "gpu.nvidia.com/model",
    NVIDIA_GPU_PRODUCT_LABEL,
    "amd.com/gpu.product-name",
    "beta.amd.com/gpu.product-name",
    "accelerator",
)
#: Well-known instance type labels (kubernetes.io, "Well-Known Labels"): the catalog says
#: which GPUs each type has (TKE: by family, the part before the dot).
INSTANCE_TYPE_LABELS: Final = (INSTANCE_TYPE_LABEL, INSTANCE_TYPE_BETA_LABEL)
#: Instance family labels: Karpenter AWS, EKS Auto Mode, Karpenter TKE (REFERENCE §2),
#: Alibaba's ``node.kubernetes.io/instance-family`` (``ecs.gn7i``: AliyunContainerService/
#: karpenter-provider-alibabacloud pkg/apis/v1alpha1/labels.go).
FAMILY_LABELS: Final = (
    AWS_INSTANCE_FAMILY_LABEL,
    "eks.amazonaws.com/instance-family",
    "karpenter.k8s.tke/instance-family",
    "node.kubernetes.io/instance-family",
)
#: Node label key -> (group, place in its group, kind): the order `model_sources` reads
#: them in (GPU-name labels, instance types, families).
_MODEL_KEY_ORDER: Final = {
    key: (group, index, kind)
    for group, (keys, kind) in enumerate(
        ((MODEL_LABELS, "label"), (INSTANCE_TYPE_LABELS, "type"), (FAMILY_LABELS, "family"))
    )
    for index, key in enumerate(keys)
}

#: ``gpus`` is rounded up to this step, so a ``1/3`` fraction stays a short annotation.
_VENDOR_PREFIXES: Final = ("nvidia-", "tesla-", "amd-")
_INVALID_LABEL_CHARS: Final = re.compile(r"[^a-z0-9._-]+")
_PLACEHOLDER: Final = re.compile(r"\$\{|\{\{|\$\(|<|>")
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"

#: Most entries read from one list: a comma list annotation (``nvidia.com/use-gputype``)
#: or the ``In``/``NotIn`` values of one key over all required node selector terms. The
#: rest is ignored, with a warning. Real pods list a few GPU names and at most a few dozen
#: instance types; the bound keeps a review's work linear and small whatever the pod says.
MAX_LIST_ENTRIES: Final = 128
#: Most ``matchExpressions`` read over all required node selector terms (a warning says
#: when more were ignored).
MAX_EXPRESSIONS: Final = 256
#: Longest GPU or instance name read, in characters (a label value holds 63, a qualified
#: name 253); a longer entry is ignored with a warning.
MAX_NAME_LENGTH: Final = 253
#: The rules `choose_model` resolves an ambiguity by (source tokens ``rule:<name>``): an
#: earlier source wins a disagreement; of several candidates, the first with the GPU
#: memory the pod states, else the first listed.
RULE_MODEL_EARLIER: Final = Source("rule", "model-earlier-source")
RULE_MODEL_MEMORY_FITS: Final = Source("rule", "model-memory-fits")
RULE_MODEL_FIRST_LISTED: Final = Source("rule", "model-first-listed")
#: Keys of the pod's node constraints inference reads: GPU-name labels, instance types
#: and families, and the NodePool label.
_CONSTRAINT_KEYS: Final = (*_MODEL_KEY_ORDER, NODEPOOL_LABEL)
_READ_KEYS: Final = frozenset(_CONSTRAINT_KEYS)
#: The sources of those keys, in ``nodeSelector`` and in required node affinity, and of
#: the annotations naming or excluding models, made once (a review makes none).
SELECTOR_SOURCES: Final = {k: Source("nodeSelector", k) for k in _CONSTRAINT_KEYS}
AFFINITY_SOURCES: Final = {k: Source("nodeAffinity", k) for k in _CONSTRAINT_KEYS}
_USER_MODEL: Final = Source("user", ANNOTATION_MODEL)
_ANNOTATION_MODELS: Final = (
    (HAMI_USE_GPUTYPE, Source("hami", HAMI_USE_GPUTYPE)),
    (TF_GPU_MODEL, Source("tensor-fusion", TF_GPU_MODEL)),
)
_HAMI_NOUSE: Final = Source("hami", HAMI_NOUSE_GPUTYPE)


def canonical_model(raw: str, catalog: Catalog | None = None) -> str | None:
    """Canonical lowercase GPU model for a label or annotation value, or None if empty.

    Through ``catalog`` (`intent.catalog.Catalog.lookup`; default the built-in
    `intent.catalog.default_catalog`): ``"NVIDIA-A100-SXM4-80GB"``
    -> ``"a100"``, ``"Tesla-T4"`` / ``"nvidia-tesla-t4"`` / ``"T4"`` -> ``"t4"``. An
    unknown name flows through lowercased, with leading ``nvidia-`` / ``tesla-`` stripped
    (``"NVIDIA-RTX-5000"`` -> ``"rtx-5000"``); it need not be a valid label value here
    (`infer` checks that).
    """
    text = raw.strip().lower()
    if not text:
        return None
    found = (catalog or default_catalog()).lookup(text)
    if found is not None:
        return found.model
    for prefix in _VENDOR_PREFIXES[:2]:
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
    return text


# --- node constraints ------------------------------------------------------------------


@dataclass(slots=True)
class NodeConstraints:
    """The pod's hard node constraints: nodeSelector and required node affinity."""

    selector: dict[str, str] = field(default_factory=dict)
    in_values: dict[str, list[str]] = field(default_factory=dict)
    not_in: dict[str, list[str]] = field(default_factory=dict)


def _is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, a JSON object (a dict) first: the ABC check is a
    Python-level call."""
    return type(value) is dict or isinstance(value, Mapping)


def bounded(
    values: Sequence[object], where: str, warnings: list[str], limit: int = MAX_LIST_ENTRIES
) -> list[str]:
    """The first ``limit`` entries of ``values`` that are non-empty strings of at most
    `MAX_NAME_LENGTH` characters, stripped; a warning for the entries past ``limit`` and
    one for the first too-long entry. Looks at no more than ``limit`` entries."""
    if len(values) > limit:
        warnings.append(short(f"{where}: read the first {limit} of {len(values)} entries; the rest ignored"))
        values = values[:limit]
    out: list[str] = []
    too_long = 0
    for value in values:
        if isinstance(value, str) and (text := value.strip()):
            if len(text) <= MAX_NAME_LENGTH:
                out.append(text)
            else:
                too_long += 1
    if too_long:
        warnings.append(short(
            f"{where}: {too_long} entries longer than {MAX_NAME_LENGTH} characters ignored"
        ))
    return out


def _comma_list(raw: str, where: str, warnings: list[str]) -> list[str]:
    """The entries of a comma list annotation, `bounded`: the split itself stops after
    `MAX_LIST_ENTRIES` entries, so a list of a million names costs what 128 do."""
    return bounded(raw.split(",", MAX_LIST_ENTRIES), where, warnings)


def read_constraints(spec: Mapping[str, Any], warnings: list[str]) -> NodeConstraints:
    """``spec.nodeSelector`` and the ``In``/``NotIn`` expressions of ``spec.affinity.
    nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``
    (values of a key in term order), for the keys inference reads (`_CONSTRAINT_KEYS`).

    Bounded: at most `MAX_EXPRESSIONS` expressions (an empty term counts as one) and
    `MAX_LIST_ENTRIES` values per key are read, with a warning for the rest; the selector
    is looked up by those keys, not walked. A malformed part is skipped with a warning.
    """
    out = NodeConstraints()
    selector = spec.get("nodeSelector")
    if _is_mapping(selector):
        # the smaller side is walked: a selector's few keys, or the keys read of a huge one
        keys = selector if len(selector) <= len(_CONSTRAINT_KEYS) else _CONSTRAINT_KEYS
        for key in keys:
            if key in _READ_KEYS and isinstance(value := selector.get(key), str) \
                    and (text := value.strip()):  # fmt: skip
                out.selector[key] = text
    elif selector is not None:
        warnings.append(short("spec.nodeSelector is not an object; ignored"))
    affinity = spec.get("affinity")
    if affinity is None:
        return out
    node = affinity.get("nodeAffinity") if _is_mapping(affinity) else None
    required = node.get(_REQUIRED) if _is_mapping(node) else None
    if required is None:
        return out
    terms = required.get("nodeSelectorTerms") if _is_mapping(required) else None
    if not isinstance(terms, list):
        warnings.append(short(f"spec.affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms is not a list; ignored"))
        return out
    left = MAX_EXPRESSIONS
    for term in terms:
        exprs = term.get("matchExpressions") if _is_mapping(term) else None
        exprs = exprs if isinstance(exprs, list) and exprs else [None]
        if len(exprs) > left:  # past the bound: read what fits, then stop
            for expr in exprs[:left]:
                _read_expression(expr, out, warnings)
            warnings.append(short(
                f"nodeAffinity: read the first {MAX_EXPRESSIONS} match expressions; the rest ignored"
            ))
            break
        left -= len(exprs)
        for expr in exprs:
            _read_expression(expr, out, warnings)
    return out


def _read_expression(expr: object, out: NodeConstraints, warnings: list[str]) -> None:
    """Add one ``matchExpressions`` item to ``out`` when it is an ``In`` or ``NotIn`` on a
    key of `_CONSTRAINT_KEYS`, at most `MAX_LIST_ENTRIES` values per key in all."""
    if not _is_mapping(expr):
        return
    operator = expr.get("operator")
    target = out.in_values if operator == "In" else out.not_in if operator == "NotIn" else None
    key = expr.get("key")
    if target is None or not isinstance(key, str) or key not in _READ_KEYS:
        return
    values = expr.get("values")
    if not isinstance(values, list):
        return
    held = target.setdefault(key, [])
    room = MAX_LIST_ENTRIES - len(held)
    if room <= 0:
        return
    held.extend(bounded(values, f"nodeAffinity {key} {operator}", warnings, room))
    if not held:
        del target[key]


# --- the model ---------------------------------------------------------------------------


class Named(NamedTuple):
    """One GPU a source names, with the value that named it (a NamedTuple: immutable, and
    cheaper to make than a frozen dataclass; a review makes several)."""

    match: GpuMatch
    raw: str
    per_instance: int | None = None  # GPUs per instance, when an instance type named it
    instance: str | None = None
    note: str = ""

    def agrees(self, other: Named) -> bool:
        a, b = self.match, other.match
        return (
            a.model == b.model
            and (a.memory_mib is None or b.memory_mib is None or a.memory_mib == b.memory_mib)
            and (a.mig is None or b.mig is None or a.mig == b.mig)
        )

    def merged(self, other: Named) -> Named:
        """This name with what ``other`` knows and it does not (variant, MIG, GPUs per instance)."""
        match = self.match
        if match.gpu is None and other.match.gpu is not None:
            match = replace(match, gpu=other.match.gpu)
        if match.mig is None and other.match.mig is not None:
            match = replace(match, mig=other.match.mig, mig_slices=other.match.mig_slices)
        return self._replace(
            match=match,
            per_instance=self.per_instance if self.per_instance is not None else other.per_instance,
            instance=self.instance or other.instance,
        )

    def describe(self) -> str:
        gpu = self.match.gpu.describe() if self.match.gpu else f"{self.match.model} (no variant)"
        if self.match.mig:
            gpu += f", MIG slice {self.match.mig}"
        if self.instance:
            count = f"{self.per_instance} x " if self.per_instance else ""
            return f"{self.raw} has {count}{gpu}"
        return f"{self.raw} names {gpu}"


@dataclass(slots=True)
class ModelSource:
    """One source naming GPUs: where it was read and the GPUs it names, in order."""

    token: Source
    names: list[Named]


def _as_written(raw: str, where: Source, warnings: list[str]) -> Named | None:
    """A model the catalog does not know, as a label value: lowercase, vendor prefix
    stripped, characters a label value cannot hold replaced; None (and a warning) for a
    template placeholder or nothing usable."""
    if _PLACEHOLDER.search(raw):
        warnings.append(short(f"model: {where} {show(raw)} is an unsubstituted placeholder; left out"))
        return None
    text = normalize(raw)
    for prefix in _VENDOR_PREFIXES:
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
    text = _INVALID_LABEL_CHARS.sub("-", text)[:63].strip("-._")
    if not text or not is_label_value(text):
        warnings.append(short(f"model: {where} {show(raw)} is not a label value; left out"))
        return None
    warnings.append(short(f"model: {where} {show(raw)} is not in the GPU catalog; used as {text}"))
    return Named(GpuMatch(text, None, "as written"), raw)


def _name(raw: str, where: Source, catalog: Catalog, warnings: list[str]) -> Named | None:
    found = catalog.lookup(raw)
    if found is not None:
        return Named(found, raw)
    return _as_written(raw, where, warnings)


def _instance(raw: str, catalog: Catalog, family: bool) -> Named | None:
    found = catalog.family(raw) if family else catalog.instance_type(raw)
    if found is None:
        return None
    kind = "family" if found.count is None else "instance type"
    match = GpuMatch(found.gpu.model, found.gpu, kind)
    note = f"catalog {found.provider} {kind} {found.name}"
    return Named(match, raw, found.count, found.name, note)


def _unique(names: Sequence[Named]) -> list[Named]:
    """``names`` without repeats of a GPU and GPUs per instance, the first kept, in order
    (one dict pass: linear in the list)."""
    out: dict[tuple[GpuMatch, int | None], Named] = {}
    for n in names:
        out.setdefault((n.match, n.per_instance), n)
    return list(out.values())


def model_sources(
    user: str | None,
    constraints: NodeConstraints,
    annotations: Mapping[str, Any],
    catalog: Catalog,
    warnings: list[str],
    dra: Sequence[tuple[Source, Named]] = (),
    hints: Sequence[tuple[Source, str]] = (),
) -> list[ModelSource]:
    """Every source naming GPUs, in precedence order (see the module docstring); ``dra``
    the models DRA claims (and MIG resources) name, as ``(token, name)``, read after the
    node constraints; ``hints`` model names a workload states outside its pod template
    (``gpu-intent explain``: a RayService's ``accelerator_type``), read after those."""
    sources: list[ModelSource] = []

    def add(token: Source, raws: list[str], kind: str = "label") -> None:
        if kind == "label":
            found = [_name(r, token, catalog, warnings) for r in raws]
        else:
            found = [_instance(r, catalog, family=kind == "family") for r in raws]
        names = [n for n in found if n is not None]
        if names:
            sources.append(ModelSource(token, _unique(names)))

    if user is not None:
        add(_USER_MODEL, bounded([user], ANNOTATION_MODEL, warnings))
    # Label, then instance type, then family keys; in each, nodeSelector before affinity,
    # keys in their tuple's order. Only the pod's own keys are looked up (usually 0-3).
    found: list[tuple[tuple[int, int, int], Source, str, list[str]]] = []
    for key, value in constraints.selector.items():  # values are non-empty strings
        order = _MODEL_KEY_ORDER.get(key)
        if order is not None:
            found.append(((order[0], 0, order[1]), SELECTOR_SOURCES[key], order[2], [value]))
    for key, values in constraints.in_values.items():  # values are non-empty lists
        order = _MODEL_KEY_ORDER.get(key)
        if order is not None:
            found.append(((order[0], 1, order[1]), AFFINITY_SOURCES[key], order[2], values))
    if len(found) > 1:
        found.sort(key=lambda f: f[0])
    for _, token, kind, raws in found:
        add(token, raws, kind)
    for token, named in dra:
        sources.append(ModelSource(token, [named]))
    for token, hint in hints:
        add(token, bounded([hint], str(token), warnings))
    for key, source in _ANNOTATION_MODELS:
        raw = annotations.get(key)
        if isinstance(raw, str):
            add(source, _comma_list(raw, key, warnings))
    return sources


def _denied(name: Named, deny: list[tuple[Source, str]]) -> Source | None:
    """The token of the first exclusion that refuses ``name``, else None.

    HAMi matches ``nouse-gputype`` entries as case-insensitive substrings of the device
    name (HAMi docs/config.md, examples/nvidia/specify_card_type_not_use.yaml: "1080"
    also excludes a 1080 Ti); an affinity ``NotIn`` value excludes the model it names.
    """
    spellings = {name.match.model, normalize(name.raw)}
    if name.match.gpu is not None:
        spellings.add(name.match.gpu.id)
    for token, entry in deny:
        if any(entry in s for s in spellings):
            return token
    return None


def model_deny(
    constraints: NodeConstraints, annotations: Mapping[str, Any], catalog: Catalog,
    warnings: list[str],
) -> list[tuple[Source, str]]:
    """The exclusions, ``(source, spelling)``, each spelling once (its first token), at most
    `MAX_LIST_ENTRIES` in all (a warning for the rest): HAMi ``nouse-gputype`` entries,
    then affinity ``NotIn`` values on GPU-name labels."""
    deny: dict[str, Source] = {}  # spelling -> source
    raw = annotations.get(HAMI_NOUSE_GPUTYPE)
    if isinstance(raw, str):
        for entry in _comma_list(raw, HAMI_NOUSE_GPUTYPE, warnings):
            deny.setdefault(normalize(entry), _HAMI_NOUSE)
    for key in MODEL_LABELS if constraints.not_in else ():
        for value in constraints.not_in.get(key, []):
            found = catalog.lookup(value)
            deny.setdefault(found.gpu.id if found and found.gpu else
                            (found.model if found else normalize(value)), AFFINITY_SOURCES[key])  # fmt: skip
    if len(deny) > MAX_LIST_ENTRIES:
        warnings.append(short(
            f"model: read the first {MAX_LIST_ENTRIES} of {len(deny)} exclusions; the rest ignored"
        ))
    return [(token, entry) for entry, token in list(deny.items())[:MAX_LIST_ENTRIES]]


@dataclass(slots=True)
class ModelChoice:
    """The model `choose_model` chose (None: none), the sources behind it, in order, with
    the rules its choice needed, and why (empty unless explaining)."""

    named: Named | None
    tokens: list[Source]
    why: str


def choose_model(
    sources: list[ModelSource],
    deny: list[tuple[Source, str]],
    memory_mib: int | None,
    warnings: list[str],
    explain: bool,
) -> ModelChoice:
    """The model all sources allow, by the rule in the module docstring (``why`` empty for
    a chosen model unless ``explain``)."""
    if not sources:
        why = "no source names a GPU model"
        if deny:
            why += f"; {deny[0][0]} only excludes some"
        return ModelChoice(None, [], why)
    primary = sources[0]
    tokens = [primary.token]
    candidates = list(primary.names)
    verdicts = [(n, _denied(n, deny)) for n in candidates] if deny else []
    refused = next((token for _, token in verdicts if token is not None), None)
    if refused is not None:
        tokens.append(refused)
        candidates = [n for n, token in verdicts if token is None]
        if not candidates:
            warnings.append(short(f"model: left out, {brief(tokens[-1])} excludes every value of {brief(primary.token)}"))
            return ModelChoice(None, tokens, f"{primary.token} names only excluded models")
    for other in sources[1:]:
        by_model: dict[str, list[Named]] = {}
        for o in other.names:  # names agree only within a model: look those up, not all
            by_model.setdefault(o.match.model, []).append(o)
        narrowed = [c.merged(o) for c in candidates
                    for o in by_model.get(c.match.model, ()) if c.agrees(o)]  # fmt: skip
        if narrowed:
            candidates = _unique(narrowed)
            tokens.append(other.token)
            continue
        kept = candidates[0].match.model
        said = ",".join(n.match.model for n in other.names)
        warnings.append(short(f"model: kept {kept} ({brief(primary.token)}), not {said} ({brief(other.token)})"))
        tokens.append(RULE_MODEL_EARLIER)
    distinct = {(c.match.model, c.match.memory_mib) for c in candidates}
    if len(distinct) > 1:  # an ambiguity: resolved by rule, said in a warning
        listed = ",".join(dict.fromkeys(c.raw for c in candidates))
        fit = [c for c in candidates
               if memory_mib and (c.match.memory_mib is None or c.match.memory_mib >= memory_mib)]
        if fit and len(fit) < len(candidates):
            candidates = fit
            rule, said = RULE_MODEL_MEMORY_FITS, f"first with {memory_mib} MiB"
        else:
            rule, said = RULE_MODEL_FIRST_LISTED, "first listed"
        warnings.append(short(
            f"model: chose {candidates[0].raw} of {listed} ({said} in {brief(primary.token)})"
        ))
        tokens.append(rule)
    chosen = candidates[0]
    why = ""
    if explain:
        why = chosen.describe() + (f" ({chosen.note})" if chosen.note else "")
        agreed = [str(t) for t in tokens[1:] if t.where != "rule"]
        if agreed:
            why += f"; also named by {', '.join(agreed)}"
    return ModelChoice(chosen, list(dict.fromkeys(tokens)), why)
