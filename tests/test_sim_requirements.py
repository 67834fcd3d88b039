"""Karpenter's requirement algebra (sim.requirements), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from sim.requirements import (
    WELL_KNOWN_LABELS,
    Requirement,
    Requirements,
    from_labels,
    from_node_selector,
    nodepool_requirements,
    pod_requirements,
    validate_pod,
)


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement.new(key, op, values)


def reqs(*items: Requirement) -> Requirements:
    return Requirements(items)


@pytest.mark.parametrize(
    ("a", "b", "allowed", "denied"),
    [
        (req("k", "In", "a", "b"), req("k", "In", "b", "c"), ["b"], ["a", "c"]),
        (req("k", "In", "a", "b"), req("k", "NotIn", "a"), ["b"], ["a", "z"]),
        (req("k", "NotIn", "a"), req("k", "NotIn", "b"), ["z"], ["a", "b"]),
        (req("k", "Exists"), req("k", "In", "x"), ["x"], ["y"]),
        (req("k", "Exists"), req("k", "DoesNotExist"), [], ["x"]),
        (req("k", "Gt", "2"), req("k", "Lt", "5"), ["3", "4"], ["2", "5", "abc"]),
        (req("k", "Gt", "2"), req("k", "In", "1", "3", "x"), ["3"], ["1", "x"]),
        (req("k", "Gt", "5"), req("k", "Lt", "5"), [], ["5", "6"]),
    ],
)
def test_intersection_allows_only_common_values(
    a: Requirement, b: Requirement, allowed: list[str], denied: list[str]
) -> None:
    both = a.intersection(b)
    assert both == b.intersection(a)
    assert all(both.has(v) for v in allowed)
    assert not any(both.has(v) for v in denied)
    assert a.has_intersection(b) == (both.size() > 0)


@pytest.mark.parametrize(
    ("requirement", "operator", "text"),
    [
        (req("k", "In", "b", "a"), "In", "k In [a b]"),
        (req("k", "NotIn", "a"), "NotIn", "k NotIn [a]"),
        (req("k", "Exists"), "Exists", "k Exists"),
        (req("k", "DoesNotExist"), "DoesNotExist", "k DoesNotExist"),
        (req("k", "Gt", "3"), "Exists", "k Exists >3"),
        (req("k", "In", *"abcdefg"), "In", "k In [a b c d e and 2 others]"),
    ],
)
def test_operator_and_string_match_karpenter(
    requirement: Requirement, operator: str, text: str
) -> None:
    assert requirement.operator == operator
    assert str(requirement) == text


def test_beta_keys_are_normalized() -> None:
    assert list(from_labels({"beta.kubernetes.io/arch": "amd64"})) == ["kubernetes.io/arch"]


def test_node_selector_requirements_round_trip_bounds_as_two_entries() -> None:
    bounded = req("k", "Gt", "1").intersection(req("k", "Lt", "9"))
    assert bounded.node_selector_requirements() == [
        {"key": "k", "operator": "Gt", "values": ["1"]},
        {"key": "k", "operator": "Lt", "values": ["9"]},
    ]
    exprs = reqs(req("a", "In", "y", "x"), req("b", "DoesNotExist")).node_selector_requirements()
    assert exprs == [
        {"key": "a", "operator": "In", "values": ["x", "y"]},
        {"key": "b", "operator": "DoesNotExist"},
    ]
    assert from_node_selector(exprs) == reqs(req("a", "In", "x", "y"), req("b", "DoesNotExist"))


GPU_POOL = reqs(req("karpenter.k8s.aws/instance-gpu-name", "In", "t4", "l4"))


@pytest.mark.parametrize(
    ("pod", "error"),
    [
        (reqs(req("karpenter.k8s.aws/instance-gpu-name", "In", "t4")), None),
        (reqs(req("topology.kubernetes.io/zone", "In", "us-east-1a")), None),  # well known
        (reqs(req("team", "NotIn", "a")), None),  # excluding an undefined key is fine
        (reqs(req("team", "DoesNotExist")), None),
        (
            reqs(req("nvidia.com/gpu.product", "In", "Tesla-T4")),
            'label "nvidia.com/gpu.product" does not have known values',
        ),
        (
            reqs(req("instance-gpu-name", "In", "t4")),
            'label "instance-gpu-name" does not have known values'
            ' (typo of "karpenter.k8s.aws/instance-gpu-name"?)',
        ),
        (
            reqs(req("karpenter.k8s.aws/instance-gpu-name", "In", "a100")),
            "key karpenter.k8s.aws/instance-gpu-name, karpenter.k8s.aws/instance-gpu-name In [a100]"
            " not in karpenter.k8s.aws/instance-gpu-name In [l4 t4]",
        ),
    ],
)
def test_compatible_with_karpenter_semantics(pod: Requirements, error: str | None) -> None:
    assert GPU_POOL.compatible(pod, WELL_KNOWN_LABELS) == error


def test_compatible_without_allow_undefined_denies_well_known_keys() -> None:
    node = from_labels({"kubernetes.io/hostname": "n1"})
    assert node.compatible(reqs(req("kubernetes.io/arch", "In", "amd64"))) == (
        'label "kubernetes.io/arch" does not have known values'
    )


def test_both_excluding_requirements_intersect() -> None:
    assert reqs(req("k", "NotIn", "a")).intersects(reqs(req("k", "DoesNotExist"))) is None


def test_labels_skip_well_known_and_restricted_keys() -> None:
    r = reqs(
        req("team", "In", "b", "a"),
        req("node.kubernetes.io/instance-type", "In", "g4dn.xlarge"),
        req("karpenter.sh/foo", "In", "x"),
        req("gone", "DoesNotExist"),
    )
    assert r.labels() == {"team": "a"}


def pool(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "gpu",
                    },
                    **spec,
                },
            }
        },
    }


def test_nodepool_requirements_include_labels_pool_and_nodeclass() -> None:
    r = nodepool_requirements(
        pool(
            requirements=[
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ]
        )
    )
    assert str(r) == (
        "karpenter.k8s.aws/ec2nodeclass In [gpu], karpenter.sh/capacity-type In [on-demand], "
        "karpenter.sh/nodepool In [gpu], team In [ml]"
    )


def affinity_pod(
    selector: dict[str, str] | None = None,
    required: list[list[dict[str, Any]]] | None = None,
    preferred: list[tuple[int, list[dict[str, Any]]]] | None = None,
) -> dict[str, Any]:
    node_affinity: dict[str, Any] = {}
    if required is not None:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in required]
        }
    if preferred is not None:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": {"matchExpressions": t}} for w, t in preferred
        ]
    return {
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {"nodeSelector": selector or {}, "affinity": {"nodeAffinity": node_affinity}},
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def test_pod_requirements_take_selector_heaviest_preference_and_a_required_term() -> None:
    pod = affinity_pod(
        {"kubernetes.io/arch": "amd64"},
        required=[[expr("a", "In", "1")], [expr("a", "In", "2")]],
        preferred=[(1, [expr("b", "In", "light")]), (50, [expr("b", "In", "heavy")])],
    )
    assert str(pod_requirements(pod)) == "a In [1], b In [heavy], kubernetes.io/arch In [amd64]"
    relaxed = pod_requirements(pod, skip_required=1, skip_preferred=1)
    assert str(relaxed) == "a In [2], b In [light], kubernetes.io/arch In [amd64]"
    assert "b" not in pod_requirements(pod, skip_preferred=2)


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (affinity_pod({"karpenter.k8s.aws/instance-gpu-name": "t4"}), None),
        (affinity_pod({"nvidia.com/gpu.product": "Tesla-T4"}), None),  # unknown, not restricted
        (affinity_pod({"node.kubernetes.io/custom": "x"}), None),  # excepted subdomain
        (
            affinity_pod({"kubernetes.io/hostname": "n1"}),
            "label kubernetes.io/hostname is restricted",
        ),
        (
            affinity_pod(required=[[expr("karpenter.sh/foo", "Exists")]]),
            "label karpenter.sh/foo is restricted",
        ),
        (
            affinity_pod({"karpenter.k8s.aws/nope": "x"}),
            "label karpenter.k8s.aws/nope is restricted",
        ),
        (
            affinity_pod(preferred=[(1, [expr("kubernetes.io/hostname", "In", "n")])]),
            "is restricted",
        ),
        (
            affinity_pod(required=[[expr("k", "Gt", "x")]]),
            "must have a single positive integer value",
        ),
        (affinity_pod(required=[[expr("k", "In")]]), "must have a value defined"),
        (affinity_pod(required=[[expr("k", "Near", "1")]]), "unsupported operator Near"),
        (
            affinity_pod(required=[[expr("karpenter.sh/nodepool", "DoesNotExist")]]),
            "configured to not run on a Karpenter provisioned node via the karpenter.sh/nodepool DoesNotExist requirement",
        ),
    ],
)
def test_validate_pod_ignores_what_karpenter_ignores(
    pod: dict[str, Any], reason: str | None
) -> None:
    result = validate_pod(pod)
    if reason is None:
        assert result is None
    else:
        assert result is not None and reason in result


def test_validate_pod_rejects_match_fields() -> None:
    pod = affinity_pod()
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "In", "n1")]}]
    }
    assert validate_pod(pod) == "node selector term with matchFields is not supported"


NODE = from_labels(
    {"kubernetes.io/hostname": "n1", "karpenter.k8s.aws/instance-gpu-name": "t4", "gpu": "on"}
)


@pytest.mark.parametrize(
    "pod",
    [
        reqs(req("karpenter.k8s.aws/instance-gpu-name", "In", "t4")),
        reqs(req("karpenter.k8s.aws/instance-gpu-name", "In", "l4")),
        reqs(req("karpenter.k8s.aws/instance-gpu-name", "NotIn", "t4")),
        reqs(req("gpu-intent.io/node", "DoesNotExist"), req("gpu", "In", "on")),
        reqs(req("gpu-intent.io/trigger-name", "NotIn", "gi-1")),
        reqs(req("kubernetes.io/arch", "In", "amd64")),  # undefined on the node
        reqs(req("gpu", "DoesNotExist")),
        reqs(req("gpu", "Exists"), req("kubernetes.io/hostname", "In", "n2")),
        reqs(),
    ],
)
def test_can_meet_agrees_with_compatible(pod: Requirements) -> None:
    """The solver's fast existing-node check says what `compatible` says, reason aside."""
    assert NODE.can_meet(pod) == (NODE.compatible(pod) is None)
