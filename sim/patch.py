"""PATCH bodies, applied as kube-apiserver applies them.

Purely computational: ``apply_patch(content_type, current, body, custom=...)`` returns the
patched object or raises the `ApiError` the real server answers with. Sources:
k8s.io/apiserver ``pkg/endpoints/handlers/patch.go`` (content types, error codes) and
k8s.io/apimachinery ``pkg/util/strategicpatch/patch.go`` (strategic merge).

- ``application/json-patch+json`` (RFC 6902, the ``jsonpatch`` library): a body that is not
  a patch is 400 BadRequest; an operation that cannot apply (missing path, failed
  ``test``) is 422 Invalid ``the server rejected our request due to an error in our
  request`` (``NewGenericServerResponse(422, ...)``, which drops the library's text; we
  keep it in ``details.causes``).
- ``application/merge-patch+json`` (RFC 7386): objects merge, ``null`` deletes, anything
  else replaces.
- ``application/strategic-merge-patch+json``: built-in types only. As merge patch, except
  lists with a patch merge key merge by that key (see `MERGE_KEYS`), ``metadata.finalizers``
  (``patchStrategy=merge`` on a list of strings) is a union, and the directives
  ``$patch: delete|replace``, ``$deleteFromPrimitiveList/<f>``, ``$retainKeys`` and
  ``$setElementOrder/<f>`` are honoured (the last two by ignoring them, which gives the same
  result for the lists we merge). Custom resources answer 415, as ``CRDs`` do not accept it.
- ``application/apply-patch+yaml`` (server-side apply): 415 here, it is not implemented.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer

from sim.store import ApiError, BadRequest, Invalid, Obj, json_copy

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_KEYS",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "UnsupportedMediaType",
    "apply_patch",
    "merge_patch",
    "patch_media_type",
    "strategic_merge_patch",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

#: Patch merge keys of the built-in list fields the sim's objects carry, by JSON path
#: without list indexes (``+patchMergeKey`` tags in k8s.io/api core/v1 and meta/v1 types).
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "containers", "env"): "name",
    ("spec", "initContainers", "env"): "name",
    ("spec", "containers", "volumeMounts"): "mountPath",
    ("spec", "initContainers", "volumeMounts"): "mountPath",
    ("spec", "containers", "ports"): "containerPort",
    ("spec", "initContainers", "ports"): "containerPort",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
#: Lists of scalars with ``patchStrategy=merge``: a strategic patch adds to them.
MERGE_SETS: frozenset[tuple[str, ...]] = frozenset({("metadata", "finalizers")})


class UnsupportedMediaType(ApiError):
    """415: the PATCH content type is not accepted for this resource."""

    code, reason = 415, "UnsupportedMediaType"


def accepted_types(custom: bool) -> list[str]:
    """PATCH content types the sim accepts for built-in (``custom=False``) or custom types."""
    return [JSON_PATCH, MERGE_PATCH] if custom else [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH]


def _unsupported(custom: bool, extra: str = "") -> UnsupportedMediaType:
    return UnsupportedMediaType(
        f"{extra}the body of the request was in an unknown format - accepted media types "
        f"include: {', '.join(accepted_types(custom))}"
    )


def patch_media_type(content_type: str, *, custom: bool) -> str:
    """The media type of a PATCH ``Content-Type`` header, checked before anything else is
    (the handler answers 415 even for a missing object). Raises `UnsupportedMediaType`."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == APPLY_PATCH:
        raise _unsupported(
            custom,
            "server-side apply (application/apply-patch+yaml) is not supported by the simulated apiserver: ",
        )
    if media not in accepted_types(custom):
        raise _unsupported(custom)
    return media


def apply_patch(content_type: str, current: Obj, body: bytes, *, custom: bool) -> Obj:
    """Apply a PATCH ``body`` of ``content_type`` to (a copy of) ``current``.

    ``custom`` marks custom resources (no strategic merge). Raises `UnsupportedMediaType`
    (415), `BadRequest` (400: body not JSON or not a patch), `Invalid` (422: a JSON patch
    operation that does not apply).
    """
    media = patch_media_type(content_type, custom=custom)
    try:
        patch = json.loads(body or b"null")
    except ValueError as e:
        raise BadRequest(f"error decoding patch: {e}") from None
    if media == JSON_PATCH:
        return _json_patch(current, patch)
    if not isinstance(patch, dict):
        raise BadRequest("error decoding patch: the patch must be a JSON object")
    if media == MERGE_PATCH:
        merged: Obj = merge_patch(current, patch)
        return merged
    return strategic_merge_patch(current, patch)


def _json_patch(current: Obj, ops: Any) -> Obj:
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise BadRequest("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        patch = jsonpatch.JsonPatch(ops)
        result = patch.apply(json_copy(current))
    except jsonpatch.InvalidJsonPatch as e:
        raise BadRequest(str(e)) from None
    except (
        jsonpatch.JsonPatchException,
        jsonpointer.JsonPointerException,
        TypeError,
        KeyError,
    ) as e:
        raise Invalid(
            "the server rejected our request due to an error in our request",
            details={"causes": [{"reason": "FieldValueInvalid", "message": str(e)}]},
        ) from None
    if not isinstance(result, dict):
        raise Invalid("the server rejected our request due to an error in our request")
    return dict(result)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value, inputs untouched (``target`` is
    copied once and the patch merged into the copy)."""
    if not isinstance(patch, Mapping):
        return json_copy(patch)
    return _merge_into(json_copy(dict(target)) if isinstance(target, Mapping) else None, patch)


def _merge_into(owned: Any, patch: Any) -> Any:
    """`merge_patch` on ``owned``, which nobody else holds: merged in place."""
    if not isinstance(patch, Mapping):
        return json_copy(patch)
    result = owned if isinstance(owned, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_into(result.get(key), value)
    return result


def strategic_merge_patch(target: Obj, patch: Mapping[str, Any]) -> Obj:
    """Strategic merge patch for built-in types (see the module doc); returns a new object.
    ``target`` is copied once (`json_copy`) and the patch merged into the copy in place."""
    result = _smp_map(json_copy(dict(target)), patch, ())
    assert isinstance(result, dict)
    return result


def _smp_map(owned: Any, patch: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """Merge ``patch`` into ``owned``, a dict nobody else holds (a part of the copy
    `strategic_merge_patch` made), in place; anything but a dict is replaced."""
    if patch.get("$patch") == "replace":
        return {k: json_copy(v) for k, v in patch.items() if k != "$patch"}
    result: dict[str, Any] = owned if isinstance(owned, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):  # $patch, $retainKeys, $setElementOrder/...
            continue
        child = (*path, key)
        if value is None or (isinstance(value, Mapping) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, Mapping):
            result[key] = _smp_map(result.get(key), value, child)
        elif isinstance(value, list) and child in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _smp_list(result[key], value, child, MERGE_KEYS[child])
        elif isinstance(value, list) and child in MERGE_SETS and isinstance(result.get(key), list):
            result[key] = result[key] + [v for v in value if v not in result[key]]
        else:
            result[key] = _strip_directives(value)
    return result


def _smp_list(owned: list[Any], patch: list[Any], path: tuple[str, ...], key: str) -> list[Any]:
    """Merge ``patch`` into the list ``owned`` (nobody else holds it) by merge key ``key``,
    in place."""
    result = owned
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            if isinstance(item, Mapping) and item.get("$patch") == "replace":
                return []
            raise BadRequest(
                f"map: {_strip_directives(item)} does not contain declared merge key: {key}"
            )
        index = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, Mapping) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = _smp_map(result[index], item, path)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
