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
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, TypedDict

import jsonpatch

from gpu_intent.intent import ANNOTATION_VERSION, Intent, IntentError
from webhook.inference import infer

__all__ = [
    "API_VERSION",
    "Admission",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReview",
    "AdmissionReviewResponse",
    "GroupVersionKind",
    "MalformedReview",
    "Outcome",
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
WARNING_PREFIX: Final = "gpu-intent: "

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
#: Metric label for what a review did (``gpu_intent_webhook_reviews_total{outcome}``).
Outcome = Literal["patched", "unchanged", "not_gpu", "error_object", "malformed"]


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
            annotated), ``not_gpu`` or ``error_object`` (a warning, no patch).
        pod: ``namespace/name`` of the pod, ``namespace/generateName*`` when it has no
            name yet, or ``""`` when the request is not about a pod.
        detail: why there is no patch for ``error_object`` (the warning text), else ``""``.
        intent: the intent written for ``patched``, else None.
    """

    response: AdmissionReviewResponse
    outcome: Outcome
    pod: str = ""
    detail: str = ""
    intent: Intent | None = None


def _response(uid: str, **extra: Any) -> AdmissionReviewResponse:
    response: AdmissionResponse = {"uid": uid, "allowed": True, **extra}  # type: ignore[typeddict-item]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _warning(reason: str) -> str:
    text = " ".join((WARNING_PREFIX + reason).split())  # one line, no control characters
    return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 3] + "..."


def allowed_with_warning(uid: str, reason: str) -> AdmissionReviewResponse:
    """An ``allowed: true`` response with no patch and one warning ``gpu-intent: <reason>``.

    The warning is one line of at most `MAX_WARNING` characters.
    """
    return _response(uid, warnings=[_warning(reason)])


def _show(value: object) -> str:
    """A short repr of a caller-supplied value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _validate(body: object) -> AdmissionReview:
    if not isinstance(body, dict):
        raise MalformedReview(f"body must be a JSON object, got {type(body).__name__}")
    if body.get("apiVersion") != API_VERSION:
        raise MalformedReview(
            f"apiVersion must be {API_VERSION!r}, got {_show(body.get('apiVersion'))}"
        )
    if body.get("kind") != KIND:
        raise MalformedReview(f"kind must be {KIND!r}, got {_show(body.get('kind'))}")
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
    namespace = metadata.get("namespace") or request.get("namespace") or ""
    name = metadata.get("name") or request.get("name")
    if not name and metadata.get("generateName"):
        name = f"{metadata['generateName']}*"
    text = f"{namespace}/{name or '?'}"[:200]  # not yet validated: may hold anything
    return "".join(c if c.isprintable() else "?" for c in text)


def _copy_metadata(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` sharing everything but ``metadata`` and its ``annotations``."""
    copy = dict(pod)
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        copy["metadata"] = metadata = dict(metadata)
        if isinstance(metadata.get("annotations"), dict):
            metadata["annotations"] = dict(metadata["annotations"])
    return copy


def _annotated(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``pod`` with ``annotations`` added (the map created when absent or null)."""
    mutated = _copy_metadata(pod)
    if not isinstance(mutated.get("metadata"), dict):
        mutated["metadata"] = {}
    metadata = mutated["metadata"]
    if not isinstance(metadata.get("annotations"), dict):
        metadata["annotations"] = {}
    metadata["annotations"].update(annotations)
    return mutated


def _scope(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``pod`` that `_annotated` can change: ``metadata.annotations``.

    ``make_patch(_scope(pod), _scope(mutated))`` gives the same patch as diffing the whole
    pods (everything else is identical) without walking the spec: a review of a captured
    fixture takes about 0.1 ms instead of 0.4 ms.
    """
    if "metadata" not in pod:
        return {}
    metadata = pod["metadata"]
    if not isinstance(metadata, dict):
        return {"metadata": metadata}
    return {"metadata": {"annotations": metadata["annotations"]} if "annotations" in metadata
            else {}}  # fmt: skip


def make_annotation_patch(
    pod: Mapping[str, Any], annotations: Mapping[str, str]
) -> jsonpatch.JsonPatch:
    """The RFC 6902 patch that adds ``annotations`` to ``pod`` (JSON Pointer escaped).

    Made by ``jsonpatch.make_patch`` between the pod and the annotated pod, so it creates
    ``/metadata/annotations`` when the map is absent and replaces it when it is null.

    Raises:
        IntentError: the patch does not turn ``pod`` into the annotated pod (a patch that
            fails to apply makes the apiserver reject the pod, even with ``failurePolicy:
            Ignore``).
    """
    mutated = _annotated(pod, annotations)
    patch = jsonpatch.make_patch(_scope(pod), _scope(mutated))
    probe = _copy_metadata(pod)  # patch paths are all under /metadata: apply in place
    try:
        applied = jsonpatch.apply_patch(probe, patch, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
        raise IntentError(f"the patch would not apply: {e}") from e
    if applied != mutated:
        raise IntentError("the patch would not give the annotated pod")
    return patch


def admit(body: object) -> Admission:
    """Review one AdmissionReview request body (parsed JSON) and decide the response.

    Not a Pod CREATE, or a pod already carrying ``gpu-intent.io/intent-version``: no
    patch. A pod with no GPU demand (`infer` gives no intent): no patch. A pod whose
    fields cannot be read (`IntentError`): no patch and a warning. Otherwise a JSON patch
    that adds the `Intent` annotations (creating ``metadata.annotations`` when absent or
    null), checked to apply to the pod before it is returned. The inference's warnings
    (a part left out, an ambiguity resolved by rule) go into ``response.warnings``.
    ``request.dryRun`` changes nothing (the webhook has no side effects).

    Raises:
        MalformedReview: ``body`` is not a dict with ``apiVersion: admission.k8s.io/v1``,
            ``kind: AdmissionReview``, a ``request`` object with a non-empty string ``uid``,
            and, for a Pod CREATE, an object ``request.object``.
    """
    request = _validate(body)["request"]
    uid = request["uid"]
    if not _is_pod_create(request):
        return Admission(_response(uid), "unchanged")
    pod: dict[str, Any] = request["object"]  # type: ignore[assignment]  # _validate checked
    ref = pod_reference(request)
    metadata = pod.get("metadata")
    existing = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(existing, dict) and ANNOTATION_VERSION in existing:
        return Admission(_response(uid), "unchanged", ref)
    try:
        inference = infer(pod)
    except IntentError as e:
        reason = f"cannot infer GPU intent: {e}"
        return Admission(allowed_with_warning(uid, reason), "error_object", ref, reason)
    intent = inference.intent
    warned = {"warnings": [_warning(w) for w in inference.warnings]} if inference.warnings else {}
    if intent is None:
        return Admission(_response(uid, **warned), "not_gpu", ref)
    try:
        patch = make_annotation_patch(pod, intent.to_annotations())
    except IntentError as e:
        reason = f"not annotating the pod: {e}"
        return Admission(allowed_with_warning(uid, reason), "error_object", ref, reason)
    encoded = base64.b64encode(json.dumps(patch.patch).encode()).decode("ascii")
    response = _response(uid, patchType="JSONPatch", patch=encoded, **warned)
    return Admission(response, "patched", ref, intent=intent)


def review(body: object) -> AdmissionReviewResponse:
    """`admit` without the bookkeeping: the AdmissionReview response for ``body``.

    Raises:
        MalformedReview: as `admit`.
    """
    return admit(body).response
