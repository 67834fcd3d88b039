"""Leader election: the pure Lease decisions, the Lease API through the real client
against the sim, and two controller replicas against one sim cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import e2e_support
import pytest
from conftest import make_env
from e2e_support import EXAMPLE_PODS, TRIGGERS_NS, Env, NodeClaimCount, TriggerCount, eventually
from kubernetes_asyncio import client

from controller.leader import (
    JITTER_FACTOR,
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
    claim,
    released,
)
from controller.reconciler import Controller
from gpu_intent.demo import apply, default_examples, load_manifests
from intent.kube import Kube, KubeError, load_configuration
from sim.nodeclaims import KarpenterTimings

NOW = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
CFG = LeaderElectionConfig(namespace="ns", identity="a")


def lease_of(holder: str, *, duration: int = 15, transitions: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gpu-intent-controller", "namespace": "ns", "resourceVersion": "7"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:10.000000Z",
            "leaseTransitions": transitions,
        },
    }


# -- pure decisions ---------------------------------------------------------------------


def test_defaults_are_kubernetes_controllers_defaults() -> None:
    assert (CFG.lease_seconds, CFG.renew_deadline_seconds, CFG.retry_seconds) == (15, 10, 2)
    assert CFG.name == "gpu-intent-controller"


@pytest.mark.parametrize(
    ("lease", "renew", "retry"), [(10, 10, 2), (15, 2, 2), (15, 10, 0), (3, 2, 1.8)]
)
def test_inconsistent_timings_are_refused(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError):
        LeaderElectionConfig("ns", "a", lease_seconds=lease, renew_deadline_seconds=renew,
                             retry_seconds=retry)  # fmt: skip


def test_a_missing_lease_is_created_with_this_replica_as_holder() -> None:
    body = claim(None, CFG, NOW, unchanged_for_seconds=0)
    assert body is not None
    assert body["metadata"] == {"name": "gpu-intent-controller", "namespace": "ns"}
    assert body["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-02T03:04:05.600000Z",
        "renewTime": "2026-01-02T03:04:05.600000Z",
        "leaseTransitions": 0,
    }


def test_another_holders_lease_is_left_alone_until_it_expires_by_our_observation() -> None:
    lease = lease_of("b", duration=15)
    assert claim(lease, CFG, NOW, unchanged_for_seconds=14.9) is None
    taken = claim(lease, CFG, NOW, unchanged_for_seconds=15.0)
    assert taken is not None
    assert taken["metadata"]["resourceVersion"] == "7"  # a racing writer makes this a 409
    assert taken["spec"]["holderIdentity"] == "a"
    assert taken["spec"]["leaseTransitions"] == 4
    assert taken["spec"]["acquireTime"] == taken["spec"]["renewTime"] == micro(NOW)


def test_the_records_duration_decides_validity_not_our_own() -> None:
    lease = lease_of("b", duration=1)  # e.g. a released lease's 1 s
    assert claim(lease, CFG, NOW, unchanged_for_seconds=1.0) is not None


def test_renewing_keeps_acquire_time_and_transitions() -> None:
    body = claim(lease_of("a"), CFG, NOW, unchanged_for_seconds=100)
    assert body is not None
    assert body["spec"]["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert body["spec"]["renewTime"] == micro(NOW)
    assert body["spec"]["leaseTransitions"] == 3


def test_a_released_lease_is_taken_at_once() -> None:
    gone = released(lease_of("a"), NOW)
    assert gone["spec"]["holderIdentity"] == "" and gone["spec"]["leaseDurationSeconds"] == 1
    body = claim(gone, LeaderElectionConfig("ns", "b"), NOW, unchanged_for_seconds=0)
    assert body is not None and body["spec"]["holderIdentity"] == "b"
    assert body["spec"]["leaseTransitions"] == 4


def micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the Lease API through kubernetes_asyncio against the sim ---------------------------


FAST = {"lease_seconds": 2.0, "renew_deadline_seconds": 1.5, "retry_seconds": 0.2}


@asynccontextmanager
async def own_kube(env: Env) -> AsyncIterator[Kube]:
    """A replica's own API client (its own connections), as a second process has."""
    kube = Kube(client.ApiClient(configuration=await load_configuration(
        str(env.cluster.kubeconfig))))  # fmt: skip
    try:
        yield kube
    finally:
        await kube.close()


async def test_a_stale_resource_version_is_a_conflict_as_kube_apiserver_answers(
    env: Env,
) -> None:
    body = claim(None, LeaderElectionConfig(TRIGGERS_NS, "a"), NOW, unchanged_for_seconds=0)
    assert body is not None
    created = await env.kube.create_lease(TRIGGERS_NS, body)
    with pytest.raises(KubeError) as again:
        await env.kube.create_lease(TRIGGERS_NS, body)
    assert again.value.conflict
    read = await env.kube.get_lease(TRIGGERS_NS, "gpu-intent-controller")
    assert read is not None and read["spec"]["holderIdentity"] == "a"
    first = claim(read, LeaderElectionConfig(TRIGGERS_NS, "b"), NOW, unchanged_for_seconds=99)
    second = claim(read, LeaderElectionConfig(TRIGGERS_NS, "c"), NOW, unchanged_for_seconds=99)
    assert first is not None and second is not None
    won = await env.kube.update_lease(TRIGGERS_NS, first)
    assert int(won["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(KubeError) as lost:
        await env.kube.update_lease(TRIGGERS_NS, second)
    assert lost.value.conflict
    final = await env.kube.get_lease(TRIGGERS_NS, "gpu-intent-controller")
    assert final is not None and final["spec"]["holderIdentity"] == "b"
    assert final["spec"]["leaseTransitions"] == 1


class CountingElector(LeaderElector):
    """Counts its attempts to acquire or renew the Lease, completed or failed."""

    attempts = 0

    async def try_acquire_or_renew(self) -> bool:
        try:
            return await super().try_acquire_or_renew()
        finally:
            self.attempts += 1


async def test_of_racing_candidates_exactly_one_leads_and_a_loser_stops_at_once(
    env: Env,
) -> None:
    started: list[str] = []

    def elector(kube: Kube, identity: str) -> CountingElector:
        return CountingElector(
            kube, LeaderElectionConfig(TRIGGERS_NS, identity, release_on_cancel=False, **FAST)
        )

    async def lead(identity: str) -> None:
        started.append(identity)
        await asyncio.Event().wait()

    async with own_kube(env) as kube_b:
        a, b = elector(env.kube, "a"), elector(kube_b, "b")
        tasks = {
            "a": asyncio.create_task(a.run(lambda: lead("a"))),
            "b": asyncio.create_task(b.run(lambda: lead("b"))),
        }
        await eventually(lambda: _true(bool(started)), 5)
        # Five more attempts of each (retry periods): the other never leads meanwhile.
        floor = {e: e.attempts + 5 for e in (a, b)}
        await eventually(lambda: _true(all(e.attempts >= n for e, n in floor.items())), 5)
        assert len(started) == 1
        leader = started[0]
        assert (a if leader == "a" else b).leading.is_set()
        assert not (b if leader == "a" else a).leading.is_set()
        holder = a if leader == "a" else b
        assert holder.metrics.registry.get_sample_value("gpu_intent_leader") == 1
        # Someone else takes the Lease (an operator, a partition healed late): the
        # leader sees it on its next renewal and stops at once.
        while True:  # read-modify-write, again on 409 (the leader renews meanwhile)
            lease = await env.kube.get_lease(TRIGGERS_NS, "gpu-intent-controller")
            assert lease is not None
            lease["spec"]["holderIdentity"] = "intruder"
            try:
                await env.kube.update_lease(TRIGGERS_NS, lease)
                break
            except KubeError as e:
                assert e.conflict
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(tasks[leader], 2)
        assert holder.metrics.registry.get_sample_value("gpu_intent_leader") == 0
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def _true(value: bool) -> bool:
    return value


# -- two controller replicas against one cluster ----------------------------------------


class CountingKube(Kube):
    """A replica's adapter that counts the trigger creates answered with success (a
    create refused 409 because the trigger exists by that name duplicates nothing: a
    cancelled leader's last create can land after its successor listed the triggers)."""

    creates = 0

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        created = await super().create_pod(namespace, body)
        self.creates += 1
        return created


def replica(env: Env, kube: Kube, identity: str, *, release: bool) -> Controller:
    template = env.controller()
    elector = LeaderElector(
        kube, LeaderElectionConfig(TRIGGERS_NS, identity, release_on_cancel=release, **TAKEOVER)
    )
    return Controller(kube, template.config, elector=elector)


async def workloads(env: Env) -> list[str]:
    """Apply the examples' pods; the refs of those gpu-intent serves (not native)."""
    refs = []
    for doc in load_manifests(default_examples()):
        if doc["kind"] == "Pod":
            pod = await apply(env.api, doc)
            annotations = pod["metadata"].get("annotations") or {}
            if "resources:nvidia.com/gpu" not in annotations.get("gpu-intent.io/source", ""):
                refs.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return refs


async def settled(env: Env) -> bool:
    pods = await env.pods("ml")
    triggers = await env.pods(TRIGGERS_NS, "gpu-intent.io/trigger=true")
    return (
        len(pods) == EXAMPLE_PODS and all(p["spec"].get("nodeName") for p in pods) and not triggers
    )


def kube_for(env: Env) -> CountingKube:
    return CountingKube(client.ApiClient(configuration=env.kube.api_client.configuration))


#: NodeClaims take 7 s from creation to Ready here, against a 2 s lease: about the ratio
#: of production's (15 s lease, about 60 s to Ready on EKS). With the sim's fast timings
#: (0.2 s) a leaderless second spans whole NodeClaim lifetimes, and see docs/operations.md
#: ("Replicas and leader election") for what a gap that long costs.
LAUNCH = KarpenterTimings(
    batch_idle_seconds=0.2,
    batch_max_seconds=1.0,
    requeue_seconds=2.0,
    launch_seconds=1.5,
    register_seconds=4.0,
    initialize_seconds=1.5,
)
TAKEOVER = FAST


@pytest.mark.parametrize("release", [False, True], ids=["crash", "clean-shutdown"])
async def test_two_replicas_one_leads_and_the_other_takes_over_without_duplicates(
    tmp_path: Path, release: bool
) -> None:
    async with make_env(tmp_path, LAUNCH) as env:
        await two_replicas(env, release)


async def two_replicas(env: Env, release: bool) -> None:
    nodeclaims = NodeClaimCount(env.cluster)
    triggers = TriggerCount(env.cluster)
    kube_a, kube_b = kube_for(env), kube_for(env)
    a = replica(env, kube_a, "replica-a", release=release)
    b = replica(env, kube_b, "replica-b", release=release)
    task_a = asyncio.create_task(a.run())
    assert a.elector is not None and b.elector is not None
    await asyncio.wait_for(a.elector.leading.wait(), 5)
    task_b = asyncio.create_task(b.run())
    try:
        await asyncio.wait_for(b.ready.wait(), 5)  # the follower is ready: caches synced
        served = await workloads(env)

        async def some_trigger() -> bool:
            return bool(triggers.created)

        await eventually(some_trigger, 10)
        assert not b.elector.leading.is_set() and kube_b.creates == 0
        # The leader goes away mid scale-up.
        stopped = time.monotonic()
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        # The follower takes the Lease once it has seen the last renewal unchanged for a
        # lease duration: it sees that renewal up to one jittered retry period late, and
        # polls once per retry period (client-go's observedTime semantics).
        most = TAKEOVER["lease_seconds"] + 2 * JITTER_FACTOR * TAKEOVER["retry_seconds"]
        await asyncio.wait_for(b.elector.leading.wait(), most + 0.5)
        took = time.monotonic() - stopped
        if release:
            assert took < 0.7, took  # taken within one jittered retry period (0.2-0.44 s)
        await eventually(lambda: settled(env), 25)
        # Two passes of the leader, then a Karpenter batch (or nothing pending): a late
        # duplicate trigger or NodeClaim would show by then.
        await e2e_support.settled(env, b)
        # Each trigger admitted once (a create cancelled in flight may land uncounted).
        assert kube_a.creates + kube_b.creates <= triggers.adds == len(triggers.created)
        # No pod was ever in two triggers, and one trigger per GPU model needed (a pod that
        # arrives after its group's trigger is placed into it, not named in its serves).
        per_pod = triggers.triggers_per_pod()
        assert set(per_pod) <= set(served) and set(per_pod.values()) == {1}
        assert len(triggers.created) == 4  # a10g, l4 (two halves), l40s, l4 (DRA pod)
        # One NodeClaim per GPU needed: the 5 examples' GPUs (t4 native, a10g, l4, l40s,
        # the DRA pod's l4).
        assert len(nodeclaims.created) == 5
    finally:
        for task in (task_a, task_b):
            task.cancel()
        await asyncio.gather(task_a, task_b, return_exceptions=True)
        await nodeclaims.close()
        await triggers.close()
        await kube_a.close()
        await kube_b.close()


def test_controller_flags_default_to_leader_election_with_kubernetes_timings() -> None:
    from gpu_intent.cli import build_parser

    args = build_parser().parse_args(["controller", "--namespace", "gi"])
    assert args.leader_elect is True
    assert args.leader_election_namespace is None  # the trigger namespace
    assert args.leader_election_lease_name == "gpu-intent-controller"
    assert (
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    ) == (15.0, 10.0, 2.0)
    assert build_parser().parse_args(["controller", "--no-leader-elect"]).leader_elect is False


class LeaseOnlyKube:
    """An API with one Lease that can go unreachable (``down``)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.down = False
        self.version = 0

    def _check(self) -> None:
        if self.down:
            raise KubeError("reaching the API server", 0, "ClientConnectorError", "refused")

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return None if self.lease is None else dict(self.lease)

    async def _store(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._check()
        self.version += 1
        stored = dict(body)
        stored["metadata"] = dict(body["metadata"], resourceVersion=str(self.version))
        self.lease = stored
        return stored

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._store(body)

    async def update_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._store(body)


async def test_a_leader_that_cannot_renew_stops_acting_before_the_lease_can_expire() -> None:
    api = LeaseOnlyKube()
    elector = LeaderElector(
        cast(Kube, api), LeaderElectionConfig("ns", "a", release_on_cancel=False, **FAST)
    )
    leading = asyncio.Event()
    stopped_at: list[float] = []

    async def lead() -> None:
        leading.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped_at.append(time.monotonic())

    task = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(leading.wait(), 2)
    await eventually(lambda: _true(api.version >= 3), 5)  # created, then renewed twice
    assert not task.done()
    api.down = True
    cut = time.monotonic()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(task, 5)
    # The last renewal succeeded at most one retry period before the cut; the lead task
    # was stopped within the renew deadline of that, before the 2 s lease could expire.
    [stopped] = stopped_at
    assert stopped - cut < FAST["lease_seconds"]
    assert stopped - cut >= FAST["renew_deadline_seconds"] - FAST["retry_seconds"] - 0.05
    assert not elector.leading.is_set()
