"""The webhook's CA and serving certificate."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import TLSFiles, generate_ca, issue_serving_cert, write_tls_files


def test_serving_cert_is_signed_by_the_ca() -> None:
    ca_cert, ca_key = generate_ca()
    cert, _ = issue_serving_cert(ca_cert, ca_key, ["webhook.ns.svc"])
    cert.verify_directly_issued_by(ca_cert)  # raises on a bad signature or issuer
    ca_cert.verify_directly_issued_by(ca_cert)  # self-signed


def test_serving_cert_does_not_verify_against_another_ca() -> None:
    ca_cert, ca_key = generate_ca()
    other_ca, _ = generate_ca()  # same subject name, different key
    cert, _ = issue_serving_cert(ca_cert, ca_key, ["webhook.ns.svc"])
    with pytest.raises(InvalidSignature):
        cert.verify_directly_issued_by(other_ca)


def test_ca_extensions() -> None:
    ca_cert, ca_key = generate_ca("my-ca", days=10)
    assert isinstance(ca_key.curve, ec.SECP256R1)
    basic = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca
    usage = ca_cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    lifetime = ca_cert.not_valid_after_utc - ca_cert.not_valid_before_utc
    assert datetime.timedelta(days=10) <= lifetime <= datetime.timedelta(days=10, minutes=6)


def test_serving_cert_sans_and_extensions() -> None:
    ca_cert, ca_key = generate_ca()
    cert, key = issue_serving_cert(
        ca_cert, ca_key, ["svc.ns.svc", "localhost"], ["127.0.0.1", "::1"], days=30
    )
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["svc.ns.svc", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    assert cert.public_key() == key.public_key()


def test_ip_only_cert() -> None:
    ca_cert, ca_key = generate_ca()
    cert, _ = issue_serving_cert(ca_cert, ca_key, [], ["10.0.0.1"])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.1")]


@pytest.mark.parametrize(
    ("dns", "ips", "match"),
    [
        ([], [], "at least one"),
        ([""], [], "non-empty"),
        (["a b"], [], "without spaces"),
        ([], ["not-an-ip"], "not an IP"),
        ("localhost", [], "not a string"),
    ],
)
def test_bad_names_raise_value_error(dns: list[str], ips: list[str], match: str) -> None:
    ca_cert, ca_key = generate_ca()
    with pytest.raises(ValueError, match=match):
        issue_serving_cert(ca_cert, ca_key, dns, ips)


@pytest.mark.parametrize("days", [0, -1])
def test_bad_days_raise_value_error(days: int) -> None:
    with pytest.raises(ValueError, match="days"):
        generate_ca(days=days)


def test_write_tls_files(tmp_path: Path) -> None:
    out = tmp_path / "certs" / "nested"
    files = write_tls_files(out, ["localhost"], ["127.0.0.1"])
    assert files == TLSFiles(out / "ca.crt", out / "tls.crt", out / "tls.key")
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(ca_cert)
    assert files.key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    assert key.public_key() == cert.public_key()
    # the files load as a server identity
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(files.cert, files.key)


def test_write_tls_files_tightens_an_existing_key_file(tmp_path: Path) -> None:
    (tmp_path / "tls.key").write_text("old")
    (tmp_path / "tls.key").chmod(0o644)
    files = write_tls_files(tmp_path, ["localhost"])
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert b"old" not in files.key.read_bytes()


def test_write_tls_files_without_names_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        write_tls_files(tmp_path / "out", [])
    assert not (tmp_path / "out").exists()
