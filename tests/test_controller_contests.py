"""Capacity on its way for KAI's pods holds back other layers' new triggers whose nodes
KAI would take first (`controller.contests`), through `plan`."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from controller_fixtures import gpu_pod, nodeclaim
from test_controller_plan import CONFIG, HAMI_POOLS, NOW, live_trigger, snapshot

from controller.decisions import Plan
from controller.model import PROVISIONING, ScaleUpStatus
from controller.plan import plan
from controller.reasons import Contested, HeldBack, Withdrawn
from intent.contract import Intent, Source

TF = ("tensor-fusion:tensor-fusion.ai/vram-request", "tensor-fusion:tensor-fusion.ai/gpu-model")


def kai_memory_pod(name: str, mib: int) -> dict[str, Any]:
    """A KAI pod asking ``mib`` of GPU memory and no model."""
    obj = gpu_pod(name, "0.1", source=("kai:gpu-memory",))
    intent = Intent(Decimal("0.1"), gpu_memory_mib=mib, source=(Source.parse("kai:gpu-memory"),))
    obj["metadata"]["annotations"].update(intent.to_annotations())
    return obj


def tf_pod(name: str, model: str) -> dict[str, Any]:
    return gpu_pod(name, "1", model=model, source=TF)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def told_statuses(result: Plan, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``pods``, each with the status ``result`` told it written on it."""
    told = {s.ref.name: s.status for s in result.statuses}
    out = []
    for obj in pods:
        obj = copy.deepcopy(obj)
        status = told.get(obj["metadata"]["name"])
        if status is not None:
            obj["metadata"]["annotations"]["gpu-intent.io/scale-up"] = status.to_annotation()
        out.append(obj)
    return out


def held(result: Plan, name: str) -> Contested | None:
    """The contest ``name`` was told it waits for, None when told none."""
    for status in result.statuses:
        if status.ref.name == name and isinstance(status.why, HeldBack):
            why = status.why.why
            return why if isinstance(why, Contested) else None
    return None


def created_for(result: Plan) -> set[str]:
    return {ref.name for c in result.creates for ref in c.serves}


def test_a_tensor_fusion_trigger_waits_for_the_kai_capacity_that_could_take_its_node() -> None:
    pods = [kai_memory_pod("kai-mem", 20000), tf_pod("tf", "l40s")]
    first = plan(snapshot(pods), CONFIG)
    # KAI's trigger is bought this pass; the tensor-fusion pod's waits for it
    assert created_for(first) == {"kai-mem"}
    # the pods became Unschedulable at NOW - 5s (the fixtures' T0)
    until = NOW - timedelta(seconds=5) + timedelta(seconds=CONFIG.contest_seconds)
    assert held(first, "tf") == Contested(until)
    # its NodeClaim is on its way: still waiting, and told nothing new
    told = told_statuses(first, pods)
    trigger = live_trigger(first, name="gi-kai", created=stamp(NOW), node_claim="nc-kai")
    on_way = plan(
        snapshot(told, triggers=[trigger], claims=[nodeclaim("nc-kai", "gpu-standard")]),
        CONFIG,
    )
    assert created_for(on_way) == set()
    assert [s.ref.name for s in on_way.statuses if s.ref.name == "tf"] == []
    # it is Ready: the tensor-fusion pod gets its trigger
    ready = nodeclaim("nc-kai", "gpu-standard", model="l4", ready=True, node="n1")
    after = plan(snapshot(told, triggers=[trigger], claims=[ready]), CONFIG)
    assert created_for(after) == {"tf"}


def test_a_pod_waits_once_and_only_for_what_was_on_its_way_when_it_began() -> None:
    pods = [kai_memory_pod("kai-mem", 20000), tf_pod("tf", "l40s")]
    first = plan(snapshot(pods), CONFIG)
    told = told_statuses(first, pods)
    # KAI capacity bought after the tensor-fusion pod began to wait does not hold it
    later = live_trigger(
        first, name="gi-kai-2", created=stamp(NOW + timedelta(seconds=1)), node_claim="nc-2"
    )
    claims = [nodeclaim("nc-2", "gpu-standard")]
    result = plan(snapshot(told, triggers=[later], claims=claims), CONFIG)
    assert created_for(result) == {"tf"}
    # nor does any once the pod was triggered: it is never held again
    triggered = told_statuses(result, told)
    again = plan(snapshot(triggered, triggers=[later], claims=claims), CONFIG)
    assert held(again, "tf") is None and "tf" in created_for(again)


def test_the_wait_ends_after_contest_seconds_and_zero_turns_it_off() -> None:
    pods = [kai_memory_pod("kai-mem", 20000), tf_pod("tf", "l40s")]
    trigger = live_trigger(plan(snapshot(pods), CONFIG), name="gi-kai", node_claim="nc-kai")
    claims = [nodeclaim("nc-kai", "gpu-standard")]
    # the pods became Unschedulable at NOW - 5s (the fixtures' T0)
    late = NOW + timedelta(seconds=CONFIG.contest_seconds - 5)
    assert created_for(
        plan(snapshot(pods, triggers=[trigger], claims=claims, now=late), CONFIG)
    ) == {"tf"}
    just_before = late - timedelta(seconds=1)
    result = plan(snapshot(pods, triggers=[trigger], claims=claims, now=just_before), CONFIG)
    assert held(result, "tf") is not None
    off = replace(CONFIG, contest_seconds=0)
    assert created_for(plan(snapshot(pods, triggers=[trigger], claims=claims), off)) == {"tf"}


def test_only_nodes_kai_pods_could_run_on_are_contested() -> None:
    # 20000 MiB fits no T4 (16 GB): a tensor-fusion T4 pod does not wait
    pods = [kai_memory_pod("kai-mem", 20000), tf_pod("tf-t4", "t4")]
    assert created_for(plan(snapshot(pods), CONFIG)) == {"kai-mem", "tf-t4"}
    # 8000 MiB fits it: it waits
    pods = [kai_memory_pod("kai-mem", 8000), tf_pod("tf-t4", "t4")]
    assert held(plan(snapshot(pods), CONFIG), "tf-t4") is not None
    # KAI's own pods of a model on the NodePool KAI's memory pods are bought on do not
    # wait (KAI shares that pool's GPUs among its pods as it likes) ...
    pods = [kai_memory_pod("kai-mem", 8000), gpu_pod("kai-l4", "0.5", model="l4")]
    assert created_for(plan(snapshot(pods), CONFIG)) == {"kai-mem", "kai-l4"}
    # ... but those on another NodePool do: a memory pod takes an A100 node as readily
    a100 = gpu_pod("kai-a100", "0.25", model="a100", pool="gpu-large")
    result = plan(snapshot([kai_memory_pod("kai-mem", 20000), a100]), CONFIG)
    assert created_for(result) == {"kai-mem"} and held(result, "kai-a100") is not None
    # and KAI's capacity of a model holds back only other layers' pods of that model
    pods = [gpu_pod("kai-l40s", "0.5", model="l40s"), tf_pod("tf", "l40s")]
    result = plan(snapshot(pods), CONFIG)
    assert created_for(result) == {"kai-l40s"} and held(result, "tf") is not None


def test_a_hami_pool_is_never_contested_by_kai() -> None:
    """KAI's pods never run on HAMi's nodes (``gpu: "on"``, outside KAI's placement)."""
    hami = gpu_pod(
        "hami-a10g",
        "1",
        model="a10g",
        source=("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype"),
    )
    pools = HAMI_POOLS
    pods = [kai_memory_pod("kai-mem", 8000), hami]
    result = plan(snapshot(pods, pools=pools), CONFIG)
    assert "hami-a10g" in created_for(result)
    assert held(result, "hami-a10g") is None


def _name(result: Plan) -> str:
    meta = result.creates[0].body["metadata"]
    assert isinstance(meta, dict)
    return str(meta["name"])


def test_a_kai_trigger_karpenter_has_not_bought_for_is_withdrawn_for_kai_memory_pods() -> None:
    """An A100 fraction's trigger made before a memory-only KAI pod arrived is withdrawn
    while Karpenter has made no NodeClaim for it, and bought again once the memory pod's
    capacity is Ready: KAI would put the memory pod on the A100 node as readily."""
    a100 = gpu_pod("kai-a100", "0.25", model="a100", pool="gpu-large")
    first = plan(snapshot([a100]), CONFIG)
    assert created_for(first) == {"kai-a100"}
    a100_trigger = live_trigger(first, name="gi-a100", created=stamp(NOW))
    a100_told = told_statuses(first, [a100])
    pods = [*a100_told, kai_memory_pod("kai-mem", 20000)]
    later = NOW + timedelta(seconds=1)
    result = plan(snapshot(pods, triggers=[a100_trigger], now=later), CONFIG)
    assert created_for(result) == {"kai-mem"}
    withdrawn = [d for d in result.deletes if isinstance(d.why, Withdrawn)]
    assert [d.ref.name for d in withdrawn] == ["gi-a100"] and withdrawn[0].orphan is None
    assert held(result, "kai-a100") is not None
    # a trigger Karpenter made a NodeClaim for is never withdrawn: its pods stay with it
    linked = live_trigger(first, name="gi-a100", created=stamp(NOW), node_claim="nc-a100")
    claims = [nodeclaim("nc-a100", "gpu-large")]
    kept = plan(snapshot(pods, triggers=[linked], claims=claims, now=later), CONFIG)
    assert kept.deletes == () and held(kept, "kai-a100") is None
    # the memory pod's NodeClaim Ready: the A100 pod, told Waiting, is bought for again
    # (no cooldown after a withdrawal), and its trigger is not withdrawn while none is
    # on its way
    told = told_statuses(result, pods)
    mem_trigger = live_trigger(result, name="gi-mem", created=stamp(later), node_claim="nc-mem")
    ready = nodeclaim("nc-mem", "gpu-standard", model="l4", ready=True, node="n1")
    after = plan(snapshot(told, triggers=[mem_trigger], claims=[ready], now=later), CONFIG)
    assert created_for(after) == {"kai-a100"}
    # within --contest-seconds of the pod's Unschedulable time only
    late = NOW + timedelta(seconds=CONFIG.contest_seconds)
    result = plan(snapshot(pods, triggers=[a100_trigger], now=late), CONFIG)
    assert not [d for d in result.deletes if isinstance(d.why, Withdrawn)]


def test_kai_memory_pods_take_the_spare_of_kai_capacity_on_its_way_on_their_pool() -> None:
    """KAI's fractions took the node bought for a memory-only pod, so their own NodeClaim,
    still on its way, has the room: the memory pod is told of it, not bought for again
    (the NodeClaim bought again would come up empty)."""
    l4 = gpu_pod("kai-l4", "2", model="l4")
    trigger = live_trigger(plan(snapshot([l4]), CONFIG), name="gi-l4", node_claim="nc-l4")
    claim = nodeclaim("nc-l4", "gpu-standard", gpus=2, model="l4")
    # launched: Karpenter has put the instance type's labels on it (L4: 22888 MiB)
    claim["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-memory"] = "22888"
    memory = kai_memory_pod("kai-mem", 20000)
    result = plan(snapshot([memory], triggers=[trigger], claims=[claim]), CONFIG)
    assert created_for(result) == set() and result.deletes == ()
    told = {s.ref.name: s.status for s in result.statuses}
    assert told["kai-mem"].phase == "Provisioning"
    assert (told["kai-mem"].trigger, told["kai-mem"].node_claim) == (
        "gpu-intent-system/gi-l4",
        "nc-l4",
    )
    # borrowed, the memory pod still takes whatever node it fits first: an A100
    # fraction's new trigger waits for it as for the memory pod's own capacity
    a100 = gpu_pod("kai-a100", "0.25", model="a100", pool="gpu-large")
    both = plan(snapshot([memory, a100], triggers=[trigger], claims=[claim]), CONFIG)
    assert created_for(both) == set() and held(both, "kai-a100") is not None
    # none while the fractions' own pods still need every GPU of it
    still = plan(snapshot([l4, memory], triggers=[trigger], claims=[claim]), CONFIG)
    assert created_for(still) == {"kai-mem"}
    # nor on a node whose GPUs hold less memory than the pod asks (a 16 GB T4), or whose
    # instance is not known yet
    unknown = nodeclaim("nc-l4", "gpu-standard", gpus=2, model="l4")
    result = plan(snapshot([memory], triggers=[trigger], claims=[unknown]), CONFIG)
    assert created_for(result) == {"kai-mem"}
    small = copy.deepcopy(claim)
    small["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-memory"] = "16384"
    result = plan(snapshot([memory], triggers=[trigger], claims=[small]), CONFIG)
    assert created_for(result) == {"kai-mem"}
    # nor when the NodeClaim is Ready: its free GPUs are the scheduler's to hand out
    ready = copy.deepcopy(claim)
    ready["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-21T12:00:00Z"}
    ]
    result = plan(snapshot([memory], triggers=[trigger], claims=[ready]), CONFIG)
    assert not [s for s in result.statuses if s.status.trigger == "gpu-intent-system/gi-l4"]


def test_kai_fractions_take_the_spare_of_kai_memory_capacity_their_pods_left() -> None:
    """The memory-only pods a NodeClaim is on its way for went to another node (KAI put
    them on the first one they fit), and KAI's L4 fractions that took their first node
    are pending again: the NodeClaim still coming has their room, so they are told of
    it and nothing is bought (a node bought for them would come up empty, real run 15),
    and the memory pods' trigger is kept while it serves them."""
    memory = kai_memory_pod("kai-mem", 20000)
    trigger = live_trigger(plan(snapshot([memory]), CONFIG), name="gi-mem", node_claim="nc-mem")
    claim = nodeclaim("nc-mem", "gpu-standard", gpus=1)
    # launched: Karpenter has put the instance type's labels on it (a g6.12xlarge)
    claim["metadata"]["labels"].update(
        {
            "karpenter.k8s.aws/instance-gpu-name": "l4",
            "karpenter.k8s.aws/instance-gpu-memory": "22888",
        }
    )
    fractions = [gpu_pod(f"kai-l4-{i}", "0.5", model="l4") for i in range(2)]
    result = plan(snapshot(fractions, triggers=[trigger], claims=[claim]), CONFIG)
    assert created_for(result) == set() and result.deletes == ()
    told = {s.ref.name: s.status for s in result.statuses}
    assert {(t.phase, t.trigger, t.node_claim) for t in told.values()} == {
        ("Provisioning", "gpu-intent-system/gi-mem", "nc-mem")
    }
    assert set(told) == {"kai-l4-0", "kai-l4-1"}
    # none while the memory pod still needs the GPU: the fractions are bought for
    result = plan(snapshot([memory, *fractions], triggers=[trigger], claims=[claim]), CONFIG)
    assert created_for(result) == {"kai-l4-0", "kai-l4-1"}
    # nor when the instance launched is not known yet, or brings another GPU
    unknown = nodeclaim("nc-mem", "gpu-standard", gpus=1)
    result = plan(snapshot(fractions, triggers=[trigger], claims=[unknown]), CONFIG)
    assert created_for(result) == {"kai-l4-0", "kai-l4-1"}
    other = copy.deepcopy(claim)
    other["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] = "l40s"
    result = plan(snapshot(fractions, triggers=[trigger], claims=[other]), CONFIG)
    assert created_for(result) == {"kai-l4-0", "kai-l4-1"}
    # nor for pods of a layer KAI does not place: tensor-fusion's L4 pod waits for KAI's
    # capacity on its way (`contested`), not on it
    tf = gpu_pod("tf-l4", "1", model="l4", source=TF)
    result = plan(snapshot([tf], triggers=[trigger], claims=[claim]), CONFIG)
    assert held(result, "tf-l4") is not None
    assert not [s for s in result.statuses if s.status.trigger == "gpu-intent-system/gi-mem"]


def test_kai_fractions_stay_with_the_trigger_they_borrowed_while_it_lends() -> None:
    """Real runs 25 and 26: borrowed afresh each pass, KAI's L4 quarters went to the first
    lender with room, and as the lenders' own pods came and went they were told one
    memory trigger, then another, while the first was still linked. A pod told of a
    trigger it borrowed stays with it as long as its spare holds the pod."""
    memory = kai_memory_pod("kai-mem", 20000)
    made = plan(snapshot([memory]), CONFIG)
    triggers = [live_trigger(made, name=f"gi-mem-{c}", node_claim=f"nc-{c}") for c in "ab"]
    claims = []
    for c in "ab":
        claim = nodeclaim(f"nc-{c}", "gpu-standard", gpus=1)
        claim["metadata"]["labels"].update(
            {
                "karpenter.k8s.aws/instance-gpu-name": "l4",
                "karpenter.k8s.aws/instance-gpu-memory": "22888",
            }
        )
        claims.append(claim)
    fractions = [gpu_pod(f"kai-l4-{i}", "0.5", model="l4") for i in range(2)]
    fresh = plan(snapshot(fractions, triggers=triggers, claims=claims), CONFIG)
    assert {s.status.trigger for s in fresh.statuses} == {"gpu-intent-system/gi-mem-a"}
    # told of gi-mem-b (the lenders' order changed since), they stay there
    told_b = ScaleUpStatus(PROVISIONING, "m", "gpu-intent-system/gi-mem-b", "nc-b")
    for obj in fractions:
        obj["metadata"]["annotations"]["gpu-intent.io/scale-up"] = told_b.to_annotation()
    stayed = plan(snapshot(fractions, triggers=triggers, claims=claims), CONFIG)
    assert (stayed.creates, stayed.deletes, stayed.statuses) == ((), (), ())
    # unless gi-mem-b's own pod needs its GPU again: then the spare of gi-mem-a takes them
    served_b = copy.deepcopy(memory)
    served_b["metadata"]["annotations"]["gpu-intent.io/scale-up"] = ScaleUpStatus(
        PROVISIONING, "m", "gpu-intent-system/gi-mem-b", "nc-b"
    ).to_annotation()
    crowded = plan(snapshot([served_b, *fractions], triggers=triggers, claims=claims), CONFIG)
    moved = {s.ref.name: s.status.trigger for s in crowded.statuses}
    assert moved == {
        "kai-l4-0": "gpu-intent-system/gi-mem-a",
        "kai-l4-1": "gpu-intent-system/gi-mem-a",
    }
    assert created_for(crowded) == set()


def test_kai_pods_of_no_model_gathered_or_waiting_for_a_coming_node_hold_others_back() -> None:
    """Real run 8: KAI's memory-only pods waited for room on a NodeClaim on its way
    (`ComingUp`) and so had no trigger; tensor-fusion's L40S triggers were bought, and
    when the L40S nodes came up first KAI took two of them: two more L40S nodes. Pods of
    no model that wait for a coming node, or whose burst is still gathering, hold the
    groups of a model back as a trigger of theirs would."""
    tf = tf_pod("tf", "l40s")
    fresh = kai_memory_pod("kai-mem", 20000)
    fresh["metadata"]["creationTimestamp"] = stamp(NOW)  # a burst still arriving
    # selecting a label no NodePool defines, Karpenter cannot buy for it alone
    fresh["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    gathering = plan(snapshot([fresh, tf]), CONFIG)
    assert created_for(gathering) == set() and held(gathering, "tf") is not None
    # a node Karpenter launched for others, whose own pods went elsewhere, has room
    coming = nodeclaim("nc-9", "gpu-standard", gpus=4, model="l4", launched=True)
    coming["status"]["capacity"] = {"nvidia.com/gpu": "4"}
    coming["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] = "l4"
    coming["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-memory"] = "22888"
    waiting = plan(snapshot([kai_memory_pod("kai-mem", 20000), tf], claims=[coming]), CONFIG)
    assert created_for(waiting) == set() and held(waiting, "tf") is not None
    # with neither, the KAI pods are bought for now and the tensor-fusion pod waits for that
    plain = plan(snapshot([kai_memory_pod("kai-mem", 20000), tf]), CONFIG)
    assert created_for(plain) == {"kai-mem"} and held(plain, "tf") is not None
