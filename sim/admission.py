"""Mutating admission webhooks, called the way kube-apiserver calls them.

`Admission.admit` runs inside the simulated apiserver's create handler, after the built-in
defaulting and admission plugins (`sim.defaults`) and before validation and
storage. Sources: k8s.io/apiserver ``pkg/admission/plugin/webhook/`` (``mutating/
dispatcher.go``, ``predicates/rules``, ``predicates/namespace``, ``predicates/object``,
``request/admissionreview.go``, ``errors/statuserror.go``), ``pkg/util/webhook``, and
kubernetes ``pkg/apis/admissionregistration/validation``; REFERENCE.md section 4.

- Configurations are read from the store on every request, sorted by name; their webhooks
  run in order, one after another. A webhook is called when one of its ``rules`` matches
  (operation or ``*``; apiGroups/apiVersions/resources or ``*``; ``pods/*`` and ``*/*``
  forms; ``scope``), its ``namespaceSelector`` matches the namespace's labels (plus the
  always-present ``kubernetes.io/metadata.name``) and its ``objectSelector`` the object's.
- The request is an ``admission.k8s.io/v1`` AdmissionReview with exactly the keys of
  tests/fixtures/admission-reviews (``name`` only when the object has one), POSTed to
  ``clientConfig.url`` plus ``?timeout=<timeoutSeconds>s`` over TLS trusting only the
  ``caBundle``.
- Outcomes: ``allowed: false`` rejects with the webhook's status code (at least 400) and
  ``admission webhook "<name>" denied the request: <message>``; a ``JSONPatch`` is applied
  and a patch that does not apply rejects with 500 whatever the failurePolicy; a failed
  call (connection, TLS, timeout, non-200, undecodable or mismatched response) is logged
  and skipped under ``failurePolicy: Ignore`` and rejects with 500 ``Internal error
  occurred: failed calling webhook "<name>": ...`` under ``Fail`` (the API default).
- ``response.warnings`` are returned for the ``Warning: 299 - "<text>"`` headers.
- ``reinvocationPolicy: IfNeeded`` webhooks are called once more when a later webhook
  changed the object after their call.

Only CREATE is dispatched (the sim's clients register nothing else); UPDATE, DELETE and
CONNECT are not. ``clientConfig.service`` cannot be reached from the sim: calling it is a
failed call. Every call is recorded in `Admission.calls` (name, latency, outcome).
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import logging
import ssl
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import jsonpatch
import jsonpointer
from yarl import URL

from sim.selectors import label_selector_matcher
from sim.store import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    ApiError,
    BadRequest,
    InternalError,
    NotFound,
    Obj,
    ResourceType,
    Store,
    json_copy,
)
from sim.validation import FieldError

__all__ = [
    "DEFAULT_USER",
    "Admission",
    "AdmissionResult",
    "WebhookCall",
    "default_webhook_configuration",
    "validate_webhook_configuration",
]

log = logging.getLogger(__name__)

#: ``request.userInfo`` of the sim's single (bearer token) user.
DEFAULT_USER: Mapping[str, Any] = {
    "username": "kubernetes-admin",
    "groups": ["system:masters", "system:authenticated"],
}


@dataclass(frozen=True, slots=True)
class WebhookCall:
    """One webhook call: ``outcome`` is ``allowed`` (no patch), ``patched``, ``denied``,
    ``patch-failed``, ``failed-open`` (call failed, Ignore) or ``failed-closed`` (Fail)."""

    webhook: str
    configuration: str
    latency_seconds: float
    outcome: str
    error: str = ""


@dataclass(slots=True)
class AdmissionResult:
    """The admitted object and the warnings the webhooks returned."""

    object: Obj
    warnings: list[str] = field(default_factory=list)


class _CallFailed(Exception):
    """A failed webhook call (``webhookutil.ErrCallingWebhook``)."""


def _status_error(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> ApiError:
    err = ApiError(message, details=details)
    err.code, err.reason = code, reason
    return err


# -- configuration defaults and validation ------------------------------------------


def default_webhook_configuration(config: Obj) -> None:
    """Apply the v1 defaults in place (``SetDefaults_MutatingWebhook``): failurePolicy
    Fail, matchPolicy Equivalent, selectors ``{}``, timeoutSeconds 10, reinvocationPolicy
    Never, rule scope ``*``."""
    for hook in config.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        for key, value in (("failurePolicy", "Fail"), ("matchPolicy", "Equivalent"), ("namespaceSelector", {}),
                           ("objectSelector", {}), ("timeoutSeconds", 10), ("reinvocationPolicy", "Never")):  # fmt: skip
            if hook.get(key) is None:
                hook[key] = copy.deepcopy(value)
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def _validate_url(url: Any, path: str) -> list[FieldError]:
    parts = urlsplit(str(url))
    problems = []
    if parts.scheme != "https":
        problems.append("'https' is the only allowed URL scheme")
    if not parts.hostname:
        problems.append("host must be specified")
    if parts.username or parts.password:
        problems.append("user information is not permitted in the URL")
    if parts.fragment:
        problems.append("fragments are not permitted in the URL")
    if parts.query:
        problems.append("query parameters are not permitted in the URL")
    return [FieldError.invalid(path, url, p) for p in problems]


def validate_webhook_configuration(config: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateMutatingWebhookConfiguration`` (the rules listed in the module doc)."""
    errors: list[FieldError] = []
    names: set[str] = set()
    for i, hook in enumerate(config.get("webhooks") or []):
        p = f"webhooks[{i}]"
        name = hook.get("name")
        if not name:
            errors.append(FieldError.required(f"{p}.name"))
        elif name in names:
            errors.append(FieldError.duplicate(f"{p}.name", name))
        elif len(str(name).split(".")) < 3:
            errors.append(
                FieldError.invalid(
                    f"{p}.name",
                    name,
                    "should be a domain with at least three segments separated by dots",
                )
            )
        names.add(str(name))
        versions = hook.get("admissionReviewVersions") or []
        if not versions:
            errors.append(
                FieldError.required(
                    f"{p}.admissionReviewVersions", "must specify one of v1, v1beta1"
                )
            )
        elif not {"v1", "v1beta1"} & set(versions):
            errors.append(
                FieldError.invalid(
                    f"{p}.admissionReviewVersions",
                    versions,
                    "must include at least one of v1, v1beta1",
                )
            )
        side_effects = hook.get("sideEffects")
        if side_effects is None:
            errors.append(FieldError.required(f"{p}.sideEffects"))
        elif side_effects not in ("None", "NoneOnDryRun"):
            errors.append(
                FieldError.not_supported(f"{p}.sideEffects", side_effects, ["None", "NoneOnDryRun"])
            )
        client = hook.get("clientConfig") or {}
        if bool(client.get("url")) == bool(client.get("service")):
            errors.append(
                FieldError.required(
                    f"{p}.clientConfig", "exactly one of url or service is required"
                )
            )
        elif client.get("url"):
            errors += _validate_url(client["url"], f"{p}.clientConfig.url")
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and not (isinstance(timeout, int) and 1 <= timeout <= 30):
            errors.append(
                FieldError.invalid(
                    f"{p}.timeoutSeconds",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            )
        for key, allowed in (("failurePolicy", ["Fail", "Ignore"]), ("matchPolicy", ["Exact", "Equivalent"]),
                             ("reinvocationPolicy", ["Never", "IfNeeded"])):  # fmt: skip
            if hook.get(key) is not None and hook[key] not in allowed:
                errors.append(FieldError.not_supported(f"{p}.{key}", hook[key], allowed))
        for j, rule in enumerate(hook.get("rules") or []):
            for op in rule.get("operations") or []:
                if op not in ("*", "CREATE", "UPDATE", "DELETE", "CONNECT"):
                    errors.append(
                        FieldError.not_supported(
                            f"{p}.rules[{j}].operations",
                            op,
                            ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                        )
                    )
        for key in ("namespaceSelector", "objectSelector"):
            try:
                label_selector_matcher(hook.get(key))
            except BadRequest as e:
                errors.append(FieldError.invalid(f"{p}.{key}", hook.get(key), e.message))
    return errors


# -- matching -----------------------------------------------------------------------


def _rule_matches(
    rule: Mapping[str, Any], rt: ResourceType, operation: str, subresource: str
) -> bool:
    def has(values: Any, value: str) -> bool:
        return "*" in (values or []) or value in (values or [])

    if not (has(rule.get("operations"), operation) and has(rule.get("apiGroups"), rt.group)
            and has(rule.get("apiVersions"), rt.version)):  # fmt: skip
        return False
    scope = rule.get("scope", "*")
    if scope != "*" and (scope == "Namespaced") != rt.namespaced:
        return False
    for res in rule.get("resources") or []:
        name, _, sub = str(res).partition("/")
        if name in ("*", rt.plural) and sub in ("*", subresource):
            return True
    return False


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


# -- the dispatcher -----------------------------------------------------------------


class Admission:
    """Mutating admission webhooks over the configurations in ``store``.

    Args:
        store: where MutatingWebhookConfigurations and Namespaces are read.
        user: ``request.userInfo`` sent to webhooks.
        max_calls: how many `WebhookCall` records `calls` keeps.
    """

    def __init__(
        self, store: Store, *, user: Mapping[str, Any] = DEFAULT_USER, max_calls: int = 10_000
    ) -> None:
        self._store = store
        self._user = dict(user)
        self._calls: deque[WebhookCall] = deque(maxlen=max_calls)
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    @property
    def calls(self) -> list[WebhookCall]:
        """Every webhook call so far, oldest first (bounded by ``max_calls``)."""
        return list(self._calls)

    async def close(self) -> None:
        """Close the HTTP client (call at shutdown)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _webhooks(
        self, rt: ResourceType, operation: str, obj: Mapping[str, Any], namespace: str | None
    ) -> list[tuple[str, Obj]]:
        configs, _ = self._store.list(MUTATING_WEBHOOK_CONFIGURATIONS)
        ns_labels: dict[str, str] | None = None
        selected = []
        for config in configs:
            default_webhook_configuration(config)
            for hook in config.get("webhooks") or []:
                if not any(_rule_matches(r, rt, operation, "") for r in hook.get("rules") or []):
                    continue
                if rt.namespaced and namespace:
                    if ns_labels is None:
                        try:
                            ns_labels = _labels(self._store.get(NAMESPACES, None, namespace))
                        except NotFound:
                            ns_labels = {}
                        ns_labels["kubernetes.io/metadata.name"] = namespace
                    if not label_selector_matcher(hook.get("namespaceSelector"))(ns_labels):
                        continue
                if not label_selector_matcher(hook.get("objectSelector"))(_labels(obj)):
                    continue
                selected.append((str(config["metadata"]["name"]), hook))
        return selected

    async def admit(self, rt: ResourceType, obj: Obj, *, namespace: str | None, dry_run: bool,
                    options: Mapping[str, Any], operation: str = "CREATE") -> AdmissionResult:  # fmt: skip
        """Run the matching webhooks on ``obj`` (not modified) and return the admitted
        object. Raises `ApiError`: the webhook's denial, or 500 (patch failed, or a call
        failed under failurePolicy Fail)."""
        result = AdmissionResult(json_copy(obj))
        seen_by: dict[int, Obj] = {}
        hooks = self._webhooks(rt, operation, obj, namespace)
        for index, (config_name, hook) in enumerate(hooks):
            await self._call(rt, config_name, hook, result, namespace, dry_run, options, operation)
            seen_by[index] = result.object
        for index, (config_name, hook) in enumerate(hooks):
            if hook.get("reinvocationPolicy") == "IfNeeded" and seen_by[index] != result.object:
                await self._call(
                    rt, config_name, hook, result, namespace, dry_run, options, operation
                )
        return result

    def _review(self, rt: ResourceType, obj: Obj, namespace: str | None, dry_run: bool,
                options: Mapping[str, Any], operation: str) -> Obj:  # fmt: skip
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        gvr = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        request: Obj = {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
        }
        name = (obj.get("metadata") or {}).get("name")
        if name:
            request["name"] = name
        if rt.namespaced and namespace:
            request["namespace"] = namespace
        request.update(
            operation=operation,
            userInfo=self._user,
            object=obj,
            oldObject=None,
            dryRun=dry_run,
            options=dict(options),
        )
        return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}

    async def _call(self, rt: ResourceType, config_name: str, hook: Obj, result: AdmissionResult,
                    namespace: str | None, dry_run: bool, options: Mapping[str, Any], operation: str) -> None:  # fmt: skip
        name = str(hook.get("name"))
        review = self._review(rt, result.object, namespace, dry_run, options, operation)
        started = time.perf_counter()

        def record(outcome: str, error: str = "") -> None:
            self._calls.append(
                WebhookCall(name, config_name, time.perf_counter() - started, outcome, error)
            )

        try:
            response = await self._post(hook, review)
        except _CallFailed as e:
            message = f'failed calling webhook "{name}": {e}'
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.warning("Failed calling webhook, failing open %s: %s", name, message)
                record("failed-open", message)
                return
            log.warning("Failed calling webhook, failing closed %s: %s", name, message)
            record("failed-closed", message)
            raise InternalError(
                f"Internal error occurred: {message}", details={"causes": [{"message": message}]}
            ) from None
        result.warnings += [str(w) for w in response.get("warnings") or []]
        if not response.get("allowed"):
            record("denied")
            raise self._denial(name, response.get("status"))
        patch = response.get("patch")
        if not patch:
            record("allowed")
            return
        try:
            ops = json.loads(base64.b64decode(patch, validate=True))
            result.object = jsonpatch.JsonPatch(ops).apply(result.object)
            if not isinstance(result.object, dict):
                raise TypeError("the patched object is not a JSON object")
        except (
            ValueError,
            binascii.Error,
            TypeError,
            KeyError,
            jsonpatch.JsonPatchException,
            jsonpointer.JsonPointerException,
        ) as e:
            record("patch-failed", str(e))
            raise InternalError(
                f"Internal error occurred: {e}", details={"causes": [{"message": str(e)}]}
            ) from None
        record("patched")

    @staticmethod
    def _denial(name: str, status: Any) -> ApiError:
        """``webhookerrors.ToStatusErr``: the webhook's Status, code at least 400."""
        status = status if isinstance(status, dict) else {}
        denied = f'admission webhook "{name}" denied the request'
        message = status.get("message") or status.get("reason")
        code = status.get("code") if isinstance(status.get("code"), int) else 400
        return _status_error(max(code, 400), str(status.get("reason") or ""),
                             f"{denied}: {message}" if message else f"{denied} without explanation",
                             status.get("details"))  # fmt: skip

    def _context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        if key not in self._contexts:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle, validate=True).decode()
                    context = ssl.create_default_context(cadata=pem)
                except (ValueError, binascii.Error, ssl.SSLError) as e:
                    raise _CallFailed(
                        f"failed to call webhook: unable to load root certificates: {e}"
                    ) from None
            else:
                context = ssl.create_default_context()
            self._contexts[key] = context
        return self._contexts[key]

    async def _post(self, hook: Obj, review: Obj) -> Obj:
        """POST the review; the ``response`` of a well-formed answer. Raises `_CallFailed`."""
        client = hook.get("clientConfig") or {}
        if not client.get("url"):
            raise _CallFailed(
                "failed to call webhook: service references are not reachable from the simulated apiserver"
            )
        timeout = int(hook.get("timeoutSeconds") or 10)
        url = URL(str(client["url"])).with_query(timeout=f"{timeout}s")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                url, json=review, ssl=self._context(client.get("caBundle")),
                timeout=aiohttp.ClientTimeout(total=timeout), headers={"User-Agent": "kube-apiserver-admission"},
            ) as resp:  # fmt: skip
                body = await resp.read()
                if resp.status != 200:
                    raise _CallFailed(
                        f"failed to call webhook: the server responded with the status code {resp.status} but did not return more information"
                    )
        except TimeoutError:
            raise _CallFailed(
                f'failed to call webhook: Post "{url}": context deadline exceeded'
            ) from None
        except (aiohttp.ClientError, OSError) as e:
            raise _CallFailed(f'failed to call webhook: Post "{url}": {e}') from None
        return _verify(body, review["request"]["uid"])


def _verify(body: bytes, uid: str) -> Obj:
    """``VerifyAdmissionResponse`` for an ``admission.k8s.io/v1`` request."""
    try:
        answer = json.loads(body)
    except ValueError as e:
        raise _CallFailed(f"received invalid webhook response: {e}") from None
    if (
        not isinstance(answer, dict)
        or answer.get("apiVersion") != "admission.k8s.io/v1"
        or answer.get("kind") != "AdmissionReview"
    ):
        got = (
            f"{answer.get('apiVersion')}, Kind={answer.get('kind')}"
            if isinstance(answer, dict)
            else type(answer).__name__
        )
        raise _CallFailed(
            f"received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {got}"
        )
    response = answer.get("response")
    if not isinstance(response, dict):
        raise _CallFailed("received invalid webhook response: webhook response was absent")
    if response.get("uid") != uid:
        raise _CallFailed(
            f'received invalid webhook response: expected response.uid="{uid}", got "{response.get("uid")}"'
        )
    if response.get("patch") and not response.get("patchType"):
        raise _CallFailed(
            "received invalid webhook response: webhook returned response.patch but not response.patchType"
        )
    if response.get("patchType") not in (None, "", "JSONPatch"):
        raise _CallFailed(
            f'received invalid webhook response: webhook returned invalid response.patchType of "{response.get("patchType")}"'
        )
    return response
