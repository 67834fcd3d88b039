"""The chart's dashboard and alerts query metrics gpu-intent really exports, with label
values it really uses: a renamed metric would otherwise leave a silent, empty panel or
an alert that never fires."""

from __future__ import annotations

import json
import re
from typing import get_args

import promql_parser
import pytest
from chart_support import CHART, one, render
from prometheus_client import CollectorRegistry

from controller.memory import TRACKED_PHASES
from controller.metrics import ControllerMetrics
from controller.model import TRIGGERED
from webhook.review import Outcome
from webhook.server import WebhookMetrics

#: Metrics of other programs the alerts use: Karpenter's (karpenter.sh/docs/reference/
#: metrics) and kube-apiserver's webhook fail-open counter.
EXTERNAL = {
    "karpenter_nodeclaims_disrupted_total",
    "karpenter_nodeclaims_created_total",
    "apiserver_admission_webhook_fail_open_count",
}


def exported() -> set[str]:
    """Every series name gpu-intent's controller and webhook expose: gauges by name,
    counters with ``_total``, histograms with ``_bucket``, ``_count`` and ``_sum``
    (prometheus_client's exposition), whether or not a labelled child exists yet."""
    webhook = CollectorRegistry()
    WebhookMetrics(webhook)
    controller = CollectorRegistry()
    ControllerMetrics(controller)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    return {
        family.name + suffix
        for registry in (controller, webhook)
        for family in registry.collect()
        for suffix in suffixes[family.type]
    }


def expressions() -> list[str]:
    dashboard = json.loads((CHART / "dashboards" / "gpu-intent.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rule = one(render("monitoring"), "PrometheusRule")
    exprs += [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    return exprs


def test_every_query_parses_as_promql() -> None:
    """promql-parser (a port of Prometheus' own parser) accepts every expression."""
    for expr in expressions():
        promql_parser.parse(expr)
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(gpu_intent_triggers[5m]) >")


def test_every_queried_metric_exists() -> None:
    names = exported()
    queried = {
        name
        for expr in expressions()
        for name in re.findall(r"\b((?:gpu_intent|karpenter|apiserver)_[a-z_]+)", expr)
    }
    assert queried - EXTERNAL <= names, sorted(queried - EXTERNAL - names)
    assert len(queried - EXTERNAL) >= 8


def test_label_values_in_queries_are_ones_the_code_sets() -> None:
    outcomes = set(get_args(Outcome))
    for expr in expressions():
        for value in re.findall(r'outcome=~?"([^"]+)"', expr):
            assert set(value.split("|")) <= outcomes, expr
        for value in re.findall(r'phase=~?"([^"]+)"', expr):
            assert set(value.split("|")) <= TRACKED_PHASES | {TRIGGERED}, expr
        for value in re.findall(r'name="([^"]+)"', expr):
            [entry] = one(render("default"), "MutatingWebhookConfiguration")["webhooks"]
            assert value == entry["name"], expr


def test_the_alerts_issue_10_asks_for_are_there() -> None:
    rule = one(render("monitoring"), "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "GpuIntentTriggersPendingTooLong",
        "GpuIntentNodeClaimFailureRateHigh",
        "GpuIntentScaleUpSlow",
        "GpuIntentTriggersNotCleanedUp",
        "GpuIntentWebhookErrors",
        "GpuIntentWebhookFailingOpen",
    } <= alerts
