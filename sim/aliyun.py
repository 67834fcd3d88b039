"""Alibaba Cloud's gpushare: its device plugin and scheduler extender (pure functions).

Sources (facts and excerpts in docs/sources/ecosystem.md A2 and docs/sources/sim-layers.md):

- **Device plugin** (AliyunContainerService/gpushare-device-plugin @45fb8b88): its
  DaemonSet ``device-plugin-ds.yaml`` (``gpushare-device-plugin-ds``) runs on nodes
  labelled `NODE_SELECTOR` ``gpushare: "true"`` with ``--memory-unit=GiB``. It registers
  ``aliyun.com/gpu-mem`` as one fake device per GiB of each GPU (``pkg/gpu/nvidia/
  nvidia.go`` ``getDevices``: the memory NVML reports in MiB, ``setGPUMemory`` divides it
  by 1024 with Go's integer division, once, from the first GPU, for every GPU) and
  patches ``aliyun.com/gpu-count`` = the number of GPUs into the node's capacity and
  allocatable (``podmanager.go`` ``patchGPUCount``). So a T4 (15360 MiB) is 15 GiB: a
  4 x T4 node has ``aliyun.com/gpu-mem: 60``, as ACK's docs show. See `advertised`.
- **Scheduler extender** (AliyunContainerService/gpushare-scheduler-extender @c0b61411),
  called by kube-scheduler after its filter plugins (``config/scheduler-policy-config.yaml``:
  ``managedResources: aliyun.com/gpu-mem``, ``ignoredByScheduler: false``, so
  NodeResourcesFit also checks the node's total). For a pod whose containers' limits ask
  ``aliyun.com/gpu-mem`` (``pkg/utils/pod.go`` ``GetGPUMemoryFromPodResource``, summed,
  GiB) the filter (``pkg/scheduler/predicate.go``) fails a node with
  `NOT_FOR_GPU_SHARE` when it has no ``aliyun.com/gpu-mem`` capacity and with
  `INSUFFICIENT` when no single GPU has that much left (``pkg/cache/nodeinfo.go``
  ``Assume``). The node's GPUs are ``aliyun.com/gpu-count`` devices of
  ``gpu-mem // gpu-count`` GiB each (``NewNodeInfo``); a GPU's use is the sum of the
  ``ALIYUN_COM_GPU_MEM_POD`` annotations of its live pods, found by
  ``ALIYUN_COM_GPU_MEM_IDX`` (``deviceinfo.go``: Succeeded and Failed pods skipped; pods
  without the index annotation are not counted). The bind verb (``allocateGPUID``) takes
  the GPU with the least memory left that fits (binpack; ties to the lower index) and
  patches the pod's annotations (`bind_annotations`, ``utils.PatchPodAnnotationSpec``)
  before binding it. kube-scheduler turns a filter failure into an ``Unschedulable`` node
  status with that text (kubernetes ``pkg/scheduler/schedule_one.go``
  ``findNodesThatPassExtenders``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from intent.quantity import parse_quantity

__all__ = [
    "ASSIGNED_ANNOTATION",
    "ASSUME_TIME_ANNOTATION",
    "DAEMONSET",
    "DEV_ANNOTATION",
    "GPU_COUNT",
    "GPU_MEM",
    "INDEX_ANNOTATION",
    "INSUFFICIENT",
    "NODE_SELECTOR",
    "NOT_FOR_GPU_SHARE",
    "POD_ANNOTATION",
    "advertised",
    "bind_annotations",
    "gib_per_gpu",
    "node_gpus",
    "pod_gpu_mem",
    "recorded",
    "runs_gpushare",
]

#: Extended resources of the device plugin (``pkg/gpu/nvidia/const.go``).
GPU_MEM: Final = "aliyun.com/gpu-mem"
GPU_COUNT: Final = "aliyun.com/gpu-count"
#: ``device-plugin-ds.yaml`` ``nodeSelector``.
NODE_SELECTOR: Final[Mapping[str, str]] = {"gpushare": "true"}
#: The DaemonSet's name in ``device-plugin-ds.yaml``.
DAEMONSET: Final = "gpushare-device-plugin-ds"
#: Pod annotations the extender writes at bind (``pkg/utils/const.go``).
INDEX_ANNOTATION: Final = "ALIYUN_COM_GPU_MEM_IDX"
POD_ANNOTATION: Final = "ALIYUN_COM_GPU_MEM_POD"
DEV_ANNOTATION: Final = "ALIYUN_COM_GPU_MEM_DEV"
ASSIGNED_ANNOTATION: Final = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ASSUME_TIME_ANNOTATION: Final = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
#: The extender's filter failures (``pkg/scheduler/predicate.go`` ``checkNode``).
INSUFFICIENT: Final = "Insufficient GPU Memory in one device"
NOT_FOR_GPU_SHARE: Final = "The node {} is not for GPU share, need skip"

_MIB_PER_GIB: Final = 1024


def runs_gpushare(labels: Mapping[str, str]) -> bool:
    """Whether gpushare's device-plugin DaemonSet selects a node with ``labels``."""
    return all(labels.get(k) == v for k, v in NODE_SELECTOR.items())


def gib_per_gpu(nvml_mib: int) -> int:
    """What the plugin registers per GPU with ``--memory-unit=GiB``: the MiB NVML reports,
    divided by 1024 and rounded down (15360 -> 15, 81559 -> 79)."""
    return max(nvml_mib, 0) // _MIB_PER_GIB


def advertised(gpus: int, nvml_mib: int) -> dict[str, str]:
    """Extended resources a gpushare node's capacity and allocatable carry: ``gpus`` GPUs
    of ``nvml_mib`` MiB each -> ``{"aliyun.com/gpu-mem": <gpus x GiB per GPU>,
    "aliyun.com/gpu-count": <gpus>}``; empty without GPUs."""
    if gpus <= 0:
        return {}
    return {GPU_MEM: str(gpus * gib_per_gpu(nvml_mib)), GPU_COUNT: str(gpus)}


def _whole(raw: Any, where: str) -> int:
    try:
        value = parse_quantity(raw, where)
    except ValueError:
        return 0
    return int(value) if value > 0 else 0


def node_gpus(node: Mapping[str, Any]) -> tuple[int, int]:
    """The extender's view of a node: ``(GPUs, GiB per GPU)`` from ``status.capacity``
    (``aliyun.com/gpu-count``; ``aliyun.com/gpu-mem`` // GPUs); ``(0, 0)`` if either is
    absent, zero or unparsable."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    count = _whole(capacity.get(GPU_COUNT, 0), f"capacity[{GPU_COUNT!r}]")
    total = _whole(capacity.get(GPU_MEM, 0), f"capacity[{GPU_MEM!r}]")
    if count <= 0 or total <= 0:
        return 0, 0
    return count, total // count


def pod_gpu_mem(pod: Mapping[str, Any]) -> int:
    """GiB of GPU memory the pod asks: the sum over ``spec.containers`` of their
    ``limits["aliyun.com/gpu-mem"]`` (init containers and requests are not read, as in
    the extender); 0 if none.

    Raises:
        ValueError: a quantity does not parse (`intent.contract.IntentError`).
    """
    total = Decimal(0)
    for i, container in enumerate((pod.get("spec") or {}).get("containers") or ()):
        limits = (container.get("resources") or {}).get("limits") or {}
        if GPU_MEM in limits:
            total += parse_quantity(limits[GPU_MEM], f"spec.containers[{i}][{GPU_MEM!r}]")
    return int(total)


def recorded(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(GPU index, GiB)`` the extender recorded on a bound pod (`INDEX_ANNOTATION`,
    `POD_ANNOTATION`), None without a valid index; a negative or unparsable GiB is 0."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        index = int(annotations[INDEX_ANNOTATION])
    except (KeyError, ValueError):
        return None
    if index < 0:
        return None
    try:
        gib = max(int(annotations.get(POD_ANNOTATION, 0)), 0)
    except ValueError:
        gib = 0
    return index, gib


def bind_annotations(index: int, gib_per_device: int, pod_gib: int, now_ns: int) -> dict[str, str]:
    """The annotations the bind verb patches onto the pod (``PatchPodAnnotationSpec``):
    the GPU index, that GPU's GiB, the pod's GiB, ``ASSIGNED: "false"`` (the device plugin
    sets it true at Allocate) and the assume time in Unix nanoseconds."""
    return {
        INDEX_ANNOTATION: str(index),
        DEV_ANNOTATION: str(gib_per_device),
        POD_ANNOTATION: str(pod_gib),
        ASSIGNED_ANNOTATION: "false",
        ASSUME_TIME_ANNOTATION: str(now_ns),
    }
