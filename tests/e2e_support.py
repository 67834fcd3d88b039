"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sim.nodeclaims import KarpenterTimings

#: Karpenter with windows and lifecycle delays short enough for tests (seconds), keeping
#: the real ratio to the controller's reaction (Karpenter: 1 s batch idle, 10 s requeue;
#: controller: 0.1 s debounce; the tests' controller debounces 0.02 s). The ordering
#: matters: when a sharing layer binds the real pod beside the still-unbound trigger, the
#: scheduler's update of the trigger re-triggers Karpenter, and the controller must have
#: deleted the trigger before that batch closes (see "Known limits" in the README).
FAST = KarpenterTimings(
    batch_idle_seconds=0.2,
    batch_max_seconds=1.0,
    requeue_seconds=2.0,
    launch_seconds=0.05,
    register_seconds=0.1,
    initialize_seconds=0.05,
)
TRIGGERS_NS = "gpu-intent-system"


async def eventually(check: Callable[[], Awaitable[Any]], seconds: float = 15.0) -> Any:
    """Poll ``check()`` until it returns something truthy, or fail the test."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"condition not met within {seconds}s: {getattr(check, '__name__', check)}")
        await asyncio.sleep(0.05)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
