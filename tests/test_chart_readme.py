"""The README's "Installing with Helm" commands are the ones that work: each
``helm install`` of the chart there is rendered as written (``helm template`` with the
same arguments), and the namespace it names is the one created and excluded."""

from __future__ import annotations

import re
import shlex
import subprocess

import yaml
from chart_support import ROOT, Obj, find, helm_binary, one

SECTION = "## Installing with Helm"


def section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def commands() -> list[list[str]]:
    """Every shell command of the section's ``sh`` blocks, split as a shell would."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                out.append(shlex.split(line))
    return out


def chart_installs() -> list[list[str]]:
    return [c for c in commands() if c[:2] == ["helm", "install"] and "./charts/gpu-intent" in c]


def render_as_written(command: list[str]) -> list[Obj]:
    """``helm template`` with exactly the arguments of ``helm install``, from the repository
    root (the README's working directory)."""
    done = subprocess.run(
        [helm_binary(), "template", *command[2:]],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (command, done.stderr)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def namespace_of(command: list[str]) -> str:
    return command[command.index("--namespace") + 1]


def test_the_readme_installs_with_and_without_cert_manager() -> None:
    installs = chart_installs()
    assert len(installs) == 2
    with_cm, without_cm = (render_as_written(c) for c in installs)
    assert find(with_cm, "Certificate") and not find(with_cm, "Job")
    assert one(without_cm, "Job")["metadata"]["annotations"]["helm.sh/hook"]
    assert not any(d["apiVersion"].startswith("cert-manager.io/") for d in without_cm)
    # --wait only where nothing waits for a post-install hook
    assert "--wait" in installs[0] and "--wait" not in installs[1]


def test_the_readme_installs_cert_manager_with_its_crds_first() -> None:
    cmds = commands()
    cert_manager = next(c for c in cmds if c[:2] == ["helm", "install"] and "jetstack/cert-manager" in c)
    assert "crds.enabled=true" in cert_manager
    assert cmds.index(cert_manager) < cmds.index(chart_installs()[0])
    assert any(c[:3] == ["helm", "repo", "add"] and "jetstack" in c for c in cmds[: cmds.index(cert_manager)])


def test_the_namespace_is_created_before_and_an_opted_in_namespace_is_not_excluded() -> None:
    cmds = commands()
    for install in chart_installs():
        ns = namespace_of(install)
        created = ["kubectl", "create", "namespace", ns]
        assert created in cmds and cmds.index(created) < cmds.index(install)
        docs = render_as_written(install)
        [entry] = one(docs, "MutatingWebhookConfiguration")["webhooks"]
        [label] = [c for c in cmds if c[:3] == ["kubectl", "label", "namespace"]]
        opted_in, setting = label[3], label[4]
        key, _, value = setting.partition("=")
        assert entry["namespaceSelector"]["matchLabels"] == {key: value}
        [excluded] = entry["namespaceSelector"]["matchExpressions"]
        assert ns in excluded["values"] and opted_in not in excluded["values"]


def test_the_certificate_lifetimes_the_readme_states_are_the_charts() -> None:
    days, before = map(int, re.search(r"\((\d+) days, renewed (\d+) days before expiry\)", section()).groups())  # type: ignore[union-attr]
    ca_years = int(re.search(r"the CA lasts (\d+) years", section()).group(1))  # type: ignore[union-attr]
    docs = render_as_written(chart_installs()[0])
    certs = {d["metadata"]["name"]: d["spec"] for d in find(docs, "Certificate")}
    serving, ca = certs["gpu-intent-webhook"], certs["gpu-intent-ca"]
    assert (serving["duration"], serving["renewBefore"]) == (f"{days * 24}h", f"{before * 24}h")
    assert ca["duration"] == f"{ca_years * 365 * 24}h"
