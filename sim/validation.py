"""Field errors in kube-apiserver's format, and the built-in validation of pods.

Purely computational. Message shapes come from k8s.io/apimachinery
``pkg/util/validation/field/errors.go`` (``<path>: <Type>[: <value>][: <detail>]``) and
``pkg/api/errors/errors.go`` ``NewInvalid`` (``<Kind>[.<group>] "<name>" is invalid: <err>``,
several errors joined by ``, `` inside ``[...]``, each also a ``details.causes`` entry).
Pod rules are from kubernetes ``pkg/apis/core/validation/validation.go`` (``ValidatePod``,
``ValidatePodUpdate``, ``ValidateResourceRequirements``); only the subset the sim's users
can hit is implemented: object name, containers (name, image, unique names), restart
policy, resource quantities (requests <= limits, extended resources whole and with
requests == limits), DRA claims (``spec.resourceClaims`` names and sources, containers'
``resources.claims`` naming them), and spec immutability on update.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from intent.contract import IntentError
from intent.quantity import parse_quantity
from sim.store import NAMESPACES, PODS, BadRequest, Invalid, ResourceType

__all__ = [
    "OMIT",
    "UPDATABLE_POD_SPEC_FIELDS",
    "FieldError",
    "go_value",
    "invalid_error",
    "validate_name",
    "validate_pod_create",
    "validate_pod_update",
]

#: ``BadValue`` marker for errors that show no value (``field.OmitValueType``).
OMIT: Any = object()

_TYPE_TEXT = {
    "FieldValueRequired": "Required value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueNotFound": "Not found",
}
_NO_VALUE_TYPES = ("FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong")
_DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def go_value(value: Any) -> str:
    """A bad value as Go's ``field.Error`` prints it: strings quoted (``%q``), numbers and
    bools bare (``%v``), anything else as JSON (Go prints its ``%#v`` struct syntax)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=isinstance(value, Mapping))


@dataclass(frozen=True, slots=True)
class FieldError:
    """One ``field.Error``: ``type`` is the cause type (``FieldValueRequired``, ...),
    ``field`` the JSON path (``spec.containers[0].image``), ``value`` the bad value (or
    `OMIT`), ``detail`` free text."""

    type: str
    field: str
    value: Any = OMIT
    detail: str = ""

    def body(self) -> str:
        """``ErrorBody()``: the message without the field path."""
        text = _TYPE_TEXT.get(self.type, self.type)
        if self.type not in _NO_VALUE_TYPES and self.value is not OMIT:
            text += f": {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}" if self.field else self.body()

    @classmethod
    def required(cls, path: str, detail: str = "") -> FieldError:
        """``field.Required``: ``<path>: Required value[: detail]``."""
        return cls("FieldValueRequired", path, OMIT, detail)

    @classmethod
    def invalid(cls, path: str, value: Any, detail: str) -> FieldError:
        """``field.Invalid``: ``<path>: Invalid value: <value>: detail``."""
        return cls("FieldValueInvalid", path, value, detail)

    @classmethod
    def forbidden(cls, path: str, detail: str) -> FieldError:
        """``field.Forbidden``: ``<path>: Forbidden: detail``."""
        return cls("FieldValueForbidden", path, OMIT, detail)

    @classmethod
    def not_supported(cls, path: str, value: Any, supported: Sequence[Any]) -> FieldError:
        """``field.NotSupported``: ``Unsupported value: <v>: supported values: "a", "b"``."""
        listed = ", ".join(go_value(v) for v in supported)
        return cls("FieldValueNotSupported", path, value, f"supported values: {listed}")

    @classmethod
    def duplicate(cls, path: str, value: Any) -> FieldError:
        """``field.Duplicate``: ``<path>: Duplicate value: <value>``."""
        return cls("FieldValueDuplicate", path, value)


def invalid_error(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> Invalid:
    """The 422 `Invalid` error ``NewInvalid`` builds: message ``Kind.group "name" is
    invalid: err`` (``[err1, err2]`` for several) and ``details.causes``."""
    qualified = f"{kind}.{group}" if group else kind
    joined = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    message = f'{qualified} "{name}" is invalid' + (f": {joined}" if errors else "")
    details: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    details["causes"] = [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors]
    return Invalid(message, details=details)


def validate_name(rt: ResourceType, meta: Mapping[str, Any]) -> list[FieldError]:
    """``metadata.name`` and ``metadata.generateName`` rules (``ValidateObjectMeta``):
    DNS-1123 label for namespaces, DNS-1123 subdomain otherwise (max 253 characters)."""
    errors: list[FieldError] = []
    label = rt is NAMESPACES
    pattern, limit = (_DNS1123_LABEL, 63) if label else (_DNS1123_SUBDOMAIN, 253)
    what = "RFC 1123 label" if label else "RFC 1123 subdomain"
    example = "'my-name',  or '123-abc'" if label else "'example.com'"
    for key in ("name", "generateName"):
        value = meta.get(key)
        if not value:
            continue
        if not isinstance(value, str):
            errors.append(FieldError.invalid(f"metadata.{key}", value, "must be a string"))
            continue
        check = value[:-1] if key == "generateName" and value.endswith("-") else value
        if len(value) > limit:
            errors.append(
                FieldError.invalid(
                    f"metadata.{key}", value, f"must be no more than {limit} characters"
                )
            )
        elif check and not re.fullmatch(pattern, check):
            errors.append(FieldError.invalid(
                f"metadata.{key}", value,
                f"a lowercase {what} must consist of lower case alphanumeric characters, '-'"
                + ("" if label else " or '.'")
                + f", and must start and end with an alphanumeric character (e.g. {example}, "
                f"regex used for validation is '{pattern}')",
            ))  # fmt: skip
    return errors


def _quantity(value: Any, path: str) -> Decimal:
    try:
        return parse_quantity(value, path)
    except IntentError:
        raise BadRequest(
            'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
            "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        ) from None


def _native(resource: str) -> bool:
    """Overcommit is allowed only for native resources (``IsOvercommitAllowed``)."""
    return "/" not in resource or resource.startswith("kubernetes.io/")


def _validate_resources(resources: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    parsed_limits = {k: _quantity(v, f"{path}.limits[{k}]") for k, v in limits.items()}
    for name, raw in requests.items():
        request = _quantity(raw, f"{path}.requests[{name}]")
        limit = parsed_limits.get(name)
        if not _native(name):
            if request != request.to_integral_value():
                errors.append(
                    FieldError.invalid(f"{path}.requests[{name}]", str(raw), "must be an integer")
                )
            if limit is None:
                errors.append(
                    FieldError.required(
                        f"{path}.limits", "Limit must be set for non overcommitable resources"
                    )
                )
            elif limit != request:
                errors.append(
                    FieldError.invalid(
                        f"{path}.requests[{name}]",
                        str(raw),
                        f"must be equal to {name} limit of {limits[name]}",
                    )
                )
        elif limit is not None and request > limit:
            errors.append(
                FieldError.invalid(
                    f"{path}.requests",
                    str(raw),
                    f"must be less than or equal to {name} limit of {limits[name]}",
                )
            )
    return errors


def _validate_pod_claims(spec: Mapping[str, Any]) -> tuple[list[FieldError], set[str]]:
    """``validatePodResourceClaims``: each ``spec.resourceClaims[]`` entry has a unique
    DNS-1123 label ``name`` and exactly one of ``resourceClaimName`` and
    ``resourceClaimTemplateName``. Returns the errors and the claim names."""
    errors: list[FieldError] = []
    names: set[str] = set()
    for i, claim in enumerate(spec.get("resourceClaims") or ()):
        path = f"spec.resourceClaims[{i}]"
        name = claim.get("name")
        if not name:
            errors.append(FieldError.required(f"{path}.name"))
        elif name in names:
            errors.append(FieldError.duplicate(f"{path}.name", name))
        else:
            names.add(str(name))
            if not re.fullmatch(_DNS1123_LABEL, str(name)) or len(str(name)) > 63:
                errors.append(FieldError.invalid(
                    f"{path}.name", name,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character "
                    "(e.g. 'my-name',  or '123-abc', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                ))  # fmt: skip
        both = claim.get("resourceClaimName") and claim.get("resourceClaimTemplateName")
        if both:
            errors.append(FieldError.invalid(path, claim, "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"))  # fmt: skip
        elif not claim.get("resourceClaimName") and not claim.get("resourceClaimTemplateName"):
            errors.append(FieldError.invalid(path, claim, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"))  # fmt: skip
    return errors, names


def _validate_claim_refs(claims: Any, path: str, names: set[str]) -> list[FieldError]:
    """``validateResourceClaimNames``: a container's ``resources.claims[].name`` must name
    a ``spec.resourceClaims`` entry."""
    errors: list[FieldError] = []
    for j, ref in enumerate(claims or ()):
        name = (ref or {}).get("name")
        if not name:
            errors.append(FieldError.required(f"{path}[{j}].name"))
        elif name not in names:
            detail = "must be one of the names in pod.spec.resourceClaims" + (
                ": " + ", ".join(sorted(names)) if names else " which is empty"
            )
            errors.append(FieldError("FieldValueNotFound", f"{path}[{j}]", name, detail))
    return errors


def validate_pod_create(pod: Mapping[str, Any]) -> list[FieldError]:
    """What ``ValidatePod`` says about a new pod (the subset listed in the module doc)."""
    errors = validate_name(PODS, pod.get("metadata") or {})
    spec = pod.get("spec") or {}
    claim_errors, claim_names = _validate_pod_claims(spec)
    errors += claim_errors
    containers = spec.get("containers") or []
    if not containers:
        errors.append(FieldError.required("spec.containers"))
    seen: set[str] = set()
    for kind, items in (
        ("containers", containers),
        ("initContainers", spec.get("initContainers") or []),
    ):
        for i, container in enumerate(items):
            path = f"spec.{kind}[{i}]"
            name = container.get("name")
            if not name:
                errors.append(FieldError.required(f"{path}.name"))
            elif not re.fullmatch(_DNS1123_LABEL, str(name)) or len(str(name)) > 63:
                errors.append(
                    FieldError.invalid(
                        f"{path}.name",
                        name,
                        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                    )
                )
            elif name in seen:
                errors.append(FieldError.duplicate(f"{path}.name", name))
            else:
                seen.add(str(name))
            if not container.get("image"):
                errors.append(FieldError.required(f"{path}.image"))
            errors += _validate_resources(container.get("resources") or {}, f"{path}.resources")
            errors += _validate_claim_refs(
                (container.get("resources") or {}).get("claims"),
                f"{path}.resources.claims",
                claim_names,
            )
    policy = spec.get("restartPolicy", "Always")
    if policy not in ("Always", "OnFailure", "Never"):
        errors.append(
            FieldError.not_supported("spec.restartPolicy", policy, ["Always", "OnFailure", "Never"])
        )
    return errors


UPDATABLE_POD_SPEC_FIELDS = ",".join(
    (
        "`spec.containers[*].image`",
        "`spec.initContainers[*].image`",
        "`spec.activeDeadlineSeconds`",
        "`spec.tolerations` (only additions to existing tolerations)",
        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
    )
)


def validate_pod_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    """``ValidatePodUpdate``'s spec rule: only container images, activeDeadlineSeconds,
    added tolerations and a negative grace period turned to 1 may change. The detail
    lists the changed spec fields (kube-apiserver prints a ``cmp.Diff``)."""
    old_spec: dict[str, Any] = dict(old.get("spec") or {})
    munged: dict[str, Any] = json.loads(json.dumps(new.get("spec") or {}))
    errors: list[FieldError] = []
    for kind in ("containers", "initContainers"):
        old_items, new_items = old_spec.get(kind) or [], munged.get(kind) or []
        if len(old_items) != len(new_items):
            errors.append(
                FieldError.forbidden(f"spec.{kind}", "pod updates may not add or remove containers")
            )
            return errors
        for o, n in zip(old_items, new_items, strict=True):
            if "image" in o:
                n["image"] = o["image"]
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = munged.get("tolerations") or []
    if any(t not in new_tolerations for t in old_tolerations):
        errors.append(
            FieldError.forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            )
        )
    for key in ("tolerations", "activeDeadlineSeconds"):
        munged.pop(key, None)
        if key in old_spec:
            munged[key] = old_spec[key]
    grace_old = old_spec.get("terminationGracePeriodSeconds")
    if (
        isinstance(grace_old, int)
        and grace_old < 0
        and munged.get("terminationGracePeriodSeconds") == 1
    ):
        munged["terminationGracePeriodSeconds"] = grace_old
    if munged != old_spec:
        changed = sorted(k for k in set(munged) | set(old_spec) if munged.get(k) != old_spec.get(k))
        diff = "\n".join(
            f"  spec.{k}: {go_value(old_spec.get(k))} -> {go_value(munged.get(k))}" for k in changed
        )
        errors.append(
            FieldError.forbidden(
                "spec",
                f"pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{diff}",
            )
        )
    return errors
