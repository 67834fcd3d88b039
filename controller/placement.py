"""Where each GPU-sharing layer's pods can run (`Placements`), and what that means for a
trigger and for the NodePools that may serve it. Pure.

A sharing layer's pods run only on the nodes its node agent runs on, and each layer's
install decides that with a node selector. Sources: HAMi ``charts/hami/values.yaml``
``devicePlugin.nvidiaNodeSelector: {gpu: "on"}`` and ``templates/device-plugin/
daemonsetnvidia.yaml`` (Project-HAMi/HAMi); tensor-fusion ``config/samples/
tensorfusioncluster-nvidia.yaml`` (NexusGPU/tensor-fusion: the pool's
``nodeManagerConfig.nodeSelector`` on ``nvidia.com/gpu.present In [true]``); the GPU
Operator's ``assets/state-device-plugin/0500_daemonset.yaml`` (nodeSelector
``nvidia.com/gpu.deploy.device-plugin: "true"``) and ``controllers/state_manager.go``
``addGPUStateLabels``, which keeps a value already set on the node (NVIDIA/gpu-operator):

==============  ==============================================  ===========================
layer           default placement                               where it comes from
==============  ==============================================  ===========================
hami            ``gpu In [on]``                                 HAMi chart
                                                                ``devicePlugin.nvidiaNodeSelector``
                                                                (``gpu: "on"``): only those
                                                                nodes run HAMi's device plugin
kai             ``gpu NotIn [on]``                              KAI binds through the plain
                                                                device plugin; on a HAMi node
                                                                ``nvidia.com/gpu`` is HAMi's
tensor-fusion   ``nvidia.com/gpu.present In [true]``            its GPUPool's
                                                                ``nodeManagerConfig.nodeSelector``
                                                                (chart ``cluster.pool.nodeSelectorKey``)
dra             ``nvidia.com/gpu.deploy.device-plugin In        the GPU Operator's per-node
                [false]``                                       switch: the node runs the DRA
                                                                kubelet plugin instead
==============  ==============================================  ===========================

A pod's layers are the ``where`` of its intent's sources (`layers_of`). A NodePool can
serve the pod only if a node it makes can satisfy every requirement (`unmet`): the pool
defines the key (template label or requirement) and admits the value; or the key is
well known to Karpenter; or the key is a label GPU agents put on every GPU node after it
joins (`RUNTIME_GPU_LABELS`), on a pool that makes GPUs; or the requirement only
excludes (``NotIn``, ``DoesNotExist``), which Karpenter accepts on a key no NodePool
defines (``Requirements.Compatible``, kubernetes-sigs/karpenter
pkg/scheduling/requirements.go). A trigger carries the requirements Karpenter can resolve
for its pool (`trigger_terms`); a runtime label the pool does not define is left out, as
Karpenter would refuse a pod selecting a custom key no NodePool defines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from controller import karpenter
from controller.model import Requirement
from controller.nodes import NodePoolInfo
from controller.reasons import NoPoolPlaces
from intent.contract import Intent

#: The sharing layers, as `intent.contract.Source.where` names them (`intent.sharing`
#: reads the last five).
LAYERS: Final = ("hami", "kai", "tensor-fusion", "dra", "volcano", "aliyun", "qgpu", "vcuda", "mig")

#: Labels GPU agents put on every NVIDIA GPU node once it has joined, with their value:
#: the GPU Operator's ``commonGPULabelKey`` (NVIDIA/gpu-operator
#: controllers/state_manager.go). A pool that makes GPU nodes makes nodes with them, though
#: Karpenter cannot know it.
RUNTIME_GPU_LABELS: Final[Mapping[str, str]] = {"nvidia.com/gpu.present": "true"}

Requirements = tuple[Requirement, ...]


@dataclass(frozen=True, slots=True)
class Placements:
    """The node-selector requirements (ANDed) of each sharing layer's nodes; ``()``: any
    node. Defaults are the layers' own (module doc); ``--placement LAYER=EXPR`` sets one
    (`parse_placement`)."""

    hami: Requirements = (Requirement("gpu", "In", ("on",)),)
    kai: Requirements = (Requirement("gpu", "NotIn", ("on",)),)
    tensor_fusion: Requirements = (Requirement("nvidia.com/gpu.present", "In", ("true",)),)
    dra: Requirements = (Requirement("nvidia.com/gpu.deploy.device-plugin", "In", ("false",)),)
    #: volcano-vgpu-device-plugin's DaemonSet has no node selector (its chart's
    #: ``nodeSelector: {}``): any NVIDIA GPU node, as for tensor-fusion.
    volcano: Requirements = (Requirement("nvidia.com/gpu.present", "In", ("true",)),)
    #: gpushare-device-plugin ``device-plugin-ds.yaml`` ``nodeSelector: gpushare: "true"``.
    aliyun: Requirements = (Requirement("gpushare", "In", ("true",)),)
    #: TKE labels every qGPU node ``qgpu-device-enable=enable``, its DaemonSet's selector.
    qgpu: Requirements = (Requirement("qgpu-device-enable", "In", ("enable",)),)
    #: tkestack gpu-manager ``gpu-manager.yaml`` ``nodeSelector: nvidia-device-enable: enable``.
    vcuda: Requirements = (Requirement("nvidia-device-enable", "In", ("enable",)),)
    #: A MIG slice (``nvidia.com/mig-<profile>``) runs only where the GPU Operator's MIG
    #: manager split the GPUs: a node whose ``nvidia.com/mig.config`` names a mig-parted
    #: profile (the label a NodePool's template sets; ``all-disabled`` is the operator's
    #: default, gpu-operator ``migConfigDisabledValue``). Sources: docs/sources/placement.md
    #: section 1 (MIG).
    mig: Requirements = (
        Requirement("nvidia.com/mig.config", "Exists", ()),
        Requirement("nvidia.com/mig.config", "NotIn", ("all-disabled",)),
    )

    def of(self, layer: str) -> Requirements:
        """The placement of ``layer`` (one of `LAYERS`)."""
        value: Requirements = getattr(self, layer.replace("-", "_"))
        return value

    def with_layer(self, layer: str, requirements: Requirements) -> Placements:
        """A copy with ``layer``'s placement replaced."""
        return replace(self, **{layer.replace("-", "_"): requirements})

    def for_intent(self, intent: Intent) -> Requirements:
        """The requirements of every layer ``intent`` comes from (`layers_of`), in order,
        each once."""
        out: list[Requirement] = []
        for layer in layers_of(intent):
            out.extend(r for r in self.of(layer) if r not in out)
        return tuple(out)

    def flags(self) -> list[str]:
        """These placements as ``--placement`` values (`parse_placement` reads them back)."""
        out = []
        for f in fields(self):
            layer = f.name.replace("_", "-")
            text = ",".join(show(r) for r in self.of(layer))
            out.append(f"{layer}={text}")
        return out


def layers_of(intent: Intent) -> tuple[str, ...]:
    """The sharing layers ``intent`` was read from (its sources' ``where``), in `LAYERS`
    order."""
    wheres = {s.where for s in intent.source}
    return tuple(layer for layer in LAYERS if layer in wheres)


def show(r: Requirement) -> str:
    """A requirement as people (and ``--placement``) write it: ``gpu=on``, ``gpu!=on``,
    ``key In (a|b)``... (`parse_requirement` reads it back)."""
    if r.operator in ("In", "NotIn") and len(r.values) == 1:
        return f"{r.key}{'=' if r.operator == 'In' else '!='}{r.values[0]}"
    if r.operator in ("Exists", "DoesNotExist"):
        return f"{r.key} {r.operator}"
    return f"{r.key} {r.operator} ({'|'.join(r.values)})"


def parse_requirement(text: str) -> Requirement:
    """One requirement: ``key=value``, ``key!=value``, ``key Exists``, ``key
    DoesNotExist``, or ``key In|NotIn|Gt|Lt (v1|v2)``. Raises ValueError."""
    text = text.strip()
    parts = text.split(None, 2)
    if len(parts) >= 2 and parts[1] in ("In", "NotIn", "Gt", "Lt", "Exists", "DoesNotExist"):
        key, operator = parts[0], parts[1]
        raw = parts[2].strip() if len(parts) == 3 else ""
        values = tuple(v for v in raw.strip("()").split("|") if v) if raw else ()
        if (operator in ("Exists", "DoesNotExist")) != (not values):
            raise ValueError(f"{text!r}: {operator} takes {'no' if values else 'some'} values")
        return Requirement(key, operator, values)
    for sign, operator in (("!=", "NotIn"), ("=", "In")):
        key, found, value = text.partition(sign)
        if found and key and value:
            return Requirement(key.strip(), operator, (value.strip(),))
    raise ValueError(
        f"{text!r}: expected key=value, key!=value, key Exists, key DoesNotExist or key In (a|b)"
    )


def parse_placement(text: str) -> tuple[str, Requirements]:
    """A ``--placement`` value: ``LAYER=REQ[,REQ...]`` (``LAYER=`` for any node), each
    REQ as `parse_requirement` reads it. Raises ValueError."""
    layer, found, rest = text.partition("=")
    layer = layer.strip()
    if not found or layer not in LAYERS:
        raise ValueError(f"{text!r}: expected LAYER=REQUIREMENTS, LAYER one of {', '.join(LAYERS)}")
    return layer, tuple(parse_requirement(r) for r in rest.split(",") if r.strip())


def placements_from(values: Iterable[str], base: Placements | None = None) -> Placements:
    """``base`` (the defaults when None) with each ``--placement`` value applied in order."""
    placements = base or Placements()
    for text in values:
        placements = placements.with_layer(*parse_placement(text))
    return placements


def _met(r: Requirement, pool: NodePoolInfo) -> bool:
    """Whether some node ``pool`` makes can satisfy ``r`` (module doc)."""
    if r.key in pool.labels:
        return r.admits(pool.labels[r.key])
    own = [q for q in pool.requirements if q.key == r.key]
    if not own:
        if r.key in RUNTIME_GPU_LABELS and pool.makes_gpus():
            return r.admits(RUNTIME_GPU_LABELS[r.key])
        return karpenter.is_well_known_label(r.key) or r.operator in ("NotIn", "DoesNotExist")
    if r.operator == "In":
        return any(pool.admits(r.key, v) for v in r.values)
    if r.operator == "NotIn":
        return not any(q.operator == "In" and set(q.values) <= set(r.values) for q in own)
    if r.operator == "Exists":
        return not any(q.operator == "DoesNotExist" for q in own)
    if r.operator == "DoesNotExist":
        return not any(q.operator in ("In", "Exists") for q in own)
    return True  # Gt/Lt: numeric ranges are left to Karpenter


def unmet(requirements: Requirements, pool: NodePoolInfo) -> Requirement | None:
    """The first of ``requirements`` no node of ``pool`` can satisfy, None when a node of
    it can satisfy them all."""
    return next((r for r in requirements if not _met(r, pool)), None)


def labels_meet(requirements: Requirements, labels: Mapping[str, str]) -> bool:
    """Whether a node (or NodeClaim) with ``labels`` satisfies every one of
    ``requirements``: a key it lacks has no value (``In``/``Exists`` fail), except a
    runtime label (`RUNTIME_GPU_LABELS`), which the GPU node it is or becomes carries.
    Strict, unlike the check of a pod's own selector on a new node: the layer's agent
    runs only where the label is."""
    for r in requirements:
        value = labels.get(r.key, RUNTIME_GPU_LABELS.get(r.key))
        if value is None:
            if r.operator not in ("NotIn", "DoesNotExist"):
                return False
        elif not r.admits(value):
            return False
    return True


def unplaceable(intent: Intent, placements: Placements, pool: NodePoolInfo) -> NoPoolPlaces:
    """Why a pod of ``intent`` that ``pool`` would otherwise serve cannot be placed (its
    ``Unresolvable`` reason, `controller.messages` words it): the first of its layers
    whose placement ``pool`` cannot meet, and the requirement it misses (none named when
    every layer's is met)."""
    for layer in layers_of(intent):
        missing = unmet(placements.of(layer), pool)
        if missing is not None:
            return NoPoolPlaces(layer, missing)
    return NoPoolPlaces()


def unplaceable_layer(intent: Intent, placements: Placements, pool: NodePoolInfo) -> str:
    """The first layer of ``intent`` whose placement ``pool`` cannot meet (`LAYERS`
    spelling), ``""`` when none."""
    return next((x for x in layers_of(intent) if unmet(placements.of(x), pool)), "")


def trigger_terms(
    requirements: Requirements, pool: NodePoolInfo
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """What a trigger for ``pool`` carries of a placement: node-selector entries for a
    single-value ``In``, required node-affinity expressions for the rest, leaving out a
    runtime label (`RUNTIME_GPU_LABELS`) or custom key the pool does not define that the
    requirement does not only exclude (Karpenter would refuse the trigger for it; a GPU
    node of the pool carries the runtime label anyway)."""
    keys = pool.label_keys()
    selector: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for r in requirements:
        excludes = r.operator in ("NotIn", "DoesNotExist")
        if not (r.key in keys or karpenter.is_well_known_label(r.key) or excludes):
            continue
        if r.operator == "In" and len(r.values) == 1 and r.key not in selector:
            selector[r.key] = r.values[0]
        else:
            expressions.append({"key": r.key, "operator": r.operator, "values": list(r.values)})
    return selector, expressions


def to_annotation(requirements: Requirements) -> str:
    """A placement as the trigger annotation `controller.model.ANNOTATION_PLACEMENT` holds
    it (compact JSON; `controller.model.parse_requirements` reads it back)."""
    return json.dumps(
        [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in requirements],
        separators=(",", ":"),
    )
