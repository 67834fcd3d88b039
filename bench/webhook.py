"""Webhook speed: the pure review, and the real server against a null handler and kopf.

``python -m bench.webhook`` prints, in one run on one machine:

- ``review()`` alone over the captured AdmissionReviews;
- for the captured 3.4 KB review and a realistic 11.5 KB GPU pod review: p50 and p99
  latency at a steady 200 requests/s (medians of 3 alternating runs), and the maximum
  throughput (closed loop), of three
  servers side by side, each one process serving TLS on loopback: a null aiohttp handler
  that parses the body and echoes an allowed response, ``gpu-intent webhook`` (the real
  command), and kopf's admission server doing the same mutation
  (`bench.webhook_servers`); then the ratios to the targets.

Throughput is the median of 5 runs that alternate between the servers, so machine noise
hits all three alike. The load generator is a lean asyncio HTTP/1.1 client in this
process, with keep-alive connections, at niceness 10 for the throughput runs so the
servers get the CPU first; it still shares the machine's cores with the server (and with
whatever else runs), so
each row also prints the server process's CPU use (from ``/proc/<pid>/stat``) and the
requests it served per CPU-second, which do not depend on how fast the client is.

Targets (issue 9): throughput >= 0.70 of the null handler's, >= 2x kopf's, p99 < 5 ms
at 200 requests/s. Gatekeeper recommends webhook p99 < 100 ms (REFERENCE §5).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from certs import write_tls_files
from webhook.review import review

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "admission-reviews"
CAPTURED = "01-generatename-whole-gpu.json"

RATE = 200.0  # requests/s for the latency runs
LATENCY_SECONDS = 5.0
THROUGHPUT_SECONDS = 3.0
WARMUP_SECONDS = 0.5
ROUNDS = 5
LATENCY_ROUNDS = 3
CONCURRENCY = 16
#: Niceness of the load generator (this process) once the servers are started.
CLIENT_NICENESS = 10
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _reviews() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]


def _percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_pure(rounds: int = 5000) -> None:
    """``review()`` alone over the 4 captured reviews."""
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


def realistic_gpu_review() -> dict[str, Any]:
    """An 11.5 KB AdmissionReview of a GPU training pod as a Job controller creates it.

    The captured 3.4 KB review (a generateName pod with managedFields) grown the way real
    workload pods are: a main container with 70 env vars, mounts and probes, a log
    sidecar and an init container, HAMi resources, projected service account token,
    ConfigMap and Secret volumes, tolerations and node affinity, and the annotations
    that operators and service meshes add.
    """
    body: dict[str, Any] = json.loads((FIXTURES / CAPTURED).read_text())
    pod = body["request"]["object"]
    meta = pod["metadata"]
    meta["labels"].update({
        "app.kubernetes.io/name": "trainer", "app.kubernetes.io/instance": "llm-finetune-7",
        "app.kubernetes.io/component": "worker", "batch.kubernetes.io/job-name": "llm-finetune-7",
        "team": "ml-platform", "cost-center": "research-4411",
    })  # fmt: skip
    meta["annotations"] = {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9400",
        "kubectl.kubernetes.io/default-container": "trainer",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "nvidia.com/use-gputype": "A100,H100",
        "checkpoint.example.com/bucket": "s3://ml-checkpoints/llm-finetune-7/",
    }  # fmt: skip
    main = pod["spec"]["containers"][0]
    main["name"] = "trainer"
    main["image"] = "registry.example.com/ml/trainer:2026.01.3-cuda12.4"
    main["command"] = ["python", "-m", "trainer.main"]
    main["args"] = ["--config=/etc/trainer/config.yaml", "--checkpoint-dir=/ckpt", "--epochs=3"]
    main["env"] = [{"name": f"TRAINER_SETTING_{i:02d}", "value": f"value-{i:02d}-" + "x" * 24}
                   for i in range(64)] + [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"},
    ]  # fmt: skip
    main["resources"] = {
        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000",
                   "nvidia.com/gpucores": "50", "memory": "48Gi"},
        "requests": {"cpu": "6", "memory": "48Gi"},
    }  # fmt: skip
    main["volumeMounts"] = [
        {"name": "config", "mountPath": "/etc/trainer", "readOnly": True},
        {"name": "ckpt", "mountPath": "/ckpt"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
    ]  # fmt: skip
    main["readinessProbe"] = {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10}
    main["ports"] = [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    sidecar = {
        "name": "log-shipper", "image": "registry.example.com/obs/fluent-bit:3.1",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "logs", "mountPath": "/var/log/trainer"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }  # fmt: skip
    init = copy.deepcopy(sidecar) | {"name": "fetch-dataset", "command": ["sh", "-c", "sync-dataset /data"]}
    pod["spec"]["containers"].append(sidecar)
    pod["spec"]["initContainers"] = [init]
    pod["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-llm-finetune-7"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        {"name": "logs", "emptyDir": {}},
        {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}},
    ]  # fmt: skip
    pod["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]  # fmt: skip
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
        ]}]}}}  # fmt: skip
    pod["spec"]["serviceAccountName"] = "trainer"
    pod["spec"]["priorityClassName"] = "ml-training"
    return body


@dataclass
class Target:
    """One server process under test."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    throughput: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    latency: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def p50_p99(self, label: str) -> tuple[float, float]:
        """Medians over the latency runs of their p50 and p99, seconds."""
        runs = self.latency[label]
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def _request(body: bytes) -> bytes:
    head = (
        "POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Connection:
    """One keep-alive HTTP/1.1 connection over TLS, requests one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, context: ssl.SSLContext) -> Connection:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost", limit=1 << 20
        )
        return cls(reader, writer)

    async def call(self, request: bytes) -> None:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected answer: {head[:60]!r}")
        start = head.lower().index(b"content-length:") + 15
        length = int(head[start : head.index(b"\r\n", start)])
        await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def _connections(port: int, context: ssl.SSLContext, count: int) -> list[Connection]:
    return list(await asyncio.gather(*(Connection.open(port, context) for _ in range(count))))


async def max_throughput(target: Target, request: bytes, context: ssl.SSLContext) -> tuple[float, float]:
    """Closed loop with `CONCURRENCY` connections: (requests/s, server CPU fraction)."""
    connections = await _connections(target.port, context, CONCURRENCY)
    done = 0
    measuring = False
    stop = False

    async def worker(connection: Connection) -> None:
        nonlocal done
        while not stop:
            await connection.call(request)
            if measuring:
                done += 1

    workers = [asyncio.create_task(worker(c)) for c in connections]
    await asyncio.sleep(WARMUP_SECONDS)
    cpu0, t0 = target.cpu_seconds(), time.perf_counter()
    measuring = True
    await asyncio.sleep(THROUGHPUT_SECONDS)
    measuring = False
    elapsed, cpu = time.perf_counter() - t0, target.cpu_seconds() - cpu0
    stop = True
    await asyncio.gather(*workers)
    for connection in connections:
        connection.close()
    return done / elapsed, cpu / elapsed


async def steady_latency(target: Target, request: bytes, context: ssl.SSLContext) -> tuple[float, float]:
    """Requests sent on a fixed schedule at `RATE`/s for `LATENCY_SECONDS`; each latency
    counts from its scheduled time (no coordinated omission). Returns (p50, p99) seconds."""
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for connection in await _connections(target.port, context, CONCURRENCY):
        pool.put_nowait(connection)
    for _ in range(int(RATE * WARMUP_SECONDS)):
        connection = await pool.get()
        await connection.call(request)
        pool.put_nowait(connection)
    samples: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05

    async def one(scheduled: float) -> None:
        connection = await pool.get()
        await connection.call(request)
        samples.append(loop.time() - scheduled)
        pool.put_nowait(connection)

    tasks = []
    for i in range(int(RATE * LATENCY_SECONDS)):
        scheduled = start + i / RATE
        await asyncio.sleep(max(0.0, scheduled - loop.time()))
        tasks.append(asyncio.create_task(one(scheduled)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait().close()
    return _percentile(samples, 0.5), _percentile(samples, 0.99)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _launch(name: str, tls_dir: Path) -> Target:
    port = _free_port()
    cert, key = str(tls_dir / "tls.crt"), str(tls_dir / "tls.key")
    if name == "gpu-intent":
        argv = [sys.executable, "-m", "gpu_intent", "--log-level", "WARNING", "webhook",
                f"--listen=127.0.0.1:{port}", f"--tls-cert-file={cert}", f"--tls-key-file={key}"]  # fmt: skip
    else:
        kind = "null" if name.startswith("null") else "kopf"
        argv = [sys.executable, "-m", "bench.webhook_servers", kind, f"--port={port}",
                f"--cert={cert}", f"--key={key}"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    return Target(name, port, process)


async def _wait_ready(target: Target, request: bytes, context: ssl.SSLContext) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            connection = await Connection.open(target.port, context)
            await connection.call(request)
            connection.close()
            return
        except (OSError, asyncio.IncompleteReadError):
            if target.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{target.name} server did not start") from None
            await asyncio.sleep(0.2)


async def run_servers(rounds: int = ROUNDS) -> None:
    """The side-by-side server comparison (see the module docstring)."""
    captured = (FIXTURES / CAPTURED).read_bytes()
    realistic = json.dumps(realistic_gpu_review()).encode()
    bodies = {
        f"captured {len(captured) / 1000:.1f} KB": _request(captured),
        f"realistic GPU pod {len(realistic) / 1000:.1f} KB": _request(realistic),
    }
    kopf_version = metadata.version("kopf")
    names = ["null aiohttp", "gpu-intent", f"kopf {kopf_version}"]
    with tempfile.TemporaryDirectory() as tmp:
        tls = write_tls_files(Path(tmp), ["localhost"], ["127.0.0.1"])
        context = ssl.create_default_context(cafile=str(tls.ca_cert))
        targets = [_launch(name, Path(tmp)) for name in names]
        try:
            for target in targets:
                await _wait_ready(target, next(iter(bodies.values())), context)
            for label, request in bodies.items():
                for _ in range(LATENCY_ROUNDS):
                    for target in targets:
                        p50_p99 = await steady_latency(target, request, context)
                        target.latency.setdefault(label, []).append(p50_p99)
            # For throughput the load generator yields the CPU to the servers (they keep
            # niceness 0), so the servers, not the client, are what saturates. (Not for
            # latency: a niced client's own scheduling delays would count as latency.)
            os.nice(CLIENT_NICENESS)
            for label, request in bodies.items():
                for _ in range(rounds):
                    for target in targets:  # alternate: noise hits all three alike
                        rate, cpu = await max_throughput(target, request, context)
                        target.throughput.setdefault(label, []).append(rate)
                        target.cpu.setdefault(label, []).append(cpu)
        finally:
            for target in targets:
                target.process.terminate()
                target.process.wait(10)
    _report(targets, list(bodies))


def _report(targets: list[Target], labels: list[str]) -> None:
    null, ours, kopf = targets
    print(
        f"one server process each, TLS on loopback, HTTP/1.1 keep-alive; load from this process "
        f"({CONCURRENCY} connections; nice {CLIENT_NICENESS} for throughput), "
        f"{os.cpu_count()} cores shared; "
        f"latency at a steady {RATE:.0f} req/s, median of {LATENCY_ROUNDS} alternating "
        f"{LATENCY_SECONDS:.0f} s runs; max throughput median of {ROUNDS} alternating "
        f"{THROUGHPUT_SECONDS:.0f} s runs"
    )
    print(f"{'body':<28} {'server':<14} {'p50 @200/s':>10} {'p99 @200/s':>10} "
          f"{'max req/s':>10} {'(runs)':<32} {'server CPU':>10} {'req/CPU-s':>9}")  # fmt: skip
    for label in labels:
        for target in targets:
            p50, p99 = target.p50_p99(label)
            runs = target.throughput[label]
            cpu = statistics.median(target.cpu[label])
            rate = statistics.median(runs)
            shown = "/".join(f"{r:.0f}" for r in runs)
            print(
                f"{label:<28} {target.name:<14} {p50 * 1e3:>7.2f} ms {p99 * 1e3:>7.2f} ms "
                f"{rate:>10,.0f} {'(' + shown + ')':<32} {cpu * 100:>9.0f}% {rate / cpu:>9,.0f}"
            )
    for label in labels:
        ours_rate = statistics.median(ours.throughput[label])
        to_null = ours_rate / statistics.median(null.throughput[label])
        to_kopf = ours_rate / statistics.median(kopf.throughput[label])
        p99 = ours.p50_p99(label)[1] * 1e3
        p99_runs = "/".join(f"{r[1] * 1e3:.1f}" for r in ours.latency[label])
        per_cpu = (ours_rate / statistics.median(ours.cpu[label])) / (
            statistics.median(null.throughput[label]) / statistics.median(null.cpu[label])
        )
        print(
            f"{label}: gpu-intent/null throughput {to_null:.2f} (target >= 0.70, "
            f"{'met' if to_null >= 0.70 else 'MISSED'}); gpu-intent/kopf {to_kopf:.2f} "
            f"(target >= 2, {'met' if to_kopf >= 2 else 'MISSED'}); gpu-intent p99 at 200 req/s "
            f"{p99:.2f} ms (runs {p99_runs}; target < 5 ms, {'met' if p99 < 5 else 'MISSED'}); "
            f"gpu-intent/null requests per server CPU-second {per_cpu:.2f}"
        )


def run(rounds: int = ROUNDS) -> None:
    """Everything: the pure review and the server comparison."""
    run_pure()
    asyncio.run(run_servers(rounds))


if __name__ == "__main__":
    run()
