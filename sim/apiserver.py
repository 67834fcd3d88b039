"""The simulated kube-apiserver: an aiohttp app speaking a subset of the Kubernetes REST API.

This module owns the app, authentication, error mapping and routing; the verbs live in
`handlers` (one object) and `listwatch` (collections), HTTPS serving in `server`.

It serves every type of `store.RESOURCE_TYPES` at the real paths (``/api/v1/...``,
``/apis/<group>/<version>/...``, namespaced and cluster-wide), so the unmodified
``kubernetes_asyncio`` client works against it over HTTPS with a bearer token. Behaviour
follows k8s.io/apiserver ``pkg/endpoints/handlers`` (``create.go``, ``update.go``,
``patch.go``, ``delete.go``, ``get.go``, ``watch.go``, ``responsewriters``) and the
registries in kubernetes ``pkg/registry``:

- create (POST, 201): defaulting and built-in admission (`defaults`), mutating webhooks
  (`admission`), validation (`validation`, the CRD validators of `crds`), storage;
  ``?dryRun=All`` does all of it but stores nothing. Pods get ``status.phase: Pending``
  and a QoS class; custom resources drop ``status``; namespaces get
  ``kubernetes.io/metadata.name`` and ``status.phase: Active``.
- update (PUT, 200) and patch (PATCH, 200; content types in `patch`): pod specs are
  immutable but for the fields `validation.validate_pod_update` allows; custom resources
  need ``metadata.resourceVersion`` on PUT. ``/status`` changes only status.
- delete (200): pods and namespaces answer with the object, other types with a
  ``Status`` of ``details`` once removed; an object only marked for deletion (finalizers,
  graceful pod delete) is returned as is, 202 only with ``orphanDependents: false``.
- ``pods/<name>/binding`` (POST, 201): sets ``spec.nodeName`` and ``PodScheduled=True``;
  409 if the pod is bound already.
- list with label/field selectors and ``limit``/``continue`` (the token encodes the last
  key; it never expires, the real one does after etcd compaction); watch (`listwatch`).
- errors are ``Status`` bodies with the real codes and messages; a token, when set, is
  required everywhere but ``/healthz``, ``/livez``, ``/readyz`` and ``/version``.

Not implemented: server-side apply, deletecollection, ``resourceVersion`` semantics on
list (always the latest state), managedFields upkeep after create, update/delete
admission, RBAC, aggregated discovery.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from sim import crds, discovery
from sim.admission import Admission
from sim.defaults import SYSTEM_PRIORITY_CLASSES
from sim.handlers import (
    CONTEXT,
    ApiContext,
    Target,
    bind,
    create,
    delete,
    flag,
    patch,
    respond,
    update,
)
from sim.listwatch import list_or_watch
from sim.store import PODS, RESOURCE_TYPES, ApiError, NotFound, ResourceType, Store

__all__ = ["CONTEXT", "PUBLIC_PATHS", "ApiContext", "make_app"]

log = logging.getLogger(__name__)

PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version"})


class Unauthorized(ApiError):
    """401: no or a wrong bearer token."""

    code, reason = 401, "Unauthorized"


class MethodNotAllowed(ApiError):
    """405: the path exists but not for this verb."""

    code, reason = 405, "MethodNotAllowed"


def make_app(
    store: Store,
    *,
    token: str | None,
    admission: Admission | None,
    bookmark_interval: float = 1.0,
    priority_classes: Mapping[str, int] = SYSTEM_PRIORITY_CLASSES,
) -> web.Application:
    """The aiohttp application serving ``store``.

    Args:
        token: bearer token every request must carry (None: no authentication).
        admission: mutating webhook dispatcher (None: no webhooks are called).
        bookmark_interval: seconds between ``BOOKMARK`` events on watches that allow them.
        priority_classes: PriorityClass name -> value for the Priority admission plugin.

    Registers the Karpenter CRD validators on ``store`` (`crds.install`). Serve it with
    handler cancellation on (`sim.server.ApiServer` does) so that a watch ends
    as soon as its client goes away; app shutdown ends every watch.
    """
    crds.install(store)
    ctx = ApiContext(store, token, admission, bookmark_interval, dict(priority_classes))
    app = web.Application(middlewares=[_errors, _auth], client_max_size=16 * 1024 * 1024)
    app[CONTEXT] = ctx
    app.router.add_route("*", "/{path:.*}", _dispatch)

    async def close_watches(_: web.Application) -> None:
        ctx.closing = True
        for watcher in list(ctx.watchers):
            watcher.close()

    async def close_admission(_: web.Application) -> None:
        if admission is not None:
            await admission.close()

    app.on_shutdown.append(close_watches)
    app.on_cleanup.append(close_admission)
    return app


# -- middleware -------------------------------------------------------------------


def _status_response(err: ApiError) -> web.Response:
    return respond(err.status(), status=err.code)


_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        resp = await handler(request)
    except ApiError as e:
        resp = _status_response(e)
    except web.HTTPException as e:
        if e.status == 404:
            resp = _status_response(
                NotFound("the server could not find the requested resource", details={})
            )
        elif e.status == 405:
            resp = _status_response(
                MethodNotAllowed(f"{request.method} is not supported on this path")
            )
        else:
            err = ApiError(e.reason)
            err.code, err.reason = e.status, e.reason.replace(" ", "")
            resp = _status_response(err)
    except Exception as e:  # a bug in the sim, never a client mistake
        log.exception("internal error serving %s %s", request.method, request.path_qs)
        resp = _status_response(ApiError(f"Internal error occurred: {e}"))
    log.debug(
        "%s %s -> %d (%.1f ms)",
        request.method,
        request.path_qs,
        resp.status,
        (time.perf_counter() - started) * 1e3,
    )
    return resp


@web.middleware
async def _auth(request: web.Request, handler: _Handler) -> web.StreamResponse:
    token = request.app[CONTEXT].token
    if token is not None:
        header = request.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else None
        if given is None and request.path.rstrip("/") in PUBLIC_PATHS:
            return await handler(request)
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            raise Unauthorized("Unauthorized")
    return await handler(request)


# -- routing ------------------------------------------------------------------------


def _lookup(group: str, version: str, plural: str) -> ResourceType:
    for rt in RESOURCE_TYPES:
        if (rt.group, rt.version, rt.plural) == (group, version, plural):
            return rt
    raise web.HTTPNotFound()


def _parse(group: str, version: str, rest: list[str]) -> Target:
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3 or not all(rest):
        raise web.HTTPNotFound()
    rt = _lookup(group, version, rest[0])
    if namespace is not None and not rt.namespaced:
        raise web.HTTPNotFound()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and not (
        (sub == "status" and rt.has_status) or (sub == "binding" and rt is PODS)
    ):
        raise web.HTTPNotFound()
    return Target(rt, namespace, name, sub, watch_path)


async def _dispatch(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    path = "/" + request.match_info["path"].strip("/")
    if path in ("/healthz", "/livez", "/readyz"):
        return web.Response(text="ok")
    if request.method != "GET" and path in ("/version", "/api", "/apis"):
        raise MethodNotAllowed(f"{request.method} is not supported on this path")
    if path == "/version":
        return respond(discovery.version_info())
    if path == "/api":
        return respond(discovery.api_versions(ctx.server_address))
    if path == "/apis":
        return respond(discovery.api_group_list())
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    elif parts[0] == "apis" and len(parts) == 2 and request.method == "GET":
        doc = discovery.api_group(parts[1])
        if doc is None:
            raise web.HTTPNotFound()
        return respond(doc)
    else:
        raise web.HTTPNotFound()
    if not rest:
        doc = discovery.api_resource_list(group, version)
        if doc is None or request.method != "GET":
            raise web.HTTPNotFound()
        return respond(doc)
    if group == "" and len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "bindings":
        if request.method != "POST":
            raise MethodNotAllowed(f"{request.method} is not supported on bindings")
        return await bind(request, ctx, Target(PODS, rest[1], None, "binding", False))
    target = _parse(group, version, rest)
    return await _route(request, ctx, target)


async def _route(request: web.Request, ctx: ApiContext, t: Target) -> web.StreamResponse:
    method = request.method
    if t.subresource == "binding":
        if method != "POST" or t.namespace is None:
            raise MethodNotAllowed(f"{method} is not supported on pods/binding")
        return await bind(request, ctx, t)
    if t.rt.namespaced and t.namespace is None:
        if t.name is not None:
            raise web.HTTPNotFound()
        if method != "GET":
            raise MethodNotAllowed(
                f"{method} is not supported on the cluster-wide {t.rt.plural} path"
            )
    if t.name is None:
        if method == "GET":
            return await list_or_watch(request, ctx, t)
        if method == "POST" and not t.watch_path:
            return await create(request, ctx, t)
    elif method == "GET":
        if t.watch_path or flag(request, "watch"):
            if t.subresource is not None:
                raise web.HTTPNotFound()
            return await list_or_watch(request, ctx, t)
        return respond(ctx.store.get(t.rt, t.namespace, t.name))
    elif t.watch_path:
        pass
    elif method == "PUT":
        return await update(request, ctx, t)
    elif method == "PATCH":
        return await patch(request, ctx, t)
    elif method == "DELETE" and t.subresource is None:
        return await delete(request, ctx, t)
    raise MethodNotAllowed(f"{method} is not supported on resources of kind {t.rt.plural!r}")
