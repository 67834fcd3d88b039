"""The simulated cluster in a process of its own (`sim.process`), as the demo runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from intent.kube import NODEPOOLS, Kube, load_configuration
from sim.nodeclaims import EKS_TIMINGS, KarpenterTimings
from sim.process import parse_timings, sim_process, timings_json


def test_timings_cross_to_the_child_as_json_and_bad_ones_are_refused() -> None:
    assert parse_timings(timings_json(EKS_TIMINGS)) == EKS_TIMINGS
    assert parse_timings('{"launch_seconds": 3}') == KarpenterTimings(launch_seconds=3.0)
    with pytest.raises(ValueError, match="JSON object of"):
        parse_timings('{"launch_second": 3}')
    with pytest.raises(ValueError, match="a number"):
        parse_timings('{"launch_seconds": "3"}')


async def test_the_child_serves_the_api_and_exits_when_the_context_ends(tmp_path: Path) -> None:
    async with sim_process(
        tmp_path / "cluster", provider="gcp", kube_scoring="MostAllocated"
    ) as sim:
        assert sim.url.startswith("https://127.0.0.1:")
        kube = Kube(client.ApiClient(configuration=await load_configuration(str(sim.kubeconfig))))
        try:
            pools, version = await kube.list(NODEPOOLS)
        finally:
            await kube.close()
        assert pools == [] and version
        proc = sim._proc
        assert proc is not None and proc.returncode is None
    assert proc.returncode == 0


async def test_a_child_that_cannot_start_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"the simulated cluster did not start: .*nowhere"):
        async with sim_process(tmp_path / "cluster", provider="nowhere"):
            pass
