"""Mutating webhooks called by the simulated apiserver exactly as kube-apiserver calls them.

An in-test HTTPS webhook (its own CA) records every request; pods are created with the
real kubernetes_asyncio client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, ApiException, Configuration

from certs import write_tls_files
from sim.admission import Admission
from sim.defaults import prepare_pod_for_admission
from sim.server import ApiServer
from sim.store import NAMESPACES, PODS, NotFound, Store

FIXTURES = Path(__file__).parent / "fixtures" / "admission-reviews"
ENABLED = {"gpu-intent.example.com/webhook": "enabled"}

Respond = Callable[[dict[str, Any]], Awaitable[web.StreamResponse]]


def review_response(request: dict[str, Any], **response: Any) -> web.Response:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": request["request"]["uid"], "allowed": True, **response},
    }
    return web.json_response(body)


def patch_response(ops: list[dict[str, Any]], **extra: Any) -> Respond:
    encoded = base64.b64encode(json.dumps(ops).encode()).decode()

    async def respond(request: dict[str, Any]) -> web.StreamResponse:
        return review_response(request, patchType="JSONPatch", patch=encoded, **extra)

    return respond


async def allow(request: dict[str, Any]) -> web.StreamResponse:
    return review_response(request)


@dataclass
class Webhook:
    url: str
    ca_bundle: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    respond: dict[str, Respond] = field(default_factory=dict)

    def config(
        self, name: str = "gpu-intent", path: str = "/mutate", **hook: Any
    ) -> dict[str, Any]:
        webhook = {
            "name": f"{name}.pods.example.com",
            "clientConfig": {"url": self.url + path, "caBundle": self.ca_bundle},
            "rules": [
                {
                    "operations": ["CREATE"],
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["pods"],
                }
            ],
            "namespaceSelector": {"matchLabels": ENABLED},
            "objectSelector": {
                "matchExpressions": [
                    {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
                ]
            },
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Ignore",
            **hook,
        }
        return {"metadata": {"name": name}, "webhooks": [webhook]}


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Webhook]:
    tls = write_tls_files(tmp_path / "webhook-tls", ["localhost"], ["127.0.0.1"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    hook = Webhook("", base64.b64encode(tls.ca_cert.read_bytes()).decode())

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        hook.calls.append((request.path_qs, body))
        return await hook.respond.get(request.path, allow)(body)

    app = web.Application()
    app.router.add_post("/{path:.*}", handle)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    hook.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield hook
    finally:
        await runner.cleanup()


@dataclass
class Cluster:
    store: Store
    admission: Admission
    core: client.CoreV1Api
    registration: client.AdmissionregistrationV1Api


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    store = Store()
    for name, labels in (("default", ENABLED), ("capture", ENABLED), ("plain", {})):
        store.create(NAMESPACES, {"metadata": {"name": name, "labels": labels}})
    admission = Admission(store)
    server = ApiServer(store, token="t", admission=admission)
    await server.start()
    cfg = Configuration()
    await config.load_kube_config(
        config_file=str(server.write_kubeconfig(tmp_path / "kc")), client_configuration=cfg
    )
    api = ApiClient(configuration=cfg)
    try:
        yield Cluster(
            store, admission, client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
        )
    finally:
        await api.close()
        await server.stop()


def gpu_pod(name: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod of fixture 01 (a ReplicaSet's generateName pod asking for 2 GPUs)."""
    meta: dict[str, Any] = {"name": name} if name else {"generateName": "trainer-7d9f8-"}
    meta["labels"] = labels or {"app": "trainer"}
    meta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "trainer-7d9f8",
            "uid": "0f3b2a7e-5d1c-4a8e-9b6f-1c2d3e4f5a6b",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "example.registry/trainer:1",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "2"},
                        "requests": {"cpu": "4", "memory": "16Gi"},
                    },
                }
            ],
            "nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": "a100"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }


def fixture_request(name: str) -> dict[str, Any]:
    request = json.loads((FIXTURES / name).read_text())["request"]
    assert isinstance(request, dict)
    return request


def key_shape(request: dict[str, Any]) -> dict[str, Any]:
    """The key sets the apiserver's request must share with a captured one."""
    obj = request["object"]
    return {
        "request": set(request),
        "object": set(obj),
        "metadata": set(obj["metadata"]),
        "spec": set(obj["spec"]),
        "container": set(obj["spec"]["containers"][0]),
        "options": set(request["options"]),
        "kind": request["kind"],
        "resource": request["resource"],
    }


def status_of(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["code"] == err.value.status
    return dict(body)


async def register(cluster: Cluster, configuration: dict[str, Any]) -> None:
    await cluster.registration.create_mutating_webhook_configuration(configuration)


# -- what the webhook sees, without HTTP ------------------------------------------------


def hami_pod() -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "3k"}
    return {
        "metadata": {"name": "hami-vgpu", "annotations": {"nvidia.com/use-gputype": "A100,H100"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "ubuntu:22.04",
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": limits},
                }
            ]
        },
    }


def kai_pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "kai-half", "annotations": {"gpu-fraction": "0.5"}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "image": "example.registry/nb:2"}],
        },
    }


@pytest.mark.parametrize(
    ("fixture", "body"),
    [
        ("01-generatename-whole-gpu.json", gpu_pod()),
        ("02-hami-gpumem-annotated.json", hami_pod()),
        ("03-kai-fraction-no-resources.json", kai_pod()),
    ],
)
def test_defaulted_pod_equals_the_captured_object(fixture: str, body: dict[str, Any]) -> None:
    captured = fixture_request(fixture)["object"]
    body = {"kind": "Pod", "apiVersion": "v1", **body}
    body["metadata"]["namespace"] = "capture"
    time = captured["metadata"]["managedFields"][0]["time"]
    seen = prepare_pod_for_admission(body, manager="kubectl-create", time=time)
    # The token volume name is random; the captured cluster (OpenShift) adds a fourth
    # projected source, openshift-service-ca.crt, that vanilla kube-apiserver does not.
    captured_volume = captured["spec"]["volumes"][0]
    captured_volume["projected"]["sources"] = captured_volume["projected"]["sources"][:3]
    ours = json.loads(
        json.dumps(seen).replace(seen["spec"]["volumes"][0]["name"], captured_volume["name"])
    )
    assert ours == captured
    assert list(ours["spec"]) == list(captured["spec"])  # Go struct field order too


# -- the request ------------------------------------------------------------------------


async def test_request_matches_the_captured_generatename_review(
    cluster: Cluster, webhook: Webhook
) -> None:
    await register(cluster, webhook.config())
    created = await cluster.core.create_namespaced_pod(
        "capture", gpu_pod(), field_manager="kubectl-create", field_validation="Strict"
    )
    assert len(webhook.calls) == 1
    path, review = webhook.calls[0]
    assert path == "/mutate?timeout=10s"
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    request = review["request"]
    captured = fixture_request("01-generatename-whole-gpu.json")
    assert key_shape(request) == key_shape(captured)
    assert "name" not in request and request["namespace"] == "capture"
    assert (
        request["operation"] == "CREATE"
        and request["oldObject"] is None
        and request["dryRun"] is False
    )
    assert request["options"] == captured["options"]
    meta = request["object"]["metadata"]
    assert meta["creationTimestamp"] is None and "uid" not in meta and "name" not in meta
    assert (
        meta["managedFields"][0]["fieldsV1"]
        == captured["object"]["metadata"]["managedFields"][0]["fieldsV1"]
    )
    assert request["object"]["status"] == {}
    assert request["uid"] != captured["uid"] and len(request["uid"]) == 36
    assert created.metadata.name.startswith("trainer-7d9f8-") and created.metadata.uid


async def test_dry_run_request_matches_the_captured_review(
    cluster: Cluster, webhook: Webhook
) -> None:
    await register(cluster, webhook.config())
    body = {
        "metadata": {"name": "dry"},
        "spec": {
            "containers": [{"name": "c", "image": "ubuntu:22.04", "command": ["sleep", "infinity"]}]
        },
    }
    await cluster.core.create_namespaced_pod(
        "capture", body, dry_run="All", field_manager="kubectl-create", field_validation="Strict"
    )
    request = webhook.calls[0][1]["request"]
    captured = fixture_request("04-dry-run.json")
    assert key_shape(request) == key_shape(captured)
    assert request["name"] == "dry" and request["dryRun"] is True
    assert request["options"]["dryRun"] == ["All"]
    with pytest.raises(NotFound):
        cluster.store.get(PODS, "capture", "dry")


async def test_patch_is_applied_before_validation_and_storage(
    cluster: Cluster, webhook: Webhook
) -> None:
    await register(cluster, webhook.config())
    webhook.respond["/mutate"] = patch_response(
        [
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {"gpu-intent.example.com/intent": "a100x2"},
            },
            {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
        ]
    )
    created = await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert created.metadata.annotations == {"gpu-intent.example.com/intent": "a100x2"}
    assert created.spec.scheduler_name == "hami-scheduler"
    stored = cluster.store.get(PODS, "default", "p")
    assert stored["metadata"]["annotations"] == {"gpu-intent.example.com/intent": "a100x2"}
    assert [c.outcome for c in cluster.admission.calls] == ["patched"]


async def test_selectors_decide_who_is_called(cluster: Cluster, webhook: Webhook) -> None:
    await register(cluster, webhook.config())
    await cluster.core.create_namespaced_pod("plain", gpu_pod("in-plain"))
    await cluster.core.create_namespaced_pod(
        "default", gpu_pod("ignored", labels={"hami.io/webhook": "ignore"})
    )
    assert webhook.calls == []
    await cluster.core.create_namespaced_pod("default", gpu_pod("sent"))
    assert [call[1]["request"]["name"] for call in webhook.calls] == ["sent"]


async def test_namespace_name_label_is_always_matchable(cluster: Cluster, webhook: Webhook) -> None:
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "plain"}}
    await register(cluster, webhook.config(namespaceSelector=selector))
    await cluster.core.create_namespaced_pod("default", gpu_pod("a"))
    await cluster.core.create_namespaced_pod("plain", gpu_pod("b"))
    assert [call[1]["request"]["namespace"] for call in webhook.calls] == ["plain"]


# -- outcomes ---------------------------------------------------------------------------


async def test_denial_rejects_with_the_webhooks_message_and_code(
    cluster: Cluster, webhook: Webhook
) -> None:
    await register(cluster, webhook.config())

    async def deny(request: dict[str, Any]) -> web.StreamResponse:
        return review_response(
            request, allowed=False, status={"code": 403, "message": "no GPUs for you"}
        )

    webhook.respond["/mutate"] = deny
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert err.value.status == 403
    assert status_of(err)["message"] == (
        'admission webhook "gpu-intent.pods.example.com" denied the request: no GPUs for you'
    )
    with pytest.raises(NotFound):
        cluster.store.get(PODS, "default", "p")


async def test_warnings_become_warning_headers(cluster: Cluster, webhook: Webhook) -> None:
    await register(cluster, webhook.config())
    webhook.respond["/mutate"] = patch_response([], warnings=['model "a100" guessed', "second"])
    _, status, headers = await cluster.core.create_namespaced_pod_with_http_info(
        "default", gpu_pod("p")
    )
    assert status == 201
    assert headers.getall("Warning") == ['299 - "model \\"a100\\" guessed"', '299 - "second"']


async def test_a_patch_that_does_not_apply_rejects_even_under_ignore(
    cluster: Cluster, webhook: Webhook
) -> None:
    await register(cluster, webhook.config(failurePolicy="Ignore"))
    webhook.respond["/mutate"] = patch_response(
        [
            {
                "op": "add",
                "path": "/metadata/annotations/gpu-intent.example.com~1intent",
                "value": "x",
            }
        ]
    )
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    body = status_of(err)
    assert err.value.status == 500 and body["reason"] == "InternalError"
    assert body["message"].startswith("Internal error occurred: ")
    assert cluster.admission.calls[-1].outcome == "patch-failed"


async def test_webhook_down_with_ignore_creates_the_pod_unmutated(cluster: Cluster) -> None:
    dead = Webhook("https://127.0.0.1:1", base64.b64encode(b"unused").decode())
    configuration = dead.config()
    configuration["webhooks"][0]["clientConfig"].pop("caBundle")
    await register(cluster, configuration)
    created = await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert created.metadata.annotations is None
    call = cluster.admission.calls[-1]
    assert (
        call.outcome == "failed-open"
        and 'failed calling webhook "gpu-intent.pods.example.com"' in call.error
    )


async def test_webhook_down_with_fail_rejects_with_500(cluster: Cluster) -> None:
    dead = Webhook("https://127.0.0.1:1", "")
    configuration = dead.config()
    hook = configuration["webhooks"][0]
    del hook["failurePolicy"]  # the API default is Fail
    hook["clientConfig"].pop("caBundle")
    await register(cluster, configuration)
    stored = await cluster.registration.read_mutating_webhook_configuration("gpu-intent")
    assert stored.webhooks[0].failure_policy == "Fail" and stored.webhooks[0].timeout_seconds == 10
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert err.value.status == 500
    message = status_of(err)["message"]
    assert message.startswith(
        'Internal error occurred: failed calling webhook "gpu-intent.pods.example.com": '
        'failed to call webhook: Post "https://127.0.0.1:1/mutate?timeout=10s"'
    )


async def test_untrusted_certificate_is_a_failed_call(
    cluster: Cluster, webhook: Webhook, tmp_path: Path
) -> None:
    other = write_tls_files(tmp_path / "other-ca", ["localhost"], ["127.0.0.1"])
    configuration = webhook.config(failurePolicy="Fail")
    configuration["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(
        other.ca_cert.read_bytes()
    ).decode()
    await register(cluster, configuration)
    with pytest.raises(ApiException) as err:
        await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert err.value.status == 500 and "certificate verify failed" in status_of(err)["message"]
    assert webhook.calls == []


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (
            lambda r: web.json_response(
                {
                    "kind": "AdmissionReview",
                    "apiVersion": "admission.k8s.io/v1",
                    "response": {"uid": "someone-else", "allowed": True},
                }
            ),
            'expected response.uid="',
        ),
        (
            lambda r: web.json_response(
                {
                    "kind": "AdmissionReview",
                    "apiVersion": "admission.k8s.io/v1beta1",
                    "response": {"uid": r["request"]["uid"], "allowed": True},
                }
            ),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview",
        ),
        (
            lambda r: web.Response(status=500, text="boom"),
            "the server responded with the status code 500",
        ),
        (lambda r: web.Response(text="not json"), "received invalid webhook response"),
    ],
)
async def test_bad_answers_are_failed_calls(
    cluster: Cluster, webhook: Webhook, answer: Callable[[dict[str, Any]], web.Response], error: str
) -> None:
    async def respond(request: dict[str, Any]) -> web.StreamResponse:
        return answer(request)

    webhook.respond["/mutate"] = respond
    await register(cluster, webhook.config())
    created = await cluster.core.create_namespaced_pod("default", gpu_pod("p"))  # Ignore: fail open
    assert created.metadata.name == "p"
    assert (
        cluster.admission.calls[-1].outcome == "failed-open"
        and error in cluster.admission.calls[-1].error
    )


async def test_timeout_fails_the_call_after_timeout_seconds(
    cluster: Cluster, webhook: Webhook
) -> None:
    async def slow(request: dict[str, Any]) -> web.StreamResponse:
        await asyncio.sleep(3)  # a slow webhook, the thing under test: past timeoutSeconds 1
        return review_response(request)

    webhook.respond["/mutate"] = slow
    await register(cluster, webhook.config(timeoutSeconds=1))
    created = await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert created.metadata.name == "p"
    assert webhook.calls[0][0] == "/mutate?timeout=1s"
    call = cluster.admission.calls[-1]
    assert call.outcome == "failed-open" and "context deadline exceeded" in call.error
    assert 0.9 <= call.latency_seconds < 2


async def test_webhooks_run_in_name_order_and_reinvocation(
    cluster: Cluster, webhook: Webhook
) -> None:
    await register(cluster, webhook.config("b-second", path="/second"))
    await register(cluster, webhook.config("a-first", path="/first", reinvocationPolicy="IfNeeded"))
    webhook.respond["/second"] = patch_response(
        [{"op": "add", "path": "/metadata/annotations", "value": {"b": "1"}}]
    )
    created = await cluster.core.create_namespaced_pod("default", gpu_pod("p"))
    assert [path.split("?")[0] for path, _ in webhook.calls] == ["/first", "/second", "/first"]
    assert webhook.calls[2][1]["request"]["object"]["metadata"]["annotations"] == {"b": "1"}
    assert created.metadata.annotations == {"b": "1"}


# -- configuration validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"clientConfig": {"url": "https://127.0.0.1:1/mutate?x=1"}},
            'webhooks[0].clientConfig.url: Invalid value: "https://127.0.0.1:1/mutate?x=1": query parameters are not permitted in the URL',
        ),
        (
            {"clientConfig": {"url": "http://127.0.0.1:1/mutate"}},
            "'https' is the only allowed URL scheme",
        ),
        (
            {"clientConfig": {}},
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
        ),
        ({"sideEffects": None}, "webhooks[0].sideEffects: Required value"),
        ({"admissionReviewVersions": []}, "webhooks[0].admissionReviewVersions: Required value"),
        (
            {"timeoutSeconds": 31},
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        ),
        ({"name": "short"}, "should be a domain with at least three segments"),
        (
            {"failurePolicy": "Sometimes"},
            'webhooks[0].failurePolicy: Unsupported value: "Sometimes"',
        ),
    ],
)
async def test_invalid_configurations_are_422(
    cluster: Cluster, webhook: Webhook, change: dict[str, Any], message: str
) -> None:
    configuration = webhook.config()
    hook = configuration["webhooks"][0]
    for key, value in change.items():
        if value is None:
            del hook[key]
        else:
            hook[key] = value
    with pytest.raises(ApiException) as err:
        await register(cluster, configuration)
    body = status_of(err)
    assert err.value.status == 422
    assert body["message"].startswith(
        'MutatingWebhookConfiguration.admissionregistration.k8s.io "gpu-intent" is invalid'
    )
    assert message in body["message"]
