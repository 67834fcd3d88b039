"""Label and field selectors, as kube-apiserver parses and applies them.

Purely computational: strings and selector objects in, `store.Predicate` callables out.

Sources (k8s.io/apimachinery unless said otherwise):

- label selector strings: ``pkg/labels/selector.go`` (lexer and parser: ``a=b``, ``a==b``,
  ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``, ``a<1``; comma is AND;
  ``notin``/``!=`` also match objects without the key);
- ``metav1.LabelSelector`` objects (``matchLabels``/``matchExpressions``):
  ``pkg/apis/meta/v1/helpers.go`` ``LabelSelectorAsSelector`` (an empty selector selects
  everything);
- field selector strings: ``pkg/fields/selector.go`` (``=``, ``==``, ``!=``, comma is AND,
  backslash escapes); which fields each type supports: the field label conversion
  functions in kubernetes ``pkg/apis/core/v1/conversion.go`` (pods, events, nodes,
  namespaces: ``field label not supported: <f>``) and ``runtime.DefaultMetaV1FieldSelector
  Conversion`` for every other type and custom resources (``"<f>" is not a known field
  selector: only "metadata.name", "metadata.namespace"``). Values come from each type's
  ``GetAttrs``/``ToSelectableFields``: a missing string field is ``""``, a bool field is
  ``"true"``/``"false"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.store import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    BadRequest,
    Predicate,
    ResourceType,
)

__all__ = [
    "Requirement",
    "and_predicates",
    "compile_field_selector",
    "compile_label_selector",
    "field_value",
    "label_selector_matcher",
    "parse_label_selector",
    "supported_fields",
]

_SPECIALS = "!=(),<>"
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One parsed label requirement.

    ``operator`` is one of ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!`` (does not
    exist), ``gt``, ``lt``; ``==`` parses to ``=``. ``values`` holds 0 (exists, ``!``),
    1 (``=``, ``!=``, ``gt``, ``lt``) or more (``in``, ``notin``) label values.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` (a label map) satisfy this requirement."""
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if not present:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.operator == "gt" else have < want


# -- label selector strings ---------------------------------------------------------


def _lex(text: str) -> list[str]:
    """Split a selector string into tokens: identifiers and operator symbols."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIALS:
            two = text[i : i + 2]
            if two in ("==", "!="):
                tokens.append(two)
                i += 2
            else:
                tokens.append(ch)
                i += 1
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _SPECIALS:
                i += 1
            tokens.append(text[start:i])
    return tokens


def _is_ident(tok: str | None) -> bool:
    return tok is not None and tok[0] not in _SPECIALS


def _validate_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        raise BadRequest(
            f'unable to parse requirement: key: Invalid value: "{key}": prefix part must be a '
            "lowercase RFC 1123 subdomain"
        )
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        raise BadRequest(
            f'unable to parse requirement: key: Invalid value: "{key}": name part must consist '
            "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
            "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )


def _validate_value(key: str, index: int, value: str) -> None:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise BadRequest(
            f'unable to parse requirement: values[{index}][{key}]: Invalid value: "{value}": '
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
            "or 'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.pos += 1
        return tok

    def parse(self) -> tuple[Requirement, ...]:
        reqs: list[Requirement] = []
        if self.peek() is None:
            return ()
        while True:
            tok = self.peek()
            if not (_is_ident(tok) or tok == "!"):
                raise BadRequest(
                    f"found '{tok or ''}', expected: !, identifier, or 'end of string'"
                )
            reqs.append(self.requirement())
            tok = self.take()
            if tok is None:
                return tuple(reqs)
            if tok != ",":
                raise BadRequest(f"found '{tok}', expected: ',' or 'end of string'")
            if not (_is_ident(self.peek()) or self.peek() == "!"):
                raise BadRequest(f"found '{self.peek() or ''}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            key = self.take()
            if not _is_ident(key):
                raise BadRequest(f"found '{key or ''}', expected: identifier after '!'")
            assert key is not None
            _validate_key(key)
            return Requirement(key, "!")
        key = self.take()
        assert key is not None
        _validate_key(key)
        if self.peek() in (None, ","):
            return Requirement(key, "exists")
        op = self.take()
        if op in ("in", "notin"):
            values = self.value_set()
            if not values:
                raise BadRequest(
                    "unable to parse requirement: values: Invalid value: []: for 'in', "
                    "'notin' operators, values set can't be empty"
                )
        elif op in ("=", "==", "!=", ">", "<"):
            nxt = self.peek()
            values = (self.take() or "",) if _is_ident(nxt) else ("",)
            if nxt is not None and nxt != "," and not _is_ident(nxt):
                raise BadRequest(f"found '{nxt}', expected: identifier")
            op = {"==": "=", ">": "gt", "<": "lt"}.get(op, op)
        else:
            raise BadRequest(f"found '{op}', expected: {_BINARY_OPERATORS}")
        if op in ("gt", "lt"):
            try:
                int(values[0])
            except ValueError:
                raise BadRequest(
                    f'unable to parse requirement: values[0]: Invalid value: "{values[0]}": '
                    "for 'Gt', 'Lt' operators, the value must be an integer"
                ) from None
        else:
            for i, value in enumerate(values):
                _validate_value(key, i, value)
        return Requirement(key, op, values)

    def value_set(self) -> tuple[str, ...]:
        tok = self.take()
        if tok != "(":
            raise BadRequest(f"found '{tok or ''}', expected: '('")
        values: list[str] = []
        expect_value = True
        while True:
            tok = self.take()
            if tok == ")":
                if expect_value and values:
                    values.append("")  # "(a,)" has an empty last value, as in Go
                return tuple(values)
            if tok == ",":
                if expect_value:
                    values.append("")
                expect_value = True
            elif _is_ident(tok) and expect_value:
                assert tok is not None
                values.append(tok)
                expect_value = False
            else:
                raise BadRequest(f"found '{tok or ''}', expected: ',', ')' or identifier")


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector string (``app=x,tier in (a,b),!legacy``).

    An empty string selects everything (no requirements). Raises `BadRequest` with the
    parser's message on bad syntax or an invalid key or value.
    """
    return _Parser(text).parse()


def compile_label_selector(text: str | None) -> Predicate | None:
    """A predicate over objects (their ``metadata.labels``) for a label selector string,
    or None when the string is empty or None (everything matches). Raises `BadRequest`."""
    reqs = parse_label_selector(text or "")
    if not reqs:
        return None

    def predicate(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in reqs)

    return predicate


# -- metav1.LabelSelector objects ---------------------------------------------------

_EXPRESSION_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_matcher(
    selector: Mapping[str, Any] | None,
) -> Callable[[Mapping[str, str]], bool]:
    """A function ``labels -> bool`` for a ``metav1.LabelSelector`` object.

    ``{}`` and None select everything (webhook selectors default to ``{}``).
    ``matchExpressions`` operators: In, NotIn (values non-empty), Exists, DoesNotExist (no
    values). Raises `BadRequest` for an unknown operator or wrong values.
    """
    reqs: list[Requirement] = [
        Requirement(str(k), "=", (str(v),))
        for k, v in (selector or {}).get("matchLabels", {}).items()
    ]
    for i, expr in enumerate((selector or {}).get("matchExpressions") or []):
        op = _EXPRESSION_OPERATORS.get(expr.get("operator", ""))
        values = tuple(str(v) for v in expr.get("values") or ())
        if op is None:
            raise BadRequest(
                f'matchExpressions[{i}].operator: Invalid value: "{expr.get("operator")}": not a valid selector operator'
            )
        if op in ("in", "notin") and not values:
            raise BadRequest(
                f"matchExpressions[{i}].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            )
        if op in ("exists", "!") and values:
            raise BadRequest(
                f"matchExpressions[{i}].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )
        reqs.append(Requirement(str(expr.get("key", "")), op, values))
    return lambda labels: all(r.matches(labels) for r in reqs)


# -- field selectors ----------------------------------------------------------------

_BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})
#: Pods: ``PodToSelectableFields`` (kubernetes pkg/registry/core/pod/strategy.go), whose
#: ``generic.AddObjectMetaFieldsSet(..., true)`` adds ``metadata.name`` and
#: ``metadata.namespace``; the controller's pending-pod watch selects
#: ``spec.nodeName=,metadata.namespace!=<trigger namespace>``.
_TYPE_FIELDS: dict[ResourceType, tuple[str, ...]] = {
    PODS: (
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    EVENTS: (
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    NODES: ("metadata.name", "spec.unschedulable"),
    NAMESPACES: ("metadata.name", "status.phase"),
}
#: JSON paths that differ from the selector field name.
_FIELD_PATHS = {"source": "source.component"}


def supported_fields(rt: ResourceType) -> tuple[str, ...]:
    """Field selector fields ``rt`` accepts (``metadata.name``/``metadata.namespace`` for
    types without their own conversion function)."""
    return _TYPE_FIELDS.get(rt, ("metadata.name", "metadata.namespace"))


def field_value(rt: ResourceType, obj: Mapping[str, Any], name: str) -> str:
    """The string an object offers for field selector ``name`` (``""`` when missing,
    ``"true"``/``"false"`` for bool fields)."""
    value: Any = obj
    for part in _FIELD_PATHS.get(name, name).split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if name in _BOOL_FIELDS:
        return "true" if value is True else "false"
    return "" if value is None else str(value)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], "", 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current += text[i : i + 2]
            i += 2
            continue
        if text[i] == sep:
            parts.append(current)
            current = ""
        else:
            current += text[i]
        i += 1
    parts.append(current)
    return parts


def _unescape(value: str, term: str) -> str:
    out, i = "", 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=!":
                raise BadRequest(f"invalid field selector: '{term}': invalid escape sequence")
            out += value[i + 1]
            i += 2
        else:
            out += value[i]
            i += 1
    return out


def _parse_term(term: str) -> tuple[str, str, str]:
    for op in ("!=", "==", "="):
        idx = term.find(op)
        while idx > 0 and term[idx - 1] == "\\":
            idx = term.find(op, idx + 1)
        if idx >= 0:
            return term[:idx], op, _unescape(term[idx + len(op) :], term)
    raise BadRequest(f"invalid selector: '{term}'; can't understand '{term}'")


def compile_field_selector(rt: ResourceType, text: str | None) -> Predicate | None:
    """A predicate for a field selector string on type ``rt``, or None for an empty one.

    Raises `BadRequest`: bad syntax, or a field ``rt`` does not support, with the message
    of the type's real field label conversion function.
    """
    if not text:
        return None
    terms: list[tuple[str, str, str]] = []
    allowed = supported_fields(rt)
    for raw in _split_unescaped(text, ","):
        if not raw:
            continue
        name, op, value = _parse_term(raw)
        if name == "spec.host" and rt is PODS:  # kept by kube-apiserver for old clients
            name = "spec.nodeName"
        if name not in allowed:
            if rt in _TYPE_FIELDS:
                raise BadRequest(f"field label not supported: {name}")
            raise BadRequest(
                f'"{name}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
        terms.append((name, op, value))
    if not terms:
        return None

    def predicate(obj: Mapping[str, Any]) -> bool:
        for name, op, value in terms:
            equal = field_value(rt, obj, name) == value
            if equal == (op == "!="):
                return False
        return True

    return predicate


def and_predicates(predicates: Sequence[Predicate | None]) -> Predicate | None:
    """All non-None predicates combined with AND; None when there are none."""
    active = [p for p in predicates if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return lambda obj: all(p(obj) for p in active)
