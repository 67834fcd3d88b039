"""TLS material for the webhook: a self-signed CA and a serving certificate."""

from certs.tls import (
    CA_CERT_FILE,
    CERT_FILE,
    KEY_FILE,
    TLSFiles,
    generate_ca,
    issue_serving_cert,
    write_tls_files,
)

__all__ = [
    "CA_CERT_FILE",
    "CERT_FILE",
    "KEY_FILE",
    "TLSFiles",
    "generate_ca",
    "issue_serving_cert",
    "write_tls_files",
]
