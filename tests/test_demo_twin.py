"""The ideal native twin (`gpu_intent.demo.twin`) the demo and ``bench.cost`` judge by:
first-fit-decreasing of shared pods into 1-GPU twins, HAMi's split count, cpu and
memory carried, multi-GPU pods kept, no twin larger than an instance of its pool holds;
and the demo's need of a 160-pod mix, which the summed twin undercounted."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from typing import Any

from bench.cost import hami, kai_fraction, kai_memory, tensor_fusion, whole_gpu
from gpu_intent.demo import (
    DemandPod,
    default_examples,
    gpus_lower_bound,
    ideal_twins,
    load_manifests,
    native_need,
)
from gpu_intent.demo.twin import HAMI_SPLIT_COUNT, pool_instance_types
from intent.contract import Intent
from intent.inference import infer_intent
from intent.text import gpus_for_people, usd_for_people
from sim.catalog import by_name
from sim.karpenter import fits

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(
    name: str, cpu: str = "500m", memory: str = "1Gi", scheduler: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tolerations": [GPU_TOLERATION],
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec}


def shared(name: str, gpus: str, model: str | None = "l4", **kw: Any) -> DemandPod:
    return DemandPod(name, Intent(Decimal(gpus), model=model), pod(name, **kw))


def example_pools() -> list[dict[str, Any]]:
    return [d for d in load_manifests(default_examples()) if d["kind"] == "NodePool"]


def test_shared_pods_are_packed_first_fit_decreasing_into_one_gpu_twins() -> None:
    pods = [shared(n, g) for n, g in (("a", "0.6"), ("b", "0.5"), ("c", "0.4"), ("d", "0.3"))]
    pods.append(shared("e", "0.2"))
    ideal = ideal_twins(pods)
    assert [(t.gpus, t.serves, t.share) for t in ideal.twins] == [
        (1, ("a", "c"), Decimal("1.0")),
        (1, ("b", "d", "e"), Decimal("1.0")),
    ]
    # Three 0.6 shares sum to 1.8 but no two share a card: three GPUs, not ceil(1.8).
    three = ideal_twins([shared(n, "0.6") for n in "xyz"])
    assert gpus_lower_bound(three.twins) == {"l4": 3}
    # Models (and pools) are packed apart.
    apart = ideal_twins([shared("l", "0.5"), shared("t", "0.5", model="t4")])
    assert gpus_lower_bound(apart.twins) == {"l4": 1, "t4": 1}


def test_a_card_holds_at_most_hamis_split_count_of_hami_pods() -> None:
    hamis = [shared(f"h{i:02d}", "0.05", "a10g", scheduler="hami-scheduler") for i in range(12)]
    twins = ideal_twins(hamis).twins
    assert [len(t.serves) for t in twins] == [HAMI_SPLIT_COUNT, 2]
    assert {t.scheduler for t in twins} == {"hami-scheduler"}
    assert all(t.pod("n", "ns")["spec"]["schedulerName"] == "hami-scheduler" for t in twins)
    # Pods of other layers are not capped: twenty 0.05 shares fill one card.
    others = ideal_twins([shared(f"k{i:02d}", "0.05", "a10g") for i in range(20)]).twins
    assert [len(t.serves) for t in others] == [20] and others[0].scheduler is None


def test_a_twin_carries_the_cpu_and_memory_of_its_pods() -> None:
    twins = ideal_twins(
        [shared("a", "0.5", cpu="1", memory="2Gi"), shared("b", "0.25", cpu="500m", memory="1Gi")]
    ).twins
    (twin,) = twins
    manifest = twin.pod("native-0", "native-twins")
    requests = manifest["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": "1"}
    assert manifest["spec"]["tolerations"] == [GPU_TOLERATION]
    assert manifest["spec"]["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "l4"}
    assert manifest["metadata"]["annotations"]["gpu-intent.io/native-twin-of"] == "a,b"


def test_multi_gpu_pods_stay_as_they_are_and_memory_only_pods_take_a_whole_gpu() -> None:
    memory = Intent(Decimal("0.1"), gpu_memory_mib=20000)
    pods = [
        DemandPod("big", Intent(Decimal("2.5"), model="a100"), pod("big")),
        DemandPod(
            "hami-x2",
            Intent(Decimal(2), model="a10g", gpu_memory_mib=10000, model_memory_mib=22888),
            pod("hami-x2", scheduler="hami-scheduler"),
        ),
        DemandPod("mem", memory, pod("mem")),
        shared("q", "0.25"),
    ]
    ideal = ideal_twins(pods, default_nodepool="gpu-standard")
    assert [(t.serves, t.gpus, t.model, t.pool) for t in ideal.twins] == [
        (("big",), 3, "a100", None),
        (("hami-x2",), 2, "a10g", None),
        (("mem",), 1, None, "gpu-standard"),
        (("q",), 1, "l4", None),
    ]
    assert ideal.twins[1].scheduler == "hami-scheduler"
    affinity = ideal.twins[2].pod("m", "ns")["spec"]["affinity"]["nodeAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "Gt", "values": ["19999"]}
    ]
    assert gpus_lower_bound(ideal.twins) == {"a100": 3, "a10g": 2, "any": 1, "l4": 1}


def test_a_memory_share_packs_by_the_card_memory() -> None:
    # Three HAMi gpumem 6000 pods on one 22,888 MiB A10G (0.26 each), not three GPUs.
    pods = [hami(f"h{i}", "A10G", 6000) for i in range(3)]
    demand = [DemandPod(p["metadata"]["name"], infer_intent(p), p) for p in pods]
    assert all(d.intent is not None and d.intent.gpus == 1 for d in demand)
    assert gpus_lower_bound(ideal_twins(demand).twins) == {"a10g": 1}


def test_no_twin_is_larger_than_an_instance_of_its_pool_holds() -> None:
    small = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "small"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["g4dn.xlarge"],
                        }
                    ]
                }
            }
        },
    }
    assert [it.name for it in pool_instance_types("t4", "small", [small])] == ["g4dn.xlarge"]
    pods = [
        DemandPod(f"q{i}", Intent(Decimal("0.25"), model="t4", pool="small"), pod(f"q{i}", "1500m"))
        for i in range(4)
    ]
    twins = ideal_twins(pods, [small]).twins
    # g4dn.xlarge has 4 vCPUs (3.92 allocatable): two 1.5-core pods to a twin, not four.
    assert [len(t.serves) for t in twins] == [2, 2]
    allocatable = by_name("g4dn.xlarge").allocatable()
    assert all(fits(t.requests(), allocatable) for t in twins)
    # With the 48-vCPU g4dn.12xlarge in the pool (gpu-standard), one twin holds all four.
    free = [DemandPod(d.key, Intent(Decimal("0.25"), model="t4"), d.pod) for d in pods]
    assert [len(t.serves) for t in ideal_twins(free, example_pools()).twins] == [4]


def mix_160() -> list[dict[str, Any]]:
    """A 160-pod mix like issue 26's, within the example NodePools' limits: KAI
    fractions of L4, T4 and A100 by GFD label, HAMi A10G memory shares, KAI memory-only,
    tensor-fusion L40S by VRAM, native 1-, 2- and 4-GPU T4 pods."""
    pods: list[dict[str, Any]] = []

    def add(count: int, make: Any, *args: Any) -> None:
        for _ in range(count):
            pods.append(make(f"p-{len(pods):03d}", *args))

    add(28, kai_fraction, "l4", "0.25")
    add(8, kai_fraction, "l4", "0.5", "1")
    add(24, kai_fraction, "t4", "0.25")
    add(19, kai_fraction, "a100", "0.25")
    add(24, hami, "A10G", 8000)
    add(33, hami, "A10G", 6000)
    add(4, kai_memory, 20000)
    add(16, tensor_fusion, "l40s", "20Gi")
    add(2, whole_gpu, "t4")
    for gpus in (2, 4):
        pods.append(whole_gpu(f"p-t4x{gpus}", "t4", gpus))
    return pods


def test_the_need_of_a_160_pod_mix_is_not_undercounted() -> None:
    pods = mix_160()
    assert len(pods) == 160
    demand = [DemandPod(f"ml/{p['metadata']['name']}", infer_intent(p), p) for p in pods]
    need = native_need(demand, example_pools(), default_nodepool="gpu-standard")
    # 28 x 0.25 + 8 x 0.5 L4 (11 GPUs) was one 11-GPU twin no instance type holds.
    assert dict(need.unplaced) == {}
    assert dict(need.lower_bound) == {
        "a100": 5,
        "a10g": 19,
        "any": 4,
        "l4": 11,
        "l40s": 8,
        "t4": 14,
    }
    bought = Counter[str]()
    for claim in need.claims:
        assert claim.gpu_model is not None
        bought[claim.gpu_model] += claim.gpus
    for model, gpus in need.lower_bound.items():
        if model != "any":
            assert bought[model] >= gpus, (model, bought)
    # The fractions' packing is at least their summed shares, model by model.
    shares: dict[str, Decimal] = {}
    for d in demand:
        assert d.intent is not None
        if d.intent.gpus < 1 and d.intent.model:
            shares[d.intent.model] = shares.get(d.intent.model, Decimal(0)) + d.intent.gpus
    assert all(need.lower_bound[m] >= math.ceil(s) for m, s in shares.items())


def test_numbers_for_people() -> None:
    assert gpus_for_people(Decimal("0.4473960153792380286613072352")) == "0.45"
    assert [gpus_for_people(Decimal(v)) for v in ("0.5", "2", "0.25", "0.001")] == [
        "0.5", "2", "0.25", "<0.01",
    ]  # fmt: skip
    assert [usd_for_people(Decimal(v)) for v in ("0.526", "5", "0.80481", "135.8600")] == [
        "0.526", "5.00", "0.8048", "135.86",
    ]  # fmt: skip
