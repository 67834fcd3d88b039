"""Helpers for the webhook's serving tests: raw HTTP/1.1 over TLS, and a Secret volume laid
out and rotated the way the kubelet does it."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import shutil
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from certs import write_tls_files

FIXTURES = Path(__file__).parent / "fixtures" / "admission-reviews"


def load(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return body


def request_bytes(body: bytes, path: str = "/mutate?timeout=10s", close: bool = False) -> bytes:
    """A complete ``POST`` with ``body`` as HTTP/1.1 bytes."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode() + body


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    """One HTTP/1.1 response with a Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(status, headers, body)


async def connect(
    port: int, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )


async def closed_by_peer(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while True:
                if not await reader.read(65536):
                    return True
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> Answer:
    """``GET path`` on an open (kept-alive) connection."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    return await read_answer(reader)


async def until_listening(port: int, context: ssl.SSLContext, within: float = 10.0) -> None:
    """Wait (polling, at most ``within`` seconds) until a TLS handshake on ``port`` works."""
    deadline = time.monotonic() + within
    while True:
        try:
            _, writer = await connect(port, context)
            writer.close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            await asyncio.sleep(0.025)


async def until_refused(port: int, context: ssl.SSLContext, deadline: float) -> None:
    """Wait (polling, until monotonic time ``deadline``) until connections to ``port``
    are refused: the server closed its listener. A connect accepted in the backlog just
    as the listener closed is reset (another `OSError`), or left without a TLS handshake
    (given up after a second), and tried again."""
    while True:
        try:
            _, probe = await asyncio.wait_for(connect(port, context), 1.0)
            probe.close()
        except ConnectionRefusedError:
            return
        except (OSError, TimeoutError):  # in the backlog as the listener closed
            pass
        assert time.monotonic() < deadline, "the listener never closed"
        await asyncio.sleep(0.02)


async def until(check: Callable[[], object], within: float = 10.0, what: str = "") -> None:
    """Wait (polling every 10 ms, at most ``within`` seconds) until ``check()`` is truthy:
    for a condition only observable from outside (a counter, a server's state)."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not within {within} s: {what or check}"
        await asyncio.sleep(0.01)


def write_pair(
    directory: Path,
    *,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
    passphrase: bytes | None = None,
) -> tuple[Path, Path]:
    """A self-signed ``localhost`` / ``127.0.0.1`` certificate and its P-256 key as
    ``tls.crt`` and ``tls.key`` in ``directory``: valid from ``not_before`` (default an
    hour ago) to ``not_after`` (default in a year), the key encrypted with ``passphrase``
    if given."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - datetime.timedelta(hours=1))
        .not_valid_after(not_after or now + datetime.timedelta(days=365))
        .add_extension(san, critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key_pem(key, passphrase))
    return cert_file, key_file


def key_pem(key: ec.EllipticCurvePrivateKey, passphrase: bytes | None = None) -> bytes:
    """``key`` as PKCS#8 PEM, encrypted with ``passphrase`` if given."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def encrypted(pem: bytes, passphrase: bytes = b"pw") -> bytes:
    """The PEM private key ``pem``, encrypted with ``passphrase``."""
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key_pem(key, passphrase)


class SecretVolume:
    """A directory laid out like a Secret volume the kubelet mounted: ``tls.crt`` and
    ``tls.key`` are symlinks to ``..data/<file>``, ``..data`` a symlink to a timestamped
    directory. `rotate` writes a new timestamped directory and swaps ``..data`` with an
    atomic rename of a new symlink, as kubelet's AtomicWriter does
    (``pkg/volume/util/atomic_writer.go``); no file named ``tls.crt`` changes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.generation = 0
        self.cas: list[bytes] = []

    @property
    def cert(self) -> str:
        return str(self.root / "tls.crt")

    @property
    def key(self) -> str:
        return str(self.root / "tls.key")

    def new_pair(self) -> Path:
        """A new CA and serving pair, in a scratch directory (the CA is remembered)."""
        out = self.root.parent / f"pair-{len(self.cas)}"
        files = write_tls_files(out, ["localhost"], ["127.0.0.1"])
        self.cas.append(files.ca_cert.read_bytes())
        return out

    def rotate(self, cert: bytes, key: bytes) -> None:
        self.generation += 1
        stamp = f"..2026_01_01_00_00_{self.generation:02d}.{os.getpid()}"
        target = self.root / stamp
        target.mkdir()
        (target / "tls.crt").write_bytes(cert)
        (target / "tls.key").write_bytes(key)
        old = (self.root / "..data").resolve() if (self.root / "..data").exists() else None
        tmp = self.root / "..data_tmp"
        os.symlink(stamp, tmp)
        os.rename(tmp, self.root / "..data")  # the atomic swap
        for name in ("tls.crt", "tls.key"):
            if not (self.root / name).is_symlink():
                os.symlink(f"..data/{name}", self.root / name)
        if old is not None:
            shutil.rmtree(old)

    @staticmethod
    def files(pair: Path) -> tuple[bytes, bytes]:
        """The certificate and key of a pair directory from `new_pair`."""
        return (pair / "tls.crt").read_bytes(), (pair / "tls.key").read_bytes()

    def current(self) -> tuple[bytes, bytes]:
        """The certificate and key the volume holds now."""
        return Path(self.cert).read_bytes(), Path(self.key).read_bytes()

    def rotate_to_new_pair(self) -> None:
        out = self.new_pair()
        self.rotate((out / "tls.crt").read_bytes(), (out / "tls.key").read_bytes())

    def trust_all(self) -> ssl.SSLContext:
        """A client context trusting every CA this volume has held."""
        context = ssl.create_default_context()
        context.load_verify_locations(cadata="".join(ca.decode() for ca in self.cas))
        return context


def serial_of(writer: asyncio.StreamWriter) -> int:
    """The serial number of the certificate the server presented."""
    from cryptography import x509

    ssl_object = writer.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number
