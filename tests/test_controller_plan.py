"""The pure planner: which pods get triggers, how GPUs are summed, linking and cleanup."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from controller_fixtures import T0, gpu_pod, nodeclaim, nodepool

from controller.capacity import nodes_to_label
from controller.decisions import LabelNode, Plan, PlanConfig, Snapshot
from controller.model import (
    NATIVE,
    NODE_READY,
    NON_BINDING_SCHEDULER,
    PROVISIONING,
    SCHEDULED,
    TRIGGERED,
    UNRESOLVABLE,
    WAITING,
    GroupKey,
    PendingPod,
    PodRef,
    ScaleUpStatus,
    ScheduledPod,
    parse_pending_pod,
    parse_trigger,
)
from controller.nodes import (
    NodeInfo,
    Nomination,
    node_label_value,
    parse_node,
    parse_nodeclaim,
    parse_nodepool,
    parse_nomination,
    slim_node,
)
from controller.packing import Bin, best_fit_decreasing, largest_need_first, pack
from controller.plan import link_claims, native_reserved, plan
from controller.reasons import ComingUp, HeldBack, Settling
from controller.triggers import TriggerSettings, condition_patch, trigger_name, trigger_pod

NOW = datetime(2026, 11, 21, 12, 0, 5, tzinfo=UTC)
LATER = "2026-11-21T12:00:02Z"
#: Longer before ``NOW`` than a cover (60 s): a NodeClaim Ready since then is not `fresh`.
LONG_AGO = "2026-11-21T11:58:00Z"
CONFIG = PlanConfig(
    trigger=TriggerSettings(namespace="gpu-intent-system"), default_nodepool="gpu-standard"
)
POOLS = [
    nodepool("gpu-standard", models=["t4", "a10g", "l4"], weight=10),
    nodepool("gpu-large", models=["l40s", "a100", "h100"]),
]
#: The placement of KAI pods (`gpu_pod`'s default source), in their groups.
KAI = CONFIG.placement.kai
#: POOLS with gpu-standard's nodes running HAMi's device plugin (``gpu: "on"``).
HAMI_POOLS = [
    {**POOLS[0], "spec": {**POOLS[0]["spec"], "template": {
        **POOLS[0]["spec"]["template"], "metadata": {"labels": {"gpu": "on"}}}}},
    POOLS[1],
]  # fmt: skip


def snapshot(
    pods: list[dict[str, Any]],
    *,
    pools: list[dict[str, Any]] | None = None,
    claims: list[dict[str, Any]] | None = None,
    triggers: list[dict[str, Any]] | None = None,
    now: datetime = NOW,
) -> Snapshot:
    parsed_pools = {p.name: p for p in map(parse_nodepool, POOLS if pools is None else pools)}
    keys: set[str] = set()
    for pool in parsed_pools.values():
        keys |= pool.label_keys()
    parsed_pods = [p for p in (parse_pending_pod(o, keys) for o in pods) if p is not None]
    parsed_triggers = [t for t in map(parse_trigger, triggers or []) if t is not None]
    parsed_claims = {c.name: c for c in map(parse_nodeclaim, claims or [])}
    return Snapshot(parsed_pods, parsed_triggers, parsed_claims, parsed_pools, now)


def live_trigger(
    plan_: Plan,
    index: int = 0,
    *,
    name: str = "gi-x",
    created: str = T0,
    node_claim: str | None = None,
) -> dict[str, Any]:
    """Turn a planned trigger into the object the API server would have stored."""
    body = json.loads(json.dumps(plan_.creates[index].body))
    body["metadata"].update(name=name, uid=f"uid-{name}", creationTimestamp=created)
    if node_claim:
        body["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = node_claim
    return body


def native_pod(name: str, model: str) -> dict[str, Any]:
    """A pending pod asking one whole ``nvidia.com/gpu`` of ``model`` by the AWS GPU name
    label: Karpenter provisions for it by itself."""
    return gpu_pod(
        name,
        "1",
        model=model,
        source=("resources:nvidia.com/gpu", "nodeSelector:karpenter.k8s.aws/instance-gpu-name"),
        resources={"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
        node_selector={"karpenter.k8s.aws/instance-gpu-name": model},
    )


def test_two_half_gpu_pods_of_one_model_share_one_whole_gpu_trigger() -> None:
    pods = [gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]
    result = plan(snapshot(pods), CONFIG)
    assert len(result.creates) == 1
    create = result.creates[0]
    assert create.gpus == 1
    assert create.group == GroupKey("gpu-standard", "l4", placement=KAI)
    assert {str(r) for r in create.serves} == {"ml/a", "ml/b"}
    requests = create.body["spec"]["containers"][0]["resources"]["requests"]  # type: ignore[index]
    assert requests["nvidia.com/gpu"] == "1"
    assert result.demand[GroupKey("gpu-standard", "l4", placement=KAI)] == Decimal(1)


def test_fractions_are_packed_best_fit_decreasing_into_whole_gpus() -> None:
    pods = snapshot(
        [
            gpu_pod("a", "0.5", model="l4"),
            gpu_pod("b", "0.3", model="l4"),
            gpu_pod("c", "0.6", model="l4"),
            gpu_pod("d", "1.5", model="l4"),
        ]
    ).pods
    bins = pack(p for p in pods if isinstance(p, PendingPod))
    sizes = sorted((b.size, sorted(p.ref.name for p in b.pods)) for b in bins)
    # d (1.5) takes a 2-GPU bin and leaves 0.5, which a (0.5) fills exactly; c (0.6)
    # opens a new bin, b (0.3) fits beside it.
    assert sizes == [(1, ["b", "c"]), (2, ["a", "d"])]


def test_memory_pods_of_a_named_model_share_its_cards_by_memory() -> None:
    """HAMi ``gpumem`` pods naming the A10G (22,888 MiB): two 8,000 and one 6,000 MiB
    pod fill one card (22,000 MiB), as HAMi's Fit places them; 6 pods are 2 GPUs, not the
    6 whole GPUs they were bought as. Without the card's memory each is a whole GPU."""
    memory = {"gpu-intent.io/model-memory": "22888"}
    source = ("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype")

    def hami(name: str, mib: int, known: bool = True) -> dict[str, Any]:
        extra = {"gpu-intent.io/gpu-memory": str(mib), **(memory if known else {})}
        return gpu_pod(name, "1", model="a10g", source=source, extra_annotations=extra)

    pods = [hami(f"p{i}", 8000 if i < 3 else 6000) for i in range(6)]
    parsed = [p for p in snapshot(pods).pods if isinstance(p, PendingPod)]
    assert sorted(sum(p.intent.gpu_memory_mib or 0 for p in b.pods) for b in pack(parsed)) == [
        20000,
        22000,
    ]
    result = plan(snapshot(pods, pools=HAMI_POOLS), CONFIG)
    assert sum(c.gpus for c in result.creates) == 2
    unknown = [hami(f"p{i}", 8000, known=False) for i in range(3)]
    assert sum(c.gpus for c in plan(snapshot(unknown, pools=HAMI_POOLS), CONFIG).creates) == 3


def test_pods_share_the_cards_of_a_pod_of_several_vgpus() -> None:
    """A HAMi pod of two 10,000 MiB vGPUs needs two whole A10Gs (22,888 MiB) bought on
    one node, but HAMi's Fit places other pods on the 12,888 MiB each card keeps: one
    8,000 MiB pod per card, never two. Staying with their trigger, the pods keep that
    packing."""
    memory = {"gpu-intent.io/model-memory": "22888"}
    source = ("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype")

    def hami(name: str, gpus: str, mib: int) -> dict[str, Any]:
        extra = {"gpu-intent.io/gpu-memory": str(mib), **memory}
        return gpu_pod(name, gpus, model="a10g", source=source, extra_annotations=extra)

    pods = [hami("x2", "2", 10000), *(hami(f"p{i}", "1", 8000) for i in range(3))]
    parsed = [p for p in snapshot(pods).pods if isinstance(p, PendingPod)]
    bins = sorted(pack(parsed), key=lambda b: -b.size)
    assert [(b.size, sorted(p.ref.name for p in b.pods)) for b in bins] == [
        (2, ["p0", "p1", "x2"]),
        (1, ["p2"]),
    ]
    assert round(bins[0].used, 6) == round(Decimal(36000) / 22888, 6)
    assert [round(c, 3) for c in bins[0].cards] == [round(Decimal(4888) / 22888, 3)] * 2
    # Re-opened for pods staying with its trigger, the bin keeps its cards apart.
    again = pack([parsed[-1]], into=[bins[0]])
    assert [b.size for b in again] == [1]  # 4,888 MiB left on each card: no room for 8,000
    result = plan(snapshot(pods, pools=HAMI_POOLS), CONFIG)
    assert sum(c.gpus for c in result.creates) == 3


def test_memory_shares_that_interlock_fill_the_fewest_cards() -> None:
    """Two HAMi pods of two 10,000 MiB vGPUs and 16 + 16 pods of 8,000 and 6,000 MiB fill
    12 A10Gs (22,888 MiB): 10,000 + 6,000 + 6,000 and 8,000 + 8,000 + 6,000 to a card.
    Best fit alone put an 8,000 beside each 10,000 and bought 14; in a 160-pod demo
    Karpenter bought four 4-GPU nodes for those triggers and HAMi filled three."""
    memory = {"gpu-intent.io/model-memory": "22888"}
    source = ("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype")

    def hami(name: str, gpus: str, mib: int) -> dict[str, Any]:
        extra = {"gpu-intent.io/gpu-memory": str(mib), **memory}
        return gpu_pod(name, gpus, model="a10g", source=source, extra_annotations=extra)

    pods = [
        *(hami(f"x{i}", "2", 10000) for i in range(2)),
        *(hami(f"m{i:02d}", "1", 8000) for i in range(16)),
        *(hami(f"s{i:02d}", "1", 6000) for i in range(16)),
    ]
    parsed = [p for p in snapshot(pods).pods if isinstance(p, PendingPod)]
    items = largest_need_first(parsed)
    assert sum(b.size for b in best_fit_decreasing(items, [])) == 14
    bins = pack(parsed)
    assert sum(b.size for b in bins) == 12
    for b in bins:  # every card holds what HAMi's Fit would put on it
        mib = Counter(p.intent.gpu_memory_mib for p in b.pods)
        if b.cards:
            assert mib == {10000: 1, 6000: 4} and all(c >= 0 for c in b.cards)
        else:
            assert mib == {8000: 2, 6000: 1}
    assert sorted(p.ref.name for b in bins for p in b.pods) == sorted(p.ref.name for p in parsed)
    result = plan(snapshot(pods, pools=HAMI_POOLS), CONFIG)
    assert sum(c.gpus for c in result.creates) == 12


def test_the_fuller_packing_is_applied_to_the_bins_pods_stay_in() -> None:
    """Open bins (pods staying with their trigger) are filled by the packing chosen, in
    place. A staying 0.4 takes 0.4 + 0.2 and 0.5 + 0.45 share one new GPU; best fit
    gives the staying pod the 0.5 and opens two."""
    shares = {"stay": "0.4", "a": "0.5", "b": "0.45", "c": "0.4", "d": "0.2"}
    pods = [p for p in snapshot([gpu_pod(n, v, model="l4") for n, v in shares.items()]).pods
            if isinstance(p, PendingPod)]  # fmt: skip
    best_fit = best_fit_decreasing(
        largest_need_first(pods[1:]), [Bin(1, Decimal("0.4"), [pods[0]])]
    )
    assert [sorted(p.ref.name for p in b.pods) for b in best_fit] == [
        ["a", "stay"],
        ["b", "c"],
        ["d"],
    ]
    staying = Bin(1, Decimal("0.4"), [pods[0]])
    bins = pack(pods[1:], into=[staying])
    assert sorted(p.ref.name for p in staying.pods) == ["c", "d", "stay"]
    assert staying.used == 1
    assert [sorted(p.ref.name for p in b.pods) for b in bins] == [["a", "b"]]


def test_packing_fills_the_tightest_bin_so_fractions_need_the_fewest_gpus() -> None:
    shares = {"a": "0.6", "b": "0.5", "c": "0.4", "d": "0.3", "e": "0.2"}
    pods = snapshot([gpu_pod(name, share, model="l4") for name, share in shares.items()]).pods
    bins = pack(p for p in pods if isinstance(p, PendingPod))
    assert sorted(sorted(p.ref.name for p in b.pods) for b in bins) == [["a", "c"], ["b", "d", "e"]]
    assert [
        c.gpus
        for c in plan(
            snapshot([gpu_pod(n, v, model="l4") for n, v in shares.items()]), CONFIG
        ).creates
    ] == [1, 1]


def test_different_models_get_separate_triggers_on_the_pool_that_offers_them() -> None:
    pods = [gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "1", model="a100")]
    result = plan(snapshot(pods), CONFIG)
    groups = sorted((c.group for c in result.creates), key=GroupKey.sort_key)
    assert groups == [
        GroupKey("gpu-large", "a100", placement=KAI),
        GroupKey("gpu-standard", "l4", placement=KAI),
    ]


def test_whole_gpu_pod_karpenter_can_provision_gets_no_trigger_and_a_native_status() -> None:
    result = plan(snapshot([native_pod("whole", "t4")]), CONFIG)
    assert result.creates == ()
    assert [s.status.phase for s in result.statuses] == [NATIVE]
    assert (
        result.statuses[0].event is not None
        and result.statuses[0].event.reason == "NativeProvisioning"
    )


def test_whole_gpu_pod_selecting_a_label_no_nodepool_defines_is_not_native() -> None:
    pod = gpu_pod(
        "gfd",
        "1",
        model="l4",
        source=("resources:nvidia.com/gpu", "nodeSelector:nvidia.com/gpu.product"),
        resources={"requests": {"nvidia.com/gpu": "1"}},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
    )
    result = plan(snapshot([pod]), CONFIG)
    assert len(result.creates) == 1
    # The GFD label is not copied: Karpenter could not satisfy it either.
    selector = result.creates[0].body["spec"]["nodeSelector"]  # type: ignore[index]
    assert "nvidia.com/gpu.product" not in selector


def test_hami_pod_with_gpumem_is_not_native_even_with_whole_gpu_count() -> None:
    pod = gpu_pod(
        "hami",
        "1",
        model="a10g",
        source=("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype"),
        resources={"requests": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}},
    )
    result = plan(snapshot([pod], pools=HAMI_POOLS), CONFIG)
    hami = CONFIG.placement.hami
    assert [c.group for c in result.creates] == [GroupKey("gpu-standard", "a10g", placement=hami)]


def test_intent_without_model_goes_to_the_default_pool_and_without_default_is_unresolvable() -> (
    None
):
    pod = gpu_pod("any", "0.5")
    assert [c.group.pool for c in plan(snapshot([pod]), CONFIG).creates] == ["gpu-standard"]
    bare = PlanConfig(trigger=CONFIG.trigger)
    result = plan(snapshot([pod]), bare)
    assert result.creates == ()
    assert result.statuses[0].status.phase == UNRESOLVABLE
    assert result.statuses[0].event is not None and result.statuses[0].event.type == "Warning"


def test_model_no_pool_offers_is_unresolvable_with_a_warning_naming_it() -> None:
    result = plan(snapshot([gpu_pod("b", "1", model="b200")]), CONFIG)
    assert result.creates == ()
    assert "b200" in result.statuses[0].status.message


def test_named_pool_wins_when_it_admits_the_model_and_weight_orders_otherwise() -> None:
    pools = [
        nodepool("light", models=["l4"], weight=1),
        nodepool("heavy", models=["l4"], weight=50),
    ]
    assert (
        plan(snapshot([gpu_pod("a", "1", model="l4")], pools=pools), CONFIG).creates[0].group.pool
        == "heavy"
    )
    named = gpu_pod("b", "1", model="l4", pool="light")
    assert plan(snapshot([named], pools=pools), CONFIG).creates[0].group.pool == "light"


def test_only_a_pool_whose_taints_the_pod_tolerates_is_chosen() -> None:
    gpu = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    pools = [
        nodepool(
            "dra",
            models=["a100"],
            weight=50,
            taints=[gpu, {"key": "dra-only", "effect": "NoSchedule"}],
        ),
        nodepool("large", models=["a100"], weight=1, taints=[gpu]),
    ]

    def pool_for(tolerations: list[dict[str, str]]) -> str:
        pod = gpu_pod("a", "1", model="a100", tolerations=tolerations)
        result = plan(snapshot([pod], pools=pools), CONFIG)
        if not result.creates:
            [told] = result.statuses
            assert told.status.phase == UNRESOLVABLE
            return told.status.message
        return result.creates[0].group.pool

    assert pool_for([{"key": "nvidia.com/gpu", "operator": "Exists"}]) == "large"
    assert pool_for([{"operator": "Exists"}]) == "dra"  # tolerates every taint: weight decides
    equal = {"key": "dra-only", "operator": "Equal", "value": "", "effect": "NoSchedule"}
    assert pool_for([{"key": "nvidia.com/gpu", "operator": "Exists"}, equal]) == "dra"
    # A PreferNoSchedule-only toleration does not tolerate a NoSchedule taint.
    prefer = {"key": "dra-only", "operator": "Exists", "effect": "PreferNoSchedule"}
    assert pool_for([{"key": "nvidia.com/gpu", "operator": "Exists"}, prefer]) == "large"
    # Tolerating neither: no trigger, for a node the pod could never run on.
    assert pool_for([]) == (
        "no Ready NodePool offering GPU model 'a100' will take it: the pod does not "
        "tolerate NodePool dra's taint nvidia.com/gpu:NoSchedule"
    )
    # The same for a pool the intent names and for the default pool.
    named = gpu_pod("b", "1", model="a100", pool="large", tolerations=[])
    [told] = plan(snapshot([named], pools=pools), CONFIG).statuses
    assert told.status.phase == UNRESOLVABLE and "NodePool large's taint" in told.status.message


def test_pools_not_ready_are_skipped() -> None:
    pools = [nodepool("gpu-standard", models=["l4"], ready=False)]
    result = plan(snapshot([gpu_pod("a", "1", model="l4")], pools=pools), CONFIG)
    assert result.creates == () and result.statuses[0].status.phase == UNRESOLVABLE


def test_existing_trigger_covers_the_demand_and_no_second_one_is_made() -> None:
    pods = [gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]
    first = plan(snapshot(pods), CONFIG)
    trigger = live_trigger(first)
    second = plan(snapshot(pods, triggers=[trigger]), CONFIG)
    assert second.creates == () and second.deletes == ()
    assert {s.status.phase for s in second.statuses} == {TRIGGERED}
    assert {s.status.trigger for s in second.statuses} == {"gpu-intent-system/gi-x"}


def test_a_new_pod_that_fits_in_the_trigger_spare_share_needs_no_new_trigger() -> None:
    first = plan(snapshot([gpu_pod("a", "0.5", model="l4")]), CONFIG)
    trigger = live_trigger(first)
    more = [gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]
    assert plan(snapshot(more, triggers=[trigger]), CONFIG).creates == ()
    three = [*more, gpu_pod("c", "0.5", model="l4")]
    assert [c.gpus for c in plan(snapshot(three, triggers=[trigger]), CONFIG).creates] == [1]


def nominated(trigger: dict[str, Any], claim: str, at: str = LATER) -> Nomination:
    """Karpenter's Nominated event on ``trigger``, parsed."""
    meta = trigger["metadata"]
    event = {
        "reason": "Nominated",
        "message": f"Pod should schedule on: nodeclaim/{claim}",
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "lastTimestamp": at,
    }
    parsed = parse_nomination(event)
    assert parsed is not None
    return parsed


def test_trigger_is_linked_only_by_karpenters_nomination_never_by_creation_order() -> None:
    pods = [gpu_pod("a", "1", model="l4")]
    trigger = live_trigger(plan(snapshot(pods), CONFIG))
    older = nodeclaim(
        "gpu-standard-old", "gpu-standard", model="l4", created="2026-11-21T11:59:00Z"
    )
    newer = nodeclaim(
        "gpu-standard-new", "gpu-standard", model="l4", created="2026-11-21T12:00:02Z"
    )
    # A NodeClaim of the right pool and model made after the trigger is no evidence.
    guess = plan(snapshot(pods, triggers=[trigger], claims=[older, newer]), CONFIG)
    assert guess.links == ()
    assert {s.status.phase for s in guess.statuses} == {TRIGGERED}
    assert "none is known yet" in guess.statuses[0].status.message
    # Karpenter's Nominated event names the NodeClaim, even the older one.
    snap = snapshot(pods, triggers=[trigger], claims=[older, newer])
    result = plan(
        replace(snap, nominations={key(trigger): nominated(trigger, "gpu-standard-old")}), CONFIG
    )
    assert [(str(link.ref), link.node_claim) for link in result.links] == [
        ("gpu-intent-system/gi-x", "gpu-standard-old")
    ]
    assert result.statuses[0].status.phase == PROVISIONING
    assert result.statuses[0].status.node_claim == "gpu-standard-old"


def test_the_nodeclaim_carrying_a_triggers_marker_is_its_link_without_any_event() -> None:
    """Karpenter copies the trigger's marker requirement into the NodeClaim it buys for
    it: that is evidence from the NodeClaim's creation on, even when no Nominated event
    came (they are rate limited), and it outranks a nomination onto another NodeClaim."""
    pods = [gpu_pod("a", "1", model="l4"), gpu_pod("b", "1", model="l4")]
    first = plan(snapshot(pods), CONFIG)
    triggers = [live_trigger(first, 0, name="gi-1"), live_trigger(first, 1, name="gi-2")]
    bought = nodeclaim("nc-for-both", "gpu-standard", gpus=2, model="l4", marked=["gi-1", "gi-2"])
    other = nodeclaim("nc-other", "gpu-standard", model="l4", marked=["gi-9"])
    snap = snapshot(pods, triggers=triggers, claims=[bought, other])
    snap = replace(snap, nominations={key(triggers[0]): nominated(triggers[0], "nc-other")})
    result = plan(snap, CONFIG)
    assert sorted((link.ref.name, link.node_claim) for link in result.links) == [
        ("gi-1", "nc-for-both"),
        ("gi-2", "nc-for-both"),
    ]
    assert {m.node_claim for m in result.marks} == {"nc-for-both"}  # Karpenter: hands off
    assert {(s.status.phase, s.status.node_claim) for s in result.statuses} == {
        (PROVISIONING, "nc-for-both")
    }
    # A marked NodeClaim being deleted is no link; a newer one marking the trigger wins.
    gone = nodeclaim(
        "nc-for-both", "gpu-standard", gpus=2, model="l4", deleting=True, marked=["gi-1", "gi-2"]
    )
    retry = nodeclaim(
        "nc-retry",
        "gpu-standard",
        gpus=1,
        model="l4",
        marked=["gi-1"],
        created="2026-11-21T12:00:04Z",
        node="n-retry",
    )
    older = nodeclaim("nc-older", "gpu-standard", gpus=1, model="l4", marked=["gi-1"])
    again = plan(snapshot(pods, triggers=triggers, claims=[gone, retry, older]), CONFIG)
    assert [(link.ref.name, link.node_claim) for link in again.links] == [("gi-1", "nc-retry")]
    assert {(m.ref.name, m.node_claim) for m in again.marks} == {
        ("gi-1", "nc-retry"),
        ("gi-2", None),
    }


def test_a_nomination_of_a_previous_pod_with_the_same_name_is_no_evidence() -> None:
    pods = [gpu_pod("a", "1", model="l4")]
    trigger = live_trigger(plan(snapshot(pods), CONFIG))
    stale = nominated(trigger, "nc-1")
    stale = replace(stale, uid="uid-of-an-older-pod")
    snap = snapshot(pods, triggers=[trigger], claims=[nodeclaim("nc-1", "gpu-standard")])
    assert plan(replace(snap, nominations={key(trigger): stale}), CONFIG).links == ()


def key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def test_nodeclaim_of_another_pool_model_or_too_small_is_not_linked() -> None:
    pods = [gpu_pod("a", "1", model="l4")]
    trigger = live_trigger(plan(snapshot(pods), CONFIG))
    claims = [
        nodeclaim("other-pool", "gpu-large", model="l4", created="2026-11-21T12:00:02Z"),
        nodeclaim("other-model", "gpu-standard", model="t4", created="2026-11-21T12:00:02Z"),
        nodeclaim("no-gpu", "gpu-standard", gpus=0, created="2026-11-21T12:00:02Z"),
    ]
    assert plan(snapshot(pods, triggers=[trigger], claims=claims), CONFIG).links == ()


def test_two_triggers_nominated_to_one_nodeclaim_both_link_to_it() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4"), gpu_pod("b", "1", model="l4")]), CONFIG)
    triggers = [
        live_trigger(first, 0, name="gi-1"),
        live_trigger(first, 1, name="gi-2", created="2026-11-21T12:00:01Z"),
    ]
    parsed = [t for t in map(parse_trigger, triggers) if t is not None]
    big = parse_nodeclaim(nodeclaim("big", "gpu-standard", gpus=2, model="l4", created=LATER))
    evidence = {key(t): nominated(t, "big") for t in triggers}
    assert set(link_claims(parsed, {"big": big}, evidence).values()) == {"big"}
    assert set(link_claims(parsed, {"big": big}, {}).values()) == {None}


def test_ready_nodeclaim_removes_the_trigger_after_telling_its_pods() -> None:
    pods = [gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]
    trigger = live_trigger(plan(snapshot(pods), CONFIG), node_claim="nc-1")
    # Ready for longer than a cover: its free GPUs are not placed anew (`fresh`)
    claim = nodeclaim(
        "nc-1", "gpu-standard", model="l4", ready=True, node="ip-10-0-0-1", created=LONG_AGO
    )
    result = plan(snapshot(pods, triggers=[trigger], claims=[claim]), CONFIG)
    assert {s.status.phase for s in result.statuses} == {NODE_READY}
    assert {s.status.node for s in result.statuses} == {"ip-10-0-0-1"}
    assert len(result.deletes) == 1
    delete = result.deletes[0]
    assert delete.ref == PodRef("gpu-intent-system", "gi-x", "uid-gi-x")
    assert delete.ref.uid == "uid-gi-x"
    assert set(delete.cover) == {PodRef("ml", "a"), PodRef("ml", "b")}
    assert delete.node_claim == "nc-1"
    assert result.creates == ()


def node_ready_status(since: datetime, claim: str = "nc-1") -> str:
    return ScaleUpStatus(
        NODE_READY, "ready", None, claim, "ip-10-0-0-1", since.strftime("%Y-%m-%dT%H:%M:%SZ")
    ).to_annotation()


def test_pods_told_node_ready_are_left_to_their_scheduler_for_the_cover_period() -> None:
    claim = nodeclaim("nc-1", "gpu-standard", model="l4", ready=True, node="ip-10-0-0-1")
    pod = gpu_pod(
        "a", "1", model="l4", status_annotation=node_ready_status(NOW - timedelta(seconds=10))
    )
    assert not plan(snapshot([pod], claims=[claim]), CONFIG)
    later = NOW + timedelta(seconds=CONFIG.cover_seconds)
    again = plan(snapshot([pod], claims=[claim], now=later), CONFIG)
    assert len(again.creates) == 1


def test_the_cover_lasts_while_the_schedulers_are_still_binding_up_to_its_max() -> None:
    claim = nodeclaim("nc-1", "gpu-standard", model="l4", ready=True, node="ip-10-0-0-1")
    pod = gpu_pod(
        "a", "1", model="l4", status_annotation=node_ready_status(NOW - timedelta(seconds=10))
    )

    def creates(after: float, bound_ago: float) -> int:
        now = NOW + timedelta(seconds=after)
        base = snapshot([pod], claims=[claim], now=now)
        busy = replace(base, last_bind=now - timedelta(seconds=bound_ago))
        return len(plan(busy, CONFIG).creates)

    assert CONFIG.cover_max_seconds == 300.0
    assert creates(CONFIG.cover_seconds, bound_ago=1) == 0  # a burst still binding
    assert creates(CONFIG.cover_seconds, bound_ago=CONFIG.cover_seconds) == 1  # stalled
    assert creates(CONFIG.cover_max_seconds, bound_ago=1) == 1  # the hard limit


def test_cover_ends_when_the_nodeclaim_is_gone() -> None:
    pod = gpu_pod("a", "1", model="l4", status_annotation=node_ready_status(NOW))
    assert len(plan(snapshot([pod]), CONFIG).creates) == 1


def test_trigger_whose_demand_went_away_is_deleted() -> None:
    trigger = live_trigger(plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG))
    result = plan(snapshot([], triggers=[trigger]), CONFIG)
    assert [d.ref.name for d in result.deletes] == ["gi-x"]
    assert result.deletes[0].cover == ()


def test_most_progressed_trigger_is_kept_when_demand_shrinks() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4"), gpu_pod("b", "1", model="l4")]), CONFIG)
    unlinked = live_trigger(first, 0, name="gi-early")
    linked = live_trigger(
        first, 1, name="gi-late", created="2026-11-21T12:00:01Z", node_claim="nc-1"
    )
    claim = nodeclaim(
        "nc-1", "gpu-standard", model="l4", launched=True, created="2026-11-21T12:00:02Z"
    )
    result = plan(
        snapshot([gpu_pod("a", "1", model="l4")], triggers=[unlinked, linked], claims=[claim]),
        CONFIG,
    )
    assert [d.ref.name for d in result.deletes] == ["gi-early"]


def test_invalid_intent_is_reported_and_never_acted_on() -> None:
    pod = gpu_pod("bad", "1", model="l4", extra_annotations={"gpu-intent.io/gpus": "lots"})
    result = plan(snapshot([pod]), CONFIG)
    assert result.creates == ()
    assert result.statuses[0].status.phase == "InvalidIntent"
    assert result.statuses[0].event is not None and result.statuses[0].event.type == "Warning"


def test_status_is_not_rewritten_when_unchanged() -> None:
    pod = gpu_pod("b", "1", model="b200")
    told = plan(snapshot([pod]), CONFIG).statuses[0].status.to_annotation()
    assert (
        plan(snapshot([gpu_pod("b", "1", model="b200", status_annotation=told)]), CONFIG).statuses
        == ()
    )


def test_pods_not_unschedulable_are_ignored() -> None:
    assert not plan(snapshot([gpu_pod("a", "1", model="l4", unschedulable=False)]), CONFIG)


def test_trigger_limit_bounds_what_one_pass_creates() -> None:
    pods = [gpu_pod(f"p{i}", "1", model="l4") for i in range(5)]
    limited = PlanConfig(trigger=CONFIG.trigger, max_triggers=2)
    result = plan(snapshot(pods), limited)
    assert len(result.creates) == 2
    assert {s.status.phase for s in result.statuses} == {WAITING}
    assert all("limit" in s.status.message for s in result.statuses)


def test_zone_selector_is_copied_and_splits_groups() -> None:
    east = gpu_pod(
        "a", "0.5", model="l4", node_selector={"topology.kubernetes.io/zone": "us-east-1a"}
    )
    west = gpu_pod(
        "b", "0.5", model="l4", node_selector={"topology.kubernetes.io/zone": "us-east-1b"}
    )
    result = plan(snapshot([east, west]), CONFIG)
    zones = sorted(
        c.body["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] for c in result.creates
    )  # type: ignore[index]
    assert zones == ["us-east-1a", "us-east-1b"]


def test_hostname_selector_is_unresolvable_as_no_new_node_has_that_name() -> None:
    pod = gpu_pod("a", "0.5", model="l4", node_selector={"kubernetes.io/hostname": "n1"})
    result = plan(snapshot([pod]), CONFIG)
    assert result.creates == ()
    [told] = result.statuses
    assert told.status.phase == UNRESOLVABLE
    assert "nodeSelector kubernetes.io/hostname=n1" in told.status.message
    assert told.event is not None and told.event.type == "Warning"


def test_a_selector_no_node_will_carry_is_unresolvable_and_named() -> None:
    nowhere = gpu_pod("a", "0.5", model="l4", node_selector={"example.com/nowhere": "yes"})
    [told] = plan(snapshot([nowhere]), CONFIG).statuses
    assert told.status.phase == UNRESOLVABLE
    assert "example.com/nowhere=yes" in told.status.message
    # GPU Feature Discovery labels are set on every new GPU node: a trigger is made.
    gfd = gpu_pod("b", "0.5", model="l4", node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"})
    assert len(plan(snapshot([gfd]), CONFIG).creates) == 1
    # A value the pool's requirements exclude.
    zone_pool = nodepool("gpu-standard", models=["l4"])
    zone_pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}
    )
    elsewhere = gpu_pod(
        "c", "0.5", model="l4", node_selector={"topology.kubernetes.io/zone": "us-east-1c"}
    )
    [told] = plan(snapshot([elsewhere], pools=[zone_pool]), CONFIG).statuses
    assert told.status.phase == UNRESOLVABLE
    assert "does not admit" in told.status.message


def test_required_node_affinity_must_have_one_satisfiable_term() -> None:
    def with_terms(name: str, *terms: list[dict[str, Any]]) -> dict[str, Any]:
        pod = gpu_pod(name, "0.5", model="l4")
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                }
            }
        }
        return pod

    never = [{"key": "example.com/rack", "operator": "In", "values": ["r1"]}]
    fine = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
    absent = [{"key": "example.com/rack", "operator": "DoesNotExist"}]
    [told] = plan(snapshot([with_terms("a", never)]), CONFIG).statuses
    assert told.status.phase == UNRESOLVABLE
    assert "required node affinity example.com/rack In [r1]" in told.status.message
    assert len(plan(snapshot([with_terms("b", never, fine)]), CONFIG).creates) == 1
    assert len(plan(snapshot([with_terms("c", absent)]), CONFIG).creates) == 1


def test_a_trigger_asks_for_the_cpu_and_memory_of_the_pods_it_stands_for() -> None:
    big = {"requests": {"cpu": "3", "memory": "6Gi"}}
    pods = [
        gpu_pod("a", "0.5", model="l4", resources=big),
        gpu_pod("b", "0.5", model="l4", resources=big),
    ]
    [create] = plan(snapshot(pods), CONFIG).creates
    requests = create.body["spec"]["containers"][0]["resources"]["requests"]  # type: ignore[index]
    assert requests["cpu"] == "6000m"
    assert requests["memory"] == str(12 * 1024**3)
    small = plan(snapshot([gpu_pod("c", "1", model="l4")]), CONFIG).creates[0]
    requests = small.body["spec"]["containers"][0]["resources"]["requests"]  # type: ignore[index]
    assert (requests["cpu"], requests["memory"]) == ("10m", str(16 * 1024**2))


def test_triggers_are_non_binding_by_default_and_marked_unschedulable() -> None:
    [create] = plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG).creates
    assert create.body["spec"]["schedulerName"] == NON_BINDING_SCHEDULER  # type: ignore[index]
    trigger = live_trigger(plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG))
    unmarked = plan(snapshot([gpu_pod("a", "1", model="l4")], triggers=[trigger]), CONFIG)
    assert [(str(m.ref), m.node_claim) for m in unmarked.marks] == [
        ("gpu-intent-system/gi-x", None)
    ]
    trigger["status"] = condition_patch(T0)["status"]
    marked = plan(snapshot([gpu_pod("a", "1", model="l4")], triggers=[trigger]), CONFIG)
    assert marked.marks == ()
    # Once its NodeClaim is known, Karpenter is told to leave it alone ...
    trigger["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = "nc-1"
    launching = nodeclaim("nc-1", "gpu-standard", model="l4", launched=True)
    pods = [gpu_pod("a", "1", model="l4")]
    linked = plan(snapshot(pods, triggers=[trigger], claims=[launching]), CONFIG)
    assert [(m.node_claim) for m in linked.marks] == ["nc-1"]
    trigger["status"] = condition_patch(T0, "nc-1")["status"]
    assert plan(snapshot(pods, triggers=[trigger], claims=[launching]), CONFIG).marks == ()
    # ... and if that NodeClaim goes away before it is Ready, the trigger has failed:
    # it is removed and its pod waits out a backoff (tests/test_controller_failures.py).
    lost = plan(snapshot(pods, triggers=[trigger]), CONFIG)
    assert lost.marks == ()
    [failed] = lost.deletes
    assert [(str(ref), retry.attempts) for ref, retry in failed.retries] == [("ml/a", 1)]
    binding = PlanConfig(trigger=TriggerSettings(binding=True))
    [create] = plan(snapshot([gpu_pod("a", "1", model="l4")]), binding).creates
    assert "schedulerName" not in create.body["spec"]  # type: ignore[operator]


def test_capacity_already_bought_is_used_before_any_new_trigger() -> None:
    # A 2-GPU trigger linked to a launching NodeClaim; the demand is now two 1-GPU pods
    # (packed differently than when the trigger was made): no new trigger, no delete.
    first = plan(snapshot([gpu_pod("a", "2", model="l4")]), CONFIG)
    trigger = live_trigger(first, node_claim="nc-1")
    claim = nodeclaim("nc-1", "gpu-standard", gpus=2, model="l4", launched=True)
    pods = [gpu_pod("b", "1", model="l4"), gpu_pod("c", "1", model="l4")]
    result = plan(snapshot(pods, triggers=[trigger], claims=[claim]), CONFIG)
    assert (result.creates, result.deletes) == ((), ())
    assert {s.status.phase for s in result.statuses} == {PROVISIONING}


def test_a_trigger_whose_nodeclaim_is_on_its_way_is_kept_until_ready() -> None:
    trigger = live_trigger(
        plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG), node_claim="nc-1"
    )
    launching = nodeclaim("nc-1", "gpu-standard", model="l4", launched=True)
    kept = plan(snapshot([], triggers=[trigger], claims=[launching]), CONFIG)
    assert kept.deletes == ()
    # The kept capacity serves a pod that comes meanwhile: nothing more is bought.
    late = plan(
        snapshot([gpu_pod("z", "1", model="l4")], triggers=[trigger], claims=[launching]), CONFIG
    )
    assert late.creates == () and late.deletes == ()
    ready = nodeclaim("nc-1", "gpu-standard", model="l4", ready=True, node="n1")
    gone = plan(snapshot([], triggers=[trigger], claims=[ready]), CONFIG)
    assert [d.reason for d in gone.deletes] == [
        "NodeClaim nc-1 is Ready and no pending pod needs it"
    ]


def test_covers_hold_only_as_far_as_the_nodeclaims_gpus_have_room() -> None:
    """Four quarter pods told NodeReady on a 1-GPU NodeClaim: while half of its GPU went
    to a pod found bound there, only the two first covered stay covered; the other two
    count as demand again (a trigger) instead of waiting out the cover."""
    claim = nodeclaim("nc-1", "gpu-standard", model="l4", ready=True, node="n1")
    pods = [gpu_pod(n, "0.25", model="l4") for n in "abcd"]
    covers = {("ml", n): ("nc-1", NOW - timedelta(seconds=10 - i)) for i, n in enumerate("abcd")}
    snap = replace(snapshot(pods, claims=[claim]), covers=covers)
    assert plan(snap, CONFIG).creates == ()  # the whole GPU is still free
    busy = plan(replace(snap, used={"n1": Decimal("0.5")}), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in busy.creates] == [["c", "d"]]
    assert plan(replace(snap, used={"n2": Decimal(1)}), CONFIG).creates == ()  # other node
    full = plan(replace(snap, used={"n1": Decimal(1)}), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in full.creates] == [["a", "b", "c", "d"]]


def test_free_gpus_of_a_nodeclaim_bought_for_us_take_pending_pods_before_any_trigger() -> None:
    """A 2-GPU NodeClaim bought for our triggers turned Ready 5 s ago; 0.5 of it went to
    a pod found bound there. Pending quarter pods of its pool and model fill the 1.5
    GPUs left (told NodeReady on it) and only the rest get a trigger. So does one
    Karpenter bought for native pods that went elsewhere (no trigger's marker); one
    Karpenter nominated a pod we do not see onto (a namespace that did not opt in), of
    another model, or Ready longer than the cover period takes none."""
    ours = nodeclaim(
        "nc-1",
        "gpu-standard",
        gpus=2,
        model="l4",
        ready=True,
        node="n1",
        marked=["gi-old"],
        created="2026-11-21T12:00:00Z",
    )
    pods = [gpu_pod(f"p{i}", "0.25", model="l4") for i in range(8)]
    snap = replace(snapshot(pods, claims=[ours]), used={"n1": Decimal("0.5")})
    result = plan(snap, CONFIG)
    ready = [s for s in result.statuses if s.status.phase == NODE_READY]
    assert len(ready) == 6 and {s.status.node_claim for s in ready} == {"nc-1"}
    assert [len(c.serves) for c in result.creates] == [2]  # 0.5 GPU left: one trigger
    assert {r.name for c in result.creates for r in c.serves}.isdisjoint(s.ref.name for s in ready)
    native = nodeclaim("nc-2", "gpu-standard", gpus=2, model="l4", ready=True, node="n2")
    result = plan(replace(snapshot(pods, claims=[native]), opted_in=frozenset({"ml"})), CONFIG)
    ready = [s for s in result.statuses if s.status.phase == NODE_READY]
    assert len(ready) == 8 and {s.status.node_claim for s in ready} == {"nc-2"}
    assert result.creates == ()
    # Karpenter nominated a pod of a namespace that did not opt in onto it
    unseen = {("batch", "job-0"): Nomination(("batch", "job-0"), "u", "nc-2", NOW)}
    seen = {("ml", "native-0"): Nomination(("ml", "native-0"), "u", "nc-2", NOW)}
    snap = replace(snapshot(pods, claims=[native]), opted_in=frozenset({"ml"}))
    assert len(plan(replace(snap, nominations=unseen), CONFIG).creates) == 2
    assert plan(replace(snap, nominations=seen), CONFIG).creates == ()
    for other in (
        nodeclaim("nc-3", "gpu-standard", gpus=2, model="t4", ready=True, node="n3", marked=["x"]),
        nodeclaim(
            "nc-4",
            "gpu-standard",
            gpus=2,
            model="l4",
            ready=True,
            node="n4",
            marked=["x"],
            created="2026-11-21T11:58:00Z",
        ),
    ):
        alone = plan(snapshot(pods, claims=[other]), CONFIG)
        assert [len(c.serves) for c in alone.creates] == [4, 4]
        assert not [s for s in alone.statuses if s.status.phase == NODE_READY]


def test_gpus_karpenter_nominated_to_a_native_pod_are_not_free_for_sharing_pods() -> None:
    """The real Karpenter packs a pending native pod onto a NodeClaim it bought for our
    triggers and nominates it there. nc-1 (2 GPUs, ours, Ready) has a native 1-GPU pod
    nominated onto it: only 1 GPU is room for the KAI quarters, so four of eight are
    told NodeReady on it and four get a trigger. A nomination of another pod uid, or
    of a pod that is not native, holds nothing."""
    ours = nodeclaim(
        "nc-1", "gpu-standard", gpus=2, model="l4", ready=True, node="n1", marked=["gi-old"]
    )
    native = native_pod("native", "l4")
    quarters = [gpu_pod(f"q{i}", "0.25", model="l4") for i in range(8)]
    snap = snapshot([native, *quarters], claims=[ours])
    uid = snap.pods[0].ref.uid

    def nominated(
        to: str, pod: str = "native", pod_uid: str = uid
    ) -> dict[tuple[str, str], Nomination]:
        return {("ml", pod): Nomination(("ml", pod), pod_uid, to, NOW)}

    held = replace(snap, reserved=native_reserved(snap.pods, nominated("nc-1")))
    assert held.reserved == {"nc-1": Decimal(1)}
    result = plan(held, CONFIG)
    ready = [s for s in result.statuses if s.status.phase == NODE_READY]
    assert len(ready) == 4 and [len(c.serves) for c in result.creates] == [4]
    for other in (nominated("nc-1", pod_uid="another"), nominated("nc-1", pod="q0")):
        assert native_reserved(snap.pods, other) == {}
    free = plan(replace(snap, reserved=native_reserved(snap.pods, nominated("nc-9"))), CONFIG)
    assert len([s for s in free.statuses if s.status.phase == NODE_READY]) == 8


def test_a_cover_the_executor_holds_works_without_the_status_annotation() -> None:
    claim = nodeclaim("nc-1", "gpu-standard", model="l4", ready=True, node="n1", created=LONG_AGO)
    pod = gpu_pod("a", "1", model="l4")
    snap = snapshot([pod], claims=[claim])
    covered = replace(snap, covers={("ml", "a"): ("nc-1", NOW - timedelta(seconds=5))})
    assert not plan(covered, CONFIG)
    expired = replace(snap, covers={("ml", "a"): ("nc-1", NOW - timedelta(seconds=61))})
    assert len(plan(expired, CONFIG).creates) == 1


def test_trigger_pod_spec_is_what_karpenter_understands() -> None:
    pool = parse_nodepool(
        nodepool(
            "gpu-standard",
            models=["l4"],
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        )
    )
    group, serves = GroupKey("gpu-standard", "l4"), [PodRef("ml", "a", "u-a")]
    name = trigger_name(group, serves, T0)
    body = trigger_pod(group, 2, pool, serves, CONFIG.trigger, name=name)
    meta, spec = body["metadata"], body["spec"]
    assert meta["namespace"] == "gpu-intent-system" and meta["name"] == name
    assert re.fullmatch(r"gi-gpu-standard-l4-[a-z2-7]{10}", name)
    # The marker: the NodeClaim Karpenter buys for this trigger will name it; and the
    # exclusion of every node labelled as refused (`nodes_to_label`).
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "gpu-intent.io/trigger-name", "operator": "NotIn", "values": [name]},
                    {"key": "gpu-intent.io/node", "operator": "DoesNotExist"},
                ]
            }
        ]
    }
    assert meta["labels"] == {
        "gpu-intent.io/trigger": "true",
        "app.kubernetes.io/managed-by": "gpu-intent",
        "hami.io/webhook": "ignore",
    }
    assert spec["nodeSelector"] == {
        "karpenter.sh/nodepool": "gpu-standard",
        "karpenter.k8s.aws/instance-gpu-name": "l4",
    }
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "true"}
    ]
    container = spec["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["automountServiceAccountToken"] is False
    with pytest.raises(ValueError):
        trigger_pod(GroupKey("gpu-standard", "l4"), 0, pool, [], CONFIG.trigger, name=name)


def node_obj(
    name: str, pool: str, *, ready: bool = True, label: str | None = None
) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": pool}
    if label:
        labels["gpu-intent.io/node"] = label
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_triggers_exclude_the_nodes_of_their_pool_labelled_first() -> None:
    """Every trigger excludes the labelled nodes (DoesNotExist, however many), and every
    node of a GPU pool gets the label in the pass that sees it, before the creates: its
    pods' scheduler refused the Ready ones, though Karpenter may see free GPUs there
    (HAMi's 10 per card), and one still joining was bought for earlier triggers."""
    nodes = [
        node_obj("ip-1", "gpu-standard", label="ip-1"),
        node_obj("ip-2", "gpu-standard"),
        node_obj("ip-3", "gpu-standard", ready=False),  # joining
        node_obj("ip-4", "gpu-large"),  # another pool
        node_obj("x" * 70, "gpu-standard"),  # too long for a label value: hashed
    ]
    parsed = {n.name: n for n in map(parse_node, nodes)}
    claims = [
        nodeclaim(f"nc-{i}", node.pool or "", node=node.name, launched=True)
        for i, node in enumerate(parsed.values())
    ]
    pods = [gpu_pod("a", "1", model="l4")]
    result = plan(replace(snapshot(pods, claims=claims), nodes=parsed), CONFIG)
    hashed = node_label_value("x" * 70)
    assert re.fullmatch(r"n-[0-9a-f]{20}", hashed)
    assert sorted((n.node, n.value) for n in result.labels) == sorted(
        [("ip-2", "ip-2"), ("ip-3", "ip-3"), ("ip-4", "ip-4"), ("x" * 70, hashed)]
    )
    # A node whose NodeClaim the cache has not seen yet waits: its markers are unknown.
    unknown = plan(replace(snapshot(pods, claims=claims[1:2]), nodes=parsed), CONFIG)
    assert [(n.node, n.value) for n in unknown.labels] == [("ip-2", "ip-2")]
    [create] = result.creates
    expressions = create.body["spec"]["affinity"]["nodeAffinity"][  # type: ignore[index]
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "gpu-intent.io/node", "operator": "DoesNotExist"} in expressions
    # 1,000 unlabelled nodes all get the label: no cap (at 100 names, later triggers
    # were nominated onto the older nodes and nothing was bought).
    many = {
        f"n{i:04d}": NodeInfo(f"n{i:04d}", "gpu-standard", True, None, claim=f"nc-{i}")
        for i in range(1000)
    }
    owners = snapshot([], claims=[nodeclaim(f"nc-{i}", "gpu-standard") for i in range(1000)])
    assert len(nodes_to_label(many, owners.nodepools, owners.nodeclaims, ())) == 1000


def test_a_node_is_labelled_only_once_no_simulated_trigger_relies_on_it() -> None:
    """The node of a NodeClaim bought for a trigger Karpenter still simulates (not yet
    marked linked) stays unlabelled: labelled, it would stop matching that trigger's own
    DoesNotExist and Karpenter would buy the trigger a second node. Once the trigger is
    marked linked (or bound, or deleted) the node is labelled; a trigger merely
    nominated there does not hold it back."""
    pods = [gpu_pod("a", "1", model="l4"), gpu_pod("b", "1", model="l4")]
    first = plan(snapshot(pods[:1]), CONFIG)
    trigger = live_trigger(first, name="gi-t1")
    claims = [nodeclaim("nc-1", "gpu-standard", model="l4", node="ip-9", launched=True,
                        marked=["gi-t1"])]  # fmt: skip
    nodes = {"ip-9": parse_node(node_obj("ip-9", "gpu-standard"))}
    unmarked = replace(snapshot(pods, claims=claims, triggers=[trigger]), nodes=nodes)
    result = plan(unmarked, CONFIG)
    assert result.labels == ()
    assert [m.ref.name for m in result.marks] == ["gi-t1"]  # marked this pass...
    marked = json.loads(json.dumps(trigger))
    marked["status"] = condition_patch(T0, "nc-1")["status"]
    assert plan(replace(snapshot(pods, claims=claims, triggers=[marked]), nodes=nodes),
                CONFIG).labels == (LabelNode("ip-9", "ip-9"),)  # fmt: skip
    # ...and labelled once the mark is seen. A recorded link holds it back the same way.
    linked = live_trigger(first, name="gi-t2", node_claim="nc-1")
    other = [nodeclaim("nc-1", "gpu-standard", model="l4", node="ip-9", launched=True)]
    held = replace(snapshot(pods, claims=other, triggers=[linked]), nodes=nodes)
    assert nodes_to_label(held.nodes, held.nodepools, held.nodeclaims, held.triggers) == ()
    # Unrelated (unmarked, unlinked) triggers do not.
    free = replace(snapshot(pods, claims=other, triggers=[trigger]), nodes=nodes)
    assert nodes_to_label(free.nodes, free.nodepools, free.nodeclaims, free.triggers) == (
        ("ip-9", "ip-9"),
    )


def test_trigger_names_are_stable_and_distinct() -> None:
    """A name is a function of group, pods and time: a retried create cannot make a
    second trigger, and another bin, group or second gets another name."""
    group, pods = GroupKey("gpu-standard", "l4"), [PodRef("ml", "a", "u-a")]
    name = trigger_name(group, pods, T0)
    assert trigger_name(group, list(pods), T0) == name
    others = {
        trigger_name(group, [PodRef("ml", "b", "u-b")], T0),
        trigger_name(group, [PodRef("ml", "a", "u-a2")], T0),  # a new pod, same name
        trigger_name(GroupKey("gpu-standard", "t4"), pods, T0),
        trigger_name(GroupKey("gpu-standard", "l4", (("zone", "a"),)), pods, T0),
        trigger_name(group, pods, "2026-11-21T12:00:01Z"),
    }
    assert name not in others and len(others) == 5
    assert len(trigger_name(GroupKey("p" * 63, "m" * 63), pods, T0)) <= 63


def test_parse_trigger_rejects_pods_it_cannot_identify() -> None:
    body = live_trigger(plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG))
    assert parse_trigger(body) is not None
    body["metadata"]["annotations"]["gpu-intent.io/gpus"] = "one"
    assert parse_trigger(body) is None


def test_pods_that_got_a_node_mid_scale_up_are_told_scheduled_with_the_time_it_took() -> None:
    told = ScaleUpStatus(PROVISIONING, "launching", "gpu-intent-system/gi-x", "nc-1", None, T0)
    bound = gpu_pod("a", "0.5", model="l4", status_annotation=told.to_annotation())
    bound["spec"]["nodeName"] = "ip-10-0-0-1"
    bound["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-21T12:00:07Z"}
    ]
    done = ScheduledPod.parse(bound)
    assert (done.node, done.seconds_to_node) == ("ip-10-0-0-1", 7.0)
    # The NodeClaim named is the one the pod's node belongs to, not the one it was told.
    snap = snapshot([], claims=[nodeclaim("nc-2", "gpu", ready=True, node="ip-10-0-0-1")])
    result = plan(
        Snapshot(snap.pods, snap.triggers, snap.nodeclaims, snap.nodepools, NOW, [done]), CONFIG
    )
    [change] = result.statuses
    assert change.status.phase == SCHEDULED
    assert (change.status.node, change.status.node_claim) == ("ip-10-0-0-1", "nc-2")
    assert "NodeClaim nc-2" in change.status.message
    # The caches may learn of the node after the binding: with neither the NodeClaim's
    # status.nodeName nor the Node seen, the final status waits (30 s), then says so.
    bound_at = datetime(2026, 11, 21, 12, 0, 7, tzinfo=UTC)
    waiting = plan(Snapshot([], [], {}, snap.nodepools, bound_at, [done]), CONFIG)
    assert waiting.statuses == ()
    later = bound_at + timedelta(seconds=30)
    unknown = plan(Snapshot([], [], {}, snap.nodepools, later, [done]), CONFIG).statuses[0]
    assert unknown.status.node_claim is None
    assert "no NodeClaim known" in unknown.status.message
    # The Node's NodeClaim ownerReference (Karpenter's registration sets it) is evidence.
    owned = {
        "metadata": {
            "name": "ip-10-0-0-1",
            "labels": {"karpenter.sh/nodepool": "gpu"},
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                 "name": "nc-3", "uid": "u-3"}],
        },
    }  # fmt: skip
    node = parse_node(slim_node(owned))
    assert node.claim == "nc-3"
    nodes = {node.name: node}
    by_owner = plan(
        replace(Snapshot([], [], {}, snap.nodepools, bound_at, [done]), nodes=nodes), CONFIG
    )
    assert [c.status.node_claim for c in by_owner.statuses] == ["nc-3"]
    assert change.event is not None and change.event.reason == "ScaleUpComplete"
    assert change.seconds_to_node == 7.0


def memory_pod(name: str, gpus: str, mib: int, model: str | None = None) -> dict[str, Any]:
    """A KAI ``gpu-memory`` pod (KAI counts it as 0.1 GPU) stating ``mib`` MiB."""
    pod = gpu_pod(name, gpus, model=model, source=("kai:gpu-memory",))
    pod["metadata"]["annotations"]["gpu-intent.io/gpu-memory"] = str(mib)
    return pod


def test_memory_only_pods_get_a_whole_gpu_each_with_at_least_that_memory() -> None:
    pods = [memory_pod(n, "0.1", 4000) for n in ("a", "b", "c")]
    config = PlanConfig(trigger=TriggerSettings(namespace="gpu-intent-system"))
    result = plan(snapshot(pods), config)
    assert [c.gpus for c in result.creates] == [1, 1, 1]
    for create in result.creates:
        assert create.group.min_memory_mib == 4000 and create.group.model is None
        terms = create.body["spec"]["affinity"]["nodeAffinity"][  # type: ignore[index]
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        name = create.body["metadata"]["name"]  # type: ignore[index]
        assert terms == [
            {
                "matchExpressions": [
                    {"key": "gpu-intent.io/trigger-name", "operator": "NotIn", "values": [name]},
                    {"key": "gpu-intent.io/node", "operator": "DoesNotExist"},
                    {
                        "key": "karpenter.k8s.aws/instance-gpu-memory",
                        "operator": "Gt",
                        "values": ["3999"],
                    },
                    {"key": "gpu", "operator": "NotIn", "values": ["on"]},
                ]
            }
        ]
        assert "karpenter.k8s.aws/instance-gpu-name" not in create.body["spec"]["nodeSelector"]  # type: ignore[index]
    # The stored triggers parse back to the same group: the next pass changes nothing.
    stored = [live_trigger(result, i, name=f"gi-{i}") for i in range(3)]
    again = plan(snapshot(pods, triggers=stored), config)
    assert (again.creates, again.deletes) == ((), ())


def test_fractions_that_state_memory_are_not_packed_but_plain_fractions_are() -> None:
    pods = [
        memory_pod("a", "0.5", 12000, model="l4"),
        memory_pod("b", "0.5", 12000, model="l4"),
        gpu_pod("c", "0.5", model="l4"),
        gpu_pod("d", "0.5", model="l4"),
    ]
    result = plan(snapshot(pods), CONFIG)
    assert sorted(len(c.serves) for c in result.creates) == [1, 1, 2]
    # With a model the trigger pins the model; no memory requirement is added.
    assert all(c.group.min_memory_mib == 0 for c in result.creates)


def test_a_nomination_onto_gpus_another_trigger_holds_is_no_link() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4"), gpu_pod("b", "1", model="l4")]), CONFIG)
    holder = live_trigger(first, 0, name="gi-1", node_claim="x")
    late = live_trigger(first, 1, name="gi-2", created="2026-11-21T12:00:03Z")
    parsed = [t for t in map(parse_trigger, [holder, late]) if t is not None]
    one_gpu = parse_nodeclaim(nodeclaim("x", "gpu-standard", gpus=1, model="l4", launched=True))
    evidence = {key(late): nominated(late, "x")}
    links = link_claims(parsed, {"x": one_gpu}, evidence)
    assert [links[t.ref] for t in parsed] == ["x", None]
    two_gpus = parse_nodeclaim(nodeclaim("x", "gpu-standard", gpus=2, model="l4", launched=True))
    links = link_claims(parsed, {"x": two_gpus}, evidence)
    assert [links[t.ref] for t in parsed] == ["x", "x"]


def test_model_less_and_model_groups_of_one_pool_plan_together() -> None:
    # GroupKey(pool, None, ...) and GroupKey(pool, "t4") once crashed every pass: None and
    # str do not compare.
    pods = [memory_pod("m", "0.1", 20000), gpu_pod("t", "0.5", model="t4")]
    result = plan(snapshot(pods), CONFIG)
    assert sorted((c.group.model or "", c.group.min_memory_mib) for c in result.creates) == [
        ("", 20000),
        ("t4", 0),
    ]


def test_a_pod_stays_with_the_linked_trigger_it_was_told_of() -> None:
    """Two halves were told Provisioning on trigger gi-t1 (linked to nc-1, 1 GPU); a
    whole-GPU pod of the same group arrives. Packed afresh, the whole pod takes the
    first trigger with room (gi-t1) and the halves move to a new trigger and another
    NodeClaim's story; they stay on gi-t1 instead, and the new pod gets the new trigger."""
    first = plan(
        snapshot([gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]), CONFIG
    )
    t1 = live_trigger(first, name="gi-t1", node_claim="nc-1")
    told = ScaleUpStatus(PROVISIONING, "m", "gpu-intent-system/gi-t1", "nc-1").to_annotation()
    halves = [gpu_pod(n, "0.5", model="l4", status_annotation=told) for n in ("a", "b")]
    whole = gpu_pod("0", "1", model="l4")  # its bin sorts first: it would take gi-t1
    claim = nodeclaim("nc-1", "gpu-standard", model="l4", launched=True, marked=["gi-t1"])
    result = plan(snapshot([*halves, whole], triggers=[t1], claims=[claim]), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in result.creates] == [["0"]]
    moved = [s for s in result.statuses if s.ref.name in ("a", "b")]
    assert all(s.status.trigger == "gpu-intent-system/gi-t1" for s in moved), moved


def test_a_pod_stays_with_the_unlinked_trigger_it_was_told_of() -> None:
    """As above before Karpenter made any NodeClaim: two halves told Triggered on gi-t1
    (1 GPU, not linked) and a whole-GPU pod arrives. Packed afresh, the whole pod would
    take gi-t1 and the halves a new trigger, each half told a second trigger (another
    Triggered Event); they are not told anything new, and the whole pod gets the new
    trigger. A trigger cannot be over-filled by staying: a third half told of gi-t1
    finds it full and is packed with the rest."""
    first = plan(
        snapshot([gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]), CONFIG
    )
    t1 = live_trigger(first, name="gi-t1")
    told = ScaleUpStatus(TRIGGERED, "m", "gpu-intent-system/gi-t1").to_annotation()
    halves = [gpu_pod(n, "0.5", model="l4", status_annotation=told) for n in ("a", "b")]
    whole = gpu_pod("0", "1", model="l4")  # its bin sorts first: it would take gi-t1
    result = plan(snapshot([*halves, whole], triggers=[t1]), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in result.creates] == [["0"]]
    assert not [s for s in result.statuses if s.ref.name in ("a", "b")]
    third = gpu_pod("c", "0.5", model="l4", status_annotation=told)
    crowded = plan(snapshot([*halves, third], triggers=[t1]), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in crowded.creates] == [["c"]]


def test_pods_of_an_unlinked_trigger_move_to_a_bought_trigger_with_room() -> None:
    """Staying never costs a NodeClaim: gi-t1 got NodeClaim nc-1 and its pods were bound
    elsewhere, and two halves told Triggered on the unlinked gi-t2 are pending. They
    move to gi-t1 (bought, empty), and gi-t2 is deleted before Karpenter buys for it;
    kept on gi-t2, nc-1 would stay empty and gi-t2 buy another."""
    first = plan(
        snapshot([gpu_pod("a", "0.5", model="l4"), gpu_pod("b", "0.5", model="l4")]), CONFIG
    )
    t1 = live_trigger(first, name="gi-t1", node_claim="nc-1")
    t2 = live_trigger(first, name="gi-t2", created="2026-01-01T00:00:05Z")
    told = ScaleUpStatus(TRIGGERED, "m", "gpu-intent-system/gi-t2").to_annotation()
    halves = [gpu_pod(n, "0.5", model="l4", status_annotation=told) for n in ("a", "b")]
    claim = nodeclaim("nc-1", "gpu-standard", model="l4", launched=True, marked=["gi-t1"])
    result = plan(snapshot(halves, triggers=[t1, t2], claims=[claim]), CONFIG)
    assert not result.creates
    assert {s.ref.name: s.status.trigger for s in result.statuses} == {
        "a": "gpu-intent-system/gi-t1",
        "b": "gpu-intent-system/gi-t1",
    }
    assert [d.ref.name for d in result.deletes] == ["gi-t2"]


def test_a_new_pod_fills_the_share_staying_pods_leave_of_their_trigger() -> None:
    """A quarter was told Triggered on gi-t1 (1 GPU); two more quarters and a half
    arrive. Staying must cost no GPU: the newcomers fill gi-t1's spare 0.75 (the
    half and one quarter, best fit) and only the last quarter needs a new trigger,
    as packing all four afresh would have bought 2 GPUs too."""
    first = plan(snapshot([gpu_pod("a", "0.25", model="l4")]), CONFIG)
    t1 = live_trigger(first, name="gi-t1")
    told = ScaleUpStatus(TRIGGERED, "m", "gpu-intent-system/gi-t1").to_annotation()
    staying = gpu_pod("a", "0.25", model="l4", status_annotation=told)
    new = [gpu_pod("h", "0.5", model="l4"), gpu_pod("q1", "0.25", model="l4")]
    new.append(gpu_pod("q2", "0.25", model="l4"))
    result = plan(snapshot([staying, *new], triggers=[t1]), CONFIG)
    assert [c.gpus for c in result.creates] == [1]
    on_t1 = {s.ref.name for s in result.statuses if s.status.trigger == "gpu-intent-system/gi-t1"}
    assert "h" in on_t1 and len(on_t1 & {"q1", "q2"}) == 1, result.statuses


def launched_claim(
    name: str, model: str, gpus: int = 4, *, marked: Sequence[str] = (), labelled: bool = True
) -> dict[str, Any]:
    """A NodeClaim Karpenter launched (its instance's GPUs in ``status.capacity`` and,
    when ``labelled``, its GPU name label) that is not Ready yet."""
    claim = nodeclaim(name, "gpu-standard", gpus=gpus, model=model, launched=True, marked=marked)
    claim["status"]["capacity"] = {"nvidia.com/gpu": str(gpus)}
    if labelled:
        claim["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] = model
    return claim


def test_pods_wait_for_gpus_a_launching_nodeclaim_has_that_its_own_pods_left() -> None:
    """Seen on the real kube-scheduler and Karpenter: native pods took a T4 node bought
    for KAI's triggers while the NodeClaim Karpenter had bought for them was still
    initializing; buying again for the KAI pods left a fifth T4 node empty. A NodeClaim
    Karpenter launched for other pods (no trigger's marker), not Ready, with GPUs no
    pending pod is nominated to, holds back a new trigger for the pods it can host."""
    quarters = [gpu_pod(f"q{i}", "0.25", model="t4") for i in range(8)]
    coming = launched_claim("nc-9", "t4", gpus=4)
    result = plan(snapshot(quarters, claims=[coming]), CONFIG)
    assert result.creates == ()
    until = datetime(2026, 11, 21, 12, 2, tzinfo=UTC)  # created T0, + contest_seconds
    told = {s.why for s in result.statuses}
    assert told == {HeldBack(ComingUp("nc-9", until))}
    assert all(s.status.phase == WAITING for s in result.statuses)
    # three of its four GPUs are a pending native pod's (nominated there): one is room
    natives = [native_pod(f"native-{i}", "t4") for i in range(3)]
    snap = snapshot([*natives, *quarters], claims=[coming])
    nominations = {
        ("ml", p.ref.name): Nomination(("ml", p.ref.name), p.ref.uid or "", "nc-9", NOW)
        for p in snap.pods
        if isinstance(p, PendingPod) and p.ref.name.startswith("native")
    }
    part = plan(replace(snap, reserved=native_reserved(snap.pods, nominations)), CONFIG)
    assert [len(c.serves) for c in part.creates] == [4]
    waiting = [s for s in part.statuses if isinstance(s.why, HeldBack)]
    assert len(waiting) == 4
    # one bought for a trigger since deleted as not needed holds them back as well
    orphan = launched_claim("nc-9", "t4", marked=["gi-gone"])
    assert not plan(snapshot(quarters, claims=[orphan]), CONFIG).creates
    # none of these holds anything back
    mine = live_trigger(plan(snapshot(quarters[:1]), CONFIG), name="gi-mine")
    bought = launched_claim("nc-9", "t4", marked=["gi-mine"])  # for a live trigger
    assert [
        len(c.serves)
        for c in plan(snapshot(quarters, claims=[bought], triggers=[mine]), CONFIG).creates
    ] == [4]  # gi-mine's GPU holds four; the other four are bought for
    for other in (
        launched_claim("nc-9", "l4"),  # another model
        launched_claim("nc-9", "t4", labelled=False),  # which GPU is not known yet
        {**coming, "metadata": {**coming["metadata"], "creationTimestamp": LONG_AGO}},
    ):
        assert [
            len(c.serves) for c in plan(snapshot(quarters, claims=[other]), CONFIG).creates
        ] == [4, 4]
    # Ready, its free GPUs take the pods at once
    ready = launched_claim("nc-9", "t4")
    ready["status"]["conditions"] = [
        {"type": "Launched", "status": "True"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-21T12:00:04Z"},
    ]
    ready["status"]["nodeName"] = "n9"
    now_ready = plan(snapshot(quarters, claims=[ready]), CONFIG)
    assert now_ready.creates == ()
    assert {s.status.phase for s in now_ready.statuses} == {NODE_READY}


def hami_pod(
    name: str,
    *,
    gpumem: int,
    model: str,
    gpus: int = 1,
    created: str = T0,
    status_annotation: str | None = None,
) -> dict[str, Any]:
    """A pending HAMi pod of ``gpus`` vGPUs of ``gpumem`` MiB on an A10G (22,888 MiB),
    asking them as HAMi's resources (which Karpenter cannot simulate)."""
    extra = {"gpu-intent.io/gpu-memory": str(gpumem), "gpu-intent.io/model-memory": "22888"}
    asks = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(gpumem)}
    return gpu_pod(
        name, str(gpus), model=model, source=("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype"),
        extra_annotations=extra, resources={"limits": asks}, created=created, status_annotation=status_annotation,
    )  # fmt: skip


def test_a_bursts_new_pods_are_gathered_then_packed_whole() -> None:
    """On the real Karpenter, HAMi's pods of the 160-pod mix arrived over 1.7 s and were
    packed pass by pass: three 6000 MiB pods to a card before the pods of two 10000 MiB
    vGPUs came, 14 A10Gs where 12 hold them all. A group's new pods get no trigger (and
    are told nothing) until no new pod of it came for ``gather_seconds``, at most
    ``gather_max_seconds`` after its first; the plan asks to run again then."""

    def at(seconds: float) -> str:
        return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    smalls = [hami_pod(f"small-{i}", gpumem=6000, model="a10g", created=at(3)) for i in range(8)]
    pairs = [
        hami_pod(f"pair-{i}", gpumem=10000, model="a10g", gpus=2, created=at(0)) for i in range(2)
    ]
    config = replace(CONFIG, gather_seconds=1.0, gather_max_seconds=10.0)
    waiting = plan(snapshot([*smalls, *pairs], pools=HAMI_POOLS), config)
    assert not waiting  # no trigger, no status
    assert waiting.wake == NOW + timedelta(seconds=1)
    # the smalls alone, before the pairs came: their own triggers, three to a card
    early = plan(snapshot(smalls, pools=HAMI_POOLS, now=NOW - timedelta(seconds=1)), config)
    assert sum(c.gpus for c in early.creates) == 3
    # once quiet, the whole burst: each pair's cards take four smalls, 2 + 2 GPUs
    whole = plan(
        snapshot([*smalls, *pairs], pools=HAMI_POOLS, now=NOW + timedelta(seconds=1)), config
    )
    assert sum(c.gpus for c in whole.creates) == 4 and whole.wake is None
    # the wait ends gather_max_seconds after the first new pod, however busy
    stream = [*smalls, *pairs]
    stream[0] = hami_pod("small-0", gpumem=6000, model="a10g", created=at(10))
    assert plan(snapshot(stream, pools=HAMI_POOLS), config).creates
    # pods Karpenter provisions as CPU pods (no resource it cannot simulate) do not
    # wait: its own batch would buy them a node without the trigger
    plain = [gpu_pod(f"q{i}", "0.25", model="l4", created=at(0)) for i in range(4)]
    assert plain[0]["spec"]["containers"][0]["resources"] == {}
    assert plan(snapshot(plain), config).creates
    # pods told something before do not wait; nor does anything with gathering off
    told = ScaleUpStatus(TRIGGERED, "gone", "gpu-intent-system/gi-x", None, None, T0)
    again = [
        hami_pod(p["metadata"]["name"], gpumem=10000, model="a10g", gpus=2, created=at(0),
                 status_annotation=told.to_annotation())
        for p in pairs
    ]  # fmt: skip
    assert plan(snapshot(again, pools=HAMI_POOLS), config).creates
    off = replace(config, gather_seconds=0.0)
    assert plan(snapshot([*smalls, *pairs], pools=HAMI_POOLS), off).creates


def test_pods_stay_with_the_trigger_made_for_them_before_their_status_is_written() -> None:
    """Real run 9: a burst's creates queued a hundred ``Triggered`` statuses behind the
    rate-limited writer; passes before they were written packed the pods afresh and told
    them another trigger, 0.4 s later. A pod told nothing yet stays with the trigger
    whose ``serves`` names it."""
    halves = [gpu_pod(n, "0.5", model="l4") for n in ("a", "b", "c", "d")]
    first = plan(snapshot(halves), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in first.creates] == [["a", "b"], ["c", "d"]]
    one = live_trigger(first, 0, name="gi-1")
    two = live_trigger(first, 1, name="gi-2")
    # as if packed otherwise when made: gi-1 for a and c, gi-2 for b and d
    one["metadata"]["annotations"]["gpu-intent.io/serves"] = "ml/a,ml/c"
    two["metadata"]["annotations"]["gpu-intent.io/serves"] = "ml/b,ml/d"
    later = plan(snapshot(halves, triggers=[one, two]), CONFIG)
    told = {s.ref.name: s.status.trigger for s in later.statuses}
    assert told == {
        "a": "gpu-intent-system/gi-1",
        "c": "gpu-intent-system/gi-1",
        "b": "gpu-intent-system/gi-2",
        "d": "gpu-intent-system/gi-2",
    }
    assert later.creates == () and later.deletes == ()


def test_a_nodeclaims_spare_gpus_take_a_bin_across_its_triggers() -> None:
    """Real run 15: a `g5.12xlarge` was bought for four 1-GPU triggers of HAMi's pods;
    HAMi bound their pods to the first A10G node Ready, and the pod of two 10000 MiB
    vGPUs that lost its room there needed 2 GPUs. No single trigger had 2 spare, so a
    new one bought a fifth node, which came up empty. A bin takes the spare GPUs of
    several triggers linked to one NodeClaim (distinct cards of one node), and its pod
    stays there in the passes after."""
    pair = hami_pod("pair", gpumem=10000, model="a10g", gpus=2)
    first = plan(snapshot([hami_pod("x", gpumem=6000, model="a10g")], pools=HAMI_POOLS), CONFIG)
    t1 = live_trigger(first, name="gi-t1", node_claim="nc-1")
    t2 = live_trigger(first, name="gi-t2", node_claim="nc-1")
    claim = launched_claim("nc-1", "a10g", gpus=2, marked=["gi-t1", "gi-t2"])
    result = plan(snapshot([pair], pools=HAMI_POOLS, triggers=[t1, t2], claims=[claim]), CONFIG)
    assert (result.creates, result.deletes) == ((), ())
    [told] = result.statuses
    assert (told.status.phase, told.status.node_claim) == (PROVISIONING, "nc-1")
    assert "(2 GPU, 0.87 used by 1 pod(s))" in told.status.message, told.status.message
    # told so, it stays: no new trigger, nothing new to tell
    stayed = parse_pending_pod(
        hami_pod("pair", gpumem=10000, model="a10g", gpus=2,
                 status_annotation=told.status.to_annotation()),
        frozenset(),
    )  # fmt: skip
    assert stayed is not None
    # even beside a trigger of 2 spare GPUs of its own on another NodeClaim
    pairs = plan(snapshot([pair], pools=HAMI_POOLS), CONFIG)
    t4 = live_trigger(pairs, name="gi-t4", node_claim="nc-4")
    four = launched_claim("nc-4", "a10g", gpus=2, marked=["gi-t4"])
    snap = snapshot([], pools=HAMI_POOLS, triggers=[t1, t2, t4], claims=[claim, four])
    again = plan(replace(snap, pods=[stayed]), CONFIG)
    assert (again.creates, again.deletes, again.statuses) == ((), (), ())
    # a trigger's own pods come first: with gi-t2's pod pending, the pair does not fit
    own_status = ScaleUpStatus(PROVISIONING, "m", "gpu-intent-system/gi-t2", "nc-1")
    own = hami_pod("own", gpumem=6000, model="a10g", status_annotation=own_status.to_annotation())
    crowded = plan(
        snapshot([own, pair], pools=HAMI_POOLS, triggers=[t1, t2], claims=[claim]), CONFIG
    )
    assert [sorted(r.name for r in c.serves) for c in crowded.creates] == [["pair"]]
    # triggers of two NodeClaims do not pool: one spare GPU on each is no room for 2
    t3 = live_trigger(first, name="gi-t3", node_claim="nc-2")
    other = launched_claim("nc-2", "a10g", gpus=1, marked=["gi-t3"])
    one = launched_claim("nc-1", "a10g", gpus=1, marked=["gi-t1"])
    apart = plan(snapshot([pair], pools=HAMI_POOLS, triggers=[t1, t3], claims=[one, other]), CONFIG)
    assert [c.gpus for c in apart.creates] == [2]


def test_a_ready_nodeclaims_own_pods_take_its_gpus_before_other_pods() -> None:
    """Real run 16: the first of three A10G NodeClaims turned Ready while its trigger
    was still live. Its free GPUs went to the largest pending pods first, among them
    pods planned on the two NodeClaims still coming, and the pods its trigger was
    bought for lost their room: told NodeReady there, their covers overran it, and a
    fourth node was bought that came up empty. The pods of a trigger linked to a Ready
    NodeClaim take its GPUs first (they are told NodeReady and covered as it is
    deleted); other pods get what they leave."""
    told_t1 = ScaleUpStatus(PROVISIONING, "m", "gpu-intent-system/gi-t1", "nc-1").to_annotation()
    told_t3 = ScaleUpStatus(PROVISIONING, "m", "gpu-intent-system/gi-t3", "nc-2").to_annotation()
    own = [
        hami_pod("pair", gpumem=10000, model="a10g", gpus=2, status_annotation=told_t1),
        *(hami_pod(f"small-{i}", gpumem=6000, model="a10g", status_annotation=told_t1)
          for i in range(4)),
    ]  # fmt: skip
    mids = [
        hami_pod(f"mid-{i}", gpumem=7951, model="a10g", status_annotation=told_t3) for i in range(2)
    ]
    t1 = live_trigger(plan(snapshot(own[:1], pools=HAMI_POOLS), CONFIG), name="gi-t1")
    t1["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = "nc-1"
    t3 = live_trigger(plan(snapshot(mids, pools=HAMI_POOLS), CONFIG), name="gi-t3")
    t3["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = "nc-2"
    ready = ready_a10g("nc-1", "n1", marked=["gi-t1"])
    coming = launched_claim("nc-2", "a10g", gpus=1, marked=["gi-t3"])
    snap = snapshot([*own, *mids], pools=HAMI_POOLS, triggers=[t1, t3], claims=[ready, coming])
    result = plan(snap, CONFIG)
    assert result.creates == ()
    told = {s.ref.name: (s.status.phase, s.status.node_claim) for s in result.statuses}
    assert told == {p["metadata"]["name"]: (NODE_READY, "nc-1") for p in own}, told
    [deleted] = result.deletes
    assert (deleted.ref.name, deleted.node_claim) == ("gi-t1", "nc-1")
    assert sorted(r.name for r in deleted.cover) == sorted(p["metadata"]["name"] for p in own)


def ready_a10g(name: str, node: str, *, marked: Sequence[str] = ("gi-old",)) -> dict[str, Any]:
    """A Ready NodeClaim of HAMi's pool (label ``gpu: on``) with two A10Gs, Ready since
    T0 and bought for ``marked``."""
    claim = nodeclaim(name, "gpu-standard", gpus=2, model="a10g", ready=True, node=node,
                      marked=marked)  # fmt: skip
    claim["status"]["capacity"] = {"nvidia.com/gpu": "2"}
    claim["metadata"]["labels"].update(
        {"karpenter.k8s.aws/instance-gpu-name": "a10g", "gpu": "on",
         "karpenter.k8s.aws/instance-gpu-memory": "24576"}
    )  # fmt: skip
    return claim


def test_pods_left_without_room_wait_while_ready_nodeclaims_hold_them_in_all() -> None:
    """Real run 18: HAMi bound the oldest pods of a burst to the first A10G node Ready,
    though they were bought for on others; the covers of the pods bought for there ran
    over its cards, and the pod of two 10000 MiB vGPUs left without room got a new
    trigger, whose node came up empty, while the Ready nodes held the whole burst. Its
    cards judged pod by pod on the NodeClaim each was told of, no card has its share;
    in all, the fresh NodeClaims have it: the pod waits (`Settling`) for as long as
    the schedulers have tried every pod with all of them Ready (`SETTLE_SECONDS` after
    the last turned Ready), then buys."""
    nc1, nc2 = ready_a10g("nc-1", "n1"), ready_a10g("nc-2", "n2")
    for condition in nc2["status"]["conditions"]:
        condition["lastTransitionTime"] = "2026-11-21T12:00:03Z"  # Ready 3 s after nc-1
    smalls = [hami_pod(f"small-{i}", gpumem=6000, model="a10g") for i in range(4)]
    mids = [hami_pod(f"mid-{i}", gpumem=7951, model="a10g") for i in range(2)]
    pair = hami_pod("pair", gpumem=10000, model="a10g", gpus=2)
    early, late = NOW - timedelta(seconds=3), NOW - timedelta(seconds=2)
    covers = {("ml", f"small-{i}"): ("nc-1" if i < 2 else "nc-2", early) for i in range(4)}
    covers |= {("ml", "mid-0"): ("nc-2", early), ("ml", "mid-1"): ("nc-2", early)}
    covers[("ml", "pair")] = ("nc-1", late)
    # two pods of 7951 MiB planned elsewhere were bound to nc-1's node
    used = {"n1": Decimal(2 * 7951) / Decimal(22888)}
    base = snapshot([*smalls, *mids, pair], pools=HAMI_POOLS, claims=[nc1, nc2])
    snap = replace(base, covers=covers, used=used)
    result = plan(snap, CONFIG)
    assert result.creates == ()
    until = datetime(2026, 11, 21, 12, 0, 23, tzinfo=UTC)  # nc-2 Ready + SETTLE_SECONDS
    assert [(s.ref.name, s.why) for s in result.statuses] == [
        ("pair", HeldBack(Settling(("nc-1", "nc-2"), until)))
    ]
    assert result.wake == until
    # once the schedulers have tried every pod with both Ready, or too little is left
    # in all, it buys
    assert [c.gpus for c in plan(replace(snap, now=until), CONFIG).creates] == [2]
    busy = plan(replace(snap, used={**used, "n2": Decimal(1)}), CONFIG)
    assert "pair" in {r.name for c in busy.creates for r in c.serves}, busy.creates


def test_pods_left_without_room_count_the_nodeclaims_on_their_way_too() -> None:
    """Real run 22: the first A10G node Ready took pods planned on the third, still on
    its way; the third's triggers kept a small pod each, no whole GPU spare, and the
    pod of two 10000 MiB vGPUs left bought a fourth node within a second, which came
    up empty: the third held it. The GPUs the group's triggers bought on a NodeClaim
    on its way count with the Ready ones' room, less the pods of those triggers."""
    nc1 = ready_a10g("nc-1", "n1")
    coming = launched_claim("nc-2", "a10g", gpus=2, marked=["gi-t1", "gi-t2"])
    coming["metadata"]["labels"].update(
        {"gpu": "on", "karpenter.k8s.aws/instance-gpu-memory": "24576"}
    )
    gone = ScaleUpStatus(PROVISIONING, "m", "gpu-intent-system/gi-gone", "nc-9")
    pair = hami_pod("pair", gpumem=10000, model="a10g", gpus=2,
                    status_annotation=gone.to_annotation())  # fmt: skip
    first = plan(snapshot([hami_pod("x", gpumem=6000, model="a10g")], pools=HAMI_POOLS), CONFIG)
    smalls, triggers = [], []
    for i in (1, 2):
        told = ScaleUpStatus(PROVISIONING, "m", f"gpu-intent-system/gi-t{i}", "nc-2")
        smalls.append(hami_pod(f"small-{i}", gpumem=6000, model="a10g",
                               status_annotation=told.to_annotation()))  # fmt: skip
        triggers.append(live_trigger(first, name=f"gi-t{i}", node_claim="nc-2"))
    used = {"n1": Decimal("1.5")}  # half a card free on nc-1: no room for the pair
    snap = snapshot([pair, *smalls], pools=HAMI_POOLS, triggers=triggers, claims=[nc1, coming])
    result = plan(replace(snap, used=used), CONFIG)
    assert result.creates == ()
    # one on its way: until nc-1 stops being fresh (Ready at T0, + cover_seconds)
    until = datetime(2026, 11, 21, 12, 1, tzinfo=UTC)
    held = {s.ref.name: s.why for s in result.statuses if s.ref.name == "pair"}
    assert held == {"pair": HeldBack(Settling(("nc-1",), until, ("nc-2",)))}
    # nc-1 with no room left at all (real run 31): the pods covered there may go elsewhere
    full = plan(replace(snap, used={"n1": Decimal(2)}), CONFIG)
    assert full.creates == ()
    assert {s.ref.name: s.why for s in full.statuses if s.ref.name == "pair"} == held
    # the same triggers not linked yet: nothing is on its way for the group, it buys
    for trigger in triggers:
        del trigger["metadata"]["annotations"]["gpu-intent.io/nodeclaim"]
    unlinked = snapshot([pair, *smalls], pools=HAMI_POOLS, triggers=triggers, claims=[nc1])
    bought = plan(replace(unlinked, used=used), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in bought.creates] == [["pair"]]


def test_pods_counted_in_all_per_nodeclaim_do_not_wait_for_room_split_across_nodeclaims() -> None:
    """`Settling` is for HAMi's pods, whose room is judged card by card. Other pods'
    room is judged in all on each NodeClaim, and room split over NodeClaims is none: in
    the 1,000-pod mix, tensor-fusion pods waited 48 s on 22 one-GPU L40S nodes whose
    free shares each held none of them, then bought."""
    claims = [
        nodeclaim(n, "gpu-standard", model="l4", ready=True, node=f"node-{n}", marked=["x"])
        for n in ("nc-a", "nc-b")
    ]
    half = gpu_pod("half", "0.5", model="l4")
    used = {"node-nc-a": Decimal("0.7"), "node-nc-b": Decimal("0.7")}
    result = plan(replace(snapshot([half], claims=claims), used=used), CONFIG)
    assert [sorted(r.name for r in c.serves) for c in result.creates] == [["half"]]
