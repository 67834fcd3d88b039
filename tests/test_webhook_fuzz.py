"""Property-based fuzzing of the whole review path.

`review()` directly for volume, and a subset through the real server over TLS. For every
input: no exception but `MalformedReview` (an HTTP 4xx with a reason through the server),
never a 5xx, never an error or traceback in the log, every answer a valid v1
AdmissionReview that allows the pod, and every patch only operations under
``metadata.annotations`` (``add``, or ``remove`` of a user's ``gpu-intent.io/`` intent
annotation the intent drops) that apply (with ``jsonpatch``) to the object, change
nothing else, give the same pod when applied twice if they only add, leave nothing to
patch on reinvocation, and leave intent annotations that `Intent.from_annotations` reads
back as the intent written.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import logging
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from webhook_strategies import bodies, captured_variants, reviews

from certs import write_tls_files
from intent.contract import INTENT_ANNOTATIONS, Intent
from webhook.review import MAX_WARNING, MalformedReview, admit, review
from webhook.server import make_app, ssl_context, start

_ABSENT = object()


def _without_annotations(pod: Any) -> Any:
    """``pod`` with ``metadata.annotations`` removed and an empty, null or absent
    ``metadata`` all written as absent."""
    if not isinstance(pod, dict):
        return pod
    stripped = dict(pod)
    metadata = stripped.pop("metadata", None)
    if isinstance(metadata, dict):
        metadata = {k: v for k, v in metadata.items() if k != "annotations"}
        if metadata:
            stripped["metadata"] = metadata
    elif metadata is not None:
        stripped["metadata"] = metadata
    return stripped


def check_answer(body: Any, answer: Any) -> str | None:
    """Assert ``answer`` is a valid response to ``body``; return the patch's base64."""
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert set(response) <= {"uid", "allowed", "patchType", "patch", "warnings"}
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is True
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= MAX_WARNING
        assert warning.isprintable(), repr(warning)
    if "patch" not in response:
        assert "patchType" not in response
        return None
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"], validate=True))
    assert isinstance(ops, list) and ops
    for op in ops:
        assert op["path"] == "/metadata" or op["path"] == "/metadata/annotations" or op[
            "path"
        ].startswith("/metadata/annotations/")
        # an add, or the removal of an intent annotation the user set and the intent drops
        assert op["op"] == "add" or (
            op["op"] == "remove" and op["path"].startswith("/metadata/annotations/gpu-intent.io~1")
        )
    pod = body["request"]["object"]
    before = copy.deepcopy(pod)
    patched = jsonpatch.JsonPatch(ops).apply(pod)  # validates and applies
    assert pod == before  # apply did not touch the input
    if all(op["op"] == "add" for op in ops):
        assert jsonpatch.JsonPatch(ops).apply(patched) == patched  # idempotent
    assert _without_annotations(patched) == _without_annotations(before)  # only annotations
    assert patched["metadata"]["annotations"]["gpu-intent.io/intent-version"] == "v1"
    # the controller reads back exactly the intent written (one contract, both sides)
    read = Intent.from_annotations(patched["metadata"]["annotations"])
    assert read is not None and read.to_annotations() == {
        k: v for k, v in patched["metadata"]["annotations"].items() if k in INTENT_ANNOTATIONS
    }
    written = [op["value"] for op in ops if op["op"] == "add" and op["path"].startswith("/metadata/annotations/")]
    written += [v for op in ops if op["path"] == "/metadata/annotations" for v in op["value"].values()]
    written += [v for op in ops if op["path"] == "/metadata" for v in op["value"]["annotations"].values()]
    assert written and all(isinstance(v, str) for v in written)  # annotation values are strings
    again = copy.deepcopy(body)
    again["request"]["object"] = patched
    assert "patch" not in review(again)["response"]  # reinvocation adds nothing
    patch: str = response["patch"]
    return patch


def _check_review(body: Any) -> None:
    before = copy.deepcopy(body)
    try:
        admission = admit(body)
    except MalformedReview as e:
        assert str(e)
        return
    assert admission.outcome != "internal_error", admission.detail
    assert body == before  # the review did not touch its input
    check_answer(body, admission.response)
    if admission.outcome == "patched":
        pod = jsonpatch.JsonPatch(
            json.loads(base64.b64decode(admission.response["response"]["patch"]))
        ).apply(body["request"]["object"])
        assert Intent.from_annotations(pod["metadata"]["annotations"]) == admission.intent


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_review_never_raises_and_every_patch_applies(body: Any) -> None:
    _check_review(body)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(captured_variants)
def test_captured_reviews_with_one_field_changed(body: Any) -> None:
    _check_review(body)


def test_the_strategies_reach_every_outcome() -> None:
    """The fuzzer is not fuzzing nothing: over a fixed sample it patches, skips, warns..."""
    outcomes: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(reviews)
    def collect(body: Any) -> None:
        try:
            outcomes.add(admit(body).outcome)
        except MalformedReview:
            outcomes.add("malformed")

    collect()
    assert {"patched", "unchanged", "skipped", "not_gpu", "error_object", "malformed"} <= outcomes


# --- through the server over TLS --------------------------------------------------------


class _Errors(logging.Handler):
    """Collects log records at ERROR or with a traceback."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)


@dataclass
class ThreadedServer:
    port: int
    context: ssl.SSLContext
    errors: _Errors
    connection: http.client.HTTPSConnection | None = None

    def post(self, data: bytes) -> tuple[int, Any]:
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, context=self.context, timeout=10
                )
            try:
                self.connection.request(
                    "POST", "/mutate?timeout=10s", data, {"Content-Type": "application/json"}
                )
                resp = self.connection.getresponse()
                payload = resp.read()
            except (ConnectionError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
                continue
            return resp.status, json.loads(payload)
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def threaded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    """The real server on its own event loop in a thread, so hypothesis drives it from a
    plain test over a kept-alive TLS connection."""
    tls = write_tls_files(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"])
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def begin() -> None:
        app = make_app(CollectorRegistry())
        runner = await start(app, "127.0.0.1", 0, ssl_context(str(tls.cert), str(tls.key)))
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(begin())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="webhook", daemon=True)
    thread.start()
    assert started.wait(10)
    errors = _Errors()
    logger = logging.getLogger("webhook")
    logger.addHandler(errors)
    server = ThreadedServer(holder["port"], ssl.create_default_context(cafile=str(tls.ca_cert)), errors)
    try:
        yield server
    finally:
        logger.removeHandler(errors)
        if server.connection is not None:
            server.connection.close()
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


raw_bodies = st.one_of(
    bodies.map(lambda b: json.dumps(b).encode()),
    bodies.map(lambda b: json.dumps(b).encode()),
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(raw_bodies)
def test_server_answers_every_body_without_5xx(threaded_server: ThreadedServer, data: bytes) -> None:
    status, payload = threaded_server.post(data)
    assert status < 500
    if status == 200:
        check_answer(json.loads(data), payload)
    else:
        assert 400 <= status < 500
        assert isinstance(payload["error"], str) and payload["error"]
    assert threaded_server.errors.records == []
