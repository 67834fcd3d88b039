"""Label and field selectors parse and match as kube-apiserver's do."""

from __future__ import annotations

from typing import Any

import pytest

from sim.selectors import (
    Requirement,
    and_predicates,
    compile_field_selector,
    compile_label_selector,
    field_value,
    label_selector_matcher,
    parse_label_selector,
)
from sim.store import EVENTS, LEASES, NODECLAIMS, NODES, PODS, BadRequest


def obj(labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "namespace": "ns", "labels": labels or {}}, **extra}


def matches(selector: str, labels: dict[str, str]) -> bool:
    predicate = compile_label_selector(selector)
    assert predicate is not None
    return predicate(obj(labels))


def test_every_operator_parses_to_its_requirement() -> None:
    reqs = parse_label_selector("a=1, b==2,c!=3,d in (x, y),e notin (z),f,!g,h>4,i<5")
    assert reqs == (
        Requirement("a", "=", ("1",)),
        Requirement("b", "=", ("2",)),
        Requirement("c", "!=", ("3",)),
        Requirement("d", "in", ("x", "y")),
        Requirement("e", "notin", ("z",)),
        Requirement("f", "exists"),
        Requirement("g", "!"),
        Requirement("h", "gt", ("4",)),
        Requirement("i", "lt", ("5",)),
    )


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app=web", {}, False),
        ("app!=web", {}, True),  # != and notin also select objects without the key
        ("app!=web", {"app": "web"}, False),
        ("tier in (a,b)", {"tier": "b"}, True),
        ("tier in (a,b)", {}, False),
        ("tier notin (a,b)", {}, True),
        ("tier notin (a,b)", {"tier": "a"}, False),
        ("gpu", {"gpu": ""}, True),
        ("!gpu", {"gpu": ""}, False),
        ("!gpu", {}, True),
        ("n>3", {"n": "4"}, True),
        ("n>3", {"n": "3"}, False),
        ("n<3", {"n": "x"}, False),
        ("app=web,tier in (a)", {"app": "web", "tier": "b"}, False),
        ("app=", {"app": ""}, True),
        ("example.com/team=ml", {"example.com/team": "ml"}, True),
    ],
)
def test_label_selector_matching(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected


def test_empty_label_selector_selects_everything() -> None:
    assert compile_label_selector("") is None
    assert compile_label_selector(None) is None


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a in b", "found 'b', expected: '('"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a=b,", "expected: identifier after ','"),
        ("!", "expected: identifier after '!'"),
        ("=b", "found '=', expected: !, identifier, or 'end of string'"),
        ("a (b)", "found '(', expected: in, notin, =, ==, !=, gt, lt"),
        ("a in ()", "values set can't be empty"),
        ("-bad=x", 'key: Invalid value: "-bad"'),
        ("a=-x-", "a valid label must be an empty string"),
        ("n>x", "the value must be an integer"),
    ],
)
def test_bad_label_selectors_are_bad_requests(selector: str, message: str) -> None:
    with pytest.raises(BadRequest) as err:
        parse_label_selector(selector)
    assert message in err.value.message
    assert err.value.code == 400


def test_label_selector_object_semantics() -> None:
    match = label_selector_matcher(
        {
            "matchLabels": {"team": "ml"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "stage"]},
                {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    good = {"team": "ml", "env": "prod", "gpu": ""}
    assert match(good)
    assert not match({**good, "hami.io/webhook": "ignore"})
    assert not match({**good, "legacy": "1"})
    assert not match({**good, "team": "web"})
    assert not match({k: v for k, v in good.items() if k != "gpu"})
    assert label_selector_matcher({})({"anything": "x"})
    assert label_selector_matcher(None)({})


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
    ],
)
def test_invalid_label_selector_objects(selector: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        label_selector_matcher(selector)


def test_pod_field_selectors() -> None:
    bound = obj(
        spec={"nodeName": "n1", "schedulerName": "kai-scheduler"}, status={"phase": "Running"}
    )
    pending = obj(spec={}, status={"phase": "Pending"})
    unbound = compile_field_selector(PODS, "spec.nodeName=")
    assert unbound is not None
    assert unbound(pending) and not unbound(bound)  # a missing field compares as ""
    running_elsewhere = compile_field_selector(PODS, "status.phase==Running,spec.nodeName!=n2")
    assert running_elsewhere is not None
    assert running_elsewhere(bound) and not running_elsewhere(pending)
    legacy = compile_field_selector(PODS, "spec.host=n1")  # kept for old clients
    assert legacy is not None and legacy(bound)
    assert compile_field_selector(PODS, "") is None


def test_bool_and_nested_fields() -> None:
    node = {"metadata": {"name": "n"}, "spec": {}}
    schedulable = compile_field_selector(NODES, "spec.unschedulable=false")
    assert schedulable is not None and schedulable(node)
    assert not schedulable({"metadata": {"name": "n"}, "spec": {"unschedulable": True}})
    event = {"metadata": {"name": "e"}, "source": {"component": "karpenter"}, "reason": "Nominated"}
    assert field_value(EVENTS, event, "source") == "karpenter"
    by_source = compile_field_selector(EVENTS, "source=karpenter,reason=Nominated,type=")
    assert by_source is not None and by_source(event)


def test_escaped_values() -> None:
    predicate = compile_field_selector(PODS, r"metadata.name=a\,b")
    assert predicate is not None
    assert predicate({"metadata": {"name": "a,b"}})


@pytest.mark.parametrize(
    ("rt", "selector", "message"),
    [
        (PODS, "status.hostIP=1.2.3.4", "field label not supported: status.hostIP"),
        (NODES, "metadata.namespace=x", "field label not supported: metadata.namespace"),
        (EVENTS, "count=1", "field label not supported: count"),
        (
            NODECLAIMS,
            "status.nodeName=n",
            '"status.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        (
            LEASES,
            "spec.holderIdentity=x",
            '"spec.holderIdentity" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        (
            PODS,
            "spec.nodeName",
            "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'",
        ),
    ],
)
def test_unsupported_fields_and_bad_syntax(rt: Any, selector: str, message: str) -> None:
    with pytest.raises(BadRequest) as err:
        compile_field_selector(rt, selector)
    assert err.value.message == message


def test_and_predicates() -> None:
    assert and_predicates([None, None]) is None
    yes = compile_label_selector("a=1")
    no = compile_label_selector("b=1")
    combined = and_predicates([yes, None, no])
    assert combined is not None
    assert not combined(obj({"a": "1"}))
    assert combined(obj({"a": "1", "b": "1"}))
