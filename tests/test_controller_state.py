"""The informer cache's write-through expectations, the controller's memory of pods and
NodeClaims that left it, and the Karpenter rules they encode."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from controller_fixtures import gpu_pod, nodeclaim, nodepool

from controller import cache as cache_module
from controller import karpenter, model
from controller import memory as memory_module
from controller.cache import InformerCache, Kind
from controller.memory import Memory
from controller.snapshot import snapshot

NAMESPACES = Kind.NAMESPACES
NODECLAIMS = Kind.NODECLAIMS
NODEPOOLS = Kind.NODEPOOLS
PENDING_PODS = Kind.PENDING_PODS
TRIGGERS = Kind.TRIGGERS


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def caches(clock: Clock, expectation_seconds: float = 30.0) -> tuple[InformerCache, Memory]:
    """An informer cache and the controller's memory it tells, as the controller wires them."""
    memory = Memory(clock)
    return InformerCache(clock, expectation_seconds, observer=memory), memory


def trigger(name: str, rv: str) -> dict[str, object]:
    return {"metadata": {"namespace": "gpu-intent-system", "name": name, "resourceVersion": rv}}


def test_written_object_masks_the_cache_until_the_watch_shows_that_resource_version() -> None:
    clock = Clock()
    state = InformerCache(clock)
    state.replace(TRIGGERS, [])
    state.expect(TRIGGERS, trigger("t1", "7"))
    assert [o["metadata"]["name"] for o in state.objects(TRIGGERS)] == ["t1"]
    state.apply(TRIGGERS, "ADDED", trigger("t1", "7"))
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "9"))
    assert state.objects(TRIGGERS)[0]["metadata"]["resourceVersion"] == "9"
    assert state.pending_expectations() == 0


def test_the_event_of_a_version_already_held_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watch echoes each of our writes after its answer came (`expect`): that
    version is not slimmed again, and an event of the version cached is no change."""
    state = InformerCache(Clock())
    state.replace(TRIGGERS, [trigger("t1", "3")])
    slimmed: list[str] = []
    real = model.slim_trigger
    monkeypatch.setattr(
        cache_module,
        "slim_trigger",
        lambda obj: slimmed.append(obj["metadata"]["resourceVersion"]) or real(obj),
    )
    state.expect(TRIGGERS, trigger("t1", "8"))
    assert slimmed == ["8"]
    state.changes(TRIGGERS)
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "8"))  # the echo of our write
    assert slimmed == ["8"]  # taken from the expectation
    assert state.objects(TRIGGERS)[0]["metadata"]["resourceVersion"] == "8"
    version = state.version(TRIGGERS)
    state.changes(TRIGGERS)
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "8"))  # the same version again
    assert state.version(TRIGGERS) == version and state.changes(TRIGGERS) == set()
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "9"))  # someone else's write
    assert slimmed == ["8", "9"] and state.changes(TRIGGERS) == {("gpu-intent-system", "t1")}


def test_a_stale_event_does_not_undo_our_write() -> None:
    clock = Clock()
    state = InformerCache(clock)
    state.replace(TRIGGERS, [trigger("t1", "3")])
    state.expect(TRIGGERS, trigger("t1", "8"))
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "5"))  # older than our write
    assert state.objects(TRIGGERS)[0]["metadata"]["resourceVersion"] == "8"


def test_a_write_whose_event_came_first_masks_nothing() -> None:
    """The watch may deliver our write's event (and later ones) before the write's
    answer: the expectation set then must not hide those later events until its deadline
    (a NodeClaim stayed Launched in the cache for 30 s after it was Ready, and its trigger
    was never removed)."""
    state = InformerCache(Clock(), expectation_seconds=30)
    state.replace(TRIGGERS, [trigger("t1", "3")])
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "8"))  # our write, seen first
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "9"))  # and a later change
    state.expect(TRIGGERS, trigger("t1", "8"))  # the write's answer arrives last
    assert state.objects(TRIGGERS)[0]["metadata"]["resourceVersion"] == "9"
    assert state.pending_expectations() == 0
    # A later event clears an expectation too (resourceVersions that are integers).
    state.expect(TRIGGERS, trigger("t1", "12"))
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "13"))
    assert state.objects(TRIGGERS)[0]["metadata"]["resourceVersion"] == "13"
    assert state.pending_expectations() == 0
    # Opaque (non-integer) versions: only the same version clears it.
    state.expect(TRIGGERS, trigger("t1", "b"))
    state.apply(TRIGGERS, "MODIFIED", trigger("t1", "c"))
    assert state.objects(TRIGGERS)[0]["metadata"]["resourceVersion"] == "b"


def pending(name: str, rv: str) -> dict[str, object]:
    return {"metadata": {"namespace": "ml", "name": name, "resourceVersion": rv}}


def test_a_write_answered_after_the_object_left_the_watch_does_not_bring_it_back() -> None:
    """A status write to a pending pod is applied (rv 8), the pod is bound (rv 9), and
    the ``spec.nodeName=`` watch's DELETED for the binding (at rv 9, carrying the
    previous object) comes in before the write's answer: the answer must not put the
    bound pod back among the pending ones. Before, it did, for the expectation's 30 s,
    and the planner bought a trigger for a pod that was running."""
    clock = Clock()
    state = InformerCache(clock, expectation_seconds=30)
    state.replace(PENDING_PODS, [pending("p1", "5"), pending("p2", "5")])
    state.apply(PENDING_PODS, "DELETED", pending("p1", "9"))  # the binding
    state.expect(PENDING_PODS, pending("p1", "8"))  # our write's answer, last
    assert [o["metadata"]["name"] for o in state.objects(PENDING_PODS)] == ["p2"]
    assert state.pending_expectations() == 0
    # A write answered after the pod left, but applied after that (a newer version),
    # is the pod come back (deleted and created again by that name): it is seen.
    state.apply(PENDING_PODS, "DELETED", pending("p2", "10"))
    state.expect(PENDING_PODS, pending("p2", "12"))
    assert [o["metadata"]["name"] for o in state.objects(PENDING_PODS)] == ["p2"]


def test_deleted_object_stays_gone_and_expectations_expire() -> None:
    clock = Clock()
    state = InformerCache(clock, expectation_seconds=30)
    state.replace(TRIGGERS, [trigger("t1", "3")])
    state.expect_deleted(TRIGGERS, ("gpu-intent-system", "t1"))
    assert state.objects(TRIGGERS) == []
    clock.t = 31
    assert [o["metadata"]["name"] for o in state.objects(TRIGGERS)] == ["t1"]


def registered(claim: dict[str, Any]) -> dict[str, Any]:
    claim["status"]["conditions"].append({"type": "Registered", "status": "True"})
    return claim


def test_a_marked_nodeclaim_deleted_before_it_registered_is_remembered_for_its_triggers() -> None:
    """Karpenter's insufficient-capacity, launch-timeout and registration-timeout deletes
    come before a NodeClaim registers; the cache remembers which triggers they were
    bought for (from the last state it had: a DELETED event, or a relist without it),
    and forgets after `LOST_CLAIM_SECONDS`. A registered, a Ready or an unmarked
    NodeClaim going away is no such failure."""
    clock = Clock()
    state, memory = caches(clock)
    lost = nodeclaim("nc-lost", "gpu-standard", marked=["gi-a", "gi-b"])
    relisted = nodeclaim("nc-relisted", "gpu-standard", launched=True, marked=["gi-c"])
    others = [
        registered(nodeclaim("nc-registered", "gpu-standard", launched=True, marked=["gi-d"])),
        nodeclaim("nc-ready", "gpu-standard", ready=True, marked=["gi-e"]),
        nodeclaim("nc-unmarked", "gpu-standard"),
    ]
    state.replace(NODECLAIMS, [lost, relisted, *others])
    # The event's object may be older than the cache's (a selector watch sends the
    # previous one); the cache's last state decides.
    state.apply(NODECLAIMS, "DELETED", {"metadata": {"name": "nc-lost"}})
    for claim in others:
        state.apply(NODECLAIMS, "DELETED", claim)
    assert memory.lost_claims() == {"gi-a": "nc-lost", "gi-b": "nc-lost"}
    assert snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC)).lost == memory.lost_claims()
    clock.t = 100.0
    state.replace(NODECLAIMS, [])  # a relist that no longer has nc-relisted
    assert memory.lost_claims() == {"gi-a": "nc-lost", "gi-b": "nc-lost", "gi-c": "nc-relisted"}
    clock.t = memory_module.LOST_CLAIM_SECONDS + 50.0
    assert memory.lost_claims() == {"gi-c": "nc-relisted"}


def test_snapshot_skips_trigger_pods_among_pending_pods() -> None:
    state, memory = caches(Clock())
    state.replace(NODEPOOLS, [nodepool("gpu", models=["l4"])])
    pod = gpu_pod("a", "1", model="l4")
    fake_trigger = gpu_pod("gi-1", "1", model="l4")
    fake_trigger["metadata"]["labels"] = {
        "gpu-intent.io/trigger": "true",
        "app.kubernetes.io/managed-by": "gpu-intent",
    }
    state.replace(PENDING_PODS, [pod, fake_trigger])
    state.replace(NAMESPACES, [opted_in("ml")])
    snap = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    assert [p.ref.name for p in snap.pods] == ["a"]


def opted_in(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"gpu-intent.io/inject": "enabled"}}}


def test_pods_in_namespaces_that_did_not_opt_in_are_not_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, memory = caches(Clock())
    state.replace(NODEPOOLS, [nodepool("gpu", models=["l4"])])
    state.replace(
        PENDING_PODS,
        [gpu_pod("a", "1", model="l4"), gpu_pod("b", "1", model="l4", namespace="dev")],
    )
    state.replace(NAMESPACES, [opted_in("ml")])
    with caplog.at_level(logging.INFO, logger="controller.cache"):
        snap = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
        snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    assert [str(p.ref) for p in snap.pods] == ["ml/a"]
    said = [r.getMessage() for r in caplog.records if "dev/b" in r.getMessage()]
    assert len(said) == 1 and "namespace dev has not opted in" in said[0]


def test_is_provisionable_follows_karpenter() -> None:
    pod = gpu_pod("a", "1")
    assert karpenter.is_provisionable(pod)
    pod["status"]["conditions"][0]["status"] = "True"  # Karpenter checks the reason only
    assert karpenter.is_provisionable(pod)
    for mutate in (
        lambda p: p["spec"].update(nodeName="n1"),
        lambda p: p["status"].update(nominatedNodeName="n1"),
        lambda p: p["metadata"].update(ownerReferences=[{"kind": "DaemonSet", "name": "d"}]),
        lambda p: p["metadata"].update(deletionTimestamp="2026-11-21T00:00:00Z"),
        lambda p: p["status"].update(conditions=[]),
    ):
        other = gpu_pod("b", "1")
        mutate(other)
        assert not karpenter.is_provisionable(other)


def test_unsimulatable_names_unknown_resources_and_labels() -> None:
    pod = gpu_pod(
        "a",
        "1",
        resources={"requests": {"cpu": "1", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}},
        node_selector={
            "nvidia.com/gpu.product": "NVIDIA-L4",
            "topology.kubernetes.io/zone": "z",
            "team": "a",
        },
    )
    reasons = karpenter.unsimulatable(pod, nodepool_keys={"team"})
    assert reasons == [
        "requests nvidia.com/gpumem, a resource Karpenter cannot simulate",
        "selects node label nvidia.com/gpu.product, which no NodePool defines",
    ]
    assert karpenter.is_copyable_label("team", {"team"})
    assert not karpenter.is_copyable_label("kubernetes.io/hostname", set())
    assert not karpenter.is_copyable_label("karpenter.sh/unregistered", set())
    assert karpenter.is_copyable_label("karpenter.k8s.aws/instance-family", set())


BOUND_AT = "2026-11-21T00:00:07Z"


def passes_through(state: InformerCache, pod: dict[str, Any]) -> None:
    """The pending-pod watch shows ``pod`` and then loses it (bound or deleted)."""
    state.apply(PENDING_PODS, "ADDED", pod)
    state.apply(PENDING_PODS, "DELETED", pod)


def bound_pod(name: str, gpus: str, node: str, **kwargs: Any) -> dict[str, Any]:
    """What reading pod ``name`` returns once bound to ``node`` (`gpu_pod` ``kwargs``)."""
    pod = gpu_pod(name, gpus, **kwargs)
    pod["spec"]["nodeName"] = node
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": BOUND_AT}
    ]
    return pod


def test_a_pod_bound_while_being_scaled_up_for_is_remembered_until_told() -> None:
    state, memory = caches(Clock())
    state.replace(PENDING_PODS, [])
    triggered = '{"phase":"Triggered","trigger":"gpu-intent-system/gi-x"}'
    native = '{"phase":"Native"}'
    current: dict[tuple[str, str], dict[str, Any] | None] = {}
    for name, status, node in (("a", triggered, "n1"), ("b", native, "n1"), ("c", triggered, None)):
        pod = gpu_pod(name, "1", model="l4", status_annotation=status)
        if node:
            pod["spec"]["nodeName"] = node
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": BOUND_AT}
            ]
        state.apply(PENDING_PODS, "ADDED", gpu_pod(name, "1", model="l4", status_annotation=status))
        # The watch's DELETED carries the previous object, without the nodeName.
        state.apply(
            PENDING_PODS, "DELETED", gpu_pod(name, "1", model="l4", status_annotation=status)
        )
        current[("ml", name)] = pod if node else None  # what a read returns: bound, or gone
    # Pods we were scaling up for are read back, and Native ones for the GPUs they take.
    assert memory.left() == [("ml", "a"), ("ml", "b"), ("ml", "c")]
    assert not memory.scaled_up_for(("ml", "b")) and memory.scaled_up_for(("ml", "c"))
    assert snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC)).scheduled == []
    assert memory.last_bind() is None
    for key in memory.left():
        memory.resolve_left(key, current[key])
    assert memory.left() == []
    snap = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    # Only a is owed Scheduled; b (Native) is told nothing more.
    assert [(p.ref.name, p.node) for p in snap.scheduled] == [("a", "n1")]
    # The schedulers' progress, which keeps NodeReady covers while a burst binds.
    assert snap.last_bind == memory.last_bind() == datetime(2026, 11, 21, 0, 0, 7, tzinfo=UTC)
    # What they took of their node counts against the covers of that node's NodeClaim:
    # a's GPU and the native b's, which kube-scheduler put on the same new node.
    assert snap.used == {"n1": Decimal(2)}
    memory.forget_scheduled(("ml", "a"))
    after = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    assert after.scheduled == [] and after.used == {"n1": Decimal(2)}


def test_the_cache_keeps_slim_pods_that_parse_as_the_full_ones() -> None:
    full = gpu_pod("a", "0.5", model="l4", node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"})
    full["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "x" * 5000
    full["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "u"}]
    full["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    full["spec"]["containers"][0]["env"] = [{"name": "E", "value": "y" * 1000}]
    full["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3", "memory": "1Gi"}}
    full["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    slim = model.slim_pod(full)
    assert len(json.dumps(slim)) < len(json.dumps(full)) / 5
    keys = {"karpenter.k8s.aws/instance-gpu-name"}
    parsed = model.parse_pending_pod(slim, keys)
    assert parsed == model.parse_pending_pod(full, keys)
    assert isinstance(parsed, model.PendingPod)
    assert parsed.tolerations == (model.Toleration("nvidia.com/gpu", "Exists", "", ""),)
    # The pods of a workload share one copy of their slim spec in the cache; a pod whose
    # spec differs gets its own.
    again = model.slim_pod(json.loads(json.dumps(full)))
    assert again["spec"] is slim["spec"]
    other = json.loads(json.dumps(full))
    other["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    own = model.slim_pod(other)
    assert own["spec"] is not slim["spec"]
    assert own["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "4"
    assert slim["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"


def test_the_cache_keeps_slim_triggers_that_parse_as_the_full_ones() -> None:
    """A trigger as the controller creates it (its marker and node exclusion, a long ``serves``
    list), then marked: the cache keeps a fraction of it (the ``serves`` list it keeps:
    pods told nothing yet stay with the trigger it names), and it parses the same."""
    from controller.model import GroupKey, PodRef
    from controller.nodes import NodePoolInfo
    from controller.triggers import TriggerSettings, condition_patch, trigger_pod

    serves = [PodRef("ml", f"pod-{i}", f"u-{i}") for i in range(40)]
    full = trigger_pod(
        GroupKey("gpu", "l4"),
        2,
        NodePoolInfo("gpu", 0, True, (), {}, ()),
        serves,
        TriggerSettings(namespace="gi"),
        name="gi-gpu-l4-abc",
        cpu_millis=500,
        memory_bytes=2**30,
    )
    full["metadata"].update(
        uid="t-1", resourceVersion="7", creationTimestamp="2026-11-21T12:00:00Z"
    )
    full["status"] = condition_patch("2026-11-21T12:00:00Z")["status"]
    slim = model.slim_trigger(full)
    serves = len(full["metadata"]["annotations"]["gpu-intent.io/serves"])
    assert len(json.dumps(slim)) - serves < (len(json.dumps(full)) - serves) / 2
    assert "affinity" not in slim["spec"] and "tolerations" not in slim["spec"]
    assert model.parse_trigger(slim) == model.parse_trigger(full) is not None
    parsed = model.parse_trigger(slim)
    assert parsed is not None and parsed.serves == {("ml", f"pod-{i}") for i in range(40)}
    state = InformerCache(Clock())
    state.replace(TRIGGERS, [full])
    assert state.current(TRIGGERS, ("gi", "gi-gpu-l4-abc")) == slim


def test_a_pass_reparses_only_changed_pods_and_all_when_nodepools_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = cache_module.parse_pending_pod

    def counting(obj: dict[str, Any], keys: set[str]) -> Any:
        calls.append(obj["metadata"]["name"])
        return real(obj, keys)

    monkeypatch.setattr(cache_module, "parse_pending_pod", counting)
    state, memory = caches(Clock())
    state.replace(NODEPOOLS, [nodepool("gpu", models=["l4"])])
    state.replace(NAMESPACES, [opted_in("ml")])
    state.replace(PENDING_PODS, [gpu_pod(n, "1", model="l4") for n in ("a", "b", "c")])
    now = datetime(2026, 11, 21, tzinfo=UTC)
    snapshot(state, memory, now)
    assert sorted(calls) == ["a", "b", "c"]
    calls.clear()
    snapshot(state, memory, now)
    assert calls == []
    changed = gpu_pod("b", "0.5", model="l4")
    changed["metadata"]["resourceVersion"] = "2"
    state.apply(PENDING_PODS, "MODIFIED", changed)
    assert [p.intent.gpus for p in snapshot(state, memory, now).pods if p.ref.name == "b"] == [
        Decimal("0.5")
    ]
    assert calls == ["b"]
    calls.clear()
    pool = nodepool("gpu", models=["l4"])
    pool["spec"]["template"]["metadata"] = {"labels": {"team": "ml"}}
    state.replace(NODEPOOLS, [pool])
    snapshot(state, memory, now)
    assert sorted(calls) == ["a", "b", "c"]


def test_nodes_are_cached_slim_and_parsed_with_their_pool_readiness_and_label() -> None:
    state, memory = caches(Clock())
    full = {
        "metadata": {
            "name": "ip-10-1-2-3.ec2.internal",
            "resourceVersion": "7",
            "labels": {
                "karpenter.sh/nodepool": "gpu-hami",
                "gpu-intent.io/node": "ip-10-1-2-3.ec2.internal",
                "node.kubernetes.io/instance-type": "g5.xlarge",
            },
            "annotations": {"hami.io/node-nvidia-register": "x" * 4000},
        },
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
            "images": [{"names": ["x" * 100]}] * 50,
        },
    }
    state.replace(Kind.NODES, [full])
    [kept] = state.objects(Kind.NODES)
    assert "annotations" not in kept["metadata"] and "images" not in kept["status"]
    node = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC)).nodes[
        "ip-10-1-2-3.ec2.internal"
    ]
    assert (node.pool, node.ready, node.label) == (
        "gpu-hami",
        True,
        "ip-10-1-2-3.ec2.internal",
    )


def test_a_native_pod_bound_on_a_new_node_takes_its_gpus_but_moves_no_cover() -> None:
    """On the real kube-scheduler, native GPU pods took the GPUs of nodes bought for
    non-binding triggers as soon as they were Ready, while sharing-layer pods were told
    NodeReady there. Their GPUs count against that node's room; their binding is not
    the sharing schedulers' progress, so it extends no cover."""
    state, memory = caches(Clock())
    state.replace(PENDING_PODS, [])
    native = '{"phase":"Native"}'
    passes_through(state, gpu_pod("n", "2", model="l4", status_annotation=native))
    memory.resolve_left(
        ("ml", "n"), bound_pod("n", "2", "ip-1", model="l4", status_annotation=native)
    )
    snap = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    assert snap.used == {"ip-1": Decimal(2)} and snap.scheduled == []
    assert memory.last_bind() is None


def test_a_gpu_pod_bound_before_it_was_unschedulable_takes_its_gpus_and_is_owed_nothing() -> None:
    """A sharing scheduler binds a new pod at once on the cards of a node bought for pods
    it refused earlier (they wait in its unschedulable queue): in a 1,000-pod demo, HAMi
    pods created after a node turned Ready took its cards while pods told NodeReady
    there waited out their cover. Such a pod is read back for the GPUs it takes on its
    node; it is owed no status, and its binding extends no cover."""
    state, memory = caches(Clock())
    state.replace(PENDING_PODS, [])
    passes_through(state, gpu_pod("f", "1", model="a10g", unschedulable=False))
    # A pod without an intent is no GPU pod: not read back.
    plain = gpu_pod("p", "1", unschedulable=False)
    del plain["metadata"]["annotations"]
    passes_through(state, plain)
    assert memory.left() == [("ml", "f")] and not memory.scaled_up_for(("ml", "f"))
    memory.resolve_left(("ml", "f"), bound_pod("f", "1", "ip-2", model="a10g", unschedulable=False))
    snap = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    assert snap.used == {"ip-2": Decimal(1)} and snap.scheduled == []
    assert memory.last_bind() is None and memory.left() == []


def test_a_pod_told_nodeready_that_left_counts_on_its_nodeclaim_until_read_back() -> None:
    """Until the read says where it went, the GPUs of a pod told NodeReady that left the
    pending set count against the NodeClaim of its cover (`Memory.leaving`): the
    executor's record first, else its status; a pod that comes back, or is read back,
    leaves no trace."""
    state, memory = caches(Clock())
    state.replace(PENDING_PODS, [])
    ready = '{"phase":"NodeReady","nodeClaim":"nc-status","since":"2026-11-21T00:00:01Z"}'
    memory.cover([(("ml", "b"), "nc-cover")], datetime(2026, 11, 21, tzinfo=UTC))
    for name, status in (("a", ready), ("b", ready), ("c", '{"phase":"Triggered"}')):
        passes_through(state, gpu_pod(name, "0.5", model="l4", status_annotation=status))
    assert memory.leaving() == {"nc-status": Decimal("0.5"), "nc-cover": Decimal("0.5")}
    snap = snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC))
    assert snap.leaving == memory.leaving()
    memory.resolve_left(
        ("ml", "a"), bound_pod("a", "0.5", "node-nc", model="l4", status_annotation=ready)
    )
    state.apply(PENDING_PODS, "ADDED", gpu_pod("b", "0.5", model="l4", status_annotation=ready))
    assert memory.leaving() == {}
    assert snapshot(state, memory, datetime(2026, 11, 21, tzinfo=UTC)).used == {
        "node-nc": Decimal("0.5")
    }


def test_a_pod_back_in_the_pending_set_before_its_read_is_owed_its_status_when_it_leaves() -> None:
    """A pod deleted while pending and created again under its name (a StatefulSet's)
    before the read of the first one: what was noted of the first is forgotten, so the
    second, told a tracked phase, is owed its final status when bound."""
    state, memory = caches(Clock())
    state.replace(PENDING_PODS, [])
    passes_through(state, gpu_pod("web-0", "1", model="a10g", unschedulable=False))
    assert not memory.scaled_up_for(("ml", "web-0"))
    triggered = '{"phase":"Triggered","trigger":"gpu-intent-system/gi-x"}'
    passes_through(state, gpu_pod("web-0", "1", model="a10g", status_annotation=triggered))
    assert memory.scaled_up_for(("ml", "web-0"))
    memory.resolve_left(
        ("ml", "web-0"), bound_pod("web-0", "1", "ip-3", model="a10g", status_annotation=triggered)
    )
    assert [p.ref.name for p in memory.scheduled()] == ["web-0"]
