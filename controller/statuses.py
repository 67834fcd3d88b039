"""What `controller.plan.plan` tells pods: the scale-up status
(`controller.model.ScaleUpStatus`, its ``since`` the pass's ``stamp``) and the Event
recorded beside it that each typed reason (`controller.reasons.StatusReason`) makes
(`told`), its message in `controller.messages`' words. Pure.

=================  ===============  =======================  =================================
reason             phase            Event (type, reason)     status names
=================  ===============  =======================  =================================
`Invalid`          InvalidIntent    Warning InvalidIntent
`Native`           Native           Normal NativeProvisioning
`Unresolvable`     Unresolvable     Warning NoNodePool
`HeldBack`         Waiting          Normal ScaleUpWaiting
`BackingOff`       Waiting          Warning ScaleUpRetry
`GaveUp`           Failed           Warning ScaleUpFailed
`FreeGpus`         NodeReady        Normal NodeReady         NodeClaim, node
`Triggered`        Triggered        Normal Triggered         trigger
`Provisioning`     Provisioning     Normal Provisioning      trigger, NodeClaim
`NodeReady`        NodeReady        Normal NodeReady         NodeClaim, node
`Scheduled`        Scheduled        Normal ScaleUpComplete   NodeClaim, node
=================  ===============  =======================  =================================
"""

from __future__ import annotations

from decimal import Decimal
from typing import assert_never

from controller.decisions import Event
from controller.messages import status_text
from controller.model import ScaleUpStatus, TriggerInfo
from controller.nodes import NodeClaimInfo
from controller.reasons import (
    BackingOff,
    FreeGpus,
    GaveUp,
    HeldBack,
    Invalid,
    Native,
    NodeReady,
    Provisioning,
    Scheduled,
    StatusReason,
    Triggered,
    Unresolvable,
)
from intent.contract import Phase

#: A status and the Event that goes with it.
Told = tuple[ScaleUpStatus, Event]

#: What a status says beyond its message: phase, trigger, NodeClaim, node; and its
#: Event's type and reason.
_Shape = tuple[Phase, str | None, str | None, str | None, str, str]


def _shape(why: StatusReason) -> _Shape:
    """The status and Event ``why`` makes, but for the message (module doc)."""
    match why:
        case Invalid():
            return Phase.INVALID, None, None, None, "Warning", "InvalidIntent"
        case Native():
            return Phase.NATIVE, None, None, None, "Normal", "NativeProvisioning"
        case Unresolvable():
            return Phase.UNRESOLVABLE, None, None, None, "Warning", "NoNodePool"
        case HeldBack():
            return Phase.WAITING, None, None, None, "Normal", "ScaleUpWaiting"
        case BackingOff():
            return Phase.WAITING, None, None, None, "Warning", "ScaleUpRetry"
        case GaveUp():
            return Phase.FAILED, None, None, None, "Warning", "ScaleUpFailed"
        case FreeGpus(node_claim=claim, node=node):
            return Phase.NODE_READY, None, claim, node, "Normal", "NodeReady"
        case Triggered(trigger=trigger):
            return Phase.TRIGGERED, trigger, None, None, "Normal", "Triggered"
        case Provisioning(node_claim=claim, trigger=trigger):
            return Phase.PROVISIONING, trigger, claim, None, "Normal", "Provisioning"
        case NodeReady(node_claim=claim, node=node):
            return Phase.NODE_READY, None, claim, node, "Normal", "NodeReady"
        case Scheduled(node=node, node_claim=claim):
            return Phase.SCHEDULED, None, claim, node, "Normal", "ScaleUpComplete"
        case _:
            assert_never(why)


def told(why: StatusReason, stamp: str) -> Told:
    """The status (``since`` ``stamp``) and Event a pod is told for ``why``, both with
    its message (`controller.messages.status_text`)."""
    phase, trigger, claim, node, kind, reason = _shape(why)
    message = status_text(why)
    status = ScaleUpStatus(phase, message, trigger, claim, node, stamp)
    return status, Event(kind, reason, message)


def knows(current: ScaleUpStatus | None, why: StatusReason) -> bool:
    """Whether a pod whose status is ``current`` knows what ``why`` would tell it already
    (`controller.model.ScaleUpStatus.same_state`: equal but for the message and times),
    decided without rendering the message."""
    phase, trigger, claim, node, _, _ = _shape(why)
    return ScaleUpStatus(phase, "", trigger, claim, node).same_state(current)


def triggered(trigger: str, gpus: int, pool: str, stamp: str) -> Told:
    """The ``Triggered`` status and event for pods a trigger stands for (also used by the
    executor right after it creates a trigger, when the name is first known)."""
    return told(Triggered(trigger, gpus, pool), stamp)


def provisioning(
    claim: NodeClaimInfo, trigger: TriggerInfo, used: Decimal, pods: int, stamp: str
) -> Told:
    """``Provisioning``: ``claim``, linked to ``trigger``, is on its way; ``pods`` pods
    use ``used`` of the trigger's GPUs."""
    return told(Provisioning.of(claim, trigger, used, pods), stamp)
