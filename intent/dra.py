"""GPU demand from Dynamic Resource Allocation (DRA) ResourceClaims (``resource.k8s.io``).

A purely computational module: no I/O, no awaits. The caller (the controller, or
``gpu-intent explain`` with the manifests of a file) reads the claims; this module says
what they ask for, in whole GPUs of a catalog model. `intent.inference.infer` folds the
result into the pod's `intent.contract.Intent` (source tokens ``dra:<claim name>``).

**Where a pod's claims are** (kubernetes ``pkg/apis/core/types.go`` PodResourceClaim,
``pkg/controller/resourceclaim/controller.go``): ``spec.resourceClaims[]`` names each claim
``name`` plus ``resourceClaimName`` (an existing ResourceClaim) or
``resourceClaimTemplateName`` (the resourceclaim controller creates a claim from the
template and records its name in ``status.resourceClaimStatuses[] {name,
resourceClaimName}``). A ResourceClaimTemplate's claim spec is at ``spec.spec``.

**What a claim asks for** (kubernetes ``staging/src/k8s.io/api/resource/v1/types.go``,
``v1beta2``, ``v1beta1``): ``spec.devices.requests[]``; in v1 and v1beta2 each request has
``exactly {deviceClassName, selectors[].cel.expression, allocationMode, count}`` or
``firstAvailable[]`` (sub-requests with the same fields, tried in order); in v1beta1 the
fields sit on the request itself. ``allocationMode`` is ``ExactCount`` (default; ``count``
defaults to 1) or ``All``; clients must refuse unknown modes (so: `IntentError`).

**Rules** (each a decision of gpu-intent, said in a warning where it guesses):

- A request of a GPU device class (`DEVICE_CLASSES`, plus the caller's) asks for
  ``count`` whole GPUs; any other class asks for nothing here.
- ``allocationMode: All`` takes every matching device of one node: read as the fewest GPUs
  a node of the chosen model has among the catalog's instance types (1 when unknown).
- ``firstAvailable``: the first alternative ``can_serve`` accepts (or the first).
- MIG (class kind ``mig``, or a selector on the ``profile`` attribute): the demand is the
  share of the parent model's GPU the devices take, ``count x compute slices of the
  profile / slices per GPU`` when the profile is known (four ``1g.5gb`` are 4/7 of one
  A100, as for the MIG resources of `intent.sharing`), else one GPU per device. A
  ``constraints[].matchAttribute: gpu.nvidia.com/parentUUID`` puts them on one parent GPU
  (NVIDIA/k8s-dra-driver-gpu ``demo/specs/quickstart/v1/gpu-test4.yaml``): the shares are
  of that GPU, and a sum over one GPU is a warning.
- The model and GPU memory come from the CEL selectors, evaluated with celpy (cel-python)
  against one synthetic device per catalog variant and DRA product name, shaped as the
  NVIDIA DRA driver publishes them (NVIDIA/k8s-dra-driver-gpu
  ``cmd/gpu-kubelet-plugin/deviceinfo.go``: attributes ``type``, ``productName``,
  ``architecture``, MIG ``profile``; capacity ``memory`` in bytes) under the domain
  ``gpu.nvidia.com``, with Kubernetes' CEL quantity library (``quantity()``,
  ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``asInteger``, ``sign``,
  ``isInteger``, ``add``, ``sub``: kubernetes ``staging/src/k8s.io/apiserver/pkg/cel/
  library/quantity.go``). An expression that does not evaluate on those devices (another
  attribute, a syntax error) leaves the model open, with a warning naming it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from intent.catalog import Catalog, Gpu
from intent.contract import MAX_GPUS, IntentError
from intent.demand import short, show
from intent.quantity import parse_quantity

if TYPE_CHECKING:  # imported when a selector is first read: the webhook never reads one
    import celpy
    from celpy import celtypes

__all__ = [
    "DEVICE_CLASSES",
    "MAX_POD_CLAIMS",
    "CanServe",
    "ClaimDemand",
    "ClaimSource",
    "PodClaim",
    "claim_demand",
    "claim_spec",
    "pod_claims",
]

#: Default device classes -> (vendor, kind). NVIDIA's DRA driver serves ``gpu.nvidia.com``
#: (whole GPUs) and ``mig.nvidia.com`` (MIG devices) (NVIDIA/k8s-dra-driver-gpu
#: ``deployments/helm``); AMD's serves ``gpu.amd.com`` (ROCm/k8s-gpu-dra-driver).
DEVICE_CLASSES: Final[Mapping[str, tuple[str, str]]] = MappingProxyType({
    "gpu.nvidia.com": ("nvidia", "gpu"),
    "mig.nvidia.com": ("nvidia", "mig"),
    "gpu.amd.com": ("amd", "gpu"),
})
_KINDS: Final = ("gpu", "mig")
#: The attribute domain (and ``device.driver``) of each vendor's DRA driver.
_DRIVERS: Final = {"nvidia": "gpu.nvidia.com", "amd": "gpu.amd.com"}
#: Kubernetes' limit on one CEL selector (resource/v1 ``CELSelectorExpressionMaxLength``).
MAX_EXPRESSION: Final = 10 * 1024
#: Most ``spec.resourceClaims`` entries (and recorded claim statuses) of a pod read; a pod
#: with more gets no intent. Real pods name a few claims; the bound keeps a review small.
MAX_POD_CLAIMS: Final = 128
_PROFILE: Final = re.compile(r"\b(\d{1,2})g\.(\d{1,4})gb(?:\+me)?\b")
_MIB: Final = 1024 * 1024

#: ``can_serve(model, vendor)``: whether the cluster can make a node for ``model`` (None:
#: any model) of ``vendor``; the controller passes its NodePools' answer.
CanServe = Callable[[str | None, str], bool]


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims[]``.

    Attributes:
        entry: the entry's ``name`` (what containers' ``resources.claims[].name`` use).
        claim: the ResourceClaim's name: ``resourceClaimName``, or for a template entry the
            name recorded in ``status.resourceClaimStatuses[]`` (None until the
            resourceclaim controller created it, or when it decided none is needed).
        template: ``resourceClaimTemplateName``, None for a direct claim.
    """

    entry: str
    claim: str | None
    template: str | None


@dataclass(frozen=True)
class ClaimSource:
    """One claim of a pod resolved to its spec, what callers pass to `claim_demand`.

    Attributes:
        entry: the pod's ``spec.resourceClaims[].name`` it resolves.
        name: the ResourceClaim's name, or the template's when read from a template.
        spec: the claim spec (a ResourceClaim's ``spec``, a template's ``spec.spec``;
            `claim_spec` finds it in either object).
    """

    entry: str
    name: str
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class ClaimDemand:
    """What one claim asks for in GPUs.

    Attributes:
        name: the claim's name (`ClaimSource.name`).
        gpus: GPUs summed over the claim's requests: whole GPUs, or for MIG devices of a
            known profile their share of the parent GPU (four ``1g.5gb`` are 4/7 of an A100).
        model: canonical catalog model (``a100``) when the selectors pin one, else None.
        gpu_memory_mib: MiB per GPU the selectors ask for (the least among the matching
            variants when a selector constrains memory), else None. None for MIG.
        mig: whether a request asks for MIG devices (the GPUs are their parents).
        warnings: what a user should know, each at most ``MAX_WARNING`` characters.
        vendor: ``nvidia`` or ``amd``, from the device class.
        gpu_id: the catalog variant (``a100-80gb``) when the selectors pin one, else None.
        why: one sentence of reasoning for ``gpu-intent explain``.
    """

    name: str
    gpus: Decimal
    model: str | None
    gpu_memory_mib: int | None
    mig: bool
    warnings: tuple[str, ...]
    vendor: str = "nvidia"
    gpu_id: str | None = None
    why: str = ""


# --- the pod's claims ---------------------------------------------------------------------


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IntentError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise IntentError(f"{where} must be a list, got {type(value).__name__}")
    return value


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise IntentError(f"{where} must be a non-empty string, got {show(value)}")
    return value


def _optional_name(value: object, where: str) -> str | None:
    return None if value is None else _name(value, where)


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The entries of ``pod``'s ``spec.resourceClaims[]`` (a Pod or pod template as JSON),
    in order; empty when it has none.

    For a template entry, `PodClaim.claim` is the ``resourceClaimName`` of the
    ``status.resourceClaimStatuses[]`` item of the same ``name`` (kubernetes
    ``pkg/controller/resourceclaim/controller.go`` records it there), None until then.

    Raises:
        IntentError: a field is not of its type, an entry has no ``name``, or names both or
            neither of ``resourceClaimName`` and ``resourceClaimTemplateName``, or either
            list has more than `MAX_POD_CLAIMS` items; the message names the field
            (``spec.resourceClaims[0].name``).
    """
    if not isinstance(pod, Mapping):
        raise IntentError(f"pod must be an object, got {type(pod).__name__}")
    spec = _mapping(pod.get("spec"), "spec")
    entries = _list(spec.get("resourceClaims"), "spec.resourceClaims")
    if not entries:
        return ()
    recorded: dict[str, str | None] = {}
    status = _mapping(pod.get("status"), "status")
    statuses = _list(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    for where, items in (("spec.resourceClaims", entries), ("status.resourceClaimStatuses", statuses)):
        if len(items) > MAX_POD_CLAIMS:
            raise IntentError(f"{where} has {len(items)} items; gpu-intent reads at most {MAX_POD_CLAIMS}")
    for i, item in enumerate(statuses):
        where = f"status.resourceClaimStatuses[{i}]"
        item = _mapping(item, where)
        recorded[_name(item.get("name"), f"{where}.name")] = _optional_name(
            item.get("resourceClaimName"), f"{where}.resourceClaimName"
        )
    out: list[PodClaim] = []
    for i, item in enumerate(entries):
        where = f"spec.resourceClaims[{i}]"
        item = _mapping(item, where)
        entry = _name(item.get("name"), f"{where}.name")
        claim = _optional_name(item.get("resourceClaimName"), f"{where}.resourceClaimName")
        template = _optional_name(
            item.get("resourceClaimTemplateName"), f"{where}.resourceClaimTemplateName"
        )
        if (claim is None) == (template is None):
            raise IntentError(
                f"{where} must set exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        if template is not None:
            claim = recorded.get(entry)
        out.append(PodClaim(entry, claim, template))
    return tuple(out)


def claim_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The claim spec of a ResourceClaim (``spec``) or ResourceClaimTemplate (``spec.spec``)
    given as JSON (``kind`` tells them apart; without one, a ``spec.spec`` means a template).

    Raises:
        IntentError: the object or its spec is not an object.
    """
    obj = _mapping(obj, "claim")
    spec = _mapping(obj.get("spec"), "spec")
    if obj.get("kind") == "ResourceClaimTemplate" or (
        obj.get("kind") is None and isinstance(spec.get("spec"), Mapping)
    ):
        return _mapping(spec.get("spec"), "spec.spec")
    return spec


# --- CEL: Kubernetes' quantity library over celpy ----------------------------------------


@dataclass(frozen=True)
class _Quantity:
    """A Kubernetes quantity inside CEL (kubernetes apiserver ``pkg/cel/library/
    quantity.go``), exact: ``value`` in the base unit (bytes for memory)."""

    value: Decimal


def _q(value: object) -> Decimal:
    if isinstance(value, _Quantity):
        return value.value
    if isinstance(value, int) and not isinstance(value, bool):  # CEL int
        return Decimal(int(value))
    raise TypeError(f"not a quantity: {type(value).__name__}")


def _quantity(text: object) -> _Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    try:
        return _Quantity(parse_quantity(str(text), "quantity()"))
    except IntentError as e:
        raise ValueError(str(e)) from e


@functools.cache
def _environment() -> tuple[celpy.Environment, dict[str, Callable[..., Any]]]:
    """The CEL environment (its parser is built once, about 0.1 s) and the quantity
    library's functions (celpy calls ``x.f(y)`` as ``f(x, y)``)."""
    import celpy
    from celpy import celtypes

    def compare(a: object, b: object) -> celtypes.IntType:
        x, y = _q(a), _q(b)
        return celtypes.IntType((x > y) - (x < y))

    functions: dict[str, Callable[..., Any]] = {
        "quantity": _quantity,
        "compareTo": compare,
        "isGreaterThan": lambda a, b: celtypes.BoolType(_q(a) > _q(b)),
        "isLessThan": lambda a, b: celtypes.BoolType(_q(a) < _q(b)),
        "asInteger": lambda a: celtypes.IntType(int(_q(a))),
        "isInteger": lambda a: celtypes.BoolType(_q(a) == _q(a).to_integral_value()),
        "sign": lambda a: celtypes.IntType((_q(a) > 0) - (_q(a) < 0)),
        "add": lambda a, b: _Quantity(_q(a) + _q(b)),
        "sub": lambda a, b: _Quantity(_q(a) - _q(b)),
    }
    return celpy.Environment(), functions


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> celpy.Runner | str:
    """The compiled selector, or why it does not compile (kept: the same text comes
    again for every pod of a workload)."""
    if len(expression) > MAX_EXPRESSION:
        return f"longer than {MAX_EXPRESSION} characters"
    env, functions = _environment()
    try:
        return env.program(env.compile(expression), functions=functions)
    except Exception as e:  # celpy/lark raise many types on hostile text; none may escape
        return f"does not compile ({type(e).__name__})"


def _evaluate(program: celpy.Runner, device: celtypes.MapType) -> bool | None:
    """The selector's verdict on one device; None when it errs or is not a bool (the
    scheduler treats both as an error, kubernetes dynamic-resource-allocation
    ``cel/compile.go``)."""
    from celpy import celtypes

    try:
        result = program.evaluate({"device": device})
    except Exception:  # a CEL runtime error of any kind: the selector does not evaluate
        return None
    return bool(result) if isinstance(result, celtypes.BoolType) else None


# --- synthetic devices ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Device:
    """One device a catalog variant would publish, and its CEL form."""

    gpu: Gpu
    product: str | None
    profile: str | None  # MIG profile (``1g.5gb``); None for a whole GPU or unknown
    memory_mib: int
    cel: celtypes.MapType


def _profile_fits(gpu: Gpu, slices: int, gb: int) -> bool:
    """Whether MIG profile ``<slices>g.<gb>gb`` exists on ``gpu``. A profile takes a fixed
    number of the GPU's memory slices (8 on 7-slice GPUs, 4 on the 4-slice A30): on
    7-slice GPUs 1g takes 1 or 2, 2g 2, 3g and 4g 4, 7g all 8; on 4-slice GPUs Ng takes N
    (NVIDIA MIG user guide, "Supported MIG Profiles": A100-40GB 3g.20gb, A100-80GB and
    H100 3g.40gb, H200 3g.71gb, A30 2g.12gb). ``gb`` must be that many memory slices of
    ``gpu``'s memory, within a tenth of a slice (H200: 141 GB / 8)."""
    total = gpu.mig_slices or 0
    if total == 7:
        allowed = {1: (1, 2), 2: (2,), 3: (4,), 4: (4,), 7: (8,)}.get(slices, ())
        unit = gpu.memory_mib / 1024 / 8
    else:
        allowed = (slices,) if 0 < slices <= total else ()
        unit = gpu.memory_mib / 1024 / max(total, 1)
    return any(abs(gb / unit - n) < 0.1 for n in allowed)


def _cel_map(items: Mapping[str, Any]) -> celtypes.MapType:
    """A CEL map of string keys; a str value becomes a CEL string, a mapping a map."""
    from celpy import celtypes

    return celtypes.MapType({
        celtypes.StringType(k): celtypes.StringType(v) if isinstance(v, str)
        else _cel_map(v) if isinstance(v, Mapping) else v
        for k, v in items.items()
    })  # fmt: skip


def _cel_device(vendor: str, kind: str, gpu: Gpu, product: str | None, profile: str | None,
                memory_mib: int) -> celtypes.MapType:  # fmt: skip
    """``device`` as a DRA selector sees it: ``driver``, ``attributes[<domain>]``,
    ``capacity[<domain>].memory`` (a quantity of bytes)."""
    driver = _DRIVERS.get(vendor, vendor)
    attributes: dict[str, Any] = {}
    if vendor == "nvidia":
        attributes["type"] = kind
        if product is not None:
            attributes["productName"] = product
        if gpu.architecture is not None:
            attributes["architecture"] = gpu.architecture
        if profile is not None:
            attributes["profile"] = profile
    memory = _Quantity(Decimal(memory_mib * _MIB))
    return _cel_map({
        "driver": driver,
        "attributes": {driver: attributes},
        "capacity": {driver: {"memory": memory}},
    })


@functools.lru_cache(maxsize=256)
def _verdicts(
    catalog: Catalog, vendor: str, kind: str, profiles: tuple[str, ...], expression: str
) -> tuple[bool, ...] | str:
    """Whether each of `_devices` ``(catalog, vendor, kind, profiles)`` satisfies the
    selector, or why it cannot be read there (``does not compile``, ``does not evaluate``:
    an error or a non-bool on any device). Kept: every pod of a workload asks the same."""
    program = _program(expression)
    if isinstance(program, str):
        return program.split(" (")[0]
    devices = _devices(catalog, vendor, kind, profiles)
    verdicts = [_evaluate(program, d.cel) for d in devices]
    if not devices or any(v is None for v in verdicts):
        return "does not evaluate"
    return tuple(bool(v) for v in verdicts)


@functools.lru_cache(maxsize=64)
def _devices(catalog: Catalog, vendor: str, kind: str, profiles: tuple[str, ...]) -> tuple[_Device, ...]:
    """The devices of ``vendor``'s variants: one per DRA product name (NVIDIA), or one per
    variant (AMD, whose attributes are not modelled); for MIG, one per MIG-capable variant
    and profile named in the selectors (``profiles``) that fits it, or per variant when
    none is named."""
    out: list[_Device] = []
    for gpu in catalog.gpus.values():
        if gpu.vendor != vendor or (kind == "mig" and not gpu.mig_slices):
            continue
        if vendor == "nvidia" and not gpu.product_names:
            continue  # no name the driver would publish: not a device a selector can see
        products: tuple[str | None, ...] = gpu.product_names or (None,)
        variants: list[tuple[str | None, int]] = [(None, gpu.memory_mib)]
        if kind == "mig" and profiles:
            variants = []
            for named in profiles:
                m = _PROFILE.fullmatch(named)
                if m and _profile_fits(gpu, int(m[1]), int(m[2])):
                    variants.append((named, int(m[2]) * 1024))
        for product in products:
            for profile, memory in variants:
                cel = _cel_device(vendor, kind, gpu, product, profile, memory)
                out.append(_Device(gpu, product, profile, memory, cel))
    return tuple(out)


# --- one request ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ask:
    """One request (or firstAvailable alternative), parsed."""

    where: str
    name: str
    device_class: str
    vendor: str | None  # None: not a GPU class
    kind: str
    all: bool
    count: int
    selectors: tuple[str, ...]


@dataclass(frozen=True)
class _Reading:
    """What one GPU `_Ask` asks for."""

    gpus: Decimal
    model: str | None
    gpu_id: str | None
    memory_mib: int | None
    mig: bool
    vendor: str
    why: str
    servable: bool


def _ask(raw: object, where: str, name: str, classes: Mapping[str, tuple[str, str]]) -> _Ask:
    body = _mapping(raw, where)
    device_class = _name(body.get("deviceClassName"), f"{where}.deviceClassName")
    mode = body.get("allocationMode")
    if mode not in (None, "ExactCount", "All"):
        raise IntentError(f"{where}.allocationMode must be ExactCount or All, got {show(mode)}")
    count = body.get("count")
    if mode == "All" or count is None:
        count = 1
    elif isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_GPUS:
        raise IntentError(f"{where}.count must be a whole number in [1, {MAX_GPUS}], got {show(count)}")
    selectors: list[str] = []
    for i, item in enumerate(_list(body.get("selectors"), f"{where}.selectors")):
        cel = _mapping(_mapping(item, f"{where}.selectors[{i}]").get("cel"), f"{where}.selectors[{i}].cel")
        if cel:
            expression = cel.get("expression")
            if not isinstance(expression, str):
                raise IntentError(
                    f"{where}.selectors[{i}].cel.expression must be a string, got {show(expression)}"
                )
            selectors.append(expression)
    vendor, kind = classes.get(device_class, (None, "gpu"))
    return _Ask(where, name, device_class, vendor, kind, mode == "All", int(count), tuple(selectors))


_DOMAIN_PREFIX: Final = re.compile(r"""device\.(attributes|capacity)\[\s*["'][^"']*["']\s*\]\.""")


def _shown(expression: str) -> str:
    """A selector for a warning: one line, the ``device.attributes["<domain>"].`` prefix
    shortened to ``attributes.``, at most 36 characters."""
    text = _DOMAIN_PREFIX.sub(r"\1.", " ".join(expression.split()))
    return repr(text if len(text) <= 36 else text[:33] + "...")


def _models(devices: Sequence[_Device]) -> list[str]:
    return list(dict.fromkeys(d.gpu.model for d in devices))


def _read(ask: _Ask, claim: str, catalog: Catalog, can_serve: CanServe | None,
          warnings: list[str]) -> _Reading:  # fmt: skip
    """The GPUs, model and memory one GPU-class ask stands for (rules: module docstring)."""
    assert ask.vendor is not None
    vendor = ask.vendor
    say = f"dra: claim {claim} request {ask.name}:"
    mig = ask.kind == "mig" or any(re.search(r"\bprofile\b", s) for s in ask.selectors)
    profiles = tuple(dict.fromkeys(m[0] for s in ask.selectors for m in _PROFILE.finditer(s)))
    kind = "mig" if mig else "gpu"
    devices = _devices(catalog, vendor, kind, profiles)
    matched = list(devices)
    memory_selected = evaluated = False
    for expression in ask.selectors:
        verdicts = _verdicts(catalog, vendor, kind, profiles, expression)
        if isinstance(verdicts, str):
            warnings.append(short(f"{say} selector {_shown(expression)} {verdicts}; model left open"))
            continue
        chosen = {id(d) for d, v in zip(devices, verdicts, strict=True) if v}
        matched = [d for d in matched if id(d) in chosen]
        evaluated = True
        memory_selected = memory_selected or "capacity" in expression
    if not matched and evaluated:
        warnings.append(short(f"{say} no catalog GPU matches the selectors; model left open"))
    servable = True
    if can_serve is not None:
        served = [d for d in matched if can_serve(d.gpu.model, vendor)]
        if served:
            matched = served
        else:
            servable = not matched and can_serve(None, vendor)
    models = _models(matched)
    model = models[0] if len(models) == 1 else None
    if len(models) > 1 and evaluated:
        warnings.append(short(f"{say} selectors match {','.join(models)}; model left open"))
    variants = list(dict.fromkeys(d.gpu.id for d in matched))
    gpu_id = variants[0] if len(variants) == 1 and model is not None else None
    memory = min(d.memory_mib for d in matched) if memory_selected and matched and not mig else None
    count = ask.count
    how = f"{ask.count} x {ask.device_class}"
    if ask.all:
        fewest = catalog.fewest_per_instance(model) if model else None
        count = fewest or 1
        where = f"per {model} node" if fewest else "per node: model unknown"
        how = f"allocationMode All, {count} (fewest {where})"
        warnings.append(short(
            f"{say} All read as {count} GPU(s) (fewest {where}); set gpu-intent.io/gpus for more"
        ))
    gpus = Decimal(count)
    if mig and not ask.all:  # All: every GPU of the node, partitioned or not
        shared = {d.profile for d in matched}
        profile = next(iter(shared)) if len(shared) == 1 else None
        m = _PROFILE.fullmatch(profile) if profile else None
        if m is not None and matched:
            gpus = max(Decimal(count * int(m[1])) / (d.gpu.mig_slices or 1) for d in matched)
            how += f"; MIG {profile}: {count} x {m[1]}/{matched[0].gpu.mig_slices} of a GPU"
        else:
            how += "; MIG devices of unknown profile: one whole GPU each"
    if not evaluated:
        named = "no selector read: any model"
    else:
        named = "selectors match " + (",".join(models) if models else "no catalog model")
    if memory is not None:
        named += f", at least {memory} MiB"
    why = f"request {ask.name} asks for {how}; {named}"
    return _Reading(gpus, model, gpu_id, memory, mig, vendor, why, servable)


def _request(raw: object, i: int, claim: str, catalog: Catalog,
             classes: Mapping[str, tuple[str, str]], can_serve: CanServe | None,
             warnings: list[str]) -> _Reading | None:  # fmt: skip
    """One ``spec.devices.requests[i]`` in any served shape: None when it asks for no GPU."""
    where = f"spec.devices.requests[{i}]"
    body = _mapping(raw, where)
    raw_name = body.get("name")
    name = raw_name if isinstance(raw_name, str) and raw_name else f"#{i}"
    if body.get("exactly") is not None:
        return _one(_ask(body["exactly"], f"{where}.exactly", name, classes), claim, catalog,
                    can_serve, warnings)  # fmt: skip
    if body.get("firstAvailable") is not None:
        subs = _list(body["firstAvailable"], f"{where}.firstAvailable")
        if not subs:
            raise IntentError(f"{where}.firstAvailable must not be empty")
        asks = []
        for j, sub in enumerate(subs):
            sub_where = f"{where}.firstAvailable[{j}]"
            sub_name = _mapping(sub, sub_where).get("name")
            sub_name = f"{name}/{sub_name}" if isinstance(sub_name, str) and sub_name else f"{name}/#{j}"
            asks.append(_ask(sub, sub_where, sub_name, classes))
        readings: list[_Reading | None] = []
        notes: list[list[str]] = []
        taken = None
        for j, ask in enumerate(asks):
            notes.append([])
            reading = _one(ask, claim, catalog, can_serve, notes[j])
            readings.append(reading)
            if can_serve is None or reading is None or reading.servable:
                taken = j
                break
        how = "the first"
        if taken is None:
            taken, how = 0, "none can be served; the first"
        warnings += notes[taken]
        warnings.append(short(
            f"dra: claim {claim} request {name}: took alternative {asks[taken].name} "
            f"({asks[taken].device_class}), {how} of {len(asks)}"
            + (" that can be served" if how == "the first" and can_serve is not None else "")
        ))
        return readings[taken]
    if body.get("deviceClassName") is not None:  # v1beta1: the fields on the request
        return _one(_ask(body, where, name, classes), claim, catalog, can_serve, warnings)
    raise IntentError(f"{where} has none of exactly, firstAvailable and deviceClassName")


def _one(ask: _Ask, claim: str, catalog: Catalog, can_serve: CanServe | None,
         warnings: list[str]) -> _Reading | None:  # fmt: skip
    if ask.vendor is None:
        return None  # not a GPU class: nothing gpu-intent provisions for
    return _read(ask, claim, catalog, can_serve, warnings)


def _classes(extra: Mapping[str, tuple[str, str]]) -> Mapping[str, tuple[str, str]]:
    if not extra:
        return DEVICE_CLASSES
    for name, value in extra.items():
        if not (isinstance(value, tuple) and len(value) == 2 and value[1] in _KINDS):
            raise IntentError(f"device class {name!r} must map to (vendor, gpu|mig), got {value!r}")
    return {**DEVICE_CLASSES, **extra}


def claim_demand(
    source: ClaimSource,
    *,
    catalog: Catalog,
    device_classes: Mapping[str, tuple[str, str]] = DEVICE_CLASSES,
    can_serve: CanServe | None = None,
) -> ClaimDemand | None:
    """What one claim asks for in whole GPUs, or None when it asks for no GPU-class device.

    ``source.spec`` is a claim spec of ``resource.k8s.io/v1``, ``v1beta2`` or ``v1beta1``
    (module docstring). ``catalog`` gives the synthetic devices the CEL selectors are
    evaluated on, the MIG slices and the GPUs per instance type. ``device_classes`` are
    device classes (name -> ``(vendor, "gpu" | "mig")``) merged over `DEVICE_CLASSES`.
    ``can_serve(model, vendor)`` picks among ``firstAvailable`` alternatives and narrows a
    selector that matches several models (None: take the first, leave them open).

    The demand sums the claim's requests; the model and variant are the first request's
    that names one (a request naming another is a warning), the memory the most any
    request asks per GPU.

    Raises:
        IntentError: the spec breaks the API's shape (the message names the field:
            ``spec.devices.requests[0].exactly.count``), an unknown ``allocationMode``, or
            more than `intent.contract.MAX_GPUS` GPUs.
    """
    classes = _classes(device_classes)
    claim = source.name if isinstance(source.name, str) and source.name else "?"
    spec = _mapping(source.spec, "spec")
    devices = _mapping(spec.get("devices"), "spec.devices")
    warnings: list[str] = []
    readings = [
        r for i, raw in enumerate(_list(devices.get("requests"), "spec.devices.requests"))
        if (r := _request(raw, i, claim, catalog, classes, can_serve, warnings)) is not None
    ]  # fmt: skip
    if not readings:
        return None
    gpus = sum((r.gpus for r in readings), Decimal(0))
    if gpus > MAX_GPUS:
        raise IntentError(f"claim {claim} asks for {gpus} GPUs, more than {MAX_GPUS}")
    named = [r for r in readings if r.model is not None]
    first = named[0] if named else None
    for other in named[1:]:
        if first is not None and other.model != first.model:
            warnings.append(short(
                f"dra: claim {claim} names {first.model} and {other.model}; kept {first.model}"
            ))
    why = f"claim {claim}: " + "; ".join(r.why for r in readings)
    if _one_parent(devices) and any(r.mig for r in readings):
        why += "; all on one parent GPU (matchAttribute gpu.nvidia.com/parentUUID)"
        if gpus > 1:
            warnings.append(short(
                f"dra: claim {claim} puts {gpus.normalize()} GPUs of MIG devices on one parent GPU"
            ))
    memories = [r.memory_mib for r in readings if r.memory_mib is not None]
    return ClaimDemand(
        name=claim,
        gpus=gpus,
        model=first.model if first else None,
        gpu_memory_mib=max(memories) if memories else None,
        mig=any(r.mig for r in readings),
        warnings=tuple(dict.fromkeys(warnings)),
        vendor=readings[0].vendor,
        gpu_id=first.gpu_id if first else None,
        why=why,
    )


#: The attribute a constraint names to put a claim's MIG devices on one GPU (NVIDIA/
#: k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test4.yaml: ``matchAttribute:
#: "gpu.nvidia.com/parentUUID"``; cmd/gpu-kubelet-plugin/mig.go publishes ``parentUUID``).
PARENT_ATTRIBUTE: Final = "gpu.nvidia.com/parentUUID"


def _one_parent(devices: Mapping[str, Any]) -> bool:
    """Whether ``spec.devices.constraints`` puts the claim's devices on one parent GPU (a
    ``matchAttribute`` on `PARENT_ATTRIBUTE`). Their MIG shares are then of that one GPU,
    which is what the summed fractions already say; a sum over one is warned about."""
    constraints = devices.get("constraints")
    if not isinstance(constraints, list):
        return False
    return any(isinstance(c, Mapping) and c.get("matchAttribute") == PARENT_ATTRIBUTE
               for c in constraints[:MAX_POD_CLAIMS])  # fmt: skip
