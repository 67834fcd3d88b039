"""Every object the chart renders is valid against the OpenAPI schemas of Kubernetes
1.30-1.34 (the ``kubernetes-validate`` package ships them), and the optional CEL
matchConditions select exactly the pods the webhook would annotate."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
from chart_support import MATRIX, Obj, one, render

from gpu_intent.explain import explain, read_documents

#: Kubernetes minors the chart supports (Chart.yaml kubeVersion >=1.30).
VERSIONS = ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0")
#: API groups of CRDs kubernetes-validate does not know: cert-manager, Prometheus Operator.
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
ROOT = Path(__file__).resolve().parent.parent


def validate(doc: Obj, version: str) -> None:
    """Validate ``doc`` strictly (unknown fields are errors) against ``version``'s schema."""
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values", MATRIX)
def test_every_built_in_object_is_valid_for_kubernetes(values: str, version: str) -> None:
    docs = render(values)
    checked = 0
    for doc in docs:
        if doc["apiVersion"].startswith(CRD_GROUPS):
            continue
        validate(doc, version)
        checked += 1
    assert checked >= 10  # the Deployments, Services, RBAC and the webhook configuration


def test_validation_catches_a_wrong_field() -> None:
    """The check above can fail: a misspelt field and an out-of-type value are errors."""
    mwc = copy.deepcopy(one(render("default"), "MutatingWebhookConfiguration"))
    mwc["webhooks"][0]["timeoutSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(mwc, "1.30.0")
    deployment = copy.deepcopy(one(render("default"), "Deployment", "gpu-intent-webhook"))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment, "1.34.0")


def _match_condition(values: str) -> celpy.Runner:
    [entry] = one(render(values), "MutatingWebhookConfiguration")["webhooks"]
    [condition] = entry["matchConditions"]
    env = celpy.Environment()
    return env.program(env.compile(condition["expression"]))


def _matches(program: celpy.Runner, pod: Any) -> bool:
    return bool(program.evaluate({"object": celpy.json_to_cel(pod)}))


def test_match_conditions_keep_every_pod_the_webhook_would_annotate() -> None:
    """Every pod template of the examples and test manifests (HAMi, KAI, tensor-fusion,
    whole GPUs, ...) that `gpu-intent explain` annotates passes the CEL condition, as do
    those it would warn about; pods with no GPU request do not. cel-python evaluates the
    expression with standard CEL (it uses no Kubernetes CEL library function)."""
    program = _match_condition("custom-selectors")
    explanations = explain(
        read_documents([str(ROOT / "examples"), str(ROOT / "tests" / "fixtures" / "manifests")])
    )
    statuses = {"annotated": 0, "error": 0, "not-gpu": 0, "already-annotated": 0}
    skipped_not_gpu = 0
    for e in explanations:
        statuses[e.status] += 1
        pod = e.template.pod
        if e.status in ("annotated", "error", "already-annotated"):
            assert _matches(program, pod), e.template.title
        elif not _matches(program, pod):
            skipped_not_gpu += 1
    assert statuses["annotated"] >= 20
    # the manifests' pods that ask for no GPU (a GPU node selector alone) are skipped too
    assert statuses["not-gpu"] >= 1 and skipped_not_gpu == statuses["not-gpu"]
    plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}
    assert not _matches(program, plain)
    with_cpu = copy.deepcopy(plain)
    with_cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert not _matches(program, with_cpu)
