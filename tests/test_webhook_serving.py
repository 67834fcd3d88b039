"""The webhook server under hostile or changing conditions, over real TLS on loopback:
large bodies, slow clients, certificate rotation, readiness."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
from prometheus_client import CollectorRegistry
from webhook_support import (
    SecretVolume,
    closed_by_peer,
    connect,
    load,
    read_answer,
    request_bytes,
    serial_of,
    until,
)

from certs import TLSFiles, write_tls_files
from webhook.connections import GuardedConnection, Timeouts
from webhook.server import (
    CLIENT_MAX_SIZE,
    STATE,
    ServeOptions,
    make_app,
    serve,
    shutdown,
    ssl_context,
    start,
)

MiB = 1024 * 1024


@dataclass
class Server:
    port: int
    registry: CollectorRegistry
    client: ssl.SSLContext
    app: Any

    def count(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return value or 0.0


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return write_tls_files(tmp_path / "tls", ["localhost"], ["127.0.0.1"])


async def _started(tls: TLSFiles, timeouts: Timeouts) -> tuple[Server, Any]:
    registry = CollectorRegistry()
    app = make_app(registry, timeouts=timeouts)
    runner = await start(app, "127.0.0.1", 0, ssl_context(str(tls.cert), str(tls.key)))
    client = ssl.create_default_context(cafile=str(tls.ca_cert))
    return Server(runner.addresses[0][1], registry, client, app), runner


@pytest.fixture
async def server(tls: TLSFiles) -> AsyncIterator[Server]:
    started, runner = await _started(tls, Timeouts(header=1.0, body=1.0, idle=1.5))
    try:
        yield started
    finally:
        await runner.cleanup()


async def post(server: Server, body: bytes) -> Any:
    reader, writer = await connect(server.port, server.client)
    try:
        writer.write(request_bytes(body))
        await writer.drain()
        return await read_answer(reader)
    finally:
        writer.close()


def padded_review(size: int) -> bytes:
    """A valid GPU pod review of about ``size`` bytes: a real pod with many env vars."""
    body = load("02-hami-gpumem-annotated.json")
    container = body["request"]["object"]["spec"]["containers"][0]
    base = len(json.dumps(body))
    entry = {"name": "PADDING_000000", "value": "x" * 200}
    per_entry = len(json.dumps(entry)) + 2
    container["env"] = [
        {"name": f"PADDING_{i:06d}", "value": "x" * 200} for i in range((size - base) // per_entry)
    ]
    return json.dumps(body).encode()


# --- body size ----------------------------------------------------------------------


@pytest.mark.parametrize("mib", [4.1, 6.9])
async def test_large_valid_reviews_are_answered(server: Server, mib: float) -> None:
    data = padded_review(int(mib * MiB))
    assert abs(len(data) - mib * MiB) < 1024
    answer = await post(server, data)
    assert answer.status == 200, answer.body[:200]
    response = answer.json()["response"]
    pod = json.loads(data)["request"]["object"]
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert patched["metadata"]["annotations"]["gpu-intent.io/gpus"] == "0.3"


async def test_a_body_over_7_mib_is_413_with_a_json_reason(server: Server) -> None:
    answer = await post(server, b" " * (CLIENT_MAX_SIZE + 1))
    assert answer.status == 413
    assert answer.json() == {
        "error": f"request body of {CLIENT_MAX_SIZE + 1} bytes is over the limit of "
        f"{CLIENT_MAX_SIZE} bytes (7 MiB)"
    }
    assert server.count("gpu_intent_webhook_reviews_total", outcome="too_large") == 1


async def test_a_chunked_body_over_7_mib_is_413(server: Server) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield b" " * MiB

    connector = aiohttp.TCPConnector(ssl=server.client)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"https://localhost:{server.port}/mutate", data=chunks()) as resp,
    ):
        assert resp.status == 413
        assert "over the limit" in (await resp.json())["error"]


# --- slow clients -------------------------------------------------------------------


async def test_slowloris_connections_are_closed_within_the_header_timeout(
    server: Server,
) -> None:
    """200 clients that finish the TLS handshake, then send a header byte every 0.2 s;
    the server (header timeout 1 s, swept every 0.25 s) closes every one of them within
    4 s of their handshakes (2 shared cores run both sides) and keeps
    answering real requests meanwhile."""
    count = 200
    streams = await asyncio.gather(*(connect(server.port, server.client) for _ in range(count)))
    started = time.monotonic()
    header = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 10_000

    async def trickle(writer: asyncio.StreamWriter) -> None:
        for byte in header:
            if writer.is_closing():
                return
            writer.write(bytes([byte]))
            await asyncio.sleep(0.2)  # the slow client under test

    tricklers = [asyncio.create_task(trickle(w)) for _, w in streams]
    try:
        answer = await post(server, json.dumps(load("01-generatename-whole-gpu.json")).encode())
        assert answer.status == 200  # not starved by the slow clients
        closed = await asyncio.gather(*(closed_by_peer(r, within=5.0) for r, _ in streams))
        elapsed = time.monotonic() - started
    finally:
        for task in tricklers:
            task.cancel()
        for _, writer in streams:
            writer.close()
    assert all(closed)
    assert elapsed < 4.0
    assert server.count(
        "gpu_intent_webhook_connections_closed_total", reason="header_timeout"
    ) == pytest.approx(count)


async def test_a_connection_that_never_finishes_its_tls_handshake_is_closed(
    server: Server,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)  # plain TCP
    try:
        started = time.monotonic()
        assert await closed_by_peer(reader, within=5.0)
        assert time.monotonic() - started < 2.5
    finally:
        writer.close()


async def test_a_slow_body_is_cut_after_the_body_timeout(server: Server) -> None:
    body = json.dumps(load("01-generatename-whole-gpu.json")).encode()
    reader, writer = await connect(server.port, server.client)
    try:
        full = request_bytes(body)
        writer.write(full[: full.index(b"\r\n\r\n") + 4 + 10])  # headers and 10 body bytes
        started = time.monotonic()
        assert await closed_by_peer(reader, within=5.0)
        assert 0.9 < time.monotonic() - started < 2.5
    finally:
        writer.close()
    assert server.count("gpu_intent_webhook_connections_closed_total", reason="body_timeout") == 1


async def test_a_body_timeout_is_one_warning_without_a_traceback(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """Headers and half a body, then nothing: the guard cuts the connection after the
    body timeout and says so in one WARNING line; aiohttp's "Error handling request"
    ERROR with the handler's ConnectionResetError traceback does not appear."""
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="webhook.server")
    started, runner = await _started(tls, Timeouts(header=5.0, body=0.3, idle=5.0))
    try:
        reader, writer = await connect(started.port, started.client)
        try:
            full = request_bytes(json.dumps(load("01-generatename-whole-gpu.json")).encode())
            body_at = full.index(b"\r\n\r\n") + 4
            writer.write(full[: body_at + (len(full) - body_at) // 2])
            assert await closed_by_peer(reader, within=5.0)
        finally:
            writer.close()
        deadline = time.monotonic() + 5.0
        while not any("not answered, connection closed" in r.message for r in caplog.records):
            assert time.monotonic() < deadline, "the handler never saw the cut"
            await asyncio.sleep(0.02)
        assert (await post(started, json.dumps(load("04-dry-run.json")).encode())).status == 200
    finally:
        await runner.cleanup()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.levelno) for r in warnings] == [("webhook.connections", logging.WARNING)]
    assert "body timeout" in warnings[0].getMessage()
    assert "127.0.0.1" in warnings[0].getMessage()
    assert [r for r in caplog.records if r.exc_info] == []
    assert started.count("gpu_intent_webhook_connections_closed_total", reason="body_timeout") == 1


async def test_request_duration_counts_from_the_first_byte(
    tls: TLSFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop is blocked for 0.3 s right after a request's bytes are read and
    before aiohttp hands the request to the handler (a callback queued ahead of it, as a
    review of another connection would be): the observed duration includes the 0.3 s."""
    stall = 0.3
    stalled: list[bool] = []
    data_received = GuardedConnection.data_received

    def stalling(self: GuardedConnection, data: bytes) -> None:
        if not stalled:
            stalled.append(True)
            asyncio.get_running_loop().call_soon(time.sleep, stall)  # ahead of the handler
        data_received(self, data)

    monkeypatch.setattr(GuardedConnection, "data_received", stalling)
    started, runner = await _started(tls, Timeouts())
    try:
        answer = await post(started, json.dumps(load("04-dry-run.json")).encode())
        assert answer.status == 200 and stalled
    finally:
        await runner.cleanup()
    name = "gpu_intent_webhook_request_duration_seconds"
    assert started.count(f"{name}_count") == 1
    assert stall <= started.count(f"{name}_sum") < stall + 2.0
    assert started.count(f"{name}_bucket", le="0.2") == 0  # not the ~1 ms of the review


async def test_idle_keep_alive_connections_are_closed_after_the_idle_timeout(
    server: Server,
) -> None:
    reader, writer = await connect(server.port, server.client)
    try:
        writer.write(request_bytes(json.dumps(load("04-dry-run.json")).encode()))
        assert (await read_answer(reader)).status == 200
        started = time.monotonic()
        assert await closed_by_peer(reader, within=5.0)
        assert 1.4 < time.monotonic() - started < 3.0
    finally:
        writer.close()
    assert server.count("gpu_intent_webhook_connections_closed_total", reason="idle_timeout") == 1


async def test_keep_alive_requests_each_get_a_fresh_header_deadline(server: Server) -> None:
    """Requests 0.6 s apart on one connection, 3 s in all: none is cut (each request's
    header clock starts at its first byte, and the connection is never idle 1.5 s)."""
    body = json.dumps(load("03-kai-fraction-no-resources.json")).encode()
    reader, writer = await connect(server.port, server.client)
    try:
        for _ in range(5):
            writer.write(request_bytes(body))
            assert (await read_answer(reader)).status == 200
            await asyncio.sleep(0.6)  # the pause under test: under the 1.5 s idle timeout
    finally:
        writer.close()


async def test_unknown_paths_are_404_and_keep_the_connection_alive(server: Server) -> None:
    reader, writer = await connect(server.port, server.client)
    try:
        writer.write(b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = await read_answer(reader)
        assert (answer.status, answer.json()) == (404, {"error": "no route /nope"})
        await asyncio.sleep(1.2)  # past the 1 s header deadline, within the 1.5 s idle one
        writer.write(b"GET /mutate HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = await read_answer(reader)
        assert answer.status == 405 and answer.headers["allow"] == "POST"
    finally:
        writer.close()


# --- readiness ----------------------------------------------------------------------


async def test_livez_and_readyz(server: Server) -> None:
    connector = aiohttp.TCPConnector(ssl=server.client)
    async with aiohttp.ClientSession(connector=connector) as session:
        for path in ("/livez", "/healthz", "/readyz"):
            async with session.get(f"https://localhost:{server.port}{path}") as resp:
                assert (resp.status, await resp.text()) == (200, "ok")


def test_not_ready_before_the_listener_serves() -> None:
    state = make_app()[STATE]
    assert not state.ready


async def test_not_ready_while_draining(tls: TLSFiles) -> None:
    started, runner = await _started(tls, Timeouts(header=5.0, body=5.0, idle=5.0))
    reader, writer = await connect(started.port, started.client)
    body = json.dumps(load("01-generatename-whole-gpu.json")).encode()
    full = request_bytes(body)
    split = full.index(b"\r\n\r\n") + 4 + 100
    writer.write(full[:split])  # a request in progress holds the drain open
    await writer.drain()
    state = started.app[STATE]
    handling = state.guard.connections.values()
    await until(lambda: any(c.phase.value == "handling" for c in handling), 5, "handler ran")
    stopping = asyncio.create_task(shutdown(runner, 5.0))
    await until(lambda: state.guard.draining, 5, "the drain began")
    assert not state.ready and state.guard.draining
    writer.write(full[split:])
    answer = await read_answer(reader)
    assert answer.status == 200 and answer.headers["connection"] == "close"
    await asyncio.wait_for(stopping, 5)
    writer.close()


# --- certificate rotation -----------------------------------------------------------


@pytest.fixture
def volume(tmp_path: Path) -> SecretVolume:
    volume = SecretVolume(tmp_path / "secret")
    volume.rotate_to_new_pair()
    return volume


async def _serve(
    volume: SecretVolume, port: int, stop: asyncio.Event, registry: CollectorRegistry | None = None
) -> asyncio.Task[None]:
    options = ServeOptions(reload_interval=0.05)
    task = asyncio.create_task(
        serve("127.0.0.1", port, volume.cert, volume.key, registry, options=options, stop=stop)
    )
    for _ in range(200):
        try:
            _, writer = await connect(port, volume.trust_all())
            writer.close()
            return task
        except OSError:
            await asyncio.sleep(0.025)
    raise AssertionError("serve() never listened")


async def _handshake(port: int, context: ssl.SSLContext) -> int:
    reader, writer = await connect(port, context)
    try:
        writer.write(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        assert (await read_answer(reader)).status == 200
        return serial_of(writer)
    finally:
        writer.close()


async def test_rotation_mid_traffic_fails_no_handshake(volume: SecretVolume) -> None:
    from test_webhook_server import free_port

    port = free_port()
    stop = asyncio.Event()
    task = await _serve(volume, port, stop)
    first = await _handshake(port, volume.trust_all())
    next_pair = volume.new_pair()  # the client trusts both CAs from the start
    context = volume.trust_all()
    serials: list[int] = []
    failures: list[BaseException] = []

    async def client() -> None:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                serials.append(await _handshake(port, context))
            except Exception as e:
                failures.append(e)

    async def rotate() -> None:
        await until(lambda: len(serials) >= 3, 2.0, "handshakes before the rotation")
        volume.rotate(*volume.files(next_pair))

    try:
        await asyncio.gather(client(), client(), client(), rotate())
    finally:
        stop.set()
        await task
    assert failures == []
    assert serials[0] == first and len(set(serials)) == 2
    assert serials[-1] != first


async def test_a_broken_new_pair_keeps_the_old_one_serving(
    volume: SecretVolume, caplog: pytest.LogCaptureFixture
) -> None:
    from test_webhook_server import free_port

    port = free_port()
    stop = asyncio.Event()
    registry = CollectorRegistry()
    task = await _serve(volume, port, stop, registry)
    context = volume.trust_all()
    try:
        before = await _handshake(port, context)
        other = volume.new_pair()
        # a key that does not match the certificate, then garbage
        reloads = "gpu_intent_webhook_tls_reloads_total"

        def tried(result: str, n: int) -> Callable[[], bool]:
            """Whether ``n`` reloads ended in ``result``: after them, a pair that would
            have been taken up is."""
            return lambda: (registry.get_sample_value(reloads, {"result": result}) or 0) >= n

        volume.rotate(volume.current()[0], volume.files(other)[1])
        await until(tried("failed", 1), 5)
        assert await _handshake(port, context) == before
        volume.rotate(b"not a certificate", b"not a key")
        await until(tried("failed", 2), 5)
        assert await _handshake(port, context) == before
        assert caplog.text.count("does not load, still serving the old one") == 2
        volume.rotate(*volume.files(other))
        await until(tried("ok", 1), 5)
        assert await _handshake(port, volume.trust_all()) != before  # a good pair loads
        assert registry.get_sample_value(reloads, {"result": "failed"}) == 2
        assert registry.get_sample_value(reloads, {"result": "ok"}) == 1
        expiry = registry.get_sample_value("gpu_intent_webhook_tls_not_after_timestamp_seconds")
        assert expiry is not None and expiry > time.time() + 300 * 86400
    finally:
        stop.set()
        await task


def test_padded_reviews_are_real_reviews() -> None:
    small = json.loads(padded_review(20_000))
    original = load("02-hami-gpumem-annotated.json")
    pod = copy.deepcopy(small["request"]["object"])
    del pod["spec"]["containers"][0]["env"]
    assert pod == original["request"]["object"]
