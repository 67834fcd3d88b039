"""The webhook's shutdown, in process over real TLS on loopback: the drain window after
``stop`` (``/readyz`` 503 while everything is still served), then the listener closing,
and idle clients that never read not holding the exit up."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from test_webhook_server import free_port
from webhook_support import (
    closed_by_peer,
    connect,
    get,
    load,
    read_answer,
    request_bytes,
    until_listening,
    until_refused,
)

from certs import TLSFiles, write_tls_files
from webhook.server import ServeOptions, serve


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return write_tls_files(tmp_path / "tls", ["localhost"], ["127.0.0.1"])


def review() -> bytes:
    return json.dumps(load("02-hami-gpumem-annotated.json")).encode()


async def serving(
    tls: TLSFiles, options: ServeOptions, registry: CollectorRegistry | None = None
) -> tuple[int, ssl.SSLContext, asyncio.Event, asyncio.Task[None]]:
    port = free_port()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve("127.0.0.1", port, str(tls.cert), str(tls.key), registry, options=options, stop=stop)
    )
    client = ssl.create_default_context(cafile=str(tls.ca_cert))
    await until_listening(port, client)
    return port, client, stop, task


async def test_stop_turns_readyz_503_and_keeps_serving_for_the_drain_window(
    tls: TLSFiles,
) -> None:
    drain = 3.0
    port, client, stop, task = await serving(tls, ServeOptions(drain_seconds=drain))
    kept_reader, kept_writer = await connect(port, client)  # kept alive from before the stop
    new_writer: asyncio.StreamWriter | None = None
    try:
        assert (await get(kept_reader, kept_writer, "/readyz")).status == 200

        stopped_at = time.monotonic()
        stop.set()
        answer = await get(kept_reader, kept_writer, "/readyz")
        assert (answer.status, answer.body) == (503, b"shutting down")
        assert answer.headers.get("connection") != "close"  # still kept alive

        # In the window a new connection is accepted and a review answered as usual.
        new_reader, new_writer = await connect(port, client)
        new_writer.write(request_bytes(review()))
        answer = await read_answer(new_reader)
        assert answer.status == 200
        assert answer.headers.get("connection") != "close"
        response = answer.json()["response"]
        assert response["allowed"] is True and response["patchType"] == "JSONPatch"
        assert not task.done()

        # A request half sent when the window ends holds the drain open.
        full = request_bytes(review())
        split = full.index(b"\r\n\r\n") + 4 + 100
        new_writer.write(full[:split])
        await new_writer.drain()

        # After the window: new connections are refused.
        await until_refused(port, client, deadline=stopped_at + drain + 5.0)
        assert time.monotonic() - stopped_at >= drain * 0.95
        assert not task.done()

        new_writer.write(full[split:])
        answer = await read_answer(new_reader)
        assert answer.status == 200 and answer.headers["connection"] == "close"
        assert await closed_by_peer(new_reader, within=3.0)
        assert await closed_by_peer(kept_reader, within=3.0)  # idle: closed
        await asyncio.wait_for(task, 5.0)
    finally:
        stop.set()
        kept_writer.close()
        if new_writer is not None:
            new_writer.close()
        if not task.done():
            task.cancel()


async def test_no_drain_window_closes_the_listener_at_once(tls: TLSFiles) -> None:
    port, client, stop, task = await serving(tls, ServeOptions(drain_seconds=0))
    stop.set()
    await asyncio.wait_for(task, 5.0)
    with pytest.raises(ConnectionRefusedError):
        await connect(port, client)


async def test_an_idle_client_that_never_reads_does_not_hold_the_shutdown_up(
    tls: TLSFiles,
) -> None:
    """A kept-alive client that stops reading after its first answer never answers the
    server's TLS close_notify; the polite close is cut after a second, not after the
    header timeout (10 s here) or asyncio's 30 s ``ssl_shutdown_timeout``."""
    drain = 0.5
    registry = CollectorRegistry()
    port, client, stop, task = await serving(tls, ServeOptions(drain_seconds=drain), registry)
    reader, writer = await connect(port, client)
    try:
        writer.write(request_bytes(review()))
        assert (await read_answer(reader)).status == 200
        writer.transport.pause_reading()  # never reads again
        started = time.monotonic()
        stop.set()
        await asyncio.wait_for(task, 15.0)
        elapsed = time.monotonic() - started
    finally:
        writer.transport.abort()  # a close would wait for the server's close_notify
        if not task.done():
            task.cancel()
    assert drain <= elapsed < drain + 2.5
    closed = registry.get_sample_value(
        "gpu_intent_webhook_connections_closed_total", {"reason": "shutdown"}
    )
    assert closed == 1
