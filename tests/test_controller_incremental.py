"""The incremental pass: it must decide exactly what `plan` of the whole cache decides,
through every kind of change, while re-planning only partitions whose inputs changed."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from controller_fixtures import gpu_pod, nodeclaim, nodepool

from controller import incremental
from controller.cache import InformerCache, Kind
from controller.decisions import Plan, PlanConfig
from controller.incremental import IncrementalPlanner
from controller.memory import Memory
from controller.model import NODE_READY, PROVISIONING, GroupKey, RetryState, ScaleUpStatus
from controller.plan import plan
from controller.snapshot import snapshot
from controller.triggers import LINKED_REASON, TriggerSettings
from intent.keys import AWS_GPU_NAME_LABEL as GPU_NAME_LABEL

NAMESPACES = Kind.NAMESPACES
NODECLAIMS = Kind.NODECLAIMS
NODEPOOLS = Kind.NODEPOOLS
NOMINATIONS = Kind.NOMINATIONS
PENDING_PODS = Kind.PENDING_PODS
TRIGGERS = Kind.TRIGGERS
NS = "gpu-intent-system"
START = datetime(2026, 11, 21, 12, 0, 5, tzinfo=UTC)
MODELS = ("t4", "l4", "a100", None)
GPU_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
POOL_NAMES = ("gpu-standard", "gpu-large", None, "nowhere")


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def normal(decided: Plan) -> dict[str, Any]:
    """A plan with each kind of action as a sorted list (partitions may order them
    differently; what is decided must not differ)."""
    return {
        "links": sorted(map(repr, decided.links)),
        "statuses": sorted(map(repr, decided.statuses)),
        "deletes": sorted(map(repr, decided.deletes)),
        "creates": sorted(
            json.dumps([c.group.sort_key(), c.gpus, c.body, [str(r) for r in c.serves]])
            for c in decided.creates
        ),
        "demand": dict(decided.demand),
        "marks": sorted(map(repr, decided.marks)),
    }


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


TENSOR_FUSION = ("tensor-fusion:tensor-fusion.ai/gpu-model",)


class World:
    """A cache, mutated at random the ways the API and the controller change it."""

    def __init__(self, rng: random.Random, config: PlanConfig) -> None:
        self.rng = rng
        self.config = config
        self.clock = Clock()
        self.now = START
        self.memory = Memory(self.clock)
        self.state = InformerCache(self.clock, expectation_seconds=30, observer=self.memory)
        self.rv = 100
        self.pods: dict[str, dict[str, Any]] = {}
        self.triggers: dict[str, dict[str, Any]] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.pools = {
            "gpu-standard": nodepool("gpu-standard", models=["t4", "l4"], weight=10),
            "gpu-large": nodepool("gpu-large", models=["a100", "l4"]),
        }
        self.state.replace(NODEPOOLS, list(self.pools.values()))
        self.state.replace(NODECLAIMS, [])
        self.state.replace(TRIGGERS, [])
        self.state.replace(NOMINATIONS, [])
        self.state.replace(
            NAMESPACES,
            [{"metadata": {"name": "ml", "labels": {"gpu-intent.io/inject": "enabled"}}}],
        )
        self.state.replace(PENDING_PODS, [])
        self.serial = 0
        #: Whether writes to triggers reach the cache as expectations half the time (as
        #: the executor records them) rather than as watch events only.
        self.expecting = True

    def write_trigger(self, obj: dict[str, Any]) -> None:
        """A trigger as the API returned it after our write."""
        self.triggers[obj["metadata"]["name"]] = obj
        if self.expecting and self.rng.random() < 0.5:
            self.state.expect(TRIGGERS, obj)
        else:
            self.state.apply(TRIGGERS, "MODIFIED", obj)

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def add_pod(self, obj: dict[str, Any]) -> None:
        """A pending pod created through the API: stored, and seen by the cache."""
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.pods[obj["metadata"]["name"]] = obj
        self.state.apply(PENDING_PODS, "ADDED", obj)

    def new_pod(self) -> None:
        rng = self.rng
        self.serial += 1
        name = f"p{self.serial}"
        if rng.random() < 0.15:  # a native whole-GPU pod, which Karpenter may nominate
            model = rng.choice(["t4", "l4"])
            count = rng.choice(["1", "2"])
            obj = gpu_pod(
                name,
                count,
                model=model,
                source=("resources:nvidia.com/gpu", "nodeSelector:" + GPU_NAME_LABEL),
                resources={"limits": {"nvidia.com/gpu": count}},
                node_selector={GPU_NAME_LABEL: model},
                created=stamp(self.now - timedelta(seconds=rng.randrange(0, 30))),
            )
            obj["metadata"]["resourceVersion"] = self.next_rv()
            self.pods[name] = obj
            self.state.apply(PENDING_PODS, "ADDED", obj)
            return
        obj = gpu_pod(
            name,
            rng.choice(["0.25", "0.5", "1", "2"]),
            model=rng.choice(MODELS),
            pool=rng.choice(POOL_NAMES),
            # some of another layer than KAI's: KAI's capacity on its way may hold them
            source=rng.choice([("kai:gpu-fraction",)] * 3 + [TENSOR_FUSION]),
            namespace=rng.choice(["ml", "ml", "ml", "other"]),
            created=stamp(self.now - timedelta(seconds=rng.randrange(0, 30))),
            node_selector=rng.choice([{}, {}, {"example.com/nowhere": "x"}]),
            extra_annotations=rng.choice(
                [{}, {}, {}, {"gpu-intent.io/gpu-memory": "16000"}, {"gpu-intent.io/gpus": "x"}]
            ),
        )
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.pods[name] = obj
        self.state.apply(PENDING_PODS, "ADDED", obj)

    def tell(self, obj: dict[str, Any], status: ScaleUpStatus) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["annotations"]["gpu-intent.io/scale-up"] = status.to_annotation()
        obj["metadata"]["resourceVersion"] = self.next_rv()
        return obj

    def step(self) -> str:
        """One random change; returns its name (for failure messages)."""
        rng = self.rng
        actions = [
            "new_pod",
            "new_pod",
            "modify_pod",
            "delete_pod",
            "apply_plan",
            "apply_plan",
            "delete_trigger",
            "claim_progress",
            "nominate",
            "pool_change",
            "namespace",
            "cover",
            "expect_pod",
            "time",
            "time",
            "relist",
            "node_ready_status",
        ]
        action = rng.choice(actions)
        getattr(self, action)()
        return action

    def modify_pod(self) -> None:
        if not self.pods:
            return
        name = self.rng.choice(sorted(self.pods))
        obj = copy.deepcopy(self.pods[name])
        obj["metadata"]["annotations"]["gpu-intent.io/gpus"] = self.rng.choice(["0.5", "1", "3"])
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.pods[name] = obj
        self.state.apply(PENDING_PODS, "MODIFIED", obj)

    def delete_pod(self) -> None:
        if not self.pods:
            return
        name = self.rng.choice(sorted(self.pods))
        self.state.apply(PENDING_PODS, "DELETED", self.pods.pop(name))

    def apply_plan(self) -> None:
        """What the executor and the API do with a fresh plan: triggers created, statuses
        written (as watch events or as expectations)."""
        decided = plan(snapshot(self.state, self.memory, self.now), self.config)
        for create in decided.creates:
            self.serial += 1
            body = json.loads(json.dumps(create.body))
            name = f"gi-{self.serial}"
            body["metadata"].update(
                name=name,
                uid=f"t{self.serial}",
                resourceVersion=self.next_rv(),
                creationTimestamp=stamp(self.now),
            )
            self.write_trigger(body)
        for mark in decided.marks:
            if mark.ref.name in self.triggers:
                trigger = copy.deepcopy(self.triggers[mark.ref.name])
                reason = "Unschedulable" if mark.node_claim is None else LINKED_REASON
                trigger["status"] = {
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason}]
                }
                trigger["metadata"]["resourceVersion"] = self.next_rv()
                self.write_trigger(trigger)
        for delete in decided.deletes:
            obj = self.triggers.pop(delete.ref.name, None)
            if obj is not None:
                self.state.apply(TRIGGERS, "DELETED", obj)
        for change in decided.statuses:
            obj = self.pods.get(change.ref.name)
            if obj is None:
                continue
            obj = self.tell(obj, change.status)
            self.pods[change.ref.name] = obj
            self.state.apply(PENDING_PODS, "MODIFIED", obj)

    def delete_trigger(self) -> None:
        if not self.triggers:
            return
        name = self.rng.choice(sorted(self.triggers))
        if self.rng.random() < 0.5:
            self.state.apply(TRIGGERS, "DELETED", self.triggers.pop(name))
        else:
            self.state.expect_deleted(TRIGGERS, (NS, name))

    def claim_progress(self) -> None:
        """A NodeClaim for a trigger (linked by annotation), or one moving on."""
        rng = self.rng
        if self.triggers and (not self.claims or rng.random() < 0.5):
            name = rng.choice(sorted(self.triggers))
            trigger = copy.deepcopy(self.triggers[name])
            annotations = trigger["metadata"]["annotations"]
            claim_name = f"nc-{name}" if rng.random() < 0.8 else "nc-shared"
            pool = annotations["gpu-intent.io/pool"]
            claim = nodeclaim(claim_name, pool, gpus=int(annotations["gpu-intent.io/gpus"]))
            claim["metadata"]["resourceVersion"] = self.next_rv()
            self.claims[claim_name] = claim
            self.state.apply(NODECLAIMS, "ADDED", claim)
            annotations["gpu-intent.io/nodeclaim"] = claim_name
            trigger["metadata"]["resourceVersion"] = self.next_rv()
            self.write_trigger(trigger)
        elif self.claims:
            name = rng.choice(sorted(self.claims))
            old = self.claims[name]
            pool = old["metadata"]["labels"]["karpenter.sh/nodepool"]
            gpus = int(old["spec"]["resources"]["requests"]["nvidia.com/gpu"])
            kind = rng.choice(["launched", "ready", "deleting", "gone"])
            if kind == "gone":
                self.state.apply(NODECLAIMS, "DELETED", self.claims.pop(name))
                return
            claim = nodeclaim(
                name,
                pool,
                gpus=gpus,
                launched=True,
                ready=kind == "ready",
                node=f"node-{name}" if kind == "ready" else None,
                deleting=kind == "deleting",
            )
            # launched: the instance type's labels, its GPU memory among them (KAI's pods
            # of no model may then borrow its spare GPUs, `controller.plan._borrow`)
            claim["metadata"]["labels"][GPU_MEMORY_LABEL] = rng.choice(["16384", "22888"])
            claim["metadata"]["resourceVersion"] = self.next_rv()
            self.claims[name] = claim
            self.state.apply(NODECLAIMS, "MODIFIED", claim)

    def nominate(self) -> None:
        """Karpenter's Nominated Event for a trigger, or for a pending pod (a native
        one's holds GPUs of the NodeClaim, `controller.plan.native_reserved`)."""
        if not self.claims or not (self.triggers or self.pods):
            return
        if self.pods and (not self.triggers or self.rng.random() < 0.5):
            trigger = self.pods[self.rng.choice(sorted(self.pods))]["metadata"]
        else:
            trigger = self.triggers[self.rng.choice(sorted(self.triggers))]["metadata"]
        claim = self.rng.choice(sorted(self.claims))
        self.serial += 1
        event = {
            "metadata": {"namespace": NS, "name": f"ev{self.serial}", "resourceVersion": "1"},
            "reason": "Nominated",
            "involvedObject": {
                "kind": "Pod",
                "namespace": trigger.get("namespace", NS),
                "name": trigger["name"],
                "uid": trigger.get("uid", ""),
            },
            "message": f"Pod should schedule on: nodeclaim/{claim}",
            "lastTimestamp": stamp(self.now),
        }
        self.state.apply(NOMINATIONS, "ADDED", event)

    def pool_change(self) -> None:
        name = self.rng.choice(sorted(self.pools))
        pool = nodepool(
            name,
            models=self.rng.choice([["t4", "l4"], ["a100", "l4"], ["t4", "a100", "l4"]]),
            weight=self.rng.choice([None, 5, 20]),
            ready=self.rng.random() < 0.8,
        )
        pool["metadata"]["resourceVersion"] = self.next_rv()
        self.pools[name] = pool
        self.state.apply(NODEPOOLS, "MODIFIED", pool)

    def namespace(self) -> None:
        other = {"metadata": {"name": "other", "labels": {"gpu-intent.io/inject": "enabled"}}}
        self.state.apply(NAMESPACES, self.rng.choice(["ADDED", "DELETED"]), other)

    def cover(self) -> None:
        if self.pods and self.claims:
            name = self.rng.choice(sorted(self.pods))
            claim = self.rng.choice(sorted(self.claims))
            self.memory.cover([(("ml", name), claim)], self.now)
        self.memory.expire_covers(self.now - timedelta(seconds=self.config.cover_seconds))

    def node_ready_status(self) -> None:
        """A pod told NodeReady on a NodeClaim (its cover runs out with time alone)."""
        if not self.pods or not self.claims:
            return
        name = self.rng.choice(sorted(self.pods))
        claim = self.rng.choice(sorted(self.claims))
        status = ScaleUpStatus(NODE_READY, "ready", None, claim, f"node-{claim}", stamp(self.now))
        obj = self.tell(self.pods[name], status)
        self.pods[name] = obj
        self.state.apply(PENDING_PODS, "MODIFIED", obj)

    def expect_pod(self) -> None:
        """A status write the watch has not shown yet (masks the cache for a while)."""
        if not self.pods:
            return
        name = self.rng.choice(sorted(self.pods))
        status = ScaleUpStatus(PROVISIONING, "x", f"{NS}/gi-0", "nc-0", None, stamp(self.now))
        self.state.expect(PENDING_PODS, self.tell(self.pods[name], status))

    def time(self) -> None:
        seconds = self.rng.choice([1, 5, 20, 45])
        self.now += timedelta(seconds=seconds)
        self.clock.t += seconds

    def relist(self) -> None:
        kind = self.rng.choice([PENDING_PODS, TRIGGERS, NODECLAIMS])
        objects = {PENDING_PODS: self.pods, TRIGGERS: self.triggers, NODECLAIMS: self.claims}
        self.state.replace(kind, [copy.deepcopy(o) for o in objects[kind].values()])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("max_triggers", [100, 4])
def test_every_pass_decides_what_a_fresh_plan_of_the_whole_cache_decides(
    seed: int, max_triggers: int
) -> None:
    config = PlanConfig(
        trigger=TriggerSettings(namespace=NS), default_nodepool=None, max_triggers=max_triggers
    )
    world = World(random.Random(seed), config)
    planner = IncrementalPlanner(world.state, world.memory, config)
    history = []
    for _ in range(120):
        history.append(world.step())
        got = planner.run(world.now)
        want = plan(snapshot(world.state, world.memory, world.now), config)
        assert normal(got.plan) == normal(want), history[-5:]


def steady_world() -> tuple[World, IncrementalPlanner]:
    """Pods of two models whose triggers exist and whose statuses are written."""
    config = PlanConfig(trigger=TriggerSettings(namespace=NS))
    world = World(random.Random(0), config)
    world.expecting = False
    for k, (model, pool) in enumerate([("t4", "gpu-standard"), ("a100", "gpu-large")] * 3):
        obj = gpu_pod(f"s{k}", "0.5", model=model, pool=pool)
        obj["metadata"]["resourceVersion"] = world.next_rv()
        world.pods[f"s{k}"] = obj
        world.state.apply(PENDING_PODS, "ADDED", obj)
    planner = IncrementalPlanner(world.state, world.memory, config)
    for _ in range(3):
        world.apply_plan()
    return world, planner


def test_a_pass_where_nothing_changed_plans_nothing_again() -> None:
    world, planner = steady_world()
    first = planner.run(world.now)
    assert not first.plan and first.replanned > 0
    world.time()
    again = planner.run(world.now)
    assert not again.plan
    assert again.replanned == 0
    assert again.plan.demand == first.plan.demand
    assert sum(again.phases.values()) == 6


def test_a_changed_pod_replans_its_partition_only() -> None:
    world, planner = steady_world()
    planner.run(world.now)
    obj = copy.deepcopy(world.pods["s1"])  # a100 on gpu-large
    obj["metadata"]["annotations"]["gpu-intent.io/gpus"] = "2"
    obj["metadata"]["resourceVersion"] = world.next_rv()
    world.state.apply(PENDING_PODS, "MODIFIED", obj)
    done = planner.run(world.now)
    assert done.replanned == 1
    assert normal(done.plan) == normal(
        plan(snapshot(world.state, world.memory, world.now), planner._config)
    )
    assert done.plan.creates  # 3 GPUs of a100 now: one more trigger


def test_a_cover_running_out_is_noticed_without_any_change() -> None:
    world, planner = steady_world()
    # 2 GPUs: room for the three covered 0.5-GPU pods (covers hold only as far as that).
    claim = nodeclaim("nc-ready", "gpu-standard", gpus=2, ready=True, node="n1")
    world.state.apply(NODECLAIMS, "ADDED", claim)
    for name in ("s0", "s2", "s4"):  # the t4 pods, told NodeReady: no demand while covered
        status = ScaleUpStatus(NODE_READY, "r", None, "nc-ready", "n1", stamp(world.now))
        world.state.apply(PENDING_PODS, "MODIFIED", world.tell(world.pods[name], status))
    planner.run(world.now)
    soon = world.now + timedelta(seconds=10)
    quiet = planner.run(soon)
    assert normal(quiet.plan) == normal(
        plan(snapshot(world.state, world.memory, soon), planner._config)
    )
    kai = PlanConfig().placement.kai  # the pods' layer
    assert quiet.plan.demand[GroupKey("gpu-standard", "t4", placement=kai)] == 0  # covered
    later = world.now + timedelta(seconds=61)
    expired = planner.run(later)
    assert expired.plan.demand[GroupKey("gpu-standard", "t4", placement=kai)] == Decimal("1.5")
    assert normal(expired.plan) == normal(
        plan(snapshot(world.state, world.memory, later), planner._config)
    )


def test_a_wrong_partition_guess_costs_a_whole_plan_not_a_wrong_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Split every pod into its own partition: groups then span partitions.
    monkeypatch.setattr(incremental, "partition", lambda item, pools, config: (str(item.ref), ""))
    world, planner = steady_world()
    done = planner.run(world.now)
    assert done.whole
    assert normal(done.plan) == normal(
        plan(snapshot(world.state, world.memory, world.now), planner._config)
    )


def test_triggers_of_two_partitions_on_one_nodeclaim_are_planned_together() -> None:
    world, planner = steady_world()
    names = sorted(world.triggers)
    models = {world.triggers[n]["metadata"]["annotations"]["gpu-intent.io/model"] for n in names}
    assert models == {"t4", "a100"}
    for name in names:
        trigger = copy.deepcopy(world.triggers[name])
        trigger["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = "nc-both"
        trigger["metadata"]["resourceVersion"] = world.next_rv()
        world.state.apply(TRIGGERS, "MODIFIED", trigger)
    world.state.apply(NODECLAIMS, "ADDED", nodeclaim("nc-both", "gpu-standard", gpus=1))
    done = planner.run(world.now)
    assert done.whole
    assert normal(done.plan) == normal(
        plan(snapshot(world.state, world.memory, world.now), planner._config)
    )


def test_creates_beyond_the_budget_are_planned_as_a_whole() -> None:
    config = PlanConfig(trigger=TriggerSettings(namespace=NS), max_triggers=1)
    world = World(random.Random(0), config)
    for k, model in enumerate(["t4", "a100", "l4"]):
        obj = gpu_pod(f"b{k}", "1", model=model)
        obj["metadata"]["resourceVersion"] = world.next_rv()
        world.state.apply(PENDING_PODS, "ADDED", obj)
    planner = IncrementalPlanner(world.state, world.memory, config)
    done = planner.run(world.now)
    assert done.whole
    assert len(done.plan.creates) == 1
    assert normal(done.plan) == normal(plan(snapshot(world.state, world.memory, world.now), config))


def test_at_the_trigger_cap_partitions_are_planned_apart_and_reused() -> None:
    config = PlanConfig(trigger=TriggerSettings(namespace=NS), max_triggers=1)
    world = World(random.Random(0), config)
    world.expecting = False
    for k, model in enumerate(["t4", "a100", "l4", "t4"]):
        obj = gpu_pod(f"b{k}", "1", model=model, pool="gpu-large" if model == "a100" else None)
        obj["metadata"]["resourceVersion"] = world.next_rv()
        world.pods[f"b{k}"] = obj
        world.state.apply(PENDING_PODS, "ADDED", obj)
    planner = IncrementalPlanner(world.state, world.memory, config)
    for _ in range(3):
        world.apply_plan()  # one trigger; the other pods told the limit is reached
    done = planner.run(world.now)
    assert not done.whole and not done.plan
    assert normal(done.plan) == normal(plan(snapshot(world.state, world.memory, world.now), config))
    world.time()
    assert planner.run(world.now).replanned == 0


def test_nodes_and_new_nodeclaims_bought_for_us_are_planned_as_a_whole_plan_would() -> None:
    """A Ready node of a GPU pool is labelled once (not once per partition) and new
    triggers exclude it; a NodeClaim bought for our triggers that just turned Ready
    offers its free GPUs to any group it hosts, so such passes are planned whole."""
    world, planner = steady_world()
    planner.run(world.now)
    node = {
        "metadata": {"name": "n9", "labels": {"karpenter.sh/nodepool": "gpu-standard"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    world.state.apply(Kind.NODES, "ADDED", node)
    # its NodeClaim, bought for no trigger of ours (a node waits for its NodeClaim),
    # Ready for longer than a cover: its GPUs are not free for our pods (`fresh`)
    own = nodeclaim(
        "nc-n9",
        "gpu-standard",
        model="t4",
        node="n9",
        launched=True,
        ready=True,
        created=stamp(world.now - timedelta(seconds=600)),
    )
    own["metadata"]["resourceVersion"] = world.next_rv()
    world.state.apply(NODECLAIMS, "ADDED", own)
    obj = gpu_pod("fresh", "1", model="t4", pool="gpu-standard")
    obj["metadata"]["resourceVersion"] = world.next_rv()
    world.state.apply(PENDING_PODS, "ADDED", obj)
    done = planner.run(world.now)
    assert normal(done.plan) == normal(
        plan(snapshot(world.state, world.memory, world.now), planner._config)
    )
    assert [(n.node, n.value) for n in done.plan.labels] == [("n9", "n9")]
    body = done.plan.creates[0].body
    terms = body["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]  # type: ignore[index]
    assert {"key": "gpu-intent.io/node", "operator": "DoesNotExist"} in terms["nodeSelectorTerms"][
        0
    ]["matchExpressions"]
    ready = nodeclaim(
        "nc-fresh",
        "gpu-standard",
        gpus=4,
        model="t4",
        ready=True,
        node="n8",
        marked=["gi-gone"],
        created=stamp(world.now),
    )
    world.state.apply(NODECLAIMS, "ADDED", ready)
    free = planner.run(world.now)
    assert free.whole
    assert normal(free.plan) == normal(
        plan(snapshot(world.state, world.memory, world.now), planner._config)
    )
    assert {s.status.node_claim for s in free.plan.statuses if s.status.phase == "NodeReady"} == {
        "nc-fresh"
    }


@pytest.mark.parametrize("seed", range(4))
def test_with_failures_cooldown_and_caps_every_pass_equals_a_fresh_plan(seed: int) -> None:
    """The same randomized check with the per-pool cap, the rate limit's tokens, held
    retries and group cooldowns (`controller.failures`) in play: caps couple partitions
    of one pool, tokens bound all creates, and retries and cooldowns change with time."""
    config = PlanConfig(
        trigger=TriggerSettings(namespace=NS),
        max_triggers=6,
        max_triggers_per_pool=2,
        max_gpus_per_trigger=1,
        cooldown_seconds=5,
    )
    world = World(random.Random(seed), config)
    planner = IncrementalPlanner(world.state, world.memory, config)
    rng = random.Random(seed + 100)
    history = []
    for step in range(100):
        history.append(world.step())
        if rng.random() < 0.1 and world.pods:  # a failed trigger: a held retry
            name = rng.choice(sorted(world.pods))
            at = stamp(world.now + timedelta(seconds=rng.choice([0, 3, 8])))
            world.memory.hold_retry(
                ("ml", name), RetryState(rng.choice([1, 3]), at, "failed"), world.now
            )
        if rng.random() < 0.1:  # an orphan removed: the group cools down
            model = rng.choice(["t4", "l4", "a100"])
            kai = PlanConfig().placement.kai  # the pods' layer
            group = GroupKey(rng.choice(POOL_NAMES[:2]), model, placement=kai)
            world.memory.removed(group, world.now)
        tokens = rng.choice([None, 0, 1, 3])
        got = planner.run(world.now, tokens)
        want = plan(
            dataclasses.replace(
                snapshot(world.state, world.memory, world.now), create_tokens=tokens
            ),
            config,
        )
        assert normal(got.plan) == normal(want), (step, history[-5:])


def test_a_kai_trigger_of_no_model_made_alone_withdraws_another_partitions_trigger() -> None:
    """A100 fractions triggered (no NodeClaim yet), then a memory-only KAI pod: only its
    partition creates, yet the A100 partition's trigger is withdrawn, as in a fresh
    plan (`controller.contests`)."""
    config = PlanConfig(trigger=TriggerSettings(namespace=NS))
    world = World(random.Random(0), config)
    world.expecting = False
    a100 = gpu_pod("a", "0.25", model="a100", pool="gpu-large")
    world.add_pod(a100)
    planner = IncrementalPlanner(world.state, world.memory, config)
    world.apply_plan()
    assert len(world.triggers) == 1
    assert not planner.run(world.now).plan.creates
    memory = gpu_pod("m", "0.1", extra_annotations={"gpu-intent.io/gpu-memory": "20000"})
    world.add_pod(memory)
    done = planner.run(world.now)
    want = plan(snapshot(world.state, world.memory, world.now), config)
    assert [type(d.why).__name__ for d in want.deletes] == ["Withdrawn"]
    assert normal(done.plan) == normal(want)


def _lender_gone(first: dict[str, Any], gpus: int) -> tuple[World, IncrementalPlanner]:
    """A world whose one trigger, made for ``first``, is linked to NodeClaim ``nc-1``
    (``gpus`` L4 GPUs, launched: its GPU name and memory labels set) and ``first`` gone:
    capacity on its way that no pod of its own group needs, planned once since."""
    config = PlanConfig(trigger=TriggerSettings(namespace=NS))
    world = World(random.Random(0), config)
    world.expecting = False
    world.add_pod(first)
    planner = IncrementalPlanner(world.state, world.memory, config)
    world.apply_plan()
    (name,) = world.triggers
    trigger = copy.deepcopy(world.triggers[name])
    claim = nodeclaim("nc-1", "gpu-standard", gpus=gpus, model="l4", launched=True)
    claim["metadata"]["labels"][GPU_MEMORY_LABEL] = "22888"
    claim["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] = "l4"
    claim["metadata"]["resourceVersion"] = world.next_rv()
    world.state.apply(NODECLAIMS, "ADDED", claim)
    trigger["metadata"]["annotations"]["gpu-intent.io/nodeclaim"] = "nc-1"
    trigger["metadata"]["resourceVersion"] = world.next_rv()
    world.write_trigger(trigger)
    world.state.apply(PENDING_PODS, "DELETED", world.pods.pop(first["metadata"]["name"]))
    planner.run(world.now)
    return world, planner


def _borrows_whole(world: World, planner: IncrementalPlanner, borrower: dict[str, Any]) -> None:
    """``borrower`` added to ``world`` is told of ``nc-1`` and nothing is bought, in a
    pass planned whole that equals a fresh plan."""
    world.add_pod(borrower)
    done = planner.run(world.now)
    want = plan(snapshot(world.state, world.memory, world.now), world.config)
    assert not want.creates
    name = borrower["metadata"]["name"]
    assert [(s.ref.name, s.status.node_claim) for s in want.statuses] == [(name, "nc-1")]
    assert done.whole and normal(done.plan) == normal(want)


def test_a_kai_pod_of_no_model_borrowing_another_partitions_capacity_is_planned_whole() -> None:
    """A memory-only KAI pod borrows the spare GPUs of an L4 trigger on its way whose own
    pods are gone (`controller.plan._borrow`): the two partitions are planned together,
    as in a fresh plan."""
    world, planner = _lender_gone(gpu_pod("a", "2", model="l4"), gpus=2)
    memory = gpu_pod("m", "0.1", extra_annotations={"gpu-intent.io/gpu-memory": "20000"})
    _borrows_whole(world, planner, memory)


def test_a_kai_fraction_borrowing_a_no_model_partitions_capacity_is_planned_whole() -> None:
    """KAI's L4 fractions borrow the spare GPUs of a memory-only trigger on its way whose
    own pods are gone (`controller.plan._borrow`): the two partitions are planned
    together, as in a fresh plan."""
    memory = gpu_pod("m", "0.1", extra_annotations={"gpu-intent.io/gpu-memory": "20000"})
    world, planner = _lender_gone(memory, gpus=1)
    _borrows_whole(world, planner, gpu_pod("f", "0.5", model="l4"))
