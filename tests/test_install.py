"""A plain (non-editable) install works: build the wheel, install it into a new virtual
environment as a user would (dependencies resolved by pip), and run the demo from a
directory outside the source tree, so nothing can come from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = ("gpu_intent", "webhook", "controller", "certs", "sim")
PACKAGES = (*TOP_LEVEL, "gpu_intent/demo")


def _run(*args: str | Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_wheel_installs_into_a_new_venv_and_runs_the_demo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT,
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("gpu_intent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"{p}/__init__.py" for p in PACKAGES} <= names
    assert {f"{p}/py.typed" for p in TOP_LEVEL} <= names
    assert "gpu_intent/examples/20-workloads.yaml" in names
    assert "gpu_intent/examples/providers/tke/10-nodepools.yaml" in names
    assert "sim/crds/karpenter.sh_nodeclaims.yaml" in names
    assert not any(n.startswith("tests/") for n in names)

    venv = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", venv, cwd=tmp_path, timeout=120)
    assert made.returncode == 0, made.stderr
    installed = _run(venv / "bin" / "pip", "install", "-q", wheel, cwd=tmp_path, timeout=300)
    assert installed.returncode == 0, installed.stderr

    imported = _run(
        venv / "bin" / "python",
        "-c",
        "import webhook, controller, certs, sim, gpu_intent; print(gpu_intent.__file__)",
        cwd=tmp_path,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(str(venv)), imported.stdout

    demo = _run(venv / "bin" / "gpu-intent", "demo", cwd=tmp_path, timeout=180)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "OK: every GPU pod got a node" in demo.stdout
    assert "trigger pods left: 0" in demo.stdout
