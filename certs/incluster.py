"""``gpu-intent certs --secret``: keep the webhook's Secret and caBundle right, in a cluster.

The I/O around `certs.rotation.renew`: read the MutatingWebhookConfiguration and the
Secret, decide, then write in the order that keeps every call trusted (the module doc of
`certs.rotation`):

1. if the bundle gains a CA, patch every ``webhooks[*].clientConfig.caBundle`` first;
2. create the Secret, or update it with its ``resourceVersion`` (optimistic concurrency:
   a 409 Conflict means another writer won; read both again and decide again, up to
   `ATTEMPTS` times);
3. patch the caBundles if they still differ (a CA left the bundle).

The patch is a JSON patch (RFC 6902) that ``test``s each webhook's name at its index
before setting its caBundle, so a configuration changed in between fails with 422 and is
read again, never patched at the wrong index. Nothing is written when nothing is due, so
running it again changes nothing.
"""

from __future__ import annotations

import base64
import datetime
import json
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs.rotation import CA_KEY_FILE, CertSettings, Renewal, parse_secret, renew
from certs.tls import CA_CERT_FILE, CERT_FILE, KEY_FILE

__all__ = ["ATTEMPTS", "CertsError", "Outcome", "reconcile_secret"]

#: Reads-decide-writes rounds before giving up on conflicting writers.
ATTEMPTS: Final = 5
_KEYS: Final = (CA_CERT_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE)

Obj = dict[str, Any]


class CertsError(Exception):
    """The Secret or the webhook configuration could not be read or written; the message
    says which object and what the API answered."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `reconcile_secret` did.

    Attributes:
        renewal: the decision (`Renewal.actions` empty when nothing was due).
        secret_written: ``created`` / ``updated`` / None (unchanged).
        webhooks_patched: caBundles changed in the webhook configuration (0: none).
        attempts: read-decide-write rounds taken (1 without conflicts).
    """

    renewal: Renewal
    secret_written: str | None
    webhooks_patched: int
    attempts: int

    def summary(self, secret: str, namespace: str, configuration: str) -> str:
        """One line for a person."""
        m = self.renewal.material
        cas = len(m.cas)
        state = (
            f"serving certificate valid until {m.cert.not_valid_after_utc:%Y-%m-%d}, "
            f"CA until {m.cas[0].not_valid_after_utc:%Y-%m-%d}, "
            f"{cas} CA{'s' if cas > 1 else ''} in the caBundle"
        )
        if not self.renewal.actions and not self.secret_written and not self.webhooks_patched:
            return (
                f"nothing due for Secret {namespace}/{secret} and MutatingWebhookConfiguration"
                f" {configuration} ({state})"
            )
        done = list(self.renewal.actions)
        if self.secret_written:
            done.append(f"{self.secret_written} Secret {namespace}/{secret}")
        if self.webhooks_patched:
            done.append(
                f"patched {self.webhooks_patched} caBundle(s) of MutatingWebhookConfiguration"
                f" {configuration}"
            )
        return f"{'; '.join(done)} ({state})"


def _error(doing: str, e: ApiException | aiohttp.ClientError | OSError) -> CertsError:
    if isinstance(e, ApiException):
        try:
            body = e.body.decode(errors="replace") if isinstance(e.body, bytes) else e.body
            message = json.loads(body or "{}").get("message") or e.reason
        except (ValueError, AttributeError):
            message = e.reason
        return CertsError(f"{doing}: {e.status} {message}")
    return CertsError(f"{doing}: {type(e).__name__}: {e}")


async def _json(response: aiohttp.ClientResponse) -> Obj:
    """The JSON object of a response read with ``_preload_content=False`` (which does not
    raise on HTTP errors); raises `ApiException` for a status >= 400."""
    try:
        raw = await response.read()
    finally:
        response.release()
    if response.status >= 400:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = raw
        raise error
    body: Obj = json.loads(raw)
    return body


def _patch_ops(configuration: Obj, bundle_b64: str) -> list[Obj]:
    ops: list[Obj] = []
    for i, hook in enumerate(configuration.get("webhooks") or []):
        if (hook.get("clientConfig") or {}).get("caBundle") == bundle_b64:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
        ops.append(
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle_b64}
        )
    return ops


async def reconcile_secret(
    api: client.ApiClient,
    *,
    secret: str,
    configuration: str,
    settings: CertSettings,
    now: datetime.datetime | None = None,
) -> Outcome:
    """Bring Secret ``settings.namespace/secret`` and the caBundles of
    MutatingWebhookConfiguration ``configuration`` to what `renew` decides at ``now``
    (default: the real clock). Keys of the Secret other than ``ca.crt``, ``ca.key``,
    ``tls.crt``, ``tls.key`` are kept.

    Raises:
        CertsError: the configuration does not exist, an API call failed, or writers kept
            conflicting for `ATTEMPTS` rounds.
    """
    # Any: the generated stubs know models, not the raw responses _preload_content=False gives
    core: Any = client.CoreV1Api(api)
    admission: Any = client.AdmissionregistrationV1Api(api)
    ns = settings.namespace
    for attempt in range(1, ATTEMPTS + 1):
        try:
            mwc = await _json(
                await admission.read_mutating_webhook_configuration(
                    configuration, _preload_content=False
                )
            )
        except ApiException as e:
            if e.status == 404:
                raise CertsError(
                    f"MutatingWebhookConfiguration {configuration} not found "
                    "(run gpu-intent certs after it is created, e.g. as a post-install hook)"
                ) from None
            raise _error(f"reading MutatingWebhookConfiguration {configuration}", e) from e
        except (aiohttp.ClientError, OSError) as e:
            raise _error(f"reading MutatingWebhookConfiguration {configuration}", e) from e
        try:
            current: Obj | None = await _json(
                await core.read_namespaced_secret(secret, ns, _preload_content=False)
            )
        except ApiException as e:
            if e.status != 404:
                raise _error(f"reading Secret {ns}/{secret}", e) from e
            current = None
        except (aiohttp.ClientError, OSError) as e:
            raise _error(f"reading Secret {ns}/{secret}", e) from e
        data = dict((current or {}).get("data") or {})
        renewal = renew(parse_secret(data), settings, now or datetime.datetime.now(datetime.UTC))
        bundle_b64 = base64.b64encode(renewal.bundle).decode()
        wanted = renewal.material.secret_data()
        secret_changes = any(data.get(k) != wanted[k] for k in _KEYS)
        patched = 0
        try:
            if renewal.bundle_grows and (ops := _patch_ops(mwc, bundle_b64)):
                await admission.patch_mutating_webhook_configuration(configuration, ops)
                patched = len(ops) // 2
            written = None
            if current is None:
                await core.create_namespaced_secret(ns, _secret_body(secret, ns, wanted))
                written = "created"
            elif secret_changes:
                body = dict(current)
                body["data"] = {**data, **wanted}
                await core.replace_namespaced_secret(secret, ns, body)
                written = "updated"
            if not renewal.bundle_grows and (ops := _patch_ops(mwc, bundle_b64)):
                await admission.patch_mutating_webhook_configuration(configuration, ops)
                patched = len(ops) // 2
        except ApiException as e:
            if e.status in (409, 422) and attempt < ATTEMPTS:
                continue  # another writer changed the Secret or the configuration
            raise _error(f"writing Secret {ns}/{secret} or {configuration}", e) from e
        except (aiohttp.ClientError, OSError) as e:
            raise _error(f"writing Secret {ns}/{secret} or {configuration}", e) from e
        return Outcome(renewal, written, patched, attempt)
    raise CertsError(f"Secret {ns}/{secret}: gave up after {ATTEMPTS} conflicting writes")


def _secret_body(name: str, namespace: str, data: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpu-intent-certs"},
        },
        "type": "kubernetes.io/tls",
        "data": data,
    }
