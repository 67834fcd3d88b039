"""GPU capacity accounting for trigger planning: what new nodes still have room for, and
which nodes a new trigger must not count. Purely computational; `controller.plan` turns
the results into statuses and trigger specs.

- **Covers with room** (`held_covers`): pods told ``NodeReady`` on a NodeClaim stay out
  of planning for the cover period, but only as far as the NodeClaim's GPUs have room
  once the GPUs of the pods we served found bound to its node are taken off. The pods'
  schedulers place whichever pending pods they like; covered pods left without room
  count as demand again at once. A cover outlives its period while the schedulers are
  still binding pods we served (`cover_holds`), up to a hard limit.
- **Free GPUs of new nodes** (`place_on_free`): what the held covers leave of a NodeClaim
  that turned Ready within the cover period takes pending pods it can host, before any
  trigger is made: one bought for our triggers (it carries their marker,
  `controller.model.TRIGGER_MARKER_KEY`), or one Karpenter bought for native pods that
  went elsewhere, unless it nominated a pod we do not see onto it (`fresh`).
- **Refused nodes** (`nodes_to_label`): the pods a trigger stands for are Unschedulable,
  so their own scheduler refused every node that exists, even where Karpenter sees free
  ``nvidia.com/gpu`` (HAMi's device plugin advertises 10 per GPU, REFERENCE.md section
  3). Every trigger excludes the nodes carrying `controller.model.NODE_LABEL`
  (``DoesNotExist``), and every node of a GPU pool gets the label once no trigger
  Karpenter still simulates relies on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from controller import placement
from controller.model import GroupKey, PendingPod, PodRef, TriggerInfo, parse_time
from controller.nodes import NodeClaimInfo, NodeInfo, NodePoolInfo, Nomination, node_label_value
from controller.packing import gpu_use, largest_need_first, spread_demand
from controller.triggers import LINKED_REASON
from intent.contract import Intent, Phase
from intent.providers import ProviderProfile, model_requirements, requirements_admit


@dataclass(slots=True)
class Room:
    """The room a Ready NodeClaim has left for pods: ``cards``, the share of each of its
    GPUs still free (a list as long as the NodeClaim has GPUs; a share may go below 0
    when more is taken than the node has).

    Built by `of` from what is taken on the node in all, spread evenly over its cards:
    the planner knows what the pods on a node take, not which card each went to.
    HAMi's scheduler places a pod on the least used cards that hold it (its chart's
    default ``scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy: spread``:
    ``DeviceUsageList`` sorted by usage score, pkg/scheduler/policy/gpu_policy.go),
    which keeps a node's cards about even, and even cards are the worst case for a pod
    of one card: the freest card of a node holds at least the average. So a HAMi pod
    (`controller.packing.spread_demand`) fits where that many cards each have its share
    free, and takes it from the freest ones: four 8000 MiB pods on a 4 x A10G node leave
    2.6 GPUs in all but no card with 20000 MiB. Any other pod fits where its GPUs fit
    in all (its layer packs cards as it likes, `controller.packing.pack` judged that)
    and takes them evenly from every card."""

    cards: list[Decimal]

    @classmethod
    def of(cls, gpus: Decimal, taken: Decimal) -> Room:
        """The room of a NodeClaim of ``gpus`` GPUs (whole) of which ``taken`` GPUs are
        taken."""
        count = max(int(gpus), 0)
        each = taken / count if count else Decimal(0)
        return cls([Decimal(1) - each] * count)

    @property
    def total(self) -> Decimal:
        """GPUs free in all."""
        return sum(self.cards, Decimal(0))

    def take(self, intent: Intent, need: Decimal) -> bool:
        """Take what a pod of ``intent`` needs, if it fits: its `spread_demand` for a HAMi
        pod, else ``need`` GPUs in all. Returns whether it fit (nothing is taken if not)."""
        spread = spread_demand(intent)
        if spread is None:
            if need > self.total or not self.cards:
                return False
            each = need / len(self.cards)
            self.cards = [free - each for free in self.cards]
            return True
        devices, share = spread
        freest = sorted(range(len(self.cards)), key=lambda i: (-self.cards[i], i))[:devices]
        if len(freest) < devices or any(self.cards[i] < share for i in freest):
            return False
        for i in freest:
            self.cards[i] -= share
        return True


def cover_holds(
    since: datetime,
    now: datetime,
    cover: float,
    cover_max: float | None = None,
    last_bind: datetime | None = None,
) -> bool:
    """Whether a NodeReady cover given at ``since`` still holds at ``now``: for
    ``cover`` seconds, and beyond that up to ``cover_max`` seconds while the schedulers
    are making progress, that is, a pod we scaled up for was bound (``last_bind``) less
    than ``cover`` seconds ago.

    Why: a scheduler binds a burst one pod after another. After 1,000 NodeClaims turned
    Ready together, `bench.faults` saw the sim's tensor-fusion scheduler bind for 66 s
    (about 15 pods a second), and the 96 pods still pending when their 60 s cover ended
    got 63 new triggers, each a NodeClaim nobody used. A pod that its scheduler refuses
    while others keep binding is held at most ``cover_max`` seconds."""
    age = (now - since).total_seconds()
    if age < cover:
        return True
    return (
        cover_max is not None
        and age < cover_max
        and last_bind is not None
        and (now - last_bind).total_seconds() < cover
    )


def cover_of(
    pod: PendingPod,
    claims: Mapping[str, NodeClaimInfo],
    covers: Mapping[tuple[str, str], tuple[str, datetime]],
    now: datetime,
    cover: float,
    cover_max: float | None = None,
    last_bind: datetime | None = None,
) -> tuple[str, datetime] | None:
    """The NodeClaim the pod was told NodeReady on (in its status annotation, or by the
    executor's own record ``covers``: pod ``(namespace, name)`` -> (NodeClaim, when)),
    if that NodeClaim is still Ready and the cover still holds (`cover_holds`), and
    when; None when no such cover holds."""
    marks: list[tuple[str, datetime]] = []
    status = pod.status
    if status is not None and status.phase == Phase.NODE_READY and status.node_claim:
        since = parse_time(status.since)
        if since is not None:
            marks.append((status.node_claim, since))
    if (held := covers.get((pod.ref.namespace, pod.ref.name))) is not None:
        marks.append(held)
    for claim_name, since in marks:
        claim = claims.get(claim_name)
        ready = claim is not None and claim.ready and not claim.deleting
        if ready and cover_holds(since, now, cover, cover_max, last_bind):
            return claim_name, since
    return None


def fresh(
    claim: NodeClaimInfo,
    now: datetime,
    cover: float,
    cover_max: float | None = None,
    last_bind: datetime | None = None,
    foreign: Collection[str] = (),
) -> bool:
    """Whether ``claim`` turned Ready within a cover (`cover_holds` from its Ready time):
    its free GPUs are ours to place pods on. Its own pods may have been bound elsewhere
    by their scheduler, and the pods bound to it may have been covered on another
    NodeClaim: its free GPUs must stay theirs as long as their covers hold. That holds
    as well for one Karpenter bought for native pods (no trigger's marker): when
    kube-scheduler binds them to nodes bought for our triggers, KAI's session takes
    the GPUs of theirs (real run 16: two L4 NodeClaims bought again for KAI's pods came
    up empty while three such nodes had 10 GPUs free). The GPUs of native pods still
    pending that Karpenter nominated onto it are not free (`held_covers` ``reserved``),
    and one of those Karpenter nominated a pod of a namespace that did not opt in onto
    (``foreign``, `foreign_claims`) is not ours at all: that pod's GPUs are not known."""
    return (
        claim.ready
        and not claim.deleting
        and claim.ready_since is not None
        and (bool(claim.marked) or claim.name not in foreign)
        and cover_holds(claim.ready_since, now, cover, cover_max, last_bind)
    )


def foreign_claims(
    nominations: Iterable[Nomination], ours: Collection[str], triggers: str
) -> frozenset[str]:
    """The NodeClaims Karpenter nominated a pod onto (its ``Nominated`` Events,
    ``nominations``) whose namespace is neither one that opted in (``ours``) nor the
    triggers' (``triggers``): pods we never see the GPUs of. Pure."""
    return frozenset(
        n.node_claim for n in nominations if n.pod[0] not in ours and n.pod[0] != triggers
    )


def fresh_claims(
    claims: Mapping[str, NodeClaimInfo],
    now: datetime,
    cover: float,
    cover_max: float | None = None,
    last_bind: datetime | None = None,
) -> bool:
    """Whether any NodeClaim is `fresh`: its free GPUs take pending pods of any group it
    can host, and that ends with ``now`` alone. Called every pass: a NodeClaim Ready
    before any cover could hold is passed over by one comparison."""
    oldest = now - timedelta(seconds=max(cover, cover_max or 0.0))
    return any(
        c.ready_since is not None
        and c.ready_since > oldest
        and fresh(c, now, cover, cover_max, last_bind)
        for c in claims.values()
    )


def held_covers(
    pods: Iterable[PendingPod],
    claims: Mapping[str, NodeClaimInfo],
    covers: Mapping[tuple[str, str], tuple[str, datetime]],
    used: Mapping[str, Decimal],
    now: datetime,
    cover: float,
    cover_max: float | None = None,
    last_bind: datetime | None = None,
    reserved: Mapping[str, Decimal] | None = None,
    foreign: Callable[[], Collection[str]] | None = None,
    leaving: Mapping[str, Decimal] | None = None,
) -> tuple[set[PodRef], dict[str, Room]]:
    """The pods whose NodeReady cover still holds (left to their scheduler, out of
    planning), and the room still free on the `fresh` NodeClaims (name -> `Room`, only
    those with some GPUs free in all), for other pods.

    A NodeClaim's room is its GPUs (`NodeClaimInfo.gpus`) minus ``used`` (GPUs of the
    pods we served found bound to its node, by node name) minus ``reserved`` (GPUs of
    pending native pods Karpenter nominated onto it, by NodeClaim name,
    `controller.plan.native_reserved`) minus ``leaving`` (GPUs of pods told NodeReady
    on it that left the pending set and are not read back yet, by NodeClaim name,
    `controller.memory.Memory.leaving`), spread over its cards (`Room`). A cover
    (`cover_of`) holds only as far as that room goes, earliest covered first, each
    covered pod taking what it will take once bound (`Room.take` of its
    `controller.packing.gpu_use`: a pod of several vGPUs their memory share of its
    cards, as `controller.packing.pack` packed others beside it; a HAMi pod its share
    of the freest cards). ``cover``, ``cover_max``: seconds; ``last_bind``: see
    `cover_holds`; ``foreign``: the NodeClaims `fresh` passes over when no trigger's
    marker names them, asked for only when such a NodeClaim is otherwise fresh (every
    pass plans, and `foreign_claims` walks every nomination)."""
    room: dict[str, Room] = {}
    held_back = reserved or {}
    on_way = leaving or {}

    def room_of(claim: NodeClaimInfo) -> Room:
        if claim.name not in room:
            taken = used.get(claim.node_name or "", Decimal(0))
            taken += held_back.get(claim.name, Decimal(0)) + on_way.get(claim.name, Decimal(0))
            room[claim.name] = Room.of(claim.gpus, taken)
        return room[claim.name]

    by_claim: dict[str, list[tuple[datetime, PendingPod]]] = defaultdict(list)
    for pod in pods:
        if (mark := cover_of(pod, claims, covers, now, cover, cover_max, last_bind)) is not None:
            by_claim[mark[0]].append((mark[1], pod))
    held: set[PodRef] = set()
    for name, marked in by_claim.items():
        claim = claims[name]
        for _, pod in sorted(marked, key=lambda m: (m[0], m[1].ref)):
            if room_of(claim).take(pod.intent, gpu_use(pod.intent)):
                held.add(pod.ref)
    candidates = [c for c in claims.values() if fresh(c, now, cover, cover_max, last_bind)]
    if foreign is not None and any(not c.marked for c in candidates):
        passed = foreign()
        candidates = [c for c in candidates if c.marked or c.name not in passed]
    free = {c.name: room_of(c) for c in candidates}
    return held, {name: left for name, left in free.items() if left.total > 0}


def claim_hosts(
    claim: NodeClaimInfo,
    key: GroupKey,
    pod: PendingPod,
    profile: ProviderProfile,
) -> bool:
    """Whether ``pod`` of group ``key`` can run on ``claim``'s node: its pool, the
    group's model and GPU memory as the provider expresses them
    (`intent.providers.model_requirements` on ``profile``: AWS's GPU name and memory
    labels, TKE's instance family, ...) and copied selector, and the pod's own node
    selector and required node affinity, checked
    against the NodeClaim's labels (a key the NodeClaim does not carry is taken as
    satisfiable, as `controller.pools.unmet_constraint` does); and, strictly, the
    group's placement (`controller.placement.labels_meet`): a HAMi pod is never placed
    on a node without HAMi's label, where HAMi's device plugin does not run."""
    if claim.pool != key.pool:
        return False
    if not placement.labels_meet(key.placement, claim.labels):
        return False
    gpu = model_requirements(profile, key.model, key.min_memory_mib)
    if not requirements_admit(gpu, claim.admits, claim.labels):
        return False
    if not all(claim.admits(k, v) for k, v in (*key.selector, *pod.node_selector)):
        return False
    return not pod.affinity_terms or any(
        all(r.key not in claim.labels or r.admits(claim.labels[r.key]) for r in term)
        for term in pod.affinity_terms
    )


def place_on_free(
    pods: Iterable[PendingPod],
    key: GroupKey,
    free: Mapping[str, Room],
    claims: Mapping[str, NodeClaimInfo],
    profile: ProviderProfile,
    own: Mapping[tuple[str, str], str] | None = None,
) -> tuple[list[PendingPod], list[tuple[PendingPod, NodeClaimInfo]]]:
    """Place the group's pods on the free room of `fresh` NodeClaims (``free``, from
    `held_covers`; what is placed is taken out of it): largest need first
    (`controller.packing.gpu_need`), first NodeClaim by name that hosts the pod
    (`claim_hosts`) and has room for it (`Room.take`: a HAMi pod of two 10000 MiB vGPUs
    fits two A10Gs with half their memory free, not only two free GPUs). ``own``: the
    NodeClaim of ``free`` each pod's trigger is linked to, by pod (namespace, name);
    those pods take its room first, largest first, and are left to plan (with their
    trigger) where it holds them. Returns the pods left to plan and the (pod,
    NodeClaim) placements. Which NodeClaims host a pod is asked once per node
    selector and required affinity among ``pods``: a group's pods mostly share them,
    and a pass of a 1,000-pod burst asked `claim_hosts` for every pod and NodeClaim
    (625,000 calls, the planner's largest cost)."""
    left: list[PendingPod] = []
    placed: list[tuple[PendingPod, NodeClaimInfo]] = []
    names = sorted(free)
    hosts: dict[tuple[object, object], list[str]] = {}
    ordered = largest_need_first(pods)
    if own:
        rest: list[tuple[PendingPod, Decimal]] = []
        for pod, need in ordered:
            mine = own.get((pod.ref.namespace, pod.ref.name))
            if mine is not None and mine in free and free[mine].take(pod.intent, need):
                left.append(pod)
            else:
                rest.append((pod, need))
        ordered = rest
    for pod, need in ordered:
        shape = (pod.node_selector, pod.affinity_terms)
        if (hosting := hosts.get(shape)) is None:
            hosting = hosts[shape] = [n for n in names if claim_hosts(claims[n], key, pod, profile)]
        name = next((n for n in hosting if free[n].take(pod.intent, need)), None)
        if name is None:
            left.append(pod)
            continue
        placed.append((pod, claims[name]))
    return left, placed


def nodes_to_label(
    nodes: Mapping[str, NodeInfo],
    pools: Mapping[str, NodePoolInfo],
    claims: Mapping[str, NodeClaimInfo],
    triggers: Iterable[TriggerInfo],
) -> tuple[tuple[str, str], ...]:
    """The nodes of GPU NodePools to give `controller.model.NODE_LABEL` now, as (node,
    value) pairs sorted by node: every trigger excludes labelled nodes (``NODE_LABEL
    DoesNotExist``, `controller.triggers.trigger_pod`), however many there are.

    A node is excluded because the pods a trigger stands for are Unschedulable: their
    scheduler refused it (capacity freed there later reaches them through it), and one
    still initializing was bought for earlier triggers, whose GPUs the planner already
    counts as on their way (once its triggers are marked linked Karpenter no longer counts
    them on it, and would see its GPUs as free for a new trigger).

    But a node is labelled only once no trigger Karpenter still simulates relies on it: a
    trigger its NodeClaim carries the marker of (Karpenter bought it for that trigger),
    or that is linked to that NodeClaim, and that is neither marked linked
    (`controller.triggers.LINKED_REASON`, which Karpenter does not provision for) nor
    bound, nor being deleted. Labelled before, the node would stop matching that
    trigger's own affinity and Karpenter would buy it another. A trigger merely nominated
    onto the node's NodeClaim does not hold the label back: the planner did not link it
    (the NodeClaim's GPUs are held), so Karpenter must stop counting it there and buy.
    A node whose NodeClaim is not in ``claims`` (by its ``status.nodeName`` or the Node's
    NodeClaim ownerReference) waits: the NodeClaim cache may lag the Node cache (a
    relist), and labelled before its markers are known, the node could drop the very
    trigger it was bought for. Pure; costs the unlabelled nodes plus, when there are any,
    the triggers."""
    waiting = [
        node
        for node in nodes.values()
        if node.label is None
        and (pool := pools.get(node.pool or "")) is not None
        and pool.makes_gpus()
    ]
    if not waiting:
        return ()
    simulated = [
        t
        for t in triggers
        if not t.deleting and not t.node_name and t.condition_reason != LINKED_REASON
    ]
    linked = {t.node_claim for t in simulated if t.node_claim}
    names = {t.ref.name for t in simulated}
    claim_of_node = {c.node_name: c for c in claims.values() if c.node_name}
    out: list[tuple[str, str]] = []
    for node in sorted(waiting, key=lambda n: n.name):
        claim = claim_of_node.get(node.name) or claims.get(node.claim or "")
        if claim is None or claim.name in linked or claim.marked & names:
            continue
        out.append((node.name, node_label_value(node.name)))
    return tuple(out)
