"""Serve the simulated apiserver over HTTPS on loopback: start, URL, kubeconfig, stop.

`ApiServer` wraps `apiserver.make_app` in an aiohttp ``AppRunner`` with handler
cancellation (a watch ends as soon as its client disconnects) and a TLS site. Without
given TLS files it generates a throw-away self-signed certificate for ``localhost`` and
``127.0.0.1`` (`throwaway_tls`) in a temporary directory removed by `ApiServer.stop`.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sim.admission import Admission
from sim.apiserver import CONTEXT, make_app
from sim.defaults import SYSTEM_PRIORITY_CLASSES
from sim.faults import Faults
from sim.kubeconfig import write_kubeconfig
from sim.store import Store

__all__ = ["ApiServer", "ServingFiles", "throwaway_tls"]


@dataclass(frozen=True, slots=True)
class ServingFiles:
    """PEM files the simulated apiserver serves with.

    Attributes:
        ca_cert: what clients must trust (for `throwaway_tls`, the certificate itself).
        cert: the serving certificate.
        key: its private key, unencrypted.
    """

    ca_cert: Path
    cert: Path
    key: Path


def throwaway_tls(directory: Path, days: int = 7) -> ServingFiles:
    """Write a self-signed P-256 certificate for ``localhost`` and ``127.0.0.1``, valid
    ``days`` days, and its key into ``directory``; the certificate is its own CA
    (``ca_cert`` is ``cert``). For the loopback test server only: the product's
    certificates come from cert-manager or `certs`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-intent simulated apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))  # fmt: skip
    return ServingFiles(ca_cert=cert_file, cert=cert_file, key=key_file)


class ApiServer:
    """The simulated kube-apiserver on ``https://<host>:<port>``.

    Args:
        store: the object store served.
        token: bearer token required on requests (None: no authentication).
        admission: mutating webhook dispatcher (None: webhooks are not called).
        tls: serving certificate files; None generates a throw-away one (`throwaway_tls`).
        host: address to bind, ``127.0.0.1`` by default.
        port: TCP port, 0 for a free one.
        bookmark_interval: seconds between watch ``BOOKMARK`` events.
        priority_classes: PriorityClass name -> value for the Priority admission plugin.
        shutdown_timeout: seconds `stop` waits for in-flight requests.
        faults: fault switches (`sim.faults`) to install on the app (None: none).

    Use ``async with ApiServer(store) as server:`` or `start` / `stop`.
    """

    def __init__(
        self,
        store: Store,
        *,
        token: str | None = None,
        admission: Admission | None = None,
        tls: ServingFiles | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
        priority_classes: Mapping[str, int] = SYSTEM_PRIORITY_CLASSES,
        shutdown_timeout: float = 5.0,
        faults: Faults | None = None,
    ) -> None:
        self.store = store
        self.token = token
        self.admission = admission
        self.host = host
        self._port = port
        self._tls = tls
        self._tmp: Path | None = None
        self._runner: web.AppRunner | None = None
        self._shutdown_timeout = shutdown_timeout
        self.app = make_app(
            store,
            token=token,
            admission=admission,
            bookmark_interval=bookmark_interval,
            priority_classes=priority_classes,
        )
        if faults is not None:
            faults.install(self.app)
        self.url = ""

    @property
    def tls(self) -> ServingFiles:
        """The serving TLS files (``ca_cert`` is what clients must trust)."""
        if self._tls is None:
            raise RuntimeError("the server is not started")
        return self._tls

    async def start(self) -> str:
        """Listen and return the base URL, e.g. ``https://127.0.0.1:41235``."""
        if self._tls is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="gpu-intent-apiserver-"))
            self._tls = throwaway_tls(self._tmp)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self._tls.cert, self._tls.key)
        runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=self._shutdown_timeout,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port, ssl_context=context)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.url = f"https://{host}:{port}"
        self.app[CONTEXT].server_address = f"{host}:{port}"
        return self.url

    async def stop(self) -> None:
        """End every watch, close connections, and remove generated TLS files."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
            self._tls = None

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig for this server (`kubeconfig.write_kubeconfig`); needs a token."""
        if not self.url or self.token is None:
            raise RuntimeError("write_kubeconfig needs a started server with a token")
        return write_kubeconfig(path, self.url, self.tls.ca_cert, self.token, namespace)

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
