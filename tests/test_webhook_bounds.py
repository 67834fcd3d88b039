"""Bounded work per review, and every patch an intent the controller accepts.

A pod may say anything within the 7 MiB body limit: a list of a million GPU names, an
affinity of thousands of terms, a quantity nested a thousand lists deep. Each review reads
a bounded part of such a pod (each cut a warning), spends at most its CPU budget, and
answers with a patch whose intent annotations `Intent.from_annotations` reads back as the
intent written, whatever the user had set under ``gpu-intent.io/``.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_webhook_review import apply, assert_unpatched, decode_patch, gpu_pod, make_review

from intent.contract import MAX_MIB, Intent, IntentError
from intent.demand import MAX_CONTAINERS
from intent.dra import MAX_POD_CLAIMS
from intent.gpu_model import MAX_EXPRESSIONS, MAX_LIST_ENTRIES, MAX_NAME_LENGTH
from intent.inference import Budget, DeadlineExceeded, infer
from intent.text import show
from webhook import review as review_module
from webhook.review import MAX_ANNOTATIONS_BYTES, MAX_WARNINGS, admit


def required(*expressions: dict[str, Any], terms: int = 1) -> dict[str, Any]:
    """``spec.affinity`` with ``terms`` copies of one term holding ``expressions``."""
    term = {"matchExpressions": list(expressions)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term] * terms}
        }
    }


def pod_with(annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    pod = gpu_pod({"name": "p", "namespace": "ns", "annotations": annotations or {}})
    pod["spec"].update(spec)
    return pod


def intent_of(pod: dict[str, Any]) -> Intent:
    """The intent the pod carries after the review's patch, read as the controller reads it."""
    admission = admit(make_review(pod))
    assert admission.outcome == "patched", admission
    patched = apply(admission.response, pod)
    read = Intent.from_annotations(patched["metadata"]["annotations"])
    assert read is not None and read == admission.intent
    return read


# --- lists are read up to their bound, each cut a warning ------------------------------


def test_a_long_gpu_type_list_is_read_to_its_bound_with_a_warning() -> None:
    names = ["T4", *(f"made-up-{i}" for i in range(5000))]
    inference = infer(pod_with({"nvidia.com/use-gputype": ",".join(names), "nvidia.com/gpumem": "1000"}))
    assert inference.intent is not None and inference.intent.model == "t4"
    cut = [w for w in inference.warnings if "read the first" in w]
    assert cut == [f"nvidia.com/use-gputype: read the first {MAX_LIST_ENTRIES} of {MAX_LIST_ENTRIES + 1} "
                   "entries; the rest ignored"]  # fmt: skip


def test_a_name_past_the_bound_is_not_read() -> None:
    """The entry after the bound would have excluded the model: it is not read."""
    names = ",".join([*(f"made-up-{i}" for i in range(MAX_LIST_ENTRIES)), "T4"])
    pod = pod_with({"nvidia.com/nouse-gputype": names}, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"})
    assert intent_of(pod).model == "t4"
    fewer = ",".join([*(f"made-up-{i}" for i in range(MAX_LIST_ENTRIES - 1)), "T4"])
    pod = pod_with({"nvidia.com/nouse-gputype": fewer}, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"})
    assert intent_of(pod).model is None


def test_affinity_values_and_expressions_are_read_to_their_bounds() -> None:
    many = [f"gpu-{i}" for i in range(3 * MAX_LIST_ENTRIES)]
    expr = {"key": "nvidia.com/gpu.product", "operator": "In", "values": many}
    inference = infer(pod_with(affinity=required(expr)))
    assert inference.intent is not None and inference.intent.model == "gpu-0"
    assert any(f"read the first {MAX_LIST_ENTRIES} of {len(many)}" in w for w in inference.warnings)

    pool = {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]}
    terms = infer(pod_with(affinity=required(pool, terms=10 * MAX_EXPRESSIONS)))
    assert terms.intent is not None and terms.intent.pool == "gpu"
    assert any(f"read the first {MAX_EXPRESSIONS} match expressions" in w for w in terms.warnings)


def test_an_entry_longer_than_any_name_is_ignored_with_a_warning() -> None:
    pod = pod_with({"nvidia.com/use-gputype": "x" * (MAX_NAME_LENGTH + 1) + ",L4", "nvidia.com/gpumem": "1"})
    inference = infer(pod)
    assert inference.intent is not None and inference.intent.model == "l4"
    assert any(f"1 entries longer than {MAX_NAME_LENGTH} characters ignored" in w for w in inference.warnings)


def test_a_node_selector_of_many_keys_is_looked_up_not_walked() -> None:
    selector = {f"label-{i}": "v" for i in range(50_000)}
    selector["karpenter.k8s.aws/instance-gpu-name"] = "l40s"
    assert intent_of(pod_with(nodeSelector=selector)).model == "l40s"


def test_a_pod_of_more_containers_or_claims_than_read_gets_no_intent() -> None:
    containers = [{"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                  for i in range(MAX_CONTAINERS + 1)]  # fmt: skip
    admission = admit(make_review(pod_with(containers=containers)))
    assert admission.outcome == "error_object"
    assert f"has {MAX_CONTAINERS + 1} items; gpu-intent reads at most {MAX_CONTAINERS}" in admission.detail
    assert_unpatched(admission.response)
    assert intent_of(pod_with(containers=containers[:MAX_CONTAINERS])).gpus == MAX_CONTAINERS
    claims = [{"name": f"c{i}", "resourceClaimTemplateName": "t"} for i in range(MAX_POD_CLAIMS + 1)]
    admission = admit(make_review(pod_with(resourceClaims=claims)))
    assert admission.outcome == "error_object"
    assert f"gpu-intent reads at most {MAX_POD_CLAIMS}" in admission.detail


def test_a_response_carries_at_most_its_bound_of_warnings() -> None:
    bad = ",".join(f"${{GPU_{i}}}" for i in range(40))  # each an unsubstituted placeholder
    pod = pod_with({"nvidia.com/use-gputype": bad, "nvidia.com/gpumem": "1000"})
    assert len(infer(pod).warnings) == 40
    warnings = admit(make_review(pod)).response["response"]["warnings"]
    assert len(warnings) == MAX_WARNINGS
    assert warnings[-1] == (
        f"gpu-intent: and {40 - MAX_WARNINGS + 1} more warnings; `gpu-intent explain` on the "
        "manifest lists them all"
    )


# --- the budget -------------------------------------------------------------------------


def ticking(step: float) -> Callable[[], float]:
    """A clock that advances ``step`` seconds each time it is read."""
    ticks: Iterator[int] = itertools.count()
    return lambda: next(ticks) * step


def test_a_review_past_its_budget_allows_the_pod_unchanged_with_a_warning() -> None:
    pod = pod_with({"nvidia.com/use-gputype": "A100", "nvidia.com/gpumem": "1000"})
    admission = admit(make_review(pod), budget=0.05, clock=ticking(0.03))
    assert admission.outcome == "deadline"
    assert_unpatched(admission.response)
    [warning] = admission.response["response"]["warnings"]
    assert warning.startswith("gpu-intent: pod not annotated: inference took over its budget (60 ms")
    # the same pod on a clock that barely moves is patched
    assert admit(make_review(pod), budget=0.05, clock=ticking(0.001)).outcome == "patched"


def test_no_garbage_collection_runs_during_a_review_and_its_state_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A collection of a large heap (tens of ms) inside a review would be charged to its
    CPU budget and admit a GPU pod without an intent: the collector is off while the pod
    is reviewed, and as it was afterwards (on, or off when the caller had it off)."""
    seen: list[bool] = []
    real_infer = review_module.infer

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real_infer(*args, **kwargs)

    monkeypatch.setattr(review_module, "infer", recording)
    pod = pod_with({"nvidia.com/gpumem": "1000"})
    assert gc.isenabled()
    assert admit(make_review(pod)).outcome == "patched"
    assert gc.isenabled()
    gc.disable()
    try:
        assert admit(make_review(pod)).outcome == "patched"
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert seen == [False, False]


def test_the_budget_is_checked_between_the_steps_of_inference() -> None:
    stages: list[str] = []

    class Recording(Budget):
        def check(self, stage: str) -> None:
            stages.append(stage)
            super().check(stage)

    infer(pod_with({"nvidia.com/gpumem": "1000"}), budget=Recording(1.0, ticking(0.0)))
    assert stages == ["demand", "model"]
    with pytest.raises(DeadlineExceeded) as raised:
        infer(pod_with(), budget=Budget(0.5, ticking(0.3)))
    assert raised.value.stage == "model" and raised.value.spent == pytest.approx(0.6)
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        Budget(0)


# --- every patch is an intent the controller accepts ----------------------------------


@pytest.mark.parametrize(
    ("annotations", "dropped"),
    [
        ({"gpu-intent.io/pool": "Bad_Pool!"}, "gpu-intent.io/pool"),
        ({"gpu-intent.io/model": "${GPU_TYPE}"}, "gpu-intent.io/model"),
        ({"gpu-intent.io/gpu-memory": "lots"}, "gpu-intent.io/gpu-memory"),
        ({"gpu-intent.io/gpu-memory": "10000000000000"}, "gpu-intent.io/gpu-memory"),
        ({"gpu-intent.io/model-memory": "-1"}, "gpu-intent.io/model-memory"),
        ({"gpu-intent.io/model-memory": "81920"}, "gpu-intent.io/model-memory"),
        ({"gpu-intent.io/source": "a,,b"}, None),
        ({"gpu-intent.io/gpus": "abc"}, None),
    ],
)
def test_user_set_intent_annotations_the_intent_does_not_keep_are_removed(
    annotations: dict[str, str], dropped: str | None
) -> None:
    pod = pod_with(annotations)
    admission = admit(make_review(pod))
    ops = decode_patch(admission.response)
    assert all(op["path"].startswith("/metadata/annotations/") for op in ops)
    if dropped is not None:
        assert {"op": "remove", "path": "/metadata/annotations/" + dropped.replace("/", "~1")} in ops
    patched = apply(admission.response, pod)["metadata"]["annotations"]
    assert Intent.from_annotations(patched) == admission.intent
    assert {k for k in patched if k.startswith("gpu-intent.io/")} == set(admission.intent.to_annotations())  # type: ignore[union-attr]


def test_a_user_set_intent_annotation_the_intent_keeps_stays() -> None:
    pod = pod_with({"gpu-intent.io/pool": "gpu", "gpu-intent.io/model": "l4"})
    read = intent_of(pod)
    assert (read.pool, read.model) == ("gpu", "l4")


@pytest.mark.parametrize(
    "annotations",
    [
        {"nvidia.com/gpumem": "10000000000000", "nvidia.com/gpu": "1"},
        {"tensor-fusion.ai/vram-request": "1Ei", "tensor-fusion.ai/gpu-count": "1"},
    ],
)
def test_gpu_memory_past_the_contract_is_left_out(annotations: dict[str, str]) -> None:
    pod = pod_with({k: v for k, v in annotations.items() if "/" in k and not k.startswith("nvidia")})
    if "nvidia.com/gpumem" in annotations:
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = annotations["nvidia.com/gpumem"]
    inference = infer(pod)
    assert inference.intent is not None and inference.intent.gpu_memory_mib is None
    assert any(" ignored: " in w and " MiB is out of" in w for w in inference.warnings)
    assert intent_of(pod).gpu_memory_mib is None


def test_the_contract_bounds_memory_the_same_on_both_sides() -> None:
    Intent(gpus=Intent.from_annotations({"gpu-intent.io/intent-version": "v1", "gpu-intent.io/gpus": "1"}).gpus,  # type: ignore[union-attr]
           gpu_memory_mib=MAX_MIB)  # fmt: skip
    with pytest.raises(IntentError, match="MiB is out of range"):
        Intent(gpus=Intent.from_annotations({"gpu-intent.io/intent-version": "v1", "gpu-intent.io/gpus": "1"}).gpus,  # type: ignore[union-attr]
               model_memory_mib=MAX_MIB + 1)  # fmt: skip
    with pytest.raises(IntentError, match="gpu-memory: 0 MiB is out of range"):
        Intent.from_annotations(
            {"gpu-intent.io/intent-version": "v1", "gpu-intent.io/gpus": "1", "gpu-intent.io/gpu-memory": "0"}
        )


def test_annotations_that_would_pass_the_apiservers_limit_are_not_patched() -> None:
    big = {"big": "x" * (MAX_ANNOTATIONS_BYTES - 20)}
    admission = admit(make_review(pod_with(big)))
    assert admission.outcome == "error_object"
    assert "limit of 262144 bytes" in admission.detail
    assert_unpatched(admission.response)
    assert admit(make_review(pod_with({"big": "x" * (MAX_ANNOTATIONS_BYTES // 2)}))).outcome == "patched"


# --- deep values are shown in bounded time, without recursion --------------------------


def nested(depth: int) -> Any:
    value: Any = "1"
    for _ in range(depth):
        value = [value]
    return value


def test_a_quantity_nested_deeper_than_the_recursion_limit_is_an_error_not_a_crash() -> None:
    pod = pod_with()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = nested(5000)
    pod["metadata"]["name"] = nested(5000)
    admission = admit(make_review(pod))
    assert admission.outcome == "error_object", admission.detail
    assert "is not a quantity" in admission.detail and "[[[[...]]]]" in admission.detail
    assert admission.pod == "ns/[[[[...]]]]"


def test_show_is_bounded_for_any_value() -> None:
    assert show("20Gi") == "'20Gi'"
    long = show("x" * 10_000_000)
    assert "..." in long and len(long) <= 40
    assert show(nested(100_000)) == "[[[[...]]]]"
    assert len(show({str(i): i for i in range(10_000)}, 60)) <= 60
