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
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client

from certs.rotation import CA_KEY_FILE, CertSettings, Renewal, parse_secret, renew
from certs.tls import CA_CERT_FILE, CERT_FILE, KEY_FILE
from intent.kube import JSON_PATCH, Kube, KubeError, object_path
from intent.retry import retrying

__all__ = ["ATTEMPTS", "CertsError", "Outcome", "reconcile_secret"]

#: Reads-decide-writes rounds before giving up on conflicting writers.
ATTEMPTS: Final = 5
_KEYS: Final = (CA_CERT_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE)

Obj = dict[str, Any]
ADMISSION: Final = "admissionregistration.k8s.io/v1"


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


def _error(doing: str, e: KubeError) -> CertsError:
    if e.status == 0:  # no answer: the client exception's class and text
        return CertsError(f"{doing}: {e.reason}: {e.detail}")
    return CertsError(f"{doing}: {e.status} {e.detail or e.reason}")


async def _read(kube: Kube, path: str, doing: str) -> Obj | None:
    """The object at ``path`` or None (404), a failure that may pass (no answer, 429,
    5xx) tried again by the adapter's policy (`intent.retry.retrying`)."""
    async for attempt in retrying():
        with attempt:
            return await kube.get(path, doing)
    raise AssertionError("unreachable: retrying raises or returns")


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
    api: Kube | client.ApiClient,
    *,
    secret: str,
    configuration: str,
    settings: CertSettings,
    now: datetime.datetime | None = None,
) -> Outcome:
    """Bring Secret ``settings.namespace/secret`` and the caBundles of
    MutatingWebhookConfiguration ``configuration`` to what `renew` decides at ``now``
    (default: the real clock). Keys of the Secret other than ``ca.crt``, ``ca.key``,
    ``tls.crt``, ``tls.key`` are kept. ``api``: the API adapter (an ``ApiClient`` is
    used through one, `intent.kube.Kube`; the caller closes it). Reads that fail
    retryably (no answer, 429, 5xx) are tried again (`intent.retry.retrying`).

    Raises:
        CertsError: the configuration does not exist, an API call failed, or writers kept
            conflicting for `ATTEMPTS` rounds.
    """
    kube = api if isinstance(api, Kube) else Kube(api)
    ns = settings.namespace
    mwc_path = object_path(ADMISSION, "mutatingwebhookconfigurations", configuration)
    secret_path = object_path("v1", "secrets", secret, ns)
    for attempt in range(1, ATTEMPTS + 1):
        doing = f"reading MutatingWebhookConfiguration {configuration}"
        try:
            mwc = await _read(kube, mwc_path, doing)
        except KubeError as e:
            raise _error(doing, e) from e
        if mwc is None:
            raise CertsError(
                f"MutatingWebhookConfiguration {configuration} not found "
                "(run gpu-intent certs after it is created, e.g. as a post-install hook)"
            )
        doing = f"reading Secret {ns}/{secret}"
        try:
            current = await _read(kube, secret_path, doing)
        except KubeError as e:
            raise _error(doing, e) from e
        data = dict((current or {}).get("data") or {})
        renewal = renew(parse_secret(data), settings, now or datetime.datetime.now(datetime.UTC))
        bundle_b64 = base64.b64encode(renewal.bundle).decode()
        wanted = renewal.material.secret_data()
        secret_changes = any(data.get(k) != wanted[k] for k in _KEYS)
        patched = 0
        doing = f"writing Secret {ns}/{secret} or {configuration}"
        try:
            if renewal.bundle_grows and (ops := _patch_ops(mwc, bundle_b64)):
                await kube.patch(mwc_path, ops, doing, JSON_PATCH)
                patched = len(ops) // 2
            written = None
            if current is None:
                await kube.create(
                    object_path("v1", "secrets", namespace=ns),
                    _secret_body(secret, ns, wanted),
                    doing,
                )
                written = "created"
            elif secret_changes:
                body = dict(current)
                body["data"] = {**data, **wanted}
                await kube.replace(secret_path, body, doing)
                written = "updated"
            if not renewal.bundle_grows and (ops := _patch_ops(mwc, bundle_b64)):
                await kube.patch(mwc_path, ops, doing, JSON_PATCH)
                patched = len(ops) // 2
        except KubeError as e:
            if e.status in (409, 422) and attempt < ATTEMPTS:
                continue  # another writer changed the Secret or the configuration
            raise _error(doing, e) from e
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
