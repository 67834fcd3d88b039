"""GPU needs and packing, pure: what a pod takes of a GPU (`gpu_need`, `gpu_use`), the
whole-GPU bins its group's pods are packed into (`pack`, best-fit-decreasing, see
`controller.plan`), and the spare GPUs of a group's live triggers those bins are placed
into first (`TriggerCapacity`).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_DOWN, Decimal
from typing import Final

from controller.model import PendingPod, TriggerInfo
from controller.placement import layers_of
from intent.contract import Intent, Source

#: Intent sources that state a share of one GPU (`gpu_need`): HAMi cores and
#: memory percentage, KAI's fraction, tensor-fusion's compute, the user's own ``gpus``.
SHARE_SOURCES = frozenset(
    {
        Source("hami", "nvidia.com/gpucores"),
        Source("hami", "nvidia.com/gpumem-percentage"),
        Source("kai", "gpu-fraction"),
        Source("tensor-fusion", "tensor-fusion.ai/compute-percent-request"),
        Source("tensor-fusion", "tensor-fusion.ai/tflops-request"),
        Source("user", "gpu-intent.io/gpus"),
        # The extended-resource layers' percent-like shares (`intent.sharing.LAYERS`).
        Source("volcano", "volcano.sh/vgpu-cores"),
        Source("volcano", "volcano.sh/vgpu-memory-percentage"),
        Source("aliyun", "aliyun.com/gpu-core.percentage"),
        Source("qgpu", "tke.cloud.tencent.com/qgpu-core"),
        Source("vcuda", "tencent.com/vcuda-core"),
    }
)


#: The least of a GPU one HAMi vGPU takes: a device holds at most ``deviceSplitCount``
#: vGPUs (default 10; HAMi's device plugin advertises ``nvidia.com/gpu`` = GPUs x 10).
#: Volcano's vGPU plugin is HAMi's, with the same default (its chart's
#: ``deviceSplitCount: 10``, docs/sources/ecosystem.md A1).
HAMI_MIN_SHARE = Decimal("0.1")
#: The layers whose device plugin splits a card into at most ten vGPUs.
_SPLIT_LAYERS: Final = frozenset({"hami", "volcano"})


#: Intents whose `gpu_need` and `spread_demand` are remembered: both are pure, and a
#: planner pass asks them of each pod many times (once per NodeClaim tried, in
#: `controller.capacity.place_on_free`), while a burst's pods share a few intents.
INTENTS_REMEMBERED: Final = 4096


@functools.lru_cache(maxsize=INTENTS_REMEMBERED)
def gpu_need(intent: Intent) -> Decimal:
    """GPUs a pod takes when packed with others (`pack`, free GPUs and
    NodeReady covers in `controller.capacity`, GPUs found used on a node): a share of one
    GPU (< 1, it can share a card), or whole GPUs (an integer, it shares none).

    - A pod that states no GPU memory: the intent's ``gpus`` (a share from its layer, or
      GPUs; a bin of ``ceil(gpus)`` may share what is left).
    - A pod that states GPU memory on several devices (``gpus`` > 1): whole GPUs,
      ``ceil(gpus)``, shared with none.
    - A pod that states GPU memory (``gpu_memory_mib``, MiB per GPU) on a card of known
      memory (``model_memory_mib``: it names the model) takes the larger of that memory's
      share of the card and the share its sharing layer states (`SHARE_SOURCES`; without
      one, the intent's ``gpus`` is a placeholder: 1 for HAMi ``gpumem`` and
      tensor-fusion ``vram-request``, 0.1 for KAI ``gpu-memory``, intent.demand). The
      layers place such pods by memory: HAMi's ``Fit`` checks ``nvidia.com/gpumem``
      against each device's free memory (pkg/device/nvidia/device.go), KAI a
      ``gpu-memory`` pod against the device's memory. A HAMi pod takes at least
      `HAMI_MIN_SHARE` (ten vGPUs to a device). A share of 1 or more is one whole GPU.
    - A pod that states GPU memory on a card of unknown memory: one whole GPU (its share
      cannot be judged: ten KAI ``gpu-memory`` pods counted 0.1 each would not fit).
    - A MIG slice pod (a ``mig`` source): the slices' share as stated, ``g`` of the
      parent's compute slices each (`intent.sharing`), whatever memory the profile names:
      a node advertises whole profiles per GPU (seven ``1g.5gb`` on an A100, not eight
      by memory). The share, rounded up to 6 digits in the annotation, is read back as
      the nearest k/7 or k/4 (`_mig_share`), so seven ``1g.5gb`` fill one GPU.
    Pure."""
    gpus = intent.gpus
    if _is_mig(intent):
        return _mig_share(gpus)
    if not intent.gpu_memory_mib:
        return gpus
    if gpus > 1:
        return Decimal(math.ceil(gpus))
    card = _card_share(intent)
    if card is None:
        return Decimal(1)
    stated = gpus if SHARE_SOURCES.intersection(intent.source) else Decimal(0)
    return min(max(stated, card), Decimal(1))


def _is_mig(intent: Intent) -> bool:
    """The intent asks for MIG slices (a ``mig`` source). Pure."""
    return any(source.where == "mig" for source in intent.source)


#: Compute slices per GPU under MIG: 7 (A100, H100, H200, B200), 4 (A30). NVIDIA MIG
#: user guide, "Supported MIG Profiles"; docs/sources/placement.md section 1.6.
MIG_SLICES: Final = (7, 4)
_MIG_QUANTUM: Final = Decimal(10) ** -20


def _mig_share(gpus: Decimal) -> Decimal:
    """``gpus`` as the fraction k/n (n in `MIG_SLICES`) it was rounded from, when it lies
    within 1e-5 of one, else as given: ``0.142858`` -> 1/7 (to 20 digits, rounded
    down). Pure."""
    for slices in MIG_SLICES:
        whole = (gpus * slices).to_integral_value()
        exact = whole / Decimal(slices)
        if whole > 0 and abs(gpus - exact) < Decimal("0.00001"):
            # 20 digits, rounded down: sums and differences of such shares stay exact in
            # Decimal's 28, so seven sevenths leave no spare and no deficit.
            return exact.quantize(_MIG_QUANTUM, rounding=ROUND_DOWN)
    return gpus


def _card_share(intent: Intent) -> Decimal | None:
    """The share of one card the intent's GPU memory (MiB per GPU) takes: at least
    `HAMI_MIN_SHARE` for HAMi and Volcano vGPU, at most one GPU; None when no memory is stated or the
    card's memory is unknown. Pure."""
    if not intent.gpu_memory_mib or not intent.model_memory_mib:
        return None
    share = Decimal(intent.gpu_memory_mib) / Decimal(intent.model_memory_mib)
    if any(source.where in _SPLIT_LAYERS for source in intent.source):
        share = max(share, HAMI_MIN_SHARE)
    return min(share, Decimal(1))


def gpu_use(intent: Intent) -> Decimal:
    """GPUs a pod found bound to a node takes of that node's GPUs (`controller.memory.Memory.used`,
    the room behind NodeReady covers and free GPUs in `controller.capacity`): its
    `gpu_need`, except for a pod that states GPU memory on several devices. Buying for
    such a pod needs ``ceil(gpus)`` whole GPUs on one node (its vGPUs go to distinct
    devices), but once bound it takes each device's memory share only, and other pods
    share those devices: HAMi's ``Fit`` places each of a container's
    ``nvidia.com/gpu`` vGPUs by ``nvidia.com/gpumem`` against a device's free memory
    (pkg/device/nvidia/device.go), tensor-fusion each of ``gpu-count`` GPUs by its
    ``vram-request``. So: ``ceil(gpus)`` x that memory's share of the card (at least
    `HAMI_MIN_SHARE` for HAMi, at most one GPU), or ``ceil(gpus)`` when the card's
    memory is unknown. Two tensor-fusion pods of two 10 GiB vGPUs on the same two L4
    cards take 2 x 2 x 0.44 of the node's GPUs, not 2 x 2. A MIG slice pod takes its
    slices' share (`gpu_need`): its memory is the profile's, not a vGPU's. Pure."""
    if not intent.gpu_memory_mib or intent.gpus <= 1 or _is_mig(intent):
        return gpu_need(intent)
    devices = Decimal(math.ceil(intent.gpus))
    card = _card_share(intent)
    return devices if card is None else devices * card


@functools.lru_cache(maxsize=INTENTS_REMEMBERED)
def spread_demand(intent: Intent) -> tuple[int, Decimal] | None:
    """For a HAMi pod (`controller.placement.layers_of` names ``hami``): (devices, the
    share of each it takes), as HAMi's scheduler places it card by card, each vGPU on a
    distinct device whose free memory holds its ``nvidia.com/gpumem`` (``Fit``,
    pkg/device/nvidia/device.go): a pod of several vGPUs its `device_shares`; one
    stating memory on one card that memory's share (`gpu_need`, at least
    `HAMI_MIN_SHARE`); one that asks whole GPUs without memory a whole card each (HAMi
    gives it all of a card's memory). None for any other pod, whose room is counted in
    all (`controller.capacity.Room`). Pure."""
    if "hami" not in layers_of(intent):
        return None
    devices = device_shares(intent)
    if devices is not None:
        return devices
    need = gpu_need(intent)
    if need < 1:
        return 1, need
    return math.ceil(need), Decimal(1)


def largest_need_first(pods: Iterable[PendingPod]) -> list[tuple[PendingPod, Decimal]]:
    """``pods`` with their `gpu_need` (GPUs), largest need first, then oldest, then by
    ref: the order packing (`pack`) and free-GPU placement
    (`controller.capacity.place_on_free`) take pods in. Pure."""
    needs = [(pod, gpu_need(pod.intent)) for pod in pods]
    needs.sort(key=lambda item: (-item[1], item[0].created or datetime.min, item[0].ref))
    return needs


def device_shares(intent: Intent) -> tuple[int, Decimal] | None:
    """For a pod that states GPU memory on several devices (``gpus`` > 1) of a card of
    known memory: (devices, the share of each it takes), as `gpu_use` counts it once
    bound; None for any other pod. Buying for it takes that many whole GPUs
    (`gpu_need`), but the rest of each card is free for other pods: HAMi's ``Fit``
    places each vGPU by its ``nvidia.com/gpumem`` against a device's free memory
    (pkg/device/nvidia/device.go), tensor-fusion each of ``gpu-count`` GPUs by its
    ``vram-request``. None for MIG slices, which are whole profiles (`gpu_need`). Pure."""
    if not intent.gpu_memory_mib or intent.gpus <= 1 or _is_mig(intent):
        return None
    card = _card_share(intent)
    if card is None or card >= 1:
        return None
    return math.ceil(intent.gpus), card


@dataclass(slots=True)
class Bin:
    """GPUs bought together: ``size`` whole GPUs, ``used`` of them by ``pods``.
    ``cards``: the spare share of each card, for a bin opened by a pod of several
    devices that share their cards (`device_shares`); empty when the spare is one
    share of the whole bin."""

    size: int
    used: Decimal
    pods: list[PendingPod]
    cards: list[Decimal] = field(default_factory=list)

    @property
    def cpu_millis(self) -> int:
        return sum(p.cpu_millis for p in self.pods)

    @property
    def memory_bytes(self) -> int:
        return sum(p.memory_bytes for p in self.pods)


def pack(pods: Iterable[PendingPod], into: Iterable[Bin] = ()) -> list[Bin]:
    """Pods' GPU needs (`gpu_need`) packed into whole-GPU bins (see `controller.plan`):
    the packing of `best_fit_decreasing` or of `fullest_bin_first`, whichever opens
    fewer GPUs (then fewer bins; best fit on a tie). ``into``: bins already open (the
    pods staying with a trigger, `controller.plan`): their spare share takes pods as a
    new bin's would, the chosen packing's pods are appended to them in place, and they
    are not returned.

    Best fit decreasing alone misses what a card's memory allows when the pods' sizes
    interlock: two HAMi pods of two 10,000 MiB vGPUs and 16 + 16 pods of 8,000 and
    6,000 MiB fill 12 A10Gs (22,888 MiB: 10,000 + 6,000 + 6,000 and 8,000 + 8,000 +
    6,000 to a card), but best fit puts an 8,000 beside each 10,000 and buys 14; in a
    160-pod demo Karpenter bought four 4-GPU nodes for them and HAMi filled three.
    """
    items = largest_need_first(pods)
    opened = list(into)
    trials = [best_fit_decreasing(items, _copies(opened))]
    if any(need < 1 for _, need in items):
        trials.append(fullest_bin_first(items, _copies(opened)))
    best = min(trials, key=lambda b: (sum(x.size for x in b[len(opened) :]), len(b)))
    for original, packed in zip(opened, best, strict=False):
        original.used, original.pods, original.cards = packed.used, packed.pods, packed.cards
    return best[len(opened) :]


def _copies(bins: Sequence[Bin]) -> list[Bin]:
    return [Bin(b.size, b.used, list(b.pods), list(b.cards)) for b in bins]


def _open(bins: list[Bin], pod: PendingPod, need: Decimal) -> None:
    """Open the bin of a pod that needs at least one whole GPU (``need`` >= 1): its
    devices' cards apart when it shares them (`device_shares`), else ``ceil(need)``
    GPUs with ``need`` used."""
    size = math.ceil(need)
    shared = device_shares(pod.intent)  # its devices are ``size``, `gpu_need`
    if shared is not None:
        devices, share = shared
        bins.append(Bin(size, devices * share, [pod], [1 - share] * devices))
    else:
        bins.append(Bin(size, need, [pod]))


def _spares(bin_: Bin, index: int) -> list[tuple[Decimal, int, int]]:
    """(spare share, ``index``, card or -1) of each place in ``bin_`` a pod may go."""
    if bin_.cards:
        return [(left, index, card) for card, left in enumerate(bin_.cards) if left > 0]
    return [(bin_.size - bin_.used, index, -1)] if bin_.size > bin_.used else []


def _put(bin_: Bin, card: int, pod: PendingPod, need: Decimal) -> None:
    bin_.used += need
    bin_.pods.append(pod)
    if card >= 0:
        bin_.cards[card] -= need


def best_fit_decreasing(items: Sequence[tuple[PendingPod, Decimal]], bins: list[Bin]) -> list[Bin]:
    """Best-fit-decreasing of ``items`` (pods with their `gpu_need`, largest first,
    `largest_need_first`) into ``bins`` (open bins first, extended in place): returns
    ``bins`` with the bins opened after them.

    A pod of a whole GPU or more opens its bin (`_open`); a fractional pod goes to the
    open place whose spare share fits it most tightly, else opens a 1-GPU bin. A pod
    that states GPU memory shares a card by that memory's share of it when its model's
    memory is known (three HAMi ``gpumem: 6000`` pods on one 22,888 MiB A10G); when it
    is not, it takes whole GPUs and shares none (KAI counts a ``gpu-memory`` pod as 0.1
    GPU, and ten such pods on one 24 GiB card would not fit), as a native whole-GPU pod
    would. A pod of several devices that share their cards (`device_shares`: HAMi
    ``nvidia.com/gpu: 2`` with ``gpumem``) opens a bin of that many GPUs whose every
    card's spare share takes pods as a 1-GPU bin's would: packed as two whole A10Gs,
    two 10,000 MiB vGPUs counted 12,888 MiB of each card as used, which HAMi gives to
    other pods (in a 1,000-pod demo a 4-GPU node ran two such pods and eight 6,000 or
    8,000 MiB pods beside them). Best fit and first fit decreasing share the 11/9 OPT +
    6/9 bound (Dosa 2007); a sorted index of spare shares makes this O(n log n)
    instead of first fit's O(n x bins). Pure but for ``bins``."""
    spare: list[tuple[Decimal, int, int]] = []  # (spare share, bin index, card or -1)
    for i, b in enumerate(bins):
        spare.extend(_spares(b, i))
    spare.sort()
    for pod, need in items:
        if need >= 1:
            _open(bins, pod, need)
            for place in _spares(bins[-1], len(bins) - 1):
                bisect.insort(spare, place)
            continue
        at = bisect.bisect_left(spare, (need, -1, -1))
        if at < len(spare):
            left, index, card = spare.pop(at)
            _put(bins[index], card, pod, need)
            if left - need > 0:
                bisect.insort(spare, (left - need, index, card))
        else:
            bins.append(Bin(1, need, [pod]))
            bisect.insort(spare, (1 - need, len(bins) - 1, -1))
    return bins


#: Most search steps `_fullest` takes to fill one place before it keeps the fullest
#: filling found so far.
FILL_STEPS: Final = 512


def fullest_bin_first(items: Sequence[tuple[PendingPod, Decimal]], bins: list[Bin]) -> list[Bin]:
    """Minimum bin slack (Gupta and Ho 1999, with the largest item first as in Fleszar
    and Hindi 2002) of ``items`` (pods with their `gpu_need`, largest first) into
    ``bins`` (open bins first, extended in place): returns ``bins`` with the bins
    opened after them.

    Pods of a whole GPU or more open their bins (`_open`) first. Then each open place
    (a bin's spare share, or a card's of a bin of several devices) in turn takes the
    set of fractional pods that fills it fullest (`_fullest`), and while pods are left a
    1-GPU bin opens for the largest and is filled the same way. Pods of one need are
    taken oldest first. Pure but for ``bins``."""
    for pod, need in items:
        if need >= 1:
            _open(bins, pod, need)
    left: dict[Decimal, list[PendingPod]] = defaultdict(list)
    for pod, need in items:
        if need < 1:
            left[need].append(pod)
    for queue in left.values():
        queue.reverse()  # pop() takes the oldest

    def fill(bin_: Bin, card: int, room: Decimal) -> None:
        for need, count in _fullest(left, room):
            for _ in range(count):
                _put(bin_, card, left[need].pop(), need)
            if not left[need]:
                del left[need]

    for index in range(len(bins)):
        for room, _, card in _spares(bins[index], index):
            fill(bins[index], card, room)
    while left:
        need = max(left)
        pod = left[need].pop()
        if not left[need]:
            del left[need]
        bins.append(Bin(1, need, [pod]))
        fill(bins[-1], -1, 1 - need)
    return bins


def _fullest(left: dict[Decimal, list[PendingPod]], room: Decimal) -> list[tuple[Decimal, int]]:
    """(need, how many) of the pods in ``left`` (by need) whose needs sum closest to
    ``room`` without passing it: a depth-first search over the distinct needs, largest
    first, at most `FILL_STEPS` steps (then the fullest found). Pure."""
    needs = sorted((n for n in left if n <= room), reverse=True)
    counts = [len(left[n]) for n in needs]
    after = [Decimal(0)] * (len(needs) + 1)  # the most the needs from i on can add
    for i in range(len(needs) - 1, -1, -1):
        after[i] = after[i + 1] + needs[i] * counts[i]
    best: list[tuple[Decimal, int]] = []
    best_sum = Decimal(0)
    chosen: list[tuple[Decimal, int]] = []
    steps = 0

    def search(i: int, total: Decimal) -> bool:
        nonlocal best, best_sum, steps
        if total > best_sum:
            best, best_sum = list(chosen), total
            if best_sum == room:
                return True
        if i == len(needs) or total + after[i] <= best_sum:
            return False
        steps += 1
        if steps > FILL_STEPS:
            return True
        need = needs[i]
        most = min(counts[i], int((room - total) / need))
        for count in range(most, -1, -1):
            if count:
                chosen.append((need, count))
            done = search(i + 1, total + need * count)
            if count:
                chosen.pop()
            if done:
                return True
        return False

    search(0, Decimal(0))
    return best


class TriggerCapacity:
    """Spare GPUs of a group's triggers, handed out in priority order: `take` gives the
    first trigger (in ``supply`` order) with at least that many spare GPUs. Triggers are
    bucketed by spare GPUs (a few distinct values), so each take costs O(distinct spare
    sizes x log triggers) instead of a scan of every trigger.

    ``claims`` (aligned with ``supply``, None where a trigger is linked to no NodeClaim)
    pools the spare of the triggers linked to one NodeClaim: their GPUs are distinct
    cards of one node (Karpenter nominated each trigger to it), so a bin no single
    trigger has room for takes theirs together (`take`, `take_from` with ``pooled``).
    Seen on the real Karpenter: HAMi bound the pods of four 1-GPU triggers of a
    ``g5.12xlarge`` elsewhere, and a pod of two vGPUs that needed 2 of its 4 spare GPUs
    got a trigger of its own, whose node came up empty."""

    def __init__(
        self, supply: Sequence[TriggerInfo], claims: Sequence[str | None] | None = None
    ) -> None:
        self._supply = supply
        self._buckets: dict[int, list[int]] = defaultdict(list)  # spare -> heap of indices
        #: Spare GPUs per trigger; a bucket entry whose spare no longer matches is stale
        #: (left by `take_from`) and skipped.
        self._spare = [trigger.gpus for trigger in supply]
        for index, trigger in enumerate(supply):
            self._buckets[trigger.gpus].append(index)  # indices ascend: already heaps
        #: The indices of the triggers linked to each NodeClaim (two or more), in
        #: ``supply`` order, and the NodeClaim of each such index.
        self._siblings: dict[str, list[int]] = {}
        self._claim_of: dict[int, str] = {}
        if claims is not None:
            linked: dict[str, list[int]] = defaultdict(list)
            for index, claim in enumerate(claims):
                if claim is not None:
                    linked[claim].append(index)
            self._siblings = {c: ix for c, ix in linked.items() if len(ix) > 1}
            self._claim_of = {i: c for c, ix in self._siblings.items() for i in ix}

    def _head(self, spare: int) -> int | None:
        """The first live index of bucket ``spare`` (stale entries dropped)."""
        heap = self._buckets[spare]
        while heap and self._spare[heap[0]] != spare:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _move(self, index: int, gpus: int) -> None:
        """Take ``gpus`` of trigger ``index``'s spare GPUs."""
        left = self._spare[index] - gpus
        self._spare[index] = left
        if left > 0:
            heapq.heappush(self._buckets[left], index)

    def take(self, gpus: int) -> TriggerInfo | None:
        """The first trigger (in ``supply`` order) with at least ``gpus`` spare GPUs, its
        spare reduced by them; else the first trigger with spare of the first NodeClaim
        whose triggers have that many together (``claims``), their spare reduced, its
        own first; None when none has."""
        best: tuple[int, int] | None = None  # (index, spare)
        for spare in list(self._buckets):
            if spare < gpus:
                continue
            head = self._head(spare)
            if head is not None and (best is None or head < best[0]):
                best = (head, spare)
        if best is None:
            for indices in sorted(self._siblings.values()):
                holder = next((i for i in indices if self._spare[i] > 0), None)
                if holder is not None and self._pool(holder, gpus):
                    return self._supply[holder]
            return None
        index, spare = best
        heapq.heappop(self._buckets[spare])
        self._move(index, gpus)
        return self._supply[index]

    def spare(self, index: int) -> int:
        """The spare GPUs trigger ``supply[index]`` has left."""
        return self._spare[index]

    def take_from(self, index: int, gpus: int, *, pooled: bool = False) -> bool:
        """Take ``gpus`` spare GPUs of trigger ``supply[index]`` itself, if it has them;
        with ``pooled``, what it lacks of the other triggers linked to its NodeClaim,
        in ``supply`` order, if they have it."""
        if self._spare[index] >= gpus:
            self._move(index, gpus)
            return True
        return pooled and self._pool(index, gpus)

    def _pool(self, index: int, gpus: int) -> bool:
        """Take ``gpus`` spare GPUs of trigger ``index`` and, for what it lacks, of the
        other triggers linked to its NodeClaim, if together they have them."""
        claim = self._claim_of.get(index)
        if claim is None:
            return False
        others = [i for i in self._siblings[claim] if i != index]
        if self._spare[index] + sum(self._spare[i] for i in others) < gpus:
            return False
        for i in (index, *others):
            part = min(gpus, self._spare[i])
            if part:
                self._move(i, part)
                gpus -= part
        return True
