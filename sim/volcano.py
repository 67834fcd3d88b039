"""Volcano's vGPU: HAMi's volcano-vgpu-device-plugin and the Volcano scheduler's
``deviceshare`` plugin (pure functions and constants).

Sources (excerpts in docs/sources/ecosystem.md A1 and docs/sources/sim-layers.md):

- **Device plugin** (Project-HAMi/volcano-vgpu-device-plugin @4fb76ba1): per GPU it
  registers ``deviceSplitCount`` (`DEVICE_SPLIT_COUNT`, 10 in the chart's values and
  static manifest) ``volcano.sh/vgpu-number`` devices (``pkg/plugin/server.go``
  ``apiDevices``), one ``volcano.sh/vgpu-memory`` device per MiB NVML reports
  (``memory.Total/(1024*1024) / gpuMemoryFactor``, factor 1) and ``100 x
  deviceCoreScaling`` (1) ``volcano.sh/vgpu-cores`` devices; no ``nvidia.com/gpu``. See
  `advertised`. Its DaemonSet (``volcano-device-plugin``) has no node selector by default
  (``values.yaml`` ``nodeSelector: {}``); **the sim's cluster operator installs it only on
  nodes labelled** `NODE_SELECTOR` ``volcano.sh/vgpu.enabled: "true"``, so it never
  advertises next to HAMi's or NVIDIA's plugin on one node (a choice of this sim, as an
  operator mixing layers would make; not a default of the chart).
- **Scheduler** (volcano-sh/volcano @ed72c7c8, ``schedulerName: volcano``, plugin
  ``deviceshare`` with ``deviceshare.VGPUEnable: true`` and ``deviceshare.SchedulePolicy:
  binpack`` as the device plugin's README configures it): ``pkg/scheduler/api/devices/
  util.go`` ``ExtractResourceRequest`` reads a container whose limits name
  ``vgpu-number`` (N vGPUs) or only ``vgpu-memory`` (one vGPU); memory per vGPU is
  ``vgpu-memory`` MiB, else ``vgpu-memory-percentage``, else 100 %; ``vgpu-cores`` is
  percent of a card (see `sim.gpushare`'s ``_volcano``). ``nvidia/vgpu/utils.go``
  ``checkNodeGPUSharingPredicateAndScore`` places each vGPU of a container on a distinct
  card, visiting cards by most memory used first (``sortedDeviceIndicesByPolicy``,
  binpack; ties to the lower index). A node that cannot take the pod fails the
  ``deviceshare`` predicate with reason `DEVICE_SHARING_ERROR` (``device_info.go``
  ``FilterNode``); Volcano's allocate action checks the node's idle resources first
  (``actions/allocate/allocate.go`` ``predicate``: ``Insufficient <first resource>``).
  A pending pod gets ``PodScheduled=False``, reason ``Unschedulable``, with the
  ``FitErrors`` message (`fit_errors_message`) and a ``FailedScheduling`` event
  (``pkg/scheduler/cache/cache.go`` ``taskUnschedulable``).

Not modelled: the per-card limit of ``deviceSplitCount`` vGPUs, MIG mode
(``volcano.sh/vgpu-mode: mig``), UUID filters, PodGroup spreading, and Volcano's own
annotations (``volcano.sh/vgpu-ids-new`` ...): the sim records the cards chosen in
`sim.gpushare.DEVICES_ANNOTATION`, as for HAMi.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

__all__ = [
    "CORES",
    "DAEMONSET",
    "DEVICE_SHARING_ERROR",
    "DEVICE_SPLIT_COUNT",
    "MEMORY",
    "MEMORY_PERCENTAGE",
    "NODE_SELECTOR",
    "NUMBER",
    "POD_NUMBER_EXCEEDED",
    "SCHEDULER_NAME",
    "advertised",
    "fit_errors_message",
    "node_reasons",
    "runs_volcano",
]

#: Resource names (the chart's ``deviceConfig.nvidia.resource*Name``).
NUMBER: Final = "volcano.sh/vgpu-number"
MEMORY: Final = "volcano.sh/vgpu-memory"
MEMORY_PERCENTAGE: Final = "volcano.sh/vgpu-memory-percentage"
CORES: Final = "volcano.sh/vgpu-cores"
#: ``deviceSplitCount`` of the chart's values and the static manifest's ConfigMap.
DEVICE_SPLIT_COUNT: Final = 10
#: ``100 * DeviceCoresScaling`` (``deviceCoreScaling: 1``) core devices per GPU.
CORES_PER_GPU: Final = 100
#: The sim's install choice (module doc): where the DaemonSet runs.
NODE_SELECTOR: Final[Mapping[str, str]] = {"volcano.sh/vgpu.enabled": "true"}
#: The DaemonSet's name (``templates/daemonset.yaml``).
DAEMONSET: Final = "volcano-device-plugin"
SCHEDULER_NAME: Final = "volcano"
#: ``FilterNode``'s status reason when no card fits (``nvidia/vgpu/device_info.go``).
DEVICE_SHARING_ERROR: Final = "hami-vgpuDeviceSharing error"
#: The ``predicates`` plugin's pod-count failure (``api.NodePodNumberExceeded``).
POD_NUMBER_EXCEEDED: Final = "node(s) pod number exceeded"


def runs_volcano(labels: Mapping[str, str]) -> bool:
    """Whether the sim's Volcano vGPU DaemonSet runs on a node with ``labels``."""
    return all(labels.get(k) == v for k, v in NODE_SELECTOR.items())


def advertised(gpus: int, nvml_mib: int) -> dict[str, str]:
    """Extended resources of a node running the plugin with ``gpus`` GPUs of
    ``nvml_mib`` MiB: ``vgpu-number`` GPUs x 10, ``vgpu-memory`` the MiB summed,
    ``vgpu-cores`` GPUs x 100; empty without GPUs."""
    if gpus <= 0:
        return {}
    return {
        NUMBER: str(gpus * DEVICE_SPLIT_COUNT),
        MEMORY: str(gpus * max(nvml_mib, 0)),
        CORES: str(gpus * CORES_PER_GPU),
    }


def node_reasons(reasons: Sequence[str]) -> tuple[str, ...]:
    """One node's failure reasons (the sim's kube-scheduler filter vocabulary) as
    Volcano words them. Its allocate action checks resources first and stops there
    (``predicate``), naming one: of the ``Insufficient <resource>`` reasons only the
    first is kept (``WrapInsufficientResourceReason`` keeps ``resources[0]``; cpu and
    memory come first, as in the sim's order). Otherwise ``Too many pods`` reads
    `POD_NUMBER_EXCEEDED` (the ``predicates`` plugin) and the rest stay as they are."""
    insufficient = [r for r in reasons if r.startswith("Insufficient ")]
    if insufficient:
        return (insufficient[0],)
    return tuple(POD_NUMBER_EXCEEDED if r == "Too many pods" else r for r in reasons)


def fit_errors_message(num_nodes: int, per_node: Iterable[Sequence[str]]) -> str:
    """``FitErrors.Error()`` (``pkg/scheduler/api/unschedule_info.go``):
    ``0/<num_nodes> nodes are unavailable: <histogram>.``, the histogram being each
    distinct reason as ``"<count> <reason>"``, sorted as strings, joined by ``", "``;
    just ``0/<num_nodes> nodes are unavailable`` when no node was tried."""
    histogram = Counter(reason for reasons in per_node for reason in reasons)
    message = f"0/{num_nodes} nodes are unavailable"
    if not num_nodes:
        return message
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"{message}: {', '.join(parts)}."
