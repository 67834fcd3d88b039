"""The read verbs on collections: list (selectors, pagination) and watch (event stream).

List: label and field selectors (`selectors`), ``limit``/``continue`` pagination whose
opaque token (the shape of k8s.io/apiserver ``pkg/storage`` continue keys) encodes the last
returned key; items after it are served from the current state (the real token pins the
list to its resourceVersion and expires after etcd compaction with 410). Items of built-in
types carry no ``kind``/``apiVersion``; custom resources keep theirs.

Watch, as k8s.io/apiserver ``pkg/endpoints/handlers/watch.go`` and the cacher serve it:

- ``resourceVersion`` unset or ``"0"``: the current matching objects as ``ADDED``, then live
  changes; otherwise every change after that version, then live changes (`store.watch`);
- a version older than the kept history: HTTP 200, one ``ERROR`` event carrying the
  ``Status`` 410 ``Expired``, end of stream (kubernetes_asyncio's ``Watch`` raises
  ``ApiException(410)`` on it);
- ``timeoutSeconds`` ends the stream cleanly after that many seconds (without it the real
  server picks 30-60 min; so do we);
- ``allowWatchBookmarks=true``: a ``BOOKMARK`` event, whose object carries only kind,
  apiVersion and ``metadata.resourceVersion``, whenever the stream has been idle for the
  app's bookmark interval;
- label/field selector semantics (leaving objects arrive as ``DELETED``) are the store's.

The stream ends without leaking its store watcher when the client disconnects (the
handler is cancelled, or the next write or idle check notices) and when the app shuts
down (`apiserver.make_app` closes every open watcher).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import random
from typing import Any

import orjson
from aiohttp import web

from sim.handlers import CUSTOM_TYPES, ApiContext, Target, flag, respond
from sim.selectors import and_predicates, compile_field_selector, compile_label_selector
from sim.store import BadRequest, Gone, Obj, Predicate, ResourceType, WatchEvent

__all__ = ["list_or_watch", "serve_watch"]

log = logging.getLogger(__name__)

#: Longest sleep between checks that the client is still connected, in seconds.
_IDLE_CHECK = 1.0


def _line(event_type: str, obj: Any) -> bytes:
    """One watch event as kube-apiserver streams it: a JSON object and a newline."""
    return orjson.dumps({"type": event_type, "object": obj}, option=orjson.OPT_APPEND_NEWLINE)


def _closed(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def serve_watch(
    request: web.Request,
    ctx: ApiContext,
    rt: ResourceType,
    namespace: str | None,
    predicate: Predicate | None,
) -> web.StreamResponse:
    """Serve ``GET ...?watch=true`` for ``rt`` (in ``namespace`` if given) filtered by
    ``predicate``. Raises `BadRequest` (before any byte is sent) for a malformed
    ``resourceVersion`` or ``timeoutSeconds``."""
    query = request.query
    try:
        rv = int(query.get("resourceVersion") or 0)
        timeout = (
            float(query["timeoutSeconds"])
            if query.get("timeoutSeconds")
            else 1800 * (1 + random.random())
        )
    except ValueError:
        raise BadRequest("resourceVersion and timeoutSeconds must be integers") from None
    bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    try:
        watcher = ctx.store.watch(rt, namespace, rv or None, predicate)
    except Gone as e:
        await resp.prepare(request)
        await resp.write(_line("ERROR", e.status()))
        await resp.write_eof()
        return resp
    if ctx.closing:
        watcher.close()
    ctx.watchers.add(watcher)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_bookmark = loop.time() + ctx.bookmark_interval
    try:
        await resp.prepare(request)
        while True:
            now = loop.time()
            if now >= deadline:
                break
            wake = min(deadline, now + _IDLE_CHECK, next_bookmark if bookmarks else deadline)
            try:
                async with asyncio.timeout(max(0.0, wake - now)):
                    event: WatchEvent = await anext(watcher)
            except TimeoutError:
                if _closed(request):
                    break
                if bookmarks and loop.time() >= next_bookmark:
                    marker = {"kind": rt.kind, "apiVersion": rt.api_version,
                              "metadata": {"resourceVersion": str(ctx.store.resource_version)}}  # fmt: skip
                    await resp.write(_line("BOOKMARK", marker))
                    next_bookmark = loop.time() + ctx.bookmark_interval
                continue
            except StopAsyncIteration:
                break
            await resp.write(_line(event.type, event.obj))
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError):
        log.debug("watch client for %s went away", rt.plural)
    finally:
        watcher.close()
        ctx.watchers.discard(watcher)
    return resp


def _strip_type(rt: ResourceType, obj: Obj) -> Obj:
    """List items of built-in types carry no kind/apiVersion; custom resources keep them."""
    if rt in CUSTOM_TYPES:
        return obj
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


async def list_or_watch(request: web.Request, ctx: ApiContext, t: Target) -> web.StreamResponse:
    """``GET`` on a collection (or ``?watch`` on one object): a ``<Kind>List`` whose
    ``metadata`` has ``resourceVersion`` (and ``continue``/``remainingItemCount`` when
    ``limit`` cut it short), or a watch stream. Raises `BadRequest` for bad selectors,
    ``limit`` or ``continue``."""
    rt, query = t.rt, request.query
    predicates: list[Predicate | None] = [
        compile_label_selector(query.get("labelSelector")),
        compile_field_selector(rt, query.get("fieldSelector")),
    ]
    if t.name is not None:
        name = t.name
        predicates.append(lambda obj: obj["metadata"].get("name") == name)
    predicate = and_predicates(predicates)
    if t.watch_path or flag(request, "watch"):
        return await serve_watch(request, ctx, rt, t.namespace, predicate)
    items, rv = ctx.store.list(rt, t.namespace, predicate, copy_objects=False)
    metadata: Obj = {"resourceVersion": str(rv)}
    token = query.get("continue")
    if token:
        start, rv = _decode_continue(token)
        items = [
            o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start
        ]
        metadata["resourceVersion"] = str(rv)
    try:
        limit = int(query.get("limit") or 0)
    except ValueError:
        raise BadRequest(f"limit: invalid value {query.get('limit')!r}") from None
    if 0 < limit < len(items):
        last = items[limit - 1]["metadata"]
        metadata["continue"] = _encode_continue((last.get("namespace", ""), last["name"]), rv)
        metadata["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata,
            "items": [_strip_type(rt, o) for o in items]}  # fmt: skip
    return respond(body)


def _encode_continue(key: tuple[str, str], rv: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{key[0]}/{key[1]}\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[tuple[str, str], int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        ns, _, name = str(data["start"]).rstrip("\x00").partition("/")
        return (ns, name), int(data["rv"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise BadRequest(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from None
