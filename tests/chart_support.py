"""Run the real ``helm`` on charts/gpu-intent and read what it renders.

``helm`` is the v3.17 binary `tools/install_helm.py` puts next to this Python (``make
test`` runs it); a test that needs it fails with that hint when it is missing.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "gpu-intent"
VALUES = Path(__file__).parent / "fixtures" / "chart-values"
#: Every values file of the matrix, by stem: default, cert-manager-off, custom-selectors, ...
MATRIX = sorted(p.stem for p in VALUES.glob("*.yaml"))
RELEASE = "gpu-intent"
NAMESPACE = "gpu-intent-system"
#: Kinds whose objects have no namespace.
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}

Obj = dict[str, Any]


@functools.cache
def helm_binary() -> str:
    """Path of ``helm``: this Python's bin/ first, then $PATH."""
    found = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")
    if found is None:
        pytest.fail("helm is not installed: run `make test` or `python tools/install_helm.py`")
    return found


def helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``helm *args`` (no cluster is contacted by lint and template)."""
    done = subprocess.run(
        [helm_binary(), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(map(str, args))}: {done.stderr}")
    return done


@functools.cache
def _render(args: tuple[str, ...]) -> tuple[Obj, ...]:
    out = helm("template", *args).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def render(
    values: str | None = "default",
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    sets: Iterable[str] = (),
) -> list[Obj]:
    """The objects ``helm template`` renders for values file ``values`` of the matrix."""
    args = [release, str(CHART), "--namespace", namespace]
    if values is not None:
        args += ["--values", str(VALUES / f"{values}.yaml")]
    for s in sets:
        args += ["--set", s]
    return [dict(doc) for doc in _render(tuple(args))]


def find(docs: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """The objects of ``kind`` (named ``name`` when given)."""
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    """The only object of ``kind`` (named ``name``); fails unless there is exactly one."""
    found = find(docs, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def pod_specs(docs: Iterable[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, pod spec) of every Deployment, Job and CronJob."""
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield d, d["spec"]["template"]["spec"]
        elif d["kind"] == "CronJob":
            yield d, d["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def container(docs: Iterable[Obj], deployment: str) -> Obj:
    """The only container of Deployment ``deployment``."""
    [c] = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return dict(c)


def flags(args: Iterable[str]) -> dict[str, str | None]:
    """``--name=value`` and bare ``--name`` arguments as {name: value or None}."""
    out: dict[str, str | None] = {}
    for arg in args:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            out[name] = value if eq else None
    return out


def rules(role: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every permission a Role or ClusterRole grants."""
    return [
        (group, resource, verb)
        for rule in role.get("rules") or ()
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
        for verb in rule.get("verbs") or ()
    ]
