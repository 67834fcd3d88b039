"""core/v1 Events written by the sim's in-process components, as client-go's recorder does.

What is copied, and from where:

- the Event's shape and name: client-go ``tools/record/event.go`` ``makeEvent``
  (``<involved-name>.<UnixNano in hex>``, namespace of the involved object or ``default``
  for cluster-scoped objects, ``count: 1``, first and last timestamps equal);
- aggregation of repeats: client-go ``tools/record/events_cache.go`` ``EventCorrelator``
  / ``eventLogger``: an identical event (same involved object, type, reason, message)
  updates ``count`` and ``lastTimestamp`` of the Event already written instead of
  creating another; its cache is an LRU of 4096 entries;
- dedupe: kubernetes-sigs/karpenter ``pkg/events/recorder.go``: an event with dedupe
  values is dropped while its key is in a TTL cache, the TTL starting at the first
  emission and not refreshed by drops (FailedScheduling 5 min, Nominated 2 min, the
  latter keyed by pod only).

Recording never raises: like client-go's asynchronous broadcaster, a failed write is
logged and forgotten.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sim.store import EVENTS, ApiError, NotFound, Store, rfc3339

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)

#: client-go ``maxLruCacheEntries``.
_CACHE_ENTRIES = 4096


def _wall_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Written:
    namespace: str
    name: str
    count: int


class EventRecorder:
    """Writes core/v1 Events about objects into a `Store` for one component.

    Args:
        store: where Events go (``events`` in the involved object's namespace).
        component: ``source.component`` and ``reportingComponent``, e.g.
            ``"default-scheduler"`` or ``"karpenter"``.
        instance: ``reportingInstance``; defaults to ``component``.
        monotonic: clock in seconds for dedupe windows (inject a fake one in tests).
        now: wall clock for ``firstTimestamp``/``lastTimestamp`` and the name suffix.
    """

    def __init__(
        self,
        store: Store,
        component: str,
        *,
        instance: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _wall_now,
    ) -> None:
        self._store = store
        self.component = component
        self.instance = instance or component
        self._monotonic = monotonic
        self._now = now
        self._written: OrderedDict[tuple[str, str, str, str, str], _Written] = OrderedDict()
        self._dedupe_until: dict[tuple[str, ...], float] = {}
        self._last_suffix = 0

    def record(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        dedupe_seconds: float | None = None,
        dedupe_key: str | None = None,
    ) -> None:
        """Record that ``reason`` (``type_`` ``Normal`` or ``Warning``) happened to
        ``involved`` (a stored object: kind, apiVersion and metadata name/uid are read).

        A repeat of the same (uid, type, reason, message) bumps ``count`` and
        ``lastTimestamp`` of the existing Event (re-created if it was deleted). With
        ``dedupe_seconds``, a repeat within that many seconds of the first one is dropped
        entirely; ``dedupe_key`` replaces the message in that repeat test (Karpenter's
        ``DedupeValues``: Nominated is deduped per pod whatever the NodeClaim).
        """
        meta = involved.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if dedupe_seconds is not None:
            dkey = (uid, type_, reason, message if dedupe_key is None else dedupe_key)
            now_mono = self._monotonic()
            self._dedupe_until = {k: t for k, t in self._dedupe_until.items() if t > now_mono}
            if dkey in self._dedupe_until:
                return
            self._dedupe_until[dkey] = now_mono + dedupe_seconds
        key = (str(meta.get("namespace") or ""), uid, type_, reason, message)
        stamp = rfc3339(self._now())
        written = self._written.get(key)
        if written is not None:
            self._written.move_to_end(key)
            if self._bump(written, stamp, message):
                return
        try:
            self._create(involved, key, type_, reason, message, stamp)
        except ApiError as e:
            log.warning(
                "recording %s event %s on %s/%s failed: %s",
                type_,
                reason,
                meta.get("namespace", ""),
                meta.get("name", ""),
                e.message,
            )

    def _bump(self, written: _Written, stamp: str, message: str) -> bool:
        """Increment an existing Event; False if it no longer exists."""
        count = written.count + 1

        def edit(event: dict[str, Any]) -> None:
            event["count"] = count
            event["lastTimestamp"] = stamp
            event["message"] = message

        try:
            self._store.mutate(EVENTS, written.namespace, written.name, edit)
        except NotFound:
            return False
        except ApiError as e:
            log.warning("updating event %s/%s failed: %s", written.namespace, written.name, e)
            return True
        written.count = count
        return True

    def _create(
        self,
        involved: Mapping[str, Any],
        key: tuple[str, str, str, str, str],
        type_: str,
        reason: str,
        message: str,
        stamp: str,
    ) -> None:
        meta = involved.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        suffix = max(time.time_ns(), self._last_suffix + 1)
        self._last_suffix = suffix
        name = f"{meta.get('name', '')}.{suffix:x}"
        involved_ref: dict[str, Any] = {
            "kind": involved.get("kind", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "apiVersion": involved.get("apiVersion", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if meta.get("namespace"):
            involved_ref["namespace"] = meta["namespace"]
        self._store.create(
            EVENTS,
            {
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": involved_ref,
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "reportingInstance": self.instance,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            },
        )
        self._written[key] = _Written(namespace, name, 1)
        self._written.move_to_end(key)
        while len(self._written) > _CACHE_ENTRIES:
            self._written.popitem(last=False)
