"""The simulated cluster in a process of its own: ``python -m sim.process`` serves a
`SimCluster` until its stdin closes (or SIGTERM), and `SimProcess` starts one and stops
it (`sim_process` as an async context manager).

Why: the demo runs the webhook, the controller and its own watches in its process; with
the sim beside them on one event loop, the 1,000-pod mix was CPU-bound on one core (the
sim's schedulers, Karpenter and API server about two thirds of it, cProfile over
``run_demo``). In a process of its own the sim has its own core, as the real API
server, schedulers and Karpenter have their own machines.

The child prints one JSON line when it serves, ``{"url": ..., "kubeconfig": ...}``, and
nothing else on stdout; its logs (warnings and above) go to stderr."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final, get_args

from sim.cluster import SimCluster
from sim.nodeclaims import KarpenterTimings
from sim.scheduler import ScoringStrategy

log = logging.getLogger(__name__)

#: Seconds `SimProcess` waits for the child to serve, and to stop once asked.
START_SECONDS: Final = 60.0
STOP_SECONDS: Final = 15.0


def timings_json(timings: KarpenterTimings) -> str:
    """``timings`` as the JSON object ``--timings`` takes (seconds by field name)."""
    return json.dumps(dataclasses.asdict(timings))


def parse_timings(text: str) -> KarpenterTimings:
    """The `KarpenterTimings` of a `timings_json` object. Raises ValueError for unknown
    fields or values that are not numbers."""
    values = json.loads(text)
    names = {f.name for f in dataclasses.fields(KarpenterTimings)}
    if not isinstance(values, dict) or not set(values) <= names:
        raise ValueError(f"--timings: a JSON object of {sorted(names)}, got {text!r}")
    if not all(isinstance(v, int | float) for v in values.values()):
        raise ValueError(f"--timings: every value is seconds (a number), got {text!r}")
    return KarpenterTimings(**{k: float(v) for k, v in values.items()})


@contextlib.asynccontextmanager
async def sim_process(
    workdir: Path,
    *,
    karpenter: KarpenterTimings | None = None,
    provider: str = "aws",
    kube_scoring: ScoringStrategy = "LeastAllocated",
) -> AsyncIterator[SimProcess]:
    """A started `SimProcess` (arguments as it takes them), stopped on exit."""
    sim = SimProcess(workdir, karpenter=karpenter, provider=provider, kube_scoring=kube_scoring)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()


class SimProcess:
    """A `SimCluster` in a child process (``python -m sim.process``), started by `start`
    and stopped by `stop` (`sim_process` does both): ``url``, ``kubeconfig`` and
    ``kube_scoring`` as `SimCluster` has them.

    Args:
        workdir: where the child writes the kubeconfig; its stderr goes to
            ``workdir/sim.log``.
        karpenter, provider, kube_scoring: as `SimCluster` takes them.

    `start` raises RuntimeError when the child exits or does not serve within
    `START_SECONDS`; the log's last lines say why."""

    def __init__(
        self,
        workdir: Path,
        *,
        karpenter: KarpenterTimings | None = None,
        provider: str = "aws",
        kube_scoring: ScoringStrategy = "LeastAllocated",
    ) -> None:
        self.workdir = workdir
        self.karpenter = karpenter or KarpenterTimings()
        self.provider = provider
        self.kube_scoring: ScoringStrategy = kube_scoring
        self.url = ""
        self.kubeconfig = workdir / "kubeconfig"
        self.log_path = workdir / "sim.log"
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Start the child and wait until it serves. Raises RuntimeError (see the class)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as err:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sim.process", "--workdir", str(self.workdir),
                "--provider", self.provider, "--kube-scoring", self.kube_scoring,
                "--timings", timings_json(self.karpenter),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
            )  # fmt: skip
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), START_SECONDS)
        except TimeoutError:
            line = b""
        if not line:
            await self.stop()
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"the simulated cluster did not start: {' | '.join(tail)}")
        ready = json.loads(line)
        self.url, self.kubeconfig = ready["url"], Path(ready["kubeconfig"])

    async def stop(self) -> None:
        """Close the child's stdin (it stops its components and exits); SIGKILL after
        `STOP_SECONDS`."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), STOP_SECONDS)
        except TimeoutError:
            log.warning("simulated cluster pid %d did not stop; killed", proc.pid)
            proc.kill()
            await proc.wait()


async def _serve(args: argparse.Namespace) -> int:
    """Serve until stdin closes or SIGTERM/SIGINT; 0 once stopped cleanly."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, done.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def until_eof() -> None:
        while await reader.read(4096):
            pass
        done.set()

    async with SimCluster(
        Path(args.workdir),
        karpenter=parse_timings(args.timings),
        provider=args.provider,
        kube_scoring=args.kube_scoring,
    ) as cluster:
        ready = {"url": cluster.url, "kubeconfig": str(cluster.kubeconfig)}
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        eof = asyncio.create_task(until_eof())
        await done.wait()
        eof.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await eof
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.process``: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m sim.process", description=__doc__)
    parser.add_argument("--workdir", required=True, help="where the kubeconfig is written")
    parser.add_argument("--provider", default="aws", help="the cloud (sim.providers)")
    parser.add_argument(
        "--kube-scoring", default="LeastAllocated", choices=get_args(ScoringStrategy)
    )
    parser.add_argument(
        "--timings", default=timings_json(KarpenterTimings()), help="KarpenterTimings as JSON"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
