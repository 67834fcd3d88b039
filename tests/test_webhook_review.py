"""The pure admission review: AdmissionReview body in, response out."""

from __future__ import annotations

import base64
import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from webhook.review import (
    MAX_WARNING,
    AdmissionReviewResponse,
    MalformedReview,
    admit,
    make_annotation_patch,
    review,
)

FIXTURES = Path(__file__).parent / "fixtures" / "admission-reviews"

EXPECTED: dict[str, dict[str, str]] = {
    "01-generatename-whole-gpu.json": {
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "2",
        "gpu-intent.io/model": "a100",
        "gpu-intent.io/source": (
            "resources:nvidia.com/gpu,nodeSelector:karpenter.k8s.aws/instance-gpu-name"
        ),
    },
    "02-hami-gpumem-annotated.json": {
        "nvidia.com/use-gputype": "A100,H100",
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "0.3",
        "gpu-intent.io/model": "a100",
        "gpu-intent.io/gpu-memory": "3000",
        "gpu-intent.io/source": (
            "hami:nvidia.com/gpumem,hami:nvidia.com/gpucores,hami:nvidia.com/use-gputype,"
            "rule:model-first-listed"
        ),
    },
    "03-kai-fraction-no-resources.json": {
        "gpu-fraction": "0.5",
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "0.5",
        "gpu-intent.io/source": "kai:gpu-fraction",
    },
    "04-dry-run.json": {
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "0.3",
        "gpu-intent.io/gpu-memory": "3000",
        "gpu-intent.io/source": "hami:nvidia.com/gpumem,hami:nvidia.com/gpucores",
    },
}


def load(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return body


def make_review(pod: dict[str, Any], **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ns",
            "operation": "CREATE",
            "object": pod,
            "dryRun": False,
            **request,
        },
    }


def gpu_pod(metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def decode_patch(response: AdmissionReviewResponse) -> list[dict[str, Any]]:
    assert response["response"]["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["response"]["patch"]))
    return ops


def apply(response: AdmissionReviewResponse, pod: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(pod, decode_patch(response))
    return result


def assert_unpatched(response: AdmissionReviewResponse, uid: str = "u-1") -> None:
    assert response["apiVersion"] == "admission.k8s.io/v1"
    assert response["kind"] == "AdmissionReview"
    assert response["response"]["uid"] == uid
    assert response["response"]["allowed"] is True
    assert "patch" not in response["response"]
    assert "patchType" not in response["response"]


# --- captured fixtures ----------------------------------------------------------------


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_patch_applies_and_gives_the_annotations(name: str) -> None:
    body = load(name)
    pod = body["request"]["object"]
    original = copy.deepcopy(pod)
    response = review(body)
    assert response["apiVersion"] == "admission.k8s.io/v1"
    assert response["kind"] == "AdmissionReview"
    assert response["response"]["uid"] == body["request"]["uid"]
    assert response["response"]["allowed"] is True
    # only the HAMi pod's use-gputype list (A100,H100) is an ambiguity worth a warning
    assert ("warnings" in response["response"]) == (name == "02-hami-gpumem-annotated.json")
    patched = apply(response, pod)
    assert patched["metadata"]["annotations"] == EXPECTED[name]
    assert pod == original  # review() did not touch its input
    patched["metadata"].pop("annotations")
    original["metadata"].pop("annotations", None)
    assert patched == original  # nothing else changed


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_reinvocation_is_idempotent(name: str) -> None:
    body = load(name)
    body["request"]["object"] = apply(review(body), body["request"]["object"])
    admission = admit(body)
    assert admission.outcome == "unchanged"
    assert_unpatched(admission.response, body["request"]["uid"])


def test_generate_name_pod_is_named_by_its_prefix() -> None:
    admission = admit(load("01-generatename-whole-gpu.json"))
    assert admission.outcome == "patched"
    assert admission.pod == "capture/trainer-7d9f8-*"


def test_pod_reference_is_printable() -> None:
    pod = gpu_pod({"name": "evil\nINFO forged line", "namespace": "ns"})
    assert admit(make_review(pod)).pod == "ns/evil?INFO forged line"


def test_patch_escapes_slashes_in_keys() -> None:
    ops = decode_patch(review(load("03-kai-fraction-no-resources.json")))
    paths = {op["path"] for op in ops}
    assert "/metadata/annotations/gpu-intent.io~1gpus" in paths
    assert all(op["op"] == "add" for op in ops)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_direct_patch_gives_the_same_pod_as_a_whole_pod_diff(name: str) -> None:
    pod = load(name)["request"]["object"]
    annotations = {"gpu-intent.io/intent-version": "v1", "gpu-intent.io/gpus": "1"}
    mutated = copy.deepcopy(pod)
    mutated["metadata"].setdefault("annotations", {}).update(annotations)
    full = jsonpatch.make_patch(pod, mutated)
    direct = make_annotation_patch(pod, annotations)
    assert direct.apply(pod) == full.apply(pod) == mutated
    assert direct.apply(direct.apply(pod)) == mutated  # applying twice changes nothing more


# --- annotations map shapes -----------------------------------------------------------


def test_pod_without_annotations_map_gets_one() -> None:
    pod = gpu_pod({"name": "p", "namespace": "ns"})
    response = review(make_review(pod))
    ops = decode_patch(response)
    assert ops[0]["op"] == "add" and ops[0]["path"] == "/metadata/annotations"
    assert apply(response, pod)["metadata"]["annotations"]["gpu-intent.io/gpus"] == "1"


def test_pod_with_null_annotations_gets_a_map() -> None:
    pod = gpu_pod({"name": "p", "namespace": "ns", "annotations": None})
    response = review(make_review(pod))
    patched = apply(response, pod)
    assert patched["metadata"]["annotations"] == {
        "gpu-intent.io/intent-version": "v1",
        "gpu-intent.io/gpus": "1",
        "gpu-intent.io/source": "resources:nvidia.com/gpu",
    }


def test_pod_without_metadata_gets_one() -> None:
    pod = gpu_pod({})
    del pod["metadata"]
    patched = apply(review(make_review(pod)), pod)
    assert patched["metadata"]["annotations"]["gpu-intent.io/intent-version"] == "v1"


def test_existing_annotations_are_kept() -> None:
    pod = gpu_pod({"name": "p", "annotations": {"a/b": "c", "x": ""}})
    patched = apply(review(make_review(pod)), pod)
    assert patched["metadata"]["annotations"]["a/b"] == "c"
    assert patched["metadata"]["annotations"]["x"] == ""


def test_user_written_intent_wins() -> None:
    pod = gpu_pod({"name": "p", "annotations": {"gpu-intent.io/intent-version": "v1"}})
    admission = admit(make_review(pod))
    assert admission.outcome == "unchanged"
    assert_unpatched(admission.response)


def test_dry_run_is_patched_like_a_real_create() -> None:
    pod = gpu_pod({"name": "p"})
    assert review(make_review(pod, dryRun=True)) == review(make_review(pod, dryRun=False))


# --- no patch -------------------------------------------------------------------------


def test_non_gpu_pod_is_untouched() -> None:
    pod = gpu_pod({"name": "p"})
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    admission = admit(make_review(pod))
    assert admission.outcome == "not_gpu"
    assert_unpatched(admission.response)


@pytest.mark.parametrize(
    "request_fields",
    [
        {"operation": "UPDATE"},
        {"operation": "DELETE", "object": None},
        {"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}},
        {"kind": {"group": "", "version": "v1", "kind": "Binding"}, "subResource": "binding"},
        {"subResource": "status"},
        {"kind": "Pod"},
    ],
)
def test_not_a_pod_create_is_untouched(request_fields: dict[str, Any]) -> None:
    admission = admit(make_review(gpu_pod({"name": "p"}), **request_fields))
    assert admission.outcome == "unchanged"
    assert_unpatched(admission.response)


def fraction_pod(metadata: dict[str, Any]) -> dict[str, Any]:
    """A KAI-style pod: GPU demand only through annotations, no GPU resource."""
    return {**gpu_pod(metadata), "spec": {"containers": [{"name": "c"}]}}


def test_uninferable_pod_is_allowed_with_a_warning() -> None:
    pod = fraction_pod({"name": "p", "annotations": {"gpu-fraction": "abc"}})
    admission = admit(make_review(pod))
    assert admission.outcome == "error_object"
    assert_unpatched(admission.response)
    (warning,) = admission.response["response"]["warnings"]
    assert warning.startswith("gpu-intent: cannot infer GPU intent: ")
    assert "gpu-fraction" in warning and "'abc'" in warning


def test_a_broken_part_costs_only_that_part_and_is_a_warning() -> None:
    # gpu-fraction does not parse, but the pod asks for one whole nvidia.com/gpu: the
    # intent stands on that, and the user is told what was ignored (at most 120 chars).
    pod = gpu_pod({"name": "p", "annotations": {"gpu-fraction": "abc"}})
    admission = admit(make_review(pod))
    assert admission.outcome == "patched"
    assert admission.intent is not None and admission.intent.gpus == 1
    (warning,) = admission.response["response"]["warnings"]
    assert warning.startswith("gpu-intent: kai ignored: ")
    assert len(warning) <= 120


def test_ambiguity_is_a_response_warning_and_a_rule_token() -> None:
    body = load("02-hami-gpumem-annotated.json")  # use-gputype: "A100,H100"
    response = review(body)
    assert response["response"]["warnings"] == [
        "gpu-intent: model: chose A100 of A100,H100 (first listed in hami use-gputype)"
    ]
    assert all(len(w) <= 120 for w in response["response"]["warnings"])


def test_a_warning_quoting_a_pods_value_is_printable() -> None:
    """A value of the pod quoted in a warning may hold a terminal escape (ESC): kubectl
    prints warnings as they come, so every character that is not printable is a ``?``
    (found by the fuzzer: ``chose 0 of 0,1\x1b``)."""
    body = load("02-hami-gpumem-annotated.json")
    pod = body["request"]["object"]
    pod["metadata"]["annotations"]["nvidia.com/use-gputype"] = "A100,H100\x1b[2J"
    warnings = review(body)["response"]["warnings"]
    assert "gpu-intent: model: chose A100 of A100,H100?[2J (first listed in hami use-gputype)" in (
        warnings
    )
    assert all(w.isprintable() and "\x1b" not in w for w in warnings)


def test_users_gpus_annotation_is_kept_not_replaced() -> None:
    pod = gpu_pod({"name": "p", "annotations": {"gpu-intent.io/gpus": "0.25"}})
    admission = admit(make_review(pod))
    assert admission.intent is not None and admission.intent.gpus == Decimal("0.25")
    ops = decode_patch(admission.response)
    assert not any(op["path"].endswith("gpu-intent.io~1gpus") for op in ops)
    (warning,) = admission.response["response"]["warnings"]
    assert warning == "gpu-intent: gpus: kept your 0.25 (gpu-intent.io/gpus), not 1 (resources gpu)"


def test_users_invalid_gpus_annotation_is_replaced_with_a_warning() -> None:
    pod = gpu_pod({"name": "p", "annotations": {"gpu-intent.io/gpus": "lots"}})
    admission = admit(make_review(pod))
    assert admission.intent is not None and admission.intent.gpus == 1
    # "add" on an existing member replaces its value (RFC 6902 section 4.1)
    assert [(op["op"], op["value"]) for op in decode_patch(admission.response)
            if op["path"].endswith("gpu-intent.io~1gpus")] == [("add", "1")]  # fmt: skip
    (warning,) = admission.response["response"]["warnings"]
    assert "gpu-intent.io/gpus: 'lots' is not a GPU count" in warning


def test_warning_is_one_short_line() -> None:
    pod = fraction_pod({"name": "p", "annotations": {"gpu-fraction": "x\n" * 500}})
    (warning,) = review(make_review(pod))["response"]["warnings"]
    assert len(warning) <= MAX_WARNING
    assert "\n" not in warning


# --- malformed ------------------------------------------------------------------------


def _without(key: str) -> dict[str, Any]:
    body = make_review(gpu_pod({"name": "p"}))
    del body["request"][key]
    return body


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([], "must be a JSON object"),
        ("AdmissionReview", "must be a JSON object"),
        (None, "must be a JSON object"),
        ({**make_review({}), "apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion"),
        ({**make_review({}), "kind": "Pod"}, "kind"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        ({**make_review({}), "request": []}, "request"),
        (_without("uid"), "uid"),
        ({**make_review({}), "request": {"uid": ""}}, "uid"),
        ({**make_review({}), "request": {"uid": 7}}, "uid"),
        (_without("object"), "request.object"),
        (make_review([]), "request.object"),  # type: ignore[arg-type]
        (make_review(None), "request.object"),  # type: ignore[arg-type]
    ],
)
def test_malformed_reviews_raise(body: object, match: str) -> None:
    with pytest.raises(MalformedReview, match=match):
        review(body)


def test_malformed_reason_does_not_echo_huge_values() -> None:
    with pytest.raises(MalformedReview) as info:
        review({**make_review({}), "apiVersion": "x" * 100_000})
    assert len(str(info.value)) < 200
