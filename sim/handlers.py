"""The verbs of the simulated apiserver on one object: create, update, patch, delete, bind.

Each handler takes the aiohttp request, the app's `ApiContext` and the parsed `Target`
and answers as k8s.io/apiserver ``pkg/endpoints/handlers`` (``create.go``, ``update.go``,
``patch.go``, ``delete.go``) and the kubernetes registries (``pkg/registry``) do; see
`sim.apiserver` for the summary. Errors are raised as `store.ApiError`; the
app's middleware turns them into ``Status`` responses.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import yaml
from aiohttp import web

from sim.admission import (
    Admission,
    default_webhook_configuration,
    validate_webhook_configuration,
)
from sim.defaults import managed_fields, pod_status_on_create, prepare_pod_for_admission
from sim.patch import apply_patch, patch_media_type
from sim.secrets import prepare_secret
from sim.store import (
    EVENTS,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    PODS,
    RESOURCE_TYPES,
    RESOURCECLAIMS,
    SECRETS,
    BadRequest,
    Conflict,
    Invalid,
    NotFound,
    Obj,
    ResourceType,
    Store,
    Watcher,
    rfc3339,
)
from sim.validation import (
    FieldError,
    invalid_error,
    validate_name,
    validate_pod_create,
    validate_pod_update,
)

__all__ = [
    "CONTEXT",
    "CUSTOM_TYPES",
    "ApiContext",
    "Target",
    "bind",
    "create",
    "delete",
    "flag",
    "patch",
    "respond",
    "update",
]

#: Types served by CRDs (no strategic merge patch, status dropped on create).
CUSTOM_TYPES = frozenset(rt for rt in RESOURCE_TYPES if rt.group == "karpenter.sh")
#: Types whose registry answers a completed delete with the object (``ReturnDeletedObject``;
#: the ``resource.k8s.io`` registries in kubernetes ``pkg/registry/resource`` set it too).
RETURN_DELETED = frozenset(
    {PODS, NAMESPACES, *(rt for rt in RESOURCE_TYPES if rt.group == "resource.k8s.io")}
)
#: Types whose PUT creates a missing object (``AllowCreateOnUpdate``).
CREATE_ON_UPDATE = frozenset({EVENTS, LEASES})
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class ApiContext:
    """Per-app state: the store, the auth token, admission, watch settings."""

    store: Store
    token: str | None
    admission: Admission | None
    bookmark_interval: float
    priority_classes: Mapping[str, int]
    server_address: str = "127.0.0.1:443"
    closing: bool = False
    watchers: set[Watcher] = field(default_factory=set)
    rng: random.Random = field(default_factory=random.Random)


CONTEXT = web.AppKey("gpu_intent_sim_api", ApiContext)


def respond(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    """A compact JSON response; each warning becomes a ``Warning: 299 - "<text>"`` header
    (k8s.io/apiserver ``pkg/endpoints/handlers/responsewriters``, RFC 7234 quoting)."""
    resp = web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
    for text in warnings or []:
        quoted = text.replace("\\", "\\\\").replace('"', '\\"')
        resp.headers.add("Warning", f'299 - "{quoted}"')
    return resp


@dataclass(frozen=True, slots=True)
class Target:
    """What a request path names: type, namespace, name, subresource, and whether it came
    through the legacy ``/watch/`` prefix."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


# -- request helpers ----------------------------------------------------------------


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter (``true`` or ``1``), as ``?watch=``."""
    return request.query.get(name, "").lower() in ("true", "1")


def _dry_run(request: web.Request, options: Mapping[str, Any] | None = None) -> bool:
    values = request.query.getall("dryRun", []) or list((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise BadRequest(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return bool(values)


async def _body(request: web.Request, rt: ResourceType | None = None) -> Obj:
    raw = await request.read()
    try:
        body = yaml.safe_load(raw) if "yaml" in request.content_type else json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise BadRequest(f"couldn't get version/kind; json parse error: {e}") from None
    if not isinstance(body, dict):
        raise BadRequest(
            "couldn't get version/kind; json parse error: the body must be a JSON object"
        )
    if not isinstance(body.get("metadata", {}), dict):
        raise BadRequest("metadata must be an object")
    if rt is not None:
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.api_version):
            raise BadRequest(
                f'{kind} in version "{api_version}" cannot be handled as a {rt.kind}: the kind or version does not match the resource'
            )
        body["kind"], body["apiVersion"] = rt.kind, rt.api_version
    return body


def _check_path_identity(body: Obj, t: Target) -> None:
    meta = body.setdefault("metadata", {})
    if t.name is not None:
        if meta.get("name") and meta["name"] != t.name:
            raise BadRequest(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({t.name})"
            )
        meta["name"] = t.name
    if t.rt.namespaced:
        if meta.get("namespace") and meta["namespace"] != t.namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = t.namespace
    else:
        meta.pop("namespace", None)


def _invalid(rt: ResourceType, obj: Mapping[str, Any], errors: list[FieldError]) -> None:
    if errors:
        raise invalid_error(
            rt.kind, rt.group, str((obj.get("metadata") or {}).get("name", "")), errors
        )


def _validate_builtin(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """The built-in (non-CRD) validation the REST layer runs before storage."""
    if rt is PODS:
        _invalid(
            rt, obj, validate_pod_create(obj) if old is None else validate_pod_update(old, obj)
        )
    elif rt is MUTATING_WEBHOOK_CONFIGURATIONS:
        default_webhook_configuration(obj)
        errors = validate_webhook_configuration(obj)
        _invalid(rt, obj, (validate_name(rt, obj["metadata"]) if old is None else []) + errors)
    elif rt is SECRETS:
        errors = prepare_secret(obj, old)
        _invalid(rt, obj, (validate_name(rt, obj["metadata"]) if old is None else []) + errors)
    elif rt is RESOURCECLAIMS and old is not None and obj.get("spec") != old.get("spec"):
        # ValidateResourceClaimUpdate: the spec of a ResourceClaim is immutable.
        _invalid(rt, obj, [FieldError.invalid("spec", obj.get("spec"), "field is immutable")])
    elif old is None:
        _invalid(rt, obj, validate_name(rt, obj["metadata"]))


# -- verbs --------------------------------------------------------------------------


async def create(request: web.Request, ctx: ApiContext, t: Target) -> web.Response:
    """POST: the create pipeline of the real handler (see the apiserver module doc); 201
    with the stored object, or the would-be object under ``?dryRun=All``."""
    rt, store = t.rt, ctx.store
    body = await _body(request, rt)
    _check_path_identity(body, t)
    dry_run = _dry_run(request)
    if rt.namespaced:
        store.get(NAMESPACES, None, str(t.namespace))  # NamespaceLifecycle: 404 if missing
    options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = ["All"]
    for key in ("fieldManager", "fieldValidation"):
        if key in request.query:
            options[key] = request.query[key]
    manager = (
        request.query.get("fieldManager") or request.headers.get("User-Agent", "").split("/", 1)[0]
    )
    now = rfc3339(datetime.now(UTC))
    if rt is PODS:
        obj = prepare_pod_for_admission(
            body, manager=manager, time=now, rng=ctx.rng, priority_classes=ctx.priority_classes
        )
    else:
        obj = body
        obj["metadata"]["creationTimestamp"] = None
        entries = managed_fields(obj, manager, rt.api_version, now)
        if entries:
            obj["metadata"]["managedFields"] = entries
    warnings: list[str] = []
    if ctx.admission is not None:
        result = await ctx.admission.admit(
            rt, obj, namespace=t.namespace, dry_run=dry_run, options=options
        )
        obj, warnings = result.object, result.warnings
    meta = obj.setdefault("metadata", {})
    meta.pop("creationTimestamp", None)
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = _generate_name(store, rt, t.namespace, str(meta["generateName"]))
    _validate_builtin(rt, obj, None)
    if rt is PODS:
        obj["status"] = pod_status_on_create(obj)
    elif rt in CUSTOM_TYPES or rt is RESOURCECLAIMS:
        # A ResourceClaim's status is written only through /status (its registry's
        # PrepareForCreate, kubernetes pkg/registry/resource/resourceclaim/strategy.go).
        obj.pop("status", None)
    elif rt is NAMESPACES:
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    created = store.create(rt, obj, t.namespace, dry_run=dry_run, owned=True)
    return respond(created, status=201, warnings=warnings)


def _generate_name(store: Store, rt: ResourceType, namespace: str | None, prefix: str) -> str:
    """``names.SimpleNameGenerator``: the prefix plus 5 random characters, unused."""
    rng = random.Random()
    for _ in range(16):
        candidate = prefix + "".join(rng.choice(_NAME_CHARS) for _ in range(5))
        try:
            store.get(rt, namespace, candidate)
        except NotFound:
            return candidate
    return candidate  # the store reports AlreadyExists


async def update(request: web.Request, ctx: ApiContext, t: Target) -> web.Response:
    """PUT on an object or its ``/status``; 200 with the stored object."""
    rt, store = t.rt, ctx.store
    body = await _body(request, rt)
    _check_path_identity(body, t)
    dry_run = _dry_run(request)
    assert t.name is not None
    try:
        old = store.peek(rt, t.namespace, t.name)
    except NotFound:
        if rt in CREATE_ON_UPDATE and t.subresource is None:
            return await create(request, ctx, Target(rt, t.namespace, None, None, False))
        raise
    if rt in CUSTOM_TYPES and not body["metadata"].get("resourceVersion"):
        raise invalid_error(
            rt.kind,
            rt.group,
            t.name,
            [FieldError.invalid("metadata.resourceVersion", 0, "must be specified for an update")],
        )
    if t.subresource is None:
        _validate_builtin(rt, body, old)
    return respond(
        store.update(rt, body, subresource=t.subresource, dry_run=dry_run, owned=True)
    )


async def patch(request: web.Request, ctx: ApiContext, t: Target) -> web.Response:
    """PATCH on an object or its ``/status`` (content types in `sim.patch`)."""
    rt, store = t.rt, ctx.store
    assert t.name is not None
    dry_run = _dry_run(request)
    patch_media_type(request.headers.get("Content-Type", ""), custom=rt in CUSTOM_TYPES)
    current = store.peek(rt, t.namespace, t.name)  # read-only: apply_patch copies it
    patched = apply_patch(
        request.headers.get("Content-Type", ""),
        current,
        await request.read(),
        custom=rt in CUSTOM_TYPES,
    )
    meta = patched.get("metadata")
    if not isinstance(meta, dict):
        raise Invalid("the server rejected our request due to an error in our request")
    if meta.get("name") != t.name or (rt.namespaced and meta.get("namespace") != t.namespace):
        raise BadRequest(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({t.name})"
        )
    patched["kind"], patched["apiVersion"] = rt.kind, rt.api_version
    if t.subresource is None:
        _validate_builtin(rt, patched, current)
    return respond(
        store.update(rt, patched, subresource=t.subresource, dry_run=dry_run, owned=True)
    )


async def delete(request: web.Request, ctx: ApiContext, t: Target) -> web.Response:
    """DELETE with DeleteOptions from the body or query (``gracePeriodSeconds``,
    ``preconditions``, ``orphanDependents``; ``propagationPolicy`` is accepted and
    ignored). Status codes and bodies as ``handlers/delete.go`` (module doc)."""
    rt, store = t.rt, ctx.store
    assert t.name is not None
    options: Obj = {}
    if request.can_read_body:
        raw = await request.read()
        if raw.strip():
            try:
                options = json.loads(raw)
            except ValueError as e:
                raise BadRequest(f"couldn't get version/kind; json parse error: {e}") from None
            if not isinstance(options, dict):
                raise BadRequest("the DeleteOptions body must be a JSON object")
    query = request.query
    grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
    orphan = query.get("orphanDependents", options.get("orphanDependents"))
    pre = options.get("preconditions") or {}
    try:
        grace_seconds = None if grace is None else int(grace)
    except ValueError:
        raise BadRequest(f"gracePeriodSeconds: invalid value {grace!r}") from None
    if _dry_run(request, options):
        return respond(store.get(rt, t.namespace, t.name))
    last = store.delete(rt, t.namespace, t.name, grace_period_seconds=grace_seconds,
                        precondition_uid=pre.get("uid"), precondition_rv=pre.get("resourceVersion"))  # fmt: skip
    try:
        store.get(rt, t.namespace, t.name)
        removed = False
    except NotFound:
        removed = True
    status = 202 if not removed and str(orphan).lower() == "false" else 200
    if removed and rt not in RETURN_DELETED:
        meta = last["metadata"]
        details = {"name": meta["name"], "group": rt.group, "kind": rt.plural, "uid": meta["uid"]}
        return respond(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            },
            status,
        )
    return respond(last, status)


async def bind(request: web.Request, ctx: ApiContext, t: Target) -> web.Response:
    """POST a ``Binding`` to ``pods/<name>/binding`` or ``namespaces/<ns>/bindings``
    (``BindingREST.Create`` in kubernetes ``pkg/registry/core/pod/storage``): 201 and a
    success ``Status``; 409 when the pod is bound already or being deleted."""
    body = await _body(request)
    meta = body.get("metadata") or {}
    if t.name is None:  # the legacy namespaces/<ns>/bindings resource names the pod in the body
        if not meta.get("name"):
            raise invalid_error(
                "Binding",
                "",
                "",
                [FieldError.required("metadata.name", "name or generateName is required")],
            )
        t = Target(PODS, t.namespace, str(meta["name"]), "binding", False)
    elif meta.get("name") and meta["name"] != t.name:
        raise BadRequest("name in URL does not match name in Binding object")
    assert t.name is not None
    target = body.get("target") or {}
    if target.get("kind") not in (None, "", "Node"):
        raise invalid_error(
            "Binding",
            "",
            t.name,
            [FieldError.invalid("target.kind", target.get("kind"), "must be empty or 'Node'")],
        )
    if not target.get("name"):
        raise invalid_error("Binding", "", t.name, [FieldError.required("target.name")])
    now = rfc3339(datetime.now(UTC))

    def assign(pod: Obj) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            reason = f"pod {t.name} is being deleted, cannot be assigned to a host"
        elif (pod.get("spec") or {}).get("nodeName"):
            reason = f'pod {t.name} is already assigned to node "{pod["spec"]["nodeName"]}"'
        else:
            reason = ""
        if reason:
            raise Conflict(f'Operation cannot be fulfilled on pods/binding "{t.name}": {reason}',
                           details={"name": t.name, "kind": "pods/binding"})  # fmt: skip
        pod["spec"]["nodeName"] = target["name"]
        if meta.get("annotations"):
            pod["metadata"].setdefault("annotations", {}).update(meta["annotations"])

    def scheduled(pod: Obj) -> None:
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is None:
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                }
            )
        elif current.get("status") != "True":
            current.update(status="True", lastTransitionTime=now)
            current.pop("reason", None)
            current.pop("message", None)

    if not _dry_run(request):
        # One write, as kube-apiserver's BindingREST.setPodNodeAndMetadata (assignPod):
        # watchers see a single MODIFIED with nodeName and PodScheduled=True together.
        def bind_pod(pod: Obj) -> None:
            assign(pod)
            scheduled(pod)

        ctx.store.mutate(PODS, t.namespace, t.name, bind_pod, subresource="binding")
    return respond(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
        201,
    )
