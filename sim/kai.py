"""KAI-Scheduler's GPU reservation pods, as its binder makes them (pure builders).

When KAI-Scheduler binds a fractional pod (annotation ``gpu-fraction`` or ``gpu-memory``)
to a GPU, its binder holds that whole GPU with a *reservation pod*
(kai-scheduler/KAI-Scheduler ``pkg/binder/binding/resourcereservation/
resource_reservation.go``, constants in ``pkg/common/constants``):

- one per shared GPU ("GPU group"); named ``gpu-reservation-<node>-<5 random chars>`` in
  namespace ``kai-resource-reservation`` (``DefaultResourceReservationName``), labels
  ``app: kai-resource-reservation`` and ``runai-gpu-group: <group>``, annotation
  ``karpenter.sh/do-not-disrupt: "true"``, ``spec.nodeName`` set (no scheduler), one
  container ``resource-reservation`` requesting ``nvidia.com/gpu: 1``, cpu ``1m``, memory
  ``10Mi`` (limits ``nvidia.com/gpu: 1``, ``50m``, ``100Mi``);
- the reservation pod reports which GPU it got in annotation
  ``run.ai/reserve_for_gpu_index`` (the GPU's UUID; the sim writes the device index at
  creation instead of waiting for the pod to run), and the binder binds the fractional
  pod only once it has (``waitForGPUReservationPodAllocation``; on a timeout it deletes
  the reservation pod and the bind fails): the sim makes no reservation pod where the
  node's ``nvidia.com/gpu`` is all requested, since the kubelet would reject it
  (`sim.scheduler.SimScheduler._reserve`);
- the fractional pod is labelled ``runai-gpu-group: <group>`` (a pod on several devices:
  ``runai-gpu-group/<group>: <group>`` per device, ``GetMultiFractionGpuGroupLabel``)
  before it is bound;
- ``syncForPods``: a reservation pod whose group has no pod left in phase Pending or
  Running is deleted with grace period 0.

Because the reservation pod requests a whole ``nvidia.com/gpu`` and is bound,
kube-scheduler's NodeResourcesFit and Karpenter's cluster state count that GPU as used.
Not modelled: the binder refusing to create reservation pods while a scaling pod in
``kai-scale-adjust`` is unschedulable (``isScalingUp``), and its deletion of running
fractional pods whose reservation is gone (``deleteNonReservedPods``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from sim import gpushare
from sim.scheduling import is_live, is_terminal

__all__ = [
    "APP_LABEL",
    "GPU_GROUP_LABEL",
    "GPU_INDEX_ANNOTATION",
    "RESERVATION_NAMESPACE",
    "group_labels",
    "group_role",
    "groups_by_device",
    "is_fractional",
    "pod_groups",
    "reservation_pod",
    "stale_reservations",
]

RESERVATION_NAMESPACE: Final = "kai-resource-reservation"
GPU_GROUP_LABEL: Final = "runai-gpu-group"
_MULTI_GROUP_PREFIX: Final = GPU_GROUP_LABEL + "/"
GPU_INDEX_ANNOTATION: Final = "run.ai/reserve_for_gpu_index"
#: ``app`` label value of reservation pods (``ResourceReservationAppLabelValue``).
APP_LABEL: Final = "kai-resource-reservation"

Obj = Mapping[str, Any]


def is_fractional(pod: Obj) -> bool:
    """A ``kai-scheduler`` pod asking for part of a GPU (``gpu-fraction``/``gpu-memory``)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return ((pod.get("spec") or {}).get("schedulerName") == "kai-scheduler") and (
        gpushare.KAI_FRACTION in annotations or gpushare.KAI_MEMORY in annotations
    )


def pod_groups(pod: Obj) -> list[str]:
    """The GPU groups a pod belongs to (``resources.GetGpuGroups``)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    groups = [labels[GPU_GROUP_LABEL]] if labels.get(GPU_GROUP_LABEL) else []
    groups += [k[len(_MULTI_GROUP_PREFIX) :] for k in labels if k.startswith(_MULTI_GROUP_PREFIX)]
    return groups


def group_labels(groups: Sequence[str]) -> dict[str, str]:
    """Labels tying a fractional pod to its ``groups`` (one per device it shares)."""
    if len(groups) == 1:
        return {GPU_GROUP_LABEL: groups[0]}
    return {_MULTI_GROUP_PREFIX + g: g for g in groups}


def groups_by_device(pods: Iterable[Obj], node: str) -> dict[int, str]:
    """Device index -> GPU group of the live reservation pods bound to ``node``: not
    being deleted, and not rejected by the kubelet (phase Failed: it never got its GPU,
    and the real binder deletes it when its wait times out)."""
    out: dict[int, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (
            meta.get("namespace") != RESERVATION_NAMESPACE
            or (pod.get("spec") or {}).get("nodeName") != node
            or meta.get("deletionTimestamp")
            or is_terminal(pod)
        ):
            continue
        group = (meta.get("labels") or {}).get(GPU_GROUP_LABEL)
        try:
            index = int((meta.get("annotations") or {}).get(GPU_INDEX_ANNOTATION, ""))
        except ValueError:
            continue
        if group:
            out.setdefault(index, group)
    return out


def reservation_pod(node: str, group: str, device: int, suffix: str) -> dict[str, Any]:
    """The reservation pod holding device ``device`` of ``node`` for ``group``.

    It also carries the sim's `gpushare.DEVICES_ANNOTATION` as ``"<device>:0"``: it
    holds that device, whose share the group's fractional pods account for."""
    return {
        "metadata": {
            "name": f"gpu-reservation-{node}-{suffix}",
            "namespace": RESERVATION_NAMESPACE,
            "labels": {"app": APP_LABEL, GPU_GROUP_LABEL: group},
            "annotations": {
                "karpenter.sh/do-not-disrupt": "true",
                GPU_INDEX_ANNOTATION: str(device),
                gpushare.DEVICES_ANNOTATION: gpushare.format_assignment(((device, 0.0),)),
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "resource-reservation",
                    "image": "resource-reservation",  # the binder's configured image
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "50m", "memory": "100Mi"},
                        "requests": {"nvidia.com/gpu": "1", "cpu": "1m", "memory": "10Mi"},
                    },
                }
            ],
        },
    }


def group_role(pod: Obj) -> tuple[bool, tuple[str, ...]]:
    """What `stale_reservations` reads of ``pod``: whether it is a reservation pod (in
    `RESERVATION_NAMESPACE`), and the GPU groups it keeps alive (`pod_groups` of a pod
    outside that namespace in phase Pending or Running; a pod without a phase counts as
    Pending, as the apiserver creates pods)."""
    meta = pod.get("metadata") or {}
    if meta.get("namespace") == RESERVATION_NAMESPACE:
        return True, ()
    if not meta.get("labels"):
        return False, ()  # a pod without labels is in no GPU group
    if not is_live(pod):
        return False, ()
    return False, tuple(pod_groups(pod))


def stale_reservations(
    pods: Iterable[Obj],
    role: Callable[[Obj], tuple[bool, tuple[str, ...]]] = group_role,
) -> list[Obj]:
    """Reservation pods whose GPU group has no pod left in phase Pending or Running.
    ``role`` is `group_role` or a cache of it (the sim's KAI reads it every pass)."""
    reservations: list[Obj] = []
    live: set[str] = set()
    for pod in pods:
        is_reservation, groups = role(pod)
        if is_reservation:
            reservations.append(pod)
        elif groups:
            live.update(groups)
    return [
        p
        for p in reservations
        if (group := ((p.get("metadata") or {}).get("labels") or {}).get(GPU_GROUP_LABEL))
        and group not in live
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
