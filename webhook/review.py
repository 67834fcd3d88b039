"""The mutating admission review: an AdmissionReview request in, a response out.

A purely computational module: no I/O, no awaits, no logging. The aiohttp handler in
`webhook.server` parses the body, calls `admit` (or `review`) and maps the
outcome to HTTP, logs and metrics.

Wire shapes are ``admission.k8s.io/v1`` AdmissionReview (kubernetes.io, "Dynamic Admission
Control"); the response must echo ``request.uid``, and a mutation is ``patchType:
JSONPatch`` with ``patch`` the base64 of an RFC 6902 patch. The webhook never blocks a
pod: every response it builds says ``allowed: true``.
"""

from __future__ import annotations

import base64
import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, TypedDict

import jsonpatch
import orjson

from intent.catalog import Catalog
from intent.contract import ANNOTATION_VERSION, INTENT_ANNOTATIONS, Intent, IntentError
from intent.inference import Budget, DeadlineExceeded, infer
from intent.text import show
from webhook.scope import Scope

__all__ = [
    "API_VERSION",
    "DEFAULT_BUDGET",
    "DEFAULT_SCOPE",
    "MAX_ANNOTATIONS_BYTES",
    "MAX_WARNINGS",
    "Admission",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReview",
    "AdmissionReviewResponse",
    "AnnotationPatch",
    "GroupVersionKind",
    "MalformedReview",
    "Outcome",
    "Scope",
    "admit",
    "allowed_with_warning",
    "make_annotation_patch",
    "pod_reference",
    "review",
]

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"
#: Longest warning text sent back; the apiserver may truncate warnings over 256 characters.
MAX_WARNING: Final = 256
#: Most warnings one response carries; the last says how many more there were. The
#: apiserver keeps at most 4 KiB of warnings per request, 256 runes each
#: (``truncateAtTotalRunes``, ``truncateItemRunes``, k8s.io/apiserver
#: ``pkg/endpoints/filters/warning.go``); inference's warnings are at most 120 characters.
MAX_WARNINGS: Final = 16
WARNING_PREFIX: Final = "gpu-intent: "
#: CPU seconds one review may spend inferring an intent (`intent.inference.Budget`);
#: past it the pod is allowed unchanged with a warning (outcome ``deadline``). A review
#: takes about 0.1 ms; the budget keeps one hostile pod from holding the event loop.
DEFAULT_BUDGET: Final = 0.05
#: Most bytes of annotations a pod may carry, keys and values summed: kube-apiserver
#: refuses a larger object (``TotalAnnotationSizeLimitB``, k8s.io/apimachinery
#: ``pkg/api/validation/objectmeta.go``, ``ValidateAnnotationsSize``), so a patch that
#: would pass it is not sent.
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
#: Metric label for what a review did (``gpu_intent_webhook_reviews_total{outcome}``).
#: `admit` gives the first seven; the server adds ``malformed`` (HTTP 400) and
#: ``too_large`` (HTTP 413), and ``internal_error`` for an exception outside `admit`.
Outcome = Literal[
    "patched",
    "unchanged",
    "skipped",
    "not_gpu",
    "error_object",
    "deadline",
    "internal_error",
    "malformed",
    "too_large",
]
#: Namespaces and pods `admit` leaves alone when the caller gives no `Scope`.
DEFAULT_SCOPE: Final = Scope()


class GroupVersionKind(TypedDict):
    """``request.kind`` / ``request.requestKind``: ``{"group": "", "version": "v1", ...}``."""

    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    """``request`` of an AdmissionReview (only the fields gpu-intent reads are typed)."""

    uid: str
    kind: NotRequired[GroupVersionKind]
    operation: NotRequired[Operation]
    name: NotRequired[str]
    namespace: NotRequired[str]
    subResource: NotRequired[str]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]


class AdmissionReview(TypedDict):
    """An AdmissionReview request body as the apiserver POSTs it."""

    apiVersion: str
    kind: str
    request: AdmissionRequest


class AdmissionResponse(TypedDict):
    """``response`` of an AdmissionReview; ``patch`` is base64 of a JSON patch."""

    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]


class AdmissionReviewResponse(TypedDict):
    """The body gpu-intent answers with."""

    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


class MalformedReview(ValueError):
    """The request body is not an AdmissionReview gpu-intent can answer (HTTP 400).

    The message is a human-readable reason, safe to return to the caller.
    """


@dataclass(frozen=True, slots=True)
class Admission:
    """The result of one review, with what the server needs to log and count.

    Attributes:
        response: the AdmissionReview to send back (``allowed`` is always true).
        outcome: metric label: ``patched``, ``unchanged`` (not a pod CREATE, or already
            annotated), ``skipped`` (out of `Scope`), ``not_gpu``, ``error_object`` (a
            warning, no patch), ``deadline`` (the review spent its budget: a warning, no
            patch) or ``internal_error`` (a bug: a warning, no patch).
        pod: ``namespace/name`` of the pod, ``namespace/generateName*`` when it has no
            name yet, or ``""`` when the request is not about a pod.
        detail: why there is no patch for ``skipped``, ``error_object``, ``deadline``
            and ``internal_error`` (the warning text for the last three), else ``""``.
        intent: the intent written for ``patched``, else None.
        error: the unexpected exception behind ``internal_error`` (for the log's
            traceback), else None.
    """

    response: AdmissionReviewResponse
    outcome: Outcome
    pod: str = ""
    detail: str = ""
    intent: Intent | None = None
    error: Exception | None = None


def _response(uid: str, **extra: Any) -> AdmissionReviewResponse:
    response: AdmissionResponse = {"uid": uid, "allowed": True, **extra}  # type: ignore[typeddict-item]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _warning(reason: str) -> str:
    # One line, printable: a pod's value may carry an escape (ESC, ``\x1b``), and kubectl
    # prints warnings to the terminal as they come.
    text = _printable(" ".join((WARNING_PREFIX + reason).split()))
    return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 3] + "..."


def allowed_with_warning(uid: str, reason: str) -> AdmissionReviewResponse:
    """An ``allowed: true`` response with no patch and one warning ``gpu-intent: <reason>``.

    The warning is one line of at most `MAX_WARNING` characters.
    """
    return _response(uid, warnings=[_warning(reason)])


def _validate(body: object) -> AdmissionReview:
    if not isinstance(body, dict):
        raise MalformedReview(f"body must be a JSON object, got {type(body).__name__}")
    if body.get("apiVersion") != API_VERSION:
        raise MalformedReview(
            f"apiVersion must be {API_VERSION!r}, got {show(body.get('apiVersion'), 60)}"
        )
    if body.get("kind") != KIND:
        raise MalformedReview(f"kind must be {KIND!r}, got {show(body.get('kind'), 60)}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid must be a non-empty string")
    if _is_pod_create(request) and not isinstance(request.get("object"), dict):
        raise MalformedReview("request.object must be an object for a Pod CREATE")
    return body  # type: ignore[return-value]


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return (
        isinstance(kind, dict)
        and kind.get("group") == ""
        and kind.get("kind") == "Pod"
        and not request.get("subResource")
        and request.get("operation") == "CREATE"
    )


def pod_reference(request: Mapping[str, Any]) -> str:
    """``namespace/name`` (or ``namespace/generateName*``) of a review's pod, for logs."""
    obj = request.get("object")
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    # not yet validated: any field may hold anything JSON can (a string is cut first)
    namespace = _text(metadata.get("namespace")) or _text(request.get("namespace"))
    name = _text(metadata.get("name")) or _text(request.get("name"))
    if not name and _text(metadata.get("generateName")):
        name = f"{_text(metadata['generateName'])}*"
    return _printable(f"{namespace}/{name or '?'}")


def _printable(text: str) -> str:
    """``text`` with each character that is not printable (``str.isprintable``) as ``?``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else "?" for c in text)


def _text(value: object) -> str:
    """``value`` for `pod_reference`: a string cut to 100 characters, `show` of anything
    else but null (``""``)."""
    if type(value) is str:
        return value if len(value) <= 100 else value[:100]
    return "" if value is None else show(value)


def _pointer_token(key: str) -> str:
    """``key`` as one JSON Pointer reference token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


#: The JSON Pointer of each intent annotation, escaped once.
_ANNOTATION_POINTERS: Final = {
    key: "/metadata/annotations/" + _pointer_token(key) for key in INTENT_ANNOTATIONS
}


class AnnotationPatch(jsonpatch.JsonPatch):
    """A `jsonpatch.JsonPatch` of the operations `make_annotation_patch` built.

    ``patch`` is the list of operations, each ``{"op": "add", "path": <JSON Pointer>,
    "value": ...}`` or ``{"op": "remove", "path": <JSON Pointer>}``. The operations are right by construction, so the constructor skips
    ``JsonPatch``'s per-operation validation (about 20 us of a 100 us review); applying
    the patch still validates, and the tests apply every patch they see.
    """

    def __init__(self, operations: list[dict[str, Any]]) -> None:
        self.pointer_cls = jsonpatch.JsonPointer
        self.patch = operations


def make_annotation_patch(
    pod: Mapping[str, Any], annotations: Mapping[str, str], remove: tuple[str, ...] = ()
) -> AnnotationPatch:
    """The RFC 6902 patch that adds ``annotations`` to ``pod`` and removes the keys of
    ``remove`` it has that ``annotations`` does not set, built directly.

    Every operation is under ``/metadata/annotations``: when the map exists, an ``add``
    per key whose value differs from the pod's (JSON Pointer escaped; an existing key's
    value is replaced, RFC 6902 section 4.1) and a ``remove`` per key of ``remove``
    present (so it exists when the patch applies); else one ``add`` that sets the whole
    map (absent or ``null``), or ``/metadata`` itself when the pod has no metadata
    (absent or ``null``). So the patch always applies to ``pod`` (the object the
    apiserver applies it to), changes nothing but ``metadata.annotations``, and when it
    removes nothing, applying it twice gives the same pod as once (a ``remove`` needs
    its key, RFC 6902 section 4.2; a reinvoked review of the patched pod adds nothing).

    Raises:
        IntentError: ``metadata`` or ``metadata.annotations`` is present but not an object
            (not a pod the apiserver would send; no patch could add to it safely).
    """
    values = dict(annotations)
    metadata = pod.get("metadata")
    ops: list[dict[str, Any]]
    if metadata is None:
        ops = [{"op": "add", "path": "/metadata", "value": {"annotations": values}}]
    elif not isinstance(metadata, dict):
        raise IntentError(f"metadata is {type(metadata).__name__}, not an object")
    else:
        existing = metadata.get("annotations")
        if existing is None:
            ops = [{"op": "add", "path": "/metadata/annotations", "value": values}]
        elif not isinstance(existing, dict):
            raise IntentError(
                f"metadata.annotations is {type(existing).__name__}, not an object"
            )
        else:
            pointers = _ANNOTATION_POINTERS
            ops = [
                {"op": "add", "path": pointers.get(k) or "/metadata/annotations/" + _pointer_token(k),
                 "value": v}
                for k, v in values.items()
                if existing.get(k) != v  # a value already there (a user's own) is left alone
            ]  # fmt: skip
            ops += [
                {"op": "remove", "path": pointers.get(k) or "/metadata/annotations/" + _pointer_token(k)}
                for k in remove if k in existing and k not in values
            ]  # fmt: skip
    return AnnotationPatch(ops)


#: Annotation maps up to this many entries are summed in C at once; a larger one is
#: walked only until its sum passes `MAX_ANNOTATIONS_BYTES`.
_SUMMED_IN_C: Final = 4096


def _annotations_bytes(*maps: Mapping[str, Any]) -> int:
    """Bytes of the annotation ``maps`` as kube-apiserver counts them against
    `MAX_ANNOTATIONS_BYTES`, ``len(key) + len(value)`` summed over all (a key in two maps
    counts twice: an upper bound). A value that is not a string counts nothing (such a pod
    fails validation whatever the webhook does). A map of more than `_SUMMED_IN_C`
    entries, or with such a value, is summed only until the sum passes the limit."""
    total = 0
    for entries in maps:
        if len(entries) <= _SUMMED_IN_C:
            try:  # the common case, summed in C
                total += sum(map(len, entries)) + sum(map(len, entries.values()))
                continue
            except TypeError:  # a value that is not a string (nor has a length)
                pass
        for key, value in entries.items():  # huge, or odd: stop once past the limit
            total += len(key) + (len(value) if isinstance(value, str) else 0)
            if total > MAX_ANNOTATIONS_BYTES:
                return total
    return total


def _capped(warnings: tuple[str, ...]) -> list[str]:
    """``warnings`` as response warnings: each `_warning`, at most `MAX_WARNINGS`, the
    last saying how many more there were."""
    if len(warnings) <= MAX_WARNINGS:
        return [_warning(w) for w in warnings]
    more = len(warnings) - (MAX_WARNINGS - 1)
    shown = [_warning(w) for w in warnings[: MAX_WARNINGS - 1]]
    return [*shown, _warning(f"and {more} more warnings; `gpu-intent explain` on the manifest lists them all")]


def admit(
    body: object,
    *,
    scope: Scope = DEFAULT_SCOPE,
    budget: float = DEFAULT_BUDGET,
    clock: Callable[[], float] = time.thread_time,
    catalog: Catalog | None = None,
) -> Admission:
    """Review one AdmissionReview request body (parsed JSON) and decide the response.

    Not a Pod CREATE: no patch (``unchanged``). A pod out of ``scope`` (its namespace is
    skipped, or it is a gpu-intent trigger pod): no patch (``skipped``). A pod already
    carrying ``gpu-intent.io/intent-version``: no patch (``unchanged``). A pod with no
    GPU demand (`infer` with ``catalog``, the built-in one when None, gives no intent): no
    patch (``not_gpu``). A pod whose fields
    cannot be read (`IntentError`), or whose annotations would pass kube-apiserver's
    `MAX_ANNOTATIONS_BYTES` with the intent: no patch and a warning (``error_object``).
    Inference that spends more than ``budget`` seconds of ``clock`` (CPU time of this
    thread by default; `intent.inference.Budget`): no patch and a warning
    (``deadline``). The cyclic garbage collector is held off while the pod is reviewed
    (and left as it was found), so a collection of the process's heap is never charged
    to a review. Otherwise a JSON patch (`make_annotation_patch`) that writes the
    `Intent` annotations and removes any other ``gpu-intent.io/`` intent annotation the
    pod carries (a user's value inference did not keep), so the pod's intent annotations
    are exactly those of the intent and `Intent.from_annotations` reads back that intent.
    The inference's warnings (a part left out, an ambiguity resolved by rule) go into
    ``response.warnings``, at most `MAX_WARNINGS`. Any other exception is a bug: no
    patch, a warning, outcome ``internal_error`` and the exception in `Admission.error`.
    ``request.dryRun`` changes nothing (the webhook has no side effects).

    Raises:
        MalformedReview: ``body`` is not a dict with ``apiVersion: admission.k8s.io/v1``,
            ``kind: AdmissionReview``, a ``request`` object with a non-empty string ``uid``,
            and, for a Pod CREATE, an object ``request.object``. Nothing else is raised.
    """
    request = _validate(body)["request"]
    uid = request["uid"]
    if not _is_pod_create(request):
        return Admission(_response(uid), "unchanged")
    pod: dict[str, Any] = request["object"]  # type: ignore[assignment]  # _validate checked
    ref = pod_reference(request)
    # A review makes no reference cycles: the cyclic collector waits until it is done, so
    # a collection of the process's heap (tens of milliseconds in a process that holds a
    # whole simulated cluster) is neither charged to the review's budget nor its latency.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _admit_pod(request, pod, uid, ref, scope, Budget(budget, clock), catalog)
    except DeadlineExceeded as e:
        reason = f"pod not annotated: {e}"
        return Admission(allowed_with_warning(uid, reason), "deadline", ref, reason)
    except Exception as e:  # a bug: never block the pod, never escape
        reason = f"internal error, pod not annotated: {type(e).__name__}: {e}"
        return Admission(allowed_with_warning(uid, reason), "internal_error", ref, reason, error=e)
    finally:
        if collecting:
            gc.enable()


def _admit_pod(
    request: AdmissionRequest,
    pod: dict[str, Any],
    uid: str,
    ref: str,
    scope: Scope,
    budget: Budget,
    catalog: Catalog | None,
) -> Admission:
    """`admit` for a Pod CREATE whose review is valid.

    Raises:
        DeadlineExceeded: inference spent ``budget``.
    """
    skipped = scope.skip_reason(request, pod)
    if skipped is not None:
        return Admission(_response(uid), "skipped", ref, skipped)
    metadata = pod.get("metadata")
    existing = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(existing, dict) and ANNOTATION_VERSION in existing:
        return Admission(_response(uid), "unchanged", ref)
    try:
        # the response carries no reasons
        inference = infer(pod, catalog=catalog, reasons=False, budget=budget)
    except IntentError as e:
        reason = f"cannot infer GPU intent: {e}"
        return Admission(allowed_with_warning(uid, reason), "error_object", ref, reason)
    intent = inference.intent
    warned = {"warnings": _capped(inference.warnings)} if inference.warnings else {}
    if intent is None:
        return Admission(_response(uid, **warned), "not_gpu", ref)
    annotations = intent.to_annotations()
    try:
        patch = make_annotation_patch(pod, annotations, remove=INTENT_ANNOTATIONS)
    except IntentError as e:
        reason = f"not annotating the pod: {e}"
        return Admission(allowed_with_warning(uid, reason), "error_object", ref, reason)
    if isinstance(existing, dict) and _annotations_bytes(existing, annotations) > MAX_ANNOTATIONS_BYTES:
        reason = (f"not annotating the pod: its annotations would pass the apiserver's"
                  f" limit of {MAX_ANNOTATIONS_BYTES} bytes")  # fmt: skip
        return Admission(allowed_with_warning(uid, reason), "error_object", ref, reason)
    encoded = base64.b64encode(orjson.dumps(patch.patch)).decode("ascii")
    response = _response(uid, patchType="JSONPatch", patch=encoded, **warned)
    return Admission(response, "patched", ref, intent=intent)


def review(
    body: object,
    *,
    scope: Scope = DEFAULT_SCOPE,
    budget: float = DEFAULT_BUDGET,
    catalog: Catalog | None = None,
) -> AdmissionReviewResponse:
    """`admit` without the bookkeeping: the AdmissionReview response for ``body``.

    Raises:
        MalformedReview: as `admit` (and nothing else).
    """
    return admit(body, scope=scope, budget=budget, catalog=catalog).response
