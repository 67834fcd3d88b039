"""The words: every text the controller's decisions show people, rendered from the typed
reasons the planner returns (`controller.reasons`). Scale-up status messages (the pod's
``gpu-intent.io/scale-up`` annotation), the Events beside them, the retry reason kept in
``gpu-intent.io/retry``, the reasons logged for trigger and NodeClaim deletes, and the
message of a trigger's ``PodScheduled`` condition are all made here, and only here.
Annotations, Events and logs are a contract: change a text here and nowhere else. Pure.

`render` takes any reason; `status_text`, `pool_text`, `constraint_text`, `hold_text`,
`failure_text` and `delete_text` take one family each (`controller.reasons`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, assert_never

from controller.model import ANNOTATION_RETRY
from controller.placement import show
from controller.reasons import (
    AffinityUnmet,
    BackingOff,
    ClaimDeleted,
    ClaimNotReady,
    ClaimReady,
    ComingUp,
    Constraint,
    Contested,
    Cooldown,
    DefaultPoolMissing,
    DeleteReason,
    FailureReason,
    FreeGpus,
    GaveUp,
    HeldBack,
    Hold,
    Invalid,
    Native,
    NoDefaultPool,
    NodeReady,
    NoNodeRuns,
    NoPool,
    NoPoolOffers,
    NoPoolPlaces,
    NotNeeded,
    OfferingPoolsRefuse,
    PoolAtLimits,
    PoolTriggerLimit,
    Provisioning,
    RateLimited,
    Reason,
    Scheduled,
    SelectorLabelUnknown,
    SelectorNotAdmitted,
    Settling,
    StatusReason,
    TaintRefused,
    TooManyGpus,
    Triggered,
    TriggerFailed,
    TriggerLimit,
    Unresolvable,
    Withdrawn,
)
from intent.text import gpus_for_people

#: Per GPU-sharing layer (`controller.placement.LAYERS`): where its agent runs, and the
#: setting that decides it (`NoPoolPlaces`).
WHERE: Final[Mapping[str, tuple[str, str]]] = {
    "hami": ("where HAMi's device plugin runs", "HAMi chart devicePlugin.nvidiaNodeSelector"),
    "kai": (
        "where KAI's pods get GPUs from the plain device plugin (not HAMi's)",
        "the HAMi placement it excludes",
    ),
    "tensor-fusion": (
        "where tensor-fusion's GPUPool selects nodes",
        "GPUPool spec.nodeManagerConfig.nodeSelector",
    ),
    "dra": (
        "where NVIDIA's DRA kubelet plugin runs",
        "the GPU Operator's nvidia.com/gpu.deploy.device-plugin switch",
    ),
    "volcano": (
        "where Volcano's vGPU device plugin runs",
        "its DaemonSet, on every node by default",
    ),
    "aliyun": (
        "where Alibaba's gpushare device plugin runs",
        "its DaemonSet's nodeSelector gpushare=true",
    ),
    "qgpu": ("where TKE's qGPU device plugin runs", "the label TKE puts on qGPU nodes"),
    "vcuda": (
        "where tkestack's gpu-manager runs",
        "its DaemonSet's nodeSelector nvidia-device-enable=enable",
    ),
    "mig": (
        "where the GPU Operator's MIG manager has split the GPUs",
        "the nvidia.com/mig.config label, a mig-parted profile such as all-1g.5gb",
    ),
}

_DELETED_BEFORE_READY: Final = (
    "was deleted before it was Ready (Karpenter deletes a NodeClaim when the cloud has no "
    "capacity for it, or when it does not launch within 5 min or register within 15 min)"
)


def render(reason: Reason) -> str:
    """The text of any typed reason (`controller.reasons.Reason`)."""
    if isinstance(reason, _STATUS):
        return status_text(reason)
    if isinstance(reason, _POOL):
        return pool_text(reason)
    if isinstance(reason, _CONSTRAINT):
        return constraint_text(reason)
    if isinstance(reason, _HOLD):
        return hold_text(reason)
    if isinstance(reason, _FAILURE):
        return failure_text(reason)
    return delete_text(reason)


def status_text(why: StatusReason) -> str:
    """The message of the status (and of its Event) a pod is told for ``why``."""
    match why:
        case Invalid(error=error):
            return f"ignoring this pod: its gpu-intent annotations do not parse: {error}"
        case Native():
            return (
                "Karpenter can provision for this pod itself (whole nvidia.com/gpu); "
                "no trigger needed"
            )
        case Unresolvable(why=no_pool):
            return pool_text(no_pool)
        case HeldBack(why=hold):
            return hold_text(hold)
        case BackingOff(retry=retry, attempts=attempts):
            return (
                f"scale-up failed ({retry.attempts} of {attempts} attempts): {retry.reason}; "
                f"a new trigger after {retry.retry_at}"
            )
        case GaveUp(ref=ref, retry=retry):
            return (
                f"gave up after {retry.attempts} failed scale-ups; last: {retry.reason}. "
                "Check the NodePool (limits, instance types, capacity in its zones) and "
                "Karpenter's events, then try again: "
                f"kubectl annotate pod -n {ref.namespace} {ref.name} {ANNOTATION_RETRY}-"
            )
        case FreeGpus(node_claim=claim, node=node):
            return (
                f"NodeClaim {claim} is Ready as node {node or '(unknown)'} with GPUs free "
                "for this pod; left to the pod's scheduler"
            )
        case Triggered(trigger=trigger, gpus=gpus, pool=pool):
            return (
                f"trigger {trigger} requests {gpus} nvidia.com/gpu on NodePool {pool}; "
                "waiting for Karpenter to create a NodeClaim (none is known yet)"
            )
        case Provisioning():
            return _provisioning(why)
        case NodeReady():
            return _node_ready(why)
        case Scheduled():
            return _scheduled(why)
        case _:
            assert_never(why)


def _provisioning(why: Provisioning) -> str:
    itype = f" ({why.instance_type})" if why.instance_type else ""
    return (
        f"Karpenter NodeClaim {why.node_claim}{itype} is being provisioned for trigger "
        f"{why.trigger} ({why.gpus} GPU, {gpus_for_people(why.used)} used by {why.pods} pod(s))"
    )


def _node_ready(why: NodeReady) -> str:
    node = why.node or "(unknown)"
    if why.dra_devices is not None:
        return (
            f"NodeClaim {why.node_claim}'s node {node} publishes {why.dra_devices} GPU "
            "device(s) in ResourceSlices (DRA; Karpenter's Initialized stays Unknown, "
            "ResourceNotRegistered, as on any DRA node: not a failure); removed trigger "
            f"{why.trigger} so the pod's scheduler can allocate its claims there"
        )
    if why.advertised:
        return (
            f"NodeClaim {why.node_claim}'s node {node} advertises {_offer(why.advertised)} "
            "from its sharing layer's device plugin, not nvidia.com/gpu (Karpenter's "
            "Initialized stays Unknown, ResourceNotRegistered: not a failure); removed "
            f"trigger {why.trigger} so the pod's scheduler can use the capacity"
        )
    return (
        f"NodeClaim {why.node_claim} is Ready as node {node}; removed trigger "
        f"{why.trigger} so the pod's scheduler can use the capacity"
    )


def _scheduled(why: Scheduled) -> str:
    claim = f" (NodeClaim {why.node_claim})" if why.node_claim else " (no NodeClaim known for it)"
    message = f"scheduled on node {why.node}{claim}"
    if why.dra_devices is not None:
        message += (
            f"; its {why.dra_devices} GPU(s) are DRA ResourceSlice devices, so Karpenter's "
            "Initialized stays Unknown (ResourceNotRegistered): not a failure"
        )
    elif why.advertised:
        message += (
            f"; its node advertises {_offer(why.advertised)}, not nvidia.com/gpu, so "
            "Karpenter's Initialized stays Unknown (ResourceNotRegistered): not a failure"
        )
    return message


def _few(names: tuple[str, ...]) -> str:
    """At most three of ``names``, comma-separated, then "and N more"."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if names[3:] else "")


def _offer(advertised: tuple[tuple[str, str], ...]) -> str:
    """``volcano.sh/vgpu-memory=91936, volcano.sh/vgpu-number=40``: what a device plugin
    advertises, as `controller.nodes.advertised` reads it."""
    return ", ".join(f"{name}={value}" for name, value in advertised)


def pool_text(why: NoPool) -> str:
    """Why no NodePool serves a pod (its ``Unresolvable`` message)."""
    match why:
        case TaintRefused(pool=pool, key=key, value=value, effect=effect):
            shown = f"={value}" if value else ""
            return f"the pod does not tolerate NodePool {pool}'s taint {key}{shown}:{effect}"
        case DefaultPoolMissing(pool=pool):
            return f"default NodePool {pool!r} does not exist or is not Ready"
        case NoDefaultPool():
            return "the intent names no GPU model and no default NodePool is configured"
        case NoPoolOffers(model=model, label=label):
            return f"no Ready NodePool offers GPU model {model!r} ({label})"
        case OfferingPoolsRefuse(model=model, refused=refused):
            return f"no Ready NodePool offering GPU model {model!r} will take it: " + pool_text(
                refused
            )
        case NoPoolPlaces(layer=layer, missing=missing):
            if missing is None or layer not in WHERE:
                return "no NodePool makes nodes where this pod's GPU-sharing layer runs"
            what, setting = WHERE[layer]
            return (
                f"no NodePool makes nodes with {show(missing)}, {what} ({setting}); add "
                f"the label to a GPU NodePool's template (spec.template.metadata.labels), "
                f"or set --placement {layer}=... (chart value controller.placement.{layer})"
            )
        case NoNodeRuns(unmet=unmet):
            return f"no node Karpenter can make will run this pod: {constraint_text(unmet)}"
        case _:
            assert_never(why)


def constraint_text(why: Constraint) -> str:
    """The term of a pod's node selector or affinity no node of its NodePool satisfies."""
    match why:
        case SelectorNotAdmitted(key=key, value=value, pool=pool):
            return f"nodeSelector {key}={value}: NodePool {pool} does not admit it"
        case SelectorLabelUnknown(key=key, value=value, pool=pool):
            return f"nodeSelector {key}={value}: no node of NodePool {pool} will have label {key}"
        case AffinityUnmet(requirement=r, pool=pool):
            return (
                f"required node affinity {r.key} {r.operator} [{','.join(r.values)}]: "
                f"no node of NodePool {pool} can satisfy it"
            )
        case _:
            assert_never(why)


def hold_text(why: Hold) -> str:
    """Why a new trigger waits (its pods' ``Waiting`` message)."""
    match why:
        case Cooldown(removed=removed, seconds=seconds):
            return (
                f"a trigger of this group was removed as unneeded at {removed:%H:%M:%S}; "
                f"waiting out the {seconds:g}s cooldown before buying again"
            )
        case TooManyGpus(gpus=gpus, cap=cap):
            return (
                f"needs {gpus} GPUs in one trigger, more than the cap of "
                f"{cap} (--max-gpus-per-trigger); waiting"
            )
        case TriggerLimit(cap=cap):
            return f"trigger limit ({cap}) reached; waiting"
        case PoolTriggerLimit(pool=pool, cap=cap):
            return (
                f"trigger limit of NodePool {pool} ({cap}, --max-triggers-per-pool) "
                "reached; waiting"
            )
        case RateLimited():
            return "trigger creation rate limit reached; waiting"
        case Contested(until=until):
            return (
                "capacity on its way for KAI pods could take this pod's node first (KAI "
                "binds every session, on the fitting node with the fewest idle GPUs); "
                f"buying once it is Ready, at the latest at {until:%H:%M:%S}"
            )
        case ComingUp(claim=claim, until=until):
            return (
                f"Karpenter's NodeClaim {claim}, launched for other pods that went to other "
                "nodes, has GPUs free for this pod once it is Ready; buying only if it "
                f"comes up without room, at the latest at {until:%H:%M:%S}"
            )
        case Settling(claims=claims, until=until, coming=coming):
            named = _few(claims)
            if coming:
                named += f", with {_few(coming)} on the way,"
            return (
                f"Ready NodeClaims {named} have the GPUs in all for this pod and "
                "the others left without room; their scheduler is still placing pods; "
                f"buying only if it places none here, at the latest at {until:%H:%M:%S}"
            )
        case _:
            assert_never(why)


def failure_text(why: FailureReason) -> str:
    """Why a trigger failed: the reason a pod's retry state keeps
    (`controller.model.RetryState.reason`) and the delete logs."""
    match why:
        case PoolAtLimits(pool=pool, said=said):
            return f"NodePool {pool} is at its limits; Karpenter said: {said}"
        case ClaimDeleted(node_claim=claim):
            return f"NodeClaim {claim} {_DELETED_BEFORE_READY}"
        case ClaimNotReady(node_claim=claim, timeout_seconds=timeout, waiting=waiting):
            return (
                f"NodeClaim {claim} was not Ready {timeout:g}s after its creation "
                f"(not yet {', '.join(waiting) or 'Ready'})"
                + ("; kept: pods run on its node" if why.kept else "; deleted it")
            )
        case _:
            assert_never(why)


def delete_text(why: DeleteReason) -> str:
    """Why a trigger is deleted (the executor logs it)."""
    match why:
        case NotNeeded(node_claim=None):
            return "no pending pod needs it any more"
        case NotNeeded(node_claim=claim):
            return f"NodeClaim {claim} is Ready and no pending pod needs it"
        case TriggerFailed(failure=failure):
            return f"failed: {failure_text(failure)}"
        case ClaimReady(node_claim=claim):
            return f"NodeClaim {claim} is Ready"
        case Withdrawn(hold=hold):
            return (
                "withdrawn before Karpenter made a NodeClaim for it: capacity on its way "
                "for KAI pods could take its node first; its pods wait until that is "
                f"Ready, at the latest until {hold.until:%H:%M:%S}"
            )
        case _:
            assert_never(why)


def trigger_condition(node_claim: str | None) -> str:
    """The message of a non-binding trigger's ``PodScheduled=False`` condition
    (`controller.triggers.condition_patch`): no NodeClaim known for it (None), or
    ``node_claim`` is being provisioned for it."""
    if node_claim is None:
        return (
            "gpu-intent trigger: no scheduler binds it; it stands for GPU demand Karpenter "
            "cannot see"
        )
    return f"gpu-intent trigger: NodeClaim {node_claim} is being provisioned for it"


_STATUS: Final = (
    Invalid,
    Native,
    Unresolvable,
    HeldBack,
    BackingOff,
    GaveUp,
    FreeGpus,
    Triggered,
    Provisioning,
    NodeReady,
    Scheduled,
)
_POOL: Final = (
    TaintRefused,
    DefaultPoolMissing,
    NoDefaultPool,
    NoPoolOffers,
    OfferingPoolsRefuse,
    NoPoolPlaces,
    NoNodeRuns,
)
_CONSTRAINT: Final = (SelectorNotAdmitted, SelectorLabelUnknown, AffinityUnmet)
_HOLD: Final = (
    Cooldown,
    TooManyGpus,
    TriggerLimit,
    PoolTriggerLimit,
    RateLimited,
    Contested,
    ComingUp,
    Settling,
)
_FAILURE: Final = (PoolAtLimits, ClaimDeleted, ClaimNotReady)
