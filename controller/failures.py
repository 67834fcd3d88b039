"""What the controller does when a scale-up fails, and how it keeps a new node alive
until its pods bind: pure rules that `controller.plan` and `controller.reconciler` apply.

- **Failures** (`trigger_failure`): a trigger's NodeClaim deleted before it was Ready
  (Karpenter deletes a NodeClaim on insufficient capacity, and after its launch timeout,
  5 min, or registration timeout, 15 min: pkg/controllers/nodeclaim/lifecycle/launch.go
  and liveness.go), a NodeClaim not Ready ``init_timeout_seconds`` after its creation
  (Karpenter has no initialization timeout: a device plugin that never advertises
  ``nvidia.com/gpu`` leaves Initialized Unknown, reason ``ResourceNotRegistered``, for
  ever; REFERENCE.md section 1), and a NodePool at its ``spec.limits`` (Karpenter's
  ``FailedScheduling`` on the trigger says so and launches nothing). The trigger is
  removed (and a NodeClaim that never initialized is deleted: it would cost money for
  ever), and its pods wait `backoff_seconds` before a new trigger is made for them, up to
  ``retry_attempts`` failures; then they are told ``Failed``.
- **Retry state** lives on each pod (`controller.model.RetryState`, annotation
  ``gpu-intent.io/retry``), so a restarted controller keeps counting; the executor also
  holds it in memory from the moment it removes the trigger until the annotation is
  written, as it does for NodeReady covers.
- **Protection** (`protections`): a NodeClaim bought for our triggers, and its Node
  once it has one, get ``karpenter.sh/do-not-disrupt: "true"`` while a live trigger stands for it and, once
  Ready, until a pod we served is found bound to its node or ``protect_seconds`` have
  passed. Karpenter's emptiness consolidation skips such a node
  (pkg/controllers/disruption/types.go ``NewCandidate`` reads ``StateNode.Annotations()``,
  pkg/controllers/state/statenode.go: the NodeClaim's until the node registers, the
  Node's after, hence both); a non-binding trigger cannot
  protect it (it is never bound to the node, and the 20 s nomination protection ends
  once the trigger is marked linked, since Karpenter then no longer nominates it).
- **Rate** (`TokenBucket`): trigger creations per second, with the time passed in.

Purely computational: no I/O, no clock but the ``now`` passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from controller.model import RetryState, TriggerInfo, parse_time
from controller.nodes import NodeClaimInfo, NodeInfo, Refusal
from controller.reasons import ClaimDeleted, ClaimNotReady, FailureReason, PoolAtLimits


def stamp(when: datetime) -> str:
    """RFC 3339 at second precision, as Kubernetes writes times."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def backoff_seconds(attempts: int, base: float, maximum: float) -> float:
    """Seconds to wait after the ``attempts``-th failure (1-based): ``base`` doubled per
    earlier failure, at most ``maximum`` (client-go's exponential failure rate limiter
    has the same shape)."""
    return float(min(maximum, base * 2 ** max(attempts - 1, 0)))


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a live trigger failed (``why``, `controller.messages.failure_text` words it),
    and the NodeClaim to delete with it (one that never initialized), if any."""

    why: FailureReason
    delete_claim: str | None = None


def trigger_failure(
    trigger: TriggerInfo,
    linked: NodeClaimInfo | None,
    claims: Mapping[str, NodeClaimInfo],
    refusal: Refusal | None,
    now: datetime,
    init_timeout_seconds: float,
    used: Mapping[str, Decimal] | None = None,
    lost: str | None = None,
) -> Failure | None:
    """Whether ``trigger`` failed, by the evidence of this pass:

    - ``refusal``: Karpenter's latest ``FailedScheduling`` on it says its NodePool is at
      its limits (same uid, or none recorded), and no NodeClaim is linked;
    - the NodeClaim recorded on it (``gpu-intent.io/nodeclaim``) is gone or being
      deleted and was not Ready, or ``lost`` names a NodeClaim that carried its marker
      and was deleted before it registered (`controller.memory.Memory.lost_claims`:
      the link may not have been written before), and no other NodeClaim is linked
      (``linked``, from `controller.plan.link_claims`);
    - ``linked`` is not Ready ``init_timeout_seconds`` after its creation. It is
      deleted with the trigger unless a pod we served is already bound to its node
      (``used``: GPUs of such pods by node name; a scheduler that does not wait for the
      device plugin may do that): then only the trigger goes.
    """
    if linked is None:
        if refusal is not None and refusal.uid in ("", trigger.ref.uid):
            return Failure(PoolAtLimits(trigger.pool, refusal.message))
        recorded = claims.get(trigger.node_claim or "") if trigger.node_claim else None
        gone = bool(trigger.node_claim) and (
            recorded is None or (recorded.deleting and not recorded.ready)
        )
        if gone or lost:
            return Failure(ClaimDeleted((trigger.node_claim if gone else lost) or ""))
        return None
    if linked.ready or linked.deleting or linked.created is None:
        return None
    if now - linked.created < timedelta(seconds=init_timeout_seconds):
        return None
    waiting = [
        k for k in ("Launched", "Registered", "Initialized") if linked.conditions.get(k) != "True"
    ]
    kept = (used or {}).get(linked.node_name or "", Decimal(0)) > 0
    why = ClaimNotReady(linked.name, init_timeout_seconds, tuple(waiting), kept)
    return Failure(why, delete_claim=None if kept else linked.name)


def init_overdue(
    claims: Iterable[NodeClaimInfo], now: datetime, init_timeout_seconds: float
) -> bool:
    """Whether a NodeClaim bought for our triggers is past the initialization timeout
    and not Ready (time alone makes `trigger_failure` fire)."""
    limit = timedelta(seconds=init_timeout_seconds)
    return any(
        c.marked and not c.ready and not c.deleting and c.created and now - c.created >= limit
        for c in claims
    )


def next_retry(
    previous: RetryState | None,
    reason: str,
    now: datetime,
    base: float,
    maximum: float,
) -> RetryState:
    """The retry state after one more failure at ``now``; ``reason``: its text
    (`controller.messages.failure_text`), which the pod's retry annotation keeps."""
    attempts = (previous.attempts if previous is not None else 0) + 1
    at = now + timedelta(seconds=backoff_seconds(attempts, base, maximum))
    return RetryState(attempts, stamp(at), reason)


def effective_retry(annotated: RetryState | None, held: RetryState | None) -> RetryState | None:
    """The pod's retry state: the one with more attempts of what its annotation says and
    what the executor holds in memory (written, or on its way)."""
    if annotated is None:
        return held
    if held is None:
        return annotated
    return held if held.attempts > annotated.attempts else annotated


def retry_due(retry: RetryState | None, now: datetime) -> bool:
    """Whether a pod with ``retry`` may get a trigger at ``now`` (its backoff passed)."""
    if retry is None:
        return True
    at = parse_time(retry.retry_at)
    return at is None or now >= at


#: `Protection.kind` values.
NODECLAIM = "nodeclaim"
NODE = "node"


@dataclass(frozen=True, slots=True)
class Protection:
    """Set (``protect``) or remove ``karpenter.sh/do-not-disrupt`` (with
    `controller.model.ANNOTATION_PROTECTED`) on the NodeClaim or Node (``kind``)
    ``name``."""

    kind: str
    name: str
    protect: bool


def wants_protection(
    claim: NodeClaimInfo,
    live_triggers: frozenset[str],
    used: Mapping[str, Decimal],
    now: datetime,
    protect_seconds: float,
) -> bool:
    """Whether ``claim`` should be protected from disruption now: it was bought for our
    triggers (`controller.nodes.NodeClaimInfo.marked`), is not being deleted, and either
    a live trigger still stands for it, or it is Ready for less than
    ``protect_seconds`` and no pod we served is known bound to its node (``used``: GPUs
    of such pods by node name)."""
    if not claim.marked or claim.deleting:
        return False
    if not claim.ready:
        return bool(claim.marked & live_triggers)
    if claim.ready_since is None or used.get(claim.node_name or "", Decimal(0)) > 0:
        return False
    return now - claim.ready_since < timedelta(seconds=protect_seconds)


def protections(
    claims: Mapping[str, NodeClaimInfo],
    nodes: Mapping[str, NodeInfo],
    live_triggers: frozenset[str],
    used: Mapping[str, Decimal],
    now: datetime,
    protect_seconds: float,
) -> list[Protection]:
    """The protection changes this pass (see `wants_protection`), for each NodeClaim and
    for its Node (``nodes``, by name) once it has one: set where wanted and not set,
    removed where set by us and no longer wanted. A NodeClaim being deleted is left
    alone. By NodeClaim name."""
    changes = []
    for name in sorted(claims):
        claim = claims[name]
        if claim.deleting:
            continue
        want = wants_protection(claim, live_triggers, used, now, protect_seconds)
        if want != claim.protected:
            changes.append(Protection(NODECLAIM, name, want))
        node = nodes.get(claim.node_name or "")
        if node is not None and want != node.protected:
            changes.append(Protection(NODE, node.name, want))
    return changes


class TokenBucket:
    """A token bucket of ``rate`` tokens per second holding at most ``burst``, with the
    time (monotonic seconds) passed in: `available` tokens now, `take` spends them."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate, self.burst = rate, burst
        self._tokens, self._at = burst, now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now

    def available(self, now: float) -> int:
        """Whole tokens available at ``now``."""
        self._refill(now)
        return int(self._tokens)

    def take(self, count: int, now: float) -> None:
        """Spend ``count`` tokens at ``now`` (never below zero)."""
        self._refill(now)
        self._tokens = max(0.0, self._tokens - count)

    def seconds_to_next(self, now: float) -> float:
        """Seconds until one more whole token is available (0 when one is)."""
        self._refill(now)
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate
