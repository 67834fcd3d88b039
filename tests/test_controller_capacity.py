"""GPU capacity accounting (controller.capacity): covers with room, free GPUs of new
NodeClaims and the nodes a new trigger excludes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from controller_fixtures import gpu_pod, nodeclaim, nodepool

from controller.capacity import (
    Room,
    claim_hosts,
    cover_holds,
    foreign_claims,
    fresh,
    held_covers,
    place_on_free,
)
from controller.model import GroupKey, PendingPod, parse_pending_pod
from controller.nodes import Nomination, parse_nodeclaim, parse_nodepool
from intent.providers import AWS

NOW = datetime(2026, 11, 21, 12, 0, 5, tzinfo=UTC)
NAME = "karpenter.k8s.aws/instance-gpu-name"
KEYS = parse_nodepool(nodepool("gpu-standard", models=["t4", "l4"])).label_keys()


def pending(name: str, gpus: str, **kwargs: object) -> PendingPod:
    parsed = parse_pending_pod(gpu_pod(name, gpus, **kwargs), KEYS)  # type: ignore[arg-type]
    assert isinstance(parsed, PendingPod)
    return parsed


def totals(free: dict[str, Room]) -> dict[str, Decimal]:
    return {name: room.total for name, room in free.items()}


def ready_claim(name: str, gpus: int, *, model: str = "l4", marked: bool = True, age: int = 5):
    obj = nodeclaim(
        name,
        "gpu-standard",
        gpus=gpus,
        model=model,
        ready=True,
        node=f"node-{name}",
        marked=["gi-old"] if marked else [],
        created=(NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    obj["metadata"]["labels"][NAME] = model
    return parse_nodeclaim(obj)


def test_a_nodeclaim_is_fresh_only_when_ready_within_the_cover_and_no_unseen_pod_is_nominated() -> (
    None
):
    assert fresh(ready_claim("a", 1), NOW, 60)
    # bought by Karpenter for native pods (no trigger's marker): its free GPUs are ours
    # too, unless it nominated a pod of a namespace that did not opt in onto it
    assert fresh(ready_claim("b", 1, marked=False), NOW, 60)
    nominated = [
        Nomination(("ml", "native"), "u1", "b", NOW),
        Nomination(("gpu-intent-system", "gi-1"), "u2", "b", NOW),
        Nomination(("other", "job"), "u3", "x", NOW),
    ]
    foreign = foreign_claims(nominated, {"ml"}, "gpu-intent-system")
    assert foreign == {"x"}
    assert fresh(ready_claim("b", 1, marked=False), NOW, 60, foreign=foreign)
    assert not fresh(ready_claim("x", 1, marked=False), NOW, 60, foreign=foreign)
    assert fresh(ready_claim("x", 1), NOW, 60, foreign=foreign)  # bought for our triggers
    assert not fresh(ready_claim("c", 1, age=61), NOW, 60)  # Ready too long ago
    # ... unless the schedulers are still binding a burst's pods (up to the max).
    binding = NOW - timedelta(seconds=3)
    assert fresh(ready_claim("c", 1, age=61), NOW, 60, 300, binding)
    assert not fresh(ready_claim("c", 1, age=300), NOW, 60, 300, binding)


def test_covers_hold_earliest_first_and_free_room_is_what_they_and_bound_pods_leave() -> None:
    claim = ready_claim("nc", 2)
    pods = [pending(n, "0.5") for n in "abcd"]
    covers = {
        ("ml", p.ref.name): ("nc", NOW - timedelta(seconds=9 - i)) for i, p in enumerate(pods)
    }
    held, free = held_covers(pods, {"nc": claim}, covers, {"node-nc": Decimal("0.5")}, NOW, 60)
    assert sorted(r.name for r in held) == ["a", "b", "c"]  # 2 - 0.5 bound = room for three
    assert free == {}  # nothing left for anyone else
    held, free = held_covers(pods[:1], {"nc": claim}, covers, {}, NOW, 60)
    assert [r.name for r in held] == ["a"] and totals(free) == {"nc": Decimal("1.5")}


def test_pods_told_nodeready_that_left_and_are_not_read_back_take_their_nodeclaims_room() -> None:
    """In a burst the reads of pods that left the pending set lag their bindings: until
    a read says where a pod went, its GPUs count on the NodeClaim of its cover."""
    claim = ready_claim("nc", 2)
    pods = [pending(n, "0.5") for n in "abc"]
    covers = {("ml", p.ref.name): ("nc", NOW - timedelta(seconds=9)) for p in pods}
    leaving = {"nc": Decimal("1"), "other": Decimal("4")}  # two pods bound, not read yet
    held, free = held_covers(pods, {"nc": claim}, covers, {}, NOW, 60, leaving=leaving)
    assert sorted(r.name for r in held) == ["a", "b"] and free == {}
    held, free = held_covers([], {"nc": claim}, {}, {}, NOW, 60, leaving=leaving)
    assert totals(free) == {"nc": Decimal("1")}


def test_a_covered_pod_of_several_vgpus_takes_only_their_memory_share_of_the_room() -> None:
    """Packed beside a pod of two 10,000 MiB vGPUs on its two A10Gs (22,888 MiB), two
    8,000 MiB pods stay covered with it: each takes what it will take once bound."""
    extra = {"gpu-intent.io/gpu-memory": "10000", "gpu-intent.io/model-memory": "22888"}
    source = ("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype")
    x2 = pending("x2", "2", model="a10g", source=source, extra_annotations=extra)
    small = {**extra, "gpu-intent.io/gpu-memory": "8000"}
    others = [pending(n, "1", model="a10g", source=source, extra_annotations=small) for n in "ab"]
    claim = ready_claim("nc", 2, model="a10g")
    since = NOW - timedelta(seconds=9)
    covers = {("ml", p.ref.name): ("nc", since) for p in (x2, *others)}
    held, free = held_covers([x2, *others], {"nc": claim}, covers, {}, NOW, 60)
    assert sorted(r.name for r in held) == ["a", "b", "x2"]
    assert round(free["nc"].total, 3) == round(Decimal(2) - Decimal(36000) / 22888, 3)


A10G = {"gpu-intent.io/model-memory": "22888"}
HAMI = ("hami:nvidia.com/gpumem", "hami:nvidia.com/use-gputype")


def hami_pod(name: str, mib: int, gpus: str = "1") -> PendingPod:
    extra = {**A10G, "gpu-intent.io/gpu-memory": str(mib)}
    return pending(name, gpus, model="a10g", source=HAMI, extra_annotations=extra)


def test_a_hami_pod_is_covered_only_where_a_card_keeps_its_memory_free() -> None:
    """HAMi spreads pods over a node's cards: four 8000 MiB pods on a 4 x A10G node
    leave 2.6 GPUs in all but about 14,900 MiB on each card. A 20,000 MiB pod told
    NodeReady there would wait out its cover; a 14,000 MiB one fits."""
    claim = ready_claim("nc", 4, model="a10g")
    used = {"node-nc": 4 * Decimal(8000) / 22888}
    big, fits = hami_pod("big", 20000), hami_pod("fits", 14000)
    since = NOW - timedelta(seconds=9)
    covers = {("ml", p.ref.name): ("nc", since) for p in (big, fits)}
    held, free = held_covers([big], {"nc": claim}, covers, used, NOW, 60)
    assert held == set() and round(free["nc"].total, 2) == Decimal("2.60")
    held, free = held_covers([fits], {"nc": claim}, covers, used, NOW, 60)
    assert [r.name for r in held] == ["fits"]
    # The cover took one card's 14,000 MiB, not 0.61 GPU of every card.
    assert sorted(round(c, 2) for c in free["nc"].cards) == [
        Decimal("0.04"),
        *[Decimal("0.65")] * 3,
    ]


def test_free_room_takes_a_pod_of_several_vgpus_on_cards_with_its_memory_free() -> None:
    """A HAMi pod of two 10,000 MiB vGPUs needs two cards with 10,000 MiB free each,
    not two free GPUs: a 4 x A10G node with 1.8 GPUs free, spread, holds it. A KAI pod
    of no model is counted in all, as before."""
    claim = ready_claim("nc", 4, model="a10g")
    x2 = hami_pod("x2", 10000, gpus="2")
    free = {"nc": Room.of(Decimal(4), Decimal("2.2"))}
    key = GroupKey("gpu-standard", "a10g")
    left, placed = place_on_free([x2], key, free, {"nc": claim}, AWS)
    assert left == [] and [c.name for _, c in placed] == ["nc"]
    assert round(free["nc"].total, 2) == round(Decimal("1.8") - 2 * Decimal(10000) / 22888, 2)
    # It took two of the four cards (0.45 each) down to 0.01: a second pair takes the
    # other two, a third finds no card.
    pair, third = hami_pod("pair", 10000, gpus="2"), hami_pod("third", 10000, gpus="2")
    left, placed = place_on_free([pair, third], key, free, {"nc": claim}, AWS)
    assert [p.ref.name for p, _ in placed] == ["pair"] and left == [third]


def test_room_counts_a_pod_of_no_hami_source_in_all() -> None:
    room = Room.of(Decimal(4), 4 * Decimal(8000) / 22888)
    kai = pending(
        "kai",
        "1",
        source=("kai:gpu-memory",),
        extra_annotations={**A10G, "gpu-intent.io/gpu-memory": "20000"},
    )
    assert room.take(kai.intent, Decimal("0.87"))  # 2.6 GPUs in all hold it
    assert round(room.total, 2) == Decimal("1.73")
    assert not room.take(hami_pod("big", 20000).intent, Decimal("0.87"))  # no card does


def test_a_cover_outlives_its_period_only_while_pods_keep_binding_and_never_past_the_max() -> None:
    def holds(age: float, bound_ago: float | None) -> bool:
        last = None if bound_ago is None else NOW - timedelta(seconds=bound_ago)
        return cover_holds(NOW - timedelta(seconds=age), NOW, 60, 300, last)

    assert holds(59, None)  # within the cover period, progress or not
    assert not holds(61, None)  # past it, no bind ever seen
    assert holds(61, 5)  # past it, but a pod we served was bound 5 s ago
    assert holds(299, 59)
    assert not holds(61, 60)  # the last bind is itself a cover period old: stalled
    assert not holds(300, 1)  # the hard limit, however busy the schedulers
    assert not cover_holds(NOW - timedelta(seconds=61), NOW, 60)  # no max: the period only


def test_held_covers_keep_a_burst_that_is_still_binding_past_the_cover_period() -> None:
    claims = {n: ready_claim(n, 1) for n in ("nc-a", "nc-b")}
    pods = [pending("a", "1"), pending("b", "1")]
    covers = {("ml", "a"): ("nc-a", NOW - timedelta(seconds=90))}
    covers[("ml", "b")] = ("nc-b", NOW - timedelta(seconds=30))
    held, _ = held_covers(pods, claims, covers, {}, NOW, 60)
    assert [r.name for r in held] == ["b"]  # a's 60 s are over
    binding = NOW - timedelta(seconds=2)
    held, _ = held_covers(pods, claims, covers, {}, NOW, 60, 300, binding)
    assert sorted(r.name for r in held) == ["a", "b"]
    stalled = NOW - timedelta(seconds=70)
    held, _ = held_covers(pods, claims, covers, {}, NOW, 60, 300, stalled)
    assert [r.name for r in held] == ["b"]


def test_free_gpus_take_the_pods_the_node_can_host_largest_first() -> None:
    l4 = ready_claim("l4-node", 2)
    t4 = ready_claim("t4-node", 4, model="t4")
    claims = {"l4-node": l4, "t4-node": t4}
    pods = [pending("small", "0.5", model="l4"), pending("whole", "1", model="l4")]
    pods.append(pending("big", "2", model="l4"))
    free = {"l4-node": Room.of(Decimal(2), Decimal(0)), "t4-node": Room.of(Decimal(4), Decimal(0))}
    left, placed = place_on_free(pods, GroupKey("gpu-standard", "l4"), free, claims, AWS)
    assert [(p.ref.name, c.name) for p, c in placed] == [("big", "l4-node")]
    assert sorted(p.ref.name for p in left) == ["small", "whole"]  # no L4 room left
    assert totals(free) == {"l4-node": Decimal(0), "t4-node": Decimal(4)}


def test_a_node_hosts_a_pod_only_where_its_selector_and_affinity_can_match() -> None:
    claim = ready_claim("nc", 1)
    key = GroupKey("gpu-standard", "l4")
    zone = "topology.kubernetes.io/zone"
    claim_in_a = parse_nodeclaim(
        {
            **nodeclaim("nc", "gpu-standard", ready=True),
            "metadata": {
                "name": "nc",
                "labels": {"karpenter.sh/nodepool": "gpu-standard", NAME: "l4", zone: "a"},
            },
        }
    )
    assert claim_hosts(claim, key, pending("p", "1", model="l4"), AWS)
    assert not claim_hosts(claim, GroupKey("gpu-large", "l4"), pending("p", "1"), AWS)
    assert not claim_hosts(claim, GroupKey("gpu-standard", "t4"), pending("p", "1"), AWS)
    elsewhere = pending("p", "1", model="l4", node_selector={zone: "b"})
    assert not claim_hosts(claim_in_a, key, elsewhere, AWS)
    here = pending("p", "1", model="l4", node_selector={zone: "a"})
    assert claim_hosts(claim_in_a, key, here, AWS)
    # A memory group needs the NodeClaim's GPUs to have that much memory.
    assert not claim_hosts(claim, GroupKey("gpu-standard", None, (), 20000), pending("m", "1"), AWS)
