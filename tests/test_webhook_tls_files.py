"""The webhook's certificate and key files: a bad one is named with the fix, an encrypted
key is refused without a passphrase prompt (at start and on reload), and a certificate
expired, not yet valid or expiring within a week is a WARNING naming file and date."""

from __future__ import annotations

import datetime
import logging
import ssl
from pathlib import Path

import pytest
from webhook_support import SecretVolume, encrypted, write_pair

from certs import TLSFiles, write_tls_files
from webhook import certificates
from webhook.certificates import CertificateReloader, TLSFilesError, expiry_problem
from webhook.server import ssl_context

NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return write_tls_files(tmp_path / "tls", ["localhost"], ["127.0.0.1"])


# --- files that do not load ------------------------------------------------------------


def test_a_garbage_certificate_is_named_with_the_fix(tls: TLSFiles, tmp_path: Path) -> None:
    bad = tmp_path / "garbage.crt"
    bad.write_bytes(b"hello, not a certificate\n")
    with pytest.raises(TLSFilesError) as caught:
        ssl_context(str(bad), str(tls.key))
    assert (caught.value.cert_file, caught.value.key_file) == (str(bad), None)
    assert str(caught.value).startswith(f"certificate {bad}: not a PEM certificate (")
    assert "point it at the tls.crt of the webhook's TLS Secret" in str(caught.value)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"hello, not a key\n", "not a PEM private key ("),
        (b"", "is empty, not a PEM private key"),
        (
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "not a PEM private key",
        ),
    ],
)
def test_a_garbage_key_is_named_with_the_fix(
    tls: TLSFiles, tmp_path: Path, content: bytes, problem: str
) -> None:
    bad = tmp_path / "garbage.key"
    bad.write_bytes(content)
    with pytest.raises(TLSFilesError) as caught:
        ssl_context(str(tls.cert), str(bad))
    assert str(caught.value).startswith(f"key {bad}: {problem}")
    assert "point it at the tls.key of the webhook's TLS Secret" in str(caught.value)
    assert caught.value.describe("--tls-cert-file", "--tls-key-file").startswith(
        f"--tls-key-file {bad}: "
    )


def test_swapped_files_are_called_swapped(tls: TLSFiles) -> None:
    with pytest.raises(TLSFilesError, match="holds a private key, not a certificate"):
        ssl_context(str(tls.key), str(tls.cert))


def test_a_key_of_another_certificate_names_both_files(tls: TLSFiles, tmp_path: Path) -> None:
    other = write_tls_files(tmp_path / "other", ["localhost"])
    with pytest.raises(TLSFilesError) as caught:
        ssl_context(str(tls.cert), str(other.key))
    assert (caught.value.cert_file, caught.value.key_file) == (str(tls.cert), str(other.key))
    assert caught.value.describe("--tls-cert-file", "--tls-key-file") == (
        f"--tls-cert-file {tls.cert} and --tls-key-file {other.key} do not load: the private"
        " key is not the certificate's (their public keys differ); use the tls.crt and"
        " tls.key of the same Secret"
    )


def test_an_encrypted_key_is_refused_not_prompted_for(tls: TLSFiles, tmp_path: Path) -> None:
    """(The command, on a terminal, is in test_cli.)"""
    key = tmp_path / "encrypted.key"
    key.write_bytes(encrypted(tls.key.read_bytes()))
    with pytest.raises(TLSFilesError) as caught:
        ssl_context(str(tls.cert), str(key))
    assert caught.value.key_file == str(key)
    assert "is encrypted with a passphrase; the webhook needs an unencrypted key" in str(
        caught.value
    )


def test_openssl_never_prompts_even_for_a_key_encrypted_after_the_check(
    tls: TLSFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files can change between the check and OpenSSL's load: OpenSSL is given a
    password callback that refuses, so it never falls back to its terminal prompt."""
    key = tmp_path / "encrypted.key"
    key.write_bytes(encrypted(tls.key.read_bytes()))
    files = tls.cert.read_bytes(), tls.key.read_bytes()
    checked = certificates.check_pair(str(tls.cert), str(tls.key), *files)
    monkeypatch.setattr(certificates, "check_pair", lambda *args: checked)
    with pytest.raises(TLSFilesError, match="is encrypted with a passphrase"):
        ssl_context(str(tls.cert), str(key))


def test_a_good_pair_loads(tls: TLSFiles) -> None:
    assert isinstance(ssl_context(str(tls.cert), str(tls.key)), ssl.SSLContext)


# --- reloads -----------------------------------------------------------------------------


def test_a_rotated_encrypted_key_is_refused_and_the_old_pair_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.rotate_to_new_pair()
    results: list[bool] = []
    reloader = CertificateReloader(
        volume.cert, volume.key, on_reload=lambda ok, pair: results.append(ok)
    )
    before = reloader.pair
    cert, key = volume.files(volume.new_pair())
    volume.rotate(cert, encrypted(key))
    assert reloader.check() is False
    assert reloader.pair == before and results == [False]
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "does not load, still serving the old one" in record.getMessage()
    assert f"key {volume.key}: is encrypted with a passphrase" in record.getMessage()
    volume.rotate(cert, key)  # the same pair, unencrypted: loads
    assert reloader.check() is True and reloader.pair != before


# --- expiry ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("not_before", "not_after", "expected"),
    [
        (NOW - 30 * DAY, NOW - DAY, "expired on"),
        (NOW - 30 * DAY, NOW + 3 * DAY, "expires on"),
        (NOW + 2 * DAY, NOW + 300 * DAY, "is not valid until"),
    ],
)
def test_a_certificate_out_of_date_or_nearly_is_a_warning_at_start(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    expected: str,
) -> None:
    cert, key = write_pair(tmp_path, not_before=not_before, not_after=not_after)
    CertificateReloader(str(cert), str(key))
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.levelno == logging.WARNING and not record.exc_info
    message = record.getMessage()
    assert f"TLS certificate {cert} {expected}" in message
    date = (not_before if expected == "is not valid until" else not_after).date().isoformat()
    assert date in message


def test_a_certificate_valid_for_long_enough_is_no_warning(
    tls: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    CertificateReloader(str(tls.cert), str(tls.key))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_reloaded_certificate_expiring_soon_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.rotate_to_new_pair()
    reloader = CertificateReloader(volume.cert, volume.key)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    cert, key = write_pair(tmp_path / "soon", not_after=NOW + 3 * DAY)
    volume.rotate(cert.read_bytes(), key.read_bytes())
    assert reloader.check() is True
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"TLS certificate {volume.cert} expires on" in record.getMessage()
    assert "(in 2 days" in record.getMessage()


def test_expiry_problem_boundaries(tmp_path: Path) -> None:
    from cryptography import x509

    cert_file, _ = write_pair(tmp_path, not_before=NOW - DAY, not_after=NOW + 10 * DAY)
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    assert expiry_problem(cert, NOW) is None
    assert (expiry_problem(cert, NOW + 4 * DAY) or "").startswith("expires on")  # 6 days left
    assert (expiry_problem(cert, NOW + 11 * DAY) or "").startswith("expired on")
    assert (expiry_problem(cert, NOW - 2 * DAY) or "").startswith("is not valid until")
