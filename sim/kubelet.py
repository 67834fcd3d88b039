"""The sim's kubelets (one object for every node) and the pod garbage collector.

`SimKubelet` re-scans the store on every change and on its own timers:

- a pod bound to an existing node whose ``Ready`` condition is ``True`` is first
  *admitted* (kubelet ``pkg/kubelet/lifecycle/predicate.go`` ``Admit``): its requests
  must fit the node's ``allocatable`` beside the pods already admitted there (Running,
  or admitted earlier; new pods oldest first, as ``HandlePodAdditions`` sorts them by
  creationTimestamp), the pod count included, extended resources the
  node does not list ignored (``removeMissingExtendedResources``: HAMi's
  ``nvidia.com/gpumem``). A pod that does not fit, e.g. one of two pods that racing
  schedulers both bound to the node's last GPU, is rejected (``rejectPod``): phase
  ``Failed``, reason ``OutOf<resource>`` (``OutOfcpu``, ``OutOfnvidia.com/gpu``, ...),
  message ``Pod was rejected: Node didn't have enough resource: <resource>, requested:
  <n>, used: <n>, capacity: <n>`` (cpu in millicores), and a Warning event with that
  reason. An admitted pod becomes
  ``Running`` ``start_seconds`` after the kubelet first sees it so: conditions
  ``PodReadyToStartContainers``, ``Initialized``, ``ContainersReady`` and ``Ready`` True
  (``PodScheduled`` kept), ``hostIP`` (the node's InternalIP), ``podIP``, ``startTime``
  and running ``containerStatuses`` (kubelet ``pkg/kubelet/status`` and
  ``kubelet_pods.go`` ``generateAPIPodStatus``);
- a bound pod with ``deletionTimestamp`` is removed ``min(termination_seconds, its grace
  period)`` after the kubelet first sees it terminating: the kubelet's final delete with
  grace 0 once its containers have stopped (``pkg/kubelet/status/status_manager.go``);
- a pod bound to a node that no longer exists is removed (kube-controller-manager PodGC
  ``gcOrphaned``, which in a real cluster first waits a 40 s quarantine).

A cordoned (``spec.unschedulable``) node still runs its pods. Nothing is written when
nothing changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sim.events import EventRecorder
from sim.podview import PodView
from sim.scheduling import is_bound, is_terminal, is_terminating, pod_requests, quantity
from sim.store import NODES, PODS, SETTLE_SECONDS, ApiError, NotFound, Obj, Store, rfc3339

__all__ = ["SimKubelet"]

log = logging.getLogger(__name__)

_DEFAULT_GRACE_SECONDS = 30  # core/v1 PodSpec.terminationGracePeriodSeconds default
_READY_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def _node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _host_ip(node: Mapping[str, Any]) -> str:
    """The node's InternalIP, else a stable made-up 10.0.x.y address."""
    for address in (node.get("status") or {}).get("addresses") or ():
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    digest = hashlib.sha256(node["metadata"]["name"].encode()).digest()
    return f"10.0.{digest[0]}.{digest[1] % 254 + 1}"


def _grace_seconds(pod: Mapping[str, Any]) -> float:
    meta = pod.get("metadata") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", _DEFAULT_GRACE_SECONDS)
    try:
        return max(float(grace), 0.0)
    except (TypeError, ValueError):
        return float(_DEFAULT_GRACE_SECONDS)


_FIRST_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def _allocatable(node: Mapping[str, Any]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for key, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        with contextlib.suppress(ValueError):
            out[key] = quantity(value, key)
    return out


def _insufficient(
    requests: Mapping[str, Decimal], used: Mapping[str, Decimal], allocatable: Mapping[str, Decimal]
) -> tuple[str, str] | None:
    """The kubelet's admission fit (``noderesources.Fits`` on the admitted pods): the
    first resource short, as ``(reason, message)``, or None. Checked in
    ``fitsRequest`` order: pod count, cpu, memory, ephemeral-storage, then extended
    resources; a resource the node does not list is not checked."""
    others = sorted(k for k in requests if k not in _FIRST_RESOURCES and k != "pods")
    for key in ("pods", *_FIRST_RESOURCES, *others):
        wanted = requests.get(key, Decimal(0))
        if key not in allocatable or wanted <= 0:
            continue
        capacity, taken = allocatable[key], used.get(key, Decimal(0))
        if wanted + taken <= capacity:
            continue
        scale = 1000 if key == "cpu" else 1
        numbers = (int(x * scale) for x in (wanted, taken, capacity))
        message = "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}"
        return f"OutOf{key}", message.format(key, *numbers)
    return None


def _ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _set_running(pod: Obj, host_ip: str, pod_ip: str, now: str) -> None:
    """Status of a pod whose containers all started and are ready."""
    spec = pod.get("spec") or {}
    status = pod.setdefault("status", {})
    status["phase"] = "Running"
    status["hostIP"] = host_ip
    status["hostIPs"] = [{"ip": host_ip}]
    status["podIP"] = pod_ip
    status["podIPs"] = [{"ip": pod_ip}]
    status.setdefault("startTime", now)
    conditions = [
        c for c in status.get("conditions") or () if c.get("type") not in _READY_CONDITIONS
    ]
    for type_ in _READY_CONDITIONS:
        conditions.append(
            {"type": type_, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
        )
    status["conditions"] = conditions

    def container_status(container: Mapping[str, Any], running: bool) -> Obj:
        name = str(container.get("name", ""))
        state: Obj = (
            {"running": {"startedAt": now}}
            if running
            else {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
        )
        return {
            "name": name,
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": "containerd://"
            + hashlib.sha256(f"{_ref(pod)}/{name}".encode()).hexdigest(),
            "ready": running,
            "started": running,
            "restartCount": 0,
            "state": state,
        }

    status["containerStatuses"] = [container_status(c, True) for c in spec.get("containers") or ()]
    init = spec.get("initContainers") or ()
    if init:
        status["initContainerStatuses"] = [
            container_status(c, c.get("restartPolicy") == "Always") for c in init
        ]


class SimKubelet:
    """Starts bound pods, finishes graceful deletions and collects orphaned pods.

    Args:
        store: the sim's object store.
        start_seconds: seconds from a pod being bound to a Ready node to ``Running``.
        termination_seconds: longest time a terminating pod takes to stop (its own
            grace period, if shorter, wins).
        monotonic: clock in seconds (inject a fake one in tests).
    """

    def __init__(
        self,
        store: Store,
        *,
        start_seconds: float = 0.2,
        termination_seconds: float = 0.2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._start = start_seconds
        self._termination = termination_seconds
        self._monotonic = monotonic
        self._starting: dict[str, float] = {}
        self._stopping: dict[str, float] = {}
        self._admitted: set[str] = set()
        self._next_ip = 0
        self._recorder = EventRecorder(store, "kubelet", monotonic=monotonic)
        self._view = PodView(store)

    async def run(self) -> None:
        """Sync on every store change and when a timer is due, until cancelled. A pass
        walks every bound pod, so changes are let settle `SETTLE_SECONDS` first: a
        scheduler binding 500 pods one by one costs a few passes, not 500. The real
        kubelet does no pass over all pods per change: each pod's updates go to a worker
        goroutine of its own (kubernetes ``pkg/kubelet/pod_workers.go``, ``podWorkers``
        ``podUpdates``), so a pod bound beside 500 others starts no later for them."""
        await self._store.run_passes(
            self.sync_once, "kubelet", kinds=(PODS, NODES), settle_seconds=SETTLE_SECONDS
        )

    def sync_once(self) -> float | None:
        """One pass over bound pods; returns seconds until the next timer (None: none)."""
        now = self._monotonic()
        self._view.refresh()
        nodes = {n["metadata"]["name"]: n for n in self._store.iter_objects(NODES)}
        bound = [pod for on_node in self._view.bound.values() for pod in on_node.values()]
        seen = {pod["metadata"]["uid"] for pod in bound}
        due: list[float] = []
        used: dict[str, dict[str, Decimal]] = {}  # per node, summed when an admission needs it
        # A Running pod on a node that exists, not being deleted, needs nothing this pass.
        work = [
            pod
            for pod in bound
            if (pod.get("status") or {}).get("phase") != "Running"
            or pod["metadata"].get("deletionTimestamp")
            or pod["spec"]["nodeName"] not in nodes
        ]
        for pod in sorted(work, key=lambda p: str(p["metadata"].get("creationTimestamp", ""))):
            uid = pod["metadata"]["uid"]
            node = nodes.get(pod["spec"]["nodeName"])
            if node is None:
                log.info("removing %s: its node %s is gone", _ref(pod), pod["spec"]["nodeName"])
                self._remove(pod)
            elif is_terminating(pod):
                deadline = self._stopping.setdefault(
                    uid, now + min(self._termination, _grace_seconds(pod))
                )
                if now >= deadline:
                    log.info("removing %s: terminated on %s", _ref(pod), node["metadata"]["name"])
                    self._remove(pod)
                else:
                    due.append(deadline)
            elif (pod.get("status") or {}).get("phase") != "Running" and not is_terminal(pod):
                if not _node_ready(node):
                    self._starting.pop(uid, None)
                    continue
                if uid not in self._admitted:
                    name = node["metadata"]["name"]
                    if name not in used:
                        used[name] = self._admitted_usage(self._view.bound_on(name))
                    if not self._admit(pod, node, used):
                        continue
                deadline = self._starting.setdefault(uid, now + self._start)
                if now >= deadline:
                    self._starting.pop(uid, None)
                    self._run_pod(pod, node)
                else:
                    due.append(deadline)
        self._starting = {u: t for u, t in self._starting.items() if u in seen}
        self._stopping = {u: t for u, t in self._stopping.items() if u in seen}
        self._admitted &= seen
        return max(min(due) - now, 0.0) if due else None

    def _admitted_usage(self, pods: Iterable[Obj]) -> dict[str, Decimal]:
        """Summed requests of the admitted pods (Running, or admitted by this kubelet)
        among ``pods`` (those bound to one node), terminal ones excluded."""
        total: dict[str, Decimal] = {}
        for pod in pods:
            if not is_bound(pod) or is_terminal(pod):
                continue
            running = (pod.get("status") or {}).get("phase") == "Running"
            if running or pod["metadata"]["uid"] in self._admitted:
                with contextlib.suppress(ValueError):
                    for key, value in pod_requests(pod).items():
                        total[key] = total.get(key, Decimal(0)) + value
        return total

    def _admit(
        self, pod: Obj, node: Mapping[str, Any], used: dict[str, dict[str, Decimal]]
    ) -> bool:
        """Admit ``pod`` to ``node`` (adding its requests to ``used``) or reject it."""
        try:
            requests = pod_requests(pod)
        except ValueError:
            requests = {"pods": Decimal(1)}
        total = used.setdefault(node["metadata"]["name"], {})
        short = _insufficient(requests, total, _allocatable(node))
        if short is None:
            self._admitted.add(pod["metadata"]["uid"])
            for key, value in requests.items():
                total[key] = total.get(key, Decimal(0)) + value
            return True
        reason, message = short
        meta = pod["metadata"]

        def reject(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status.update(phase="Failed", reason=reason, message=f"Pod was rejected: {message}")

        try:
            rejected = self._store.mutate(
                PODS, meta["namespace"], meta["name"], reject, subresource="status"
            )
        except ApiError as e:
            log.warning("rejecting %s failed: %s", _ref(pod), e.message)
            return False
        log.info("rejected %s on %s: %s", _ref(pod), node["metadata"]["name"], message)
        self._recorder.record(rejected, "Warning", reason, message)
        return False

    def _remove(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(NotFound):  # already gone: nothing to do
            self._store.force_remove(PODS, meta["namespace"], meta["name"])

    def _run_pod(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        host_ip = _host_ip(node)
        if (pod.get("spec") or {}).get("hostNetwork"):
            pod_ip = host_ip
        else:
            self._next_ip += 1
            pod_ip = f"10.244.{self._next_ip // 254 % 256}.{self._next_ip % 254 + 1}"
        stamp = rfc3339(datetime.now(UTC))
        try:
            self._store.mutate(
                PODS,
                meta["namespace"],
                meta["name"],
                lambda obj: _set_running(obj, host_ip, pod_ip, stamp),
                subresource="status",
            )
        except ApiError as e:
            log.warning("starting %s failed: %s", _ref(pod), e.message)
            return
        log.info("%s is running on %s (pod IP %s)", _ref(pod), node["metadata"]["name"], pod_ip)
