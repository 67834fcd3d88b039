"""Karpenter's emptiness consolidation, simulated: empty nodes are removed.

Sources (kubernetes-sigs/karpenter v1):

- ``pkg/controllers/disruption/emptiness.go``: a candidate with no reschedulable pods
  whose NodeClaim is ``Consolidatable`` is disrupted, after waiting ``consolidationTTL``
  (15 s) and re-validating that it is still a candidate (``validation.go``; abandoned on
  pod churn). Nothing happens when the NodePool's ``disruption.consolidateAfter`` is
  ``Never``. This runs for both ``WhenEmpty`` and ``WhenEmptyOrUnderutilized``.
- ``pkg/controllers/nodeclaim/disruption/consolidation.go``: ``Consolidatable`` turns True
  once ``consolidateAfter`` has passed since the NodeClaim's ``lastPodEventTime`` (set by
  ``nodeclaim/podevents`` when a pod is bound to or leaves the node), or since
  Initialized when no pod event happened yet. The sim notes pod events itself, by
  watching the set of reschedulable pods on each node change.
- ``pkg/controllers/disruption/types.go`` ``NewCandidate`` and ``pkg/utils/pod``: a node
  is no candidate while its NodeClaim is not initialized or is deleting, while it is
  nominated for a pending pod (``state.Cluster.IsNodeNominated``: for
  ``nominationPeriod`` = 2 x ``BATCH_MAX_DURATION``, 20 s), or when its annotations
  carry ``karpenter.sh/do-not-disrupt: "true"`` or any of its pods has it. The annotations
  read are ``StateNode.Annotations()`` (``pkg/controllers/state/statenode.go``): the
  NodeClaim's until the node is registered, the Node's after; every candidate here is
  registered and initialized, so only the Node's count. Reschedulable
  pods exclude DaemonSet pods, mirror (static) pods, terminal and terminating pods.
- disruption: the Node gets the ``karpenter.sh/disrupted:NoSchedule`` taint and its
  NodeClaim is deleted (``disruption/queue.go``), termination does the rest.

Not modelled: disruption budgets (the default 10% allows one node at a time here, and
the sim removes each empty node on its own), a pod's ``do-not-disrupt`` given as a
duration (only ``"true"`` is read), ``consolidateAfter`` values other than ``Never`` and
Go durations of ``h``/``m``/``s``/``ms``, underutilization, drift and expiry.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from intent.keys import DO_NOT_DISRUPT_ANNOTATION
from sim.nodeclaims import KarpenterTimings, condition_true
from sim.requirements import NODEPOOL_LABEL
from sim.scheduling import is_terminal
from sim.store import NODECLAIMS, NODEPOOLS, NODES, PODS, ApiError, NotFound, Store

__all__ = ["DO_NOT_DISRUPT", "Emptiness", "parse_duration"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
DO_NOT_DISRUPT: Final = DO_NOT_DISRUPT_ANNOTATION
DISRUPTED_TAINT: Final = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: str) -> float | None:
    """A Go duration (``30s``, ``1m30s``, ``0s``) in seconds; None for ``Never``."""
    if value == "Never":
        return None
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"invalid duration {value!r}")
    return sum(float(n) * _UNIT[u] for n, u in parts)


def _reschedulable(pod: Obj) -> bool:
    """``IsReschedulable``: not terminal, not terminating, not owned by a DaemonSet, not a
    mirror pod."""
    meta = pod.get("metadata") or {}
    if is_terminal(pod) or meta.get("deletionTimestamp"):
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ())


def _do_not_disrupt(obj: Obj) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"


class Emptiness:
    """Emptiness consolidation over the store, one synchronous pass at a time.

    ``enabled`` is the switch (off by default, so the sim keeps every node unless a test
    asks for consolidation). `nominate` records Karpenter's nominations (the provisioner
    calls it). ``clock`` is monotonic seconds.
    """

    def __init__(self, store: Store, timings: KarpenterTimings, clock: Callable[[], float]) -> None:
        self._store, self._timings, self._clock = store, timings, clock
        self.enabled = False
        self._pods: dict[str, frozenset[str]] = {}  # node -> reschedulable pod uids
        self._last_event: dict[str, float] = {}  # node -> last pod event (or initialized)
        self._nominated: dict[str, float] = {}  # nodeclaim or node name -> when
        self._since: dict[str, float] = {}  # nodeclaim -> when it became a candidate

    def nominate(self, *names: str | None) -> None:
        """A pending pod was nominated to these NodeClaims / Nodes now."""
        now = self._clock()
        for name in names:
            if name:
                self._nominated[name] = now

    def reconcile(self) -> float | None:
        """Remove the empty nodes that are due; returns seconds until the next check is
        due (None: nothing pending)."""
        if not self.enabled:
            return None
        now = self._clock()
        window = 2 * self._timings.batch_max_seconds
        validation = self._timings.consolidation_validation_seconds
        self._nominated = {k: t for k, t in self._nominated.items() if now < t + window}
        pools = {p["metadata"]["name"]: p for p in self._store.list(NODEPOOLS)[0]}
        nodes = {n["metadata"]["name"]: n for n in self._store.list(NODES)[0]}
        on_node: dict[str, list[Obj]] = {}
        for pod in self._store.list(PODS)[0]:
            if name := (pod.get("spec") or {}).get("nodeName"):
                on_node.setdefault(name, []).append(pod)
        due: list[float] = [t + window for t in self._nominated.values()]
        seen: set[str] = set()
        for claim in self._store.list(NODECLAIMS)[0]:
            name = claim["metadata"]["name"]
            node = nodes.get(str((claim.get("status") or {}).get("nodeName", "")))
            if (
                node is None
                or claim["metadata"].get("deletionTimestamp")
                or not condition_true(claim, "Initialized")
            ):
                continue
            node_name = node["metadata"]["name"]
            seen.add(node_name)
            pods = on_node.get(node_name, [])
            uids = frozenset(str(p["metadata"].get("uid")) for p in pods if _reschedulable(p))
            if self._pods.get(node_name) != uids:  # podevents: LastPodEventTime
                self._pods[node_name] = uids
                self._last_event[node_name] = now
            pool = pools.get((claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL, ""))
            after = self._consolidate_after(pool)
            blocked = (
                after is None
                or bool(uids)
                or _do_not_disrupt(node)
                or any(_do_not_disrupt(p) for p in pods if not is_terminal(p))
                or name in self._nominated
                or node_name in self._nominated
            )
            consolidatable = after is not None and now >= self._last_event[node_name] + after
            if blocked or not consolidatable:
                if self._since.pop(name, None) is not None:
                    log.info("abandoning empty node consolidation of %s: no longer valid", name)
                if not blocked and after is not None:
                    due.append(self._last_event[node_name] + after)
                continue
            since = self._since.setdefault(name, now)
            if now < since + validation:
                due.append(since + validation)
                continue
            self._disrupt(name, node_name)
            del self._since[name]
        for gone in set(self._pods) - seen:
            self._pods.pop(gone, None)
            self._last_event.pop(gone, None)
        return max(0.0, min(due) - now) if due else None

    def _consolidate_after(self, pool: Obj | None) -> float | None:
        """The pool's ``disruption.consolidateAfter`` (CRD default ``0s``); None: Never."""
        if pool is None:
            return None
        value = ((pool.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")
        try:
            return parse_duration(str(value))
        except ValueError:
            log.warning(
                "nodepool %s: ignoring consolidateAfter %r", pool["metadata"]["name"], value
            )
            return None

    def _disrupt(self, claim: str, node: str) -> None:
        """Taint the Node ``karpenter.sh/disrupted:NoSchedule``, delete its NodeClaim."""

        def taint(obj: dict[str, Any]) -> None:
            spec = obj.setdefault("spec", {})
            taints = list(spec.get("taints") or ())
            if DISRUPTED_TAINT not in taints:
                spec["taints"] = [*taints, dict(DISRUPTED_TAINT)]

        try:
            self._store.mutate(NODES, None, node, taint)
            self._store.delete(NODECLAIMS, None, claim)
        except NotFound:
            return
        except ApiError as e:
            log.warning("disrupting empty nodeclaim %s failed: %s", claim, e.message)
            return
        log.info("disrupting nodeclaim %s (node %s): empty", claim, node)
