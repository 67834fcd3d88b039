"""Connection deadlines and graceful draining for the webhook's HTTPS listener.

aiohttp bounds only idle keep-alive connections (``keepalive_timeout``, which also runs
from the moment a connection is made, ``aiohttp/web_protocol.py``
``RequestHandler.connection_made``): a client that sends its headers or its body a byte
at a time holds a connection and a buffer for as long as it likes, and asyncio gives a
TLS handshake 60 s (``ssl_handshake_timeout``). A few hundred such clients exhaust a
small pod. This module wraps each aiohttp protocol in `GuardedConnection` and gives every
connection one deadline at a time, modelled on Go's ``net/http.Server``
(``ReadHeaderTimeout``, ``ReadTimeout``, ``IdleTimeout``), the server kube-apiserver
itself uses:

- a new connection has `Timeouts.header` seconds from its acceptance for the TLS
  handshake and its first request's headers;
- an idle keep-alive connection has `Timeouts.idle` seconds for the first byte of its
  next request, then `Timeouts.header` seconds from that byte for the headers;
- a request whose headers are in has `Timeouts.body` seconds to be read and answered.

A connection past its deadline is aborted (an idle one is closed politely). A sweep
every fraction of the shortest timeout checks the deadlines, so a request costs two
attribute writes, not a timer. A polite close of a TLS connection sends ``close_notify``
and waits for the peer's (asyncio's ``SSLProtocol`` shutdown, ``ssl_shutdown_timeout``
30 s, ``asyncio/sslproto.py``): a peer that never reads never answers, so a polite close
is aborted after `Timeouts.header` seconds, or after `DRAINING_CLOSE` seconds while the
guard drains.

Each connection also notes when the first byte of its current request arrived
(`GuardedConnection.began`, ``time.perf_counter()`` seconds): the webhook's request
duration runs from there, so time spent waiting behind a busy event loop counts.

`ConnectionGuard.drain` is the graceful half of SIGTERM: the listener is closed first
(by the caller), idle keep-alive connections are closed (aborted after `DRAINING_CLOSE`
seconds if the client does not answer the TLS goodbye), and every request already
started (headers arriving, body arriving, or being answered) is finished and answered
with ``Connection: close``. aiohttp's own shutdown (``Server.pre_shutdown``) marks every
connection closing at once, after which ``RequestHandler.data_received`` drops incoming
bytes, so a request whose body was still arriving was cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

__all__ = [
    "DRAINING_CLOSE",
    "CloseReason",
    "ConnectionGuard",
    "GuardedConnection",
    "GuardedSite",
    "Timeouts",
]

log = logging.getLogger(__name__)

#: Why the guard closed a connection (label of ``gpu_intent_webhook_connections_closed_total``).
CloseReason = str
HEADER_TIMEOUT: Final[CloseReason] = "header_timeout"
BODY_TIMEOUT: Final[CloseReason] = "body_timeout"
IDLE_TIMEOUT: Final[CloseReason] = "idle_timeout"
SHUTDOWN: Final[CloseReason] = "shutdown"
CLOSE_REASONS: Final = (HEADER_TIMEOUT, BODY_TIMEOUT, IDLE_TIMEOUT, SHUTDOWN)
#: Seconds a polite close may take while the guard drains before the connection is
#: aborted: an idle client that never reads must not hold the shutdown up.
DRAINING_CLOSE: Final = 1.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-connection deadlines in seconds (see the module docstring).

    Attributes:
        header: TLS handshake plus a request's headers, from the connection's acceptance
            or from the first byte of a request on a kept-alive connection.
        body: from a request's headers to its answer (body read, review, response).
        idle: a kept-alive connection waiting for its next request.

    The apiserver sends a whole AdmissionReview at once and gives the call at most
    ``timeoutSeconds`` (1-30 s, default 10 s; REFERENCE §4), so 10 s for headers and
    body cost it nothing.
    """

    header: float = 10.0
    body: float = 10.0
    idle: float = 60.0

    def __post_init__(self) -> None:
        for name in ("header", "body", "idle"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} timeout must be > 0 seconds, got {value!r}")


class _Phase(enum.Enum):
    NEW = "new"  # accepted, no byte of a request yet
    IDLE = "idle"  # answered a request, kept alive
    HEADERS = "headers"  # a request's bytes are arriving
    HANDLING = "handling"  # headers in; the handler reads the body and answers
    CLOSING = "closing"  # closed by the guard, waiting for connection_lost


class GuardedConnection(asyncio.Protocol):
    """An aiohttp ``RequestHandler`` (``inner``) with a deadline; forwards every protocol
    callback.

    Attributes:
        inner: aiohttp's protocol, ``request.protocol`` of its requests.
        began: ``time.perf_counter()`` when the first byte of the current (or last)
            request arrived, seconds.
        reason: why the guard closed the connection, None while it has not.
    """

    __slots__ = ("_guard", "began", "deadline", "inner", "phase", "reason", "transport")

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.phase = _Phase.NEW
        self.deadline = 0.0
        self.began = 0.0
        self.reason: CloseReason | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.deadline = self._guard.now() + self._guard.timeouts.header
        self._guard.connections[self.inner] = self
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.phase is _Phase.IDLE:
            self.phase = _Phase.HEADERS
            self.began = time.perf_counter()
            self.deadline = self._guard.now() + self._guard.timeouts.header
        elif self.phase is _Phase.NEW:
            self.phase = _Phase.HEADERS  # the deadline from acceptance stands
            self.began = time.perf_counter()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.lost(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def close(self, reason: CloseReason, *, abort: bool) -> None:
        """Close the connection for ``reason``; ``abort`` drops it without a TLS goodbye.
        A polite close not done within `Timeouts.header` seconds (`DRAINING_CLOSE` while
        the guard drains) is aborted by the sweep."""
        if self.transport is None or self.phase is _Phase.CLOSING:
            return
        self.phase = _Phase.CLOSING
        self.reason = reason
        self.deadline = self._guard.now() + self._guard.polite_close_seconds()
        self._guard.closed(reason, self.transport.get_extra_info("peername"))
        if abort:
            self.transport.abort()
        else:
            self.transport.close()


class ConnectionGuard:
    """The deadlines and the drain of one listener's connections.

    ``on_close(reason)`` is called for each connection the guard closes (reason one of
    ``header_timeout``, ``body_timeout``, ``idle_timeout``, ``shutdown``), for metrics.
    The request handler reports each request's start and end with `request_started`
    and `request_finished` (``request.protocol`` is the key).
    """

    def __init__(
        self,
        timeouts: Timeouts = Timeouts(),
        on_close: Callable[[CloseReason], None] | None = None,
    ) -> None:
        self.timeouts = timeouts
        #: aiohttp's protocol (``request.protocol``) -> its guarded wrapper.
        self.connections: dict[object, GuardedConnection] = {}
        self._on_close = on_close
        self._draining = False
        self._sweeper: asyncio.Task[None] | None = None
        self._emptied: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep_every = min(1.0, max(0.02, min(self.timeouts.header, self.timeouts.body,
                                                   self.timeouts.idle) / 4))  # fmt: skip

    @property
    def draining(self) -> bool:
        """True once `drain` has begun: requests finishing now close their connection."""
        return self._draining

    def now(self) -> float:
        """The event loop's clock, in seconds."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop.time()

    def protocol_factory(self, make: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` wrapping ``make()``'s protocols."""
        return lambda: GuardedConnection(self, make())

    def start(self) -> None:
        """Start the deadline sweep (idempotent); `close` stops it."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        """Stop the sweep."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    def request_started(self, protocol: object) -> GuardedConnection | None:
        """A request's headers are in and its handler runs: `Timeouts.body` from now.
        Returns the connection (None if it is gone); its ``reason`` tells, should the
        request fail with a `ConnectionError`, whether the guard closed it."""
        connection = self.connections.get(protocol)
        if connection is not None and connection.phase is not _Phase.CLOSING:
            if connection.phase is not _Phase.HEADERS:  # pipelined behind the last one
                connection.began = time.perf_counter()
            connection.phase = _Phase.HANDLING
            connection.deadline = self.now() + self.timeouts.body
        return connection

    def began(self, protocol: object) -> float | None:
        """``time.perf_counter()`` (seconds) when the first byte of the request now
        handled on ``protocol`` (``request.protocol``) arrived; None for a connection the
        guard does not know (gone, or not served through `GuardedSite`). A request
        pipelined behind another one counts from its handler's start."""
        connection = self.connections.get(protocol)
        return connection.began if connection is not None else None

    def request_finished(self, protocol: object) -> bool:
        """A handler returned: the connection is idle (`Timeouts.idle`). Returns True when
        the response must close the connection (the guard is draining)."""
        connection = self.connections.get(protocol)
        if connection is not None and connection.phase is not _Phase.CLOSING:
            connection.phase = _Phase.IDLE
            connection.deadline = self.now() + self.timeouts.idle
        return self._draining

    def lost(self, connection: GuardedConnection) -> None:
        """``connection_lost`` of a guarded connection."""
        self.connections.pop(connection.inner, None)
        if not self.connections and self._emptied is not None:
            self._emptied.set()

    def polite_close_seconds(self) -> float:
        """Seconds a polite close may take before the sweep aborts the connection:
        `Timeouts.header`, at most `DRAINING_CLOSE` while draining."""
        if self._draining:
            return min(self.timeouts.header, DRAINING_CLOSE)
        return self.timeouts.header

    def closed(self, reason: CloseReason, peer: object = None) -> None:
        """Count (``on_close``) and log a connection the guard closed, ``peer`` its
        address (asyncio's ``peername``). A request cut by `Timeouts.body` is one WARNING
        line (an apiserver call failed); other reasons are INFO (shutdown: not logged)."""
        if reason == BODY_TIMEOUT:
            log.warning(
                "closing a connection%s: body timeout (a request not read and answered"
                " within %g s of its headers)", _from(peer), self.timeouts.body,
            )  # fmt: skip
        elif reason != SHUTDOWN:
            log.info("closing a connection%s: %s", _from(peer), reason.replace("_", " "))
        if self._on_close is not None:
            self._on_close(reason)

    def sweep(self) -> None:
        """Close every connection past its deadline (and, draining, every idle one)."""
        now = self.now()
        for connection in list(self.connections.values()):
            phase = connection.phase
            if self._draining and phase is _Phase.IDLE:
                connection.close(SHUTDOWN, abort=False)
            elif connection.deadline <= now:
                if phase is _Phase.IDLE:
                    connection.close(IDLE_TIMEOUT, abort=False)
                elif phase is _Phase.HANDLING:
                    connection.close(BODY_TIMEOUT, abort=True)
                elif phase is _Phase.CLOSING:
                    if connection.transport is not None:
                        connection.transport.abort()  # a polite close that did not finish
                else:
                    connection.close(HEADER_TIMEOUT, abort=True)

    async def _sweep_forever(self) -> None:
        while True:
            # draining: every 0.1 s, so a polite close past DRAINING_CLOSE is cut promptly
            await asyncio.sleep(
                min(self._sweep_every, 0.1) if self._draining else self._sweep_every
            )
            self.sweep()

    async def drain(self, grace: float) -> int:
        """Finish the requests in progress, close the rest, within ``grace`` seconds.

        Call it once the listener is closed. Idle connections are closed at once (aborted
        if the close is not done within `DRAINING_CLOSE` seconds); new ones that have not
        sent a byte keep their header deadline; requests in progress are answered with
        ``Connection: close``. Connections still open after ``grace`` seconds are
        aborted. Returns how many were aborted so.
        """
        self._draining = True
        self._emptied = asyncio.Event()
        bound = self.now() + DRAINING_CLOSE
        for connection in self.connections.values():  # polite closes begun before
            if connection.phase is _Phase.CLOSING:
                connection.deadline = min(connection.deadline, bound)
        self.start()
        self.sweep()
        if self.connections:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._emptied.wait(), grace)
        left = list(self.connections.values())
        for connection in left:
            connection.close(SHUTDOWN, abort=True)
        await self.close()
        return len(left)


def _from(peer: object) -> str:
    """`` from 10.0.0.1:51234`` for an (IPv4 or IPv6) peername, else nothing."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f" from {peer[0]}:{peer[1]}"
    return ""


class GuardedSite(web.BaseSite):
    """A TCP(+TLS) site like aiohttp's ``TCPSite`` whose connections `guard` watches.

    The TLS handshake is bounded by ``guard.timeouts.header`` (asyncio's
    ``ssl_handshake_timeout``) and the guard's sweep starts with the listener.
    """

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        guard: ConnectionGuard,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        """``https://host:port`` (or ``http://``)."""
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        """Bind and listen."""
        await super().start()
        server = self._runner.server
        assert server is not None  # the runner is set up before its sites start
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            ssl_handshake_timeout=self._guard.timeouts.header if self._ssl_context else None,
        )
        self._guard.start()
