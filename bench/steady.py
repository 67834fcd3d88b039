"""A steady reconcile pass at scale: the controller's cache holds N pending GPU pods over
20 NodePools, every bin already has its trigger and each trigger a launching NodeClaim,
and nothing changed since the last pass. Measured: the controller's pass,
`IncrementalPlanner.run` (journal read, partitions re-planned where their inputs
changed, merge; median of 5), N = 10,000 and 50,000, and their ratio; the first pass
after one pod changed; for reference, the plain `controller.snapshot.snapshot` + `plan`
of the whole cache (one pass); and the memory the cache holds (tracemalloc, of the cached
objects as the informer stores them and everything parsed from them).

Objects are plain dicts shaped as kube-apiserver sends them (what the informers cache).
"""

from __future__ import annotations

import gc
import json
import statistics
import time
import tracemalloc
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from controller.cache import InformerCache, Kind
from controller.decisions import PlanConfig
from controller.incremental import IncrementalPlanner
from controller.memory import Memory
from controller.plan import plan
from controller.snapshot import snapshot
from controller.triggers import TriggerSettings
from intent.contract import Intent, Source

#: The controller's memory: empty here (no covers, retries or cooldowns).
MEMORY = Memory(time.monotonic)
MODELS = ("t4", "a10g", "l4", "l40s", "a100")
FRACTIONS = ("0.25", "0.5", "1", "2", "0.5")
POOLS = 20
NAMESPACE_COUNT = 20
NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-11-23T11:59:00Z"


def pod(i: int) -> dict[str, Any]:
    """Pending pod ``i``: a KAI-style intent on one of `MODELS`, in one of 20 pools."""
    intent = Intent(
        Decimal(FRACTIONS[i % len(FRACTIONS)]),
        model=MODELS[i % len(MODELS)],
        pool=f"pool-{i % POOLS}",
        source=(Source("kai", "gpu-fraction"),),
    )
    return {
        "metadata": {
            "name": f"p{i}",
            "namespace": f"ns{i % NAMESPACE_COUNT}",
            "uid": f"u{i}",
            "resourceVersion": str(i + 1),
            "creationTimestamp": STAMP,
            "labels": {"app": f"app{i % 50}"},
            "annotations": {**intent.to_annotations(), "gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "example.registry/infer:7",
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                }
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": STAMP,
                }
            ],
        },
    }


def nodepool(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"pool-{i}"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {
                            "key": "karpenter.k8s.aws/instance-gpu-name",
                            "operator": "In",
                            "values": list(MODELS),
                        }
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                }
            }
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def steady_state(n: int) -> tuple[InformerCache, PlanConfig]:
    """A cache of ``n`` pending pods whose triggers and NodeClaims all exist."""
    config = PlanConfig(trigger=TriggerSettings(namespace="gi"), max_triggers=10**6)
    state = InformerCache(time.monotonic)
    state.replace(Kind.NODEPOOLS, [nodepool(i) for i in range(POOLS)])
    state.replace(
        Kind.NAMESPACES,
        [
            {"metadata": {"name": f"ns{i}", "labels": {"gpu-intent.io/inject": "enabled"}}}
            for i in range(NAMESPACE_COUNT)
        ],
    )
    state.replace(Kind.PENDING_PODS, [pod(i) for i in range(n)])
    first = plan(snapshot(state, MEMORY, NOW), config)
    triggers, claims = [], []
    for k, create in enumerate(first.creates):
        body = json.loads(json.dumps(create.body))
        name = f"gi-{k}"
        body["metadata"].update(
            name=name,
            uid=f"t{k}",
            resourceVersion=str(10**7 + k),
            creationTimestamp=STAMP,
        )
        body["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = f"nc-{k}"
        body["status"] = {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "NodeClaimLinked"}]
        }
        triggers.append(body)
        claims.append(
            {
                "metadata": {
                    "name": f"nc-{k}",
                    "creationTimestamp": STAMP,
                    "resourceVersion": str(2 * 10**7 + k),
                    "labels": {"karpenter.sh/nodepool": create.group.pool},
                },
                "spec": {"resources": {"requests": {"nvidia.com/gpu": str(create.gpus)}}},
                "status": {"conditions": [{"type": "Launched", "status": "True"}]},
            }
        )
    state.replace(Kind.TRIGGERS, triggers)
    state.replace(Kind.NODECLAIMS, claims)
    # Settle: one pass writes the Provisioning statuses; store them on the pods as the
    # API would, so the steady pass decides nothing.
    settled = plan(snapshot(state, MEMORY, NOW), config)
    by_key = {(s.ref.namespace, s.ref.name): s for s in settled.statuses}
    pods = []
    for obj in (pod(i) for i in range(n)):
        change = by_key.get((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        if change is not None:
            obj["metadata"]["annotations"]["gpu-intent.io/scale-up"] = change.status.to_annotation()
            obj["metadata"]["resourceVersion"] += "-told"  # the API moves it on every write
        pods.append(obj)
    state.replace(Kind.PENDING_PODS, pods)
    return state, config


def time_pass(planner: IncrementalPlanner) -> tuple[float, bool]:
    """Seconds one controller pass takes, and whether it decided anything."""
    started = time.perf_counter()
    decided = planner.run(NOW).plan
    return time.perf_counter() - started, bool(decided)


def time_whole(state: InformerCache, config: PlanConfig) -> float:
    """Seconds the plain pass takes: snapshot of the whole cache, then `plan`."""
    started = time.perf_counter()
    plan(snapshot(state, MEMORY, NOW), config)
    return time.perf_counter() - started


def run(sizes: tuple[int, ...] = (10_000, 50_000)) -> None:
    medians: dict[int, float] = {}
    for n in sizes:
        gc.collect()
        tracemalloc.start()
        state, config = steady_state(n)
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        planner = IncrementalPlanner(state, MEMORY, config)
        time_pass(planner)  # the first pass parses and plans everything, as after a start
        samples = []
        acted = False
        for _ in range(5):
            seconds, decided = time_pass(planner)
            samples.append(seconds)
            acted = acted or decided
        medians[n] = statistics.median(samples)
        changed = pod(7)
        changed["metadata"]["resourceVersion"] = str(10**8)
        changed["metadata"]["labels"]["touched"] = "yes"
        state.apply(Kind.PENDING_PODS, "MODIFIED", changed)
        one_change, _ = time_pass(planner)
        time_whole(state, config)  # warm the snapshot's parse cache
        whole = time_whole(state, config)
        print(
            f"steady pass, {n:>6} pending pods over {POOLS} pools: controller pass "
            f"median {medians[n] * 1e3:7.2f} ms (5 passes, decided something: {acted}); "
            f"after one pod changed {one_change * 1e3:7.1f} ms; whole snapshot+plan "
            f"{whole * 1e3:7.1f} ms; cache holds {held / 2**20:6.1f} MiB (tracemalloc)"
        )
    if len(sizes) == 2:
        small, large = sizes
        print(
            f"steady pass {large // 1000}k/{small // 1000}k time ratio: "
            f"{medians[large] / medians[small]:.2f} (target <= 6; {large / small:.0f}x the pods)"
        )


if __name__ == "__main__":
    run()
