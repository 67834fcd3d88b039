"""The webhook over real HTTPS: certificates from certs, a real TCP socket."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
from prometheus_client import CollectorRegistry

from certs import TLSFiles, write_tls_files
from webhook import server
from webhook.server import CLIENT_MAX_SIZE, make_app, serve, ssl_context, start

FIXTURES = Path(__file__).parent / "fixtures" / "admission-reviews"
MUTATE = "/mutate?timeout=10s"  # the apiserver appends the timeout as a query


def load(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return body


@dataclass
class Webhook:
    session: aiohttp.ClientSession
    registry: CollectorRegistry
    url: str

    async def mutate(self, body: object, status: int = 200) -> dict[str, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.url + MUTATE, data=data, headers=headers) as resp:
            assert resp.status == status, await resp.text()
            assert resp.content_type == "application/json"
            result: dict[str, Any] = await resp.json()
            return result

    def count(self, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "gpu_intent_webhook_reviews_total", {"outcome": outcome}
        )
        assert value is not None
        return value


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return write_tls_files(tmp_path / "tls", ["localhost"], ["127.0.0.1"])


def trusting(tls: TLSFiles) -> ssl.SSLContext:
    """A client context that trusts only the generated CA, hostname checks on."""
    context = ssl.create_default_context(cafile=str(tls.ca_cert))
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    return context


@pytest.fixture
async def webhook(tls: TLSFiles) -> AsyncIterator[Webhook]:
    registry = CollectorRegistry()
    context = ssl_context(str(tls.cert), str(tls.key))
    runner = await start(make_app(registry), "127.0.0.1", 0, context)
    port = runner.addresses[0][1]
    try:
        connector = aiohttp.TCPConnector(ssl=trusting(tls))
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Webhook(session, registry, f"https://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def patched_pod(body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(body["request"]["object"], ops)
    return result


# --- reviews --------------------------------------------------------------------------


async def test_gpu_pod_is_annotated(webhook: Webhook, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhook.server")
    body = load("02-hami-gpumem-annotated.json")
    pod = patched_pod(body, await webhook.mutate(body))
    annotations = pod["metadata"]["annotations"]
    assert annotations["gpu-intent.io/gpus"] == "0.3"
    assert annotations["gpu-intent.io/model"] == "a100"
    assert annotations["gpu-intent.io/gpu-memory"] == "3000"
    assert annotations["nvidia.com/use-gputype"] == "A100,H100"
    assert "pod capture/hami-vgpu: annotated gpu intent: 0.3 GPU" in caplog.text


async def test_reinvocation_is_idempotent(webhook: Webhook) -> None:
    body = load("03-kai-fraction-no-resources.json")
    body["request"]["object"] = patched_pod(body, await webhook.mutate(body))
    response = (await webhook.mutate(body))["response"]
    assert response == {"uid": body["request"]["uid"], "allowed": True}
    assert webhook.count("unchanged") == 1


async def test_generate_name_pod_without_name(webhook: Webhook) -> None:
    body = load("01-generatename-whole-gpu.json")
    assert "name" not in body["request"]["object"]["metadata"]
    pod = patched_pod(body, await webhook.mutate(body))
    assert pod["metadata"]["annotations"]["gpu-intent.io/gpus"] == "2"


async def test_pod_without_annotations_map(webhook: Webhook) -> None:
    body = load("04-dry-run.json")
    assert "annotations" not in body["request"]["object"]["metadata"]
    pod = patched_pod(body, await webhook.mutate(body))
    assert pod["metadata"]["annotations"]["gpu-intent.io/intent-version"] == "v1"


async def test_non_gpu_pod_is_untouched(webhook: Webhook) -> None:
    body = load("01-generatename-whole-gpu.json")
    container = body["request"]["object"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1"}}
    response = (await webhook.mutate(body))["response"]
    assert response == {"uid": body["request"]["uid"], "allowed": True}


async def test_uninferable_pod_is_allowed_with_a_warning(webhook: Webhook) -> None:
    body = load("03-kai-fraction-no-resources.json")
    body["request"]["object"]["metadata"]["annotations"]["gpu-fraction"] = "abc"
    response = (await webhook.mutate(body))["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response["warnings"][0].startswith("gpu-intent: cannot infer GPU intent:")
    assert webhook.count("error_object") == 1


async def test_a_review_past_its_budget_is_allowed_counted_and_logged(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """With a budget no review can meet (a nanosecond of CPU), a GPU pod is admitted
    unchanged with the warning, counted as ``deadline`` and logged as a WARNING."""
    registry = CollectorRegistry()
    runner = await start(make_app(registry, budget=1e-9), "127.0.0.1", 0,
                         ssl_context(str(tls.cert), str(tls.key)))  # fmt: skip
    try:
        connector = aiohttp.TCPConnector(ssl=trusting(tls))
        async with aiohttp.ClientSession(connector=connector) as session:
            hook = Webhook(session, registry, f"https://127.0.0.1:{runner.addresses[0][1]}")
            with caplog.at_level(logging.WARNING, logger="webhook.server"):
                response = (await hook.mutate(load("01-generatename-whole-gpu.json")))["response"]
    finally:
        await runner.cleanup()
    assert response["allowed"] is True and "patch" not in response
    [warning] = response["warnings"]
    assert warning.startswith("gpu-intent: pod not annotated: inference took over its budget")
    assert hook.count("deadline") == 1 and hook.count("patched") == 0
    logged = [r for r in caplog.records if r.name == "webhook.server"]
    assert [r.levelno for r in logged] == [logging.WARNING]
    assert "inference took over its budget" in logged[0].getMessage()


async def test_unexpected_exception_is_allowed_not_500(
    webhook: Webhook, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(body: object, **kwargs: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(server, "admit", boom)
    body = load("02-hami-gpumem-annotated.json")
    response = (await webhook.mutate(body))["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is True and "patch" not in response
    assert "RuntimeError: bug" in response["warnings"][0]
    assert "capture/hami-vgpu" in caplog.text and "Traceback" in caplog.text


# --- malformed input ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "body is not JSON"),
        (b"\xff\xfe\x00", "body is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "body is not JSON"),
        # strict JSON (orjson): no NaN, no lone surrogate
        (b'{"apiVersion": NaN}', "body is not JSON"),
        (b'{"s": "\\ud800"}', "body is not JSON"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u"}}, "kind"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        ([1, 2], "JSON object"),
    ],
)
async def test_malformed_input_is_400_with_a_reason(
    webhook: Webhook, body: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    answer = await webhook.mutate(body, status=400)
    assert reason in answer["error"]
    assert webhook.count("malformed") == 1
    assert "rejecting request from 127.0.0.1" in caplog.text


async def test_oversize_body_is_413(webhook: Webhook) -> None:
    data = io.BytesIO(b" " * (CLIENT_MAX_SIZE + 1))
    async with webhook.session.post(webhook.url + MUTATE, data=data) as resp:
        assert resp.status == 413


async def test_get_mutate_is_405(webhook: Webhook) -> None:
    async with webhook.session.get(webhook.url + MUTATE) as resp:
        assert resp.status == 405


# --- healthz and metrics --------------------------------------------------------------


async def test_healthz(webhook: Webhook) -> None:
    async with webhook.session.get(webhook.url + "/healthz") as resp:
        assert resp.status == 200
        assert await resp.text() == "ok"


async def test_metrics_count_outcomes(webhook: Webhook) -> None:
    await webhook.mutate(load("01-generatename-whole-gpu.json"))
    await webhook.mutate(load("02-hami-gpumem-annotated.json"))
    not_gpu = load("04-dry-run.json")
    not_gpu["request"]["object"]["spec"]["containers"][0]["resources"] = {}
    await webhook.mutate(not_gpu)
    await webhook.mutate(b"nope", status=400)
    async with webhook.session.get(webhook.url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/plain"
        text = await resp.text()
    assert 'gpu_intent_webhook_reviews_total{outcome="patched"} 2.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="not_gpu"} 1.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="malformed"} 1.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="unchanged"} 0.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="error_object"} 0.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="skipped"} 0.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="too_large"} 0.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="internal_error"} 0.0' in text
    assert 'gpu_intent_webhook_reviews_total{outcome="deadline"} 0.0' in text
    assert "gpu_intent_webhook_request_duration_seconds_count 4.0" in text
    assert 'gpu_intent_webhook_request_duration_seconds_bucket{le="0.0005"}' in text
    assert 'gpu_intent_webhook_request_duration_seconds_bucket{le="1.0"}' in text
    assert (
        'gpu_intent_webhook_intents_total{model="a100",source="hami+rule"} 1.0' in text
    )
    assert (
        'gpu_intent_webhook_intents_total{model="a100",source="nodeSelector+resources"} 1.0'
        in text
    )


@pytest.mark.skipif(sys.platform != "linux", reason="process_* metrics read /proc")
async def test_metrics_include_the_process_metrics(webhook: Webhook) -> None:
    async with webhook.session.get(webhook.url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    samples = {line.split(" ")[0]: line for line in text.splitlines() if line[:1] != "#"}
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
    ):
        assert name in samples, name
    assert float(samples["process_resident_memory_bytes"].split(" ")[1]) > 1024 * 1024
    assert any(name.startswith("python_info{") for name in samples)


def test_apps_do_not_share_metrics() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    make_app(first)
    make_app(second)  # would raise "Duplicated timeseries" on a shared registry
    make_app()


# --- TLS ------------------------------------------------------------------------------


async def test_client_not_trusting_the_ca_fails_the_handshake(webhook: Webhook) -> None:
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context())  # system CAs only
    async with aiohttp.ClientSession(connector=connector) as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(webhook.url + "/healthz")


async def test_certificate_must_name_the_host(tmp_path: Path) -> None:
    tls = write_tls_files(tmp_path, ["webhook.example"])  # no 127.0.0.1 SAN
    runner = await start(make_app(), "127.0.0.1", 0, ssl_context(str(tls.cert), str(tls.key)))
    port = runner.addresses[0][1]
    try:
        connector = aiohttp.TCPConnector(ssl=trusting(tls))
        async with aiohttp.ClientSession(connector=connector) as session:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(f"https://127.0.0.1:{port}/healthz")
    finally:
        await runner.cleanup()


def test_server_context_refuses_old_tls(tls: TLSFiles) -> None:
    context = ssl_context(str(tls.cert), str(tls.key))
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_serve_answers_until_cancelled(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook.server")
    port = free_port()
    task = asyncio.create_task(serve("127.0.0.1", port, str(tls.cert), str(tls.key)))
    url = f"https://127.0.0.1:{port}/healthz"
    connector = aiohttp.TCPConnector(ssl=trusting(tls))
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(100):  # up to ~5 s for the listener to come up
            try:
                async with session.get(url) as resp:
                    assert await resp.text() == "ok"
                    break
            except aiohttp.ClientConnectorError:
                assert not task.done()
                await asyncio.sleep(0.05)
        else:
            pytest.fail("serve() never answered")
    assert f"webhook listening on https://127.0.0.1:{port}" in caplog.text
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with socket.socket() as sock:  # the port is free again
        sock.bind(("127.0.0.1", port))
