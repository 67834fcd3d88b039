"""Secrets in the simulated apiserver, through the real kubernetes_asyncio client."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from intent.kube import load_configuration
from sim.secrets import MAX_SECRET_SIZE
from sim.server import ApiServer
from sim.store import Store

NS = "team"


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[client.CoreV1Api]:
    async with ApiServer(Store(), token="t") as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = client.ApiClient(configuration=await load_configuration(str(kubeconfig)))
        try:
            core = client.CoreV1Api(api)
            await core.create_namespace({"metadata": {"name": NS}})
            yield core
        finally:
            await api.close()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def message(e: ApiException) -> str:
    return str(json.loads(e.body)["message"])


async def test_string_data_is_merged_into_data_and_type_defaults_to_opaque(
    core: client.CoreV1Api,
) -> None:
    body = {"metadata": {"name": "s"}, "data": {"a": b64("1"), "b": b64("2")},
            "stringData": {"b": "two", "c": "three"}}  # fmt: skip
    created = await core.create_namespaced_secret(NS, body)
    assert created.type == "Opaque"
    assert created.data == {"a": b64("1"), "b": b64("two"), "c": b64("three")}
    assert (await core.read_namespaced_secret("s", NS)).data == created.data
    listed = await core.list_namespaced_secret(NS)
    assert [s.metadata.name for s in listed.items] == ["s"]


# aiohttp warns about sending a body over 1 MiB from memory, which the size check needs
@pytest.mark.filterwarnings("ignore:Sending a large body directly:ResourceWarning")
async def test_invalid_keys_size_and_tls_keys_are_422(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as bad_key:
        await core.create_namespaced_secret(
            NS, {"metadata": {"name": "k"}, "stringData": {"a/b": "x"}}
        )
    assert bad_key.value.status == 422 and "data[a/b]" in message(bad_key.value)
    big = {"metadata": {"name": "big"}, "stringData": {"x": "y" * (MAX_SECRET_SIZE + 1)}}
    with pytest.raises(ApiException) as too_big:
        await core.create_namespaced_secret(NS, big)
    assert too_big.value.status == 422 and "Too long" in message(too_big.value)
    tls = {"metadata": {"name": "t"}, "type": "kubernetes.io/tls", "stringData": {"tls.crt": "c"}}
    with pytest.raises(ApiException) as no_key:
        await core.create_namespaced_secret(NS, tls)
    assert no_key.value.status == 422 and "data[tls.key]: Required value" in message(no_key.value)


async def test_data_that_is_not_base64_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as e:
        await core.create_namespaced_secret(NS, {"metadata": {"name": "s"}, "data": {"a": "!!"}})
    assert e.value.status == 400 and "illegal base64" in message(e.value)


async def test_updates_check_resource_version_type_and_immutability(
    core: client.CoreV1Api,
) -> None:
    created = await core.create_namespaced_secret(
        NS, {"metadata": {"name": "s"}, "stringData": {"a": "1"}}
    )
    stale = created.metadata.resource_version
    updated = await core.replace_namespaced_secret(
        "s", NS, {"metadata": {"name": "s", "resourceVersion": stale}, "data": {"a": b64("2")}}
    )
    assert updated.data == {"a": b64("2")}
    with pytest.raises(ApiException) as conflict:
        await core.replace_namespaced_secret(
            "s", NS, {"metadata": {"name": "s", "resourceVersion": stale}, "data": {}}
        )
    assert conflict.value.status == 409
    with pytest.raises(ApiException) as retyped:
        await core.patch_namespaced_secret("s", NS, {"type": "kubernetes.io/tls",
                                                      "data": {"tls.crt": "", "tls.key": ""}})  # fmt: skip
    assert retyped.value.status == 422 and "type: Invalid value" in message(retyped.value)
    await core.patch_namespaced_secret("s", NS, {"immutable": True})
    with pytest.raises(ApiException) as frozen:
        await core.patch_namespaced_secret("s", NS, {"data": {"a": b64("3")}})
    assert frozen.value.status == 422 and "immutable" in message(frozen.value)
