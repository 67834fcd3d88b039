"""The HTTPS admission webhook: a thin aiohttp layer around `review.admit`.

Routes:

- ``POST /mutate``: AdmissionReview in, AdmissionReview out (the apiserver appends
  ``?timeout=<N>s``; the query is ignored). A body that is not JSON or not an
  AdmissionReview gets HTTP 400 ``{"error": "<reason>"}``; an unexpected exception while
  reviewing still answers ``allowed: true`` with a warning, never HTTP 500: the webhook
  must not block pods (REFERENCE §4; outages that did: KAI-Scheduler#883, HAMi#160).
- ``GET /healthz``: ``ok``.
- ``GET /metrics``: Prometheus text from the app's own `CollectorRegistry`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Final, get_args

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from gpu_intent.intent import format_gpus
from webhook.review import (
    Admission,
    MalformedReview,
    Outcome,
    admit,
    allowed_with_warning,
    pod_reference,
)

__all__ = [
    "CLIENT_MAX_SIZE",
    "METRICS",
    "REGISTRY",
    "REVIEW_BUCKETS",
    "WebhookMetrics",
    "make_app",
    "serve",
    "ssl_context",
    "start",
]

log = logging.getLogger(__name__)

#: Largest request body accepted, in bytes (4 MiB); aiohttp answers 413 beyond it. A Pod
#: object is at most ~1.5 MiB (etcd's request limit), so a review fits with room to spare.
CLIENT_MAX_SIZE: Final = 4 * 1024 * 1024
#: Review latency buckets in seconds: 100 us .. 100 ms. A review takes ~0.1 ms; 100 ms is
#: Gatekeeper's recommended p99 for a whole webhook call (REFERENCE §5).
REVIEW_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
#: Seconds given to in-flight requests when the server stops.
SHUTDOWN_TIMEOUT: Final = 5.0

OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)


@dataclass(frozen=True, slots=True)
class WebhookMetrics:
    """The webhook's metrics, registered on one `CollectorRegistry`.

    Attributes:
        reviews: counter ``gpu_intent_webhook_reviews_total{outcome}``, outcome one of
            ``patched``, ``unchanged``, ``not_gpu``, ``error_object``, ``malformed``.
        review_seconds: histogram ``gpu_intent_webhook_review_seconds``: time from the
            body being read to the response being built, in seconds (`REVIEW_BUCKETS`).
    """

    reviews: Counter
    review_seconds: Histogram

    @classmethod
    def register(cls, registry: CollectorRegistry) -> WebhookMetrics:
        """Create the metrics on ``registry``, every outcome starting at 0."""
        reviews = Counter(
            "gpu_intent_webhook_reviews",
            "AdmissionReviews answered by the gpu-intent webhook, by outcome.",
            labelnames=("outcome",),
            registry=registry,
        )
        for outcome in OUTCOMES:
            reviews.labels(outcome=outcome)
        seconds = Histogram(
            "gpu_intent_webhook_review_seconds",
            "Time to parse and review one AdmissionReview, in seconds.",
            buckets=REVIEW_BUCKETS,
            registry=registry,
        )
        return cls(reviews=reviews, review_seconds=seconds)

    def observe(self, outcome: Outcome, seconds: float) -> None:
        """Count one review with ``outcome`` that took ``seconds``."""
        self.reviews.labels(outcome=outcome).inc()
        self.review_seconds.observe(seconds)


REGISTRY: Final = web.AppKey("registry", CollectorRegistry)
METRICS: Final = web.AppKey("metrics", WebhookMetrics)


def _log_admission(admission: Admission) -> None:
    if admission.outcome == "patched" and admission.intent is not None:
        intent = admission.intent
        log.info(
            "pod %s: annotated gpu intent: %s GPU, model %s, pool %s, gpu memory %s MiB (%s)",
            admission.pod,
            format_gpus(intent.gpus),
            intent.model or "any",
            intent.pool or "any",
            intent.gpu_memory_mib or "unknown",
            ",".join(intent.source),
        )
    elif admission.outcome == "error_object":
        log.warning("pod %s: %s", admission.pod, admission.detail)
    else:
        log.debug("pod %s: %s", admission.pod or "(not a pod)", admission.outcome)


def _bad_request(request: web.Request, reason: str) -> web.Response:
    log.warning("rejecting request from %s: %s", request.remote, reason)
    return web.json_response({"error": reason}, status=400)


async def handle_mutate(request: web.Request) -> web.Response:
    """``POST /mutate``: answer one AdmissionReview (see the module docstring)."""
    raw = await request.read()  # over CLIENT_MAX_SIZE: HTTPRequestEntityTooLarge (413)
    started = time.perf_counter()
    metrics = request.app[METRICS]
    outcome: Outcome
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        outcome, response = "malformed", _bad_request(request, f"body is not JSON: {e}")
    else:
        try:
            admission = admit(body)
        except MalformedReview as e:
            outcome, response = "malformed", _bad_request(request, str(e))
        except Exception as e:  # a bug: answer "allowed" rather than block the pod
            outcome, response = "error_object", _internal_error(body, e)
        else:
            _log_admission(admission)
            outcome, response = admission.outcome, web.json_response(admission.response)
    metrics.observe(outcome, time.perf_counter() - started)
    return response


def _internal_error(body: object, error: Exception) -> web.Response:
    """Allowed, no patch, a warning: for an exception `admit` should never raise."""
    request = body.get("request") if isinstance(body, dict) else None
    request = request if isinstance(request, dict) else {}
    uid = request.get("uid")
    ref = pod_reference(request)
    log.error("pod %s: reviewing failed, allowing it unchanged", ref, exc_info=error)
    if not isinstance(uid, str) or not uid:
        return web.json_response({"error": f"internal error: {type(error).__name__}"}, status=400)
    reason = f"internal error, pod not annotated: {type(error).__name__}: {error}"
    return web.json_response(allowed_with_warning(uid, reason))


async def handle_healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: 200 ``ok`` while the server answers."""
    return web.Response(text="ok")


async def handle_metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: the app registry in Prometheus text format."""
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(registry: CollectorRegistry | None = None) -> web.Application:
    """The webhook application, its metrics registered on ``registry``.

    ``registry`` defaults to a new `CollectorRegistry`, so apps never share metrics (and
    tests can create as many as they like). Requests over `CLIENT_MAX_SIZE` bytes get 413.
    """
    registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
    app = web.Application(client_max_size=CLIENT_MAX_SIZE)
    app[REGISTRY] = registry
    app[METRICS] = WebhookMetrics.register(registry)
    app.router.add_post("/mutate", handle_mutate)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/metrics", handle_metrics)
    return app


def ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or newer) with the PEM certificate chain and key.

    Raises:
        OSError: a file cannot be read.
        ssl.SSLError: the files are not a matching PEM certificate and key.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


async def start(
    app: web.Application, host: str, port: int, context: ssl.SSLContext | None
) -> web.AppRunner:
    """Serve ``app`` on ``host:port`` (port 0: any free port) and return its runner.

    The caller owns the runner: ``await runner.cleanup()`` stops the server, giving
    in-flight requests `SHUTDOWN_TIMEOUT` seconds. ``runner.addresses`` has the bound
    ``(host, port, ...)`` tuples. ``context`` None serves plain HTTP.
    """
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=context).start()
    except BaseException:
        await runner.cleanup()
        raise
    scheme = "https" if context is not None else "http"
    for address in runner.addresses:
        log.info("webhook listening on %s://%s:%s", scheme, address[0], address[1])
    return runner


async def serve(
    host: str,
    port: int,
    cert_file: str,
    key_file: str,
    registry: CollectorRegistry | None = None,
) -> None:
    """Serve the webhook over HTTPS on ``host:port`` until cancelled.

    ``cert_file`` / ``key_file`` are PEM files (``tls.crt`` / ``tls.key`` of a Kubernetes
    TLS Secret); they are read once, at start.

    Raises:
        OSError: the address cannot be bound or a file cannot be read.
        ssl.SSLError: the certificate and key do not load.
    """
    runner = await start(make_app(registry), host, port, ssl_context(cert_file, key_file))
    try:
        await asyncio.Event().wait()  # until cancelled
    finally:
        log.info("webhook stopping")
        await runner.cleanup()
