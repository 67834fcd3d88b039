"""The simulated apiserver over real HTTPS, driven by the real kubernetes_asyncio client."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client import ApiClient, ApiException, Configuration

from sim.apiserver import CONTEXT
from sim.server import ApiServer
from sim.store import NAMESPACES, PODS, Store

TOKEN = "s3cr3t-token"


@dataclass
class Cluster:
    store: Store
    server: ApiServer
    api: ApiClient
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    kubeconfig: Path

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.server.tls.ca_cert))

    async def raw(
        self, method: str, path: str, *, token: str | None = TOKEN, **kwargs: Any
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.server.url + path, ssl=self.ssl_context(), headers=headers, **kwargs
            ) as resp,
        ):
            text = await resp.text()
            try:
                body = json.loads(text)
            except ValueError:
                body = text
            return resp.status, body, resp


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    store = Store()
    for ns in ("default", "other"):
        store.create(NAMESPACES, {"metadata": {"name": ns}})
    server = ApiServer(store, token=TOKEN, bookmark_interval=0.2)
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    cfg = Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    api = ApiClient(configuration=cfg)
    try:
        yield Cluster(
            store, server, api, client.CoreV1Api(api), client.CustomObjectsApi(api), kubeconfig
        )
    finally:
        await api.close()
        await server.stop()


def pod(
    name: str | None = None, *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name} if name else {"generateName": "web-"}
    if labels:
        meta["labels"] = labels
    container = {"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": "1"}}}
    return {"metadata": meta, "spec": {"containers": [container], **spec}}


async def eventually(condition: Callable[[], bool], seconds: float = 3.0) -> None:
    """Wait until ``condition()`` holds; fail after ``seconds``."""
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


def status_of(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(err.value.body)
    assert body["kind"] == "Status"
    assert body["code"] == err.value.status
    return dict(body)


# -- CRUD -----------------------------------------------------------------------------


async def test_create_defaults_and_generates_name(cluster: Cluster) -> None:
    created = await cluster.core.create_namespaced_pod("default", pod())
    assert created.metadata.name.startswith("web-") and len(created.metadata.name) == 9
    assert created.metadata.uid and created.metadata.resource_version
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert created.spec.service_account_name == "default"
    assert {t.key for t in created.spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert created.status.phase == "Pending" and created.status.qos_class == "Burstable"
    assert created.metadata.managed_fields[0].manager == "OpenAPI-Generator"
    fetched = await cluster.core.read_namespaced_pod(created.metadata.name, "default")
    assert fetched.metadata.uid == created.metadata.uid


async def test_get_missing_is_404_not_found(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as err:
        await cluster.core.read_namespaced_pod("nope", "default")
    assert err.value.status == 404
    body = status_of(err)
    assert body["reason"] == "NotFound" and body["message"] == 'pods "nope" not found'


async def test_create_twice_is_409_already_exists(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("a"))
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("default", pod("a"))
    assert err.value.status == 409 and status_of(err)["reason"] == "AlreadyExists"


async def test_create_in_missing_namespace_is_404(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("ghost", pod("a"))
    assert err.value.status == 404
    assert status_of(err)["message"] == 'namespaces "ghost" not found'


async def test_pod_without_containers_is_422_invalid(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod(
            "default", {"metadata": {"name": "empty"}, "spec": {}}
        )
    body = status_of(err)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == 'Pod "empty" is invalid: spec.containers: Required value'
    assert body["details"]["causes"][0]["field"] == "spec.containers"


async def test_pod_container_without_image_and_bad_gpu_request(cluster: Cluster) -> None:
    bad = {
        "metadata": {"name": "bad"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "2"},
                    },
                }
            ]
        },
    }
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("default", bad)
    message = status_of(err)["message"]
    assert message.startswith('Pod "bad" is invalid: [')
    assert "spec.containers[0].image: Required value" in message
    assert (
        'spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'
        in message
    )


async def test_dry_run_create_stores_nothing(cluster: Cluster) -> None:
    result = await cluster.core.create_namespaced_pod("default", pod("dry"), dry_run="All")
    assert result.metadata.name == "dry" and result.metadata.uid
    assert result.metadata.resource_version is None
    with pytest.raises(ApiException) as err:
        await cluster.core.read_namespaced_pod("dry", "default")
    assert err.value.status == 404


async def test_dry_run_patch_changes_nothing(cluster: Cluster) -> None:
    created = await cluster.core.create_namespaced_pod("default", pod("p"))
    preview = await cluster.core.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"try": "1"}}}, dry_run="All"
    )
    assert preview.metadata.labels == {"try": "1"}
    stored = await cluster.core.read_namespaced_pod("p", "default")
    assert stored.metadata.labels is None
    assert stored.metadata.resource_version == created.metadata.resource_version


async def test_kubeconfig_is_private_and_complete(cluster: Cluster) -> None:
    assert cluster.kubeconfig.stat().st_mode & 0o777 == 0o600
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    assert doc["current-context"] == doc["contexts"][0]["name"]
    assert doc["clusters"][0]["cluster"]["server"] == cluster.server.url
    assert doc["users"][0]["user"] == {"token": TOKEN}
    assert doc["contexts"][0]["context"]["namespace"] == "default"


async def test_replace_may_change_image_but_not_other_spec_fields(cluster: Cluster) -> None:
    created = await cluster.core.create_namespaced_pod("default", pod("p"))
    created.spec.containers[0].image = "nginx:1.28"
    replaced = await cluster.core.replace_namespaced_pod("p", "default", created)
    assert replaced.spec.containers[0].image == "nginx:1.28"
    replaced.spec.node_selector = {"gpu": "a100"}
    with pytest.raises(ApiException) as err:
        await cluster.core.replace_namespaced_pod("p", "default", replaced)
    body = status_of(err)
    assert err.value.status == 422
    assert body["message"].startswith(
        'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
        "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
        "`spec.tolerations` (only additions to existing tolerations),"
        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    )
    assert "spec.nodeSelector" in body["message"]


async def test_stale_resource_version_is_409_conflict(cluster: Cluster) -> None:
    created = await cluster.core.create_namespaced_pod("default", pod("p"))
    await cluster.core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiException) as err:
        await cluster.core.replace_namespaced_pod("p", "default", created)
    assert err.value.status == 409 and status_of(err)["reason"] == "Conflict"


async def test_strategic_merge_patch_merges_containers_by_name(cluster: Cluster) -> None:
    two = pod("p")
    two["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1"})
    await cluster.core.create_namespaced_pod("default", two)
    patched = await cluster.core.patch_namespaced_pod(
        "p",
        "default",
        {
            "metadata": {"labels": {"a": "1"}},
            "spec": {"containers": [{"name": "sidecar", "image": "busybox:2"}]},
        },
    )
    images = {c.name: c.image for c in patched.spec.containers}
    assert images == {"app": "nginx:1.27", "sidecar": "busybox:2"}
    assert patched.spec.containers[0].resources.requests == {"cpu": "1"}
    removed = await cluster.core.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"a": None}}}
    )
    assert not removed.metadata.labels


async def test_merge_patch_replaces_lists(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("p"))
    defaulted = cluster.store.get(PODS, "default", "p")["spec"]["tolerations"]
    extra = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    patched = await cluster.core.patch_namespaced_pod(
        "p",
        "default",
        {"spec": {"tolerations": [*defaulted, extra]}},
        _content_type="application/merge-patch+json",
    )
    assert [t.key for t in patched.spec.tolerations][-1] == "gpu"
    with pytest.raises(ApiException) as err:  # the list is replaced: existing ones are dropped
        await cluster.core.patch_namespaced_pod(
            "p",
            "default",
            {"spec": {"tolerations": [extra]}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422
    assert "existing toleration can not be modified" in status_of(err)["message"]


async def test_json_patch_and_its_failures(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("p"))
    patched = await cluster.core.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}}]
    )
    assert patched.metadata.annotations == {"a/b": "1"}
    with pytest.raises(ApiException) as err:
        await cluster.core.patch_namespaced_pod(
            "p", "default", [{"op": "replace", "path": "/metadata/labels/missing", "value": "x"}]
        )
    body = status_of(err)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == "the server rejected our request due to an error in our request"
    with pytest.raises(ApiException) as err:
        await cluster.core.patch_namespaced_pod("p", "default", [{"op": "explode", "path": "/x"}])
    assert err.value.status == 400


async def test_status_patch_changes_only_status(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("p"))
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    patched = await cluster.core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [condition]}, "spec": {"nodeName": "sneaky"}}
    )
    assert patched.spec.node_name is None
    assert patched.status.phase == "Pending"  # strategic merge keeps the rest of status
    assert patched.status.conditions[0].reason == "Unschedulable"
    again = await cluster.core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    assert [c.type for c in again.status.conditions] == ["PodScheduled", "Ready"]


async def test_binding_sets_node_and_conflicts_when_bound(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("p"))
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-1"}}
    resp = await cluster.core.create_namespaced_pod_binding(
        "p", "default", binding, _preload_content=False
    )
    assert resp.status == 201
    assert (await resp.json())["status"] == "Success"
    bound = await cluster.core.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "node-1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_binding("default", binding)
    assert err.value.status == 409
    assert status_of(err)["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "node-1"'
    )


async def test_delete_unbound_pod_removes_it_and_returns_it(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("p"))
    status, body, _ = await cluster.raw("DELETE", "/api/v1/namespaces/default/pods/p")
    assert status == 200 and body["kind"] == "Pod" and body["metadata"]["name"] == "p"
    assert cluster.store.list(PODS)[0] == []


async def test_delete_bound_pod_is_graceful(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("p"))
    cluster.store.mutate(PODS, "default", "p", lambda p: p["spec"].update(nodeName="n1"))
    marked = await cluster.core.delete_namespaced_pod("p", "default")
    assert marked.metadata.deletion_timestamp is not None
    assert marked.metadata.deletion_grace_period_seconds == 30
    still = await cluster.core.read_namespaced_pod("p", "default")
    assert still.metadata.deletion_timestamp is not None
    status, _, _ = await cluster.raw(
        "DELETE", "/api/v1/namespaces/default/pods/p", json={"gracePeriodSeconds": 0}
    )
    assert status == 200
    assert cluster.store.list(PODS)[0] == []


async def test_delete_preconditions_and_orphan_202(cluster: Cluster) -> None:
    created = await cluster.core.create_namespaced_pod("default", pod("p", labels={"a": "b"}))
    with pytest.raises(ApiException) as err:
        await cluster.core.delete_namespaced_pod(
            "p", "default", body={"preconditions": {"uid": "not-the-uid"}}
        )
    assert err.value.status == 409
    cluster.store.mutate(PODS, "default", "p", lambda p: p["metadata"].update(finalizers=["x/y"]))
    status, body, _ = await cluster.raw(
        "DELETE",
        "/api/v1/namespaces/default/pods/p",
        json={"orphanDependents": False, "preconditions": {"uid": created.metadata.uid}},
    )
    assert status == 202 and body["metadata"]["deletionTimestamp"]


async def test_delete_of_other_types_answers_a_status(cluster: Cluster) -> None:
    status, body, _ = await cluster.raw(
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json={"metadata": {"name": "leader"}, "spec": {"holderIdentity": "me"}},
    )
    assert status == 201
    status, body, _ = await cluster.raw(
        "DELETE", "/apis/coordination.k8s.io/v1/namespaces/default/leases/leader"
    )
    assert status == 200
    assert body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "leader" and body["details"]["kind"] == "leases"


async def test_namespace_create_gets_name_label_and_active_phase(cluster: Cluster) -> None:
    created = await cluster.core.create_namespace({"metadata": {"name": "team-a"}})
    assert created.metadata.labels == {"kubernetes.io/metadata.name": "team-a"}
    assert created.status.phase == "Active" and created.spec.finalizers == ["kubernetes"]
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespace({"metadata": {"name": "Team_A"}})
    assert err.value.status == 422
    assert status_of(err)["message"].startswith(
        'Namespace "Team_A" is invalid: metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 label'
    )


# -- list, selectors, pagination ---------------------------------------------------------


async def make_pods(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod(
        "default", pod("a", labels={"app": "web", "tier": "x"})
    )
    await cluster.core.create_namespaced_pod("default", pod("b", labels={"app": "db"}))
    await cluster.core.create_namespaced_pod("other", pod("c", labels={"app": "web"}))
    cluster.store.mutate(PODS, "default", "b", lambda p: p["spec"].update(nodeName="n1"))


async def test_label_and_field_selectors_on_list(cluster: Cluster) -> None:
    await make_pods(cluster)
    web = await cluster.core.list_pod_for_all_namespaces(label_selector="app in (web),tier!=y")
    assert sorted(p.metadata.name for p in web.items) == ["a", "c"]
    assert web.kind == "PodList" and web.metadata.resource_version == str(
        cluster.store.resource_version
    )
    on_n1 = await cluster.core.list_namespaced_pod("default", field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in on_n1.items] == ["b"]
    unbound = await cluster.core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=,metadata.namespace=default"
    )
    assert [p.metadata.name for p in unbound.items] == ["a"]


async def test_list_items_of_builtin_types_carry_no_kind(cluster: Cluster) -> None:
    await make_pods(cluster)
    status, body, _ = await cluster.raw("GET", "/api/v1/pods")
    assert status == 200 and body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert "kind" not in body["items"][0] and body["items"][0]["metadata"]["name"] == "a"


async def test_bad_selectors_are_400(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as err:
        await cluster.core.list_namespaced_pod("default", field_selector="status.hostIP=1.2.3.4")
    assert err.value.status == 400
    assert status_of(err)["message"] == "field label not supported: status.hostIP"
    with pytest.raises(ApiException) as err:
        await cluster.core.list_namespaced_pod("default", label_selector="app in web")
    assert err.value.status == 400 and status_of(err)["reason"] == "BadRequest"


async def test_limit_and_continue(cluster: Cluster) -> None:
    for i in range(5):
        await cluster.core.create_namespaced_pod("default", pod(f"p{i}"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await cluster.core.list_namespaced_pod("default", limit=2, _continue=token)
        seen += [p.metadata.name for p in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 5 - len(seen)
    assert seen == [f"p{i}" for i in range(5)] and pages == 3
    with pytest.raises(ApiException) as err:
        await cluster.core.list_namespaced_pod("default", limit=2, _continue="garbage!")
    assert err.value.status == 400


# -- watch -------------------------------------------------------------------------------


async def test_watch_from_resource_version_sees_changes_in_order(cluster: Cluster) -> None:
    start = str(cluster.store.resource_version)
    await cluster.core.create_namespaced_pod("default", pod("w"))
    await cluster.core.patch_namespaced_pod("w", "default", {"metadata": {"labels": {"v": "2"}}})
    await cluster.core.delete_namespaced_pod("w", "default")
    events = []
    async with watch.Watch() as w:
        async for event in w.stream(
            cluster.core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=5
        ):
            events.append(
                (event["type"], event["object"].metadata.name, event["object"].metadata.labels)
            )
            if len(events) == 3:
                w.stop()
                break
    assert events == [
        ("ADDED", "w", None),
        ("MODIFIED", "w", {"v": "2"}),
        ("DELETED", "w", {"v": "2"}),
    ]


async def test_watch_with_label_selector_reports_leaving_objects_as_deleted(
    cluster: Cluster,
) -> None:
    await cluster.core.create_namespaced_pod("default", pod("w", labels={"app": "web"}))
    events: list[tuple[str, str]] = []

    async def consume() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                cluster.core.list_namespaced_pod,
                "default",
                label_selector="app=web",
                timeout_seconds=5,
            ):
                events.append((event["type"], event["object"].metadata.name))
                if len(events) == 2:
                    break

    task = asyncio.create_task(consume())
    await eventually(lambda: bool(events))
    await cluster.core.patch_namespaced_pod("w", "default", {"metadata": {"labels": {"app": "db"}}})
    await asyncio.wait_for(task, 5)
    assert events == [("ADDED", "w"), ("DELETED", "w")]


async def test_a_bound_pod_leaves_a_node_name_watch_as_deleted_without_its_node(
    cluster: Cluster,
) -> None:
    # kube-apiserver v1.32.13 was seen sending `DELETED nodeName=None rv=380` while the pod
    # was bound at rv 380 (REFERENCE.md section 6): the event carries the previous object.
    await cluster.core.create_namespaced_pod("default", pod("p"))
    events: list[dict[str, Any]] = []

    async def consume() -> None:
        async with watch.Watch(return_type="object") as w:
            async for event in w.stream(
                cluster.core.list_pod_for_all_namespaces,
                field_selector="spec.nodeName=",
                timeout_seconds=5,
                _preload_content=False,
            ):
                events.append({"type": event["type"], **event["raw_object"]})
                if event["type"] == "DELETED":
                    break

    task = asyncio.create_task(consume())
    await eventually(lambda: bool(events))
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-1"}}
    await cluster.core.create_namespaced_pod_binding(
        "p", "default", binding, _preload_content=False
    )
    await asyncio.wait_for(task, 5)
    bound = await cluster.core.read_namespaced_pod("p", "default")
    deleted = events[-1]
    assert deleted["type"] == "DELETED"
    assert "nodeName" not in deleted["spec"]
    assert deleted["metadata"]["resourceVersion"] == bound.metadata.resource_version
    assert bound.spec.node_name == "node-1"


async def test_watch_with_field_selector_on_all_namespaces(cluster: Cluster) -> None:
    await make_pods(cluster)
    names = []
    async with watch.Watch() as w:
        async for event in w.stream(
            cluster.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=",
            timeout_seconds=5,
        ):
            names.append(event["object"].metadata.name)
            if len(names) == 2:  # initial state is sent in namespace/name order: a, (b), c
                break
    assert names == ["a", "c"]


async def test_watch_from_compacted_version_raises_410(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("w"))
    old = "1"
    await cluster.core.patch_namespaced_pod("w", "default", {"metadata": {"labels": {"v": "2"}}})
    cluster.store.compact()
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as w:
            async for _ in w.stream(
                cluster.core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=5
            ):
                pass
    assert err.value.status == 410
    assert "Expired" in str(err.value.reason) and "too old resource version" in str(
        err.value.reason
    )
    status, body, _ = await cluster.raw(
        "GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={old}"
    )
    assert status == 200  # the error travels inside the stream, as an ERROR event
    assert (
        body["type"] == "ERROR"
        and body["object"]["code"] == 410
        and body["object"]["reason"] == "Expired"
    )


async def test_server_side_timeout_ends_the_stream(cluster: Cluster) -> None:
    started = time.monotonic()
    events = []
    async with watch.Watch() as w:
        async for event in w.stream(cluster.core.list_namespaced_pod, "default", timeout_seconds=1):
            events.append(event)
    elapsed = time.monotonic() - started
    assert events == [] and 0.9 <= elapsed < 3


async def test_bookmarks_carry_the_current_resource_version(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_pod("default", pod("w"))
    kinds = []
    async with watch.Watch() as w:
        async for event in w.stream(
            cluster.core.list_namespaced_pod,
            "default",
            allow_watch_bookmarks=True,
            timeout_seconds=2,
        ):
            kinds.append(event["type"])
            if event["type"] == "BOOKMARK":
                raw = event["raw_object"]
                assert raw["metadata"] == {"resourceVersion": str(cluster.store.resource_version)}
                assert raw["kind"] == "Pod"
                break
    assert kinds == ["ADDED", "BOOKMARK"]


async def test_watch_ends_when_the_client_goes_away(cluster: Cluster) -> None:
    ctx = cluster.server.app[CONTEXT]
    async with aiohttp.ClientSession() as session:
        resp = await session.get(
            cluster.server.url + "/api/v1/namespaces/default/pods?watch=true",
            ssl=cluster.ssl_context(),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert resp.status == 200
        await eventually(lambda: len(ctx.watchers) == 1)
        resp.close()
    await eventually(lambda: not ctx.watchers)


async def test_stopping_the_server_ends_open_watches(cluster: Cluster) -> None:
    events: list[str] = []

    async def consume() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                cluster.core.list_namespaced_pod, "default", timeout_seconds=60
            ):
                events.append(event["type"])

    task = asyncio.create_task(consume())
    ctx = cluster.server.app[CONTEXT]
    await eventually(lambda: bool(ctx.watchers))
    started = time.monotonic()
    await cluster.server.stop()
    await asyncio.wait_for(task, 3)
    assert time.monotonic() - started < 2 and not ctx.watchers


# -- errors, auth, discovery -------------------------------------------------------------


async def test_requests_need_the_token(cluster: Cluster) -> None:
    cfg = Configuration(host=cluster.server.url)
    cfg.ssl_ca_cert = str(cluster.server.tls.ca_cert)
    async with ApiClient(configuration=cfg) as anonymous:
        with pytest.raises(ApiException) as err:
            await client.CoreV1Api(anonymous).list_namespaced_pod("default")
    assert err.value.status == 401 and status_of(err)["reason"] == "Unauthorized"
    status, body, _ = await cluster.raw("GET", "/api/v1/pods", token="wrong")
    assert status == 401 and body["message"] == "Unauthorized"
    status, body, _ = await cluster.raw("GET", "/healthz", token=None)
    assert status == 200 and body == "ok"


async def test_unknown_paths_methods_and_bodies(cluster: Cluster) -> None:
    status, body, _ = await cluster.raw("GET", "/api/v1/configmaps")
    assert status == 404
    assert (
        body["message"] == "the server could not find the requested resource"
        and body["reason"] == "NotFound"
    )
    status, body, _ = await cluster.raw("GET", "/apis/example.com/v1/things")
    assert status == 404 and body["kind"] == "Status"
    status, body, _ = await cluster.raw("GET", "/api/v1/pods/some-pod")  # no namespace
    assert status == 404 and body["reason"] == "NotFound"
    status, body, _ = await cluster.raw("PUT", "/api/v1/namespaces/default/pods")
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    status, body, _ = await cluster.raw(
        "POST",
        "/api/v1/namespaces/default/pods",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await cluster.raw(
        "POST",
        "/api/v1/namespaces/default/pods",
        json={"kind": "Node", "apiVersion": "v1", "metadata": {"name": "x"}},
    )
    assert status == 400


async def test_strategic_merge_and_apply_on_custom_resources_are_415(cluster: Cluster) -> None:
    nodepool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        }
                    ],
                }
            }
        },
    }
    await cluster.custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", nodepool)
    with pytest.raises(ApiException) as err:
        await cluster.custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            "gpu",
            {"spec": {"weight": 5}},
            _content_type="application/strategic-merge-patch+json",
        )
    body = status_of(err)
    assert err.value.status == 415 and body["reason"] == "UnsupportedMediaType"
    assert body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json"
    )
    status, body, _ = await cluster.raw(
        "PATCH",
        "/api/v1/namespaces/default/pods/x",
        data=b"{}",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert status == 415 and "server-side apply" in body["message"]
    merged = await cluster.custom.patch_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodepools",
        "gpu",
        {"spec": {"weight": 5}},
        _content_type="application/merge-patch+json",
    )
    assert merged["spec"]["weight"] == 5


async def test_discovery(cluster: Cluster) -> None:
    versions = await client.CoreApi(cluster.api).get_api_versions()
    assert versions.versions == ["v1"]
    groups = await client.ApisApi(cluster.api).get_api_versions()
    assert {g.name for g in groups.groups} == {
        "karpenter.sh",
        "admissionregistration.k8s.io",
        "coordination.k8s.io",
        "resource.k8s.io",
    }
    resources = await cluster.core.get_api_resources()
    names = {r.name for r in resources.resources}
    assert {"pods", "pods/status", "pods/binding", "nodes", "namespaces", "events"} <= names
    status, body, _ = await cluster.raw("GET", "/apis/karpenter.sh/v1")
    assert status == 200 and body["groupVersion"] == "karpenter.sh/v1"
    assert {r["name"] for r in body["resources"]} == {
        "nodeclaims",
        "nodeclaims/status",
        "nodepools",
        "nodepools/status",
    }
    code = await client.VersionApi(cluster.api).get_code()
    assert code.major == "1" and code.git_version.startswith("v1.")
