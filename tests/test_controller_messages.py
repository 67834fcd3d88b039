"""Typed reasons and their words: the planner and its pure helpers return typed reasons
(`controller.reasons`), which the plan's actions carry; `controller.messages` alone
renders them, into the texts annotations, Events and logs have always shown (a
contract: each text below is the one the planner wrote before the reasons were typed)."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from controller_fixtures import gpu_pod, nodeclaim, nodepool
from test_controller_failures import FAST, failed_trigger
from test_controller_plan import CONFIG, NOW, live_trigger, snapshot

from controller import reasons
from controller.decisions import DeleteNodeClaim, DeleteTrigger
from controller.failures import Failure, trigger_failure
from controller.messages import WHERE, failure_text, render, trigger_condition
from controller.model import PendingPod, PodRef, Requirement, RetryState, ScaleUpStatus
from controller.nodes import parse_nodeclaim
from controller.placement import LAYERS
from controller.plan import plan
from controller.pools import resolve_pool, unmet_constraint
from controller.reasons import (
    AffinityUnmet,
    BackingOff,
    ClaimDeleted,
    ClaimNotReady,
    ClaimReady,
    ComingUp,
    Contested,
    Cooldown,
    DefaultPoolMissing,
    FreeGpus,
    GaveUp,
    HeldBack,
    Invalid,
    Native,
    NoDefaultPool,
    NodeReady,
    NoNodeRuns,
    NoPoolOffers,
    NoPoolPlaces,
    NotNeeded,
    OfferingPoolsRefuse,
    PoolAtLimits,
    PoolTriggerLimit,
    Provisioning,
    RateLimited,
    Reason,
    Scheduled,
    SelectorLabelUnknown,
    SelectorNotAdmitted,
    Settling,
    StatusReason,
    TaintRefused,
    TooManyGpus,
    Triggered,
    TriggerFailed,
    TriggerLimit,
    Unresolvable,
    Withdrawn,
)
from controller.statuses import knows, provisioning, told, triggered
from controller.triggers import condition_patch
from intent.contract import Phase

GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
TAINT = TaintRefused("dra", "nvidia.com/gpu", "", "NoSchedule")
NOWHERE = SelectorLabelUnknown("example.com/nowhere", "yes", "gpu-standard")
GONE = ClaimDeleted("nc-1")
GONE_TEXT = (
    "NodeClaim nc-1 was deleted before it was Ready (Karpenter deletes a NodeClaim when the "
    "cloud has no capacity for it, or when it does not launch within 5 min or register "
    "within 15 min)"
)
RETRY = RetryState(1, "2026-11-21T12:00:15Z", "NodeClaim nc-1 was deleted before it was Ready")
TRIGGER = "gpu-intent-system/gi-x"
NO_DEFAULT = "the intent names no GPU model and no default NodePool is configured"


def pending(*pods: dict[str, Any]) -> list[PendingPod]:
    """``pods`` parsed as the planner sees them."""
    parsed = snapshot(list(pods)).pods
    assert all(isinstance(p, PendingPod) for p in parsed)
    return [p for p in parsed if isinstance(p, PendingPod)]


#: Every reason type, with the text it renders to.
CASES: list[tuple[Reason, str]] = [
    # why no NodePool serves a pod
    (TAINT, "the pod does not tolerate NodePool dra's taint nvidia.com/gpu:NoSchedule"),
    (
        TaintRefused("gpu-large", "dedicated", "ml", "NoExecute"),
        "the pod does not tolerate NodePool gpu-large's taint dedicated=ml:NoExecute",
    ),
    (
        DefaultPoolMissing("gpu-standard"),
        "default NodePool 'gpu-standard' does not exist or is not Ready",
    ),
    (NoDefaultPool(), NO_DEFAULT),
    (
        NoPoolOffers("b200", GPU_NAME),
        f"no Ready NodePool offers GPU model 'b200' ({GPU_NAME})",
    ),
    (
        OfferingPoolsRefuse("a100", TAINT),
        "no Ready NodePool offering GPU model 'a100' will take it: the pod does not "
        "tolerate NodePool dra's taint nvidia.com/gpu:NoSchedule",
    ),
    (
        NoPoolPlaces("hami", Requirement("gpu", "In", ("on",))),
        "no NodePool makes nodes with gpu=on, where HAMi's device plugin runs (HAMi chart "
        "devicePlugin.nvidiaNodeSelector); add the label to a GPU NodePool's template "
        "(spec.template.metadata.labels), or set --placement hami=... (chart value "
        "controller.placement.hami)",
    ),
    (
        NoPoolPlaces("mig", Requirement("nvidia.com/mig.config", "Exists", ())),
        "no NodePool makes nodes with nvidia.com/mig.config Exists, where the GPU "
        "Operator's MIG manager has split the GPUs (the nvidia.com/mig.config label, a "
        "mig-parted profile such as all-1g.5gb); add the label to a GPU NodePool's template "
        "(spec.template.metadata.labels), or set --placement mig=... (chart value "
        "controller.placement.mig)",
    ),
    (NoPoolPlaces(), "no NodePool makes nodes where this pod's GPU-sharing layer runs"),
    (
        NoNodeRuns(NOWHERE),
        "no node Karpenter can make will run this pod: nodeSelector example.com/nowhere=yes: "
        "no node of NodePool gpu-standard will have label example.com/nowhere",
    ),
    # the unmet term of a pod's node selector or affinity
    (
        SelectorNotAdmitted("topology.kubernetes.io/zone", "us-east-1c", "gpu-standard"),
        "nodeSelector topology.kubernetes.io/zone=us-east-1c: NodePool gpu-standard does "
        "not admit it",
    ),
    (
        NOWHERE,
        "nodeSelector example.com/nowhere=yes: no node of NodePool gpu-standard will have "
        "label example.com/nowhere",
    ),
    (
        AffinityUnmet(Requirement("example.com/rack", "In", ("r1", "r2")), "gpu-standard"),
        "required node affinity example.com/rack In [r1,r2]: no node of NodePool "
        "gpu-standard can satisfy it",
    ),
    # why a new trigger waits
    (
        Cooldown(datetime(2026, 11, 21, 12, 0, 3, tzinfo=UTC), 10.0),
        "a trigger of this group was removed as unneeded at 12:00:03; waiting out the 10s "
        "cooldown before buying again",
    ),
    (
        TooManyGpus(16, 8),
        "needs 16 GPUs in one trigger, more than the cap of 8 (--max-gpus-per-trigger); waiting",
    ),
    (TriggerLimit(100), "trigger limit (100) reached; waiting"),
    (
        PoolTriggerLimit("gpu-standard", 2),
        "trigger limit of NodePool gpu-standard (2, --max-triggers-per-pool) reached; waiting",
    ),
    (RateLimited(), "trigger creation rate limit reached; waiting"),
    (
        Contested(datetime(2026, 11, 21, 12, 2, tzinfo=UTC)),
        "capacity on its way for KAI pods could take this pod's node first (KAI binds every "
        "session, on the fitting node with the fewest idle GPUs); buying once it is Ready, "
        "at the latest at 12:02:00",
    ),
    (
        ComingUp("gpu-standard-x7k2p", datetime(2026, 11, 21, 12, 2, tzinfo=UTC)),
        "Karpenter's NodeClaim gpu-standard-x7k2p, launched for other pods that went to other "
        "nodes, has GPUs free for this pod once it is Ready; buying only if it comes up "
        "without room, at the latest at 12:02:00",
    ),
    (
        Settling(("gpu-hami-a", "gpu-hami-b"), datetime(2026, 11, 21, 12, 1, tzinfo=UTC)),
        "Ready NodeClaims gpu-hami-a, gpu-hami-b have the GPUs in all for this pod and the "
        "others left without room; their scheduler is still placing pods; buying only if it "
        "places none here, at the latest at 12:01:00",
    ),
    (
        Settling(
            tuple(f"gpu-hami-{c}" for c in "abcde"), datetime(2026, 11, 21, 12, 1, tzinfo=UTC)
        ),
        "Ready NodeClaims gpu-hami-a, gpu-hami-b, gpu-hami-c and 2 more have the GPUs in all "
        "for this pod and the others left without room; their scheduler is still placing "
        "pods; buying only if it places none here, at the latest at 12:01:00",
    ),
    (
        Settling(("gpu-hami-a",), datetime(2026, 11, 21, 12, 1, tzinfo=UTC), ("gpu-hami-c",)),
        "Ready NodeClaims gpu-hami-a, with gpu-hami-c on the way, have the GPUs in all for "
        "this pod and the others left without room; their scheduler is still placing pods; "
        "buying only if it places none here, at the latest at 12:01:00",
    ),
    # why a trigger failed
    (
        PoolAtLimits("gpu-standard", "all available instance types exceed limits for nodepool"),
        "NodePool gpu-standard is at its limits; Karpenter said: all available instance "
        "types exceed limits for nodepool",
    ),
    (GONE, GONE_TEXT),
    (
        ClaimNotReady("nc-1", 1200.0, ("Registered", "Initialized"), kept=False),
        "NodeClaim nc-1 was not Ready 1200s after its creation (not yet Registered, "
        "Initialized); deleted it",
    ),
    (
        ClaimNotReady("nc-1", 90.5, (), kept=True),
        "NodeClaim nc-1 was not Ready 90.5s after its creation (not yet Ready); kept: pods "
        "run on its node",
    ),
    # why a trigger is deleted
    (NotNeeded(), "no pending pod needs it any more"),
    (NotNeeded("nc-1"), "NodeClaim nc-1 is Ready and no pending pod needs it"),
    (TriggerFailed(GONE), f"failed: {GONE_TEXT}"),
    (ClaimReady("nc-1"), "NodeClaim nc-1 is Ready"),
    (
        Withdrawn(Contested(datetime(2026, 11, 21, 12, 2, tzinfo=UTC))),
        "withdrawn before Karpenter made a NodeClaim for it: capacity on its way for KAI "
        "pods could take its node first; its pods wait until that is Ready, at the latest "
        "until 12:02:00",
    ),
    # what a pod is told
    (
        Invalid("gpu-intent.io/gpus: 'x' is not a GPU count"),
        "ignoring this pod: its gpu-intent annotations do not parse: gpu-intent.io/gpus: 'x' "
        "is not a GPU count",
    ),
    (
        Native(),
        "Karpenter can provision for this pod itself (whole nvidia.com/gpu); no trigger needed",
    ),
    (Unresolvable(NoDefaultPool()), NO_DEFAULT),
    (HeldBack(RateLimited()), "trigger creation rate limit reached; waiting"),
    (
        BackingOff(RETRY, 3),
        "scale-up failed (1 of 3 attempts): NodeClaim nc-1 was deleted before it was Ready; "
        "a new trigger after 2026-11-21T12:00:15Z",
    ),
    (
        GaveUp(PodRef("ml", "a"), dataclasses.replace(RETRY, attempts=3)),
        "gave up after 3 failed scale-ups; last: NodeClaim nc-1 was deleted before it was "
        "Ready. Check the NodePool (limits, instance types, capacity in its zones) and "
        "Karpenter's events, then try again: kubectl annotate pod -n ml a gpu-intent.io/retry-",
    ),
    (
        FreeGpus("nc-1", "node-1"),
        "NodeClaim nc-1 is Ready as node node-1 with GPUs free for this pod; left to the "
        "pod's scheduler",
    ),
    (
        FreeGpus("nc-1", None),
        "NodeClaim nc-1 is Ready as node (unknown) with GPUs free for this pod; left to the "
        "pod's scheduler",
    ),
    (
        Triggered(TRIGGER, 2, "gpu-standard"),
        f"trigger {TRIGGER} requests 2 nvidia.com/gpu on NodePool gpu-standard; waiting for "
        "Karpenter to create a NodeClaim (none is known yet)",
    ),
    (
        Provisioning("nc-1", "g6.xlarge", TRIGGER, 1, Decimal("0.6990562740"), 2),
        f"Karpenter NodeClaim nc-1 (g6.xlarge) is being provisioned for trigger {TRIGGER} "
        "(1 GPU, 0.7 used by 2 pod(s))",
    ),
    (
        Provisioning("nc-1", "", TRIGGER, 4, Decimal("0.001"), 1),
        f"Karpenter NodeClaim nc-1 is being provisioned for trigger {TRIGGER} "
        "(4 GPU, <0.01 used by 1 pod(s))",
    ),
    (
        NodeReady("nc-1", "node-1", TRIGGER),
        f"NodeClaim nc-1 is Ready as node node-1; removed trigger {TRIGGER} so the pod's "
        "scheduler can use the capacity",
    ),
    (
        NodeReady("nc-1", None, TRIGGER, dra_devices=4),
        "NodeClaim nc-1's node (unknown) publishes 4 GPU device(s) in ResourceSlices (DRA; "
        "Karpenter's Initialized stays Unknown, ResourceNotRegistered, as on any DRA node: "
        f"not a failure); removed trigger {TRIGGER} so the pod's scheduler can allocate its "
        "claims there",
    ),
    (
        NodeReady("nc-1", "node-1", TRIGGER, advertised=(("nvidia.com/mig-1g.5gb", "56"),)),
        "NodeClaim nc-1's node node-1 advertises nvidia.com/mig-1g.5gb=56 from its sharing "
        "layer's device plugin, not nvidia.com/gpu (Karpenter's Initialized stays Unknown, "
        f"ResourceNotRegistered: not a failure); removed trigger {TRIGGER} so the pod's "
        "scheduler can use the capacity",
    ),
    (Scheduled("node-1", "nc-1"), "scheduled on node node-1 (NodeClaim nc-1)"),
    (
        Scheduled(
            "node-1",
            "nc-1",
            advertised=(("aliyun.com/gpu-count", "4"), ("aliyun.com/gpu-mem", "60")),
        ),
        "scheduled on node node-1 (NodeClaim nc-1); its node advertises aliyun.com/gpu-count=4, "
        "aliyun.com/gpu-mem=60, not nvidia.com/gpu, so Karpenter's Initialized stays Unknown "
        "(ResourceNotRegistered): not a failure",
    ),
    (Scheduled("node-1", None), "scheduled on node node-1 (no NodeClaim known for it)"),
    (
        Scheduled("node-1", "nc-1", dra_devices=2),
        "scheduled on node node-1 (NodeClaim nc-1); its 2 GPU(s) are DRA ResourceSlice "
        "devices, so Karpenter's Initialized stays Unknown (ResourceNotRegistered): not a "
        "failure",
    ),
]


@pytest.mark.parametrize(("reason", "text"), CASES, ids=[type(r).__name__ for r, _ in CASES])
def test_each_reason_renders_to_its_text(reason: Reason, text: str) -> None:
    assert render(reason) == text


def test_every_reason_type_has_a_text_above() -> None:
    """A reason type added to `controller.reasons` needs its text here (and in
    `controller.messages`, which mypy checks is exhaustive)."""
    types = {
        obj
        for obj in vars(reasons).values()
        if inspect.isclass(obj)
        and obj.__module__ == reasons.__name__
        and dataclasses.is_dataclass(obj)
    }
    assert types == {type(r) for r, _ in CASES}


def test_every_sharing_layer_has_words_for_where_it_runs() -> None:
    assert set(WHERE) == set(LAYERS)


#: Each kind of status: its phase, Event type and reason, and what the status names
#: (trigger, NodeClaim, node).
STATUSES: list[tuple[StatusReason, Phase, str, str, tuple[str | None, ...]]] = [
    (Invalid("bad"), Phase.INVALID, "Warning", "InvalidIntent", (None, None, None)),
    (Native(), Phase.NATIVE, "Normal", "NativeProvisioning", (None, None, None)),
    (Unresolvable(TAINT), Phase.UNRESOLVABLE, "Warning", "NoNodePool", (None, None, None)),
    (HeldBack(TriggerLimit(3)), Phase.WAITING, "Normal", "ScaleUpWaiting", (None, None, None)),
    (BackingOff(RETRY, 3), Phase.WAITING, "Warning", "ScaleUpRetry", (None, None, None)),
    (GaveUp(PodRef("ml", "a"), RETRY), Phase.FAILED, "Warning", "ScaleUpFailed", (None,) * 3),
    (FreeGpus("nc-1", "n"), Phase.NODE_READY, "Normal", "NodeReady", (None, "nc-1", "n")),
    (Triggered(TRIGGER, 1, "p"), Phase.TRIGGERED, "Normal", "Triggered", (TRIGGER, None, None)),
    (
        Provisioning("nc-1", None, TRIGGER, 1, Decimal(1), 1),
        Phase.PROVISIONING,
        "Normal",
        "Provisioning",
        (TRIGGER, "nc-1", None),
    ),
    (NodeReady("nc-1", "n", TRIGGER), Phase.NODE_READY, "Normal", "NodeReady", (None, "nc-1", "n")),
    (Scheduled("n", None), Phase.SCHEDULED, "Normal", "ScaleUpComplete", (None, None, "n")),
]


@pytest.mark.parametrize(
    ("why", "phase", "kind", "reason", "names"),
    STATUSES,
    ids=[type(s[0]).__name__ for s in STATUSES],
)
def test_each_status_reason_makes_its_status_and_event(
    why: StatusReason, phase: Phase, kind: str, reason: str, names: tuple[str | None, ...]
) -> None:
    status, event = told(why, "2026-11-21T12:00:05Z")
    assert (status.phase, status.trigger, status.node_claim, status.node) == (phase, *names)
    assert (event.type, event.reason) == (kind, reason)
    assert status.message == event.message == render(why)
    assert status.since == "2026-11-21T12:00:05Z"
    # A pod told this already knows it, whatever the message and time it was told with.
    assert knows(dataclasses.replace(status, message="older words", since=None), why)
    assert not knows(None, why)
    assert not knows(ScaleUpStatus("SomethingElse"), why)


def test_the_status_helpers_the_executor_and_writer_use_say_the_same() -> None:
    raw = nodeclaim("nc-1", "gpu-standard")
    raw["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "g6.xl"
    claim = parse_nodeclaim(raw)
    assert triggered(TRIGGER, 2, "p", "s") == told(Triggered(TRIGGER, 2, "p"), "s")
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG)
    [trigger] = snapshot([], triggers=[live_trigger(first)]).triggers
    status, _ = provisioning(claim, trigger, Decimal("0.5"), 1, "s")
    assert status.message == (
        "Karpenter NodeClaim nc-1 (g6.xl) is being provisioned for trigger "
        "gpu-intent-system/gi-x (1 GPU, 0.5 used by 1 pod(s))"
    )


def test_the_planner_tells_pods_typed_reasons() -> None:
    no_default = dataclasses.replace(CONFIG, default_nodepool=None)
    pods = [
        gpu_pod("any", "1"),
        gpu_pod("new", "1", model="b200"),
        gpu_pod("big", "16", model="l4"),
    ]
    result = plan(snapshot(pods), no_default)
    whys = {str(s.ref): s.why for s in result.statuses}
    assert whys == {
        "ml/any": Unresolvable(NoDefaultPool()),
        "ml/new": Unresolvable(NoPoolOffers("b200", GPU_NAME)),
        "ml/big": HeldBack(TooManyGpus(16, 8)),
    }
    for s in result.statuses:
        assert s.why is not None and s.status.message == render(s.why)
    # A trigger no NodeClaim is known for: its pod is told Triggered.
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), CONFIG)
    waiting = plan(
        snapshot([gpu_pod("a", "1", model="l4")], triggers=[live_trigger(first)]), CONFIG
    )
    assert [s.why for s in waiting.statuses] == [Triggered(TRIGGER, 1, "gpu-standard")]


def test_a_failed_trigger_is_deleted_for_a_typed_reason() -> None:
    trigger, _ = failed_trigger()
    result = plan(snapshot([gpu_pod("a", "1", model="l4")], triggers=[trigger]), FAST)
    [delete] = result.deletes
    assert delete.why == TriggerFailed(ClaimDeleted("nc-1"))
    assert delete.reason == f"failed: {GONE_TEXT}"
    [told_] = result.statuses
    assert told_.retry is not None and told_.retry.reason == failure_text(GONE) == GONE_TEXT
    assert told_.why == BackingOff(told_.retry, FAST.retry_attempts)


def test_an_unneeded_trigger_is_deleted_for_a_typed_reason() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    [delete] = plan(snapshot([], triggers=[live_trigger(first)]), FAST).deletes
    assert (delete.why, delete.reason) == (NotNeeded(), "no pending pod needs it any more")


def test_the_pure_helpers_return_typed_reasons() -> None:
    pod, nowhere, intolerant = pending(
        gpu_pod("a", "1"),
        gpu_pod("b", "1", node_selector={"example.com/nowhere": "yes"}),
        gpu_pod("c", "1", model="a100", tolerations=[]),
    )
    pools = snapshot([]).nodepools
    missing = dataclasses.replace(CONFIG, default_nodepool="nope")
    assert resolve_pool(pod, pools, missing) == (None, DefaultPoolMissing("nope"))
    chosen, why = resolve_pool(pod, pools, CONFIG)
    assert (chosen.name if chosen else None, why) == ("gpu-standard", None)
    assert unmet_constraint(nowhere, pools["gpu-standard"]) == NOWHERE
    tainted = snapshot([], pools=[nodepool("dra", models=["a100"])]).nodepools
    assert resolve_pool(intolerant, tainted, CONFIG) == (None, OfferingPoolsRefuse("a100", TAINT))


def test_trigger_failure_says_why_as_a_typed_reason() -> None:
    first = plan(snapshot([gpu_pod("a", "1", model="l4")]), FAST)
    [trigger] = snapshot([], triggers=[live_trigger(first, node_claim="nc-1")]).triggers
    claim = parse_nodeclaim(
        nodeclaim("nc-1", "gpu-standard", launched=True, node="node-1", marked=["gi-x"])
    )
    late = NOW + timedelta(hours=1)
    deleted = trigger_failure(trigger, claim, {"nc-1": claim}, None, late, 60)
    assert deleted is not None and deleted.delete_claim == "nc-1"
    assert deleted.why == ClaimNotReady("nc-1", 60, ("Registered", "Initialized"), kept=False)
    used = {"node-1": Decimal(1)}
    kept = trigger_failure(trigger, claim, {"nc-1": claim}, None, late, 60, used)
    assert kept is not None and kept.delete_claim is None
    assert kept.why == dataclasses.replace(deleted.why, kept=True)
    assert trigger_failure(trigger, None, {}, None, late, 60) == Failure(GONE)


def test_delete_actions_render_their_reason_or_keep_their_text() -> None:
    ref = PodRef("gpu-intent-system", "gi-x")
    assert DeleteTrigger(ref, ClaimReady("nc-1")).reason == "NodeClaim nc-1 is Ready"
    assert DeleteTrigger(ref, "covered").reason == "covered"
    assert DeleteNodeClaim("nc-1", GONE).reason == GONE_TEXT
    assert DeleteNodeClaim("nc-1", "gone").reason == "gone"


def test_a_triggers_condition_message_is_the_messages_modules() -> None:
    for claim in (None, "nc-1"):
        [condition] = condition_patch("2026-11-21T12:00:05Z", claim)["status"]["conditions"]
        assert condition["message"] == trigger_condition(claim)
    assert trigger_condition(None) == (
        "gpu-intent trigger: no scheduler binds it; it stands for GPU demand Karpenter cannot see"
    )
    assert trigger_condition("nc-1") == (
        "gpu-intent trigger: NodeClaim nc-1 is being provisioned for it"
    )
