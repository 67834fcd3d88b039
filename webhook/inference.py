"""Infer a pod's GPU `Intent` from the fields GPU-sharing layers and Kubernetes define.

A purely computational module: no I/O, no awaits. The webhook calls `infer` on the pod of
an AdmissionReview (the JSON patch is `webhook.review`'s business); ``gpu-intent explain``
calls the same function on the pod templates of manifests. The GPU facts (model names,
memory variants, instance types) come from the `gpu_intent.catalog` loaded at start.

**Demand** (``gpus``), first source that gives one wins (every fact names its source):

0. The user's ``gpu-intent.io/gpus`` annotation, when it is a valid value.
1. **HAMi** (Project-HAMi/HAMi), when any container has ``nvidia.com/gpumem`` (MiB per
   vGPU), ``nvidia.com/gpumem-percentage`` (0-100) or ``nvidia.com/gpucores`` (percent):
   one vGPU is the share of one GPU it takes; ``nvidia.com/gpu: N`` >= 2 vGPUs are N whole
   GPUs, since HAMi puts each vGPU of a container on a different physical GPU.
2. **KAI-Scheduler** pod annotations ``gpu-fraction``, ``gpu-memory``,
   ``gpu-fraction-num-devices`` (N >= 2 devices: N whole GPUs).
3. **tensor-fusion** label ``tensor-fusion.ai/enabled`` or its request annotations
   (``gpu-count`` N >= 2: N whole GPUs).
4. **Whole devices**: the pod's ``nvidia.com/gpu`` request, else its ``amd.com/gpu``
   request (Kubernetes extended resources; AMD's device plugin, ROCm/k8s-device-plugin).

**DRA**: a pod with ``spec.resourceClaims`` asks through ResourceClaims, which the
webhook cannot read at admission (a template's claim does not exist yet). When the caller
passes the claims (``claims``: the controller, ``gpu-intent explain`` with the claims of
the same file), their GPUs (`webhook.dra.claim_demand`, summed over the claims) are the
demand, over sources 1-4 (a warning says so when those differ), with source tokens
``dra:<claim name>``; each claim's model is a model source after the node constraints.
Without them the intent comes from the other sources, with a warning per claim that it
could not be read and that the controller records the intent.

A sharing layer whose fields do not parse is skipped with a warning and the next source
is tried (HAMi ``gpucores: 150`` on ``nvidia.com/gpu: 1`` is still one GPU); only when
no source gives demand does the error stand (`IntentError`).

**Model**: every source that names a GPU is read, and the model is the first candidate
that all of them allow: the user's ``gpu-intent.io/model``; node constraints
(``nodeSelector``, then required node affinity ``In``) on a GPU-name label
(`MODEL_LABELS`), an instance type (`INSTANCE_TYPE_LABELS`, through the catalog's
per-provider tables and, for TKE, families) or an instance family (`FAMILY_LABELS`);
then HAMi ``nvidia.com/use-gputype`` and tensor-fusion ``gpu-model``. HAMi
``nvidia.com/nouse-gputype`` and node affinity ``NotIn`` exclude candidates. When sources
disagree, the earlier one in that list wins (a node the pod's constraints refuse can never
run it); when several candidates remain (an ``In`` list), the first listed that has the
GPU memory the pod states wins. Each such choice is a warning and a ``rule:`` source token.

**Pool**: the user's ``gpu-intent.io/pool``, ``karpenter.sh/nodepool`` in nodeSelector or
required affinity, then tensor-fusion's ``gpupool``; **gpu-memory**: the user's
``gpu-intent.io/gpu-memory``, else the sharing layer's. A part that does not parse (a model
that is not a label value, an unsubstituted ``${GPU_TYPE}``) is normalized or left out with
a warning; the rest of the intent stands.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Context, Decimal
from typing import Any, Final, NamedTuple, TypeGuard

from gpu_intent.catalog import Catalog, GpuMatch, active_catalog, normalize
from gpu_intent.intent import (
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPUS,
    ANNOTATION_MODEL,
    ANNOTATION_POOL,
    MAX_GPUS,
    MAX_MIB,
    Intent,
    IntentError,
    format_gpus,
    is_label_value,
    is_pool_name,
    parse_gpus,
)
from gpu_intent.quantity import to_mib
from webhook.demand import (
    GPU_RESOURCE,
    HAMI_NOUSE_GPUTYPE,
    HAMI_USE_GPUTYPE,
    MAX_WARNING,
    TF_GPU_MODEL,
    TF_GPUPOOL,
    Demand,
    as_mapping,
    brief,
    read_demand,
    short,
    show,
)
from webhook.dra import DEVICE_CLASSES, CanServe, ClaimSource, claim_demand, pod_claims

__all__ = [
    "FAMILY_LABELS",
    "INSTANCE_TYPE_LABELS",
    "MAX_EXPRESSIONS",
    "MAX_LIST_ENTRIES",
    "MAX_NAME_LENGTH",
    "MAX_WARNING",
    "MODEL_LABELS",
    "NODEPOOL_LABEL",
    "Budget",
    "DeadlineExceeded",
    "Inference",
    "Reason",
    "canonical_model",
    "infer",
    "infer_intent",
]

#: Node label keys whose value names the GPU model, in order of preference (REFERENCE §2:
#: Karpenter AWS, Azure, GCP and Alibaba providers, GKE, NVIDIA GPU Feature Discovery, the
#: plain-cluster ``accelerator`` convention; EKS Auto Mode's ``eks.amazonaws.com/
#: instance-gpu-name``, same values as Karpenter AWS (AWS EKS user guide, "Create a Node
#: Pool for EKS Auto Mode", supported labels); AMD's node labeller ``amd.com/
#: gpu.product-name`` and its legacy ``beta.`` key (ROCm/k8s-device-plugin)).
MODEL_LABELS: Final = (
    "karpenter.k8s.aws/instance-gpu-name",
    "eks.amazonaws.com/instance-gpu-name",
    "karpenter.azure.com/sku-gpu-name",
    "karpenter.k8s.gcp/instance-gpu-name",
    "karpenter.k8s.alicloud/instance-gpu-name",
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.product",
    "amd.com/gpu.product-name",
    "beta.amd.com/gpu.product-name",
    "accelerator",
)
#: Well-known instance type labels (kubernetes.io, "Well-Known Labels"): the catalog says
#: which GPUs each type has (TKE: by family, the part before the dot).
INSTANCE_TYPE_LABELS: Final = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
#: Instance family labels: Karpenter AWS, EKS Auto Mode, Karpenter TKE (REFERENCE §2).
FAMILY_LABELS: Final = (
    "karpenter.k8s.aws/instance-family",
    "eks.amazonaws.com/instance-family",
    "karpenter.k8s.tke/instance-family",
)
#: Karpenter core's NodePool label (kubernetes-sigs/karpenter).
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
#: Node label key -> (group, place in its group, kind): the order `_model_sources` reads
#: them in (GPU-name labels, instance types, families).
_MODEL_KEY_ORDER: Final = {
    key: (group, index, kind)
    for group, (keys, kind) in enumerate(
        ((MODEL_LABELS, "label"), (INSTANCE_TYPE_LABELS, "type"), (FAMILY_LABELS, "family"))
    )
    for index, key in enumerate(keys)
}

#: ``gpus`` is rounded up to this step, so a ``1/3`` fraction stays a short annotation.
GPU_STEP: Final = Decimal("0.000001")
_VENDOR_PREFIXES: Final = ("nvidia-", "tesla-", "amd-")
_INVALID_LABEL_CHARS: Final = re.compile(r"[^a-z0-9._-]+")
_PLACEHOLDER: Final = re.compile(r"\$\{|\{\{|\$\(|<|>")
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
#: `_round`'s arithmetic: 40 digits, whatever the caller's context.
_ROUNDING: Final = Context(prec=40)

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
#: Keys of the pod's node constraints inference reads: GPU-name labels, instance types
#: and families, and the NodePool label.
_CONSTRAINT_KEYS: Final = (*_MODEL_KEY_ORDER, NODEPOOL_LABEL)



class DeadlineExceeded(Exception):
    """A review spent more than its `Budget`: the caller answers without an intent.

    Attributes:
        stage: the step of `infer` that found the budget spent (``"demand"``, ``"model"``).
        spent: CPU seconds the review had used then.
    """

    def __init__(self, stage: str, spent: float) -> None:
        super().__init__(f"inference took over its budget ({spent * 1000:.0f} ms of CPU by {stage})")
        self.stage = stage
        self.spent = spent


class Budget:
    """CPU time one review may spend in `infer`, checked between its steps.

    Inference is linear in the pod with bounded lists (`MAX_LIST_ENTRIES`), so a review
    takes well under a millisecond; the budget is the backstop for what those bounds do
    not foresee, so one pod cannot hold the webhook's single event loop (every other
    review waits behind it, past the apiserver's ``timeoutSeconds``). ``clock`` defaults
    to the calling thread's CPU time (`time.thread_time`), so time the process spends
    preempted by others is not charged to the review.

    Args:
        seconds: the budget, > 0.
        clock: a monotonic clock in seconds (tests pass one they advance).

    Raises:
        ValueError: ``seconds`` is not > 0.
    """

    __slots__ = ("_clock", "_started", "seconds")

    def __init__(self, seconds: float, clock: Callable[[], float] = time.thread_time) -> None:
        if not seconds > 0:
            raise ValueError(f"a review budget must be > 0 seconds, got {seconds!r}")
        self.seconds = seconds
        self._clock = clock
        self._started = clock()

    def check(self, stage: str) -> None:
        """Raise `DeadlineExceeded` when more than ``seconds`` have passed since the
        budget was made; ``stage`` names the step just finished."""
        spent = self._clock() - self._started
        if spent > self.seconds:
            raise DeadlineExceeded(stage, spent)


@dataclass(frozen=True, slots=True)
class Reason:
    """Why one part of the intent is what it is, for ``gpu-intent explain``.

    Attributes:
        part: ``gpus``, ``model``, ``model-memory``, ``gpu-memory`` or ``pool`` (the
            annotation name under ``gpu-intent.io/``).
        value: the annotation value written, ``""`` when the part is left out.
        source: the source tokens behind it, comma-joined (``""`` when none).
        why: one sentence of reasoning, naming the fact's origin.
    """

    part: str
    value: str
    source: str
    why: str


@dataclass(frozen=True, slots=True)
class Inference:
    """The outcome of `infer`.

    Attributes:
        intent: the intent, or None for a pod that asks for no GPU.
        reasons: why each part is what it is (also for parts left out).
        warnings: what a user should know (a part left out or normalized, an ambiguity
            resolved by rule), each at most `MAX_WARNING` characters.
    """

    intent: Intent | None
    reasons: tuple[Reason, ...] = ()
    warnings: tuple[str, ...] = ()


def canonical_model(raw: str, catalog: Catalog | None = None) -> str | None:
    """Canonical lowercase GPU model for a label or annotation value, or None if empty.

    Through the catalog (`gpu_intent.catalog.Catalog.lookup`): ``"NVIDIA-A100-SXM4-80GB"``
    -> ``"a100"``, ``"Tesla-T4"`` / ``"nvidia-tesla-t4"`` / ``"T4"`` -> ``"t4"``. An
    unknown name flows through lowercased, with leading ``nvidia-`` / ``tesla-`` stripped
    (``"NVIDIA-RTX-5000"`` -> ``"rtx-5000"``); it need not be a valid label value here
    (`infer` checks that).
    """
    text = raw.strip().lower()
    if not text:
        return None
    found = (catalog or active_catalog()).lookup(text)
    if found is not None:
        return found.model
    for prefix in _VENDOR_PREFIXES[:2]:
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
    return text


# --- node constraints ------------------------------------------------------------------


@dataclass(slots=True)
class _Constraints:
    """The pod's hard node constraints: nodeSelector and required node affinity."""

    selector: dict[str, str] = field(default_factory=dict)
    in_values: dict[str, list[str]] = field(default_factory=dict)
    not_in: dict[str, list[str]] = field(default_factory=dict)


def _is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, a JSON object (a dict) first: the ABC check is a
    Python-level call."""
    return type(value) is dict or isinstance(value, Mapping)


def _bounded(
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
    """The entries of a comma list annotation, `_bounded`: the split itself stops after
    `MAX_LIST_ENTRIES` entries, so a list of a million names costs what 128 do."""
    return _bounded(raw.split(",", MAX_LIST_ENTRIES), where, warnings)


def _constraints(spec: Mapping[str, Any], warnings: list[str]) -> _Constraints:
    """``spec.nodeSelector`` and the ``In``/``NotIn`` expressions of ``spec.affinity.
    nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``
    (values of a key in term order), for the keys inference reads (`_CONSTRAINT_KEYS`).

    Bounded: at most `MAX_EXPRESSIONS` expressions (an empty term counts as one) and
    `MAX_LIST_ENTRIES` values per key are read, with a warning for the rest; the selector
    is looked up by those keys, not walked. A malformed part is skipped with a warning.
    """
    out = _Constraints()
    selector = spec.get("nodeSelector")
    if _is_mapping(selector):
        for key in _CONSTRAINT_KEYS:
            value = selector.get(key)
            if isinstance(value, str) and (text := value.strip()):
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


def _read_expression(expr: object, out: _Constraints, warnings: list[str]) -> None:
    """Add one ``matchExpressions`` item to ``out`` when it is an ``In`` or ``NotIn`` on a
    key of `_CONSTRAINT_KEYS`, at most `MAX_LIST_ENTRIES` values per key in all."""
    if not _is_mapping(expr):
        return
    operator = expr.get("operator")
    target = out.in_values if operator == "In" else out.not_in if operator == "NotIn" else None
    key = expr.get("key")
    if target is None or key not in _CONSTRAINT_KEYS:
        return
    values = expr.get("values")
    if not isinstance(values, list):
        return
    held = target.setdefault(key, [])
    room = MAX_LIST_ENTRIES - len(held)
    if room <= 0:
        return
    held.extend(_bounded(values, f"nodeAffinity {key} {operator}", warnings, room))
    if not held:
        del target[key]


# --- the model ---------------------------------------------------------------------------


class _Named(NamedTuple):
    """One GPU a source names, with the value that named it (a NamedTuple: immutable, and
    cheaper to make than a frozen dataclass; a review makes several)."""

    match: GpuMatch
    raw: str
    per_instance: int | None = None  # GPUs per instance, when an instance type named it
    instance: str | None = None
    note: str = ""

    def agrees(self, other: _Named) -> bool:
        a, b = self.match, other.match
        return (
            a.model == b.model
            and (a.memory_mib is None or b.memory_mib is None or a.memory_mib == b.memory_mib)
            and (a.mig is None or b.mig is None or a.mig == b.mig)
        )

    def merged(self, other: _Named) -> _Named:
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
class _ModelSource:
    token: str
    names: list[_Named]


def _as_written(raw: str, where: str, warnings: list[str]) -> _Named | None:
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
    return _Named(GpuMatch(text, None, "as written"), raw)


def _name(raw: str, where: str, catalog: Catalog, warnings: list[str]) -> _Named | None:
    found = catalog.lookup(raw)
    if found is not None:
        return _Named(found, raw)
    return _as_written(raw, where, warnings)


def _instance(raw: str, catalog: Catalog, family: bool) -> _Named | None:
    found = catalog.family(raw) if family else catalog.instance_type(raw)
    if found is None:
        return None
    kind = "family" if found.count is None else "instance type"
    match = GpuMatch(found.gpu.model, found.gpu, kind)
    note = f"catalog {found.provider} {kind} {found.name}"
    return _Named(match, raw, found.count, found.name, note)


def _unique(names: Sequence[_Named]) -> list[_Named]:
    """``names`` without repeats of a GPU and GPUs per instance, the first kept, in order
    (one dict pass: linear in the list)."""
    out: dict[tuple[GpuMatch, int | None], _Named] = {}
    for n in names:
        out.setdefault((n.match, n.per_instance), n)
    return list(out.values())


def _model_sources(
    user: str | None,
    constraints: _Constraints,
    annotations: Mapping[str, Any],
    catalog: Catalog,
    warnings: list[str],
    dra: Sequence[tuple[str, _Named]] = (),
) -> list[_ModelSource]:
    """Every source naming GPUs, in precedence order (see the module docstring); ``dra``
    the models DRA claims name, as ``(token, name)``, read after the node constraints."""
    sources: list[_ModelSource] = []

    def add(token: str, raws: list[str], kind: str = "label") -> None:
        if kind == "label":
            found = [_name(r, token, catalog, warnings) for r in raws]
        else:
            found = [_instance(r, catalog, family=kind == "family") for r in raws]
        names = [n for n in found if n is not None]
        if names:
            sources.append(_ModelSource(token, _unique(names)))

    if user is not None:
        add(f"user:{ANNOTATION_MODEL}", _bounded([user], ANNOTATION_MODEL, warnings))
    # Label, then instance type, then family keys; in each, nodeSelector before affinity,
    # keys in their tuple's order. Only the pod's own keys are looked up (usually 0-3).
    found: list[tuple[tuple[int, int, int], str, str, list[str]]] = []
    for key, value in constraints.selector.items():  # values are non-empty strings
        order = _MODEL_KEY_ORDER.get(key)
        if order is not None:
            found.append(((order[0], 0, order[1]), f"nodeSelector:{key}", order[2], [value]))
    for key, values in constraints.in_values.items():  # values are non-empty lists
        order = _MODEL_KEY_ORDER.get(key)
        if order is not None:
            found.append(((order[0], 1, order[1]), f"nodeAffinity:{key}", order[2], values))
    if len(found) > 1:
        found.sort(key=lambda f: f[0])
    for _, token, kind, raws in found:
        add(token, raws, kind)
    for token, named in dra:
        sources.append(_ModelSource(token, [named]))
    for key, token in ((HAMI_USE_GPUTYPE, "hami"), (TF_GPU_MODEL, "tensor-fusion")):
        raw = annotations.get(key)
        if isinstance(raw, str):
            add(f"{token}:{key}", _comma_list(raw, key, warnings))
    return sources


def _denied(name: _Named, deny: list[tuple[str, str]]) -> str | None:
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


def _model_deny(
    constraints: _Constraints, annotations: Mapping[str, Any], catalog: Catalog,
    warnings: list[str],
) -> list[tuple[str, str]]:
    """The exclusions, ``(token, spelling)``, each spelling once (its first token), at most
    `MAX_LIST_ENTRIES` in all (a warning for the rest): HAMi ``nouse-gputype`` entries,
    then affinity ``NotIn`` values on GPU-name labels."""
    deny: dict[str, str] = {}  # spelling -> token
    raw = annotations.get(HAMI_NOUSE_GPUTYPE)
    if isinstance(raw, str):
        for entry in _comma_list(raw, HAMI_NOUSE_GPUTYPE, warnings):
            deny.setdefault(normalize(entry), f"hami:{HAMI_NOUSE_GPUTYPE}")
    for key in MODEL_LABELS if constraints.not_in else ():
        for value in constraints.not_in.get(key, []):
            found = catalog.lookup(value)
            deny.setdefault(found.gpu.id if found and found.gpu else
                            (found.model if found else normalize(value)), f"nodeAffinity:{key}")  # fmt: skip
    if len(deny) > MAX_LIST_ENTRIES:
        warnings.append(short(
            f"model: read the first {MAX_LIST_ENTRIES} of {len(deny)} exclusions; the rest ignored"
        ))
    return [(token, entry) for entry, token in list(deny.items())[:MAX_LIST_ENTRIES]]


@dataclass(slots=True)
class _ModelChoice:
    named: _Named | None
    tokens: list[str]
    why: str


def _choose_model(
    sources: list[_ModelSource],
    deny: list[tuple[str, str]],
    memory_mib: int | None,
    warnings: list[str],
    explain: bool,
) -> _ModelChoice:
    """The model all sources allow, by the rule in the module docstring (``why`` empty for
    a chosen model unless ``explain``)."""
    if not sources:
        why = "no source names a GPU model"
        if deny:
            why += f"; {deny[0][0]} only excludes some"
        return _ModelChoice(None, [], why)
    primary = sources[0]
    tokens = [primary.token]
    candidates = list(primary.names)
    verdicts = [(n, _denied(n, deny)) for n in candidates] if deny else []
    refused = next((token for _, token in verdicts if token), None)
    if refused is not None:
        tokens.append(refused)
        candidates = [n for n, token in verdicts if token is None]
        if not candidates:
            warnings.append(short(f"model: left out, {brief(tokens[-1])} excludes every value of {brief(primary.token)}"))
            return _ModelChoice(None, tokens, f"{primary.token} names only excluded models")
    for other in sources[1:]:
        by_model: dict[str, list[_Named]] = {}
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
        tokens.append("rule:model-earlier-source")
    distinct = {(c.match.model, c.match.memory_mib) for c in candidates}
    if len(distinct) > 1:  # an ambiguity: resolved by rule, said in a warning
        listed = ",".join(dict.fromkeys(c.raw for c in candidates))
        fit = [c for c in candidates
               if memory_mib and (c.match.memory_mib is None or c.match.memory_mib >= memory_mib)]
        if fit and len(fit) < len(candidates):
            candidates = fit
            rule, said = "rule:model-memory-fits", f"first with {memory_mib} MiB"
        else:
            rule, said = "rule:model-first-listed", "first listed"
        warnings.append(short(
            f"model: chose {candidates[0].raw} of {listed} ({said} in {brief(primary.token)})"
        ))
        tokens.append(rule)
    chosen = candidates[0]
    why = ""
    if explain:
        why = chosen.describe() + (f" ({chosen.note})" if chosen.note else "")
        agreed = [t for t in tokens[1:] if t and not t.startswith("rule:")]
        if agreed:
            why += f"; also named by {', '.join(agreed)}"
    return _ModelChoice(chosen, list(dict.fromkeys(t for t in tokens if t)), why)


# --- user annotations ----------------------------------------------------------------------


def _user(annotations: Mapping[str, Any], key: str, warnings: list[str]) -> str | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        warnings.append(short(f"{key}: {show(raw)} is not a value; ignored"))
        return None
    return raw.strip()


def _user_gpus(annotations: Mapping[str, Any], warnings: list[str]) -> Decimal | None:
    raw = _user(annotations, ANNOTATION_GPUS, warnings)
    if raw is None:
        return None
    try:
        return parse_gpus(raw)
    except IntentError:
        warnings.append(short(f"{ANNOTATION_GPUS}: {show(raw)} is not a GPU count in (0, {MAX_GPUS}]; ignored"))
        return None


def _user_memory(annotations: Mapping[str, Any], warnings: list[str]) -> int | None:
    raw = _user(annotations, ANNOTATION_GPU_MEMORY, warnings)
    if raw is None:
        return None
    if raw.isascii() and raw.isdigit() and len(raw) <= 12 and int(raw) > 0:
        return int(raw)
    try:
        mib = to_mib(raw, ANNOTATION_GPU_MEMORY)  # a byte quantity such as 20Gi
    except IntentError:
        mib = 0
    if not 0 < mib <= MAX_MIB or not any(c.isalpha() for c in raw):
        warnings.append(short(f"{ANNOTATION_GPU_MEMORY}: {show(raw)} is not a MiB count; ignored"))
        return None
    warnings.append(short(f"{ANNOTATION_GPU_MEMORY}: {show(raw)} read as {mib} MiB"))
    return mib


# --- the intent --------------------------------------------------------------------------


def _pool(
    user: str | None, constraints: _Constraints, annotations: Mapping[str, Any], warnings: list[str]
) -> tuple[str | None, list[str], str]:
    """``(pool, source tokens, why)``: user, then nodeSelector/affinity on
    ``karpenter.sh/nodepool``, then tensor-fusion's gpupool; invalid names are left out."""
    options: list[tuple[str, list[str]]] = []
    if user is not None:
        options.append((f"user:{ANNOTATION_POOL}", [user]))
    if NODEPOOL_LABEL in constraints.selector:
        options.append((f"nodeSelector:{NODEPOOL_LABEL}", [constraints.selector[NODEPOOL_LABEL]]))
    if NODEPOOL_LABEL in constraints.in_values:
        options.append((f"nodeAffinity:{NODEPOOL_LABEL}", constraints.in_values[NODEPOOL_LABEL]))
    for key in TF_GPUPOOL:
        raw = annotations.get(key)
        if isinstance(raw, str) and raw.strip():
            options.append((f"tensor-fusion:{key}", [raw.strip()]))
            break
    valid: list[tuple[str, list[str]]] = []
    for token, values in options:
        good = [v for v in values if is_pool_name(v)]
        for bad in (v for v in values if not is_pool_name(v)):
            warnings.append(short(f"pool: {token} {show(bad)} is not a NodePool name; left out"))
        if good:
            valid.append((token, good))
    if not valid:
        return None, [], "no source names a NodePool"
    token, values = valid[0]
    tokens = [token]
    pool = values[0]
    if len(values) > 1:
        warnings.append(short(f"pool: chose {pool} of {','.join(values)} (first listed in {brief(token)})"))
        tokens.append("rule:pool-first-listed")
    for other, others in valid[1:]:
        if pool in others:
            tokens.append(other)
        else:
            warnings.append(short(f"pool: kept {pool} ({brief(token)}), not {others[0]} ({brief(other)})"))
            tokens.append("rule:pool-earlier-source")
    return pool, tokens, f"{token} names NodePool {pool}"


def _dra(
    pod: Mapping[str, Any],
    claims: Sequence[ClaimSource] | None,
    catalog: Catalog,
    warnings: list[str],
    device_classes: Mapping[str, tuple[str, str]] = DEVICE_CLASSES,
    can_serve: CanServe | None = None,
) -> tuple[Demand | None, list[tuple[str, _Named]]]:
    """The GPUs the pod's DRA claims ask for (`webhook.dra.claim_demand`, summed) and the
    models they name, as ``(token, name)``; ``(None, [])`` for a pod without claims, or
    whose claims ask for no GPU or are not given (a warning per claim not given)."""
    entries = pod_claims(pod)
    if not entries:
        return None, []
    given = {c.entry: c for c in claims or ()}
    demands = []
    for entry in entries:
        source = given.get(entry.entry)
        if source is None:
            ref = entry.claim or f"from template {entry.template}"
            warnings.append(short(
                f"dra: claim {ref} could not be read; the controller records the intent from it"
            ))
            continue
        found = claim_demand(
            source, catalog=catalog, device_classes=device_classes, can_serve=can_serve
        )
        if found is not None:
            demands.append(found)
            warnings.extend(found.warnings)
    if not demands:
        return None, []
    memories = [(d.gpu_memory_mib, f"dra:{d.name}") for d in demands if d.gpu_memory_mib]
    memory = max(memories) if memories else None
    demand = Demand(
        gpus=Decimal(sum(d.gpus for d in demands)),
        source=tuple(dict.fromkeys(f"dra:{d.name}" for d in demands)),
        why="DRA " + "; ".join(d.why for d in demands),
        gpu_memory_mib=memory[0] if memory else None,
        memory_source=memory[1] if memory else None,
        vendor=demands[0].vendor,
    )
    named = [
        (f"dra:{d.name}", _Named(
            GpuMatch(d.model, catalog.gpus.get(d.gpu_id) if d.gpu_id else None, "dra"),
            f"claim {d.name}",
        ))
        for d in demands if d.model is not None
    ]  # fmt: skip
    return demand, named


def _unbounded(stage: str) -> None:
    """The budget check of an `infer` without a budget: nothing to check."""


def _round(gpus: Decimal) -> Decimal:
    rounded = gpus.quantize(GPU_STEP, rounding=ROUND_CEILING, context=_ROUNDING)
    return gpus if rounded == gpus else rounded  # keep "0.5" as 0.5


def infer(
    pod: Mapping[str, Any],
    catalog: Catalog | None = None,
    *,
    reasons: bool = True,
    claims: Sequence[ClaimSource] | None = None,
    device_classes: Mapping[str, tuple[str, str]] = DEVICE_CLASSES,
    can_serve: CanServe | None = None,
    budget: Budget | None = None,
) -> Inference:
    """Infer the GPU intent of ``pod``, a Pod as a JSON object (AdmissionReview
    ``request.object``, or a pod template with ``metadata`` and ``spec``), with the
    reasoning behind each part and the warnings a user should see.

    ``catalog`` is the GPU catalog (default: `gpu_intent.catalog.active_catalog`, loaded
    once per process). The result's intent is None when the pod asks for no GPU (a GPU
    node selector alone is not demand); its ``gpus`` is GPUs in total (fractional only for
    a share of one device or a MIG slice; a request spread over N >= 2 devices is N whole
    GPUs), ``gpu_memory_mib`` MiB per GPU the pod asks for, ``model_memory_mib`` MiB per
    GPU of the variant it names, ``model`` canonical, ``pool`` a NodePool name, and
    ``source`` the ``<where>:<key>`` tokens used, plus ``rule:<part>-<rule>`` for each
    ambiguity resolved by rule. The module docstring has the rules and their sources.

    ``reasons`` False skips writing the reasoning (the result's ``reasons`` is empty):
    the webhook sends the intent and the warnings, never the reasons, and leaving their
    text out saves about a tenth of a review. The intent and warnings are the same.

    ``claims`` are the pod's DRA claims resolved to their specs (`webhook.dra.ClaimSource`,
    matched to ``spec.resourceClaims[]`` by entry name), None when the caller cannot read
    them (the webhook): see "DRA" in the module docstring. ``device_classes`` and
    ``can_serve`` go to `webhook.dra.claim_demand` (extra GPU device classes; which
    ``(model, vendor)`` the cluster can make nodes for).

    The work is linear in the pod and bounded: lists are read up to `MAX_LIST_ENTRIES`
    entries, `MAX_EXPRESSIONS` affinity expressions and `MAX_CONTAINERS` containers, each
    cut said in a warning. ``budget`` (the webhook's) is checked after each step.

    Raises:
        DeadlineExceeded: ``budget`` was spent before inference finished.
        IntentError: the pod or its containers are not objects/lists, or it asks for GPUs
            through fields none of which parse (``gpu-fraction: "abc"`` alone, a GPU count
            over `MAX_GPUS`), or its ``spec.resourceClaims`` or a claim given is malformed;
            the message names the field.
    """
    if not isinstance(pod, Mapping):
        raise IntentError(f"pod must be an object, got {type(pod).__name__}")
    catalog = catalog or active_catalog()
    metadata = as_mapping(pod.get("metadata"), "metadata")
    annotations = as_mapping(metadata.get("annotations"), "metadata.annotations")
    labels = as_mapping(metadata.get("labels"), "metadata.labels")
    spec = as_mapping(pod.get("spec"), "spec")
    warnings: list[str] = []

    check = budget.check if budget is not None else _unbounded
    user_gpus = _user_gpus(annotations, warnings)
    demand, rules = read_demand(spec, labels, annotations, warnings, explain=reasons)
    check("demand")
    dra_demand, dra_models = _dra(pod, claims, catalog, warnings, device_classes, can_serve)
    check("dra")
    if dra_demand is not None:
        if demand is not None and demand.gpus != dra_demand.gpus:
            warnings.append(short(
                f"gpus: kept {format_gpus(dra_demand.gpus)} ({brief(dra_demand.source[0])}), "
                f"not {format_gpus(demand.gpus)} ({brief(demand.source[0])})"
            ))
        demand, rules = dra_demand, []
    if demand is None and user_gpus is None:
        return Inference(None, (), tuple(warnings))
    if user_gpus is not None:
        gpus, gpu_tokens = user_gpus, [f"user:{ANNOTATION_GPUS}"]
        gpus_why = f"your {ANNOTATION_GPUS} annotation"
        if demand is not None and demand.gpus != user_gpus:
            warnings.append(short(
                f"gpus: kept your {format_gpus(user_gpus)} ({ANNOTATION_GPUS}), "
                f"not {format_gpus(demand.gpus)} ({brief(demand.source[0])})"
            ))
            gpus_why += f" (over {format_gpus(demand.gpus)} from {demand.source[0]})"
        rules = []
    else:
        assert demand is not None
        gpus, gpu_tokens, gpus_why = demand.gpus, list(demand.source), demand.why
    if gpus > MAX_GPUS:
        raise IntentError(f"{format_gpus(gpus)} GPUs is more than {MAX_GPUS}")

    memory, memory_tokens, memory_why = None, [], "the pod states no GPU memory"
    user_memory = _user_memory(annotations, warnings)
    if user_memory is not None:
        memory, memory_tokens = user_memory, [f"user:{ANNOTATION_GPU_MEMORY}"]
        memory_why = f"your {ANNOTATION_GPU_MEMORY} annotation, MiB per GPU"
    elif demand is not None and demand.gpu_memory_mib is not None:
        memory = demand.gpu_memory_mib
        memory_tokens = [demand.memory_source] if demand.memory_source else []
        memory_why = "MiB per GPU the sharing layer asks for (per device, not times the count)"
        if dra_demand is not None:
            memory_why = "MiB per GPU the claim's selectors ask for: the least of the matching GPUs"

    constraints = _constraints(spec, warnings)
    sources = _model_sources(
        _user(annotations, ANNOTATION_MODEL, warnings), constraints, annotations, catalog, warnings,
        dra_models,
    )
    check("model sources")
    choice = _choose_model(
        sources, _model_deny(constraints, annotations, catalog, warnings), memory, warnings, reasons
    )
    check("model")
    named = choice.named
    model = named.match.model if named else None
    model_memory = named.match.memory_mib if named else None

    if named is not None and named.match.mig and named.match.mig_slices and demand is not None \
            and user_gpus is None and demand.source == (f"resources:{GPU_RESOURCE}",):  # fmt: skip
        total = named.match.gpu.mig_slices if named.match.gpu else None
        if total:
            gpus = gpus * named.match.mig_slices / total
            gpu_tokens.append(f"mig:{named.match.mig}")
            gpus_why += (
                f"; each is a MIG {named.match.mig} slice, {named.match.mig_slices}/{total} of a GPU"
                " (NVIDIA MIG user guide)"
            )
    if named is not None and named.per_instance is not None and gpus > named.per_instance:
        warnings.append(short(
            f"gpus: {format_gpus(gpus)} is more than the {named.per_instance} GPUs of {named.instance}"
        ))
    if demand is not None and named is not None and named.match.gpu is not None \
            and demand.vendor != named.match.gpu.vendor:  # fmt: skip
        warnings.append(short(
            f"model: {model} is a {named.match.gpu.vendor} GPU but the pod asks for "
            f"{demand.source[0].split(':', 1)[1]}"
        ))

    pool, pool_tokens, pool_why = _pool(
        _user(annotations, ANNOTATION_POOL, warnings), constraints, annotations, warnings
    )
    gpus = _round(gpus)
    source = [*gpu_tokens, *rules, *memory_tokens, *choice.tokens, *pool_tokens]
    intent = Intent(
        gpus=gpus,
        model=model,
        pool=pool,
        gpu_memory_mib=memory,
        source=tuple(dict.fromkeys(source)),  # unique, in order
        model_memory_mib=model_memory,
    )
    if not reasons:
        return Inference(intent, (), tuple(dict.fromkeys(warnings)))
    explained = (
        Reason("gpus", format_gpus(gpus), ",".join(gpu_tokens + rules), gpus_why),
        Reason("model", model or "", ",".join(choice.tokens), choice.why),
        Reason(
            "model-memory",
            str(model_memory) if model_memory else "",
            ",".join(t for t in choice.tokens if not t.startswith("rule:")) if model_memory else "",
            f"MiB per GPU of {named.match.gpu.id} in the GPU catalog"
            if named and named.match.gpu else "no GPU variant is named",
        ),
        Reason("gpu-memory", str(memory) if memory else "", ",".join(memory_tokens), memory_why),
        Reason("pool", pool or "", ",".join(pool_tokens), pool_why),
    )
    return Inference(intent, explained, tuple(dict.fromkeys(warnings)))


def infer_intent(pod: Mapping[str, Any], catalog: Catalog | None = None) -> Intent | None:
    """`infer`'s intent alone: None when ``pod`` asks for no GPU.

    Raises:
        IntentError: as `infer`.
    """
    return infer(pod, catalog, reasons=False).intent
