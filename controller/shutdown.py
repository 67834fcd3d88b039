"""Graceful shutdown of the controller on SIGTERM, within a bounded time.

Kubernetes stops a pod by sending SIGTERM, then SIGKILL after the pod's
``terminationGracePeriodSeconds`` (30 s by default; kubelet
``pkg/kubelet/kuberuntime/kuberuntime_container.go`` ``killContainer``). Within
``grace_seconds``, less than that, the controller:

1. stops starting passes and answers ``/readyz`` with 503;
2. lets the pass in flight and the creates still running (`Controller.creating`) finish
   their writes (creates, deletes, marks, links: a write cut in the middle may or may
   not have reached the API server), then the status writer its queue, for at most
   ``grace_seconds - RELEASE_RESERVE`` seconds;
3. cancels the rest (informers, the leader's renewal), which releases the leader Lease
   (`controller.leader.LeaderElector.run`), so a follower takes over within a retry
   period instead of a lease duration;
4. returns, and the command exits 0.

Before this the controller was simply cancelled, and a cancelled reconcile was once
seen still cancelling 110 s later (issue 8).
"""

from __future__ import annotations

import asyncio
import logging
import time

from controller.reconciler import Controller

log = logging.getLogger(__name__)

#: Seconds of the shutdown budget kept for cancelling and releasing the Lease (one GET
#: and one PUT).
RELEASE_RESERVE = 2.0


async def run_until_stopped(
    controller: Controller, stop: asyncio.Event, grace_seconds: float = 10.0
) -> None:
    """Run ``controller`` until it ends (its exceptions propagate: a lost Lease, a
    failure) or ``stop`` is set, then stop it gracefully within ``grace_seconds`` seconds
    (`stop_gracefully`)."""
    task = asyncio.create_task(controller.run(), name="controller")
    stopped = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopped.cancel()
    if task.done():
        task.result()  # raises what the controller raised
        return
    await stop_gracefully(controller, task, grace_seconds)


async def stop_gracefully(
    controller: Controller, task: asyncio.Task[None], grace_seconds: float
) -> bool:
    """Stop ``controller`` (running as ``task``) as the module says, within ``grace_seconds``
    seconds. True when everything finished in time; False when writes had to be cut or
    the cancellation overran (logged)."""
    started = time.monotonic()
    deadline = started + grace_seconds
    controller.stopping.set()
    log.info(
        "shutting down: no new pass; finishing writes in flight (at most %.1fs)", grace_seconds
    )
    clean = True
    try:
        async with asyncio.timeout(max(0.0, grace_seconds - RELEASE_RESERVE)):
            await controller.passing.acquire()  # released never: the loop stops here
            await controller.wait_creates()
            await controller.flush_statuses()
    except TimeoutError:
        clean = False
        log.warning(
            "shutting down: writes still in flight after %.1fs; cutting them", grace_seconds
        )
    task.cancel()
    try:
        async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
            await asyncio.gather(task, return_exceptions=True)
    except TimeoutError:
        clean = False
        log.error("shutting down: the controller did not stop within %.1fs", grace_seconds)
    log.info("shut down in %.2fs", time.monotonic() - started)
    return clean
