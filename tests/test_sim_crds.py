"""The Karpenter CRD schemas and CEL rules, enforced on the store and over HTTP."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, ApiException, Configuration

from sim import crds
from sim.server import ApiServer
from sim.store import NODECLAIMS, NODEPOOLS, Invalid, Store

NOW = "2026-11-21T11:00:00Z"


def nodeclaim(name: str = "nc", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.xlarge"]}
        ],
        "resources": {"requests": {"nvidia.com/gpu": 1, "cpu": "500m"}},
    }
    base.update(spec)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": base,
    }


def nodepool(name: str = "gpu", **spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass",
                "name": "default",
            },
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
            ],
        },
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def condition(type_: str = "Launched", **extra: Any) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True",
        "lastTransitionTime": NOW,
        "reason": "Launched",
        "message": "",
        **extra,
    }


@pytest.fixture
def store() -> Store:
    s = Store()
    crds.install(s)
    crds.install(s)  # idempotent: one validator per type
    return s


def invalid_message(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(Invalid) as err:
        fn(*args, **kwargs)
    return err.value.message


def test_the_shipped_crds_are_karpenters_v1_nodepool_and_nodeclaim() -> None:
    # One copy of Karpenter v1.14.1's CRDs exists: the sim's package data (sim/crds/).
    for rt, filename in crds.CRD_FILES.items():
        crd = crds.load_crd(filename)
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["spec"]["group"] == rt.group == "karpenter.sh"
        assert (crd["spec"]["names"]["kind"], crd["spec"]["names"]["plural"]) == (rt.kind, rt.plural)
        assert [v["name"] for v in crd["spec"]["versions"] if v.get("storage")] == ["v1"]


def test_every_cel_rule_of_the_crds_is_implemented() -> None:
    assert crds.unknown_rules() == set()


def test_valid_nodeclaim_is_defaulted_and_pruned(store: Store) -> None:
    body = nodeclaim()
    body["spec"]["bogus"] = {"x": 1}
    body["spec"]["nodeClassRef"]["extra"] = "dropped"
    body["metadata"]["labels"] = {"karpenter.sh/nodepool": "gpu"}
    stored = store.create(NODECLAIMS, body)
    assert stored["spec"]["expireAfter"] == "720h"
    assert "bogus" not in stored["spec"] and "extra" not in stored["spec"]["nodeClassRef"]
    assert stored["metadata"]["labels"] == {"karpenter.sh/nodepool": "gpu"}  # metadata untouched


def test_missing_node_class_ref(store: Store) -> None:
    body = nodeclaim()
    del body["spec"]["nodeClassRef"]
    assert invalid_message(store.create, NODECLAIMS, body) == (
        'NodeClaim.karpenter.sh "nc" is invalid: spec.nodeClassRef: Required value'
    )


def test_several_errors_are_joined(store: Store) -> None:
    body = nodeclaim(expireAfter="forever")
    body["spec"]["nodeClassRef"]["group"] = ""
    body["spec"]["requirements"].append({"key": "kubernetes.io/hostname", "operator": "Near"})
    message = invalid_message(store.create, NODECLAIMS, body)
    assert message.startswith('NodeClaim.karpenter.sh "nc" is invalid: [') and message.endswith("]")
    for part in (
        "spec.expireAfter: Invalid value: \"forever\": spec.expireAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'",
        'spec.nodeClassRef.group: Invalid value: "string": group may not be empty',
        'spec.requirements[1].operator: Unsupported value: "Near": supported values: "Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"',
        'spec.requirements[1].key: Invalid value: "string": label "kubernetes.io/hostname" is restricted',
    ):
        assert part in message, part


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        (
            {"key": "a", "operator": "In", "values": []},
            "requirements with operator 'In' must have a value defined",
        ),
        (
            {"key": "a", "operator": "Gt", "values": ["x"]},
            "must have a single positive integer value",
        ),
        (
            {"key": "a", "operator": "In", "values": ["1"], "minValues": 2},
            "must have at least that many values",
        ),
        (
            {"key": "karpenter.sh/custom", "operator": "Exists"},
            'label domain "karpenter.sh" is restricted',
        ),
    ],
)
def test_requirement_rules(store: Store, requirement: dict[str, Any], message: str) -> None:
    text = invalid_message(store.create, NODECLAIMS, nodeclaim(requirements=[requirement]))
    assert message in text


def test_allowed_restricted_domain_keys(store: Store) -> None:
    reqs = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100"]},
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]},
    ]
    store.create(NODECLAIMS, nodeclaim(requirements=reqs))


def test_nodeclaim_spec_is_immutable_but_metadata_is_not(store: Store) -> None:
    store.create(NODECLAIMS, nodeclaim())
    message = invalid_message(
        store.mutate, NODECLAIMS, None, "nc", lambda o: o["spec"].update(expireAfter="1h")
    )
    assert (
        message
        == 'NodeClaim.karpenter.sh "nc" is invalid: spec: Invalid value: "object": spec is immutable'
    )
    store.mutate(NODECLAIMS, None, "nc", lambda o: o["metadata"].update(labels={"a": "b"}))


def test_nodeclaim_status_conditions(store: Store) -> None:
    store.create(NODECLAIMS, nodeclaim())
    missing = condition()
    del missing["lastTransitionTime"]
    message = invalid_message(
        store.mutate,
        NODECLAIMS,
        None,
        "nc",
        lambda o: o["status"].update(conditions=[missing]),
        subresource="status",
    )
    assert message == (
        'NodeClaim.karpenter.sh "nc" is invalid: status.conditions[0].lastTransitionTime: Required value'
    )
    bad = [condition(status="Maybe"), condition("Registered", lastTransitionTime="yesterday")]
    message = invalid_message(
        store.mutate,
        NODECLAIMS,
        None,
        "nc",
        lambda o: o["status"].update(conditions=bad),
        subresource="status",
    )
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in message
    assert 'status.conditions[1].lastTransitionTime: Invalid value: "yesterday"' in message
    twice = [condition(), condition()]
    message = invalid_message(
        store.mutate,
        NODECLAIMS,
        None,
        "nc",
        lambda o: o["status"].update(conditions=twice),
        subresource="status",
    )
    assert "status.conditions[1]: Duplicate value" in message
    ok = store.mutate(
        NODECLAIMS,
        None,
        "nc",
        lambda o: o["status"].update(
            conditions=[condition()], capacity={"nvidia.com/gpu": "1"}, providerID="aws:///i-1"
        ),
        subresource="status",
    )
    assert ok["status"]["providerID"] == "aws:///i-1"


def test_nodepool_defaults_and_bounds(store: Store) -> None:
    stored = store.create(NODEPOOLS, nodepool(limits={"nvidia.com/gpu": 8, "cpu": "100"}))
    assert stored["spec"]["disruption"] == {
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
    }
    assert stored["spec"]["template"]["spec"]["expireAfter"] == "720h"
    message = invalid_message(store.create, NODEPOOLS, nodepool("heavy", weight=101))
    assert message == (
        'NodePool.karpenter.sh "heavy" is invalid: spec.weight: Invalid value: 101: '
        "spec.weight in body should be less than or equal to 100"
    )
    message = invalid_message(store.create, NODEPOOLS, nodepool("typed", weight="1"))
    assert (
        'spec.weight: Invalid value: "string": spec.weight in body must be of type integer: "string"'
        in message
    )
    message = invalid_message(store.create, NODEPOOLS, nodepool("lim", limits={"cpu": "lots"}))
    assert "spec.limits[cpu]: Invalid value" in message


def test_nodepool_label_rules_and_transitions(store: Store) -> None:
    body = nodepool()
    body["spec"]["template"]["metadata"]["labels"]["karpenter.sh/nodepool"] = "x"
    assert 'label "karpenter.sh/nodepool" is restricted' in invalid_message(
        store.create, NODEPOOLS, body
    )
    store.create(NODEPOOLS, nodepool())
    message = invalid_message(
        store.mutate,
        NODEPOOLS,
        None,
        "gpu",
        lambda o: o["spec"]["template"]["spec"]["nodeClassRef"].update(kind="Other"),
    )
    assert (
        'spec.template.spec.nodeClassRef: Invalid value: "object": nodeClassRef.kind is immutable'
        in message
    )
    store.mutate(
        NODEPOOLS,
        None,
        "gpu",
        lambda o: o["spec"]["template"]["spec"]["nodeClassRef"].update(name="b"),
    )
    message = invalid_message(
        store.mutate, NODEPOOLS, None, "gpu", lambda o: o["spec"].update(replicas=2)
    )
    assert "Cannot transition NodePool between static" in message
    static = nodepool("static", replicas=1, weight=10)
    assert "'weight' is not supported on static NodePools" in invalid_message(
        store.create, NODEPOOLS, static
    )


def test_nodepool_status_needs_reason_and_message(store: Store) -> None:
    store.create(NODEPOOLS, nodepool())
    cond = condition("Ready")
    del cond["reason"], cond["message"]
    message = invalid_message(
        store.mutate,
        NODEPOOLS,
        None,
        "gpu",
        lambda o: o["status"].update(conditions=[cond]),
        subresource="status",
    )
    assert "status.conditions[0].message: Required value" in message
    assert "status.conditions[0].reason: Required value" in message


# -- over HTTP with the real client --------------------------------------------------


@pytest.fixture
async def custom(tmp_path: Path) -> AsyncIterator[client.CustomObjectsApi]:
    server = ApiServer(Store(), token="t")
    await server.start()
    cfg = Configuration()
    await config.load_kube_config(
        config_file=str(server.write_kubeconfig(tmp_path / "kc")), client_configuration=cfg
    )
    api = ApiClient(configuration=cfg)
    try:
        yield client.CustomObjectsApi(api)
    finally:
        await api.close()
        await server.stop()


def api_status(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["code"] == err.value.status
    return dict(body)


GROUP = ("karpenter.sh", "v1")


async def test_nodeclaim_over_http(custom: client.CustomObjectsApi) -> None:
    body = nodeclaim()
    del body["spec"]["nodeClassRef"]
    with pytest.raises(ApiException) as err:
        await custom.create_cluster_custom_object(*GROUP, "nodeclaims", body)
    status = api_status(err)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"] == {
        "name": "nc",
        "kind": "NodeClaim",
        "group": "karpenter.sh",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.nodeClassRef",
            }
        ],
    }
    with_status = copy.deepcopy(nodeclaim())
    with_status["status"] = {"providerID": "dropped on create"}
    created = await custom.create_cluster_custom_object(*GROUP, "nodeclaims", with_status)
    assert created["spec"]["expireAfter"] == "720h" and not created.get("status")
    with pytest.raises(ApiException) as err:
        await custom.patch_cluster_custom_object(
            *GROUP,
            "nodeclaims",
            "nc",
            {"spec": {"expireAfter": "1h"}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422 and api_status(err)["message"].endswith("spec is immutable")
    missing = condition()
    del missing["lastTransitionTime"]
    with pytest.raises(ApiException) as err:
        await custom.patch_cluster_custom_object_status(
            *GROUP,
            "nodeclaims",
            "nc",
            {"status": {"conditions": [missing]}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422
    assert "status.conditions[0].lastTransitionTime: Required value" in api_status(err)["message"]
    patched = await custom.patch_cluster_custom_object_status(
        *GROUP,
        "nodeclaims",
        "nc",
        {"status": {"conditions": [condition()], "nodeName": "n1"}},
        _content_type="application/merge-patch+json",
    )
    assert patched["status"]["nodeName"] == "n1" and patched["spec"] == created["spec"]
    stale = dict(created)
    del stale["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:  # a CR's PUT must name the version it replaces
        await custom.replace_cluster_custom_object(*GROUP, "nodeclaims", "nc", stale)
    assert (
        "metadata.resourceVersion: Invalid value: 0: must be specified for an update"
        in api_status(err)["message"]
    )
    deleted = await custom.delete_cluster_custom_object(*GROUP, "nodeclaims", "nc")
    assert deleted["kind"] == "Status" and deleted["details"]["uid"] == created["metadata"]["uid"]


async def test_nodepool_over_http(custom: client.CustomObjectsApi) -> None:
    created = await custom.create_cluster_custom_object(*GROUP, "nodepools", nodepool())
    assert created["spec"]["disruption"]["consolidateAfter"] == "0s"
    with pytest.raises(ApiException) as err:
        await custom.patch_cluster_custom_object(
            *GROUP, "nodepools", "gpu", [{"op": "add", "path": "/spec/weight", "value": 0}]
        )
    assert err.value.status == 422
    assert "spec.weight in body should be greater than or equal to 1" in api_status(err)["message"]
    patched = await custom.patch_cluster_custom_object(
        *GROUP, "nodepools", "gpu", [{"op": "add", "path": "/spec/weight", "value": 50}]
    )
    assert patched["spec"]["weight"] == 50
    listed = await custom.list_cluster_custom_object(*GROUP, "nodepools")
    assert listed["kind"] == "NodePoolList" and listed["items"][0]["kind"] == "NodePool"
