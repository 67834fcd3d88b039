"""Webhook latency: the pure review, and whole HTTPS round trips on loopback.

Targets (REFERENCE.md section 5): Gatekeeper recommends webhook p99 < 100 ms; mutating
webhooks run one after another, so ours should add well under a millisecond of CPU.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from certs import write_tls_files
from webhook import server
from webhook.review import review

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "admission-reviews"


def _reviews() -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_pure(rounds: int = 5000) -> None:
    bodies = _reviews()
    samples: list[float] = []
    for i in range(rounds):
        body = bodies[i % len(bodies)]
        start = time.perf_counter()
        review(body)
        samples.append(time.perf_counter() - start)
    print(
        f"review() pure: {rounds} reviews of the 4 captured AdmissionReviews: "
        f"p50 {_percentile(samples, 0.5) * 1e6:.0f} us, p99 {_percentile(samples, 0.99) * 1e6:.0f} us, "
        f"{rounds / sum(samples):,.0f} reviews/s on one core"
    )


async def run_http(requests: int = 2000, concurrency: int = 8) -> None:
    bodies = [json.dumps(b).encode() for b in _reviews()]
    with tempfile.TemporaryDirectory() as tmp:
        tls = write_tls_files(Path(tmp), ["localhost"], ["127.0.0.1"])
        runner = await server.start(
            server.make_app(), "127.0.0.1", 0, server.ssl_context(str(tls.cert), str(tls.key))
        )
        url = f"https://127.0.0.1:{runner.addresses[0][1]}/mutate?timeout=10s"
        context = ssl.create_default_context(cafile=str(tls.ca_cert))
        samples: list[float] = []
        try:
            connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
            async with aiohttp.ClientSession(connector=connector) as session:
                queue = list(range(requests))

                async def worker() -> None:
                    while queue:
                        i = queue.pop()
                        start = time.perf_counter()
                        async with session.post(
                            url,
                            data=bodies[i % len(bodies)],
                            headers={"Content-Type": "application/json"},
                        ) as resp:
                            await resp.read()
                            assert resp.status == 200
                        samples.append(time.perf_counter() - start)

                started = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(concurrency)))
                elapsed = time.perf_counter() - started
        finally:
            await runner.cleanup()
    print(
        f"POST /mutate over TLS (keep-alive, {concurrency} concurrent clients, {requests} requests): "
        f"p50 {_percentile(samples, 0.5) * 1e3:.2f} ms, p99 {_percentile(samples, 0.99) * 1e3:.2f} ms, "
        f"mean {statistics.mean(samples) * 1e3:.2f} ms, {requests / elapsed:,.0f} requests/s "
        "(client and server share this machine's cores)"
    )
