"""Fault injection for the simulated apiserver: switches a test flips to make the API fail
the ways a real kube-apiserver does.

`Faults.install` adds one aiohttp middleware (after authentication) to an app made by
`sim.apiserver.make_app`; with no switch on it passes every request through unchanged.
Each switch (`Faults.add`) may be limited to a Kubernetes verb (``get``, ``list``,
``watch``, ``create``, ``update``, ``patch``, ``delete``, as k8s.io/apiserver
``pkg/endpoints/request/requestinfo.go`` derives them), a resource (``pods``, or with its
subresource ``pods/status``) and a number of requests, after which it switches itself off,
and may answer only a share of the requests it matches (``rate``, drawn from a seeded
generator so a run is repeatable): faults at a steady rate, as an overloaded or flaky
server gives them.

The failures, each as the real server produces it:

- ``gone``: a watch whose resourceVersion has been compacted away. The watch cache answers
  HTTP 200 and a single ``ERROR`` event carrying a 410 ``Status`` of reason ``Expired``,
  ``too old resource version: <rv> (<oldest>)`` (``storage/cacher/cacher.go``
  ``Watch`` returns ``newErrWatcher(err)``; the error is ``watch_cache.go``
  ``getAllEventsSinceLocked``'s ``errors.NewResourceExpired``); ``as_event=False``
  answers HTTP 410 with that ``Status`` instead (what an etcd-backed watch does).
- ``throttle``: HTTP 429 with ``Retry-After`` and the plain text body ``Too many
  requests, please try again later.`` (``server/filters/maxinflight.go``
  ``tooManyRequests``; API Priority and Fairness answers the same way).
- ``error``: HTTP 500, a ``Status`` of reason ``InternalError``, ``Internal error
  occurred: ...`` (``apimachinery/pkg/api/errors`` ``NewInternalError``).
- ``conflict``: HTTP 409 on an update or patch, reason ``Conflict``, ``Operation cannot be
  fulfilled on <resource> "<name>": the object has been modified; please apply your
  changes to the latest version and try again`` (``registry/generic/registry/store.go``
  on a stale resourceVersion, ``errors.NewConflict``).
- ``latency``: the request is served after ``delay`` seconds.

A switch with ``body_contains`` answers only requests whose body holds that text (say
``gpu-intent.io/scale-up``: only the controller's status writes), as a server slow on
some writes and not others: a webhook or etcd contention on one object.

`Faults.drop_watches` ends open watches now, as an apiserver restart or a load balancer
idle cut does: the stream ends without an error event and the client must re-watch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from aiohttp import web

from sim.handlers import CONTEXT
from sim.store import Conflict, Gone, InternalError

__all__ = ["KINDS", "Fault", "FaultKind", "Faults", "request_info"]

log = logging.getLogger(__name__)

FaultKind = Literal["gone", "throttle", "error", "conflict", "latency"]
KINDS: Final[tuple[FaultKind, ...]] = ("gone", "throttle", "error", "conflict", "latency")
_TOO_MANY: Final = "Too many requests, please try again later.\n"
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Fault:
    """One switch. ``count`` None: every matching request until removed; else that many,
    then it is spent. ``rate``: the share of matching requests it answers (1: all).
    ``hits`` counts the requests it answered."""

    kind: FaultKind
    verb: str | None = None
    resource: str | None = None
    count: int | None = None
    retry_after: int = 1
    delay: float = 0.0
    as_event: bool = True
    message: str = "injected fault"
    rate: float = 1.0
    body_contains: str | None = None
    hits: int = field(default=0, init=False)

    def applies(self, verb: str, resource: str, body: bytes = b"") -> bool:
        """Whether this switch answers a request of ``verb`` on ``resource``
        (``plural`` or ``plural/subresource``) with ``body``."""
        if self.body_contains is not None and self.body_contains.encode() not in body:
            return False
        if self.count is not None and self.hits >= self.count:
            return False
        if self.kind == "conflict" and verb not in ("update", "patch"):
            return False
        if self.kind == "gone" and verb != "watch":
            return False
        if self.verb is not None and self.verb != verb:
            return False
        return self.resource is None or self.resource in (resource, resource.split("/")[0])


def request_info(request: web.Request) -> tuple[str, str, str | None]:
    """``(verb, resource, name)`` of a resource request, as ``RequestInfoFactory``
    resolves them (``resource`` is ``plural`` or ``plural/subresource``); ``("", "",
    None)`` for a non-resource path (discovery, health)."""
    parts = [p for p in request.path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        rest = parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        rest = parts[3:]
    else:
        return "", "", None
    watch = bool(rest) and rest[0] == "watch"
    if watch:
        rest = rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    if not rest:
        return "", "", None
    name = rest[1] if len(rest) > 1 else None
    resource = "/".join((rest[0], rest[2])) if len(rest) > 2 else rest[0]
    method = request.method
    if method == "GET":
        watch = watch or request.query.get("watch", "").lower() in ("true", "1")
        verb = "watch" if watch else ("get" if name else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
    return verb, resource, name


class Faults:
    """The switches of one apiserver app. Flip them from a test while the server runs."""

    def __init__(self, seed: int = 0) -> None:
        self.faults: list[Fault] = []
        self._app: web.Application | None = None
        self._random = random.Random(seed)

    def install(self, app: web.Application) -> None:
        """Add the fault middleware to ``app`` (before it starts serving)."""
        self._app = app
        app.middlewares.append(self._middleware)

    def add(
        self,
        kind: FaultKind,
        *,
        verb: str | None = None,
        resource: str | None = None,
        count: int | None = None,
        retry_after: int = 1,
        delay: float = 0.0,
        as_event: bool = True,
        message: str = "injected fault",
        rate: float = 1.0,
        body_contains: str | None = None,
    ) -> Fault:
        """Switch a fault on (see the module docstring); returns it for `remove`."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}, expected one of {KINDS}")
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"rate must be in (0, 1], got {rate}")
        fault = Fault(
            kind, verb, resource, count, retry_after, delay, as_event, message, rate, body_contains
        )
        self.faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        """Switch ``fault`` off."""
        if fault in self.faults:
            self.faults.remove(fault)

    def clear(self) -> None:
        """Switch every fault off."""
        self.faults.clear()

    def open_watches(self, resource: str | None = None) -> int:
        """How many watches (on ``resource`` if given) are open now."""
        if self._app is None:
            return 0
        return sum(
            1
            for watcher in self._app[CONTEXT].watchers
            if resource is None or watcher.rt.plural == resource
        )

    def drop_watches(self, resource: str | None = None) -> int:
        """End every open watch (on ``resource`` if given) now; returns how many."""
        if self._app is None:
            return 0
        dropped = 0
        for watcher in list(self._app[CONTEXT].watchers):
            if resource is None or watcher.rt.plural == resource:
                watcher.close()
                dropped += 1
        log.info("fault: dropped %d open watches", dropped)
        return dropped

    def _take(self, verb: str, resource: str, body: bytes) -> list[Fault]:
        """The switches answering this request, each counted; latency first, then at
        most one failure (the first added)."""
        taken: list[Fault] = []
        failed = False
        for fault in list(self.faults):
            if not fault.applies(verb, resource, body):
                continue
            if fault.rate < 1.0 and self._random.random() >= fault.rate:
                continue
            if fault.kind != "latency":
                if failed:
                    continue
                failed = True
            fault.hits += 1
            taken.append(fault)
            if fault.count is not None and fault.hits >= fault.count:
                self.faults.remove(fault)
        return sorted(taken, key=lambda f: f.kind != "latency")

    @web.middleware
    async def _middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        if not self.faults:
            return await handler(request)
        verb, resource, name = request_info(request)
        if not verb:
            return await handler(request)
        body = b""
        if any(f.body_contains is not None for f in self.faults) and request.can_read_body:
            body = await request.read()  # aiohttp keeps it for the handler
        for fault in self._take(verb, resource, body):
            log.info("fault %s on %s %s", fault.kind, verb, request.path_qs)
            if fault.kind == "latency":
                await asyncio.sleep(fault.delay)
            elif fault.kind == "throttle":
                return web.Response(
                    status=429,
                    text=_TOO_MANY,
                    content_type="text/plain",
                    headers={"Retry-After": str(fault.retry_after)},
                )
            elif fault.kind == "error":
                raise InternalError(f"Internal error occurred: {fault.message}")
            elif fault.kind == "conflict":
                raise Conflict(
                    f'Operation cannot be fulfilled on {resource.split("/")[0]} "{name}": '
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
            elif fault.kind == "gone":
                return await self._gone(request, fault)
        return await handler(request)

    async def _gone(self, request: web.Request, fault: Fault) -> web.StreamResponse:
        store = request.app[CONTEXT].store
        rv = request.query.get("resourceVersion") or "0"
        err = Gone(f"too old resource version: {rv} ({store.resource_version})")
        if not fault.as_event:
            raise err
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        line = json.dumps({"type": "ERROR", "object": err.status()}, separators=(",", ":"))
        await resp.write(line.encode() + b"\n")
        await resp.write_eof()
        return resp
