"""The one adapter to the Kubernetes API server (kubernetes_asyncio).

Every component that talks to the API server goes through `Kube`: the controller, the
``certs`` command (`certs.incluster`), the demo's applier and watches. Everything here is
I/O; everything that decides what to send lives elsewhere. Objects stay JSON dicts
(``_preload_content=False``) so the pure core never sees client models, and every failure
becomes a `KubeError` whose message says what was being done (its fields: the Kubernetes
verb, the HTTP status...), counted by the adapter on the `ApiErrorCounter` it was given
(the controller's `controller.metrics.ControllerMetrics`:
``gpu_intent_api_errors_total{verb,code}``). Callers that retry an API call use one
policy, `intent.retry.retrying`. Bodies
and watch events are decoded with orjson: about twice as fast as the json module, and
its key cache gives every decoded object the same key strings, so the cached objects
share them.
"""

from __future__ import annotations

import functools
import logging
import os
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import aiohttp
import orjson
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

#: The Kubernetes verb of a write sent by HTTP method (`Kube._send`).
METHOD_VERBS = {
    "GET": "get",
    "POST": "create",
    "PATCH": "patch",
    "PUT": "update",
    "DELETE": "delete",
}


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds of a ``Retry-After`` header (delta-seconds only: kube-apiserver sends
    those), or None when absent or not a number. Pure."""
    if not headers:
        return None
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


Obj = dict[str, Any]


class KubeError(Exception):
    """An API call failed.

    Fields, set where it is raised:

    - ``doing``: what was being done, e.g. ``listing pods``, ``creating pod ns/name``;
    - ``verb``: the Kubernetes verb of the call (``list``, ``watch``, ``get``,
      ``create``, ``patch``, ``update``, ``delete``; ``config`` for a kubeconfig that
      would not load), the ``verb`` label of ``gpu_intent_api_errors_total``;
    - ``status``: the HTTP code (0: no answer: connection refused or lost, timeout);
    - ``reason``: the Kubernetes Status reason (``NotFound``, ``Conflict``,
      ``Expired``...) or the client exception's class name;
    - ``detail``: the server's message (at most 500 characters of it);
    - ``retry_after``: the seconds of a ``Retry-After`` header when the server sent one
      (429 from max-in-flight or API Priority and Fairness, k8s.io/apiserver
      ``pkg/server/filters/maxinflight.go``), else None.

    The message is ``"<doing>: <status> <reason>: <detail>"``. Creating one counts
    nothing: the `Kube` adapter counts the errors it raises, on its metrics.
    """

    def __init__(
        self,
        doing: str,
        status: int,
        reason: str,
        message: str,
        *,
        retry_after: float | None = None,
        verb: str = "",
    ) -> None:
        super().__init__(f"{doing}: {status} {reason}: {message[:500]}")
        self.doing = doing
        self.verb = verb
        self.status = status
        self.reason = reason
        self.detail = message[:500]
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        """404 Not Found."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: Conflict (stale resourceVersion, failed precondition) or AlreadyExists."""
        return self.status == 409

    @property
    def gone(self) -> bool:
        """410 Gone: a watch's resourceVersion was compacted away (relist)."""
        return self.status == 410


@dataclass(frozen=True, slots=True)
class Resource:
    """A collection the controller lists and watches."""

    plural: str
    group: str = ""
    version: str = "v1"


PODS = Resource("pods")
NAMESPACES = Resource("namespaces")
EVENTS = Resource("events")
NODES = Resource("nodes")
NODECLAIMS = Resource("nodeclaims", "karpenter.sh")
NODEPOOLS = Resource("nodepools", "karpenter.sh")
LEASES = Resource("leases", "coordination.k8s.io")
#: DRA (GA in Kubernetes 1.34): read to learn GPU intent from claims and to see the
#: devices a new node publishes.
RESOURCECLAIMS = Resource("resourceclaims", "resource.k8s.io")
RESOURCESLICES = Resource("resourceslices", "resource.k8s.io")


async def load_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> client.Configuration:
    """Client configuration the way controller-runtime finds it: ``--kubeconfig``, else
    ``$KUBECONFIG``, else in-cluster (service account) when running in a pod, else
    ``~/.kube/config``. Raises `KubeError` when none is usable."""
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if path:
            await config.load_kube_config(
                config_file=path, context=context, client_configuration=cfg
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            default = Path.home() / ".kube" / "config"
            await config.load_kube_config(
                config_file=str(default), context=context, client_configuration=cfg
            )
    except (config.ConfigException, OSError) as e:
        raise KubeError("loading kubeconfig", 0, "ConfigError", str(e), verb="config") from e
    return cfg


def env_proxy(host_url: str) -> str | None:
    """The proxy the environment names for the API server at ``host_url`` (``HTTPS_PROXY``
    or ``HTTP_PROXY`` by its scheme, unless ``NO_PROXY`` covers its host; the standard
    library's reading, which aiohttp's ``trust_env`` also uses), None for none. client-go
    reads the same variables (``http.ProxyFromEnvironment``). Raises nothing."""
    parts = urlsplit(host_url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme or "https") or None


def without_env_lookups(api_client: client.ApiClient) -> None:
    """Make ``api_client`` resolve its proxy once instead of per request.

    kubernetes_asyncio's ``RESTClientObject`` opens its aiohttp session with
    ``trust_env=True``: every request then hops to a thread twice, to read the proxy
    variables and to read ``~/.netrc`` (aiohttp ``ClientSession._request``). At a burst's
    thousand writes a second that was about a tenth of the controller's CPU, plus the
    GIL handoffs. The proxy is read here once (`env_proxy`, unless the configuration
    names one) and the session is replaced by one on the same connector with
    ``trust_env=False``; netrc is dropped (client-go never reads it: the API server's
    credentials come from the kubeconfig or the service account). Raises nothing."""
    rest = api_client.rest_client
    old: aiohttp.ClientSession = rest.pool_manager
    if not old.trust_env:  # already done
        return
    if not rest.proxy and (proxy := env_proxy(str(api_client.configuration.host))):
        rest.proxy = proxy
    connector = old.connector
    old.detach()  # the connector is the new session's now
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=2**21
    )  # read_bufsize as kubernetes_asyncio sets it: a watch event may be 1.5 MiB


class _Replayed:
    """An answer whose body was read already, for `_read` (status, reason, headers and
    the bytes)."""

    def __init__(self, response: aiohttp.ClientResponse, body: bytes) -> None:
        self.status = response.status
        self.reason = response.reason
        self.headers = response.headers
        self._body = body

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


async def _read(response: aiohttp.ClientResponse | _Replayed, doing: str, verb: str) -> Obj:
    """The JSON object answered; `KubeError` (``doing``, ``verb``) for a status of 400
    or more, or a body that is no JSON object."""
    try:
        body = await response.read()
    finally:
        response.release()
    try:
        data = orjson.loads(body) if body else {}
    except ValueError:
        data = {}
    if response.status >= 400 or not isinstance(data, dict):
        message = (
            data.get("message", body[:200].decode(errors="replace"))
            if isinstance(data, dict)
            else ""
        )
        reason = data.get("reason", response.reason or "") if isinstance(data, dict) else ""
        raise KubeError(
            doing,
            response.status,
            str(reason),
            str(message),
            retry_after=retry_after_seconds(response.headers),
            verb=verb,
        )
    return data


#: The content type of a strategic merge patch (built-in types only).
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
#: The content type of a JSON patch (RFC 6902: a list of operations).
JSON_PATCH = "application/json-patch+json"


def object_path(
    api_version: str, plural: str, name: str | None = None, namespace: str | None = None
) -> str:
    """The API path of a collection or, given ``name``, of one object: ``api_version``
    ``v1`` (core) under ``/api/v1``, ``<group>/<version>`` under ``/apis/...``;
    ``namespace`` for namespaced kinds. Namespace and name percent-encoded. Pure."""
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespace is not None:
        path = f"{path}/namespaces/{quote(namespace, safe='')}"
    path = f"{path}/{plural}"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


def _core_path(plural: str, namespace: str, name: str | None = None) -> str:
    """``/api/v1/namespaces/<namespace>/<plural>[/<name>]`` (a core/v1 resource, e.g.
    ``pods``, ``events``): `object_path` of a namespaced core kind."""
    return object_path("v1", plural, name, namespace)


class ApiErrorCounter(Protocol):
    """Where `Kube` counts the errors it raises: the one method it needs
    (`controller.metrics.ControllerMetrics` has it)."""

    def count_api_error(self, verb: str, code: int) -> None:
        """One failed call: its Kubernetes verb (`KubeError.verb`) and HTTP code
        (`KubeError.status`, 0: no answer)."""


class _Uncounted:
    """An `ApiErrorCounter` that counts nothing (a `Kube` given no metrics)."""

    def count_api_error(self, verb: str, code: int) -> None:
        pass


class Kube:
    """API calls the components make, each returning plain dicts.

    Create with `Kube.connect` (or ``Kube(ApiClient(cfg))``) and `close` when done.
    All methods raise `KubeError`, each counted once, as it is raised, on ``metrics``
    (`ApiErrorCounter.count_api_error` with `KubeError.verb` and `KubeError.status`),
    those the method then handles too (a 404 read as None, a 409 on delete).
    ``metrics``: the controller's (`controller.metrics.ControllerMetrics`: its
    ``gpu_intent_api_errors_total{verb,code}``); by default nothing is counted.
    """

    def __init__(
        self, api_client: client.ApiClient, metrics: ApiErrorCounter | None = None
    ) -> None:
        without_env_lookups(api_client)
        self.metrics: ApiErrorCounter = metrics if metrics is not None else _Uncounted()
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        #: Idle `watch.Watch` objects, reused: kubernetes_asyncio's ``Watch()`` builds an
        #: ApiClient of its own (a TLS context loading the system's CA certificates,
        #: tens of milliseconds of CPU), which a watch in "str" mode never uses but to
        #: close it. Built anew for every watch, that was 15% of the controller's CPU in
        #: ``bench.faults`` (every watch dropped every 10 s). A closed Watch can stream
        #: again: ``stream`` resets it, and closing its closed client is a no-op.
        self._idle_watches: list[watch.Watch] = []

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        metrics: ApiErrorCounter | None = None,
    ) -> Kube:
        """A `Kube` on the configuration `load_configuration` finds; raises `KubeError`
        (verb ``config``, not counted: there is no adapter yet) when none is usable."""
        cfg = await load_configuration(kubeconfig, context)
        return cls(client.ApiClient(configuration=cfg), metrics)

    async def close(self) -> None:
        """Close the API client's connections."""
        await self.api_client.close()

    @contextmanager
    def _counted(self) -> Iterator[None]:
        """Count a `KubeError` raised inside (by verb and code), and let it through: the
        one place API errors are counted."""
        try:
            yield
        except KubeError as e:
            self.metrics.count_api_error(e.verb, e.status)
            raise

    async def _call(self, verb: str, doing: str, fn: Any, *args: Any, **kwargs: Any) -> Obj:
        """``fn`` (a generated API method) with ``args``, its answer decoded; raises a
        counted `KubeError` with ``verb`` and ``doing``."""
        with self._counted():
            try:
                response = await fn(*args, _preload_content=False, **kwargs)
            except ApiException as e:
                raise KubeError(
                    doing,
                    e.status or 0,
                    str(e.reason),
                    str(e.body or ""),
                    retry_after=retry_after_seconds(e.headers),
                    verb=verb,
                ) from e
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise KubeError(doing, 0, type(e).__name__, str(e), verb=verb) from e
            return await _read(response, doing, verb)

    async def _send(
        self,
        doing: str,
        method: str,
        path: str,
        body: Any,
        content_type: str = "application/json",
    ) -> Obj:
        """One write (``method`` on ``path``, e.g. ``/api/v1/namespaces/ns/pods``) with
        ``body`` encoded by orjson, sent through the client's own aiohttp session (its TLS
        context and client certificate, proxy, ``tls_server_name``) with the client's own
        authentication (`ApiClient.update_params_for_auth`: the bearer token, refreshed
        from the kubeconfig's exec plugin or token file as every call of the client).
        The generated API methods walk a body twice before sending it (their
        ``sanitize_for_serialization``, then the json module): 117 us for a trigger pod
        against orjson's 2, at a burst's 10,000 trigger writes most of a second of the
        controller's CPU. ``body`` None: none sent (a GET). Raises `KubeError` as `_call`
        does, its verb the method's (`METHOD_VERBS`)."""
        api = self.api_client
        rest = api.rest_client
        headers = {**api.default_headers, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
            if rest.proxy_headers:
                extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        verb = METHOD_VERBS[method]
        with self._counted():
            try:
                response = await rest.pool_manager.request(
                    method,
                    f"{api.configuration.host}{path}",
                    data=orjson.dumps(body) if body is not None else None,
                    headers=headers,
                    **extra,
                )
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise KubeError(doing, 0, type(e).__name__, str(e), verb=verb) from e
            return await _read(response, doing, verb)

    # --- Any kind, by path: what the certs command and the demo's applier need. --------

    async def get(self, path: str, doing: str) -> Obj | None:
        """The object at ``path`` (`object_path`), or None when it does not exist;
        `KubeError` (verb ``get``, ``doing``) for any other failure."""
        try:
            return await self._send(doing, "GET", path, None)
        except KubeError as e:
            if e.not_found:
                return None
            raise

    async def create(self, path: str, body: Mapping[str, Any], doing: str) -> Obj:
        """POST ``body`` to the collection at ``path`` (`object_path` without a name);
        the object as created. `KubeError` (verb ``create``) on failure, ``conflict``
        when it exists already."""
        return await self._send(doing, "POST", path, body)

    async def patch(
        self,
        path: str,
        patch: Any,
        doing: str,
        content_type: str = "application/merge-patch+json",
    ) -> Obj:
        """PATCH the object at ``path`` with ``patch`` (a JSON merge patch by default;
        `JSON_PATCH` or `STRATEGIC_MERGE_PATCH` as ``content_type``); the object as
        patched. `KubeError` (verb ``patch``) on failure."""
        return await self._send(doing, "PATCH", path, patch, content_type)

    async def replace(self, path: str, body: Mapping[str, Any], doing: str) -> Obj:
        """PUT ``body`` at ``path``: with its ``metadata.resourceVersion`` the API server
        refuses it (409 ``conflict``) when anyone wrote the object since. `KubeError`
        (verb ``update``) on failure."""
        return await self._send(doing, "PUT", path, body)

    async def serves(self, resource: Resource) -> bool:
        """Whether the API server serves ``resource`` (its group/version's discovery
        document lists it): False on 404, `KubeError` on any other failure."""
        path = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
        try:
            data = await self._call(
                "get",
                f"discovering {path}",
                self.api_client.call_api,
                path,
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
        except KubeError as e:
            if e.not_found:
                return False
            raise
        return any(
            isinstance(r, Mapping) and r.get("name") == resource.plural
            for r in data.get("resources") or ()
        )

    def _list_fn(self, resource: Resource, namespace: str | None) -> tuple[Any, tuple[Any, ...]]:
        if resource.group:
            return self.custom.list_cluster_custom_object, (
                resource.group,
                resource.version,
                resource.plural,
            )
        if resource == NAMESPACES:
            return self.core.list_namespace, ()
        if resource == NODES:
            return self.core.list_node, ()
        kind = {"pods": "pod", "events": "event"}[resource.plural]
        if namespace:
            return getattr(self.core, f"list_namespaced_{kind}"), (namespace,)
        return getattr(self.core, f"list_{kind}_for_all_namespaces"), ()

    @staticmethod
    def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
        out = {}
        if label_selector:
            out["label_selector"] = label_selector
        if field_selector:
            out["field_selector"] = field_selector
        return out

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        keep: Callable[[Obj], Obj] | None = None,
    ) -> tuple[list[Obj], str]:
        """All matching objects and the list's resourceVersion.

        Read in pages of ``page_size`` (``limit``/``continue``, as client-go's reflector
        lists, 500 by default), each item passed through ``keep`` as its page arrives, so
        a large collection is never held decoded in full at once. The resourceVersion is
        the first page's: every page is served from that snapshot (k8s.io/apiserver
        ``pkg/storage`` continue tokens), and a watch from it sees every later change."""
        fn, args = self._list_fn(resource, namespace)
        items: list[Obj] = []
        version = ""
        token: str | None = None
        while True:
            page = {"limit": page_size, **({"_continue": token} if token else {})}
            data = await self._call(
                "list",
                f"listing {resource.plural}",
                fn,
                *args,
                **self._selectors(label_selector, field_selector),
                **page,
            )
            for item in data.get("items") or []:
                if isinstance(item, dict):
                    items.append(keep(item) if keep is not None else item)
            meta = data.get("metadata") or {}
            version = version or str(meta.get("resourceVersion", ""))
            token = meta.get("continue") or None
            if token is None:
                return items, version

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Yield ``(type, object)`` from ``resource_version`` on: ADDED, MODIFIED,
        DELETED and BOOKMARK (whose object carries only ``metadata.resourceVersion``).
        Ends when the server closes the stream after ``timeout_seconds``. Raises
        `KubeError` (``gone`` when the resourceVersion is too old: relist)."""
        fn, args = self._list_fn(resource, namespace)
        answers: list[Any] = []

        @functools.wraps(fn)
        async def call(*a: Any, **kw: Any) -> Any:
            answer = await fn(*a, **kw)
            answers.append(answer)
            return answer

        async def fail_on_error_answer(first: str) -> None:
            # kubernetes_asyncio's Watch never looks at the HTTP status: it streams the
            # body of an error answer (a 429's plain text, a 500's Status) as if it were
            # events, and an empty one as a watch that ended.
            if answers and answers[-1].status >= 400:
                answer = answers[-1]
                rest = await answer.read() if not answer.closed else b""
                await _read(_Replayed(answer, first.encode() + rest), doing, "watch")

        # Lines as they come ("str"), decoded once here: the "object" mode decodes each
        # event, encodes it again and decodes that copy (kubernetes_asyncio
        # Watch.unmarshal_event), which doubled the cost of every event.
        stream = self._idle_watches.pop() if self._idle_watches else watch.Watch(return_type="str")
        doing = f"watching {resource.plural} from resourceVersion {resource_version}"
        try:
            with self._counted():
                try:
                    async with stream.stream(
                        call,
                        *args,
                        resource_version=resource_version,
                        timeout_seconds=timeout_seconds,
                        allow_watch_bookmarks=True,
                        **self._selectors(label_selector, field_selector),
                    ) as events:
                        async for line in events:
                            await fail_on_error_answer(line)
                            try:
                                event = orjson.loads(line)
                            except ValueError as e:
                                raise KubeError(
                                    doing, 0, "MalformedEvent", str(line)[:200], verb="watch"
                                ) from e
                            obj = event.get("object") if isinstance(event, dict) else None
                            if not isinstance(obj, dict):
                                continue
                            kind = str(event.get("type", ""))
                            if kind == "ERROR":  # a Status, e.g. 410 Expired: the watch is over
                                raise KubeError(
                                    doing,
                                    int(obj.get("code") or 0),
                                    str(obj.get("reason", "")),
                                    str(obj.get("message", "")),
                                    verb="watch",
                                )
                            yield kind, obj
                        await fail_on_error_answer("")
                except ApiException as e:
                    raise KubeError(
                        doing,
                        e.status or 0,
                        str(e.reason),
                        str(e.body or ""),
                        retry_after=retry_after_seconds(e.headers),
                        verb="watch",
                    ) from e
                except (TimeoutError, aiohttp.ClientError, OSError) as e:
                    raise KubeError(doing, 0, type(e).__name__, str(e), verb="watch") from e
        finally:
            if stream.resp is None:  # closed cleanly: nothing of this stream is left in it
                self._idle_watches.append(stream)

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The pod as the API server has it now, or None when it does not exist."""
        return await self.get(
            _core_path("pods", namespace, name), f"reading pod {namespace}/{name}"
        )

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create the pod ``body`` in ``namespace``; the pod as created."""
        meta = body.get("metadata", {})
        name = meta.get("name") or f"{meta.get('generateName', '')}*"
        return await self._send(
            f"creating pod {namespace}/{name}", "POST", _core_path("pods", namespace), body
        )

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a pod only if it still has ``uid`` (a precondition the API server
        enforces). False when it is already gone or is another pod by that name now."""
        try:
            await self._call(
                "delete",
                f"deleting pod {namespace}/{name}",
                self.core.delete_namespaced_pod,
                name,
                namespace,
                body={"preconditions": {"uid": uid}},
            )
        except KubeError as e:
            if e.not_found or e.conflict:
                log.info(
                    "pod %s/%s already gone or replaced (%s); nothing deleted",
                    namespace,
                    name,
                    e.reason,
                )
                return False
            raise
        return True

    async def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> Obj:
        """Strategic-merge ``patch`` into the pod's ``status`` subresource."""
        return await self._send(
            f"patching status of pod {namespace}/{name}",
            "PATCH",
            f"{_core_path('pods', namespace, name)}/status",
            patch,
            STRATEGIC_MERGE_PATCH,
        )

    async def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Obj:
        """Set (or, for None values, remove) annotations with a strategic merge patch."""
        return await self._send(
            f"annotating pod {namespace}/{name}",
            "PATCH",
            _core_path("pods", namespace, name),
            {"metadata": {"annotations": dict(annotations)}},
            STRATEGIC_MERGE_PATCH,
        )

    async def label_node(self, name: str, labels: Mapping[str, str]) -> Obj:
        """Set labels on a Node with a strategic merge patch (other labels untouched)."""
        return await self._call(
            "patch",
            f"labelling node {name}",
            self.core.patch_node,
            name,
            {"metadata": {"labels": dict(labels)}},
        )

    async def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> Obj:
        """Set (or, for None values, remove) annotations on a Node with a strategic
        merge patch."""
        return await self._call(
            "patch",
            f"annotating node {name}",
            self.core.patch_node,
            name,
            {"metadata": {"annotations": dict(annotations)}},
        )

    async def annotate_nodeclaim(self, name: str, annotations: Mapping[str, str | None]) -> Obj:
        """Set (or, for None values, remove) annotations on a NodeClaim with a JSON merge
        patch (RFC 7386; custom resources take no strategic merge patch)."""
        return await self._call(
            "patch",
            f"annotating nodeclaim {name}",
            self.custom.patch_cluster_custom_object,
            NODECLAIMS.group,
            NODECLAIMS.version,
            NODECLAIMS.plural,
            name,
            {"metadata": {"annotations": dict(annotations)}},
            _content_type="application/merge-patch+json",
        )

    async def delete_nodeclaim(self, name: str, uid: str | None = None) -> bool:
        """Delete a NodeClaim (Karpenter then terminates its instance), guarded by ``uid``
        when given. False when it is already gone or replaced."""
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            await self._call(
                "delete",
                f"deleting nodeclaim {name}",
                self.custom.delete_cluster_custom_object,
                NODECLAIMS.group,
                NODECLAIMS.version,
                NODECLAIMS.plural,
                name,
                **({"body": body} if body else {}),
            )
        except KubeError as e:
            if e.not_found or e.conflict:
                return False
            raise
        return True

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Record the core/v1 Event ``body`` in ``namespace``."""
        await self._send(
            f"recording event in {namespace}",
            "POST",
            _core_path("events", namespace),
            body,
        )

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The ``coordination.k8s.io/v1`` Lease, or None when it does not exist."""
        path = object_path("coordination.k8s.io/v1", "leases", name, namespace)
        return await self.get(path, f"reading lease {namespace}/{name}")

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create a Lease; `KubeError` ``conflict`` (409 AlreadyExists) when another
        replica created it first."""
        name = body.get("metadata", {}).get("name", "")
        return await self._call(
            "create",
            f"creating lease {namespace}/{name}",
            self.coordination.create_namespaced_lease,
            namespace,
            dict(body),
        )

    async def update_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Replace a Lease (PUT). ``body`` carries the ``metadata.resourceVersion`` it was
        read at, so the API server refuses it with 409 Conflict when anyone wrote the
        Lease since (optimistic concurrency, as client-go's ``LeaseLock.Update``)."""
        name = body.get("metadata", {}).get("name", "")
        return await self._call(
            "update",
            f"updating lease {namespace}/{name}",
            self.coordination.replace_namespaced_lease,
            name,
            namespace,
            dict(body),
        )
