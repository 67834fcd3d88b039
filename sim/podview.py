"""A cache of pods by node and by scheduler, kept from the store's change history.

kube-scheduler and the kubelet do not re-list pods to decide: they keep informer-fed
caches (kubernetes ``pkg/scheduler/backend/cache`` ``cacheImpl.AddPod``/``UpdatePod``/
``RemovePod``; the kubelet's pod manager fed by its pod config source) and work from
them. `PodView` is the sim's equivalent for its in-process loops: `refresh` applies the
writes made since the last refresh (`sim.store.Store.changes_since`, rebuilding from a
list only when the history no longer reaches back), so a pass over the view costs what
changed, not every pod of the cluster, and the sim's own cost does not grow with pods
that nothing touches.

Every object the view holds is the store's own dict: read-only for callers, as with
``Store.list(copy_objects=False)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sim.scheduling import is_bound, is_live, is_terminal, is_terminating
from sim.store import PODS, Change, Obj, Store

__all__ = ["PodView"]

_DEFAULT_SCHEDULER = "default-scheduler"


class PodView:
    """Pods of a `Store`, indexed the way the scheduler and the kubelet read them.

    - `bound`: node name -> uid -> pod, for pods with ``spec.nodeName`` (terminal ones
      included: they hold nothing on their node, which the scheduler checks, but the
      kubelet still removes them);
    - `pending`: ``spec.schedulerName`` (default ``default-scheduler``) -> uid -> pod, for
      pods with no ``spec.nodeName`` that are not being deleted;
    - `unbound`: uid -> pod, every pod with no ``spec.nodeName`` (terminating ones
      included: Karpenter's IsProvisionable does not exclude them);
    - `node_version`: node name -> a counter bumped whenever the node's set of bound pods
      (or one of them) changes, so callers can cache per-node sums;
    - `pods`: uid -> pod, every pod;
    - `released`: a counter bumped whenever a bound pod stops holding its node's
      resources (deleted, or terminal: phase Succeeded or Failed), the cluster event on
      which kube-scheduler retries unschedulable pods (``AssignedPodDelete``);
    - `departures`: a counter bumped whenever a pod is deleted, leaves phases Pending and
      Running, or has its labels changed: what can end its membership of a group chosen
      by labels and phase (KAI's GPU groups, `sim.kai.stale_reservations`).

    Call `refresh` before reading; between refreshes the view is a consistent snapshot of
    the store at the resourceVersion `resource_version`.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self.resource_version = -1
        self.pods: dict[str, Obj] = {}
        self.bound: dict[str, dict[str, Obj]] = {}
        self.pending: dict[str, dict[str, Obj]] = {}
        self.unbound: dict[str, Obj] = {}
        self.node_version: dict[str, int] = {}
        self._where: dict[str, tuple[bool, str]] = {}  # uid -> (bound?, node or scheduler)
        self._bumps = 0
        self.released = 0
        self.departures = 0

    def refresh(self) -> None:
        """Apply every pod write since the last refresh (or rebuild from a list when the
        store's history no longer reaches back that far)."""
        changes: Sequence[Change] | None = None
        if self.resource_version >= 0:
            changes = self._store.changes_since(PODS, self.resource_version)
        if changes is None:
            self._rebuild()
            return
        for change in changes:
            if change.type == "DELETED":
                self.departures += 1
                if self._drop(change.obj["metadata"]["uid"]):
                    self.released += 1
            else:
                self._put(change.obj)
        self.resource_version = self._store.resource_version

    def bound_on(self, node: str) -> Iterator[Obj]:
        """The pods bound to ``node``, terminal ones included."""
        return iter(self.bound.get(node, {}).values())

    def _rebuild(self) -> None:
        pods, rv = self._store.list(PODS, copy_objects=False)
        for node in self.bound:
            self._bump(node)
        self.released += 1  # whatever was deleted meanwhile is not known
        self.departures += 1
        self.pods.clear()
        self.bound.clear()
        self.pending.clear()
        self.unbound.clear()
        self._where.clear()
        for pod in pods:
            self._put(pod)
        self.resource_version = rv

    def _bump(self, node: str) -> None:
        self._bumps += 1
        self.node_version[node] = self._bumps

    def _drop(self, uid: str) -> bool:
        """Forget ``uid``; True if it was bound to a node."""
        self.pods.pop(uid, None)
        self.unbound.pop(uid, None)
        where = self._where.pop(uid, None)
        if where is None:
            return False
        is_on_node, key = where
        table = self.bound if is_on_node else self.pending
        bucket = table.get(key)
        if bucket is not None:
            bucket.pop(uid, None)
            if not bucket:
                del table[key]
        if is_on_node:
            self._bump(key)
        return is_on_node

    def _put(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        before = self.pods.get(uid)
        if self._drop(uid) and before is not None and not is_terminal(before) and is_terminal(pod):
            self.released += 1
        if before is not None and (
            (before["metadata"].get("labels") != pod["metadata"].get("labels"))
            or (is_live(before) and not is_live(pod))
        ):
            self.departures += 1
        self.pods[uid] = pod
        spec: dict[str, Any] = pod.get("spec") or {}
        if is_bound(pod):
            node = str(spec["nodeName"])
            self.bound.setdefault(node, {})[uid] = pod
            self._where[uid] = (True, node)
            self._bump(node)
            return
        self.unbound[uid] = pod
        if not is_terminating(pod):
            name = str(spec.get("schedulerName") or _DEFAULT_SCHEDULER)
            self.pending.setdefault(name, {})[uid] = pod
            self._where[uid] = (False, name)
