"""Where each GPU-sharing layer's pods can run (controller.placement): the configuration
and its flag, pool resolution, the triggers, the free GPUs of new nodes, the metric."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from controller_fixtures import gpu_pod, nodeclaim, nodepool
from prometheus_client import CollectorRegistry

from controller import placement
from controller.capacity import Room, place_on_free
from controller.decisions import PlanConfig, Snapshot
from controller.metrics import ControllerMetrics
from controller.model import (
    GroupKey,
    PendingPod,
    Requirement,
    parse_pending_pod,
    parse_trigger,
)
from controller.nodes import parse_nodeclaim, parse_nodepool
from controller.placement import Placements, parse_placement, parse_requirement, placements_from
from controller.plan import plan
from controller.pools import resolve_pool, unplaced_layer
from controller.triggers import TriggerSettings
from gpu_intent import cli
from intent.contract import Phase

NOW = datetime(2026, 11, 21, 12, 0, 5, tzinfo=UTC)
CONFIG = PlanConfig(trigger=TriggerSettings(namespace="gpu-intent-system"))
HAMI_SOURCE = ("hami:nvidia.com/gpumem",)
DRA_LABEL = "nvidia.com/gpu.deploy.device-plugin"


def labelled(pool: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """``pool`` with template labels ``labels``."""
    template = {**pool["spec"]["template"], "metadata": {"labels": labels}}
    return {**pool, "spec": {**pool["spec"], "template": template}}


STANDARD = nodepool("gpu-standard", models=["t4", "a10g", "l4"], weight=10)
LARGE = nodepool("gpu-large", models=["l40s", "a100", "h100"])
HAMI = labelled(nodepool("gpu-hami", models=["a10g"], weight=50), {"gpu": "on"})
DRA = labelled(nodepool("gpu-dra", models=["l4", "a100"]), {DRA_LABEL: "false"})


def snapshot(pods: list[dict[str, Any]], pools: list[dict[str, Any]], **kw: Any) -> Snapshot:
    parsed = {p.name: p for p in map(parse_nodepool, pools)}
    keys = set().union(*(p.label_keys() for p in parsed.values()))
    pending = [p for p in (parse_pending_pod(o, keys) for o in pods) if p is not None]
    return Snapshot(pending, [], {}, parsed, NOW, **kw)


def only(snap: Snapshot) -> PendingPod:
    [pod] = snap.pods
    assert isinstance(pod, PendingPod)
    return pod


def hami_memory_pod(name: str = "vgpu") -> dict[str, Any]:
    """A HAMi pod asking only ``nvidia.com/gpumem`` (8000 MiB), no model."""
    pod = gpu_pod(name, "1", source=HAMI_SOURCE)
    pod["metadata"]["annotations"]["gpu-intent.io/gpu-memory"] = "8000"
    return pod


# -- configuration -----------------------------------------------------------------------


def test_the_defaults_are_the_layers_own() -> None:
    defaults = Placements()
    assert defaults.of("hami") == (Requirement("gpu", "In", ("on",)),)
    assert defaults.of("kai") == (Requirement("gpu", "NotIn", ("on",)),)
    assert defaults.of("tensor-fusion") == (Requirement("nvidia.com/gpu.present", "In", ("true",)),)
    assert defaults.of("dra") == (Requirement(DRA_LABEL, "In", ("false",)),)
    assert placements_from(defaults.flags()) == defaults == CONFIG.placement


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu=on", Requirement("gpu", "In", ("on",))),
        ("gpu!=on", Requirement("gpu", "NotIn", ("on",))),
        ("accelerator In (hami|vgpu)", Requirement("accelerator", "In", ("hami", "vgpu"))),
        ("hami.io/node Exists", Requirement("hami.io/node", "Exists")),
        ("gpu DoesNotExist", Requirement("gpu", "DoesNotExist")),
    ],
)
def test_requirements_read_as_people_write_them(text: str, expected: Requirement) -> None:
    assert parse_requirement(text) == expected
    assert parse_requirement(placement.show(expected)) == expected


@pytest.mark.parametrize("text", ["gpu", "=on", "gpu Exists (x)", "gpu In", "vgpu=gpu=on"])
def test_malformed_placements_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_placement(text if "=" in text and text.split("=")[0] == "vgpu" else f"hami={text}")


def test_the_flag_replaces_one_layer_and_keeps_the_others() -> None:
    args = cli.build_parser().parse_args(
        ["controller", "--placement", "hami=accelerator=hami,zone!=b", "--placement", "kai="]
    )
    got = cli.plan_config(args).placement
    assert got.hami == (
        Requirement("accelerator", "In", ("hami",)),
        Requirement("zone", "NotIn", ("b",)),
    )
    assert got.kai == ()
    assert (got.tensor_fusion, got.dra) == (Placements().tensor_fusion, Placements().dra)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["controller", "--placement", "nvlink=gpu=on"])


# -- pool resolution ---------------------------------------------------------------------


def test_a_hami_pod_no_pool_can_place_is_unresolvable_and_buys_nothing() -> None:
    """Only gpumem, no model, pools without gpu=on: no trigger, the message names the
    label, why, and the flag; the gauge counts it under hami."""
    snap = snapshot([hami_memory_pod()], [STANDARD, LARGE])
    result = plan(snap, CONFIG)
    assert result.creates == ()
    [told] = result.statuses
    assert told.status.phase == Phase.UNRESOLVABLE
    message = told.status.message
    assert "gpu=on" in message and "HAMi" in message
    assert "devicePlugin.nvidiaNodeSelector" in message
    assert "--placement hami=" in message and "controller.placement.hami" in message
    assert told.event is not None and told.event.type == "Warning"
    assert unplaced_layer(only(snap), snap.nodepools, CONFIG) == "hami"
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    metrics.set_unplaceable({"hami": 1})
    sample = registry.get_sample_value
    assert sample("gpu_intent_unplaceable_pods", {"layer": "hami"}) == 1
    assert sample("gpu_intent_unplaceable_pods", {"layer": "kai"}) == 0


def test_a_hami_pod_resolves_to_the_pool_with_gpu_on_and_its_trigger_selects_it() -> None:
    snap = snapshot([hami_memory_pod()], [STANDARD, LARGE, HAMI])
    [create] = plan(snap, CONFIG).creates
    assert create.group.pool == "gpu-hami"
    assert create.group.placement == CONFIG.placement.hami
    assert create.body["spec"]["nodeSelector"]["gpu"] == "on"  # type: ignore[index]
    assert unplaced_layer(only(snap), snap.nodepools, CONFIG) == ""
    # The trigger reads back to its group: the next pass makes no other.
    body = create.body
    body["metadata"].update(uid="u", creationTimestamp="2026-11-21T12:00:05Z")  # type: ignore[index]
    trigger = parse_trigger(body)
    assert trigger is not None and trigger.group == create.group


def test_a_kai_pod_never_resolves_to_the_hami_pool() -> None:
    """gpu-hami admits the A10G at the highest weight; a KAI pod goes elsewhere, and its
    trigger excludes gpu=on nodes."""
    pod = gpu_pod("kai", "0.5", model="a10g")
    snap = snapshot([pod], [STANDARD, HAMI])
    pool, _ = resolve_pool(only(snap), snap.nodepools, CONFIG)
    assert pool is not None and pool.name == "gpu-standard"
    [create] = plan(snap, CONFIG).creates
    terms = create.body["spec"]["affinity"]["nodeAffinity"][  # type: ignore[index]
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert {"key": "gpu", "operator": "NotIn", "values": ["on"]} in terms[0]["matchExpressions"]
    alone = snapshot([pod], [HAMI])
    result = plan(alone, CONFIG)
    assert result.creates == ()
    assert "gpu!=on" in result.statuses[0].status.message


def test_a_dra_pods_trigger_requires_the_dra_label() -> None:
    pod = gpu_pod("claim", "1", model="l4", source=("dra:gpu",))
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    snap = snapshot([pod], [STANDARD, DRA])
    [create] = plan(snap, CONFIG).creates
    assert create.group.pool == "gpu-dra"
    assert create.body["spec"]["nodeSelector"][DRA_LABEL] == "false"  # type: ignore[index]
    none = plan(snapshot([pod], [STANDARD]), CONFIG)
    assert none.creates == ()
    assert f"{DRA_LABEL}=false" in none.statuses[0].status.message


def test_a_runtime_label_is_met_by_any_gpu_pool_and_left_out_of_the_trigger() -> None:
    """tensor-fusion's nvidia.com/gpu.present: the GPU Operator puts it on every GPU node
    after it joins; Karpenter would refuse a trigger selecting a key no pool defines."""
    pod = gpu_pod(
        "tf", "0.5", model="l40s", source=("tensor-fusion:tensor-fusion.ai/tflops-request",)
    )
    [create] = plan(snapshot([pod], [STANDARD, LARGE]), CONFIG).creates
    assert create.group.pool == "gpu-large"
    body = create.body
    assert "nvidia.com/gpu.present" not in body["spec"]["nodeSelector"]  # type: ignore[index]
    assert "nvidia.com/gpu.present" not in str(body["spec"]["affinity"])  # type: ignore[index]


def test_an_80gb_a100_pod_asks_for_80gb_of_gpu_memory() -> None:
    pod = gpu_pod("big", "1", model="a100")
    pod["metadata"]["annotations"]["gpu-intent.io/model-memory"] = "81920"
    [create] = plan(snapshot([pod], [LARGE]), CONFIG).creates
    assert create.group.min_memory_mib == 81920
    terms = create.body["spec"]["affinity"]["nodeAffinity"][  # type: ignore[index]
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    wanted = {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "Gt", "values": ["81919"]}
    assert wanted in terms[0]["matchExpressions"]


# -- free GPUs of new nodes --------------------------------------------------------------


def test_a_hami_pod_is_not_told_node_ready_on_a_node_without_gpu_on() -> None:
    def ready(name: str, labels: dict[str, str]) -> Any:
        obj = nodeclaim(name, "gpu-any", gpus=2, ready=True, node=f"node-{name}", marked=["gi"])
        obj["metadata"]["labels"].update(labels)
        obj["status"]["conditions"][1]["lastTransitionTime"] = (
            NOW - timedelta(seconds=5)
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        return parse_nodeclaim(obj)

    plain, hami = ready("plain", {}), ready("hami", {"gpu": "on"})
    key = GroupKey("gpu-any", None, placement=CONFIG.placement.hami)
    pod = parse_pending_pod(gpu_pod("vgpu", "0.5", source=HAMI_SOURCE), {"gpu"})
    assert isinstance(pod, PendingPod)
    free = {"plain": Room.of(Decimal(2), Decimal(0))}
    left, placed = place_on_free([pod], key, free, {"plain": plain}, CONFIG.trigger.profile)
    assert (left, placed) == ([pod], [])
    free = {"hami": Room.of(Decimal(2), Decimal(0)), "plain": Room.of(Decimal(2), Decimal(0))}
    claims = {"plain": plain, "hami": hami}
    _, placed = place_on_free([pod], key, free, claims, CONFIG.trigger.profile)
    assert [c.name for _, c in placed] == ["hami"]


def inferred_pod(name: str, resources: dict[str, str]) -> dict[str, Any]:
    """A pending Unschedulable pod asking for ``resources`` (limits), annotated with the
    intent the webhook's inference writes for it."""
    from intent.inference import infer_intent

    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": resources}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }
    intent = infer_intent(pod)
    assert intent is not None
    template = gpu_pod(name, "1")
    template["metadata"]["annotations"] = intent.to_annotations()
    template["spec"]["containers"] = pod["spec"]["containers"]
    return template


@pytest.mark.parametrize(
    ("resources", "layer", "label"),
    [
        ({"nvidia.com/mig-1g.5gb": "1"}, "mig", "nvidia.com/mig.config"),
        ({"aliyun.com/gpu-mem": "8"}, "aliyun", "gpushare=true"),
        ({"tencent.com/vcuda-core": "50"}, "vcuda", "nvidia-device-enable=enable"),
    ],
)
def test_a_layer_the_inference_reads_buys_nothing_where_its_device_plugin_cannot_run(
    resources: dict[str, str], layer: str, label: str
) -> None:
    """A MIG slice, a gpushare or a vcuda pod now gets an intent; on pools whose nodes
    cannot run its device plugin it is Unresolvable, naming the label, and nothing is
    bought (a whole GPU on a plain node would serve it nothing)."""
    pools = [STANDARD, LARGE, HAMI, DRA]
    snap = snapshot([inferred_pod("p", resources)], pools)
    result = plan(snap, replace(CONFIG, default_nodepool="gpu-standard"))
    assert result.creates == ()
    [told] = result.statuses
    assert told.status.phase == Phase.UNRESOLVABLE
    assert label in told.status.message and f"--placement {layer}=" in told.status.message


def test_a_gpushare_pod_gets_a_trigger_on_the_pool_labelled_for_it() -> None:
    gpushare = labelled(nodepool("gpu-share", models=["t4", "v100"]), {"gpushare": "true"})
    snap = snapshot([inferred_pod("p", {"aliyun.com/gpu-mem": "8"})], [STANDARD, gpushare])
    [create] = plan(snap, replace(CONFIG, default_nodepool="gpu-share")).creates
    assert create.group.pool == "gpu-share"
    assert create.body["spec"]["nodeSelector"]["gpushare"] == "true"  # type: ignore[index]
