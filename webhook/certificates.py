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
from typing import Final

from cryptography import x509

__all__ = ["DEFAULT_RELOAD_INTERVAL", "CertificateReloader", "LoadedPair", "server_context"]

log = logging.getLogger(__name__)

#: Seconds between two looks at the certificate files. The kubelet refreshes a mounted
#: Secret within about a minute of its change, and cert-manager renews a certificate a
#: third of its lifetime before it expires, so a few seconds lose nothing.
DEFAULT_RELOAD_INTERVAL: Final = 5.0


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or newer) with the PEM certificate chain and key.

    Raises:
        OSError: a file cannot be read.
        ssl.SSLError: the files are not a matching PEM certificate and key.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


@dataclass(frozen=True, slots=True)
class LoadedPair:
    """The certificate being served.

    Attributes:
        serial: the leaf certificate's serial number.
        not_after: its expiry (UTC).
    """

    serial: int
    not_after: datetime.datetime


def _describe(cert_pem: bytes) -> LoadedPair | None:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return None
    return LoadedPair(cert.serial_number, cert.not_valid_after_utc)


class CertificateReloader:
    """Serves the newest loadable certificate/key pair of two PEM files.

    ``context`` is the listener's `ssl.SSLContext` (TLS 1.2 or newer): pass it to the
    server once; `check` (or `run`, every ``interval`` seconds) swaps the pair it hands to
    new handshakes. ``on_reload(ok, pair)`` is called after each attempt to load a changed
    pair (``ok`` False: the old pair stays; ``pair`` describes the pair now served).

    Raises (constructor):
        OSError, ssl.SSLError: the initial pair does not load (the server must not start).
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
        files = self._read()
        self._active = server_context(cert_file, key_file)
        self._files: tuple[bytes, bytes] | None = files if files == self._read() else None
        self._failed: tuple[bytes, bytes] | None = None
        self.pair = _describe(files[0]) if files is not None else None
        self.context = server_context(cert_file, key_file)  # the fallback, never used
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
            context = server_context(self.cert_file, self.key_file)
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
        # Files replaced between the read and the load: look again next time.
        self._files = files if files == self._read() else None
        self._failed = None
        self.pair = _describe(files[0])
        log.info(
            "reloaded the TLS certificate from %s (serial %x, valid until %s)",
            self.cert_file,
            self.pair.serial if self.pair else 0,
            self.pair.not_after.isoformat() if self.pair else "?",
        )
        if self._on_reload is not None:
            self._on_reload(True, self.pair)
        return True

    async def run(self) -> None:
        """`check` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check()
