"""Which nodes run HAMi's device plugin, and what it advertises (pure).

Sources (Project-HAMi/HAMi):

- ``charts/hami/values.yaml``: the NVIDIA device-plugin DaemonSet
  (``templates/device-plugin/daemonsetnvidia.yaml``) selects nodes with
  ``devicePlugin.nvidiaNodeSelector``, by default ``gpu: "on"``; `sim.deviceplugins`
  decides which agent serves each node (a DRA, MIG, gpushare or Volcano vGPU node's
  label wins over ``gpu: "on"``; a GPU node with none of them runs the plain NVIDIA
  device plugin, one ``nvidia.com/gpu`` per physical GPU);
- ``devicePlugin.deviceSplitCount`` (default 10; ``docs/config.md``: "Maximum tasks
  assigned to a simple GPU device"): HAMi's device plugin registers each physical GPU
  that many times, so the node's ``capacity``/``allocatable`` carry
  ``nvidia.com/gpu`` = physical GPUs x 10 (REFERENCE.md section 3). A HAMi pod's
  ``nvidia.com/gpu: 1`` takes one of those slots; HAMi's scheduler places it by the
  physical devices' memory and cores (`sim.gpushare`), which kube-scheduler and
  Karpenter never see.

So Karpenter, which simulates an existing node from its ``allocatable``, sees up to ten
free ``nvidia.com/gpu`` on a HAMi node whose one GPU's memory is already full, while a
NodeClaim it is still launching is estimated from the instance type (one per GPU).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["DEVICE_SPLIT_COUNT", "NODE_SELECTOR", "advertised_gpus", "runs_hami"]

#: ``devicePlugin.nvidiaNodeSelector`` default of the HAMi chart.
NODE_SELECTOR: Final[Mapping[str, str]] = {"gpu": "on"}
#: ``devicePlugin.deviceSplitCount`` default of the HAMi chart.
DEVICE_SPLIT_COUNT: Final = 10


def runs_hami(labels: Mapping[str, str]) -> bool:
    """Whether HAMi's device-plugin DaemonSet selects a node with these labels."""
    return all(labels.get(k) == v for k, v in NODE_SELECTOR.items())


def advertised_gpus(physical: int, labels: Mapping[str, str]) -> int:
    """The ``nvidia.com/gpu`` count the node's device plugin registers: ``physical`` x
    `DEVICE_SPLIT_COUNT` under HAMi, else ``physical`` (NVIDIA's plugin)."""
    return physical * DEVICE_SPLIT_COUNT if runs_hami(labels) else physical
