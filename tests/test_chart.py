"""The Helm chart, rendered by the real ``helm`` (tests/chart_support.py) over the values
files of tests/fixtures/chart-values: the objects and fields issue 10 asks for."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import (
    CHART,
    CLUSTER_SCOPED,
    MATRIX,
    NAMESPACE,
    RELEASE,
    VALUES,
    Obj,
    container,
    find,
    flags,
    helm,
    one,
    pod_specs,
    render,
    rules,
)
from controller_fixtures import nodepool

from controller.model import GroupKey, PodRef
from controller.nodes import parse_nodepool
from controller.triggers import TriggerSettings, trigger_pod
from gpu_intent.cli import build_parser, plan_config
from intent.catalog import load_catalog
from intent.contract import INJECT_LABEL, INJECT_VALUE
from sim.affinity import selector_matches

FULLNAME = RELEASE  # the release name contains the chart name
WEBHOOK = f"{FULLNAME}-webhook"
CONTROLLER = f"{FULLNAME}-controller"
TLS_SECRET = f"{FULLNAME}-tls"
MWC = f"{FULLNAME}-{NAMESPACE}"


def subcommand(name: str) -> argparse.ArgumentParser:
    """The argparse parser of ``gpu-intent <name>``."""
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser = sub.choices[name]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def options(name: str) -> set[str]:
    """Every long option of ``gpu-intent <name>``."""
    return {
        s for a in subcommand(name)._actions for s in a.option_strings if s.startswith("--")
    } - {"--help"}


def webhook_entry(docs: list[Obj]) -> Obj:
    [entry] = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    return dict(entry)


@pytest.mark.parametrize("values", MATRIX)
def test_helm_lint_strict_passes(values: str) -> None:
    done = helm("lint", "--strict", CHART, "--values", VALUES / f"{values}.yaml")
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("values", MATRIX)
def test_every_container_command_line_is_one_gpu_intent_accepts(values: str) -> None:
    """The args of each container parse with gpu-intent's own argparse parser, so a
    renamed or mistyped flag fails here and not in a crash-looping pod."""
    parser = build_parser()
    seen = 0
    for _, spec in pod_specs(render(values)):
        for c in spec["containers"]:
            args = c["args"]
            if args[1] == "certs" and "--secret" not in options("certs"):
                continue  # the certs command's cluster mode is another branch's (issue 10)
            parsed = parser.parse_args(args)
            assert parsed.command == c["name"]
            seen += 1
    assert seen >= 2


def test_every_controller_and_webhook_flag_is_reachable_from_values() -> None:
    used: dict[str, set[str]] = {"controller": set(), "webhook": set()}
    for values in MATRIX:
        for name in used:
            used[name] |= set(flags(container(render(values), f"{FULLNAME}-{name}")["args"]))
    # the kubeconfig flags are for running outside a cluster: in a pod the service account is used
    assert options("controller") - {"--kubeconfig", "--context"} <= used["controller"]
    assert options("webhook") <= used["webhook"]


def test_two_controller_replicas_by_default_with_leader_election_on() -> None:
    docs = render("default")
    deployment = one(docs, "Deployment", CONTROLLER)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    args = flags(container(docs, CONTROLLER)["args"])
    assert "--leader-elect" in args and "--no-leader-elect" not in args
    assert args["--leader-election-namespace"] == NAMESPACE
    # the Lease is named after the release, so two releases never share one
    assert args["--leader-election-lease-name"] == CONTROLLER
    assert (
        args["--leader-election-lease-duration"],
        args["--leader-election-renew-deadline"],
        args["--leader-election-retry-period"],
    ) == ("15", "10", "2")
    pdb = one(docs, "PodDisruptionBudget", CONTROLLER)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert selector_matches(pdb["spec"]["selector"], labels)


def test_one_replica_runs_without_leader_election_and_never_two_at_once() -> None:
    docs = render("one-replica")
    deployment = one(docs, "Deployment", CONTROLLER)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    args = flags(container(docs, CONTROLLER)["args"])
    assert "--no-leader-elect" in args and "--leader-elect" not in args
    assert find(docs, "PodDisruptionBudget") == []  # a PDB of one pod would block drains
    bad = helm(
        "template", RELEASE, CHART, "--set", "controller.leaderElection.enabled=false", check=False
    )
    assert bad.returncode != 0 and "controller" in bad.stderr


def test_the_controller_may_get_create_and_update_leases_only_in_its_namespace() -> None:
    docs = render("default")
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
            NAMESPACE,
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "create", "update"],
            },
        )
    ]
    [binding] = [
        d
        for d in find(docs, "RoleBinding")
        if d["roleRef"]["name"] == f"{CONTROLLER}-leader-election"
    ]
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}
    ]


def _grants(docs: list[Obj], service_account: str) -> dict[tuple[str, str | None], set[Any]]:
    """(kind, namespace) of the binding -> (group, resource, verb) granted to the account."""
    out: dict[tuple[str, str | None], set[Any]] = {}
    for binding in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding"):
        if not any(s["name"] == service_account for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        role = one(docs, ref["kind"], ref["name"])
        scope = (binding["kind"], binding["metadata"].get("namespace"))
        out.setdefault(scope, set()).update(rules(role))
    return out


def test_controller_rbac_is_what_it_calls_and_nothing_else() -> None:
    grants = _grants(render("default"), CONTROLLER)
    read = {"get", "list", "watch"}
    assert grants[("ClusterRoleBinding", None)] == {
        *{("", "pods", v) for v in {*read, "patch"}},
        *{("", "nodes", v) for v in {*read, "patch"}},
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        *{("karpenter.sh", r, v) for r in ("nodepools", "nodeclaims") for v in read},
        # karpenter.sh/do-not-disrupt on new NodeClaims (Kube.annotate_nodeclaim) and a
        # NodeClaim that never initializes deleted (Kube.delete_nodeclaim)
        ("karpenter.sh", "nodeclaims", "patch"),
        ("karpenter.sh", "nodeclaims", "delete"),
        *{("resource.k8s.io", r, v) for r in ("resourceclaims", "resourceslices") for v in read},
        *{(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")},
        # Karpenter's Nominated Events in every namespace (native pods' nominations
        # hold GPUs: controller.plan.native_reserved)
        ("", "events", "list"),
        ("", "events", "watch"),
    }
    assert grants[("RoleBinding", NAMESPACE)] == {
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "pods/status", "patch"),
        ("", "events", "list"),
        ("", "events", "watch"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    }
    assert set(grants) == {("ClusterRoleBinding", None), ("RoleBinding", NAMESPACE)}


@pytest.mark.parametrize("values", MATRIX)
def test_no_rbac_wildcard_and_no_cluster_wide_pod_create_or_delete(values: str) -> None:
    docs = render(values)
    for role in find(docs, "Role") + find(docs, "ClusterRole"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
        if role["kind"] == "ClusterRole":
            granted = rules(role)
            for verb in ("create", "delete", "deletecollection"):
                assert ("", "pods", verb) not in granted
            assert not any(r == "secrets" for _, r, _ in granted)
    # the webhook calls no API: no token, no binding
    deployment = one(docs, "Deployment", WEBHOOK)
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert _grants(docs, WEBHOOK) == {}


@pytest.mark.parametrize("values", MATRIX)
def test_every_pod_meets_the_restricted_pod_security_standard(values: str) -> None:
    for workload, spec in pod_specs(render(values)):
        name = workload["metadata"]["name"]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["runAsNonRoot"] is True, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
            assert c["image"] == "ghcr.io/gpu-intent/gpu-intent:0.1.0"
        # no sidecars: each component serves its own metrics and health
        assert len(spec["containers"]) == 1 and "initContainers" not in spec


def test_webhook_deployment_replicas_pdb_spread_probes_and_certificate() -> None:
    docs = render("default")
    deployment = one(docs, "Deployment", WEBHOOK)
    spec = deployment["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert selector_matches(spec["selector"], labels)
    pdb = one(docs, "PodDisruptionBudget", WEBHOOK)
    assert pdb["spec"]["maxUnavailable"] == 1 and selector_matches(pdb["spec"]["selector"], labels)
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    assert {s["topologyKey"] for s in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert all(selector_matches(s["labelSelector"], labels) for s in spread)
    c = container(docs, WEBHOOK)
    args = flags(c["args"])
    [port] = c["ports"]
    assert args["--listen"] == f"0.0.0.0:{port['containerPort']}"
    assert args["--release-namespace"] == NAMESPACE
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        assert c[probe]["httpGet"] == {"path": path, "port": port["name"], "scheme": "HTTPS"}
    [mount] = c["volumeMounts"]
    assert args["--tls-cert-file"] == f"{mount['mountPath']}/tls.crt"
    assert args["--tls-key-file"] == f"{mount['mountPath']}/tls.key"
    [volume] = spec["template"]["spec"]["volumes"]
    assert volume == {"name": mount["name"], "secret": {"secretName": TLS_SECRET}}
    # SIGTERM: --drain-seconds still serving, then requests in progress get
    # --shutdown-timeout, the pod a little more than both
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(args["--drain-seconds"] or 0) + float(args["--shutdown-timeout"] or 0)
    service = one(docs, "Service", WEBHOOK)
    assert selector_matches({"matchLabels": service["spec"]["selector"]}, labels)
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": port["name"], "protocol": "TCP"}
    ]


def test_metrics_services_select_their_pods() -> None:
    docs = render("default")
    service = one(docs, "Service", f"{CONTROLLER}-metrics")
    deployment = one(docs, "Deployment", CONTROLLER)
    assert selector_matches(
        {"matchLabels": service["spec"]["selector"]},
        deployment["spec"]["template"]["metadata"]["labels"],
    )
    c = container(docs, CONTROLLER)
    [port] = c["ports"]
    assert flags(c["args"])["--metrics-address"] == f"0.0.0.0:{port['containerPort']}"
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_webhook_configuration_defaults() -> None:
    docs = render("default")
    entry = webhook_entry(docs)
    assert entry["admissionReviewVersions"] == ["v1"]
    assert entry["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert entry["sideEffects"] == "None"
    assert entry["failurePolicy"] == "Ignore"
    assert entry["reinvocationPolicy"] == "IfNeeded"
    assert 1 <= entry["timeoutSeconds"] <= 5
    assert "matchConditions" not in entry
    assert entry["clientConfig"]["service"] == {
        "name": WEBHOOK,
        "namespace": NAMESPACE,
        "path": "/mutate",
        "port": one(docs, "Service", WEBHOOK)["spec"]["ports"][0]["port"],
    }


def test_namespace_selector_takes_opted_in_namespaces_but_never_kube_system_or_its_own() -> None:
    selector = webhook_entry(render("default"))["namespaceSelector"]

    def namespace(name: str, opted_in: bool) -> dict[str, str]:
        labels = {"kubernetes.io/metadata.name": name}
        return {**labels, INJECT_LABEL: INJECT_VALUE} if opted_in else labels

    assert selector_matches(selector, namespace("ml", True))
    assert not selector_matches(selector, namespace("ml", False))
    assert not selector_matches(selector, namespace("kube-system", True))
    assert not selector_matches(selector, namespace(NAMESPACE, True))
    # another release namespace is excluded from its own release's render
    other = webhook_entry(render("default", namespace="gpu"))["namespaceSelector"]
    assert not selector_matches(other, namespace("gpu", True))
    assert selector_matches(other, namespace(NAMESPACE, True))


def test_object_selector_leaves_the_controllers_trigger_pods_out() -> None:
    selector = webhook_entry(render("default"))["objectSelector"]
    pool = parse_nodepool(nodepool("gpu-standard", models=["l4"]))
    trigger = trigger_pod(
        GroupKey("gpu-standard", "l4"), 1, pool, [PodRef("ml", "a", "u-a")], TriggerSettings(),
        name="gi-gpu-standard-l4-aaaaaaaaaa",
    )  # fmt: skip
    assert not selector_matches(selector, trigger["metadata"]["labels"])
    assert selector_matches(selector, {"app": "train"})
    assert selector_matches(selector, {})


def test_custom_selectors_are_anded_with_the_exclusions() -> None:
    docs = render("custom-selectors")
    entry = webhook_entry(docs)
    assert (entry["failurePolicy"], entry["timeoutSeconds"]) == ("Fail", 10)
    ns = {"kubernetes.io/metadata.name": "ml", INJECT_LABEL: INJECT_VALUE}
    selector = entry["namespaceSelector"]
    assert selector_matches(selector, {**ns, "team": "ml"})
    assert not selector_matches(selector, ns)  # no team label
    monitoring = {**ns, "team": "ml", "kubernetes.io/metadata.name": "monitoring"}
    assert not selector_matches(selector, monitoring)
    assert not selector_matches(
        selector, {**ns, "team": "ml", "kubernetes.io/metadata.name": NAMESPACE}
    )
    objects = entry["objectSelector"]
    assert selector_matches(objects, {"app": "x"})
    assert not selector_matches(objects, {"gpu-intent.io/skip": ""})
    assert not selector_matches(objects, {"gpu-intent.io/trigger": "true"})
    for name in (WEBHOOK, CONTROLLER):
        deployment = one(docs, "Deployment", name)
        assert (
            deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
        )
    args = flags(container(docs, CONTROLLER)["args"])
    assert args["--default-nodepool"] == "gpu-standard"
    assert args["--trigger-priority-class"] == "gpu-intent-trigger"


def test_the_catalog_value_reaches_the_webhook_as_a_file_it_loads(tmp_path: Path) -> None:
    docs = render("custom-selectors")
    configmap = one(docs, "ConfigMap", f"{WEBHOOK}-catalog")
    file = tmp_path / "catalog.yaml"
    file.write_text(configmap["data"]["catalog.yaml"])
    assert load_catalog(file).gpus["rtx-pro-6000"].memory_mib == 98304
    c = container(docs, WEBHOOK)
    mount = next(m for m in c["volumeMounts"] if m["name"] == "catalog")
    assert flags(c["args"])["--catalog"] == f"{mount['mountPath']}/catalog.yaml"


def test_the_catalog_value_reaches_the_controller_as_a_file_it_loads(tmp_path: Path) -> None:
    """controller.catalog, as webhook.catalog: a ConfigMap mounted where the controller's
    --catalog points (its checksum rolls the pods), which its command line loads; none of
    it without the value."""
    from gpu_intent.cli.common import read_catalog
    from gpu_intent.cli.controller import controller_config

    docs = render("custom-selectors")
    configmap = one(docs, "ConfigMap", f"{CONTROLLER}-catalog")
    template = one(docs, "Deployment", CONTROLLER)["spec"]["template"]
    [volume] = template["spec"]["volumes"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert "checksum/catalog" in template["metadata"]["annotations"]
    c = container(docs, CONTROLLER)
    [mount] = (m for m in c["volumeMounts"] if m["name"] == volume["name"])
    assert flags(c["args"])["--catalog"] == f"{mount['mountPath']}/catalog.yaml"
    file = tmp_path / "catalog.yaml"
    file.write_text(configmap["data"]["catalog.yaml"])
    here = [f"--catalog={file}" if a.startswith("--catalog=") else a for a in c["args"]]
    args = build_parser().parse_args(here)
    catalog = controller_config(args, read_catalog(args)).catalog
    assert catalog is not None and catalog.gpus["rtx-pro-6000"].memory_mib == 98304
    plain = render("default")
    assert find(plain, "ConfigMap", f"{CONTROLLER}-catalog") == []
    assert "--catalog" not in flags(container(plain, CONTROLLER)["args"])
    assert "volumes" not in one(plain, "Deployment", CONTROLLER)["spec"]["template"]["spec"]


def test_the_placement_values_become_the_controllers_placement() -> None:
    """controller.placement.<layer> renders one --placement flag each; by default they
    make the layers' own defaults, and a value set replaces that layer's."""
    from controller.placement import Placements, parse_requirement

    parser = build_parser()

    def placement(*sets: str) -> Placements:
        args = container(render("default", sets=sets), CONTROLLER)["args"]
        return plan_config(parser.parse_args(args)).placement

    assert placement() == Placements()
    changed = placement("controller.placement.hami=accelerator=vgpu", "controller.placement.kai=")
    assert changed.hami == (parse_requirement("accelerator=vgpu"),)
    assert changed.kai == ()
    assert changed.dra == Placements().dra


def test_the_provider_value_becomes_the_controllers_provider() -> None:
    """controller.provider renders --provider (default aws); the label values, empty by
    default, override the provider's labels only when set."""
    parser = build_parser()

    def trigger(values: str, *sets: str) -> Any:
        args = container(render(values, sets=sets), CONTROLLER)["args"]
        return plan_config(parser.parse_args(args)).trigger

    default = trigger("default")
    assert (default.provider.name, default.gpu_name_label, default.gpu_memory_label) == (
        "aws",
        None,
        None,
    )
    assert trigger("default", "controller.provider=azure").provider.name == "azure"
    tke = trigger("provider")
    assert tke.provider.name == "tke"
    assert tke.profile.model_label == "example.com/gpu-model"
    assert tke.profile.gpu_memory_label == "example.com/gpu-memory-mib"


def test_binding_triggers_value_sets_the_flag() -> None:
    assert "--binding-triggers" in flags(container(render("binding-triggers"), CONTROLLER)["args"])
    assert "--binding-triggers" not in flags(container(render("default"), CONTROLLER)["args"])


def test_cert_manager_chain_signs_the_serving_certificate_with_a_long_lived_ca() -> None:
    """cert-manager#6350: signing the serving certificate straight from a self-signed
    Issuer changes the CA at every renewal; a CA Issuer keeps it."""
    docs = render("default")
    issuers = {d["metadata"]["name"]: d["spec"] for d in find(docs, "Issuer")}
    certs = {d["metadata"]["name"]: d["spec"] for d in find(docs, "Certificate")}
    serving = certs[WEBHOOK]
    assert serving["secretName"] == TLS_SECRET
    ca_issuer = issuers[serving["issuerRef"]["name"]]
    assert "selfSigned" not in ca_issuer
    [ca_cert] = [c for c in certs.values() if c["secretName"] == ca_issuer["ca"]["secretName"]]
    assert ca_cert["isCA"] is True
    assert issuers[ca_cert["issuerRef"]["name"]] == {"selfSigned": {}}

    def hours(text: str) -> float:
        assert text.endswith("h")
        return float(text[:-1])

    assert hours(ca_cert["duration"]) > 10 * hours(serving["duration"])
    assert hours(serving["renewBefore"]) < hours(serving["duration"])
    assert f"{WEBHOOK}.{NAMESPACE}.svc" in serving["dnsNames"]
    mwc = one(docs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{WEBHOOK}"
    }
    assert find(docs, "Job") == [] and find(docs, "CronJob") == []


def test_without_cert_manager_a_hook_job_runs_gpu_intent_certs_with_just_enough_rbac() -> None:
    docs = render("cert-manager-off")
    assert not any(d["apiVersion"].startswith("cert-manager.io/") for d in docs)
    mwc = one(docs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["name"] == MWC and "annotations" not in mwc["metadata"]
    job = one(docs, "Job")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert hooks == {"post-install", "post-upgrade"}
    command = [
        "certs",
        "--secret", TLS_SECRET,
        "--namespace", NAMESPACE,
        "--service", WEBHOOK,
        "--webhook-configuration", MWC,
    ]  # fmt: skip
    cron = one(docs, "CronJob")
    for spec in (
        job["spec"]["template"]["spec"],
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    ):
        [c] = spec["containers"]
        assert c["args"][1 : 1 + len(command)] == command
        assert spec["serviceAccountName"] == f"{FULLNAME}-certs"
    # the webhook mounts the Secret the Job writes
    volumes = one(docs, "Deployment", WEBHOOK)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": TLS_SECRET}} in volumes
    role = one(docs, "Role", f"{FULLNAME}-certs")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [TLS_SECRET],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    cluster_role = one(docs, "ClusterRole", f"{MWC}-certs")
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": [MWC],
            "verbs": ["get", "patch"],
        }
    ]
    grants = _grants(docs, f"{FULLNAME}-certs")
    assert set(grants) == {("RoleBinding", NAMESPACE), ("ClusterRoleBinding", None)}


def test_two_releases_render_no_colliding_names() -> None:
    """Release names are unique per namespace only: cluster-scoped names carry both, and
    two releases in one namespace share no name (nor a Lease)."""
    for values in ("default", "cert-manager-off", "monitoring"):
        a = render(values, release="gpu-intent", namespace="a")
        b = render(values, release="gpu-intent", namespace="b")
        other = render(values, release="other", namespace="a")
        cluster = [
            (d["kind"], d["metadata"]["name"])
            for docs in (a, b, other)
            for d in docs
            if d["kind"] in CLUSTER_SCOPED
        ]
        assert len(cluster) == len(set(cluster)) > 0
        in_a = [(d["kind"], d["metadata"]["name"]) for docs in (a, other) for d in docs]
        assert len(in_a) == len(set(in_a))
        leases = {
            flags(container(docs, name)["args"])["--leader-election-lease-name"]
            for docs, name in ((a, CONTROLLER), (other, "other-gpu-intent-controller"))
        }
        assert len(leases) == 2


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("webhook.timeoutSeconds=60", "webhook.timeoutSeconds: Must be less than or equal to 30"),
        ("webhook.timeoutSeconds=0", "webhook.timeoutSeconds: Must be greater than or equal to 1"),
        ("webhook.failurePolicy=Sometimes", "webhook.failurePolicy"),
        ("webhook.reinvocationPolicy=Always", "webhook.reinvocationPolicy"),
        ("controller.replicas=0", "controller.replicas"),
        ("logLevel=LOUD", "logLevel"),
        ("webhook.tiemoutSeconds=5", "tiemoutSeconds"),
    ],
)
def test_schema_rejects_values_the_api_or_the_command_would(setting: str, message: str) -> None:
    done = helm("template", RELEASE, CHART, "--set", setting, check=False)
    assert done.returncode != 0
    assert message in done.stderr


def test_schema_accepts_the_edges_of_the_api_ranges() -> None:
    for timeout in (1, 30):
        entry = webhook_entry(render(None, sets=[f"webhook.timeoutSeconds={timeout}"]))
        assert entry["timeoutSeconds"] == timeout


def test_monitoring_objects_scrape_the_right_ports() -> None:
    docs = render("monitoring")
    monitors = {d["metadata"]["name"]: d for d in find(docs, "ServiceMonitor")}
    assert set(monitors) == {CONTROLLER, WEBHOOK}
    for name, service_name in ((CONTROLLER, f"{CONTROLLER}-metrics"), (WEBHOOK, WEBHOOK)):
        monitor = monitors[name]
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        service = one(docs, "Service", service_name)
        assert selector_matches(monitor["spec"]["selector"], service["metadata"]["labels"])
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
    webhook_endpoint = monitors[WEBHOOK]["spec"]["endpoints"][0]
    assert webhook_endpoint["scheme"] == "https"
    assert webhook_endpoint["tlsConfig"]["ca"]["secret"] == {"name": TLS_SECRET, "key": "ca.crt"}
    dashboard = one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert yaml.safe_load(dashboard["data"]["gpu-intent.json"])["uid"] == "gpu-intent"
    assert find(render("default"), "ServiceMonitor") == []


def test_values_yaml_documents_every_value() -> None:
    """Every value in values.yaml has a comment line right above it, or sits in a map
    (resources, matchLabels) whose key has one."""
    lines = (CHART / "values.yaml").read_text().splitlines()

    def commented(i: int) -> bool:
        return i > 0 and lines[i - 1].strip().startswith("#")

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "- ")):
            continue
        key, _, value = stripped.partition(":")
        if not value.strip():
            continue  # a map's key: its values are checked
        parent = next(
            (
                j
                for j in range(i - 1, -1, -1)
                if lines[j].strip() and indent(lines[j]) < indent(line)
            ),
            None,
        )
        assert commented(i) or (parent is not None and commented(parent)), (
            f"values.yaml line {i + 1}: {key} has no comment"
        )


def test_notes_name_the_opt_in_label_and_kubectl_describe() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert f"kubectl label namespace <namespace> {INJECT_LABEL}={INJECT_VALUE}" in notes
    assert "kubectl describe pod" in notes


def test_no_template_renders_key_material() -> None:
    """cert-manager or the certs Job write the Secret; the chart never holds a key."""
    for values in MATRIX:
        docs = render(values)
        assert find(docs, "Secret") == []
        assert "PRIVATE KEY" not in yaml.safe_dump_all(docs)


@pytest.mark.parametrize(("values", "expected"), [("default", "text"), ("monitoring", "json")])
def test_every_container_gets_the_log_format(
    values: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """logFormat reaches each container as $LOG_FORMAT, the default of gpu-intent's
    --log-format (an option of the CLI branch of issue 10; where the parser has it, the
    rendered command line is parsed with that environment)."""
    global_options = {s for a in build_parser()._actions for s in a.option_strings}
    for _, spec in pod_specs(render(values)):
        [c] = spec["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["LOG_FORMAT"] == expected
        if "--log-format" in global_options and (
            c["name"] != "certs" or "--secret" in options("certs")
        ):
            monkeypatch.setenv("LOG_FORMAT", expected)
            assert build_parser().parse_args(c["args"]).log_format == expected
