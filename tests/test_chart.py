"""The Helm chart's controller RBAC and replicas, read without helm (not installed here):
the few template expressions the checked documents use are substituted, then parsed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).parent.parent / "charts" / "gpu-intent"


def render(name: str) -> list[dict[str, Any]]:
    text = (CHART / "templates" / name).read_text()
    text = text.replace("{{ .Release.Namespace }}", "gpu-intent-system")
    text = re.sub(r"labels: \{\{- include .*\}\}", "labels: {}", text)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def values() -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_controller_may_get_create_and_update_leases_only_in_its_namespace() -> None:
    docs = render("rbac.yaml")
    lease_rules = [
        (doc["kind"], doc["metadata"].get("namespace"), rule)
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc["rules"]
        if "coordination.k8s.io" in rule["apiGroups"]
    ]
    assert lease_rules == [
        (
            "Role",
            "gpu-intent-system",
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "create", "update"],
            },
        )
    ]
    [binding] = [
        d
        for d in docs
        if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "gpu-intent-leader-election"
    ]
    assert binding["metadata"]["namespace"] == "gpu-intent-system"
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "gpu-intent-controller",
            "namespace": "gpu-intent-system",
        }
    ]


def test_two_controller_replicas_by_default_with_leader_election_on() -> None:
    controller = values()["controller"]
    assert controller["replicas"] == 2
    election = controller["leaderElection"]
    assert election["enabled"] is True
    assert (
        election["leaseDurationSeconds"],
        election["renewDeadlineSeconds"],
        election["retryPeriodSeconds"],
    ) == (15, 10, 2)
    template = (CHART / "templates" / "controller.yaml").read_text()
    for value in ("leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"):
        assert f".Values.controller.leaderElection.{value}" in template
    assert "--no-leader-elect" in template  # only when disabled
