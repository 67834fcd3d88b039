"""The ``gpu-intent`` flags take their defaults from the components' configuration
(``PlanConfig``, ``TriggerSettings``, ``ControllerConfig``, ``LeaderElectionConfig``,
``ServeOptions``, ``CertSettings``, ...): change one and the command follows, help text
included. And the command line builds each subcommand's options only when it is used, with
the same result."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from certs import write_tls_files
from certs.rotation import CertSettings
from controller.leader import LeaderElectionConfig
from controller.plan import PlanConfig
from controller.reconciler import ControllerConfig
from controller.shutdown import run_until_stopped
from controller.triggers import TriggerSettings
from gpu_intent import cli
from gpu_intent.cli import controller as controller_cli
from gpu_intent.cli import webhook as webhook_cli
from gpu_intent.cli.common import field_default, parameter_default
from gpu_intent.demo import TIMINGS, default_timeout, run_demo
from gpu_intent.demo.manifests import DEFAULT_NODEPOOL
from webhook.certificates import DEFAULT_RELOAD_INTERVAL
from webhook.connections import Timeouts
from webhook.review import DEFAULT_BUDGET
from webhook.scope import Scope
from webhook.server import DRAIN_SECONDS, SHUTDOWN_TIMEOUT, ServeOptions

ROOT = Path(__file__).resolve().parents[1]
WEBHOOK_ARGS = ["webhook", "--tls-cert-file", "c", "--tls-key-file", "k"]


@pytest.fixture(autouse=True)
def _no_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POD_NAMESPACE", "POD_NAME", "LOG_LEVEL", "LOG_FORMAT"):
        monkeypatch.delenv(name, raising=False)


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


def actions(command: str) -> dict[str, argparse.Action]:
    """The options of subcommand ``command``, by dest."""
    (sub,) = (a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


def _planning(plan: PlanConfig, trigger: TriggerSettings) -> dict[str, Any]:
    return {
        "namespace": trigger.namespace,
        "default_nodepool": plan.default_nodepool,
        "provider": trigger.provider.name,
        "gpu_name_label": trigger.gpu_name_label,
        "gpu_memory_label": trigger.gpu_memory_label,
        "binding_triggers": trigger.binding,
        "trigger_image": trigger.image,
        "trigger_priority_class": trigger.priority_class,
        "trigger_deadline_seconds": trigger.deadline_seconds,
        "cover_seconds": plan.cover_seconds,
        "cover_max_seconds": plan.cover_max_seconds,
        "max_triggers": plan.max_triggers,
        "placement": plan.placement.flags(),
    }


def expected_defaults() -> dict[str, dict[str, Any]]:
    """Each subcommand's flag defaults (by dest) as the components define them."""
    plan, trigger, config = PlanConfig(), TriggerSettings(), ControllerConfig()
    options, timeouts = ServeOptions(), Timeouts()

    def lease(name: str) -> Any:
        return field_default(LeaderElectionConfig, name)

    return {
        "webhook": {
            "release_namespace": trigger.namespace,
            "tls_reload_interval": options.reload_interval,
            "header_timeout": timeouts.header,
            "body_timeout": timeouts.body,
            "idle_timeout": timeouts.idle,
            "shutdown_timeout": options.shutdown_timeout,
            "drain_seconds": DRAIN_SECONDS,
            "review_budget": options.review_budget,
        },
        "controller": {
            **_planning(plan, trigger),
            "max_gpus_per_trigger": plan.max_gpus_per_trigger,
            "max_triggers_per_pool": plan.max_triggers_per_pool,
            "retry_base_seconds": plan.retry_base_seconds,
            "retry_max_seconds": plan.retry_max_seconds,
            "retry_attempts": plan.retry_attempts,
            "init_timeout_seconds": plan.init_timeout_seconds,
            "cooldown_seconds": plan.cooldown_seconds,
            "protect_seconds": config.protect_seconds,
            "dra": config.dra,
            "pass_idle_seconds": config.idle_seconds,
            "pass_max_delay_seconds": config.max_delay_seconds,
            "resync_seconds": config.resync_seconds,
            "report_writes_per_second": config.report_writes_per_second,
            "shutdown_timeout": parameter_default(run_until_stopped, "grace_seconds"),
            "leader_election_lease_name": lease("name"),
            "leader_election_lease_duration": lease("lease_seconds"),
            "leader_election_renew_deadline": lease("renew_deadline_seconds"),
            "leader_election_retry_period": lease("retry_seconds"),
        },
        "demo": {
            **_planning(plan, trigger),
            "default_nodepool": DEFAULT_NODEPOOL,
            "timings": parameter_default(run_demo, "timings"),
            "output": parameter_default(run_demo, "output"),
        },
        "certs": {
            "ca_days": field_default(CertSettings, "ca_days"),
            "renew_before_days": field_default(CertSettings, "renew_before_days"),
        },
    }


CASES = [(c, d, v) for c, flags in expected_defaults().items() for d, v in flags.items()]


@pytest.mark.parametrize(("command", "dest", "expected"), CASES)
def test_each_flag_default_is_its_components(command: str, dest: str, expected: Any) -> None:
    action = actions(command)[dest]
    assert action.default == expected
    assert type(action.default) is type(expected)
    help_text = action.help or ""
    if "default " in help_text:
        shown = f"{expected:g}" if isinstance(expected, float) else str(expected)
        assert f"default {shown}" in help_text, (dest, help_text)


def test_the_constants_the_defaults_come_from_agree() -> None:
    """What ServeOptions and the command default to, and the chart's namespace."""
    assert ServeOptions().reload_interval == DEFAULT_RELOAD_INTERVAL
    assert ServeOptions().shutdown_timeout == SHUTDOWN_TIMEOUT
    assert ServeOptions().review_budget == DEFAULT_BUDGET
    assert TriggerSettings().namespace == cli.TRIGGER_NAMESPACE


def test_default_flags_make_the_default_configurations() -> None:
    """Whole configurations: a flag added to a dataclass and to the command cannot drift."""
    args = parse("controller")
    config = controller_cli.controller_config(args)
    assert config == dataclasses.replace(
        ControllerConfig(), trigger_creates_per_second=controller_cli.TRIGGER_CREATES_PER_SECOND
    )
    assert cli.plan_config(args) == PlanConfig()
    lease = controller_cli.leader_election_config(args, config)
    assert lease == LeaderElectionConfig(namespace=config.namespace, identity=lease.identity)
    options = webhook_cli.serve_options(parse(*WEBHOOK_ARGS))
    expected = ServeOptions(scope=Scope.for_release(cli.TRIGGER_NAMESPACE))
    assert options == dataclasses.replace(expected, drain_seconds=DRAIN_SECONDS)


def test_help_texts_show_the_derived_values() -> None:
    demo = actions("demo")
    fast, eks = (default_timeout(TIMINGS[name]) for name in ("fast", "eks"))
    assert f"{fast:g} with fast timings, {eks:g} with eks" in (demo["timeout"].help or "")
    assert demo["timings"].choices == tuple(TIMINGS)
    days = actions("certs")["days"].help or ""
    files = parameter_default(write_tls_files, "days")
    assert f"{field_default(CertSettings, 'days')} with --secret, {files} with --out-dir" in days


@pytest.mark.parametrize(
    "argv",
    [
        WEBHOOK_ARGS,
        ["--log-level", "debug", "controller", "--no-leader-elect", "--max-triggers", "3"],
        ["demo", "--timings", "eks", "--kube-scheduler-scoring", "MostAllocated"],
        ["explain", "-f", "-", "-o", "json"],
        ["certs", "--out-dir", "d", "--dns-name", "a"],
    ],
)
def test_options_added_on_use_parse_the_same(argv: list[str]) -> None:
    lazy = cli.build_parser(complete=False).parse_args(argv)
    assert lazy == cli.build_parser().parse_args(argv)


def test_parsing_a_webhook_command_line_loads_no_controller() -> None:
    """Nor the Kubernetes client, nor the sim: the webhook starts small."""
    code = (
        "import sys; from gpu_intent.cli import build_parser;"
        f" build_parser(complete=False).parse_args({WEBHOOK_ARGS!r});"
        " print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('controller', 'kubernetes_asyncio', 'sim')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "[]"
