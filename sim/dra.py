"""Dynamic Resource Allocation (``resource.k8s.io/v1``) in the simulated cluster.

What a Kubernetes 1.34 cluster with NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu) does:

- **DeviceClasses** `DEFAULT_DEVICE_CLASSES`, as the driver's Helm chart installs them
  (``deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-gpu.yaml`` and
  ``deviceclass-mig.yaml``): ``gpu.nvidia.com`` and ``mig.nvidia.com``, each one CEL
  selector on ``device.driver`` and the ``type`` attribute.
- **DRA nodes** (`runs_dra`): a GPU node that carries the GPU Operator's per-node switch
  ``nvidia.com/gpu.deploy.device-plugin: "false"`` (NVIDIA/gpu-operator
  ``controllers/state_manager.go``, the ``nvidia.com/gpu.deploy.<operand>`` labels) runs the
  DRA kubelet plugin instead of the device plugin, so it never advertises
  ``nvidia.com/gpu`` (`sim.nodeclaims`); `DraDriver` publishes one **ResourceSlice** per
  such node once it is Ready, with one device per GPU as the kubelet plugin describes it
  (``cmd/gpu-kubelet-plugin/deviceinfo.go`` ``GpuInfo.GetDevice``: name ``gpu-<minor>``,
  attributes ``type``, ``uuid``, ``productName``, ``brand``, ``architecture``,
  ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, ``pcieBusID``, plus
  ``index`` and ``minor`` as driver releases up to v25.3 published them; capacity
  ``memory`` in bytes as a BinarySI quantity), owned by the Node; a slice whose node is gone
  is deleted (the garbage collector's job in a real cluster). On an A100 or H100 node
  labelled ``nvidia.com/mig.config: all-<profile>`` the GPUs are published as MIG devices
  instead (`mig_devices`), which the ``mig.nvidia.com`` class selects.
- **The resourceclaim controller** (`ResourceClaimController`, kubernetes
  ``pkg/controller/resourceclaim/controller.go``): a ResourceClaim per pod claim that
  names a ResourceClaimTemplate, recorded in ``pod.status.resourceClaimStatuses``;
  reservations of pods that are gone or done are dropped, a claim nobody reserves any
  more is deallocated, and a generated claim whose pod is done or gone is deleted.
- **kube-scheduler's DynamicResources plugin** uses `pod_claims`, `DraState` and
  `allocate` (k8s.io/dynamic-resource-allocation ``structured`` allocator), evaluating
  CEL selectors with celpy (`device_matches`).
- **Karpenter** skips pods with DRA requirements (`has_dra_requirements`,
  `KARPENTER_DRA_ERROR`; kubernetes-sigs/karpenter#2384).

Everything but the two controller classes is purely computational.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from intent.contract import IntentError
from intent.quantity import parse_quantity
from sim.catalog import InstanceType
from sim.providers import CATALOGS
from sim.scheduling import is_terminal
from sim.store import (
    DEVICECLASSES,
    NODES,
    PODS,
    RESOURCECLAIMS,
    RESOURCECLAIMTEMPLATES,
    RESOURCESLICES,
    SETTLE_SECONDS,
    AlreadyExists,
    ApiError,
    NotFound,
    Obj,
    Store,
)

__all__ = [
    "CANNOT_ALLOCATE",
    "CLAIM_NOT_ON_NODE",
    "DEFAULT_DEVICE_CLASSES",
    "DELETE_PROTECTION_FINALIZER",
    "DRA_NODE_LABELS",
    "DRIVER",
    "KARPENTER_DRA_ERROR",
    "KARPENTER_DRA_LOG",
    "MIG_CONFIG_LABEL",
    "POD_CLAIM_NAME_ANNOTATION",
    "ClaimError",
    "DeviceId",
    "DraDriver",
    "DraState",
    "Quantity",
    "ResourceClaimController",
    "SelectorError",
    "allocate",
    "allocation_status",
    "binary_si",
    "device_matches",
    "gpu_devices",
    "has_dra_requirements",
    "install_device_classes",
    "kubelet_plugin_app",
    "mig_devices",
    "nodepool",
    "pod_claims",
    "reserve",
    "resource_slice",
    "runs_dra",
]

log = logging.getLogger(__name__)

#: The driver name of NVIDIA's DRA driver for GPUs (and its attribute domain).
DRIVER: Final = "gpu.nvidia.com"
#: The GPU Operator's per-node switch that turns its device plugin off on a node
#: (``nvidia.com/gpu.deploy.device-plugin``); NVIDIA's DRA driver docs install the
#: operator without the device plugin so the DRA kubelet plugin owns the GPUs. A NodePool
#: template carrying these labels makes DRA nodes in the sim.
DRA_NODE_LABELS: Final[dict[str, str]] = {"nvidia.com/gpu.deploy.device-plugin": "false"}
#: Annotation the resourceclaim controller puts on a claim made from a template
#: (``resourceapi.PodResourceClaimAnnotation``).
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
#: The finalizer kube-scheduler adds when it allocates a claim (``resourceapi.Finalizer``).
DELETE_PROTECTION_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
#: DynamicResources Filter, no allocation on the node (UnschedulableAndUnresolvable).
CANNOT_ALLOCATE: Final = "cannot allocate all claims"
#: DynamicResources Filter, a claim allocated for another node.
CLAIM_NOT_ON_NODE: Final = "resourceclaim not available on the node"
#: Karpenter's ``DRAError`` text (``provisioning/scheduling/scheduler.go`` ``add``).
KARPENTER_DRA_ERROR: Final = (
    "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter"
)
#: Karpenter's log line for such a pod (``Results.Record``).
KARPENTER_DRA_LOG: Final = (
    "skipping pod with Dynamic Resource Allocation requirements, not yet supported by Karpenter"
)

_NODE_SELECTOR_FIELD = "metadata.name"
_KUBELET_PLUGIN_APP = "nvidia-dra-driver-gpu-kubelet-plugin"


def _device_class(name: str, device_type: str) -> Obj:
    expression = (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


#: The DeviceClasses NVIDIA's chart installs (``gpuResourcesEnabledOverride``).
DEFAULT_DEVICE_CLASSES: Final[tuple[Obj, ...]] = (
    _device_class("gpu.nvidia.com", "gpu"),
    _device_class("mig.nvidia.com", "mig"),
)


def nodepool(
    name: str,
    requirements: Sequence[Obj],
    *,
    node_class: str = "gpu",
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A ``karpenter.sh/v1`` NodePool whose nodes are DRA nodes: ``requirements`` (e.g.
    ``karpenter.k8s.aws/instance-gpu-name In [l4]``), `DRA_NODE_LABELS` plus ``labels``
    (e.g. ``{MIG_CONFIG_LABEL: "all-1g.5gb"}``) on the template, the usual
    ``nvidia.com/gpu:NoSchedule`` taint, the EC2NodeClass ``node_class``."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {**DRA_NODE_LABELS, **(labels or {})}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": node_class,
                    },
                    "requirements": [dict(r) for r in requirements],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                },
            }
        },
    }


def install_device_classes(store: Store) -> None:
    """Create `DEFAULT_DEVICE_CLASSES` (an existing one is left alone)."""
    for obj in DEFAULT_DEVICE_CLASSES:
        try:
            store.create(DEVICECLASSES, obj)
        except AlreadyExists:
            continue


# -- nodes and devices ----------------------------------------------------------------


def runs_dra(labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` runs NVIDIA's DRA kubelet plugin (`DRA_NODE_LABELS`)."""
    return all(labels.get(k) == v for k, v in DRA_NODE_LABELS.items())


@dataclass(frozen=True, slots=True)
class _GpuModel:
    """What NVML reports for one GPU model: product name, brand, architecture (as
    go-nvlib names it), compute capability, and the memory (MiB) NVML's ``memory.total``
    shows (the catalog's GFD ``gpu.memory``)."""

    product: str
    brand: str
    architecture: str


#: NVML names by the catalog's ``instance-gpu-name``, from public ``nvidia-smi -L`` output.
_MODELS: Final[dict[str, _GpuModel]] = {
    "t4": _GpuModel("Tesla T4", "Nvidia", "Turing"),
    "a10g": _GpuModel("NVIDIA A10G", "Nvidia", "Ampere"),
    "l4": _GpuModel("NVIDIA L4", "Nvidia", "Ada Lovelace"),
    "l40s": _GpuModel("NVIDIA L40S", "Nvidia", "Ada Lovelace"),
    "a100": _GpuModel("NVIDIA A100-SXM4-40GB", "Nvidia", "Ampere"),
    "h100": _GpuModel("NVIDIA H100 80GB HBM3", "Nvidia", "Hopper"),
}
_DRIVER_VERSION: Final = "570.172.8"  # semver of 570.172.08, an EKS AL2023 NVIDIA AMI driver
_CUDA_DRIVER_VERSION: Final = "12.8.0"
_BINARY_SUFFIXES: Final = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def binary_si(value: int) -> str:
    """``resource.NewQuantity(value, BinarySI).String()`` for a whole number of bytes:
    the largest binary suffix that divides it (81559 MiB -> ``81559Mi``, 40 GiB ->
    ``40Gi``)."""
    for suffix, shift in _BINARY_SUFFIXES:
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)


def _uuid(prefix: str, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _gpu_attributes(it: InstanceType, model: _GpuModel, node_name: str, index: int) -> Obj:
    major, minor = it.gpu_compute
    return {
        "uuid": {"string": _uuid("GPU", f"{node_name}/{index}")},
        "productName": {"string": model.product},
        "brand": {"string": model.brand},
        "architecture": {"string": model.architecture},
        "cudaComputeCapability": {"version": f"{major}.{minor}.0"},
        "driverVersion": {"version": _DRIVER_VERSION},
        "cudaDriverVersion": {"version": _CUDA_DRIVER_VERSION},
        "pcieBusID": {"string": f"0000:{0x10 + index:02x}:00.0"},
    }


def gpu_devices(it: InstanceType, node_name: str) -> list[Obj]:
    """The ResourceSlice devices NVIDIA's kubelet plugin publishes for the GPUs of an
    ``it`` node (empty without GPUs): ``gpu-0`` .. ``gpu-<n-1>``, each with the
    attributes of the module doc; ``uuid`` is a stable ``GPU-<hex>`` derived from the
    node name and index. Memory is the MiB NVML reports, in bytes."""
    model = _MODELS.get(it.gpu_name)
    if not it.gpu_count or model is None:
        return []
    devices: list[Obj] = []
    for index in range(it.gpu_count):
        attributes = {
            "type": {"string": "gpu"},
            **_gpu_attributes(it, model, node_name, index),
            "index": {"int": index},
            "minor": {"int": index},
        }
        memory = binary_si(it.gfd_memory_mib * 1024 * 1024)
        devices.append(
            {
                "name": f"gpu-{index}",
                "attributes": attributes,
                "capacity": {"memory": {"value": memory}},
            }
        )
    return devices


#: The GPU Operator's MIG manager label; ``all-<profile>`` partitions every GPU alike
#: (NVIDIA/mig-parted default config).
MIG_CONFIG_LABEL: Final = "nvidia.com/mig.config"


@dataclass(frozen=True, slots=True)
class _MigProfile:
    """One GPU instance profile: NVML's profile id, how many fit a GPU (placements start
    at ``i * size`` memory slices), slices each, memory (MiB) and multiprocessors."""

    profile_id: int
    count: int
    size: int
    memory_mib: int
    multiprocessors: int


#: MIG profiles by the catalog's GPU name. A100-SXM4-40GB from ``nvidia-smi mig -lgip``
#: (NVIDIA's MIG user guide); H100 80GB HBM3 approximate.
_MIG_PROFILES: Final[dict[str, dict[str, _MigProfile]]] = {
    "a100": {
        "1g.5gb": _MigProfile(19, 7, 1, 4864, 14),
        "2g.10gb": _MigProfile(14, 3, 2, 9984, 28),
        "3g.20gb": _MigProfile(9, 2, 4, 20096, 42),
        "4g.20gb": _MigProfile(5, 1, 4, 20096, 56),
        "7g.40gb": _MigProfile(0, 1, 8, 40320, 98),
    },
    "h100": {
        "1g.10gb": _MigProfile(19, 7, 1, 9856, 16),
        "2g.20gb": _MigProfile(14, 3, 2, 19968, 32),
        "3g.40gb": _MigProfile(9, 2, 4, 40192, 60),
        "4g.40gb": _MigProfile(5, 1, 4, 40192, 64),
        "7g.80gb": _MigProfile(0, 1, 8, 80896, 132),
    },
}


def mig_devices(it: InstanceType, node_name: str, mig_config: str) -> list[Obj] | None:
    """The MIG devices the kubelet plugin publishes instead of whole GPUs on a node whose
    MIG manager applied ``all-<profile>`` (`MIG_CONFIG_LABEL`): per GPU, ``count``
    devices named ``gpu-<minor>-mig-<profileId>-<start>-<size>`` (``MigDeviceInfo``), type
    ``mig``, ``profile``, ``parentUUID`` and the parent's attributes; capacity
    ``memory``, ``multiprocessors`` and one ``memorySlice<i>`` per slice held. None when
    the GPU has no such profile (the GPUs stay whole). Copy/decoder/encoder engine
    capacities are not modelled."""
    model = _MODELS.get(it.gpu_name)
    profile_name = mig_config.removeprefix("all-")
    profile = _MIG_PROFILES.get(it.gpu_name, {}).get(profile_name)
    if model is None or profile is None or not mig_config.startswith("all-"):
        return None
    devices: list[Obj] = []
    for index in range(it.gpu_count):
        parent = _gpu_attributes(it, model, node_name, index)
        for n in range(profile.count):
            start = n * profile.size
            capacity: Obj = {
                "memory": {"value": binary_si(profile.memory_mib * 1024 * 1024)},
                "multiprocessors": {"value": str(profile.multiprocessors)},
            }
            for i in range(start, start + profile.size):
                capacity[f"memorySlice{i}"] = {"value": "1"}
            devices.append(
                {
                    "name": f"gpu-{index}-mig-{profile.profile_id}-{start}-{profile.size}",
                    "attributes": {
                        "type": {"string": "mig"},
                        **parent,
                        "uuid": {"string": _uuid("MIG", f"{node_name}/{index}/{start}")},
                        "parentUUID": parent["uuid"],
                        "profile": {"string": profile_name},
                    },
                    "capacity": capacity,
                }
            )
    return devices


def _instance_type(node: Mapping[str, Any]) -> InstanceType | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    name = labels.get("node.kubernetes.io/instance-type")
    types = (it for catalog in CATALOGS.values() for it in catalog)  # every provider's
    return next((it for it in types if it.name == name), None)


def resource_slice(node: Mapping[str, Any], generation: int = 1) -> Obj | None:
    """The ResourceSlice NVIDIA's kubelet plugin publishes for ``node`` (None for a node
    that is not a DRA node or has no GPUs): ``generateName <node>-gpu.nvidia.com-``
    (k8s.io/dynamic-resource-allocation ``resourceslice`` controller), owned by the Node,
    ``spec.pool {name: <node>, generation, resourceSliceCount: 1}``."""
    meta = node.get("metadata") or {}
    if not runs_dra(meta.get("labels") or {}):
        return None
    it = _instance_type(node)
    name = str(meta.get("name", ""))
    mig = (meta.get("labels") or {}).get(MIG_CONFIG_LABEL)
    devices = [] if it is None else (mig and mig_devices(it, name, mig)) or gpu_devices(it, name)
    if not devices:
        return None
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": meta.get("uid", ""),
             "controller": True}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{name}-{DRIVER}-", "ownerReferences": [owner]},
        "spec": {
            "nodeName": name,
            "driver": DRIVER,
            "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


# -- CEL --------------------------------------------------------------------------------


class SelectorError(Exception):
    """A CEL selector that does not compile, or fails at runtime on a device."""


@functools.total_ordering
class Quantity:
    """A Kubernetes quantity in CEL (``k8s.io/apiserver/pkg/cel/library/quantity.go``):
    ``quantity("40Gi")``, ``q.compareTo(q2)``, ``isGreaterThan``, ``isLessThan``,
    ``asInteger``, ``asApproximateFloat``. ``value`` is in base units."""

    __slots__ = ("value",)

    def __init__(self, value: Decimal) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


@functools.total_ordering
class Semver:
    """A ``version`` attribute in CEL (``k8s.io/apiserver/pkg/cel/library/semver.go``):
    ``semver("8.0.0")``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``major()``,
    ``minor()``, ``patch()``."""

    __slots__ = ("parts",)

    def __init__(self, text: str) -> None:
        try:
            parts = tuple(int(p) for p in text.split("-", 1)[0].split("+", 1)[0].split("."))
        except ValueError:
            raise SelectorError(f"invalid semver {text!r}") from None
        if len(parts) != 3:
            raise SelectorError(f"invalid semver {text!r}")
        self.parts: tuple[int, int, int] = (parts[0], parts[1], parts[2])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts == other.parts

    def __lt__(self, other: Semver) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text), "quantity"))
    except (IntentError, ValueError) as e:
        raise SelectorError(f"invalid quantity {text!r}") from e


def _compare(a: Any, b: Any) -> celtypes.IntType:
    if type(a) is not type(b) or not isinstance(a, Quantity | Semver):
        raise SelectorError(f"cannot compare {a!r} with {b!r}")
    return celtypes.IntType(0 if a == b else (1 if b < a else -1))


def _functions() -> dict[str, Any]:
    """The Kubernetes CEL library functions DRA selectors use (quantity and semver)."""

    def components(v: Any) -> tuple[int, int, int]:
        if not isinstance(v, Semver):
            raise SelectorError(f"{v!r} is not a version")
        return v.parts

    def as_integer(q: Any) -> celtypes.IntType:
        if not isinstance(q, Quantity) or q.value != q.value.to_integral_value():
            raise SelectorError(f"{q!r} is not an integer quantity")
        return celtypes.IntType(int(q.value))

    return {
        "quantity": _quantity,
        "semver": lambda text: Semver(str(text)),
        "compareTo": _compare,
        "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
        "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
        "asInteger": as_integer,
        "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
        "major": lambda v: celtypes.IntType(components(v)[0]),
        "minor": lambda v: celtypes.IntType(components(v)[1]),
        "patch": lambda v: celtypes.IntType(components(v)[2]),
    }


_ENV = celpy.Environment()
_FUNCTIONS: Final = _functions()


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    try:
        return _ENV.program(_ENV.compile(expression), functions=_FUNCTIONS)
    except CELParseError as e:
        raise SelectorError(f"compilation failed: {e}") from e


class _Domains(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain is an empty map, as
    in Kubernetes' DRA CEL environment (``k8s.io/dynamic-resource-allocation/cel``)."""

    def __getitem__(self, key: Any) -> Any:
        if super().__contains__(key):
            return super().__getitem__(key)
        return celtypes.MapType()


def _attribute(value: Mapping[str, Any]) -> Any:
    if "string" in value:
        return celtypes.StringType(value["string"])
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "int" in value:
        return celtypes.IntType(int(value["int"]))
    if "version" in value:
        return Semver(str(value["version"]))
    raise SelectorError(f"unsupported attribute value {value!r}")


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """An attribute or capacity name split into domain and id; a bare id is in the
    driver's domain (``resourceapi.QualifiedName``)."""
    domain, _, ident = name.rpartition("/")
    return (domain or driver, ident)


def _activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, ident = _qualified(name, driver)
        attributes.setdefault(domain, {})[ident] = _attribute(value)
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, ident = _qualified(name, driver)
        capacity.setdefault(domain, {})[ident] = _quantity(value.get("value", "0"))

    def domains(raw: dict[str, dict[str, Any]]) -> _Domains:
        return _Domains(
            {
                celtypes.StringType(d): celtypes.MapType(
                    {celtypes.StringType(k): v for k, v in values.items()}
                )
                for d, values in raw.items()
            }
        )

    device_map = celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): domains(attributes),
            celtypes.StringType("capacity"): domains(capacity),
        }
    )
    return {"device": device_map}


def device_matches(expression: str, driver: str, device: Mapping[str, Any]) -> bool:
    """Whether the CEL ``expression`` selects ``device`` (a ResourceSlice ``devices[]``
    entry of ``driver``), with the ``device`` variable of Kubernetes' DRA CEL environment
    (``driver``, ``attributes[domain].<id>``, ``capacity[domain].<id>`` as quantities) and
    the quantity and semver libraries. Raises `SelectorError` when the expression does not
    compile, fails on this device (e.g. a missing attribute) or is not a bool."""
    program = _program(expression)
    try:
        result = program.evaluate(_activation(driver, device))
    except CELEvalError as e:
        raise SelectorError(f"CEL runtime error: {e.args[0] if e.args else e}") from e
    if not isinstance(result, celtypes.BoolType | bool):
        raise SelectorError(f"expression returned {type(result).__name__}, not bool")
    return bool(result)


# -- claims and allocation --------------------------------------------------------------


class ClaimError(Exception):
    """A pod's claim that cannot be used yet; the message is the DynamicResources plugin's
    (e.g. ``pod "ns/p": ResourceClaim not created yet``)."""


def has_dra_requirements(pod: Mapping[str, Any]) -> bool:
    """Karpenter's ``HasDRARequirements`` (``pkg/utils/pod/scheduling.go``, with
    kubernetes-sigs/karpenter#3124): the pod names claims in ``spec.resourceClaims`` or a
    container consumes one (``resources.claims``)."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    return any(
        (c.get("resources") or {}).get("claims")
        for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ()))
    )


DeviceId = tuple[str, str, str]  # (driver, pool, device)


@dataclass
class DraState:
    """What the DynamicResources plugin reads in one scheduling cycle: DeviceClasses by
    name, claims by (namespace, name), each node's published devices (driver, pool,
    device) in slice order (slices by name; the allocator tries them in that order) and
    the devices allocated to any claim."""

    classes: dict[str, Obj] = field(default_factory=dict)
    claims: dict[tuple[str, str], Obj] = field(default_factory=dict)
    devices: dict[str, list[tuple[DeviceId, Obj]]] = field(default_factory=dict)
    allocated: set[DeviceId] = field(default_factory=set)

    @classmethod
    def build(
        cls, classes: Iterable[Obj], slices: Iterable[Obj], claims: Iterable[Obj]
    ) -> DraState:
        """The state from listed objects (read only; not copied)."""
        state = cls()
        for dc in classes:
            state.classes[dc["metadata"]["name"]] = dc
        for rs in slices:
            spec = rs.get("spec") or {}
            node, driver = spec.get("nodeName"), str(spec.get("driver", ""))
            pool = str((spec.get("pool") or {}).get("name", ""))
            if not node:
                continue  # network-attached pools (allNodes, nodeSelector) not modelled
            for device in spec.get("devices") or ():
                state.devices.setdefault(node, []).append(
                    ((driver, pool, str(device.get("name", ""))), device)
                )
        for claim in claims:
            meta = claim["metadata"]
            state.claims[(meta.get("namespace", ""), meta["name"])] = claim
            state.allocated |= _results(claim)
        return state

    @classmethod
    def load(cls, store: Store) -> DraState:
        """The state from ``store`` (no copies)."""
        return cls.build(
            store.list(DEVICECLASSES, copy_objects=False)[0],
            store.list(RESOURCESLICES, copy_objects=False)[0],
            store.list(RESOURCECLAIMS, copy_objects=False)[0],
        )

    def commit(self, claim: Obj) -> None:
        """Record ``claim`` as written (allocated and reserved) by this cycle."""
        meta = claim["metadata"]
        self.claims[(meta.get("namespace", ""), meta["name"])] = claim
        self.allocated |= _results(claim)


def _results(claim: Mapping[str, Any]) -> set[DeviceId]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return {
        (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        for r in (allocation.get("devices") or {}).get("results") or ()
    }


def pod_claims(pod: Mapping[str, Any], state: DraState) -> list[Obj]:
    """The ResourceClaims of ``pod``'s ``spec.resourceClaims`` (each once), as the
    DynamicResources plugin's ``foreachPodResourceClaim`` and
    k8s.io/dynamic-resource-allocation ``resourceclaim.Name`` resolve them. Raises
    `ClaimError` with the plugin's message: ``pod "<ns>/<name>": ResourceClaim not created
    yet``, ``resourceclaim.resource.k8s.io "<name>" not found``, ``resourceclaim "<name>" is
    being deleted``, or ``ResourceClaim <ns>/<name> was not created for pod <ns>/<pod>
    (pod is not owner)``."""
    meta = pod.get("metadata") or {}
    namespace, pod_name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    claims: list[Obj] = []
    seen: set[str] = set()
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        must_own = False
        if entry.get("resourceClaimName"):
            name = str(entry["resourceClaimName"])
        elif entry.get("resourceClaimTemplateName"):
            if entry.get("name") not in statuses:
                raise ClaimError(f'pod "{namespace}/{pod_name}": ResourceClaim not created yet')
            if statuses[entry.get("name")] is None:
                continue  # no claim needed (resourceclaim.Name returns nil)
            name, must_own = str(statuses[entry.get("name")]), True
        else:
            raise ClaimError(
                f'pod "{namespace}/{pod_name}", spec.resourceClaim "{entry.get("name", "")}": '
                "none of the supported fields are set"
            )
        claim = state.claims.get((namespace, name))
        if claim is None:
            raise ClaimError(f'resourceclaim.resource.k8s.io "{name}" not found')
        if claim["metadata"].get("deletionTimestamp"):
            raise ClaimError(f'resourceclaim "{name}" is being deleted')
        if must_own and not any(
            o.get("uid") == meta.get("uid") and o.get("controller")
            for o in claim["metadata"].get("ownerReferences") or ()
        ):
            raise ClaimError(
                f"ResourceClaim {namespace}/{name} was not created for pod "
                f"{namespace}/{pod_name} (pod is not owner)"
            )
        if name not in seen:
            seen.add(name)
            claims.append(claim)
    return claims


def _allocated_node(claim: Mapping[str, Any]) -> set[str] | None:
    """The node names an allocated claim's ``nodeSelector`` allows (None: any node)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    selector = allocation.get("nodeSelector")
    if not selector:
        return None
    names: set[str] = set()
    for term in selector.get("nodeSelectorTerms") or ():
        for expr in term.get("matchFields") or ():
            if expr.get("key") == _NODE_SELECTOR_FIELD and expr.get("operator") == "In":
                names.update(expr.get("values") or ())
    return names


@dataclass(frozen=True, slots=True)
class _Request:
    """One device request to satisfy: the name it reports (``<req>`` or
    ``<req>/<subrequest>``), class, CEL selectors, mode and count."""

    name: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str
    count: int


def _request(name: str, exact: Mapping[str, Any]) -> _Request:
    return _Request(
        name,
        str(exact.get("deviceClassName", "")),
        tuple(
            str((s.get("cel") or {}).get("expression", ""))
            for s in exact.get("selectors") or ()
            if s.get("cel")
        ),
        str(exact.get("allocationMode") or "ExactCount"),
        int(exact.get("count") or 1),
    )


def _alternatives(request: Mapping[str, Any]) -> list[_Request]:
    """``exactly`` as one alternative, or ``firstAvailable[]`` in order."""
    name = str(request.get("name", ""))
    if request.get("firstAvailable"):
        return [_request(f"{name}/{sub.get('name', '')}", sub) for sub in request["firstAvailable"]]
    return [_request(name, request.get("exactly") or {})]


def _matching(
    request: _Request, devices: Sequence[tuple[DeviceId, Obj]], classes: Mapping[str, Obj]
) -> list[tuple[DeviceId, Obj]] | None:
    """Devices the class's and the request's selectors accept (None: class missing). A
    selector that errors on a device rejects it (the real allocator aborts the node)."""
    device_class = classes.get(request.class_name)
    if device_class is None:
        return None
    expressions = [
        str((s.get("cel") or {}).get("expression", ""))
        for s in (device_class.get("spec") or {}).get("selectors") or ()
        if s.get("cel")
    ] + list(request.selectors)
    out = []
    for device_id, device in devices:
        try:
            if all(device_matches(e, device_id[0], device) for e in expressions):
                out.append((device_id, device))
        except SelectorError as e:
            log.debug("device %s: %s", "/".join(device_id), e)
    return out


def _attribute_value(device: Mapping[str, Any], driver: str, name: str) -> Any:
    domain, ident = _qualified(name, driver)
    for key, value in (device.get("attributes") or {}).items():
        if _qualified(key, driver) == (domain, ident):
            return tuple(sorted(value.items()))
    return None


def _constraints_hold(
    constraints: Sequence[Mapping[str, Any]], picks: Sequence[tuple[str, DeviceId, Obj]]
) -> bool:
    """``matchAttribute``: every picked device of the listed requests (all if none are
    listed; a subrequest counts as its parent) has the attribute, with one value."""
    for constraint in constraints:
        attribute = constraint.get("matchAttribute")
        if not attribute:
            continue
        listed = set(constraint.get("requests") or ())
        values = set()
        for request, device_id, device in picks:
            parent = request.split("/", 1)[0]
            if listed and request not in listed and parent not in listed:
                continue
            value = _attribute_value(device, device_id[0], str(attribute))
            if value is None:
                return False
            values.add(value)
        if len(values) > 1:
            return False
    return True


def _allocate_claim(
    claim: Mapping[str, Any],
    devices: Sequence[tuple[DeviceId, Obj]],
    classes: Mapping[str, Obj],
    taken: set[DeviceId],
) -> list[tuple[str, DeviceId, Obj]] | None:
    """Picks (request name, device id, device) for every request of ``claim`` from the
    free ``devices``, honouring constraints, by depth-first search; None if impossible."""
    spec = (claim.get("spec") or {}).get("devices") or {}
    requests = list(spec.get("requests") or ())
    constraints = list(spec.get("constraints") or ())

    def search(
        i: int, picks: list[tuple[str, DeviceId, Obj]]
    ) -> list[tuple[str, DeviceId, Obj]] | None:
        if i == len(requests):
            return picks
        used = taken | {p[1] for p in picks}
        for alternative in _alternatives(requests[i]):
            matching = _matching(alternative, devices, classes)
            if not matching:
                continue
            free = [d for d in matching if d[0] not in used]
            if alternative.mode == "All":
                if len(free) != len(matching):
                    continue  # All needs every matching device
                options: Iterable[tuple[tuple[DeviceId, Obj], ...]] = [tuple(free)]
            else:
                options = itertools.combinations(free, alternative.count)
            for option in options:
                candidate = picks + [(alternative.name, d[0], d[1]) for d in option]
                if not _constraints_hold(constraints, candidate):
                    continue
                found = search(i + 1, candidate)
                if found is not None:
                    return found
        return None

    return search(0, [])


def allocate(
    claims: Sequence[Obj], node: str, state: DraState
) -> dict[tuple[str, str], list[tuple[str, DeviceId]]] | str:
    """The DynamicResources Filter for one node: an allocation for every unallocated claim
    of ``claims`` from the node's free devices, as (namespace, name) -> [(request,
    (driver, pool, device))]; or the reason the node fails (`CANNOT_ALLOCATE`, or
    `CLAIM_NOT_ON_NODE` for a claim allocated for another node)."""
    out: dict[tuple[str, str], list[tuple[str, DeviceId]]] = {}
    taken = set(state.allocated)
    devices = state.devices.get(node, [])
    for claim in claims:
        if (claim.get("status") or {}).get("allocation"):
            allowed = _allocated_node(claim)
            if allowed is not None and node not in allowed:
                return CLAIM_NOT_ON_NODE
            continue
        picks = _allocate_claim(claim, devices, state.classes, taken)
        if picks is None:
            return CANNOT_ALLOCATE
        taken |= {p[1] for p in picks}
        meta = claim["metadata"]
        out[(meta.get("namespace", ""), meta["name"])] = [(r, d) for r, d, _ in picks]
    return out


def allocation_status(picks: Sequence[tuple[str, DeviceId]], node: str) -> Obj:
    """``status.allocation`` for ``picks`` on ``node``: ``devices.results[{request,
    driver, pool, device}]`` and a ``nodeSelector`` on the node's ``metadata.name``."""
    return {
        "devices": {
            "results": [
                {"request": r, "driver": d[0], "pool": d[1], "device": d[2]} for r, d in picks
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": _NODE_SELECTOR_FIELD, "operator": "In", "values": [node]}]}
            ]
        },
    }


def reserve(claim: Obj, pod: Mapping[str, Any], allocation: Obj | None) -> None:
    """PreBind on a claim, in place: set ``allocation`` (with the delete-protection
    finalizer) if given, and add the pod to ``status.reservedFor`` (``{resource: pods,
    name, uid}``) unless it is there."""
    meta = pod.get("metadata") or {}
    status = claim.setdefault("status", {})
    if allocation is not None:
        status["allocation"] = allocation
        finalizers = claim["metadata"].setdefault("finalizers", [])
        if DELETE_PROTECTION_FINALIZER not in finalizers:
            finalizers.append(DELETE_PROTECTION_FINALIZER)
    reserved = status.setdefault("reservedFor", [])
    if not any(r.get("uid") == meta.get("uid") for r in reserved):
        reserved.append({"resource": "pods", "name": meta.get("name"), "uid": meta.get("uid")})


# -- controllers ------------------------------------------------------------------------


def _node_ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
    )


class DraDriver:
    """NVIDIA's DRA kubelet plugin on every DRA node, as far as the API sees it: once the
    node is Ready, its ResourceSlice (`resource_slice`) is published, and re-published
    with the next pool generation if its devices change; slices of nodes that are gone
    are deleted (the garbage collector follows their ownerReference in a real cluster).
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    async def run(self) -> None:
        """Sync on every node or slice write, until cancelled."""
        await self._store.run_passes(self.sync_once, "dra-driver", kinds=(NODES, RESOURCESLICES))

    def sync_once(self) -> None:
        """One pass: create, update or delete slices of `DRIVER`."""
        nodes = {n["metadata"]["name"]: n for n in self._store.list(NODES, copy_objects=False)[0]}
        slices: dict[str, Obj] = {}
        for rs in self._store.list(RESOURCESLICES, copy_objects=False)[0]:
            spec = rs.get("spec") or {}
            if spec.get("driver") != DRIVER:
                continue
            node = nodes.get(str(spec.get("nodeName", "")))
            owner = (rs["metadata"].get("ownerReferences") or [{}])[0].get("uid")
            if node is None or (owner and owner != node["metadata"].get("uid")):
                self._delete(rs)
            else:
                slices[node["metadata"]["name"]] = rs
        for name, node in nodes.items():
            if not _node_ready(node) or node["metadata"].get("deletionTimestamp"):
                continue
            current = slices.get(name)
            generation = int(
                ((current or {}).get("spec") or {}).get("pool", {}).get("generation", 0)
            )
            desired = resource_slice(node, generation or 1)
            if desired is None:
                continue
            try:
                if current is None:
                    created = self._store.create(RESOURCESLICES, desired)
                    log.info(
                        "published resourceslice %s for node %s", created["metadata"]["name"], name
                    )
                elif current["spec"]["devices"] != desired["spec"]["devices"]:
                    spec = {
                        **desired["spec"],
                        "pool": {**desired["spec"]["pool"], "generation": generation + 1},
                    }
                    self._store.update(RESOURCESLICES, {**current, "spec": spec})
            except ApiError as e:
                log.warning("publishing the resourceslice of node %s failed: %s", name, e.message)

    def _delete(self, rs: Obj) -> None:
        try:
            self._store.delete(RESOURCESLICES, None, rs["metadata"]["name"])
        except NotFound:
            return
        log.info("deleted resourceslice %s: node %s is gone", rs["metadata"]["name"],
                 (rs.get("spec") or {}).get("nodeName"))  # fmt: skip


def _generate_name(pod: str, claim: str) -> str:
    """The controller's ``generateName``: ``<pod>-<claim>-``; when that is longer than 57
    characters, both names cut in proportion and joined by one hyphen (no trailing one),
    exactly as ``handleClaim`` computes it."""
    name = f"{pod}-{claim}-"
    if len(name) > 57:
        name = f"{pod[: len(pod) * 57 // len(name)]}-{claim[: len(claim) * 57 // len(name)]}"
    return name


def _pod_done(pod: Mapping[str, Any]) -> bool:
    """``isPodDone``: terminal, or being deleted before it ever got a node."""
    return is_terminal(pod) or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
        and not (pod.get("spec") or {}).get("nodeName")
    )


class ResourceClaimController:
    """kube-controller-manager's resourceclaim controller (kubernetes
    ``pkg/controller/resourceclaim/controller.go``), one pass per pod or claim write:

    - ``syncPod``: for each ``spec.resourceClaims[]`` entry with
      ``resourceClaimTemplateName`` and no ``status.resourceClaimStatuses`` entry, a claim
      from the template (``generateName <pod>-<claim>-``, the template's labels and
      annotations plus `POD_CLAIM_NAME_ANNOTATION`, a controller ownerReference to the pod;
      an existing claim owned by the pod for that entry is reused), then the status entry
      ``{name, resourceClaimName}``. A missing template is logged and retried.
    - ``syncClaim``: ``status.reservedFor`` entries whose pod is gone (or replaced) or done
      are removed; when none is left the allocation is cleared and the delete-protection
      finalizer removed; an unreserved claim generated for a pod that is done, replaced or
      gone is deleted (the pod-gone case is the garbage collector's in a real cluster).
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._warned: set[tuple[str, str]] = set()

    async def run(self) -> None:
        """Sync on every pod, claim or template write, until cancelled. A pass walks
        every pod, so writes are let settle `SETTLE_SECONDS` first, as the sim's kubelet
        does: a scheduler binding 500 pods one by one costs a few passes, not 500 (the
        real controller's informer handlers queue each changed pod's key instead,
        ``enqueuePod``)."""
        await self._store.run_passes(
            self.sync_once, "resourceclaim-controller",
            kinds=(PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES),
            settle_seconds=SETTLE_SECONDS,
        )  # fmt: skip

    def sync_once(self) -> None:
        """One pass over pods and claims. Pods are walked unsorted and without copies
        (every pod write wakes this controller; in a cluster it is an informer's
        handler, not a pass over every pod), and indexed by uid only when claims exist."""
        claims = self._store.list(RESOURCECLAIMS, copy_objects=False)[0]
        pods = list(self._store.iter_objects(PODS))
        for pod in pods:
            if (pod.get("spec") or {}).get("resourceClaims") and not _pod_done(pod):
                self._sync_pod(pod, claims)
        if claims:
            by_uid = {p["metadata"]["uid"]: p for p in pods}
            for claim in claims:
                self._sync_claim(claim, by_uid)

    def _sync_pod(self, pod: Obj, claims: Sequence[Obj]) -> None:
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        recorded = {
            s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        new_statuses = []
        for entry in pod["spec"]["resourceClaims"]:
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or entry.get("name") in recorded:
                continue
            existing = next(
                (
                    c for c in claims
                    if c["metadata"].get("namespace") == namespace
                    and (c["metadata"].get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) == entry.get("name")
                    and any(o.get("uid") == meta["uid"] and o.get("controller")
                            for o in c["metadata"].get("ownerReferences") or ())
                ),
                None,
            )  # fmt: skip
            if existing is None:
                existing = self._create_claim(pod, entry, str(template_name))
                if existing is None:
                    continue
            new_statuses.append(
                {"name": entry["name"], "resourceClaimName": existing["metadata"]["name"]}
            )
        if not new_statuses:
            return

        def record(obj: Obj) -> None:
            statuses = obj.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
            statuses.extend(
                s for s in new_statuses if s["name"] not in {x.get("name") for x in statuses}
            )

        try:
            self._store.mutate(PODS, namespace, name, record, subresource="status")
        except ApiError as e:
            log.warning(
                "recording resource claims of pod %s/%s failed: %s", namespace, name, e.message
            )

    def _create_claim(self, pod: Obj, entry: Mapping[str, Any], template_name: str) -> Obj | None:
        meta = pod["metadata"]
        namespace = meta["namespace"]
        try:
            template = self._store.get(RESOURCECLAIMTEMPLATES, namespace, template_name)
        except NotFound as e:
            key = (meta["uid"], template_name)
            if key not in self._warned:
                self._warned.add(key)
                log.warning('pod %s/%s: resource claim template "%s": %s', namespace, meta["name"],
                            template_name, e.message)  # fmt: skip
            return None
        template_meta = (template.get("spec") or {}).get("metadata") or {}
        claim = {
            "metadata": {
                "generateName": _generate_name(meta["name"], str(entry.get("name", ""))),
                "namespace": namespace,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True,
                                     "blockOwnerDeletion": True}],
                "annotations": {**(template_meta.get("annotations") or {}),
                                POD_CLAIM_NAME_ANNOTATION: entry.get("name")},
            },
            "spec": (template.get("spec") or {}).get("spec") or {},
        }  # fmt: skip
        if template_meta.get("labels"):
            claim["metadata"]["labels"] = dict(template_meta["labels"])
        try:
            created = self._store.create(RESOURCECLAIMS, claim)
        except ApiError as e:
            log.warning(
                "creating a resource claim for pod %s/%s failed: %s",
                namespace,
                meta["name"],
                e.message,
            )
            return None
        log.info(
            "created resourceclaim %s/%s for pod %s",
            namespace,
            created["metadata"]["name"],
            meta["name"],
        )
        return created

    def _sync_claim(self, claim: Obj, pods: Mapping[str, Obj]) -> None:
        """``syncClaim``: drop reservations of pods gone, replaced or done; deallocate
        (only a claim with the delete-protection finalizer, i.e. allocated by the
        scheduler) when the last one goes or when the claim is being deleted; then delete
        an unreserved claim generated for a pod that is done, replaced or gone."""
        meta, status = claim["metadata"], claim.get("status") or {}
        namespace, name = meta.get("namespace", ""), meta["name"]
        reserved = list(status.get("reservedFor") or ())
        valid = [
            r for r in reserved
            if r.get("resource") != "pods"
            or ((pod := pods.get(str(r.get("uid")))) is not None and not _pod_done(pod))
        ]  # fmt: skip
        protected = DELETE_PROTECTION_FINALIZER in (meta.get("finalizers") or ())
        try:
            if len(valid) < len(reserved) or (
                protected and meta.get("deletionTimestamp") and not valid
            ):

                def release(obj: Obj) -> None:
                    st = obj.setdefault("status", {})
                    st["reservedFor"] = valid
                    if not valid:
                        st.pop("reservedFor")
                        if protected:  # allocated by the scheduler: "deallocate"
                            st.pop("allocation", None)

                updated = self._store.mutate(
                    RESOURCECLAIMS, namespace, name, release, subresource="status"
                )
                if protected and not (updated.get("status") or {}).get("allocation"):
                    log.info("deallocated resourceclaim %s/%s: no pod reserves it", namespace, name)
                    self._store.mutate(RESOURCECLAIMS, namespace, name, _drop_finalizer)
            if valid:
                return
            owner = next(
                (o for o in meta.get("ownerReferences") or ()
                 if o.get("apiVersion") == "v1" and o.get("kind") == "Pod" and o.get("controller")),
                None,
            )  # fmt: skip
            if owner is None or meta.get("deletionTimestamp"):
                return
            pod = pods.get(str(owner.get("uid")))
            if pod is None or _pod_done(pod):
                self._store.delete(RESOURCECLAIMS, namespace, name)
                log.info("deleted resourceclaim %s/%s: pod %s is done or gone", namespace, name,
                         owner.get("name"))  # fmt: skip
        except NotFound:
            return
        except ApiError as e:
            log.warning("syncing resourceclaim %s/%s failed: %s", namespace, name, e.message)


def _drop_finalizer(obj: Obj) -> None:
    finalizers = [
        f for f in obj["metadata"].get("finalizers") or () if f != DELETE_PROTECTION_FINALIZER
    ]
    if finalizers:
        obj["metadata"]["finalizers"] = finalizers
    else:
        obj["metadata"].pop("finalizers", None)


def kubelet_plugin_app(labels: Mapping[str, str]) -> str | None:
    """The DaemonSet app name of NVIDIA's DRA kubelet plugin on a DRA node, else None."""
    return _KUBELET_PLUGIN_APP if runs_dra(labels) else None
