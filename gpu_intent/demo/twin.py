"""The ideal native twin of a GPU demand: the same pods written as native whole-GPU pods,
packed as tightly as a person would pack them by hand. One definition, used by the demo
(`gpu_intent.demo.need.native_need`) and by ``bench.cost`` (its side B). Purely
computational: no I/O, no awaits.

**Shares.** What a pod takes of a GPU is `controller.packing.gpu_need`, the same
measure the controller packs by: a KAI ``gpu-fraction`` as stated, a GPU memory
request as its share of the card of its model (HAMi ``nvidia.com/gpumem``,
tensor-fusion ``vram-request``, KAI ``gpu-memory``; at least 0.1 for HAMi), whole
GPUs otherwise.

**Twins** (`ideal_twins`), per (model, pool) (the intent's pool; for an intent naming
no model, ``default_nodepool``, the NodePool the controller would use):

- pods sharing a GPU (share < 1) are packed first-fit-decreasing into 1-GPU twins: a
  twin takes a pod while its shares stay within one GPU, it holds fewer than
  `HAMI_SPLIT_COUNT` HAMi pods (HAMi's device plugin splits a card into at most
  ``deviceSplitCount`` vGPUs, default 10; REFERENCE.md section 3, "Node allocatable
  advertises ``nvidia.com/gpu`` = physical GPUs x split count (default 10)") and its
  summed cpu and memory, with its GPU, still fit an instance type its pool offers for
  its model (`pool_instance_types`), so no twin is larger than an instance of its pool
  holds;
- a pod of one or more whole GPUs becomes one twin of ``ceil(share)`` GPUs, as it is
  (its GPUs must be on one node);
- a memory-only pod (GPU memory, no model) becomes one twin of ``ceil(gpus)`` whole GPUs
  asking for that memory per GPU (on AWS the required node affinity
  ``karpenter.k8s.aws/instance-gpu-memory Gt (MiB - 1)``).

Each twin asks for the summed cpu and memory requests of the pods it stands for, selects
the model as the cluster's Karpenter provider spells it
(`intent.providers.model_requirements`: AWS ``karpenter.k8s.aws/instance-gpu-name: t4``, TKE
``karpenter.k8s.tke/instance-family In [GI3X, GN7]``, ...) and the pool on
``karpenter.sh/nodepool`` when known, and tolerates what all its pods tolerate. A twin
of HAMi pods (``schedulerName: hami-scheduler``) keeps that scheduler: HAMi's webhook
sets it on every pod asking for ``nvidia.com/gpu`` (REFERENCE.md section 3), and HAMi's
scheduler gives a container with no ``gpumem`` a whole card, so the twin takes one
physical GPU per ``nvidia.com/gpu`` as it would in the HAMi cluster, not one of the ten
slots per card HAMi's device plugin advertises to kube-scheduler.

`gpus_lower_bound` sums the twins' GPUs per model: the fewest whole GPUs the demand
fits in by that packing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from controller.packing import gpu_need
from gpu_intent.demo.manifests import ANY_MODEL, NODEPOOL_LABEL
from intent.contract import Intent
from intent.keys import AWS_GPU_MEMORY_LABEL, NVIDIA_GPU
from intent.providers import AWS, ProviderProfile, model_requirements
from sim.catalog import CATALOG, InstanceType, format_quantity
from sim.karpenter import fits
from sim.requirements import nodepool_requirements
from sim.scheduling import pod_requests

#: HAMi's device plugin ``deviceSplitCount`` default: at most this many vGPUs share one
#: card (REFERENCE.md section 3, HAMi).
HAMI_SPLIT_COUNT: Final = 10
HAMI_SCHEDULER: Final = "hami-scheduler"
#: The AWS provider's per-GPU memory label (MiB), which a memory-only twin selects by there.
GPU_MEMORY_LABEL: Final = AWS_GPU_MEMORY_LABEL
#: Annotation on a twin pod listing the pods it stands for (``namespace/name``, commas).
TWIN_OF_ANNOTATION: Final = "gpu-intent.io/native-twin-of"
TWIN_IMAGE: Final = "registry.k8s.io/pause:3.10"

_ONE: Final = Decimal(1)


@dataclass(frozen=True, slots=True)
class DemandPod:
    """One pod of the demand: ``key`` (``namespace/name`` in the demo, the name in
    ``bench.cost``), its GPU ``intent`` (None: not a GPU pod) and the ``pod`` object (its
    cpu and memory requests, tolerations and scheduler are read from it)."""

    key: str
    intent: Intent | None
    pod: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Twin:
    """One native whole-GPU pod of the ideal twin.

    ``gpus`` whole ``nvidia.com/gpu``; ``share`` the GPUs its pods use (Decimal, <=
    ``gpus``); ``model`` and ``pool`` selected when not None; ``resources`` the summed
    cpu (cores) and memory (bytes) requests of ``serves`` (the `DemandPod` keys it
    stands for); ``tolerations`` those every one of them has; ``gpu_memory_mib`` (MiB
    per GPU) for a memory-only twin; ``scheduler`` its ``schedulerName`` (None: the
    default scheduler); ``hami`` how many of its pods are HAMi pods; ``provider`` the
    Karpenter provider whose labels select its model and memory."""

    gpus: int
    share: Decimal
    model: str | None
    pool: str | None
    resources: Mapping[str, Decimal]
    serves: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...] = ()
    gpu_memory_mib: int | None = None
    scheduler: str | None = None
    hami: int = 0
    provider: ProviderProfile = AWS

    def requests(self) -> dict[str, Decimal]:
        """cpu (cores), memory (bytes) and ``nvidia.com/gpu`` requests."""
        return {**self.resources, NVIDIA_GPU: Decimal(self.gpus)}

    def pod(self, name: str, namespace: str) -> dict[str, Any]:
        """The twin as a Pod manifest named ``name`` in ``namespace``: requests and
        limits ``nvidia.com/gpu`` = `gpus`, the cpu and memory of its pods, the model and
        pool node selector, the memory affinity of a memory-only twin, its pods'
        tolerations and scheduler; `TWIN_OF_ANNOTATION` lists the pods it stands for."""
        requests = {k: format_quantity(k, v) for k, v in sorted(self.resources.items())}
        requests[NVIDIA_GPU] = str(self.gpus)
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "gpu",
                    "image": TWIN_IMAGE,
                    "resources": {"requests": requests, "limits": {NVIDIA_GPU: str(self.gpus)}},
                }
            ],
        }
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        if self.scheduler:
            spec["schedulerName"] = self.scheduler
        selector: dict[str, str] = {}
        terms: list[dict[str, Any]] = []
        for r in model_requirements(self.provider, self.model, self.gpu_memory_mib):
            if r["operator"] == "In" and len(r["values"]) == 1:
                selector[r["key"]] = r["values"][0]
            else:
                terms.append(dict(r))
        if self.pool:
            selector[NODEPOOL_LABEL] = self.pool
        if selector:
            spec["nodeSelector"] = selector
        if terms:
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": terms}]
                    }
                }
            }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": {TWIN_OF_ANNOTATION: ",".join(self.serves)},
            },
            "spec": spec,
        }


@dataclass(frozen=True, slots=True)
class Ideal:
    """The ideal twin of a demand: the `Twin` pods (whole ones in input order, then the
    packed ones per (model, pool) in order of first pod), and the pods without a GPU
    intent, passed through as they are."""

    twins: tuple[Twin, ...]
    others: tuple[Mapping[str, Any], ...] = field(default=())


def cpu_memory(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """The pod's effective cpu (cores) and memory (bytes) requests, init containers
    included (`sim.scheduling.pod_requests`); none if unparsable."""
    try:
        requests = pod_requests(pod)
    except ValueError:
        return {}
    return {k: v for k, v in requests.items() if k in ("cpu", "memory") and v > 0}


def is_hami(pod: Mapping[str, Any]) -> bool:
    """The pod is scheduled by HAMi's scheduler (``schedulerName: hami-scheduler``)."""
    return (pod.get("spec") or {}).get("schedulerName") == HAMI_SCHEDULER


def _tolerations(pods: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The tolerations every one of ``pods`` has, in the first pod's order."""
    lists = [list((p.get("spec") or {}).get("tolerations") or ()) for p in pods]
    if not lists:
        return ()
    return tuple(t for t in lists[0] if all(t in other for other in lists[1:]))


def pool_instance_types(
    model: str | None,
    pool: str | None,
    nodepools: Sequence[Mapping[str, Any]],
    catalog: Sequence[InstanceType] = CATALOG,
) -> list[InstanceType]:
    """GPU instance types of ``catalog`` with ``model`` GPUs (any model when None) that
    NodePool ``pool`` offers (its requirements and labels, `nodepool_requirements`), or
    any of ``nodepools`` when ``pool`` is None; the whole catalog's when there are no
    ``nodepools`` or ``pool`` names none of them."""
    types = [it for it in catalog if it.gpu_count and (model is None or it.gpu_name == model)]
    pools = [p for p in nodepools if pool is None or p["metadata"]["name"] == pool]
    if not pools:
        return types
    reqs = [nodepool_requirements(p) for p in pools]
    return [it for it in types if any(it.requirements().intersects(r) is None for r in reqs)]


def _sum(resources: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = defaultdict(Decimal)
    for r in resources:
        for k, v in r.items():
            out[k] += v
    return dict(out)


@dataclass
class _Bin:
    share: Decimal
    members: list[DemandPod]
    resources: dict[str, Decimal]
    hami: int


def _pack(group: Sequence[tuple[Decimal, DemandPod]], types: Sequence[InstanceType]) -> list[_Bin]:
    """First-fit-decreasing of ``group`` ((share, pod), shares < 1) into 1-GPU bins: a
    bin takes a pod while the shares stay <= 1, its HAMi pods <= `HAMI_SPLIT_COUNT`,
    and its cpu and memory with one GPU fit the allocatable of one of ``types`` (no
    check when ``types`` is empty: nothing will hold the twin anyway). Ties keep input
    order."""
    bins: list[_Bin] = []
    order = sorted(range(len(group)), key=lambda i: (-group[i][0], i))
    for i in order:
        share, demand = group[i]
        resources = cpu_memory(demand.pod)
        hami = int(is_hami(demand.pod))
        for b in bins:
            if b.share + share > _ONE or b.hami + hami > HAMI_SPLIT_COUNT:
                continue
            total = _sum([b.resources, resources, {NVIDIA_GPU: _ONE}])
            if types and not any(fits(total, it.allocatable()) for it in types):
                continue
            b.share += share
            b.members.append(demand)
            b.resources = _sum([b.resources, resources])
            b.hami += hami
            break
        else:
            bins.append(_Bin(share, [demand], resources, hami))
    return bins


def ideal_twins(
    pods: Sequence[DemandPod],
    nodepools: Sequence[Mapping[str, Any]] = (),
    *,
    default_nodepool: str | None = None,
    catalog: Sequence[InstanceType] = CATALOG,
    provider: ProviderProfile = AWS,
) -> Ideal:
    """The ideal twin of ``pods`` (see the module docstring). ``nodepools``: the NodePool
    objects whose instance types bound a packed twin's size (none: the whole
    ``catalog``); ``default_nodepool``: the pool of intents that name no model;
    ``provider``: whose labels the twins select their model by (`Twin.provider`)."""
    whole: list[Twin] = []
    others: list[Mapping[str, Any]] = []
    shared: dict[tuple[str | None, str | None], list[tuple[Decimal, DemandPod]]]
    shared = defaultdict(list)
    for demand in pods:
        intent = demand.intent
        if intent is None:
            others.append(demand.pod)
            continue
        pool = intent.pool or (None if intent.model else default_nodepool)
        share = gpu_need(intent)
        memory_only = intent.model is None and bool(intent.gpu_memory_mib)
        if share < 1 and not memory_only:
            shared[(intent.model, pool)].append((share, demand))
            continue
        gpus = math.ceil(intent.gpus if memory_only else share)
        whole.append(
            Twin(
                gpus=gpus,
                share=min(intent.gpus, Decimal(gpus)),
                model=intent.model,
                pool=pool,
                resources=cpu_memory(demand.pod),
                serves=(demand.key,),
                tolerations=_tolerations([demand.pod]),
                gpu_memory_mib=intent.gpu_memory_mib if memory_only else None,
                scheduler=HAMI_SCHEDULER if is_hami(demand.pod) else None,
                hami=int(is_hami(demand.pod)),
                provider=provider,
            )
        )
    packed: list[Twin] = []
    for (model, pool), group in shared.items():
        types = pool_instance_types(model, pool, nodepools, catalog)
        for b in _pack(group, types):
            members = [m.pod for m in b.members]
            packed.append(
                Twin(
                    gpus=1,
                    share=b.share,
                    model=model,
                    pool=pool,
                    resources=b.resources,
                    serves=tuple(m.key for m in b.members),
                    tolerations=_tolerations(members),
                    scheduler=HAMI_SCHEDULER if b.hami else None,
                    hami=b.hami,
                    provider=provider,
                )
            )
    return Ideal(tuple(whole + packed), tuple(others))


def gpus_lower_bound(twins: Iterable[Twin]) -> dict[str, int]:
    """Whole GPUs per model (`ANY_MODEL` for twins naming none) of ``twins``, by model."""
    out: dict[str, int] = defaultdict(int)
    for twin in twins:
        out[twin.model or ANY_MODEL] += twin.gpus
    return dict(sorted(out.items()))
