"""Which GPU agent serves a node, and the extended resources and labels it adds (pure).

The one place the sim decides it; `sim.nodeclaims` (node registration), `sim.gpushare`
(devices the sharing layers place on) and `sim.scheduler` read it. A node runs exactly
one of these, chosen by its labels in this order when they overlap (`plugin`):

1. ``dra``: NVIDIA's DRA kubelet plugin (`sim.dra.runs_dra`): no extended resource; its
   GPUs are ResourceSlice devices.
2. ``mig``: NVIDIA's device plugin with ``--mig-strategy=mixed`` on a node whose GPU
   Operator MIG manager applied the mig-parted profile named by ``nvidia.com/mig.config``
   (`sim.dra.MIG_CONFIG_LABEL`; ``all-disabled``, the operator's default, or no label means
   plain GPUs). Every GPU is MIG-enabled, so the plugin serves no ``nvidia.com/gpu``
   (NVIDIA/k8s-device-plugin @1b826acc ``internal/rm/device_map.go``: ``if migEnabled &&
   *b.migStrategy != spec.MigStrategyNone { return nil }``) but
   ``nvidia.com/mig-<profile>`` (``internal/rm/rm.go``: ``strings.ReplaceAll("mig-"+
   p.String(), "+", ".")``), one per MIG device: GPUs x the profile's count per GPU
   (`sim.dra.mig_devices`, the mig-parted ``all-<profile>`` layouts). GFD adds
   ``nvidia.com/mig.strategy=mixed`` and, per MIG type, ``.count``, ``.memory`` (MiB),
   ``.multiprocessors``, ``.product``, ``.replicas``, ``.sharing-strategy``
   (``internal/lm/resource.go`` ``NewMIGResourceLabeler``, ``internal/resource/
   nvml-mig-device.go`` ``GetAttributes``); the MIG manager sets
   ``nvidia.com/mig.config.state=success``. See `mig_labels`. A profile the instance
   type's GPU lacks (a T4, or ``all-3g.40gb`` on an A100-40GB) is not applied: the
   node is then served by the next agent below.
3. ``gpushare``: Alibaba's gpushare device plugin (`sim.aliyun`), on ``gpushare=true``.
4. ``volcano``: Volcano's vGPU device plugin (`sim.volcano`), on the sim's install label
   ``volcano.sh/vgpu.enabled=true``.
5. ``hami``: HAMi's device plugin (`sim.hami`), on ``gpu=on``: ``nvidia.com/gpu`` GPUs x 10.
6. ``nvidia``: NVIDIA's device plugin: ``nvidia.com/gpu`` one per GPU.

Resource amounts come from the instance type (`sim.catalog.InstanceType`: GPUs, the MiB
NVML reports per GPU), as the agent reads them from the hardware.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from intent.quantity import parse_quantity
from intent.sharing import MIG_PREFIX
from sim import aliyun, dra, hami, volcano
from sim.catalog import InstanceType
from sim.providers import ALL_INSTANCE_TYPES

__all__ = [
    "DAEMONSETS",
    "MIG_DISABLED",
    "MIG_PREFIX",
    "MigLayout",
    "Plugin",
    "advertised",
    "daemonset",
    "instance_type",
    "mig_labels",
    "mig_layout",
    "node_plugin",
    "plugin",
]

Plugin = Literal["dra", "mig", "gpushare", "volcano", "hami", "nvidia"]

#: mig-parted's config that leaves MIG off (gpu-operator ``migConfigDisabledValue``).
MIG_DISABLED: Final = "all-disabled"
MIG_STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
MIG_STATE_LABEL: Final = "nvidia.com/mig.config.state"
_INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
_MIB: Final = 1 << 20

#: The DaemonSet (its pods' ``app.kubernetes.io/name`` in the sim) of each agent.
DAEMONSETS: Final[Mapping[Plugin, str]] = {
    "dra": dra.kubelet_plugin_app(dra.DRA_NODE_LABELS) or "",
    "mig": "nvidia-device-plugin-daemonset",
    "gpushare": aliyun.DAEMONSET,
    "volcano": volcano.DAEMONSET,
    "hami": "hami-device-plugin",
    "nvidia": "nvidia-device-plugin-daemonset",
}


@dataclass(frozen=True, slots=True)
class MigLayout:
    """The MIG devices of a node: ``profile`` (``1g.5gb``), ``count`` on the whole node,
    and each one's ``memory_mib`` and ``multiprocessors``."""

    profile: str
    count: int
    memory_mib: int
    multiprocessors: int

    @property
    def resource(self) -> str:
        """``nvidia.com/mig-<profile>``, ``+`` replaced by ``.`` (``internal/rm/rm.go``)."""
        return MIG_PREFIX + self.profile.replace("+", ".")


def instance_type(labels: Mapping[str, str]) -> InstanceType | None:
    """The instance type a node's ``node.kubernetes.io/instance-type`` names, from every
    provider's catalog (`sim.providers.ALL_INSTANCE_TYPES`); None if unknown."""
    name = labels.get(_INSTANCE_TYPE_LABEL)
    return next((it for it in ALL_INSTANCE_TYPES if it.name == name), None) if name else None


def _mig_config(labels: Mapping[str, str]) -> str | None:
    config = labels.get(dra.MIG_CONFIG_LABEL)
    return config if config and config != MIG_DISABLED else None


def mig_layout(labels: Mapping[str, str], it: InstanceType | None) -> MigLayout | None:
    """The MIG devices the MIG manager makes on an ``it`` node from its
    ``nvidia.com/mig.config`` (``all-<profile>``), as `sim.dra.mig_devices` lays them out;
    None without such a label, for ``all-disabled``, an unknown instance type, or a profile
    its GPU does not have."""
    config = _mig_config(labels)
    if config is None or it is None:
        return None
    return _layout(config, it)


@functools.cache
def _layout(config: str, it: InstanceType) -> MigLayout | None:
    devices = dra.mig_devices(it, "", config)
    if not devices:
        return None
    first = devices[0]
    capacity = first["capacity"]
    memory = parse_quantity(capacity["memory"]["value"], "memory")
    return MigLayout(
        str(first["attributes"]["profile"]["string"]),
        len(devices),
        int(memory) // _MIB,
        int(capacity["multiprocessors"]["value"]),
    )


def plugin(labels: Mapping[str, str], it: InstanceType | None = None) -> Plugin:
    """The agent serving a node with ``labels`` (module doc, in priority order). With
    the instance type unknown (``it`` None), a MIG profile label alone makes it ``mig``."""
    if dra.runs_dra(labels):
        return "dra"
    if _mig_config(labels) is not None and (it is None or mig_layout(labels, it) is not None):
        return "mig"
    if aliyun.runs_gpushare(labels):
        return "gpushare"
    if volcano.runs_volcano(labels):
        return "volcano"
    if hami.runs_hami(labels):
        return "hami"
    return "nvidia"


def node_plugin(node: Mapping[str, Any]) -> Plugin:
    """`plugin` of a Node object, its instance type looked up from its labels."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return plugin(labels, instance_type(labels))


def daemonset(labels: Mapping[str, str], it: InstanceType | None = None) -> str:
    """The DaemonSet whose pod runs on the node (`DAEMONSETS` of `plugin`)."""
    return DAEMONSETS[plugin(labels, it)]


def advertised(labels: Mapping[str, str], it: InstanceType) -> dict[str, str]:
    """The extended resources (name -> count) the node's agent puts in its
    ``status.capacity`` and ``status.allocatable``: empty on a DRA node or without GPUs;
    ``{"nvidia.com/mig-1g.5gb": "56"}`` on a p4d.24xlarge with ``all-1g.5gb``;
    ``aliyun.com/gpu-mem`` (GiB) and ``aliyun.com/gpu-count`` (`sim.aliyun.advertised`);
    ``volcano.sh/vgpu-number``, ``-memory`` (MiB), ``-cores`` (`sim.volcano.advertised`);
    ``nvidia.com/gpu`` GPUs x 10 (HAMi) or GPUs (NVIDIA)."""
    gpus = it.gpu_count
    if gpus <= 0:
        return {}
    match plugin(labels, it):
        case "dra":
            return {}
        case "mig":
            layout = mig_layout(labels, it)
            return {layout.resource: str(layout.count)} if layout is not None else {}
        case "gpushare":
            return aliyun.advertised(gpus, it.gfd_memory_mib)
        case "volcano":
            return volcano.advertised(gpus, it.gfd_memory_mib)
        case "hami":
            return {"nvidia.com/gpu": str(hami.advertised_gpus(gpus, labels))}
        case _:
            return {"nvidia.com/gpu": str(gpus)}


def mig_labels(labels: Mapping[str, str], it: InstanceType) -> dict[str, str]:
    """Labels GFD (mixed strategy) and the MIG manager add to a ``mig`` node, beyond
    `sim.catalog.InstanceType.gfd_labels`: ``nvidia.com/mig.strategy: mixed``,
    ``nvidia.com/mig.config.state: success`` and the MIG type's labels (module doc), e.g.
    ``nvidia.com/mig-1g.5gb.count: "56"``, ``.memory: "4864"``; empty on other nodes."""
    layout = mig_layout(labels, it)
    if layout is None or plugin(labels, it) != "mig":
        return {}
    prefix = layout.resource
    return {
        MIG_STRATEGY_LABEL: "mixed",
        MIG_STATE_LABEL: "success",
        f"{prefix}.count": str(layout.count),
        f"{prefix}.memory": str(layout.memory_mib),
        f"{prefix}.multiprocessors": str(layout.multiprocessors),
        f"{prefix}.product": f"{it.gpu_product}-MIG-{layout.profile}",
        f"{prefix}.replicas": "1",
        f"{prefix}.sharing-strategy": "none",
    }
