"""The API client's proxy: read from the environment once (`intent.kube.env_proxy`),
not per request, and still honoured: a request to an API server the environment routes
through a proxy goes to that proxy, one ``NO_PROXY`` covers goes direct."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import free_port
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from controller.metrics import ControllerMetrics
from intent.kube import NAMESPACES, Kube, KubeError, env_proxy, load_configuration
from sim.server import ApiServer
from sim.store import NAMESPACES as SIM_NAMESPACES
from sim.store import Store

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_env_proxy_reads_the_scheme_variable_unless_no_proxy_covers_the_host(
    no_proxy_env: pytest.MonkeyPatch,
) -> None:
    assert env_proxy("https://api.example.com:6443") is None
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    no_proxy_env.setenv("NO_PROXY", "127.0.0.1,.svc,localhost")
    assert env_proxy("https://api.example.com:6443") == "http://proxy.example:3128"
    assert env_proxy("https://127.0.0.1:6443") is None
    assert env_proxy("https://kubernetes.default.svc") is None
    assert env_proxy("http://api.example.com") is None  # HTTP_PROXY is not set


async def test_requests_go_through_the_environments_proxy_read_once(
    tmp_path: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """Nothing listens on the proxy's port: a request routed there fails to connect,
    one ``NO_PROXY`` exempts reaches the sim. The choice is made when the client is
    built (the session no longer reads the environment per request)."""
    store = Store()
    store.create(SIM_NAMESPACES, {"metadata": {"name": "default"}})
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    async with ApiServer(store, token="t") as server:
        cfg = await load_configuration(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        no_proxy_env.setenv("HTTPS_PROXY", dead_proxy)
        proxied = Kube(client.ApiClient(configuration=cfg))
        no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
        direct = Kube(client.ApiClient(configuration=cfg))
        no_proxy_env.delenv("NO_PROXY")  # read once: the direct client stays direct
        try:
            assert proxied.api_client.rest_client.proxy == dead_proxy
            assert not proxied.api_client.rest_client.pool_manager.trust_env
            with pytest.raises(KubeError) as failed:
                await proxied.list(NAMESPACES)
            assert failed.value.status == 0  # no answer: the proxy is not there
            items, _ = await direct.list(NAMESPACES)
            assert [n["metadata"]["name"] for n in items] == ["default"]
            # writes (`Kube._send`, orjson bodies on the client's session) take the same way
            body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
            with pytest.raises(KubeError) as failed:
                await proxied.create_pod("default", body)
            assert failed.value.status == 0
            created = await direct.create_pod("default", body)
            assert created["metadata"]["uid"] and created["spec"]["containers"][0]["image"] == "x"
        finally:
            await proxied.close()
            await direct.close()


async def test_writes_carry_the_clients_credentials_and_fail_as_kube_errors(
    tmp_path: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """A write is authenticated as every call of the client is (the kubeconfig's bearer
    token), its answer decoded, and a refusal is a `KubeError` with the API's status and
    reason, as for the generated API methods."""
    store = Store()
    store.create(SIM_NAMESPACES, {"metadata": {"name": "default"}})
    async with ApiServer(store, token="t") as server:
        cfg = await load_configuration(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        metrics = ControllerMetrics(CollectorRegistry())
        kube = Kube(client.ApiClient(configuration=cfg), metrics)
        try:
            body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
            await kube.create_pod("default", body)
            with pytest.raises(KubeError) as exists:
                await kube.create_pod("default", body)
            assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")
            patched = await kube.annotate_pod("default", "p", {"a": "b"})
            assert patched["metadata"]["annotations"] == {"a": "b"}
            status = {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}
            marked = await kube.patch_pod_status("default", "p", status)
            assert marked["status"]["conditions"][0]["type"] == "PodScheduled"
            with pytest.raises(KubeError) as missing:
                await kube.annotate_pod("default", "nobody", {"a": "b"})
            assert missing.value.not_found
            # The verb is a field set where the error is raised, the message unchanged,
            # and the adapter (not the exception) counts each error once on its metrics.
            assert (exists.value.verb, missing.value.verb) == ("create", "patch")
            assert str(exists.value).startswith("creating pod default/p: 409 AlreadyExists: ")
            errors = "gpu_intent_api_errors_total"
            registry = metrics.registry
            assert registry.get_sample_value(errors, {"verb": "create", "code": "409"}) == 1
            assert registry.get_sample_value(errors, {"verb": "patch", "code": "404"}) == 1
            KubeError("creating pod default/q", 500, "InternalError", "", verb="create")
            assert registry.get_sample_value(errors, {"verb": "create", "code": "500"}) is None
        finally:
            await kube.close()
        cfg.api_key = {"BearerToken": "Bearer wrong"}
        cfg.api_key_prefix = {}
        intruder = Kube(client.ApiClient(configuration=cfg))
        try:
            with pytest.raises(KubeError) as refused:
                await intruder.create_event("default", {"metadata": {"name": "e"}})
            assert (refused.value.status, refused.value.verb) == (401, "create")
        finally:
            await intruder.close()
