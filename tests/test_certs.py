"""The webhook's CA and serving certificate."""

from __future__ import annotations

import base64
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
from certs.rotation import (
    PROPAGATION_GRACE,
    CertSettings,
    TLSMaterial,
    parse_bundle,
    parse_secret,
    renew,
)


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


# --- certs.rotation: what the cluster mode decides --------------------------------------


SETTINGS = CertSettings("hook", "ns")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _created() -> TLSMaterial:
    return renew(None, SETTINGS, _now()).material


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"days": 0}, "positive"),
        ({"renew_before_days": 90}, "less than days"),
        ({"ca_days": 120}, "must exceed days"),
        ({"service": ""}, "must not be empty"),
    ],
)
def test_cert_settings_reject_windows_that_would_rotate_every_run(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        CertSettings(**{"service": "hook", "namespace": "ns", **kwargs})  # type: ignore[arg-type]


def test_an_empty_secret_gets_a_ca_and_a_serving_cert_for_the_service_names() -> None:
    renewal = renew(parse_secret({}), SETTINGS, _now())
    m = renewal.material
    assert renewal.actions == ("created a CA", "created a serving certificate")
    assert renewal.bundle_grows and len(m.cas) == 1
    m.cert.verify_directly_issued_by(m.cas[0])
    san = m.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "hook", "hook.ns", "hook.ns.svc", "hook.ns.svc.cluster.local"
    ]  # fmt: skip
    ca_life = m.cas[0].not_valid_after_utc - m.cas[0].not_valid_before_utc
    assert datetime.timedelta(days=1825) <= ca_life <= datetime.timedelta(days=1825, minutes=6)


def test_nothing_due_gives_back_the_same_secret_data() -> None:
    material = _created()
    renewal = renew(parse_secret(material.secret_data()), SETTINGS, _now())
    assert renewal.actions == () and not renewal.bundle_grows
    assert renewal.material.secret_data() == material.secret_data()


def test_the_serving_cert_is_renewed_inside_its_window_by_the_same_ca() -> None:
    material = _created()
    later = _now() + datetime.timedelta(days=61)  # 29 days left of 90, window 30
    renewal = renew(parse_secret(material.secret_data()), SETTINGS, later)
    assert renewal.actions == ("renewed the serving certificate",)
    assert renewal.material.cas == material.cas and not renewal.bundle_grows
    assert renewal.material.cert.serial_number != material.cert.serial_number
    not_yet = renew(
        parse_secret(material.secret_data()), SETTINGS, later - datetime.timedelta(days=2)
    )
    assert not_yet.actions == ()


def test_other_service_names_get_a_new_serving_cert() -> None:
    data = _created().secret_data()
    renewal = renew(parse_secret(data), CertSettings("hook", "other"), _now())
    assert renewal.actions == ("replaced a serving certificate for other DNS names",)


def test_a_ca_near_its_end_is_rotated_and_both_stay_trusted_until_unused() -> None:
    material = _created()
    data = material.secret_data()
    old_ca = material.cas[0]
    near_end = old_ca.not_valid_after_utc - datetime.timedelta(days=100)  # < 90 + 30 left
    rotated = renew(parse_secret(data), SETTINGS, near_end)
    assert rotated.bundle_grows
    assert rotated.actions[:2] == (
        "rotated the CA (the old one stays trusted until it is unused)",
        "issued a serving certificate from the new CA",
    )
    new_ca = rotated.material.cas[0]
    assert rotated.material.cas == (new_ca, old_ca) and new_ca != old_ca
    rotated.material.cert.verify_directly_issued_by(new_ca)
    assert parse_bundle(rotated.bundle) == [new_ca, old_ca]
    # the next run, within the grace, keeps both; after it, drops the old one
    kept = renew(parse_secret(rotated.material.secret_data()), SETTINGS, _now())
    assert kept.actions == () and kept.material.cas == (new_ca, old_ca)
    after = _now() + PROPAGATION_GRACE + datetime.timedelta(seconds=1)
    dropped = renew(parse_secret(rotated.material.secret_data()), SETTINGS, after)
    assert dropped.material.cas == (new_ca,) and not dropped.bundle_grows
    assert dropped.actions == (f"dropped the old CA {old_ca.serial_number:x} from the bundle",)


def test_a_lost_ca_key_gives_a_new_ca_and_keeps_the_old_one_trusted() -> None:
    data = _created().secret_data()
    old_ca = parse_bundle(base64.b64decode(data["ca.crt"]))[0]
    del data["ca.key"]
    renewal = renew(parse_secret(data), SETTINGS, _now())
    assert renewal.actions == (
        "replaced a CA with no usable key",
        "issued a serving certificate from the new CA",
    )
    assert renewal.material.cas[1:] == (old_ca,) and renewal.bundle_grows


def test_an_expired_old_ca_is_dropped_at_once() -> None:
    material = _created()
    short_lived, _ = generate_ca(days=1)
    data = TLSMaterial(
        (*material.cas, short_lived), material.ca_key, material.cert, material.key
    ).secret_data()
    # the signing CA is found by its key wherever it is in the bundle
    assert parse_secret(data).cas[0] == material.cas[0]
    renewal = renew(parse_secret(data), SETTINGS, _now() + datetime.timedelta(days=2))
    assert renewal.actions == (f"dropped the expired CA {short_lived.serial_number:x}",)
    assert renewal.material.cas == material.cas
