"""SIGTERM to a real ``gpu-intent webhook`` process: ``/readyz`` turns 503 while it keeps
serving for ``--drain-seconds``, then it stops accepting, finishes the requests in
progress (on kept-alive connections too) and exits 0."""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from webhook_support import (
    closed_by_peer,
    connect,
    get,
    load,
    read_answer,
    request_bytes,
    until_refused,
)

from certs import write_tls_files


def free_port() -> int:
    from test_webhook_server import free_port as free

    return free()


@dataclass
class Process:
    proc: asyncio.subprocess.Process
    port: int
    client: ssl.SSLContext


@asynccontextmanager
async def running(tmp_path: Path, *extra: str) -> AsyncIterator[Process]:
    """A ``gpu-intent webhook`` process with ``extra`` flags, once ``/readyz`` is ok."""
    tls = write_tls_files(tmp_path / "tls", ["localhost"], ["127.0.0.1"])
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpu_intent",
        "webhook",
        f"--listen=127.0.0.1:{port}",
        f"--tls-cert-file={tls.cert}",
        f"--tls-key-file={tls.key}",
        "--shutdown-timeout=10",
        *extra,
        stderr=asyncio.subprocess.PIPE,
    )
    client = ssl.create_default_context(cafile=str(tls.ca_cert))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                reader, writer = await connect(port, client)
                writer.write(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                answer = await read_answer(reader)
                writer.close()
                if answer.status == 200:
                    break
            except OSError:
                pass
            assert proc.returncode is None and time.monotonic() < deadline, "never ready"
            await asyncio.sleep(0.1)
        yield Process(proc, port, client)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Process]:
    """No drain window: the listener closes at SIGTERM."""
    async with running(tmp_path, "--drain-seconds=0") as process:
        yield process


@pytest.fixture
async def draining_webhook(tmp_path: Path) -> AsyncIterator[Process]:
    async with running(tmp_path, "--drain-seconds=3") as process:
        yield process


async def test_sigterm_finishes_requests_in_progress_then_exits(webhook: Process) -> None:
    body = json.dumps(load("02-hami-gpumem-annotated.json")).encode()
    full = request_bytes(body)
    split = full.index(b"\r\n\r\n") + 4 + len(body) // 2

    # A: a kept-alive connection whose second request is half sent when SIGTERM comes
    reader_a, writer_a = await connect(webhook.port, webhook.client)
    writer_a.write(full)
    assert (await read_answer(reader_a)).status == 200
    writer_a.write(full[:split])
    await writer_a.drain()
    # B: a kept-alive connection, idle. Its answer is the signal that A's half request
    # is in: those bytes were on the wire first, so the server's one event loop read them
    # (and started A's handler) before it answered B.
    reader_b, writer_b = await connect(webhook.port, webhook.client)
    writer_b.write(full)
    assert (await read_answer(reader_b)).status == 200

    webhook.proc.send_signal(signal.SIGTERM)
    # The signal reaches the process asynchronously: wait until it stops accepting.
    await until_refused(webhook.port, webhook.client, deadline=time.monotonic() + 5.0)
    assert await closed_by_peer(reader_b, within=3.0)  # idle: closed
    assert webhook.proc.returncode is None  # still finishing A's request

    writer_a.write(full[split:])
    answer = await read_answer(reader_a)
    assert answer.status == 200
    assert answer.headers["connection"] == "close"
    assert answer.json()["response"]["patchType"] == "JSONPatch"
    assert await closed_by_peer(reader_a, within=3.0)

    code = await asyncio.wait_for(webhook.proc.wait(), 10)
    assert webhook.proc.stderr is not None
    log = (await webhook.proc.stderr.read()).decode()
    assert code == 0, log
    assert "webhook stopping: finishing requests in progress" in log
    assert "webhook stopped" in log
    assert "Traceback" not in log
    for writer in (writer_a, writer_b):
        writer.close()


async def test_sigterm_with_nothing_in_progress_exits_at_once(webhook: Process) -> None:
    started = time.monotonic()
    webhook.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(webhook.proc.wait(), 10) == 0
    assert time.monotonic() - started < 3


async def test_sigterm_keeps_serving_with_readyz_503_for_the_drain_seconds(
    draining_webhook: Process,
) -> None:
    webhook = draining_webhook
    reader, writer = await connect(webhook.port, webhook.client)
    try:
        assert (await get(reader, writer, "/readyz")).status == 200
        sent = time.monotonic()
        webhook.proc.send_signal(signal.SIGTERM)
        deadline = sent + 2.0  # well inside the 3 s window
        while (answer := await get(reader, writer, "/readyz")).status == 200:
            assert time.monotonic() < deadline, "/readyz never turned 503"
            await asyncio.sleep(0.02)  # the signal reaches the process asynchronously
        assert (answer.status, answer.body) == (503, b"shutting down")
        writer.write(request_bytes(json.dumps(load("02-hami-gpumem-annotated.json")).encode()))
        answer = await read_answer(reader)
        assert answer.status == 200 and answer.headers.get("connection") != "close"
        assert answer.json()["response"]["patchType"] == "JSONPatch"
        _, other = await connect(webhook.port, webhook.client)  # still accepting
        other.close()
        assert await closed_by_peer(reader, within=6.0)  # closed once the window is over
    finally:
        writer.close()
    code = await asyncio.wait_for(webhook.proc.wait(), 10)
    assert time.monotonic() - sent >= 3.0 * 0.95
    assert webhook.proc.stderr is not None
    log = (await webhook.proc.stderr.read()).decode()
    assert code == 0, log
    assert "/readyz answers 503, serving on for 3 s" in log
    assert "Traceback" not in log
