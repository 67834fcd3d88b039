"""The apiserver's fault switches (`sim.faults`), through real HTTPS requests."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sim.faults import Faults, request_info
from sim.server import ApiServer
from sim.store import NAMESPACES, PODS, Store

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}
PODS_PATH = "/api/v1/namespaces/default/pods"


class Api:
    def __init__(self, server: ApiServer, faults: Faults, store: Store) -> None:
        self.server, self.faults, self.store = server, faults, store
        self.ssl = ssl.create_default_context(cafile=str(server.tls.ca_cert))

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any, dict[str, str]]:
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.server.url + path, ssl=self.ssl, **kwargs) as resp,
        ):
            text = await resp.text()
            try:
                body: Any = json.loads(text)
            except ValueError:
                body = text
            return resp.status, body, dict(resp.headers)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    store = Store()
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    faults = Faults()
    server = ApiServer(store, faults=faults)
    await server.start()
    try:
        yield Api(server, faults, store)
    finally:
        await server.stop()


async def test_no_switch_changes_nothing(api: Api) -> None:
    status, body, _ = await api.call("POST", PODS_PATH, json=POD)
    assert status == 201
    status, body, _ = await api.call("GET", PODS_PATH)
    assert status == 200 and [p["metadata"]["name"] for p in body["items"]] == ["p"]


async def test_throttle_limited_to_verb_resource_and_count(api: Api) -> None:
    api.faults.add("throttle", verb="list", resource="pods", count=2, retry_after=3)
    status, _, _ = await api.call("GET", "/api/v1/namespaces")  # other resource
    assert status == 200
    for _ in range(2):
        status, body, headers = await api.call("GET", PODS_PATH)
        assert status == 429
        assert headers["Retry-After"] == "3"
        assert body == "Too many requests, please try again later.\n"
    status, _, _ = await api.call("GET", PODS_PATH)
    assert status == 200
    assert api.faults.faults == []


async def test_rate_answers_a_share_of_requests(api: Api) -> None:
    """A 20 % rate fails about a fifth of 200 lists (binomial: 40 expected, sd 5.7), and
    only those: each failure is counted as a hit."""
    fault = api.faults.add("error", verb="list", resource="pods", rate=0.2)
    statuses = [(await api.call("GET", PODS_PATH))[0] for _ in range(200)]
    failed = statuses.count(500)
    assert 20 <= failed <= 60 and statuses.count(200) == 200 - failed
    assert fault.hits == failed
    with pytest.raises(ValueError):
        api.faults.add("error", rate=0)


async def test_internal_error_on_create_then_recovers(api: Api) -> None:
    api.faults.add("error", verb="create", count=1, message="etcdserver: leader changed")
    status, body, _ = await api.call("POST", PODS_PATH, json=POD)
    assert status == 500
    assert body["reason"] == "InternalError"
    assert body["message"] == "Internal error occurred: etcdserver: leader changed"
    assert api.store.list(PODS)[0] == []  # nothing was stored
    status, _, _ = await api.call("POST", PODS_PATH, json=POD)
    assert status == 201


async def test_conflict_on_next_update_only(api: Api) -> None:
    await api.call("POST", PODS_PATH, json=POD)
    api.faults.add("conflict", resource="pods", count=1)
    status, _, _ = await api.call("GET", PODS_PATH + "/p")  # a read is not an update
    assert status == 200
    patch = {"metadata": {"labels": {"a": "b"}}}
    headers = {"Content-Type": "application/merge-patch+json"}
    status, body, _ = await api.call("PATCH", PODS_PATH + "/p", json=patch, headers=headers)
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on pods "p": ')
    assert "labels" not in api.store.get(PODS, "default", "p")["metadata"]
    status, body, _ = await api.call("PATCH", PODS_PATH + "/p", json=patch, headers=headers)
    assert status == 200 and body["metadata"]["labels"] == {"a": "b"}


async def test_gone_as_error_event_and_as_status(api: Api) -> None:
    api.faults.add("gone", resource="pods", count=1)
    status, _, _ = await api.call("GET", PODS_PATH)  # a list is not a watch
    assert status == 200
    status, body, _ = await api.call("GET", PODS_PATH + "?watch=true&resourceVersion=1")
    assert status == 200
    event = json.loads(body) if isinstance(body, str) else body
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    assert event["object"]["message"].startswith("too old resource version: 1 (")
    api.faults.add("gone", count=1, as_event=False)
    status, body, _ = await api.call("GET", "/api/v1/watch/namespaces/default/pods")
    assert status == 410 and body["reason"] == "Expired"


async def test_latency(api: Api) -> None:
    api.faults.add("latency", verb="get", delay=0.5)
    await api.call("POST", PODS_PATH, json=POD)
    started = time.monotonic()
    status, _, _ = await api.call("GET", PODS_PATH + "/p")
    assert status == 200
    assert time.monotonic() - started >= 0.5


async def test_drop_watches_ends_open_streams(api: Api) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            api.server.url + PODS_PATH + "?watch=true&timeoutSeconds=60", ssl=api.ssl
        ) as resp,
    ):
        assert resp.status == 200
        for _ in range(200):
            if api.faults.drop_watches("pods"):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the watch never opened")
        rest = await asyncio.wait_for(resp.read(), timeout=30)
    assert rest == b""


def test_request_info() -> None:
    from aiohttp.test_utils import make_mocked_request

    cases = {
        ("GET", "/api/v1/namespaces/d/pods"): ("list", "pods", None),
        ("GET", "/api/v1/namespaces/d/pods?watch=1"): ("watch", "pods", None),
        ("GET", "/api/v1/watch/pods"): ("watch", "pods", None),
        ("GET", "/api/v1/namespaces/d/pods/x"): ("get", "pods", "x"),
        ("PUT", "/api/v1/namespaces/d/pods/x/status"): ("update", "pods/status", "x"),
        ("PATCH", "/apis/karpenter.sh/v1/nodeclaims/n"): ("patch", "nodeclaims", "n"),
        ("DELETE", "/api/v1/nodes/n"): ("delete", "nodes", "n"),
        ("POST", "/api/v1/namespaces"): ("create", "namespaces", None),
        ("PUT", "/api/v1/namespaces/d/finalize"): ("update", "namespaces/finalize", "d"),
        ("GET", "/apis"): ("", "", None),
    }
    for (method, path), want in cases.items():
        assert request_info(make_mocked_request(method, path)) == want, path


MERGE = {"Content-Type": "application/merge-patch+json"}


async def test_body_contains_limits_a_switch_to_writes_holding_the_text(api: Api) -> None:
    status, _, _ = await api.call("POST", PODS_PATH, json=POD)
    assert status == 201
    fault = api.faults.add(
        "error", verb="patch", resource="pods", body_contains="gpu-intent.io/scale-up"
    )
    other = {"metadata": {"annotations": {"example.com/x": "1"}}}
    status, body, _ = await api.call(
        "PATCH", f"{PODS_PATH}/p", data=json.dumps(other), headers=MERGE
    )
    assert status == 200 and body["metadata"]["annotations"] == {"example.com/x": "1"}
    told = {"metadata": {"annotations": {"gpu-intent.io/scale-up": '{"phase":"Triggered"}'}}}
    status, body, _ = await api.call(
        "PATCH", f"{PODS_PATH}/p", data=json.dumps(told), headers=MERGE
    )
    assert status == 500 and body["reason"] == "InternalError"
    assert fault.hits == 1
    api.faults.remove(fault)
    status, body, _ = await api.call(
        "PATCH", f"{PODS_PATH}/p", data=json.dumps(told), headers=MERGE
    )
    assert status == 200
    assert body["metadata"]["annotations"]["gpu-intent.io/scale-up"] == '{"phase":"Triggered"}'
