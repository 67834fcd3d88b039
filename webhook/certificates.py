"""The webhook's serving certificate, reloaded when its files change.

The certificate and key come from a Kubernetes TLS Secret mounted as a volume. The kubelet
updates such a volume atomically (``pkg/volume/util/atomic_writer.go``, ``AtomicWriter``):
it writes the new files into a fresh timestamped directory ``..<timestamp>``, points a
new symlink ``..data_tmp`` at it and renames that over ``..data``; ``tls.crt`` and
``tls.key`` are symlinks to ``..data/tls.crt`` and ``..data/tls.key`` that never change
themselves. Nothing watching ``tls.crt`` sees an event (REFERENCE §4: "mounted Secrets
give no reliable file events on rotation"), so `CertificateReloader` polls: it re-reads
both files every few seconds and compares their bytes with the pair it serves (kopf does
the same, ``kopf/_kits/webhooks.py``, ``file_check_interval``).

A new pair is loaded into a new `ssl.SSLContext`; the listener's context picks the
current one for every handshake through its SNI callback (OpenSSL calls it for every
ClientHello, with ``server_name`` None when the client sends no SNI), so the listening
socket is never closed or rebound, connections already open keep the pair they
negotiated, and a pair that does not load (a half-written file, a key that does not
match) leaves the old one serving until a good pair appears.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

__all__ = [
    "DEFAULT_RELOAD_INTERVAL",
    "EXPIRY_WARNING",
    "CertificateReloader",
    "LoadedPair",
    "TLSFilesError",
    "check_pair",
    "expiry_problem",
    "server_context",
]

log = logging.getLogger(__name__)

#: Seconds between two looks at the certificate files. The kubelet refreshes a mounted
#: Secret within about a minute of its change, and cert-manager renews a certificate a
#: third of its lifetime before it expires, so a few seconds lose nothing.
DEFAULT_RELOAD_INTERVAL: Final = 5.0
#: A certificate expiring sooner than this (7 days) is logged as a WARNING when it is
#: loaded: cert-manager as the chart sets it up (``renewBefore: 720h``) and ``gpu-intent
#: certs --secret`` (``--renew-before-days 30``) renew 30 days before expiry, so a week
#: left means renewal is stuck.
EXPIRY_WARNING: Final = datetime.timedelta(days=7)

_CERT_FIX: Final = "point it at the tls.crt of the webhook's TLS Secret"
_KEY_FIX: Final = "point it at the tls.key of the webhook's TLS Secret"
_ENCRYPTED: Final = (
    "is encrypted with a passphrase; the webhook needs an unencrypted key"
    " (as cert-manager and `gpu-intent certs` write)"
)


class TLSFilesError(ValueError):
    """A certificate or key file that cannot serve, with the file(s) and the fix.

    Attributes:
        problem: what is wrong, e.g. ``not a PEM private key (...)``.
        fix: what to do about it.
        cert_file: the certificate file at fault, or None.
        key_file: the key file at fault, or None (both set: they do not match).

    ``str()`` names the files as ``certificate <path>`` / ``key <path>``; `describe`
    takes other names (the command line's ``--tls-cert-file <path>``).
    """

    def __init__(
        self, problem: str, fix: str, *, cert_file: str | None = None, key_file: str | None = None
    ) -> None:
        self.problem = problem
        self.fix = fix
        self.cert_file = cert_file
        self.key_file = key_file
        super().__init__(self.describe())

    def describe(self, cert_name: str = "certificate", key_name: str = "key") -> str:
        """One line: ``<cert_name> <path>: <problem>; <fix>``, or for a pair that does not
        match ``<cert_name> <path> and <key_name> <path> do not load: <problem>; <fix>``."""
        if self.cert_file is not None and self.key_file is not None:
            return (
                f"{cert_name} {self.cert_file} and {key_name} {self.key_file} do not load:"
                f" {self.problem}; {self.fix}"
            )
        if self.cert_file is not None:
            return f"{cert_name} {self.cert_file}: {self.problem}; {self.fix}"
        return f"{key_name} {self.key_file}: {self.problem}; {self.fix}"


def _why(error: Exception) -> str:
    """cryptography's parse error without its FAQ link: ``Unable to load PEM file. See
    https://... for more details. MalformedFraming`` -> ``Unable to load PEM file:
    MalformedFraming``."""
    text = str(error)
    head, sep, tail = text.partition(". See https://")
    if sep:
        detail = tail.partition("for more details.")[2].strip()
        return f"{head}: {detail}" if detail else head
    return text


def check_pair(
    cert_file: str, key_file: str, cert_pem: bytes, key_pem: bytes
) -> list[x509.Certificate]:
    """Check the bytes of a certificate file and a key file (read from ``cert_file`` and
    ``key_file``, named in errors) with ``cryptography`` before OpenSSL sees them, and
    return the certificate chain, leaf first.

    OpenSSL's own errors name no file (``[SSL] PEM lib``), and OpenSSL prompts on the
    terminal for the passphrase of an encrypted key when no password is given (CPython
    docs, ``ssl.SSLContext.load_cert_chain``); an encrypted key is refused here.

    Raises:
        TLSFilesError: the certificate file holds no PEM certificate, the key file no
            unencrypted PEM private key, or the key is not the certificate's.
    """
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as e:
        if not cert_pem.strip():
            problem = "is empty, not a PEM certificate"
        elif b"PRIVATE KEY-----" in cert_pem:
            problem = "holds a private key, not a certificate (are the two files swapped?)"
        else:
            problem = f"not a PEM certificate ({_why(e)})"
        raise TLSFilesError(problem, _CERT_FIX, cert_file=cert_file) from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise TLSFilesError(_ENCRYPTED, _KEY_FIX, key_file=key_file) from None
    except (ValueError, UnsupportedAlgorithm) as e:
        if not key_pem.strip():
            problem = "is empty, not a PEM private key"
        elif b"-----BEGIN CERTIFICATE-----" in key_pem and b"PRIVATE KEY-----" not in key_pem:
            problem = "holds a certificate, not a private key (are the two files swapped?)"
        else:
            problem = f"not a PEM private key ({_why(e)})"
        raise TLSFilesError(problem, _KEY_FIX, key_file=key_file) from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != chain[0].public_key().public_bytes(*spki):
        raise TLSFilesError(
            "the private key is not the certificate's (their public keys differ)",
            "use the tls.crt and tls.key of the same Secret",
            cert_file=cert_file,
            key_file=key_file,
        )
    return chain


def _context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """OpenSSL's context for files `check_pair` passed; never prompts for a passphrase."""

    def no_passphrase() -> NoReturn:  # the key became encrypted after check_pair read it
        raise TLSFilesError(_ENCRYPTED, _KEY_FIX, key_file=key_file)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A password callable: OpenSSL calls it, not its terminal prompt, for an encrypted key
    # (CPython docs, ssl.SSLContext.load_cert_chain: an exception it raises propagates).
    context.load_cert_chain(cert_file, key_file, password=no_passphrase)
    return context


def _load(
    cert_file: str, key_file: str
) -> tuple[ssl.SSLContext, tuple[bytes, bytes], x509.Certificate]:
    """Read, check and load a pair: the context, the bytes checked and the leaf."""
    files = Path(cert_file).read_bytes(), Path(key_file).read_bytes()
    chain = check_pair(cert_file, key_file, *files)
    return _context(cert_file, key_file), files, chain[0]


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or newer) with the PEM certificate chain and key.

    The files are checked with `check_pair` first, so a bad file is named with the fix,
    and an encrypted key is refused without ever prompting for its passphrase.

    Raises:
        OSError: a file cannot be read.
        TLSFilesError (a ValueError): a file is not a PEM certificate / unencrypted PEM
            private key, or the key is not the certificate's.
        ssl.SSLError: OpenSSL refuses files that ``cryptography`` accepted.
    """
    return _load(cert_file, key_file)[0]


def expiry_problem(cert: x509.Certificate, now: datetime.datetime | None = None) -> str | None:
    """What is wrong with ``cert``'s validity period at ``now`` (default: the current UTC
    time): ``expired on <date>``, ``expires on <date> (in N days)`` within
    `EXPIRY_WARNING`, ``is not valid until <date>``; None when none of these."""
    now = now or datetime.datetime.now(datetime.UTC)
    after, before = cert.not_valid_after_utc, cert.not_valid_before_utc
    if after <= now:
        return f"expired on {after.isoformat()}"
    if before > now:
        return f"is not valid until {before.isoformat()}"
    if after - now < EXPIRY_WARNING:
        left = after - now
        return f"expires on {after.isoformat()} (in {left.days} days {left.seconds // 3600} hours)"
    return None


def _warn_expiry(cert_file: str, cert: x509.Certificate) -> None:
    problem = expiry_problem(cert)
    if problem is not None:
        log.warning(
            "TLS certificate %s %s; the apiserver refuses a certificate outside its"
            " validity: renew it (cert-manager renews on its own, `gpu-intent certs`"
            " when run again)", cert_file, problem,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LoadedPair:
    """The certificate being served.

    Attributes:
        serial: the leaf certificate's serial number.
        not_after: its expiry (UTC).
    """

    serial: int
    not_after: datetime.datetime


def _describe(cert: x509.Certificate) -> LoadedPair:
    return LoadedPair(cert.serial_number, cert.not_valid_after_utc)


class CertificateReloader:
    """Serves the newest loadable certificate/key pair of two PEM files.

    ``context`` is the listener's `ssl.SSLContext` (TLS 1.2 or newer): pass it to the
    server once; `check` (or `run`, every ``interval`` seconds) swaps the pair it hands to
    new handshakes. ``on_reload(ok, pair)`` is called after each attempt to load a changed
    pair (``ok`` False: the old pair stays; ``pair`` describes the pair now served).

    Every pair is checked with `check_pair` first (an encrypted key is refused, never
    prompted for); a certificate expired, not yet valid or expiring within
    `EXPIRY_WARNING` is logged as a WARNING naming the file and the date, at start and on
    each reload (it is served all the same: it is the best pair there is).

    Raises (constructor):
        OSError, TLSFilesError, ssl.SSLError: the initial pair does not load (the server
            must not start); see `server_context`.
        ValueError: ``interval`` is not > 0 seconds.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        interval: float = DEFAULT_RELOAD_INTERVAL,
        on_reload: Callable[[bool, LoadedPair | None], None] | None = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"reload interval must be > 0 seconds, got {interval!r}")
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self._on_reload = on_reload
        self._active, files, leaf = _load(cert_file, key_file)
        self._files: tuple[bytes, bytes] | None = files if files == self._read() else None
        self._failed: tuple[bytes, bytes] | None = None
        self.pair: LoadedPair | None = _describe(leaf)
        _warn_expiry(cert_file, leaf)
        self.context = _context(cert_file, key_file)  # the fallback, never used
        self.context.sni_callback = self._select

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        connection.context = self._active

    def _read(self) -> tuple[bytes, bytes] | None:
        try:
            return Path(self.cert_file).read_bytes(), Path(self.key_file).read_bytes()
        except OSError:
            return None

    def check(self) -> bool | None:
        """Look at the files once. Returns None when they hold the pair being served (or
        cannot be read just now), True when a new pair was loaded, False when a changed
        pair did not load and the old one stays (logged once per content)."""
        files = self._read()
        if files is None or files == self._files:
            return None
        try:
            context, loaded, leaf = _load(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError, ValueError) as e:
            if files != self._failed:
                self._failed = files
                log.warning(
                    "new TLS certificate or key in %s / %s does not load, still serving the"
                    " old one: %s", self.cert_file, self.key_file, e,
                )  # fmt: skip
                if self._on_reload is not None:
                    self._on_reload(False, self.pair)
            return False
        self._active = context
        # Files replaced between the reads and the load: look again next time.
        self._files = loaded if loaded == files == self._read() else None
        self._failed = None
        self.pair = _describe(leaf)
        log.info(
            "reloaded the TLS certificate from %s (serial %x, valid until %s)",
            self.cert_file,
            self.pair.serial,
            self.pair.not_after.isoformat(),
        )
        _warn_expiry(self.cert_file, leaf)
        if self._on_reload is not None:
            self._on_reload(True, self.pair)
        return True

    async def run(self) -> None:
        """`check` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check()
