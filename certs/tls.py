"""A self-signed CA and a serving certificate for the webhook (ECDSA P-256).

The kube-apiserver calls the webhook over HTTPS and checks the certificate against the
``caBundle`` of the MutatingWebhookConfiguration; Go's TLS ignores the subject CN, so the
serving certificate names the Service in its subjectAltName (``<svc>.<ns>.svc``).
Certificates carry the extensions strict verifiers require (Python 3.13's
``VERIFY_X509_STRICT``, RFC 5280): SKI on both, AKI on the leaf, critical
BasicConstraints and KeyUsage.

`generate_ca` and `issue_serving_cert` are pure apart from randomness and the clock;
`write_tls_files` is the only function that touches the file system.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_CERT_FILE",
    "CERT_FILE",
    "KEY_FILE",
    "TLSFiles",
    "generate_ca",
    "issue_serving_cert",
    "write_tls_files",
]

#: File names of a Kubernetes ``kubernetes.io/tls`` Secret (plus the CA cert-manager adds).
CA_CERT_FILE: Final = "ca.crt"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"

#: Certificates start this long before "now", for clocks slightly behind ours.
CLOCK_SKEW: Final = datetime.timedelta(minutes=5)


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    if isinstance(days, bool) or not isinstance(days, int) or days <= 0:
        raise ValueError(f"days must be a positive whole number of days, got {days!r}")
    now = datetime.datetime.now(datetime.UTC)
    return now - CLOCK_SKEW, now + datetime.timedelta(days=days)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def generate_ca(
    common_name: str = "gpu-intent-ca", days: int = 365
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A new self-signed CA certificate and its ECDSA P-256 key, valid for ``days`` days.

    Extensions: BasicConstraints CA=True, path length 0 (critical), KeyUsage keyCertSign
    and cRLSign (critical), SubjectKeyIdentifier.

    Raises:
        ValueError: ``common_name`` is empty or ``days`` is not a positive integer.
    """
    if not common_name:
        raise ValueError("common_name must not be empty")
    not_before, not_after = _validity(days)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _subject_alt_names(
    dns_names: Sequence[str], ip_addresses: Sequence[str]
) -> list[x509.GeneralName]:
    if isinstance(dns_names, str) or isinstance(ip_addresses, str):
        raise ValueError("dns_names and ip_addresses must be sequences of names, not a string")
    names: list[x509.GeneralName] = []
    for dns in dns_names:
        if not dns or any(c.isspace() for c in dns):
            raise ValueError(f"DNS name {dns!r} must be non-empty and without spaces")
        names.append(x509.DNSName(dns))
    for ip in ip_addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as e:
            raise ValueError(f"{ip!r} is not an IP address") from e
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    return names


def issue_serving_cert(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    days: int = 365,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A TLS server certificate signed by the CA, and its new ECDSA P-256 key.

    The subjectAltName lists ``dns_names`` (e.g. ``gpu-intent-webhook.gpu-intent.svc``)
    then ``ip_addresses`` (e.g. ``127.0.0.1``); the subject CN is the first of them.
    Extensions: BasicConstraints CA=False (critical), KeyUsage digitalSignature (critical),
    ExtendedKeyUsage serverAuth, SKI, and AKI from the CA's key. Valid ``days`` days.

    Raises:
        ValueError: no names at all, an empty DNS name, an address that is not an IP
            address, or ``days`` not a positive integer.
    """
    names = _subject_alt_names(dns_names, ip_addresses)
    not_before, not_after = _validity(days)
    key = ec.generate_private_key(ec.SECP256R1())
    first = names[0].value
    common_name = str(first)[:64]  # the CN attribute is limited to 64 characters
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """Paths of the PEM files `write_tls_files` wrote.

    Attributes:
        ca_cert: the CA certificate (``ca.crt``): the webhook configuration's caBundle.
        cert: the serving certificate (``tls.crt``).
        key: the serving key (``tls.key``), PKCS#8, unencrypted, mode 0600.
    """

    ca_cert: Path
    cert: Path
    key: Path


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with permissions ``mode``, never wider even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # an existing file keeps its old mode through os.open
        os.write(fd, data)
    finally:
        os.close(fd)


def write_tls_files(
    out_dir: Path,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    days: int = 365,
) -> TLSFiles:
    """Generate a CA and a serving certificate and write them to ``out_dir`` as PEM.

    Writes ``ca.crt`` and ``tls.crt`` (mode 0644) and ``tls.key`` (PKCS#8, unencrypted,
    mode 0600), creating ``out_dir`` if needed and replacing existing files. Both
    certificates are valid ``days`` days.

    Raises:
        ValueError: as `issue_serving_cert` (checked before anything is written).
        OSError: the files cannot be written.
    """
    _subject_alt_names(dns_names, ip_addresses)
    _validity(days)
    ca_cert, ca_key = generate_ca(days=days)
    cert, key = issue_serving_cert(ca_cert, ca_key, dns_names, ip_addresses, days=days)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(
        ca_cert=out_dir / CA_CERT_FILE, cert=out_dir / CERT_FILE, key=out_dir / KEY_FILE
    )
    pem = serialization.Encoding.PEM
    _write(files.key, key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)  # fmt: skip
    _write(files.cert, cert.public_bytes(pem), 0o644)
    _write(files.ca_cert, ca_cert.public_bytes(pem), 0o644)
    return files
