"""The controller's HTTP endpoints: ``/healthz``, ``/readyz`` (caches synced) and ``/metrics``."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller.reconciler import Controller

log = logging.getLogger(__name__)

CONTROLLER = web.AppKey("controller", Controller)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    """200 ``ok`` once every informer's cache is synced (its first list is in); else 503
    naming those that are not, e.g. ``caches not synced: nodeclaims, nodes``; 503
    ``shutting down`` once a shutdown began."""
    controller = request.app[CONTROLLER]
    if controller.stopping.is_set():
        return web.Response(status=503, text="shutting down")
    waiting = [i.spec.kind for i in controller.informers if not i.synced.is_set()]
    if waiting:
        return web.Response(status=503, text=f"caches not synced: {', '.join(waiting)}")
    return web.Response(text="ok")


async def _metrics(request: web.Request) -> web.Response:
    """The controller's registry (`controller.metrics.ControllerMetrics`) in the
    Prometheus text format."""
    body = generate_latest(request.app[CONTROLLER].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(controller: Controller) -> web.Application:
    """Routes ``GET /healthz``, ``/readyz`` and ``/metrics`` for ``controller`` (its
    ``metrics.registry`` is what ``/metrics`` serves)."""
    app = web.Application()
    app[CONTROLLER] = controller
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


async def start(controller: Controller, host: str, port: int) -> web.AppRunner:
    """Serve the endpoints on ``host:port`` (plain HTTP; port 0 picks one). The caller
    owns the runner (``await runner.cleanup()``). Raises OSError if it cannot bind."""
    runner = web.AppRunner(make_app(controller), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    for address in runner.addresses:
        log.info("controller metrics on http://%s:%s/metrics", address[0], address[1])
    return runner
