"""What `controller.plan.plan` tells pods, and in which words: each scale-up status
(`controller.model.ScaleUpStatus`, its ``since`` the pass's ``stamp``) with the Event
recorded beside it. Pure.
"""

from __future__ import annotations

from decimal import Decimal

from controller.decisions import Event
from controller.model import (
    ANNOTATION_RETRY,
    PodRef,
    RetryState,
    ScaleUpStatus,
    TriggerInfo,
)
from controller.nodes import NodeClaimInfo
from intent.contract import Phase
from intent.keys import INSTANCE_TYPE_LABEL
from intent.text import gpus_for_people

#: A status and the Event that goes with it.
Told = tuple[ScaleUpStatus, Event]


def invalid(error: str, stamp: str) -> Told:
    """``InvalidIntent``: the pod's gpu-intent annotations do not parse (``error``)."""
    message = f"ignoring this pod: its gpu-intent annotations do not parse: {error}"
    return ScaleUpStatus(Phase.INVALID, message, since=stamp), Event(
        "Warning", "InvalidIntent", message
    )


def native(stamp: str) -> Told:
    """``Native``: Karpenter provisions for the pod itself."""
    message = (
        "Karpenter can provision for this pod itself (whole nvidia.com/gpu); no trigger needed"
    )
    return ScaleUpStatus(Phase.NATIVE, message, since=stamp), Event(
        "Normal", "NativeProvisioning", message
    )


def unresolvable(why: str, stamp: str) -> Told:
    """``Unresolvable``: no NodePool serves the pod, or none of its nodes can run it."""
    return ScaleUpStatus(Phase.UNRESOLVABLE, why, since=stamp), Event("Warning", "NoNodePool", why)


def waiting(message: str, stamp: str) -> Told:
    """``Waiting``: the pod's demand is held back by a cap or the cooldown (``message``)."""
    return ScaleUpStatus(Phase.WAITING, message, since=stamp), Event(
        "Normal", "ScaleUpWaiting", message
    )


def retrying(ref: PodRef, retry: RetryState, attempts: int, stamp: str) -> Told:
    """For a pod with failed scale-ups (``retry``): ``Failed`` once ``attempts`` are used
    up (`failed_message`), else ``Waiting`` out its backoff (`retry_message`)."""
    if retry.attempts >= attempts:
        message = failed_message(ref, retry)
        return ScaleUpStatus(Phase.FAILED, message, since=stamp), Event(
            "Warning", "ScaleUpFailed", message
        )
    message = retry_message(retry, attempts)
    return ScaleUpStatus(Phase.WAITING, message, since=stamp), Event(
        "Warning", "ScaleUpRetry", message
    )


def failed_message(ref: PodRef, retry: RetryState) -> str:
    """The ``Failed`` status message: why, and what to do."""
    return (
        f"gave up after {retry.attempts} failed scale-ups; last: {retry.reason}. Check the "
        "NodePool (limits, instance types, capacity in its zones) and Karpenter's events, "
        f"then try again: kubectl annotate pod -n {ref.namespace} {ref.name} {ANNOTATION_RETRY}-"
    )


def retry_message(retry: RetryState, attempts: int) -> str:
    """The ``Waiting`` status message of a pod in retry backoff."""
    return (
        f"scale-up failed ({retry.attempts} of {attempts} attempts): {retry.reason}; "
        f"a new trigger after {retry.retry_at}"
    )


def free_gpus(host: NodeClaimInfo, stamp: str) -> Told:
    """``NodeReady`` for a pod placed on the free GPUs of Ready NodeClaim ``host``."""
    node = host.node_name or "(unknown)"
    message = (
        f"NodeClaim {host.name} is Ready as node {node} with GPUs free for "
        "this pod; left to the pod's scheduler"
    )
    status = ScaleUpStatus(Phase.NODE_READY, message, None, host.name, host.node_name, stamp)
    return status, Event("Normal", "NodeReady", message)


def triggered(trigger: str, gpus: int, pool: str, stamp: str) -> Told:
    """The ``Triggered`` status and event for pods a trigger stands for (also used by the
    executor right after it creates a trigger, when the name is first known)."""
    message = (
        f"trigger {trigger} requests {gpus} nvidia.com/gpu on NodePool {pool}; "
        "waiting for Karpenter to create a NodeClaim (none is known yet)"
    )
    return ScaleUpStatus(Phase.TRIGGERED, message, trigger, since=stamp), Event(
        "Normal", "Triggered", message
    )


def provisioning(
    claim: NodeClaimInfo, trigger: TriggerInfo, used: Decimal, pods: int, stamp: str
) -> Told:
    """``Provisioning``: ``claim``, linked to ``trigger``, is on its way; ``pods`` pods
    use ``used`` of the trigger's GPUs."""
    name = str(trigger.ref)
    itype = claim.labels.get(INSTANCE_TYPE_LABEL)
    message = (
        f"Karpenter NodeClaim {claim.name}"
        + (f" ({itype})" if itype else "")
        + f" is being provisioned for trigger {name} "
        f"({trigger.gpus} GPU, {gpus_for_people(used)} used by {pods} pod(s))"
    )
    status = ScaleUpStatus(Phase.PROVISIONING, message, name, claim.name, None, stamp)
    return status, Event("Normal", "Provisioning", message)


def node_ready(claim: NodeClaimInfo, trigger: str, stamp: str) -> Told:
    """``NodeReady``: ``claim``, linked to ``trigger``, is Ready (by Karpenter, or by
    its ResourceSlices on a DRA node) and the trigger is removed."""
    node = claim.node_name or "(unknown)"
    message = (
        f"NodeClaim {claim.name} is Ready as node {node}; removed trigger "
        f"{trigger} so the pod's scheduler can use the capacity"
    )
    if claim.dra_ready:
        message = (
            f"NodeClaim {claim.name}'s node {node} publishes {claim.devices} GPU "
            "device(s) in ResourceSlices (DRA; Karpenter's Initialized stays Unknown, "
            "ResourceNotRegistered, as on any DRA node: not a failure); removed trigger "
            f"{trigger} so the pod's scheduler can allocate its claims there"
        )
    status = ScaleUpStatus(Phase.NODE_READY, message, None, claim.name, claim.node_name, stamp)
    return status, Event("Normal", "NodeReady", message)


def scheduled(node: str, claim_name: str | None, claim: NodeClaimInfo | None, stamp: str) -> Told:
    """``Scheduled``: the pod got ``node``, of NodeClaim ``claim_name`` (None: none is
    known for it; ``claim``: that NodeClaim, when cached)."""
    message = f"scheduled on node {node}" + (
        f" (NodeClaim {claim_name})" if claim_name else " (no NodeClaim known for it)"
    )
    if claim is not None and claim.dra_ready:
        message += (
            f"; its {claim.devices} GPU(s) are DRA ResourceSlice devices, so Karpenter's "
            "Initialized stays Unknown (ResourceNotRegistered): not a failure"
        )
    status = ScaleUpStatus(Phase.SCHEDULED, message, None, claim_name, node, stamp)
    return status, Event("Normal", "ScaleUpComplete", message)
