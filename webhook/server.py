"""The HTTPS admission webhook: a thin layer of aiohttp's low-level server around
`review.admit`.

Routes:

- ``POST /mutate``: AdmissionReview in, AdmissionReview out (the apiserver appends
  ``?timeout=<N>s``; the query is ignored). A body that is not JSON or not an
  AdmissionReview gets HTTP 400 ``{"error": "<reason>"}``, one over `CLIENT_MAX_SIZE`
  HTTP 413 ``{"error": "<reason>"}``; an unexpected exception still answers ``allowed:
  true`` with a warning, never HTTP 500: the webhook must not block pods (REFERENCE §4;
  outages that did: KAI-Scheduler#883, HAMi#160).
- ``GET /livez`` (and ``/healthz``, its old name): ``ok`` while the process answers.
- ``GET /readyz``: ``ok`` once the TLS listener serves with a loaded certificate, 503
  before that and from the start of a graceful shutdown.
- ``GET /metrics``: Prometheus text from the app's own `CollectorRegistry`: the webhook's
  metrics (`WebhookMetrics`) and prometheus_client's ``process_*`` (CPU, memory, file
  descriptors, start time; Linux only) and ``python_info``.

Connections have header, body and idle deadlines and drain gracefully
(`webhook.connections`); `serve` reloads the certificate when its files change
(`webhook.certificates`) and, when its ``stop`` event is set (SIGTERM), turns ``/readyz``
503 at once, keeps serving for ``ServeOptions.drain_seconds`` (so that the endpoints
controller and every kube-proxy drop the pod before it stops answering), then stops
accepting, finishes the requests in progress and returns.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, get_args

import orjson
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import generate_latest

from intent.catalog import Catalog, default_catalog
from intent.contract import Intent, Source, format_gpus
from intent.logs import about
from webhook.certificates import (
    DEFAULT_RELOAD_INTERVAL,
    CertificateReloader,
    LoadedPair,
    server_context,
)
from webhook.connections import CLOSE_REASONS, ConnectionGuard, GuardedSite, Timeouts
from webhook.review import (
    DEFAULT_BUDGET,
    DEFAULT_SCOPE,
    Admission,
    MalformedReview,
    Outcome,
    Scope,
    admit,
    allowed_with_warning,
    pod_reference,
)

__all__ = [
    "CLIENT_MAX_SIZE",
    "DRAIN_SECONDS",
    "METRICS",
    "REGISTRY",
    "REQUEST_BUCKETS",
    "SHUTDOWN_TIMEOUT",
    "STATE",
    "ServeOptions",
    "WebhookMetrics",
    "WebhookRunner",
    "WebhookState",
    "dispatcher",
    "make_app",
    "serve",
    "shutdown",
    "ssl_context",
    "start",
]

log = logging.getLogger(__name__)

#: Largest request body accepted, in bytes (7 MiB); larger gets 413. kube-apiserver
#: accepts request bodies up to 3 MiB (``MaxRequestBodyBytes``, twice etcd's
#: recommended 1.5 MiB request; ``k8s.io/apiserver/pkg/server/config.go``, ``NewConfig``),
#: and an AdmissionReview carries the object, for an UPDATE the old object too, each
#: possibly grown by defaulting and earlier mutations: 2 x 3 MiB plus the envelope.
CLIENT_MAX_SIZE: Final = 7 * 1024 * 1024
#: Request duration buckets in seconds, 0.5 ms .. 1 s. A review takes about 0.1 ms of
#: CPU; Gatekeeper recommends p99 < 100 ms for a whole webhook call (REFERENCE §5), and
#: the mutating API call SLO is p99 <= 1 s.
REQUEST_BUCKETS: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: Seconds a graceful shutdown gives the requests in progress (Kubernetes waits
#: ``terminationGracePeriodSeconds``, 30 s by default, before SIGKILL).
SHUTDOWN_TIMEOUT: Final = 20.0
#: Seconds ``gpu-intent webhook`` keeps serving after SIGTERM with ``/readyz`` 503
#: (``--drain-seconds``): the kubelet sends SIGTERM while the EndpointSlice controller
#: and every node's kube-proxy are still removing the pod from the Service, at the same
#: time and not before (Kubernetes docs, "Pod Lifecycle", "Termination of Pods"), and the
#: apiserver keeps sending to it meanwhile (what a "preStop sleep" is usually for).
DRAIN_SECONDS: Final = 5.0
#: Seconds aiohttp keeps reading an unread request body after answering early (413).
LINGERING_TIME: Final = 2.0
#: Most distinct ``model`` label values of the intents metric; later ones count as
#: ``other`` (inference passes unknown model names through).
MAX_MODEL_LABELS: Final = 64

OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)


class WebhookMetrics:
    """The webhook's metrics, registered on one `CollectorRegistry`.

    - ``gpu_intent_webhook_reviews_total{outcome}``: requests to ``/mutate`` by outcome
      (`review.Outcome`: ``patched``, ``unchanged``, ``skipped``, ``not_gpu``,
      ``error_object``, ``deadline`` (the review spent its CPU budget; the pod was
      admitted without an intent), ``internal_error``, ``malformed``, ``too_large``);
    - ``gpu_intent_webhook_request_duration_seconds``: histogram of a ``/mutate``
      request from the arrival of its first byte on the connection
      (`ConnectionGuard.began`) to its response being ready (headers, body, JSON decode,
      review, JSON encode, and any time the request waited behind a busy event loop),
      seconds, `REQUEST_BUCKETS`;
    - ``gpu_intent_webhook_intents_total{model,source}``: intents written; ``model`` the
      canonical model or ``any``, ``source`` the kinds of source joined by ``+`` (e.g.
      ``hami``, ``kai+nodeSelector``);
    - ``gpu_intent_webhook_connections_closed_total{reason}``: connections the server
      closed: ``header_timeout``, ``body_timeout``, ``idle_timeout``, ``shutdown``;
    - ``gpu_intent_webhook_tls_reloads_total{result}``: changed certificate files loaded
      (``ok``) or kept out (``failed``);
    - ``gpu_intent_webhook_tls_not_after_timestamp_seconds``: expiry of the certificate
      served, Unix seconds.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        """Create the metrics on ``registry``, every outcome and reason starting at 0."""
        self.reviews = Counter(
            "gpu_intent_webhook_reviews",
            "AdmissionReview requests answered by the gpu-intent webhook, by outcome.",
            labelnames=("outcome",),
            registry=registry,
        )
        self._by_outcome = {outcome: self.reviews.labels(outcome=outcome) for outcome in OUTCOMES}
        self.request_seconds = Histogram(
            "gpu_intent_webhook_request_duration_seconds",
            "Time from a /mutate request's first byte to its response, in seconds.",
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.intents = Counter(
            "gpu_intent_webhook_intents",
            "GPU intents written onto pods, by model and kind of source.",
            labelnames=("model", "source"),
            registry=registry,
        )
        self._models: set[str] = set()
        self._intent_children: dict[tuple[str | None, tuple[Source, ...]], Any] = {}
        self.connections_closed = Counter(
            "gpu_intent_webhook_connections_closed",
            "Connections the webhook closed: slow or idle clients, or shutdown.",
            labelnames=("reason",),
            registry=registry,
        )
        for reason in CLOSE_REASONS:
            self.connections_closed.labels(reason=reason)
        self.tls_reloads = Counter(
            "gpu_intent_webhook_tls_reloads",
            "Changed TLS certificate files, loaded (ok) or kept out (failed).",
            labelnames=("result",),
            registry=registry,
        )
        for result in ("ok", "failed"):
            self.tls_reloads.labels(result=result)
        self.tls_not_after = Gauge(
            "gpu_intent_webhook_tls_not_after_timestamp_seconds",
            "Expiry of the serving certificate, in Unix seconds.",
            registry=registry,
        )

    def observe(self, outcome: Outcome, seconds: float) -> None:
        """Count one ``/mutate`` request with ``outcome`` that took ``seconds``."""
        self._by_outcome[outcome].inc()
        self.request_seconds.observe(seconds)

    def intent(self, intent: Intent) -> None:
        """Count one intent written."""
        child = self._intent_children.get((intent.model, intent.source))
        if child is None:
            child = self._intent_child(intent)
            if len(self._intent_children) < 4096:
                self._intent_children[(intent.model, intent.source)] = child
        child.inc()

    def _intent_child(self, intent: Intent) -> Any:
        model = intent.model or "any"
        if model not in self._models:
            if len(self._models) >= MAX_MODEL_LABELS:
                model = "other"
            else:
                self._models.add(model)
        source = "+".join(sorted({s.where for s in intent.source}))
        return self.intents.labels(model=model, source=source or "none")

    def connection_closed(self, reason: str) -> None:
        """Count one connection closed for ``reason``."""
        self.connections_closed.labels(reason=reason).inc()

    def tls_reloaded(self, ok: bool, pair: LoadedPair | None) -> None:
        """Count one reload attempt; ``pair`` is the certificate now served."""
        self.tls_reloads.labels(result="ok" if ok else "failed").inc()
        self.certificate(pair)

    def certificate(self, pair: LoadedPair | None) -> None:
        """Publish the expiry of the certificate served."""
        if pair is not None:
            self.tls_not_after.set(pair.not_after.timestamp())


@dataclass(slots=True)
class WebhookState:
    """What the handlers of one app share.

    Attributes:
        metrics: the app's metrics.
        scope: pods `admit` leaves alone.
        guard: the deadlines and drain of the app's connections.
        budget: CPU seconds one review may spend inferring an intent (`admit`'s).
        catalog: the GPU catalog reviews infer with (`admit`'s; None: the built-in one).
        serving: the listener is up (set by `start`).
        certificate_loaded: the listener has a certificate (or serves plain HTTP).
        shutting_down: a graceful shutdown has begun (set by `shutdown`): ``/readyz``
            answers 503 while requests are still served, during the drain window too.
    """

    metrics: WebhookMetrics
    scope: Scope
    guard: ConnectionGuard
    budget: float = DEFAULT_BUDGET
    catalog: Catalog | None = None
    serving: bool = False
    certificate_loaded: bool = False
    shutting_down: bool = False

    @property
    def ready(self) -> bool:
        """Whether ``/readyz`` says ok: serving, with a certificate, not shutting down."""
        return (
            self.serving
            and self.certificate_loaded
            and not self.shutting_down
            and not self.guard.draining
        )


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How `serve` runs.

    Attributes:
        scope: pods left alone (`Scope.for_release` with the release namespace).
        timeouts: connection deadlines, seconds.
        reload_interval: seconds between two looks at the certificate files.
        shutdown_timeout: seconds a graceful shutdown gives requests in progress.
        drain_seconds: seconds `serve` keeps serving, ``/readyz`` 503, once ``stop`` is
            set, before it closes the listener; 0 (the default here; the command's
            default is `DRAIN_SECONDS`) closes it at once.
        review_budget: CPU seconds one review may spend inferring an intent, > 0; past
            it the pod is allowed unchanged with a warning (`webhook.review.admit`).
        catalog: the GPU catalog reviews infer with (``--catalog FILE`` loaded over the
            built-in one), None for the built-in one.
    """

    scope: Scope = DEFAULT_SCOPE
    timeouts: Timeouts = field(default_factory=Timeouts)
    reload_interval: float = DEFAULT_RELOAD_INTERVAL
    shutdown_timeout: float = SHUTDOWN_TIMEOUT
    drain_seconds: float = 0.0
    review_budget: float = DEFAULT_BUDGET
    catalog: Catalog | None = None

    def __post_init__(self) -> None:
        if not self.drain_seconds >= 0:
            raise ValueError(f"drain_seconds must be >= 0, got {self.drain_seconds!r}")
        if not self.review_budget > 0:
            raise ValueError(f"review_budget must be > 0, got {self.review_budget!r}")


REGISTRY: Final = web.AppKey("registry", CollectorRegistry)
METRICS: Final = web.AppKey("metrics", WebhookMetrics)
STATE: Final = web.AppKey("state", WebhookState)


def _log_admission(admission: Admission) -> None:
    if admission.outcome == "patched" and admission.intent is not None:
        if not log.isEnabledFor(logging.INFO):  # the arguments below cost a few microseconds
            return
    elif admission.outcome not in ("error_object", "deadline", "internal_error") \
            and not log.isEnabledFor(logging.DEBUG):  # fmt: skip
        return
    extra = about(admission.pod) if admission.pod else None
    if admission.outcome == "patched" and admission.intent is not None:
        intent = admission.intent
        log.info(
            "pod %s: annotated gpu intent: %s GPU, model %s, pool %s, gpu memory %s MiB (%s)",
            admission.pod,
            format_gpus(intent.gpus),
            intent.model or "any",
            intent.pool or "any",
            intent.gpu_memory_mib or "unknown",
            ",".join(map(str, intent.source)),
            extra=extra,
        )
    elif admission.outcome in ("error_object", "deadline"):
        log.warning("pod %s: %s", admission.pod, admission.detail, extra=extra)
    elif admission.outcome == "internal_error":
        log.error("pod %s: %s", admission.pod, admission.detail, exc_info=admission.error,
                  extra=extra)  # fmt: skip
    else:
        log.debug("pod %s: %s %s", admission.pod or "(not a pod)", admission.outcome,
                  admission.detail, extra=extra)  # fmt: skip


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response, encoded with orjson (compact; several times faster than the
    standard library's encoder, which sets up an encoder per call)."""
    return web.Response(
        body=orjson.dumps(data), status=status, headers=headers, content_type="application/json"
    )


def _bad_request(request: web.BaseRequest, reason: str) -> web.Response:
    log.warning("rejecting request from %s: %s", request.remote, reason)
    return _json({"error": reason}, status=400)


def _too_large(request: web.BaseRequest, size: int | None) -> web.Response:
    shown = f" of {size} bytes" if size is not None else ""
    reason = f"request body{shown} is over the limit of {CLIENT_MAX_SIZE} bytes (7 MiB)"
    log.warning("rejecting request from %s: %s", request.remote, reason)
    response = _json({"error": reason}, status=413)
    response.force_close()  # the rest of the body is not read
    return response


async def handle_mutate(request: web.BaseRequest, app: web.Application) -> web.Response:
    """``POST /mutate``: answer one AdmissionReview (see the module docstring). The
    request's duration runs from its first byte (`ConnectionGuard.began`), or from here
    on a connection the guard does not watch."""
    state = app[STATE]
    started = state.guard.began(request.protocol)
    if started is None:
        started = time.perf_counter()
    outcome, response = await _mutate(request, state)
    state.metrics.observe(outcome, time.perf_counter() - started)
    return response


async def _mutate(request: web.BaseRequest, state: WebhookState) -> tuple[Outcome, web.Response]:
    length = request.content_length
    if length is not None and length > CLIENT_MAX_SIZE:
        return "too_large", _too_large(request, length)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return "too_large", _too_large(request, None)
    try:
        # orjson: strict RFC 8259 (no NaN, valid UTF-8, depth at most 1024), which every
        # object the apiserver sends is; about twice as fast as the json module on a pod.
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return "malformed", _bad_request(request, f"body is not JSON: {e}")
    try:
        admission = admit(body, scope=state.scope, budget=state.budget, catalog=state.catalog)
    except MalformedReview as e:
        return "malformed", _bad_request(request, str(e))
    except Exception as e:  # a bug outside admit's guard: answer "allowed", never 500
        return "internal_error", _internal_error(body, e)
    _log_admission(admission)
    if admission.intent is not None:
        state.metrics.intent(admission.intent)
    return admission.outcome, _json(admission.response)


def _internal_error(body: object, error: Exception) -> web.Response:
    """Allowed, no patch, a warning: for an exception `admit` should never raise."""
    request = body.get("request") if isinstance(body, dict) else None
    request = request if isinstance(request, dict) else {}
    uid = request.get("uid")
    ref = pod_reference(request)
    log.error("pod %s: reviewing failed, allowing it unchanged", ref, exc_info=error, extra=about(ref))
    if not isinstance(uid, str) or not uid:
        return _json({"error": f"internal error: {type(error).__name__}"}, status=400)
    reason = f"internal error, pod not annotated: {type(error).__name__}: {error}"
    return _json(allowed_with_warning(uid, reason))


async def handle_livez(request: web.BaseRequest, app: web.Application) -> web.Response:
    """``GET /livez`` and ``GET /healthz``: 200 ``ok`` while the server answers."""
    return web.Response(text="ok")


async def handle_readyz(request: web.BaseRequest, app: web.Application) -> web.Response:
    """``GET /readyz``: 200 ``ok`` when `WebhookState.ready`, else 503 with the reason."""
    state = app[STATE]
    if state.ready:
        return web.Response(text="ok")
    if state.shutting_down or state.guard.draining:
        reason = "shutting down"
    elif not state.certificate_loaded:
        reason = "no certificate loaded"
    else:
        reason = "not serving yet"
    return web.Response(text=reason, status=503)


async def handle_metrics(request: web.BaseRequest, app: web.Application) -> web.Response:
    """``GET /metrics``: the app registry in Prometheus text format."""
    body = generate_latest(app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


#: A route's handler: the request and the app whose state it uses.
RouteHandler = Callable[[web.BaseRequest, web.Application], Awaitable[web.StreamResponse]]

#: Routes: path -> (method, handler).
_ROUTES: Final[dict[str, tuple[str, RouteHandler]]] = {
    "/mutate": ("POST", handle_mutate),
    "/livez": ("GET", handle_livez),
    "/healthz": ("GET", handle_livez),
    "/readyz": ("GET", handle_readyz),
    "/metrics": ("GET", handle_metrics),
}


def handle_other(request: web.BaseRequest) -> web.Response:
    """Any other method or path: 405 ``{"error": ...}`` for a known path, else 404."""
    route = _ROUTES.get(request.path)
    if route is not None:
        return _json(
            {"error": f"{request.method} not allowed on {request.path}, only {route[0]}"},
            status=405,
            headers={"Allow": route[0]},
        )
    return _json({"error": f"no route {request.path}"}, status=404)


def dispatcher(app: web.Application) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """The request handler of aiohttp's low-level server (``aiohttp.web.Server``) for
    ``app``: `_ROUTES` by exact path and method, `handle_other` for the rest, each request
    reported to the connection guard (`ConnectionGuard.request_started` and
    ``request_finished``); while the guard drains, every response closes its connection.

    A request whose connection is lost (a `ConnectionError` from reading its body: the
    guard cut it for `Timeouts.body`, or the client went away) is one log line, not
    aiohttp's ``Error handling request`` ERROR with a traceback
    (``aiohttp/web_protocol.py``, ``RequestHandler._handle_request`` logs any exception
    a handler raises but `asyncio.CancelledError`): the guard already logged its cut as a
    WARNING, a client gone is logged at INFO. The response returned is never sent.

    Five fixed paths need no URL dispatcher: without ``web.Application``'s router,
    middleware chain and response signals, the server answered about 15% more
    ``/mutate`` requests per CPU-second (`bench.webhook`, side by side).
    """
    guard = app[STATE].guard

    async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
        protocol = request.protocol
        connection = guard.request_started(protocol)
        try:
            route = _ROUTES.get(request.path)
            if route is not None and request.method == route[0]:
                response = await route[1](request, app)
            else:
                response = handle_other(request)
        except ConnectionError as e:
            guard.request_finished(protocol)
            if connection is None or connection.reason is None:
                log.info("%s %s from %s: connection lost before the answer: %s",
                         request.method, request.path, request.remote, e)  # fmt: skip
            else:  # the guard logged why it cut the connection
                log.debug("%s %s from %s: not answered, connection closed: %s",
                          request.method, request.path, request.remote,
                          connection.reason)  # fmt: skip
            lost = web.Response(status=400, text="connection lost")
            lost.force_close()
            return lost
        except BaseException:
            guard.request_finished(protocol)
            raise
        if guard.request_finished(protocol):
            response.force_close()
        return response

    return dispatch


def make_app(
    registry: CollectorRegistry | None = None,
    *,
    scope: Scope = DEFAULT_SCOPE,
    timeouts: Timeouts | None = None,
    budget: float = DEFAULT_BUDGET,
    catalog: Catalog | None = None,
) -> web.Application:
    """The webhook's state (`STATE`, `METRICS`, `REGISTRY`) in an aiohttp application,
    its metrics registered on ``registry``. Serve it with `start`, which answers through
    `dispatcher` (the application's own router is not used).

    ``registry`` defaults to a new `CollectorRegistry`, so apps never share metrics (and
    tests can create as many as they like). ``scope``: pods left alone; ``timeouts``:
    connection deadlines (defaults of `Timeouts`); ``budget``: CPU seconds a review may
    spend inferring an intent (`webhook.review.admit`); ``catalog``: the GPU catalog its
    reviews infer with (None: the built-in one, `intent.catalog.default_catalog`, loaded
    here: parsing it takes about 0.2 s of CPU, four times the default budget, and the
    first review after a start must not pay for it), so two apps in one process may use
    different catalogs. prometheus_client's process and
    platform collectors (``process_*`` from ``/proc/self``, Linux only; ``python_info``)
    are registered on ``registry`` too, as they are on its default registry.

    Raises:
        ValueError: ``registry`` already has these metrics (prometheus_client's
            "Duplicated timeseries").
    """
    registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
    metrics = WebhookMetrics(registry)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    guard = ConnectionGuard(timeouts or Timeouts(), on_close=metrics.connection_closed)
    app = web.Application()  # a state holder: `start` sets the body limit per request
    app[REGISTRY] = registry
    app[METRICS] = metrics
    app[STATE] = WebhookState(
        metrics=metrics,
        scope=scope,
        guard=guard,
        budget=budget,
        catalog=catalog if catalog is not None else default_catalog(),
    )
    return app


class WebhookRunner(web.ServerRunner):
    """aiohttp's runner for the low-level server of one webhook app (from `start`).

    ``app`` is the app served; ``cleanup()`` stops the server at once (aiohttp's
    shutdown) and the connection guard's sweep; `shutdown` is the graceful way.
    """

    def __init__(self, app: web.Application, server: web.Server, **kwargs: Any) -> None:
        super().__init__(server, **kwargs)
        self.app = app

    async def cleanup(self) -> None:
        """Stop serving at once, then stop the guard's sweep."""
        await super().cleanup()
        await self.app[STATE].guard.close()


def ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or newer) with the PEM certificate chain and key,
    loaded once (`serve` reloads; see `webhook.certificates.server_context`). An
    encrypted key is refused; nothing ever prompts for a passphrase.

    Raises:
        OSError: a file cannot be read.
        webhook.certificates.TLSFilesError (a ValueError): a file is not a PEM
            certificate / unencrypted PEM private key, or the key is not the
            certificate's; the message names the file and the fix.
        ssl.SSLError: OpenSSL refuses files that passed those checks.
    """
    return server_context(cert_file, key_file)


async def start(
    app: web.Application, host: str, port: int, context: ssl.SSLContext | None
) -> WebhookRunner:
    """Serve ``app`` (from `make_app`) on ``host:port`` (port 0: any free port) and return
    its runner.

    The caller owns the runner: `shutdown` stops it gracefully; ``await
    runner.cleanup()`` stops it at once (aiohttp's shutdown). ``runner.addresses`` has
    the bound ``(host, port, ...)`` tuples. ``context`` None serves plain HTTP.
    """
    state = app[STATE]
    loop = asyncio.get_running_loop()

    def request_factory(
        message: Any, payload: Any, protocol: Any, writer: Any, task: Any
    ) -> web.BaseRequest:
        return web.BaseRequest(
            message, payload, protocol, writer, task, loop, client_max_size=CLIENT_MAX_SIZE
        )

    server = web.Server(
        dispatcher(app),
        request_factory=request_factory,
        access_log=None,
        # aiohttp's own idle limit, a backstop behind the guard's
        keepalive_timeout=state.guard.timeouts.idle + state.guard.timeouts.header,
        # After an early answer (413) aiohttp reads and drops the rest of the body so the
        # client sees the answer, not a reset; 10 s by default, 2 s is plenty.
        lingering_time=LINGERING_TIME,
    )
    runner = WebhookRunner(app, server, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    try:
        await GuardedSite(runner, host, port, guard=state.guard, ssl_context=context).start()
    except BaseException:
        await runner.cleanup()
        raise
    state.certificate_loaded = True
    state.serving = True
    scheme = "https" if context is not None else "http"
    for address in runner.addresses:
        log.info("webhook listening on %s://%s:%s", scheme, address[0], address[1])
    return runner


async def shutdown(
    runner: WebhookRunner, grace: float = SHUTDOWN_TIMEOUT, *, drain: float = 0.0
) -> None:
    """Stop gracefully: ``/readyz`` turns 503 at once; for ``drain`` seconds everything
    is served as before (new connections, keep-alive); then the listener closes, requests
    in progress (including those on kept-alive connections) are answered with
    ``Connection: close`` within ``grace`` seconds, idle connections are closed (a client
    that does not answer the TLS goodbye is cut after `webhook.connections.DRAINING_CLOSE`
    seconds), then the runner is cleaned up."""
    state = runner.app[STATE]
    state.shutting_down = True
    try:
        if drain > 0:
            log.info("webhook stopping: /readyz answers 503, serving on for %g s until the"
                     " pod is out of the Service's endpoints", drain)  # fmt: skip
            await asyncio.sleep(drain)
    finally:  # cancelled in the window: the window ends, the rest still runs
        log.info("webhook stopping: finishing requests in progress")
        for site in list(runner.sites):
            await site.stop()  # no new connections
        state.serving = False
        aborted = await state.guard.drain(grace)
        if aborted:
            log.warning("webhook shutdown: %d connections still busy after %.0f s were cut",
                        aborted, grace)  # fmt: skip
        await runner.cleanup()


async def serve(
    host: str,
    port: int,
    cert_file: str,
    key_file: str,
    registry: CollectorRegistry | None = None,
    *,
    options: ServeOptions | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the webhook over HTTPS on ``host:port`` until ``stop`` is set (or the task is
    cancelled), then shut down gracefully (`shutdown`, with the ``options.drain_seconds``
    window after ``stop``; none after a cancellation) and return.

    ``cert_file`` / ``key_file`` are PEM files (``tls.crt`` / ``tls.key`` of a Kubernetes
    TLS Secret), re-read every ``options.reload_interval`` seconds (`CertificateReloader`).

    Raises:
        OSError: the address cannot be bound or a file cannot be read at start.
        webhook.certificates.TLSFilesError (a ValueError): a file is not a PEM
            certificate / unencrypted PEM key, or they do not match, at start.
        ssl.SSLError: OpenSSL refuses the certificate and key at start.
    """
    options = options or ServeOptions()
    app = make_app(
        registry,
        scope=options.scope,
        timeouts=options.timeouts,
        budget=options.review_budget,
        catalog=options.catalog,
    )
    metrics = app[METRICS]
    reloader = CertificateReloader(
        cert_file, key_file, interval=options.reload_interval, on_reload=metrics.tls_reloaded
    )
    metrics.certificate(reloader.pair)
    runner = await start(app, host, port, reloader.context)
    reloading = asyncio.get_running_loop().create_task(reloader.run())
    drain = 0.0
    try:
        await (stop or asyncio.Event()).wait()
        drain = options.drain_seconds
    finally:
        try:
            await shutdown(runner, options.shutdown_timeout, drain=drain)
        finally:
            reloading.cancel()  # only now: a certificate renewed in the window is served
        log.info("webhook stopped")
