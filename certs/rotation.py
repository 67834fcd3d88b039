"""What ``gpu-intent certs`` decides for the webhook's Secret: create, renew, rotate, drop.

Pure apart from the randomness and clock of new keys and certificates (`certs.tls`): `renew`
takes the material a Secret holds (or None) and returns the material to store, the CA
bundle to publish and what changed; `certs.incluster` reads and writes the objects.

The Secret holds four PEM keys (a ``kubernetes.io/tls`` Secret plus the CA, the layout
cert-manager writes, REFERENCE §3): ``tls.crt`` and ``tls.key`` (the serving pair the
webhook mounts), ``ca.key`` (the signing CA's key) and ``ca.crt``: the *trust bundle*,
the signing CA first, then older CAs still trusted during a rotation. The bundle is what
every ``webhooks[*].clientConfig.caBundle`` of the MutatingWebhookConfiguration holds.

A rotation without downtime, the way kube-apiserver and kubelet behave: the apiserver
trusts exactly the caBundle (``k8s.io/apiserver/pkg/util/webhook``, it rebuilds the
client when the configuration changes), and a mounted Secret changes in the webhook's
pods only at the kubelet's next sync, up to its sync period plus the Secret cache TTL
later (about a minute each by default; kubernetes.io/docs/concepts/configuration/secret,
"Mounted Secrets are updated automatically"). So:

1. a new CA is published in the bundle *with* the old one before any pod can serve a
   certificate it signed (`Renewal.bundle_grows`: the caller patches the webhook
   configuration before writing the Secret);
2. the old CA stays in the bundle while the Secret's serving certificate is signed by it,
   and for `PROPAGATION_GRACE` after the serving certificate it signed was replaced, so
   every pod has the new pair before the old CA goes; an expired CA goes at once.

Validity: serving certificates ``days`` (default 90, cert-manager's default duration),
renewed ``renew_before_days`` before they expire (default 30, cert-manager's 2/3 point);
the CA ``ca_days`` (default 1825), rotated once it would no longer outlive a fresh serving
certificate plus its renewal window, so a serving certificate never outlives its CA.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs.tls import CA_CERT_FILE, CERT_FILE, CLOCK_SKEW, KEY_FILE, generate_ca, issue_serving_cert

__all__ = [
    "CA_KEY_FILE",
    "PROPAGATION_GRACE",
    "CertSettings",
    "ParsedSecret",
    "Renewal",
    "TLSMaterial",
    "bundle_pem",
    "parse_bundle",
    "parse_secret",
    "renew",
]

#: The Secret key of the signing CA's private key (PKCS#8 PEM), as cert-manager's CA issuer.
CA_KEY_FILE: Final = "ca.key"
#: How long an old CA stays trusted after the serving certificate it signed was replaced
#: in the Secret: the kubelet's sync period (1 min) plus its Secret cache TTL (1 min, the
#: ``configMapAndSecretChangeDetectionStrategy: Watch`` default updates sooner), with room.
PROPAGATION_GRACE: Final = datetime.timedelta(minutes=10)

_PEM = serialization.Encoding.PEM


@dataclass(frozen=True, slots=True)
class CertSettings:
    """What the serving certificate must name and how long things live.

    Attributes:
        service: the webhook's Service name; namespace: its namespace. The certificate's
            DNS names are ``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.cluster.local``.
        days: serving certificate validity, days (> 0).
        ca_days: CA validity, days; must exceed ``days + renew_before_days``.
        renew_before_days: renew a serving certificate this many days before it expires
            (0 <= renew_before_days < days).
    """

    service: str
    namespace: str
    days: int = 90
    ca_days: int = 1825
    renew_before_days: int = 30

    def __post_init__(self) -> None:
        if not self.service or not self.namespace:
            raise ValueError("the service name and namespace must not be empty")
        if self.days <= 0 or self.ca_days <= 0 or self.renew_before_days < 0:
            raise ValueError("days and ca-days must be positive, renew-before-days >= 0")
        if self.renew_before_days >= self.days:
            raise ValueError(
                f"renew-before-days ({self.renew_before_days}) must be less than days ({self.days})"
            )
        if self.ca_days <= self.days + self.renew_before_days:
            raise ValueError(
                f"ca-days ({self.ca_days}) must exceed days + renew-before-days "
                f"({self.days + self.renew_before_days}), or the CA would be rotated at every run"
            )

    @property
    def dns_names(self) -> list[str]:
        """The Service's names the apiserver may dial (it uses ``svc.ns.svc``)."""
        s, ns = self.service, self.namespace
        return [s, f"{s}.{ns}", f"{s}.{ns}.svc", f"{s}.{ns}.svc.cluster.local"]


@dataclass(frozen=True, slots=True)
class TLSMaterial:
    """The contents of the Secret, parsed.

    Attributes:
        cas: the trust bundle, signing CA first, then older CAs still trusted.
        ca_key: the signing CA's key.
        cert, key: the serving certificate and its key.
    """

    cas: tuple[x509.Certificate, ...]
    ca_key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data``: key -> base64 of the PEM (``tls.key`` and ``ca.key``
        PKCS#8, unencrypted)."""
        pkcs8 = serialization.PrivateFormat.PKCS8
        none = serialization.NoEncryption()
        raw = {
            CA_CERT_FILE: bundle_pem(self.cas),
            CA_KEY_FILE: self.ca_key.private_bytes(_PEM, pkcs8, none),
            CERT_FILE: self.cert.public_bytes(_PEM),
            KEY_FILE: self.key.private_bytes(_PEM, pkcs8, none),
        }
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}


@dataclass(frozen=True, slots=True)
class Renewal:
    """The outcome of `renew`.

    Attributes:
        material: what the Secret must hold.
        actions: what changed, in words (empty: nothing was due).
        bundle_grows: a CA was added to the bundle: publish the bundle before the Secret.
    """

    material: TLSMaterial
    actions: tuple[str, ...] = field(default=())
    bundle_grows: bool = False

    @property
    def bundle(self) -> bytes:
        """The caBundle to publish: PEM of `TLSMaterial.cas`."""
        return bundle_pem(self.material.cas)


def bundle_pem(cas: Sequence[x509.Certificate]) -> bytes:
    """PEM certificates concatenated, in order."""
    return b"".join(ca.public_bytes(_PEM) for ca in cas)


def parse_bundle(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, in order; [] for no or unreadable data."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _decoded(data: Mapping[str, str], key: str) -> bytes:
    try:
        return base64.b64decode(data.get(key) or "", validate=True)
    except (binascii.Error, ValueError):
        return b""


def _ec_key(pem: bytes) -> ec.EllipticCurvePrivateKey | None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    return cert.public_key() == key.public_key()


@dataclass(frozen=True, slots=True)
class ParsedSecret:
    """What `parse_secret` found usable in a Secret: the bundle (signing CA first when
    ``ca_key`` matches one), and each key or certificate, None when missing or unreadable."""

    cas: list[x509.Certificate]
    ca_key: ec.EllipticCurvePrivateKey | None
    cert: x509.Certificate | None
    key: ec.EllipticCurvePrivateKey | None


def parse_secret(data: Mapping[str, str] | None) -> ParsedSecret:
    """Whatever is usable in a Secret's ``data`` (base64 values); missing or unreadable
    parts are empty. The bundle is reordered so the CA matching ``ca.key`` comes first."""
    data = data or {}
    cas = parse_bundle(_decoded(data, CA_CERT_FILE))
    ca_key = _ec_key(_decoded(data, CA_KEY_FILE))
    certs = parse_bundle(_decoded(data, CERT_FILE))
    key = _ec_key(_decoded(data, KEY_FILE))
    if ca_key is not None:
        signing = [ca for ca in cas if _same_key(ca, ca_key)]
        cas = signing[:1] + [ca for ca in cas if not _same_key(ca, ca_key)]
        if not signing:
            ca_key = None
    return ParsedSecret(cas, ca_key, certs[0] if certs else None, key)


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return list(san.get_values_for_type(x509.DNSName))


def renew(current: ParsedSecret | None, settings: CertSettings, now: datetime.datetime) -> Renewal:
    """Decide what the Secret must hold at ``now`` (an aware datetime).

    - no usable CA (``ca.crt`` or ``ca.key`` missing or not matching): a new CA; CAs still
      in the bundle stay trusted (rule 2 of the module doc) so pods serving their
      certificates keep working;
    - the CA expires within ``days + renew_before_days``: a new CA signs, the old one
      stays in the bundle (``bundle_grows``);
    - the serving certificate is missing, not signed by the signing CA, not matching its
      key, naming other DNS names, not yet valid, or expiring within
      ``renew_before_days``: a new one, ``days`` long, signed by the signing CA;
    - older CAs leave the bundle once expired, or once no serving certificate they signed
      has been in the Secret for `PROPAGATION_GRACE`.

    New certificates are dated from the real clock; ``now`` only decides (tests pass a
    later one to make renewals due).
    """
    parsed = current or ParsedSecret([], None, None, None)
    actions: list[str] = []
    grows = False
    if parsed.ca_key is None or not parsed.cas:
        ca, ca_key = generate_ca(days=settings.ca_days)
        previous = list(parsed.cas)
        grows = True
        actions.append("created a CA" if not previous else "replaced a CA with no usable key")
    else:
        ca, ca_key = parsed.cas[0], parsed.ca_key
        previous = list(parsed.cas[1:])
        renew_ca_within = datetime.timedelta(days=settings.days + settings.renew_before_days)
        if ca.not_valid_after_utc - now < renew_ca_within:
            previous.insert(0, ca)
            ca, ca_key = generate_ca(days=settings.ca_days)
            grows = True
            actions.append("rotated the CA (the old one stays trusted until it is unused)")
    cert, key = parsed.cert, parsed.key
    reason = None
    if cert is None or key is None:
        reason = "created a serving certificate"
    elif not _signed_by(cert, ca):
        reason = "issued a serving certificate from the new CA"
    elif not _same_key(cert, key):
        reason = "replaced a serving certificate whose key did not match"
    elif _names(cert) != settings.dns_names:
        reason = "replaced a serving certificate for other DNS names"
    elif cert.not_valid_before_utc > now:
        reason = "replaced a serving certificate dated in the future"
    elif cert.not_valid_after_utc - now < datetime.timedelta(days=settings.renew_before_days):
        reason = "renewed the serving certificate"
    if reason is not None:
        old_cert = cert
        cert, key = issue_serving_cert(ca, ca_key, settings.dns_names, days=settings.days)
        actions.append(reason)
    else:
        old_cert = None
    assert cert is not None and key is not None
    kept = []
    for old_ca in previous:
        if old_ca.not_valid_after_utc <= now:
            actions.append(f"dropped the expired CA {old_ca.serial_number:x}")
            continue
        still_used = old_cert is not None and _signed_by(old_cert, old_ca)
        issued = cert.not_valid_before_utc + CLOCK_SKEW
        if still_used or _signed_by(cert, old_ca) or now < issued + PROPAGATION_GRACE:
            kept.append(old_ca)
        else:
            actions.append(f"dropped the old CA {old_ca.serial_number:x} from the bundle")
    material = TLSMaterial(cas=(ca, *kept), ca_key=ca_key, cert=cert, key=key)
    return Renewal(material, tuple(actions), grows)
