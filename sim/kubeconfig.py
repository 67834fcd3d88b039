"""Write a kubeconfig for the simulated apiserver (or any server).

The standard ``v1`` ``Config`` layout (kubernetes.io/docs/concepts/configuration/
organize-cluster-access-kubeconfig, client-go ``tools/clientcmd/api/v1``): one cluster with
``certificate-authority-data`` (base64 of the CA PEM), one user with a bearer ``token``,
one context with a default namespace, and ``current-context``. It loads unchanged with
``kubernetes_asyncio.config.load_kube_config`` and kubectl.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

__all__ = ["CONTEXT_NAME", "write_kubeconfig"]

#: Name used for the cluster, user and context entries.
CONTEXT_NAME = "gpu-intent-sim"


def write_kubeconfig(
    path: Path, server: str, ca_file: Path, token: str, namespace: str = "default"
) -> Path:
    """Write a kubeconfig to ``path`` (mode 0600, it holds a token) and return ``path``.

    Args:
        server: the apiserver URL, e.g. ``https://127.0.0.1:6443``.
        ca_file: PEM file of the CA that signed the server's certificate.
        token: bearer token sent on every request.
        namespace: the context's default namespace.
    """
    ca_data = base64.b64encode(Path(ca_file).read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT_NAME,
                "cluster": {"server": server, "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": CONTEXT_NAME, "user": {"token": token}}],
        "contexts": [
            {
                "name": CONTEXT_NAME,
                "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path
