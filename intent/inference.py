"""Infer a pod's GPU `Intent` from the fields GPU-sharing layers and Kubernetes define.

A purely computational module: no I/O, no awaits. The webhook calls `infer` on the pod of
an AdmissionReview (the JSON patch is `webhook.review`'s business); ``gpu-intent explain``
calls the same function on the pod templates of manifests. The GPU facts (model names,
memory variants, instance types) come from the `intent.catalog.Catalog` the caller passes
(the built-in one by default); nothing here reads a process-wide setting.

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
the same file), their GPUs (`intent.dra.claim_demand`, summed over the claims) are the
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

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal
from typing import Any, Final

from intent.catalog import Catalog, GpuMatch, default_catalog
from intent.contract import (
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPUS,
    ANNOTATION_MODEL,
    ANNOTATION_POOL,
    MAX_GPUS,
    MAX_MIB,
    Intent,
    IntentError,
    Source,
    format_gpus,
    is_pool_name,
    parse_gpus,
)
from intent.demand import (
    GPU_RESOURCE,
    MAX_WARNING,
    TF_GPUPOOL,
    Demand,
    as_mapping,
    brief,
    read_demand,
    short,
    show,
)
from intent.dra import DEVICE_CLASSES, CanServe, ClaimSource, claim_demand, pod_claims
from intent.gpu_model import (
    AFFINITY_SOURCES,
    NODEPOOL_LABEL,
    SELECTOR_SOURCES,
    ModelChoice,
    Named,
    NodeConstraints,
    canonical_model,
    choose_model,
    model_deny,
    model_sources,
    read_constraints,
)
from intent.quantity import to_mib

__all__ = [
    "MAX_WARNING",
    "Budget",
    "DeadlineExceeded",
    "Inference",
    "Reason",
    "canonical_model",
    "infer",
    "infer_intent",
]

#: ``gpus`` is rounded up to this step, so a ``1/3`` fraction stays a short annotation.
GPU_STEP: Final = Decimal("0.000001")
#: `_round`'s arithmetic: 40 digits, whatever the caller's context.
_ROUNDING: Final = Context(prec=40)
#: The sources and rules `infer` names itself (the sharing layers' are `intent.demand`'s).
_USER_GPUS: Final = Source("user", ANNOTATION_GPUS)
_USER_GPU_MEMORY: Final = Source("user", ANNOTATION_GPU_MEMORY)
_USER_POOL: Final = Source("user", ANNOTATION_POOL)
_TF_POOLS: Final = tuple((key, Source("tensor-fusion", key)) for key in TF_GPUPOOL)
_WHOLE_GPUS: Final = Source("resources", GPU_RESOURCE)
_RULE_POOL_FIRST_LISTED: Final = Source("rule", "pool-first-listed")
_RULE_POOL_EARLIER: Final = Source("rule", "pool-earlier-source")


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
    preempted by others is not charged to the review. Reading that clock is a system call
    (about a microsecond), so with the default clock `check` first reads the wall clock
    (`time.perf_counter`, no system call) and the CPU clock only once the wall time is past
    the budget: the CPU time spent is at most the wall time passed.

    Args:
        seconds: the budget, > 0.
        clock: a monotonic clock in seconds (tests pass one they advance).

    Raises:
        ValueError: ``seconds`` is not > 0.
    """

    __slots__ = ("_clock", "_started", "_wall_started", "seconds")

    def __init__(self, seconds: float, clock: Callable[[], float] = time.thread_time) -> None:
        if not seconds > 0:
            raise ValueError(f"a review budget must be > 0 seconds, got {seconds!r}")
        self.seconds = seconds
        self._clock = clock
        self._started = clock()
        # The wall clock bounds the default clock, CPU time (None for any other clock).
        self._wall_started = time.perf_counter() if clock is time.thread_time else None

    def check(self, stage: str) -> None:
        """Raise `DeadlineExceeded` when more than ``seconds`` of ``clock`` have passed
        since the budget was made; ``stage`` names the step just finished."""
        if self._wall_started is not None and time.perf_counter() - self._wall_started <= self.seconds:
            return
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
        source: the source tokens behind it, comma-joined (``""`` when none): the text
            ``gpu-intent explain`` prints.
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
    user: str | None, constraints: NodeConstraints, annotations: Mapping[str, Any], warnings: list[str]
) -> _Part:
    """The NodePool: the user's, then nodeSelector/affinity on ``karpenter.sh/nodepool``,
    then tensor-fusion's gpupool; invalid names are left out."""
    options: list[tuple[Source, list[str]]] = []
    if user is not None:
        options.append((_USER_POOL, [user]))
    if NODEPOOL_LABEL in constraints.selector:
        options.append((SELECTOR_SOURCES[NODEPOOL_LABEL], [constraints.selector[NODEPOOL_LABEL]]))
    if NODEPOOL_LABEL in constraints.in_values:
        options.append((AFFINITY_SOURCES[NODEPOOL_LABEL], constraints.in_values[NODEPOOL_LABEL]))
    for key, source in _TF_POOLS:
        raw = annotations.get(key)
        if isinstance(raw, str) and raw.strip():
            options.append((source, [raw.strip()]))
            break
    valid: list[tuple[Source, list[str]]] = []
    for token, values in options:
        good = [v for v in values if is_pool_name(v)]
        for bad in (v for v in values if not is_pool_name(v)):
            warnings.append(short(f"pool: {token} {show(bad)} is not a NodePool name; left out"))
        if good:
            valid.append((token, good))
    if not valid:
        return _Part(None, (), "no source names a NodePool")
    token, values = valid[0]
    tokens = [token]
    pool = values[0]
    if len(values) > 1:
        warnings.append(short(f"pool: chose {pool} of {','.join(values)} (first listed in {brief(token)})"))
        tokens.append(_RULE_POOL_FIRST_LISTED)
    for other, others in valid[1:]:
        if pool in others:
            tokens.append(other)
        else:
            warnings.append(short(f"pool: kept {pool} ({brief(token)}), not {others[0]} ({brief(other)})"))
            tokens.append(_RULE_POOL_EARLIER)
    return _Part(pool, tuple(tokens), f"{token} names NodePool {pool}")


def _dra(
    pod: Mapping[str, Any],
    claims: Sequence[ClaimSource] | None,
    catalog: Catalog,
    warnings: list[str],
    device_classes: Mapping[str, tuple[str, str]] = DEVICE_CLASSES,
    can_serve: CanServe | None = None,
) -> tuple[Demand | None, list[tuple[Source, Named]]]:
    """The GPUs the pod's DRA claims ask for (`intent.dra.claim_demand`, summed) and the
    models they name, as ``(source, name)``; ``(None, [])`` for a pod without claims, or
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
    memories = [(d.gpu_memory_mib, Source("dra", d.name)) for d in demands if d.gpu_memory_mib]
    memory = max(memories) if memories else None
    demand = Demand(
        gpus=Decimal(sum(d.gpus for d in demands)),
        source=tuple(dict.fromkeys(Source("dra", d.name) for d in demands)),
        why="DRA " + "; ".join(d.why for d in demands),
        gpu_memory_mib=memory[0] if memory else None,
        memory_source=memory[1] if memory else None,
        vendor=demands[0].vendor,
    )
    named = [
        (Source("dra", d.name), Named(
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
    model_hints: Sequence[tuple[Source, str]] = (),
) -> Inference:
    """Infer the GPU intent of ``pod``, a Pod as a JSON object (AdmissionReview
    ``request.object``, or a pod template with ``metadata`` and ``spec``), with the
    reasoning behind each part and the warnings a user should see.

    ``catalog`` is the GPU catalog (default: the built-in one,
    `intent.catalog.default_catalog`; a caller with ``--catalog FILE`` passes the one it
    loaded). The result's intent is None when the pod asks for no GPU (a GPU
    node selector alone is not demand); its ``gpus`` is GPUs in total (fractional only for
    a share of one device or a MIG slice; a request spread over N >= 2 devices is N whole
    GPUs), ``gpu_memory_mib`` MiB per GPU the pod asks for, ``model_memory_mib`` MiB per
    GPU of the variant it names, ``model`` canonical, ``pool`` a NodePool name, and
    ``source`` the `Source` of each part (``<where>:<key>`` in the annotation), plus
    ``rule:<part>-<rule>`` for each ambiguity resolved by rule. The module docstring has the rules and their sources.

    ``reasons`` False skips writing the reasoning (the result's ``reasons`` is empty):
    the webhook sends the intent and the warnings, never the reasons, and leaving their
    text out saves about a tenth of a review. The intent and warnings are the same.

    ``claims`` are the pod's DRA claims resolved to their specs (`intent.dra.ClaimSource`,
    matched to ``spec.resourceClaims[]`` by entry name), None when the caller cannot read
    them (the webhook): see "DRA" in the module docstring. ``device_classes`` and
    ``can_serve`` go to `intent.dra.claim_demand` (extra GPU device classes; which
    ``(model, vendor)`` the cluster can make nodes for). ``model_hints`` are models the
    workload names outside the pod (``gpu-intent explain``: a RayService's
    ``serveConfigV2`` ``accelerator_type``), a model source after the node constraints.

    The work is linear in the pod and bounded: lists are read up to `MAX_LIST_ENTRIES`
    entries, `MAX_EXPRESSIONS` affinity expressions and `MAX_CONTAINERS` containers, each
    cut said in a warning. ``budget`` (the webhook's) is checked after the demand is read
    and after the model is chosen (each step between is bounded).

    Raises:
        DeadlineExceeded: ``budget`` was spent before inference finished.
        IntentError: the pod or its containers are not objects/lists, or it asks for GPUs
            through fields none of which parse (``gpu-fraction: "abc"`` alone, a GPU count
            over `MAX_GPUS`), or its ``spec.resourceClaims`` or a claim given is malformed;
            the message names the field.
    """
    if not isinstance(pod, Mapping):
        raise IntentError(f"pod must be an object, got {type(pod).__name__}")
    catalog = catalog or default_catalog()
    metadata = as_mapping(pod.get("metadata"), "metadata")
    annotations = as_mapping(metadata.get("annotations"), "metadata.annotations")
    labels = as_mapping(metadata.get("labels"), "metadata.labels")
    spec = as_mapping(pod.get("spec"), "spec")
    warnings: list[str] = []

    check = budget.check if budget is not None else _unbounded
    user_gpus = _user_gpus(annotations, warnings)
    demand, rules = read_demand(spec, labels, annotations, warnings, explain=reasons, catalog=catalog)
    dra_demand, dra_models = _dra(pod, claims, catalog, warnings, device_classes, can_serve)
    check("demand")
    if dra_demand is not None:
        demand, rules = _prefer_dra(dra_demand, demand, warnings), []
    if demand is None and user_gpus is None:
        return Inference(None, (), tuple(warnings))
    gpus = _gpus(user_gpus, demand, rules, warnings)
    memory = _memory(annotations, demand, dra_demand is not None, warnings)
    constraints = read_constraints(spec, warnings)
    if demand is not None and demand.gpu_ids:
        dra_models = [*dra_models, *_requested_models(demand, catalog)]
    sources = model_sources(
        _user(annotations, ANNOTATION_MODEL, warnings), constraints, annotations, catalog, warnings,
        dra_models, model_hints,
    )
    choice = choose_model(
        sources, model_deny(constraints, annotations, catalog, warnings), memory.value, warnings, reasons
    )
    check("model")
    if user_gpus is None:
        gpus = _mig_share(gpus, choice.named, demand)
        gpus = _memory_share(gpus, choice.named, demand)
    _check_model(gpus.value, choice.named, demand, warnings)
    pool = _pool(_user(annotations, ANNOTATION_POOL, warnings), constraints, annotations, warnings)
    named = choice.named
    intent = Intent(
        gpus=_round(gpus.value),
        model=named.match.model if named else None,
        pool=pool.value,
        gpu_memory_mib=memory.value,
        # unique, in order
        source=tuple(dict.fromkeys([*gpus.tokens, *memory.tokens, *choice.tokens, *pool.tokens])),
        model_memory_mib=named.match.memory_mib if named else None,
    )
    explained = _reasons(intent, gpus, memory, choice, pool) if reasons else ()
    return Inference(intent, explained, tuple(dict.fromkeys(warnings)))


def _prefer_dra(dra_demand: Demand, demand: Demand | None, warnings: list[str]) -> Demand:
    """The DRA claims' demand wins over what the containers ask for (a warning when the
    two differ)."""
    if demand is not None and demand.gpus != dra_demand.gpus:
        warnings.append(
            short(
                f"gpus: kept {format_gpus(dra_demand.gpus)} ({brief(dra_demand.source[0])}), "
                f"not {format_gpus(demand.gpus)} ({brief(demand.source[0])})"
            )
        )
    return dra_demand


@dataclass(frozen=True, slots=True)
class _Part:
    """One part of the intent as `infer` decided it: its value, the sources behind it
    and why (empty unless explaining)."""

    value: Any
    tokens: tuple[Source, ...]
    why: str


def _gpus(
    user_gpus: Decimal | None, demand: Demand | None, rules: list[Source], warnings: list[str]
) -> _Part:
    """The GPUs: the user's ``gpus`` annotation over the demand sources (a warning when they
    differ), else the demand with the rule tokens its choice needed.

    Raises:
        IntentError: more than `MAX_GPUS`.
    """
    if user_gpus is not None:
        why = f"your {ANNOTATION_GPUS} annotation"
        if demand is not None and demand.gpus != user_gpus:
            warnings.append(short(
                f"gpus: kept your {format_gpus(user_gpus)} ({ANNOTATION_GPUS}), "
                f"not {format_gpus(demand.gpus)} ({brief(demand.source[0])})"
            ))
            why += f" (over {format_gpus(demand.gpus)} from {demand.source[0]})"
        part = _Part(user_gpus, (_USER_GPUS,), why)
    else:
        assert demand is not None
        part = _Part(demand.gpus, (*demand.source, *rules), demand.why)
    if part.value > MAX_GPUS:
        raise IntentError(f"{format_gpus(part.value)} GPUs is more than {MAX_GPUS}")
    return part


def _memory(
    annotations: Mapping[str, Any], demand: Demand | None, dra: bool, warnings: list[str]
) -> _Part:
    """MiB per GPU: the user's ``gpu-memory`` annotation, else the demand source's (``dra``:
    the demand is the pod's DRA claims)."""
    user_memory = _user_memory(annotations, warnings)
    if user_memory is not None:
        return _Part(user_memory, (_USER_GPU_MEMORY,),
                     f"your {ANNOTATION_GPU_MEMORY} annotation, MiB per GPU")  # fmt: skip
    if demand is not None and demand.gpu_memory_mib is not None:
        why = "MiB per GPU the claim's selectors ask for: the least of the matching GPUs" if dra \
            else "MiB per GPU the sharing layer asks for (per device, not times the count)"  # fmt: skip
        tokens = (demand.memory_source,) if demand.memory_source else ()
        return _Part(demand.gpu_memory_mib, tokens, why)
    return _Part(None, (), "the pod states no GPU memory")


def _mig_share(gpus: _Part, named: Named | None, demand: Demand | None) -> _Part:
    """Whole ``nvidia.com/gpu`` devices of a MIG slice the pod names (a MIG device plugin's
    ``nvidia.com/gpu`` under the single strategy) as the share of a GPU each slice is
    (NVIDIA MIG user guide: a ``1g.5gb`` slice is 1/7 of an A100)."""
    if named is None or not named.match.mig or not named.match.mig_slices or demand is None \
            or demand.source != (_WHOLE_GPUS,):  # fmt: skip
        return gpus
    total = named.match.gpu.mig_slices if named.match.gpu else None
    if not total:
        return gpus
    return _Part(
        gpus.value * named.match.mig_slices / total,
        (*gpus.tokens, Source("mig", named.match.mig)),
        gpus.why + f"; each is a MIG {named.match.mig} slice, {named.match.mig_slices}/{total} of"
        " a GPU (NVIDIA MIG user guide)",
    )


def _requested_models(demand: Demand, catalog: Catalog) -> list[tuple[Source, Named]]:
    """The GPU variants a request names itself (the parents of a MIG profile resource, all
    of one model), as one model source: a `Named` per variant, with the profile."""
    slices = int(demand.mig.split("g.", 1)[0]) if demand.mig else None
    token = demand.source[0]
    return [
        (token, Named(GpuMatch(catalog.gpus[i].model, catalog.gpus[i], "mig resource", demand.mig,
                               slices), token.key))
        for i in demand.gpu_ids if i in catalog.gpus
    ]  # fmt: skip


def _memory_share(gpus: _Part, named: Named | None, demand: Demand | None) -> _Part:
    """A sharing layer's memory-only request (`Demand.memory_share_of` devices) as the share
    of the chosen variant's memory it asks for, at most one GPU per device (gpushare-
    scheduler-extender docs/userguide.md: "3 GiB indicates one third of the GPU" of a
    card whose memory is 9 GiB... a share of a GPU is its memory over the GPU's)."""
    if demand is None or demand.memory_share_of is None or not demand.gpu_memory_mib \
            or named is None or named.match.gpu is None:  # fmt: skip
        return gpus
    total = Decimal(named.match.gpu.memory_mib)
    share = min(Decimal(1), Decimal(demand.gpu_memory_mib) / total)
    value = gpus.value - demand.memory_share_of + demand.memory_share_of * share
    return _Part(
        value, gpus.tokens,
        gpus.why + f"; memory only: {demand.gpu_memory_mib} of the {named.match.gpu.id}'s "
        f"{named.match.gpu.memory_mib} MiB per device",
    )


def _check_model(gpus: Decimal, named: Named | None, demand: Demand | None, warnings: list[str]) -> None:
    """Warn when the GPUs are more than the instance type named holds, or the model named
    is of another vendor than the resource asked for."""
    if named is None:
        return
    if named.per_instance is not None and gpus > named.per_instance:
        warnings.append(short(
            f"gpus: {format_gpus(gpus)} is more than the {named.per_instance} GPUs of {named.instance}"
        ))
    if demand is not None and named.match.gpu is not None and demand.vendor != named.match.gpu.vendor:
        warnings.append(short(
            f"model: {named.match.model} is a {named.match.gpu.vendor} GPU but the pod asks for "
            f"{demand.source[0].key}"
        ))


def _reasons(
    intent: Intent, gpus: _Part, memory: _Part, choice: ModelChoice, pool: _Part
) -> tuple[Reason, ...]:
    """Why each part of ``intent`` is what it is, for ``gpu-intent explain``."""
    named = choice.named
    model_memory = intent.model_memory_mib
    return (
        Reason("gpus", format_gpus(intent.gpus), _joined(gpus.tokens), gpus.why),
        Reason("model", intent.model or "", _joined(choice.tokens), choice.why),
        Reason(
            "model-memory",
            str(model_memory) if model_memory else "",
            _joined(t for t in choice.tokens if t.where != "rule") if model_memory else "",
            f"MiB per GPU of {named.match.gpu.id} in the GPU catalog"
            if named and named.match.gpu else "no GPU variant is named",
        ),
        Reason("gpu-memory", str(memory.value) if memory.value else "", _joined(memory.tokens), memory.why),
        Reason("pool", intent.pool or "", _joined(pool.tokens), pool.why),
    )


def _joined(sources: Iterable[Source]) -> str:
    """``sources`` as the text of a `Reason`: their tokens, comma-joined."""
    return ",".join(map(str, sources))


def infer_intent(pod: Mapping[str, Any], catalog: Catalog | None = None) -> Intent | None:
    """`infer`'s intent alone: None when ``pod`` asks for no GPU.

    Raises:
        IntentError: as `infer`.
    """
    return infer(pod, catalog, reasons=False).intent
