"""Pure scheduling predicates (sim.scheduling) and GPU device placement
(sim.gpushare)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from sim import gpushare
from sim.scheduling import (
    is_bound,
    is_terminal,
    is_terminating,
    matches_node_selector,
    node_is_ready,
    pod_requests,
    untolerated_taint,
)


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


def pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": list(containers), "initContainers": list(init), **spec},
    }


# -- pod_requests ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(pod(), {"pods": Decimal(1)}, id="no-containers-still-one-pod"),
        pytest.param(
            pod(container({"cpu": "100m", "memory": "1Gi"}), container({"cpu": "1"})),
            {"cpu": Decimal("1.1"), "memory": Decimal(1024**3), "pods": Decimal(1)},
            id="sum-over-containers-in-base-units",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "2", "cpu": "2"}, requests={"cpu": "500m"})),
            {"nvidia.com/gpu": Decimal(2), "cpu": Decimal("0.5"), "pods": Decimal(1)},
            id="limit-fills-an-absent-request-only",
        ),
        pytest.param(
            pod(container({"cpu": "1"}), init=(container({"cpu": "3", "memory": "1Mi"}),)),
            {"cpu": Decimal(3), "memory": Decimal(1024**2), "pods": Decimal(1)},
            id="init-container-max-wins",
        ),
        pytest.param(
            pod(container({"cpu": "2"}), init=(container({"cpu": "1"}),)),
            {"cpu": Decimal(2), "pods": Decimal(1)},
            id="containers-sum-wins-over-smaller-init",
        ),
        pytest.param(
            pod(
                container({"cpu": "1"}),
                init=(container({"cpu": "1"}, restartPolicy="Always"), container({"cpu": "2"})),
            ),
            {"cpu": Decimal(3), "pods": Decimal(1)},
            id="sidecar-adds-to-containers-and-to-later-inits",
        ),
        pytest.param(
            pod(container({"cpu": "1"}), overhead={"cpu": "250m"}),
            {"cpu": Decimal("1.25"), "pods": Decimal(1)},
            id="overhead-added",
        ),
    ],
)
def test_pod_requests(the_pod: dict[str, Any], expected: dict[str, Decimal]) -> None:
    assert pod_requests(the_pod) == expected


def test_pod_requests_rejects_an_unparsable_quantity() -> None:
    with pytest.raises(ValueError, match="cpu"):
        pod_requests(pod(container({"cpu": "lots"})))


# -- node selectors --------------------------------------------------------------------


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


LABELS = {"gpu": "l4", "zone": "a", "count": "4"}


@pytest.mark.parametrize(
    ("spec", "matches"),
    [
        ({}, True),
        ({"nodeSelector": {"gpu": "l4"}}, True),
        ({"nodeSelector": {"gpu": "l4", "zone": "b"}}, False),
        ({"affinity": affinity(expr("gpu", "In", "a100", "l4"))}, True),
        ({"affinity": affinity(expr("gpu", "In", "a100"))}, False),
        ({"affinity": affinity(expr("gpu", "NotIn", "a100"))}, True),
        ({"affinity": affinity(expr("missing", "NotIn", "x"))}, True),
        ({"affinity": affinity(expr("zone", "Exists"))}, True),
        ({"affinity": affinity(expr("zone", "DoesNotExist"))}, False),
        ({"affinity": affinity(expr("count", "Gt", "3"))}, True),
        ({"affinity": affinity(expr("count", "Gt", "4"))}, False),
        ({"affinity": affinity(expr("count", "Lt", "5"))}, True),
        ({"affinity": affinity(expr("gpu", "Gt", "1"))}, False),  # not an integer
        (
            {"affinity": affinity(expr("gpu", "In", "a100"), expr("zone", "In", "a"))},
            True,
        ),  # terms ORed
        (
            {
                "affinity": affinity(
                    {
                        "matchExpressions": [
                            {"key": "gpu", "operator": "In", "values": ["l4"]},
                            {"key": "zone", "operator": "In", "values": ["b"]},
                        ]
                    }
                )
            },
            False,  # expressions ANDed
        ),
        ({"affinity": affinity({})}, False),  # an empty term matches nothing
        ({"affinity": affinity()}, False),  # a required selector without terms matches nothing
        ({"nodeSelector": {"gpu": "l4"}, "affinity": affinity(expr("zone", "In", "b"))}, False),
    ],
)
def test_matches_node_selector(spec: dict[str, Any], matches: bool) -> None:
    assert matches_node_selector({"spec": spec}, LABELS) is matches


def test_match_fields_compare_the_node_name() -> None:
    the_pod = {
        "spec": {
            "affinity": affinity(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            )
        }
    }
    assert matches_node_selector(the_pod, {}, node_name="n1")
    assert not matches_node_selector(the_pod, {}, node_name="n2")
    assert not matches_node_selector(the_pod, {})  # no name to compare (e.g. an instance type)


# -- taints ----------------------------------------------------------------------------

GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "taints", "untolerated"),
    [
        ([], [], None),
        ([], [GPU_TAINT], GPU_TAINT),
        ([], [{"key": "soft", "effect": "PreferNoSchedule"}], None),
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], [GPU_TAINT], None),
        (
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}],
            [GPU_TAINT],
            GPU_TAINT,
        ),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "x"}], [GPU_TAINT], GPU_TAINT),
        ([{"key": "nvidia.com/gpu", "value": ""}], [GPU_TAINT], None),  # empty operator is Equal
        (
            [{"key": "k", "operator": "Equal", "value": "v"}],
            [{"key": "k", "value": "v", "effect": "NoExecute"}],
            None,
        ),
        (
            [{"operator": "Exists"}],
            [GPU_TAINT, {"key": "other", "effect": "NoExecute"}],
            None,
        ),  # tolerate all
        (
            [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            [GPU_TAINT, {"key": "b", "effect": "NoExecute"}],
            {"key": "b", "effect": "NoExecute"},
        ),
    ],
)
def test_untolerated_taint(
    tolerations: list[dict[str, Any]],
    taints: list[dict[str, Any]],
    untolerated: dict[str, Any] | None,
) -> None:
    assert untolerated_taint(tolerations, taints) == untolerated


def test_untolerated_taint_effects_are_selectable() -> None:
    taints = [{"key": "soft", "effect": "PreferNoSchedule"}]
    assert untolerated_taint([], taints, effects=("PreferNoSchedule",)) == taints[0]


# -- pod and node state ----------------------------------------------------------------


def test_pod_and_node_state_predicates() -> None:
    assert is_bound({"spec": {"nodeName": "n"}}) and not is_bound({"spec": {}})
    assert is_terminating({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
    assert not is_terminating({"metadata": {}})
    assert is_terminal({"status": {"phase": "Failed"}}) and is_terminal(
        {"status": {"phase": "Succeeded"}}
    )
    assert not is_terminal({"status": {"phase": "Running"}})
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_is_ready(ready)
    assert not node_is_ready({**ready, "spec": {"unschedulable": True}})
    assert not node_is_ready({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not node_is_ready({})


# -- gpushare --------------------------------------------------------------------------


def gpu_node(count: int = 1, memory: int = 23034, product: str = "NVIDIA-L4") -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.product": product,
    }
    return {"metadata": {"name": "n", "labels": labels}}


def kai_pod(fraction: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"gpu-fraction": fraction}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [container()]},
    }


def hami_pod(limits: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": annotations},
        "spec": {"schedulerName": "hami-scheduler", "containers": [container(limits=limits)]},
    }


def bound(the_pod: dict[str, Any], assignment: gpushare.Assignment) -> dict[str, Any]:
    meta = dict(the_pod["metadata"])
    meta["annotations"] = {
        **meta.get("annotations", {}),
        gpushare.DEVICES_ANNOTATION: gpushare.format_assignment(assignment),
    }
    return {**the_pod, "metadata": meta}


def test_two_kai_halves_share_one_l4_and_a_third_does_not_fit() -> None:
    devices = gpushare.node_devices(gpu_node())
    half = gpushare.demand(kai_pod("0.5"))
    assert half is not None
    on_node: list[dict[str, Any]] = []
    for _ in range(2):
        placed = gpushare.place(half, devices, gpushare.usage(on_node, devices))
        assert placed == ((0, 0.5),)
        assert not isinstance(placed, gpushare.NoFit)
        on_node.append(bound(kai_pod("0.5"), placed))
    assert gpushare.usage(on_node, devices) == [1.0]
    assert gpushare.place(half, devices, gpushare.usage(on_node, devices)) == gpushare.NoFit(
        "1/1 CardInsufficientMemory"
    )


def test_hami_two_vgpus_need_two_distinct_devices() -> None:
    two = gpushare.demand(hami_pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}))
    assert two is not None
    assert gpushare.place(two, gpushare.node_devices(gpu_node(1)), [0.0]) == gpushare.NoFit(
        "NodeInsufficientDevice"
    )
    placed = gpushare.place(two, gpushare.node_devices(gpu_node(2, memory=16000)), [0.0, 0.0])
    assert placed == ((0, 0.25), (1, 0.25))


def test_hami_share_is_the_larger_of_memory_and_cores_and_defaults_to_the_whole_memory() -> None:
    devices = gpushare.node_devices(gpu_node(memory=10000))

    def share(limits: dict[str, Any]) -> float:
        wanted = gpushare.demand(hami_pod(limits))
        assert wanted is not None
        return wanted.requests[0].share_on(devices[0])

    assert share({"nvidia.com/gpumem": "2500", "nvidia.com/gpucores": "40"}) == 0.4
    assert share({"nvidia.com/gpumem-percentage": "30"}) == 0.3
    assert share({"nvidia.com/gpucores": "20"}) == 1.0  # no memory asked: HAMi gives it all
    assert share({"nvidia.com/gpu": "1"}) == 1.0


@pytest.mark.parametrize(
    ("annotations", "fits"),
    [
        ({"nvidia.com/use-gputype": "A100,H100"}, False),
        ({"nvidia.com/use-gputype": "a100,l4"}, True),
        ({"nvidia.com/nouse-gputype": "L4"}, False),
        ({"nvidia.com/nouse-gputype": "T4"}, True),
    ],
)
def test_hami_gputype_filters_match_substrings_case_insensitively(
    annotations: dict[str, str], fits: bool
) -> None:
    wanted = gpushare.demand(hami_pod({"nvidia.com/gpumem": "1000"}, **annotations))
    assert wanted is not None
    placed = gpushare.place(wanted, gpushare.node_devices(gpu_node()), [0.0])
    assert (not isinstance(placed, gpushare.NoFit)) is fits
    if not fits:
        assert placed == gpushare.NoFit("1/1 CardTypeMismatch")


def test_a_whole_gpu_pod_occupies_its_device_fully() -> None:
    devices = gpushare.node_devices(gpu_node(2))
    whole = {"metadata": {}, "spec": {"containers": [container(limits={"nvidia.com/gpu": "1"})]}}
    wanted = gpushare.demand(whole)
    assert wanted is not None and wanted.layer == "whole"
    assert gpushare.place(wanted, devices, [0.0, 0.0]) == ((0, 1.0),)
    # A bound pod without the annotation (created with spec.nodeName) is placed first-fit.
    assert gpushare.usage([whole], devices) == [1.0, 0.0]
    half = gpushare.demand(kai_pod("0.5"))
    assert half is not None
    assert gpushare.place(half, devices, [1.0, 0.0]) == ((1, 0.5),)


def test_default_scheduler_ignores_sharing_annotations_and_resources() -> None:
    the_pod = hami_pod({"nvidia.com/gpumem": "1000"})
    the_pod["spec"]["schedulerName"] = "default-scheduler"
    assert gpushare.demand(the_pod) is None
    kai = kai_pod("0.5")
    kai["spec"]["schedulerName"] = "default-scheduler"
    assert gpushare.demand(kai) is None


def test_tensor_fusion_demand_uses_vram_compute_and_model() -> None:
    the_pod = {
        "metadata": {
            "labels": {"tensor-fusion.ai/enabled": "true"},
            "annotations": {
                "tensor-fusion.ai/vram-request": "8Gi",
                "tensor-fusion.ai/compute-percent-request": "25",
                "tensor-fusion.ai/gpu-model": "A100",
            },
        },
        "spec": {"containers": [container()]},
    }
    wanted = gpushare.demand(the_pod)
    assert wanted is not None and wanted.layer == "tensor-fusion"
    a100 = gpushare.node_devices(gpu_node(memory=81920, product="NVIDIA-A100-SXM4-80GB"))
    assert gpushare.place(wanted, a100, [0.0]) == ((0, 0.25),)  # max(8192/81920, 0.25)
    assert gpushare.place(wanted, gpushare.node_devices(gpu_node()), [0.0]) == gpushare.NoFit(
        "1/1 CardTypeMismatch"
    )


def test_kai_gpu_memory_is_a_share_of_the_device_memory() -> None:
    the_pod = {
        "metadata": {"annotations": {"gpu-memory": "11517"}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [container()]},
    }
    wanted = gpushare.demand(the_pod)
    assert wanted is not None
    assert gpushare.place(wanted, gpushare.node_devices(gpu_node()), [0.0]) == ((0, 0.5),)


def test_node_devices_fall_back_to_allocatable() -> None:
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    assert gpushare.node_devices(node) == [gpushare.Device(0), gpushare.Device(1)]
    assert gpushare.node_devices({"metadata": {"name": "cpu"}}) == []


def test_assignment_round_trip_merges_repeated_devices() -> None:
    text = gpushare.format_assignment(((0, 0.25), (1, 0.5), (0, 0.25)))
    assert text == "0:0.5,1:0.5"
    assert gpushare.parse_assignment(text) == ((0, 0.5), (1, 0.5))
    assert gpushare.parse_assignment("0:0.5,bad,x:1") == ((0, 0.5),)


def test_terminal_pods_hold_no_device_share() -> None:
    devices = gpushare.node_devices(gpu_node())
    done = bound(kai_pod("0.5"), ((0, 0.5),))
    done["status"] = {"phase": "Succeeded"}
    assert gpushare.usage([done], devices) == [0.0]


def test_malformed_kai_annotation_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="gpu-fraction"):
        gpushare.demand(kai_pod("half"))
