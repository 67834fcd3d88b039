"""What the Karpenter CRDs make kube-apiserver enforce on NodeClaims and NodePools.

`install(store)` loads the CRD YAMLs shipped as package data (``sim/crds/``,
copies of Karpenter v1.14.1 ``pkg/apis/crds/``) and registers one store validator per type.
Like the apiextensions-apiserver (k8s.io/apiextensions-apiserver ``pkg/registry/
customresource``, ``pkg/apiserver/schema``), on every create and update it, in order:

1. prunes unknown fields (structural pruning; everything under
   ``x-kubernetes-preserve-unknown-fields`` is kept; ``metadata`` is left alone) and
   ``null`` values of non-``nullable`` fields, **in place** (the store commits the object
   it validated, so this also covers in-process writers);
2. applies ``default`` values top-down (a defaulted object gets its nested defaults);
3. validates the structural-schema subset: ``type`` (object, array, string, integer,
   number, boolean; ``x-kubernetes-int-or-string``), ``required``, ``properties``,
   ``additionalProperties``, ``items``, ``enum``, ``pattern``, ``minLength``,
   ``maxLength``, ``minimum``, ``maximum``, ``maxItems``, ``maxProperties``,
   ``format: date-time`` (RFC 3339), ``x-kubernetes-list-type: map|set`` uniqueness;
4. evaluates the ``x-kubernetes-validations`` CEL rules. There is no CEL interpreter:
   `CEL_RULES` implements each rule of these two CRDs, keyed by its exact text. That is
   all 19 of them (``self == oldSelf`` "spec is immutable", the nodeClassRef group/kind
   transition rules, ``self != ''``, the requirement operator/values/minValues rules,
   restricted label keys and domains, budget schedule/duration, static NodePool rules).
   A rule not in the table (a future CRD) is skipped; `unknown_rules` lists them.
   Transition rules (``oldSelf``) run only on update when the old value exists.

Errors are one `store.Invalid` (422) in ``NewInvalid``'s format, e.g.
``NodeClaim.karpenter.sh "x" is invalid: spec.nodeClassRef: Required value``; schema
messages follow apiextensions' conversion of kube-openapi errors (``spec.weight in body
should be less than or equal to 100``), CEL ones ``<path>: Invalid value: "<type>":
<message>``. Not implemented: validation ratcheting (unchanged invalid fields pass on
update since 1.30), ``metadata`` validation/pruning beyond the store's, the ``scale``
subresource, CEL cost limits.
"""

from __future__ import annotations

import copy
import logging
import re
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import yaml

from sim.store import NODECLAIMS, NODEPOOLS, Obj, ResourceType, Store
from sim.validation import OMIT, FieldError, invalid_error

__all__ = [
    "CEL_RULES",
    "CRD_FILES",
    "install",
    "load_crd",
    "schema_for",
    "unknown_rules",
    "validator_for",
]

log = logging.getLogger(__name__)

CRD_FILES: Mapping[ResourceType, str] = {
    NODECLAIMS: "karpenter.sh_nodeclaims.yaml",
    NODEPOOLS: "karpenter.sh_nodepools.yaml",
}

_RESTRICTED = ("karpenter.sh/capacity-type", "karpenter.sh/nodepool")


def _domain(key: str) -> str:
    return key.split("/", 1)[0]


def _ok_domain(key: Any) -> bool:
    return key in _RESTRICTED or not _domain(str(key)).endswith("karpenter.sh")


def _all(items: Any, test: Callable[[Any], bool]) -> bool:
    try:
        return all(test(x) for x in items)
    except (KeyError, TypeError, ValueError, IndexError):  # a CEL evaluation error fails the rule
        return False


def _cel_int(value: Any) -> int:
    if isinstance(value, str) and not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(value)
    return int(value)


#: ``rule text -> fn(self, oldSelf)``; ``oldSelf`` is None for rules without it.
CEL_RULES: dict[str, Callable[[Any, Any], bool]] = {
    "self == oldSelf": lambda s, o: bool(s == o),
    "self.group == oldSelf.group": lambda s, o: s.get("group") == o.get("group"),
    "self.kind == oldSelf.kind": lambda s, o: s.get("kind") == o.get("kind"),
    "has(self.replicas) == has(oldSelf.replicas)": lambda s, o: ("replicas" in s) == ("replicas" in o),
    "self != ''": lambda s, o: s != "",
    'self != "kubernetes.io/hostname"': lambda s, o: s != "kubernetes.io/hostname",
    'self != "karpenter.sh/nodepool"': lambda s, o: s != "karpenter.sh/nodepool",
    'self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")': lambda s, o: _ok_domain(s),
    'self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))': lambda s, o: _all(s, _ok_domain),
    'self.all(x, x != "karpenter.sh/nodepool")': lambda s, o: _all(s, lambda x: x != "karpenter.sh/nodepool"),
    'self.all(x, x != "kubernetes.io/hostname")': lambda s, o: _all(s, lambda x: x != "kubernetes.io/hostname"),
    "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)": lambda s, o: _all(
        s, lambda x: len(x["values"]) != 0 if x["operator"] == "In" else True
    ),
    "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)": lambda s, o: _all(
        s, lambda x: (len(x["values"]) == 1 and _cel_int(x["values"][0]) >= 0) if x["operator"] in ("Gt", "Lt", "Gte", "Lte") else True
    ),
    "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)": lambda s, o: _all(
        s, lambda x: len(x["values"]) >= x["minValues"] if x["operator"] == "In" and "minValues" in x else True
    ),
    "self.all(x, has(x.schedule) == has(x.duration))": lambda s, o: _all(s, lambda x: ("schedule" in x) == ("duration" in x)),
    "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))": lambda s, o: (
        "replicas" not in s or not s.get("limits") or set(s["limits"]) == {"nodes"}
    ),
    "!has(self.replicas) || !has(self.weight)": lambda s, o: "replicas" not in s or "weight" not in s,
}  # fmt: skip


@cache
def load_crd(filename: str) -> Obj:
    """A CRD YAML shipped in ``sim/crds/``, parsed."""
    text = resources.files("sim").joinpath("crds", filename).read_text(encoding="utf-8")
    crd = yaml.safe_load(text)
    assert isinstance(crd, dict)
    return crd


def schema_for(rt: ResourceType) -> Obj:
    """The ``openAPIV3Schema`` of the storage version of ``rt``'s CRD."""
    crd = load_crd(CRD_FILES[rt])
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = version["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def _walk_rules(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for rule in schema.get("x-kubernetes-validations") or []:
            yield rule["rule"]
        for value in schema.values():
            yield from _walk_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _walk_rules(value)


def unknown_rules() -> set[str]:
    """CEL rules in the shipped CRDs that `CEL_RULES` does not implement (skipped)."""
    return {r for rt in CRD_FILES for r in _walk_rules(schema_for(rt))} - set(CEL_RULES)


# -- pruning and defaulting ---------------------------------------------------------


def _prune(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for key in list(value):
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if value[key] is None and not (sub or {}).get("nullable") and (sub or not preserve):
                del value[key]
            elif sub is not None:
                _prune(value[key], sub)
            elif not preserve and extra is not True:
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _prune(item, schema["items"])


def _default(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _default(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in (schema.get("properties") or {}):
                    _default(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])


# -- validation ---------------------------------------------------------------------

_DATE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})?"
)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", dict: "object", list: "array"}.get(type(value), "null")


def _type_ok(value: Any, schema: Mapping[str, Any]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return _type_name(value) in ("integer", "string")
    want = schema.get("type")
    have = _type_name(value)
    return want is None or want == have or (want == "number" and have == "integer")


def _is_date_time(text: str) -> bool:
    if not _DATE_TIME.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text.replace("z", "Z").replace("t", "T").replace(" ", "T"))
    except ValueError:
        return False
    return True


def _check_scalar(
    value: Any, schema: Mapping[str, Any], path: str, errors: list[FieldError]
) -> None:
    if "enum" in schema and value not in schema["enum"]:
        errors.append(FieldError.not_supported(path, value, schema["enum"]))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(
                FieldError(
                    "FieldValueTooLong",
                    path,
                    OMIT,
                    f"may not be more than {schema['maxLength']} bytes",
                )
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(
                FieldError.invalid(
                    path,
                    value,
                    f"{path} in body should be at least {schema['minLength']} chars long",
                )
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(
                FieldError.invalid(
                    path, value, f"{path} in body should match '{schema['pattern']}'"
                )
            )
        if schema.get("format") == "date-time" and not _is_date_time(value):
            errors.append(
                FieldError.invalid(
                    path, value, f'{path} in body must be of type date-time: "{value}"'
                )
            )
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(
                FieldError.invalid(
                    path,
                    value,
                    f"{path} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(
                FieldError.invalid(
                    path,
                    value,
                    f"{path} in body should be less than or equal to {schema['maximum']}",
                )
            )


def _validate(
    value: Any, schema: Mapping[str, Any], path: str, old: Any, errors: list[FieldError]
) -> None:
    """Append the errors of ``value`` at ``path`` against ``schema``; ``old`` is the old
    value at the same path (`OMIT` when there is none: create, or new field)."""
    if not _type_ok(value, schema):
        have = _type_name(value)
        errors.append(
            FieldError(
                "FieldValueTypeInvalid",
                path,
                have,
                f'{path} in body must be of type {schema.get("type")}: "{have}"',
            )
        )
        return
    _check_scalar(value, schema, path, errors)
    if isinstance(value, dict):
        for name in schema.get("required") or []:
            if name not in value:
                errors.append(FieldError.required(f"{path}.{name}" if path else name))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errors.append(
                FieldError(
                    "FieldValueTooMany",
                    path,
                    len(value),
                    f"must have at most {schema['maxProperties']} items",
                )
            )
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                continue
            child_path = (
                f"{path}.{key}" if path and key in props else (f"{path}[{key}]" if path else key)
            )
            old_child = old.get(key, OMIT) if isinstance(old, dict) else OMIT
            _validate(child, sub, child_path, old_child, errors)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(
                FieldError(
                    "FieldValueTooMany",
                    path,
                    len(value),
                    f"must have at most {schema['maxItems']} items",
                )
            )
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _validate(item, items, f"{path}[{i}]", OMIT, errors)
        _check_unique(value, schema, path, errors)
    _check_rules(value, schema, path, old, errors)


def _check_unique(
    value: list[Any], schema: Mapping[str, Any], path: str, errors: list[FieldError]
) -> None:
    list_type = schema.get("x-kubernetes-list-type")
    seen: list[Any] = []
    for i, item in enumerate(value):
        if list_type == "map" and isinstance(item, dict):
            key = {k: item.get(k) for k in schema.get("x-kubernetes-list-map-keys") or []}
        elif list_type == "set":
            key = item
        else:
            return
        if key in seen:
            errors.append(FieldError.duplicate(f"{path}[{i}]", key))
        seen.append(key)


def _check_rules(
    value: Any, schema: Mapping[str, Any], path: str, old: Any, errors: list[FieldError]
) -> None:
    for rule in schema.get("x-kubernetes-validations") or []:
        text = rule["rule"]
        fn = CEL_RULES.get(text)
        if fn is None:
            log.debug("skipping CEL rule not implemented by the sim: %s", text)
            continue
        transition = "oldSelf" in text
        if transition and old is OMIT:
            continue
        if not fn(value, old if transition else None):
            message = rule.get("message") or f"failed rule: {text}"
            errors.append(FieldError.invalid(path, schema.get("type", "object"), message))


def validator_for(rt: ResourceType) -> Callable[[Obj | None, Obj], None]:
    """The store validator for ``rt``: prunes and defaults ``new`` in place, then raises
    `store.Invalid` with every schema and CEL error (``old`` is None on create)."""
    schema = schema_for(rt)

    def validate(old: Obj | None, new: Obj) -> None:
        rest = {k: v for k, v in new.items() if k != "metadata"}  # metadata is not pruned
        _prune(rest, schema)
        for key in [k for k in new if k != "metadata" and k not in rest]:
            del new[key]
        _default(new, schema)
        errors: list[FieldError] = []
        _validate(new, schema, "", OMIT if old is None else old, errors)
        if errors:
            name = str((new.get("metadata") or {}).get("name", ""))
            raise invalid_error(rt.kind, rt.group, name, errors)

    return validate


_installed: weakref.WeakSet[Store] = weakref.WeakSet()


def install(store: Store) -> None:
    """Register the NodeClaim and NodePool validators on ``store`` (once per store)."""
    if store in _installed:
        return
    _installed.add(store)
    for rt in CRD_FILES:
        store.add_validator(rt, validator_for(rt))
