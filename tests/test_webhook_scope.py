"""What the webhook leaves alone (kube-system, its own namespace, trigger pods) and what
it does with pods no patch could safely annotate."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import jsonpatch
import pytest

from controller.model import GroupKey, PodRef
from controller.nodes import NodePoolInfo
from controller.triggers import TriggerSettings, trigger_pod
from intent.contract import Intent
from intent.inference import Inference
from webhook import review as review_module
from webhook.review import admit, make_annotation_patch, review
from webhook.scope import SYSTEM_NAMESPACES, Scope


def make_review(pod: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": namespace,
            "operation": "CREATE",
            "object": pod,
        },
    }


def gpu_pod(**metadata: Any) -> dict[str, Any]:
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def test_kube_system_is_always_skipped() -> None:
    assert "kube-system" in SYSTEM_NAMESPACES
    admission = admit(make_review(gpu_pod(name="p"), namespace="kube-system"))
    assert admission.outcome == "skipped"
    assert admission.detail == "namespace kube-system is skipped"
    assert admission.response["response"] == {"uid": "u-1", "allowed": True}


def test_release_namespace_is_skipped_when_configured() -> None:
    scope = Scope.for_release("gpu-intent-system")
    body = make_review(gpu_pod(name="p"), namespace="gpu-intent-system")
    assert admit(body, scope=scope).outcome == "skipped"
    assert admit(body).outcome == "patched"  # the default scope knows no release namespace
    assert admit(make_review(gpu_pod(name="p")), scope=scope).outcome == "patched"


def test_metadata_namespace_counts_too() -> None:
    body = make_review(gpu_pod(name="p", namespace="kube-system"), namespace="")
    assert admit(body).outcome == "skipped"


def _trigger() -> dict[str, Any]:
    """A trigger pod exactly as the controller builds it."""
    pool = NodePoolInfo("gpu-standard", 0, True, (), {}, ())
    group = GroupKey("gpu-standard", "l4")
    return trigger_pod(
        group, 1, pool, [PodRef("ml", "p")], TriggerSettings(namespace="gpu-intent-system"),
        name="gi-gpu-standard-l4-aaaaaaaaaa",
    )


def test_controller_trigger_pods_are_skipped_in_any_namespace() -> None:
    pod = _trigger()
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    admission = admit(make_review(pod, namespace="ml"))
    assert admission.outcome == "skipped"
    assert admission.detail == "a gpu-intent trigger pod"


def test_a_pod_with_only_one_trigger_label_is_not_a_trigger() -> None:
    pod = gpu_pod(name="p", labels={"gpu-intent.io/trigger": "true"})
    assert admit(make_review(pod)).outcome == "patched"


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ("oops", "metadata is str, not an object"),
        ({"annotations": ["a"]}, "metadata.annotations is list, not an object"),
    ],
)
def test_patch_refuses_shapes_it_cannot_add_to(metadata: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        make_annotation_patch({"metadata": metadata}, {"a": "b"})


def test_pod_with_non_object_annotations_gets_a_warning_not_a_patch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # infer refuses such a pod first; make the patch step the one that sees it
    monkeypatch.setattr(
        review_module, "infer", lambda pod, **_: Inference(Intent(gpus=Decimal(1)))
    )
    admission = admit(make_review({"metadata": {"annotations": "x"}, "spec": {}}))
    assert admission.outcome == "error_object"
    assert "metadata.annotations is str" in admission.response["response"]["warnings"][0]


def test_keys_with_tilde_and_slash_are_escaped() -> None:
    patch = make_annotation_patch({"metadata": {"annotations": {}}}, {"a~b/c": "v"})
    assert patch.patch == [{"op": "add", "path": "/metadata/annotations/a~0b~1c", "value": "v"}]
    assert patch.apply({"metadata": {"annotations": {}}}) == {
        "metadata": {"annotations": {"a~b/c": "v"}}
    }


def test_metadata_null_is_replaced_by_one_with_annotations() -> None:
    pod: dict[str, Any] = {"metadata": None}
    patched = make_annotation_patch(pod, {"k": "v"}).apply(pod)
    assert patched == {"metadata": {"annotations": {"k": "v"}}}


def test_an_unexpected_exception_is_an_allowed_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(pod: object, **_: object) -> None:  # admit passes reasons=False
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(review_module, "infer", boom)
    admission = admit(make_review(gpu_pod(name="p")))
    assert admission.outcome == "internal_error"
    assert isinstance(admission.error, ZeroDivisionError)
    response = admission.response["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "ZeroDivisionError: bug" in response["warnings"][0]


def test_vram_request_that_raised_invalid_operation_is_a_warning() -> None:
    pod = gpu_pod(
        name="p",
        labels={"tensor-fusion.ai/enabled": "true"},
        annotations={"tensor-fusion.ai/vram-request": "0e9999999"},
    )
    pod["spec"]["containers"][0]["resources"] = {}
    admission = admit(make_review(pod))
    assert admission.outcome == "error_object"
    assert "out of range" in admission.response["response"]["warnings"][0]


def test_patched_response_decodes_to_a_patch_that_applies() -> None:
    pod = gpu_pod(name="p", annotations={"x": "1"})
    response = review(make_review(pod))["response"]
    ops = json.loads(base64.b64decode(response["patch"]))
    assert jsonpatch.apply_patch(pod, ops)["metadata"]["annotations"]["x"] == "1"
