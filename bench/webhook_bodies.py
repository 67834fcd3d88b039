"""Review time of hostile AdmissionReviews, up to the webhook's 7 MiB body limit.

``python -m bench.webhook_bodies`` prints, for each shape of pod that fills a body with one
long list (GPU names, affinity values or terms, containers, claims, annotations, node
selector keys), at 1/16, 1/4 and all of the body limit: the body's size, the CPU
milliseconds of decoding it (orjson) and of the review proper (`webhook.review.admit`),
and what the review answered. Targets (issue 24): the review proper under 100 ms and
linear in the body; decoding is the JSON library's and is shown beside it.

Times are CPU seconds of this thread (`time.thread_time`), the least of three runs with
the cyclic collector paused, so neither time the process spends waiting for a core nor a
collection of this process's heap is counted. ``tests/test_webhook_linear.py`` asserts
the targets on the same shapes.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import orjson

from webhook.review import admit
from webhook.server import CLIENT_MAX_SIZE

__all__ = ["SHAPES", "body_of", "cpu_seconds", "run"]


def review_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "ml", "object": pod,
        },
    }  # fmt: skip


def pod(annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1"}
    return {
        "metadata": {"namespace": "ml", "generateName": "p-", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}], **spec},
    }


def affinity(key: str, operator: str, values: list[str], terms: int = 1) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": operator, "values": values}]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term] * terms}}}}  # fmt: skip


def names(n: int) -> list[str]:
    return [f"gpu-model-{i}" for i in range(n)]


#: Shape -> a pod whose one list has ``n`` entries.
SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "use-gputype": lambda n: pod({"nvidia.com/use-gputype": ",".join(names(n)), "nvidia.com/gpumem": "1"}),
    "use-gputype known": lambda n: pod({"nvidia.com/use-gputype": ",".join(["A100", "T4", "L4"] * (n // 3))}),
    "nouse-gputype": lambda n: pod(
        {"nvidia.com/nouse-gputype": ",".join(names(n))}, **affinity("nvidia.com/gpu.product", "In", names(n))
    ),
    "affinity In on a GPU label": lambda n: pod(**affinity("nvidia.com/gpu.product", "In", names(n))),
    "affinity NotIn on a GPU label": lambda n: pod(**affinity("nvidia.com/gpu.product", "NotIn", names(n))),
    "affinity In on instance types": lambda n: pod(
        **affinity("node.kubernetes.io/instance-type", "In", [f"g{i}.xlarge" for i in range(n)])
    ),
    "affinity terms": lambda n: pod(**affinity("nvidia.com/gpu.product", "In", ["A100", "T4"], terms=n)),
    "affinity In on the NodePool": lambda n: pod(**affinity("karpenter.sh/nodepool", "In", [f"Bad_{i}" for i in range(n)])),
    "containers": lambda n: pod(containers=[
        {"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": "1"}}} for i in range(n)
    ]),
    "sidecars": lambda n: pod(initContainers=[
        {"name": f"c{i}", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpumem": "100"}}}
        for i in range(n)
    ]),
    "annotations": lambda n: pod({f"example.com/k{i}": "v" for i in range(n)}),
    "resource claims": lambda n: pod(resourceClaims=[
        {"name": f"c{i}", "resourceClaimTemplateName": "t"} for i in range(n)
    ]),
    "one long name": lambda n: pod({"nvidia.com/use-gputype": "a" * (8 * n)}),
    "node selector keys": lambda n: pod(nodeSelector={f"example.com/k{i}": "v" for i in range(n)}),
}  # fmt: skip


def body_of(shape: str, size: int) -> bytes:
    """The shape's review encoded, as close under ``size`` bytes as its entries allow."""
    make = SHAPES[shape]
    small = len(orjson.dumps(review_of(make(1000))))
    base = len(orjson.dumps(review_of(make(0))))
    n = int((size - base) * 1000 / (small - base))
    raw = orjson.dumps(review_of(make(n)))
    while len(raw) > size:  # longer numbers in the names: scale down to fit
        n = int(n * (size - base) / (len(raw) - base) * 0.995)
        raw = orjson.dumps(review_of(make(n)))
    assert size * 0.9 < len(raw), (shape, len(raw), size)
    return raw


def cpu_seconds(raw: bytes) -> tuple[float, float]:
    """``(decode, review)`` CPU seconds of one body, the least of three runs each, the
    cyclic collector paused (a review makes no reference cycles)."""
    best = (float("inf"), float("inf"))
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            started = time.thread_time()
            body = orjson.loads(raw)
            decoded = time.thread_time()
            admit(body)
            done = time.thread_time()
            best = (min(best[0], decoded - started), min(best[1], done - decoded))
            del body
    finally:
        gc.enable()
    return best


def run() -> None:
    """Print the table (see the module docstring)."""
    print(f"{'shape':32} {'body':>9} {'decode ms':>10} {'review ms':>10}  answer")
    for shape in sorted(SHAPES):
        for part in (16, 4, 1):
            raw = body_of(shape, CLIENT_MAX_SIZE // part)
            decode, review = cpu_seconds(raw)
            outcome = admit(orjson.loads(raw)).outcome
            print(f"{shape:32} {len(raw):>9} {decode * 1000:>10.1f} {review * 1000:>10.2f}  {outcome}")


if __name__ == "__main__":
    run()
