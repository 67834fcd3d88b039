"""Planner cost: one `plan()` pass over N pending GPU pods, with time and peak memory.

The planner runs on every change (debounced), so a pass over thousands of pending pods
must stay far below the reconcile debounce window (0.1 s idle).
"""

from __future__ import annotations

import time
import tracemalloc
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from controller.decisions import PlanConfig, Snapshot
from controller.model import parse_pending_pod
from controller.nodes import parse_nodepool
from controller.plan import plan
from intent.contract import Intent, Source

MODELS = ("t4", "a10g", "l4", "l40s", "a100", "h100")
FRACTIONS = ("0.25", "0.5", "1", "2", "0.3")


def _pod(i: int) -> dict[str, Any]:
    intent = Intent(
        Decimal(FRACTIONS[i % len(FRACTIONS)]),
        model=MODELS[i % len(MODELS)],
        source=(Source("kai", "gpu-fraction"),),
    )
    return {
        "metadata": {
            "name": f"p{i}",
            "namespace": f"ns{i % 20}",
            "uid": f"u{i}",
            "creationTimestamp": "2026-11-21T12:00:00Z",
            "annotations": intent.to_annotations(),
        },
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        },
    }


def _pool(name: str, models: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {
                            "key": "karpenter.k8s.aws/instance-gpu-name",
                            "operator": "In",
                            "values": models,
                        }
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                }
            }
        },
    }


def run(sizes: tuple[int, ...] = (100, 1_000, 10_000)) -> None:
    pools = {
        p.name: p
        for p in (
            parse_nodepool(_pool("std", ["t4", "a10g", "l4"])),
            parse_nodepool(_pool("big", ["l40s", "a100", "h100"])),
        )
    }
    keys = {"karpenter.k8s.aws/instance-gpu-name"}
    config = PlanConfig(max_triggers=100_000)
    for n in sizes:
        raw = [_pod(i) for i in range(n)]
        start = time.perf_counter()
        pods = [p for p in (parse_pending_pod(o, keys) for o in raw) if p is not None]
        parsed = time.perf_counter()
        result = plan(Snapshot(pods, [], {}, pools, datetime.now(UTC)), config)
        done = time.perf_counter()
        tracemalloc.start()
        pods = [p for p in (parse_pending_pod(o, keys) for o in raw) if p is not None]
        plan(Snapshot(pods, [], {}, pools, datetime.now(UTC)), config)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        gpus = sum(c.gpus for c in result.creates)
        print(
            f"{n:>6} pending pods: parse {(parsed - start) * 1e3:7.1f} ms, plan {(done - parsed) * 1e3:7.1f} ms, "
            f"{len(result.creates)} triggers for {gpus} GPUs, peak {peak / 2**20:.1f} MiB allocated (tracemalloc)"
        )
