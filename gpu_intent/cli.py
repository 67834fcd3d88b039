"""The ``gpu-intent`` command: ``webhook``, ``controller``, ``explain``, ``certs`` and ``demo``.

Bad input (a missing file, a malformed value, a port in use) ends with one line on stderr
that names the input and exit code 2, never a traceback; argparse checks values with the
type functions below (``_positive`` and friends).

``webhook`` and ``controller`` are the production binaries: they find the cluster the
standard way (``--kubeconfig``, ``$KUBECONFIG``, in-cluster service account,
``~/.kube/config``) and know nothing of the simulated cluster the ``demo`` starts.
``explain`` runs the webhook's inference on manifests, offline.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import signal
import socket
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gpu_intent import __version__
from intent.runtime import tune_gc

if TYPE_CHECKING:
    from controller.plan import PlanConfig

log = logging.getLogger("gpu_intent")

#: Allocations between two young-generation collections in ``gpu-intent webhook``
#: (CPython's default is 700; side by side, the server answered about 8% more requests per CPU
#: second at 20,000).
WEBHOOK_GC_THRESHOLD = 20_000

#: Default namespace for trigger pods (the chart's namespace).
TRIGGER_NAMESPACE = "gpu-intent-system"


#: Top-level description shown by ``gpu-intent --help``.
DESCRIPTION = (
    "gpu-intent makes Karpenter provision GPU nodes for pods that ask for GPUs through a "
    "sharing layer (HAMi, KAI, tensor-fusion): a mutating webhook writes each pod's GPU "
    "intent, a controller turns pending intents into trigger pods Karpenter can see."
)


class _HelpFormatter(argparse.HelpFormatter):
    """Help with each option's default shown, as ``ArgumentDefaultsHelpFormatter`` does,
    except where the help text already says its default or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is argparse.SUPPRESS
            or default is False
            or default == []
            or not action.option_strings
        ):
            return text
        return text + " (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line: ``<prog>: <what is wrong>
    (see <prog> --help)``, exit code 2 (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _positive(text: str) -> float:
    """A finite number > 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    """A finite number >= 0 (seconds or rates where 0 means none)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    """A whole number >= 0 (counts where 0 means none)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    """A whole number > 0 (days, counts that cannot be none)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value


def _log_format(text: str) -> str:
    from intent.logs import LOG_FORMATS

    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_FORMATS)}, got {text!r}")
    return text


def _log_level(text: str) -> str:
    from intent.logs import LOG_LEVELS

    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.upper()


def add_planning_flags(
    parser: argparse.ArgumentParser,
    *,
    namespace: str = TRIGGER_NAMESPACE,
    namespace_help: str = "namespace for trigger pods",
    default_nodepool: str | None = None,
) -> None:
    """Add the controller's planning flags to ``parser`` (``controller`` and ``demo`` share
    them): ``--namespace`` (trigger pods' namespace, default ``namespace``),
    ``--default-nodepool`` (default ``default_nodepool``), ``--gpu-name-label``,
    ``--gpu-memory-label``, ``--binding-triggers``, ``--trigger-image``, ``--trigger-priority-class``, ``--trigger-deadline-seconds``, ``--cover-seconds``, ``--cover-max-seconds`` (seconds) and
    ``--max-triggers``. `plan_config` turns the parsed values into a ``PlanConfig``."""
    parser.add_argument("--namespace", default=namespace, help=namespace_help)
    parser.add_argument(
        "--default-nodepool",
        default=default_nodepool,
        help="NodePool for GPU intents that name no model",
    )
    parser.add_argument(
        "--gpu-name-label",
        default="karpenter.k8s.aws/instance-gpu-name",
        help="node label carrying the GPU model (default: the AWS provider's)",
    )
    parser.add_argument(
        "--gpu-memory-label",
        default="karpenter.k8s.aws/instance-gpu-memory",
        help="node label carrying MiB of memory per GPU, for intents that state memory but "
        "no model (default: the AWS provider's)",
    )
    parser.add_argument(
        "--binding-triggers",
        action="store_true",
        help="make triggers ordinary pods kube-scheduler binds, instead of non-binding ones "
        "(only for clusters that reject pods naming an unknown scheduler)",
    )
    parser.add_argument(
        "--trigger-image",
        default="registry.k8s.io/pause:3.10",
        help="image of trigger pods (never run with non-binding triggers; binding ones run"
        " it until their node is Ready)",
    )
    parser.add_argument(
        "--trigger-priority-class", help="PriorityClass for trigger pods (default: none)"
    )
    parser.add_argument(
        "--trigger-deadline-seconds",
        type=_positive_int,
        default=1800,
        metavar="SECONDS",
        help="activeDeadlineSeconds of trigger pods, a last resort: a kubelet running a "
        "(binding) trigger this long ends it, since one alive that long is a bug or a "
        "stuck NodeClaim (default 1800)",
    )
    parser.add_argument(
        "--cover-seconds",
        type=_positive,
        default=60.0,
        metavar="SECONDS",
        help="how long pods whose node is Ready are left to their scheduler before buying again",
    )
    parser.add_argument(
        "--cover-max-seconds",
        type=_positive,
        default=300.0,
        metavar="SECONDS",
        help="how long that may last while their schedulers are still binding pods "
        "gpu-intent scaled up for (a burst binds one pod after another)",
    )
    parser.add_argument(
        "--max-triggers",
        type=_non_negative_int,
        default=100,
        help="most live trigger pods (0: none)",
    )


def plan_config(args: argparse.Namespace) -> PlanConfig:
    """The ``PlanConfig`` for flags added by `add_planning_flags`."""
    from controller.plan import PlanConfig
    from controller.triggers import TriggerSettings

    return PlanConfig(
        trigger=TriggerSettings(
            namespace=args.namespace,
            image=args.trigger_image,
            gpu_name_label=args.gpu_name_label,
            gpu_memory_label=args.gpu_memory_label,
            priority_class=args.trigger_priority_class,
            binding=args.binding_triggers,
            deadline_seconds=args.trigger_deadline_seconds,
        ),
        default_nodepool=args.default_nodepool,
        cover_seconds=args.cover_seconds,
        cover_max_seconds=args.cover_max_seconds,
        max_triggers=args.max_triggers,
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``gpu-intent`` argument parser: global options, then one subcommand."""
    from intent.logs import LOG_FORMATS, LOG_LEVELS

    parser = _Parser(prog="gpu-intent", description=DESCRIPTION, formatter_class=_HelpFormatter)
    parser.add_argument(
        "--version", action="version", version=f"gpu-intent {__version__}",
        help="print the version and exit",
    )  # fmt: skip
    parser.add_argument(
        "--log-level",
        type=_log_level,
        default=os.environ.get("LOG_LEVEL", "INFO"),
        metavar="LEVEL",
        help=f"least severe log lines shown: {', '.join(LOG_LEVELS)} (default: $LOG_LEVEL or INFO)",
    )
    parser.add_argument(
        "--log-format",
        type=_log_format,  # not choices: argparse checks a $LOG_FORMAT default only by type
        metavar="{" + ",".join(LOG_FORMATS) + "}",
        default=os.environ.get("LOG_FORMAT", "text"),
        help="text: for a person; json: one JSON object per line with time, level, logger,"
        " message and the object (namespace/name) a line is about"
        " (default: $LOG_FORMAT or text)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=summary, description=description, formatter_class=_HelpFormatter
        )

    webhook = command(
        "webhook",
        "serve the mutating admission webhook over HTTPS",
        "Serve the mutating admission webhook over HTTPS: it writes each new pod's GPU"
        " intent as annotations. The certificate files are re-read when they change (a"
        " mounted Secret).",
    )
    webhook.add_argument(
        "--listen", type=_address, default=("0.0.0.0", 8443), metavar="HOST:PORT",
        help="address to serve HTTPS on (default 0.0.0.0:8443)",
    )  # fmt: skip
    webhook.add_argument("--tls-cert-file", required=True, help="PEM certificate (tls.crt)")
    webhook.add_argument(
        "--tls-key-file", required=True, help="PEM private key (tls.key), unencrypted"
    )
    webhook.add_argument(
        "--release-namespace",
        default=os.environ.get("POD_NAMESPACE", TRIGGER_NAMESPACE),
        help="namespace gpu-intent runs in; its pods are never annotated, nor kube-system's"
        " (default: $POD_NAMESPACE or gpu-intent-system)",
    )
    webhook.add_argument(
        "--tls-reload-interval",
        type=_positive,
        default=5.0,
        metavar="SECONDS",
        help="how often the certificate files are re-read; a changed pair that loads"
        " replaces the served one (default 5)",
    )
    webhook.add_argument(
        "--header-timeout",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="TLS handshake and request headers, from connect or from a request's first"
        " byte (default 10)",
    )
    webhook.add_argument(
        "--body-timeout",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="a request's body and answer, from its headers (default 10)",
    )
    webhook.add_argument(
        "--idle-timeout",
        type=_positive,
        default=60.0,
        metavar="SECONDS",
        help="a kept-alive connection waiting for its next request (default 60)",
    )
    webhook.add_argument(
        "--shutdown-timeout",
        type=_positive,
        default=20.0,
        metavar="SECONDS",
        help="after SIGTERM and --drain-seconds, how long requests in progress may take to"
        " finish (default 20)",
    )
    webhook.add_argument(
        "--drain-seconds",
        type=_non_negative,
        default=5.0,
        metavar="SECONDS",
        help="after SIGTERM, how long to keep serving with /readyz answering 503, so that"
        " the pod leaves the Service's endpoints before the listener closes; 0 closes it"
        " at once (default 5)",
    )
    webhook.add_argument(
        "--review-budget",
        type=_positive,
        default=0.05,
        metavar="SECONDS",
        help="CPU time one review may spend inferring a pod's intent; past it the pod is"
        " admitted without an intent, with a warning (outcome \"deadline\"; default 0.05)",
    )
    _add_catalog_flag(webhook)

    explain = command(
        "explain",
        "print each pod template's GPU intent and the reasoning, offline",
        "Run the webhook's inference on the pod templates of manifests (Pods, "
        "Deployments, Jobs, CronJobs, any object with a pod template) without a cluster.",
    )
    explain.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="manifest file, directory of *.yaml/*.yml/*.json, or - for stdin (repeatable)",
    )
    explain.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: for a person; json: a list with the annotation values under their keys "
        "(default text)",
    )
    _add_catalog_flag(explain)

    controller = command(
        "controller",
        "run the trigger controller against a cluster",
        "Run the trigger controller: it watches pods with a GPU intent that no node can"
        " take, creates trigger pods Karpenter provisions nodes for, and tells each pod"
        " what is happening (annotation and Events). Serves /metrics, /livez and /readyz.",
    )
    controller.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    controller.add_argument("--context", help="kubeconfig context (default: current)")
    add_planning_flags(
        controller,
        namespace=os.environ.get("POD_NAMESPACE", TRIGGER_NAMESPACE),
        namespace_help="namespace for trigger pods (default: $POD_NAMESPACE or gpu-intent-system)",
    )
    controller.add_argument(
        "--metrics-address", type=_address, default=("0.0.0.0", 8080), metavar="HOST:PORT",
        help="address to serve /metrics, /livez and /readyz on, plain HTTP (default 0.0.0.0:8080)",
    )  # fmt: skip
    _add_failure_flags(controller)
    controller.add_argument(
        "--pass-idle-seconds",
        type=_positive,
        default=0.1,
        help="plan once changes have been quiet this long (default 0.1)",
    )
    controller.add_argument(
        "--pass-max-delay-seconds",
        type=_positive,
        default=0.5,
        help="plan at most this long after the first change, however busy (default 0.5)",
    )
    controller.add_argument(
        "--resync-seconds",
        type=_positive,
        default=5.0,
        help="plan at least this often with no change (default 5)",
    )
    controller.add_argument(
        "--report-writes-per-second",
        type=_positive,
        default=50.0,
        help="status and Event writes per second at most (default 50); trigger writes are not limited",
    )
    controller.add_argument(
        "--shutdown-timeout",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="after SIGTERM, how long the pass in flight and queued status writes may take "
        "before the rest is cut and the Lease released (default 10; keep it under the pod's "
        "terminationGracePeriodSeconds)",
    )
    controller.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="act only while holding a coordination.k8s.io Lease, so several replicas can "
        "run (default on; --no-leader-elect for a single replica)",
    )
    controller.add_argument(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease (default: the trigger namespace)",
    )
    controller.add_argument(
        "--leader-election-lease-name",
        default="gpu-intent-controller",
        help="name of the Lease (default gpu-intent-controller)",
    )
    controller.add_argument(
        "--leader-election-lease-duration",
        type=_positive,
        default=15.0,
        help="seconds a follower waits after the leader's last renewal before taking over "
        "(default 15)",
    )
    controller.add_argument(
        "--leader-election-renew-deadline",
        type=_positive,
        default=10.0,
        help="seconds the leader keeps trying to renew before it stops acting and exits 1 "
        "(default 10)",
    )
    controller.add_argument(
        "--leader-election-retry-period",
        type=_positive,
        default=2.0,
        help="seconds between attempts to take or renew the Lease (default 2)",
    )

    certs = command(
        "certs",
        "create or renew the webhook's CA and serving certificate",
        "Two modes. --out-dir DIR writes a new CA and serving certificate as files (ca.crt,"
        " tls.crt, and tls.key with mode 0600). --secret NAME (with --namespace, --service,"
        " --webhook-configuration) keeps a Secret in a cluster right: it creates the CA and"
        " the serving certificate if missing, renews the serving certificate within its"
        " renewal window, rotates the CA with the old and new CA both in the caBundle"
        " during the overlap, and patches every caBundle of the"
        " MutatingWebhookConfiguration; with nothing due it changes nothing. It prints one"
        " line saying what it did.",
    )
    certs.add_argument(
        "--out-dir", type=Path,
        help="file mode: directory to write ca.crt, tls.crt and tls.key to",
    )  # fmt: skip
    certs.add_argument(
        "--dns-name", action="append", default=[],
        help="file mode: DNS name of the serving certificate (repeatable)",
    )  # fmt: skip
    certs.add_argument(
        "--ip", action="append", default=[],
        help="file mode: IP address of the serving certificate (repeatable)",
    )  # fmt: skip
    certs.add_argument(
        "--secret", metavar="NAME",
        help="cluster mode: the Secret holding ca.crt, ca.key, tls.crt, tls.key",
    )  # fmt: skip
    certs.add_argument(
        "--namespace", help="cluster mode: namespace of the Secret and the webhook's Service"
    )
    certs.add_argument(
        "--service", metavar="NAME",
        help="cluster mode: the webhook's Service; the certificate names SVC, SVC.NS,"
        " SVC.NS.svc and SVC.NS.svc.cluster.local",
    )  # fmt: skip
    certs.add_argument(
        "--webhook-configuration", metavar="NAME",
        help="cluster mode: the MutatingWebhookConfiguration whose caBundles to patch",
    )  # fmt: skip
    certs.add_argument(
        "--kubeconfig",
        help="cluster mode: kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    certs.add_argument("--context", help="cluster mode: kubeconfig context (default: current)")
    certs.add_argument(
        "--days", type=_positive_int, default=None,
        help="validity of the serving certificate in days (default: 90 with --secret,"
        " 365 with --out-dir, where the CA lives as long)",
    )  # fmt: skip
    certs.add_argument(
        "--ca-days", type=_positive_int, default=1825,
        help="cluster mode: validity of a new CA in days; must exceed --days plus"
        " --renew-before-days",
    )  # fmt: skip
    certs.add_argument(
        "--renew-before-days", type=_non_negative_int, default=30,
        help="cluster mode: renew the serving certificate this many days before it"
        " expires; the CA is rotated once it expires within --days plus this",
    )  # fmt: skip

    demo = command(
        "demo",
        "run the end-to-end story on an embedded simulated cluster",
        "Start a simulated cluster (kube-apiserver, kube-scheduler, Karpenter, kubelets)"
        " in this process with the webhook and the controller, apply the examples and"
        " print what happens to every pod, the NodeClaims bought and their cost.",
    )
    demo.add_argument(
        "--timeout",
        type=_positive,
        metavar="SECONDS",
        default=None,
        help="give up after this many seconds (default: 60 with fast timings, 300 with eks)",
    )
    demo.add_argument(
        "--examples",
        type=Path,
        default=None,
        help="manifests directory; every Pod in it, in any namespace, is followed"
        " (default: examples/)",
    )
    demo.add_argument(
        "--without-controller", action="store_true", help="show what happens without gpu-intent"
    )
    demo.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: timeline, tables and cost on stdout; json: one JSON summary on stdout,"
        " the human text on stderr (default text)",
    )
    demo.add_argument(
        "--timings",
        choices=("fast", "eks"),
        default="fast",
        help="NodeClaim lifecycle delays: fast (the sim's, ~4 s to Ready) or eks (~60 s to"
        " Ready, EKS-like) (default fast)",
    )
    add_planning_flags(
        demo,
        namespace=TRIGGER_NAMESPACE,
        namespace_help="namespace for trigger pods (default gpu-intent-system)",
        default_nodepool="gpu-standard",
    )
    return parser


def _add_catalog_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog",
        metavar="FILE",
        help="GPU catalog YAML merged over the built-in one (intent/catalog.yaml shows "
        "the shape): extra GPUs, spellings, instance types",
    )


def _load_catalog(args: argparse.Namespace) -> bool:
    """Load ``--catalog`` over the built-in catalog and make it the one inference uses;
    False (after saying why on stderr) when it cannot be loaded."""
    from intent.catalog import CatalogError, load_catalog, use_catalog

    try:
        use_catalog(load_catalog(args.catalog))
    except CatalogError as e:
        print(f"gpu-intent {args.command}: {e}", file=sys.stderr)
        return False
    return True


def _explain(args: argparse.Namespace) -> int:
    from gpu_intent.explain import ExplainError, explain, read_documents, render_json, render_text

    if not _load_catalog(args):
        return 2
    try:
        documents = read_documents(args.filename)
    except ExplainError as e:
        print(f"gpu-intent explain: {e}", file=sys.stderr)
        return 2
    explanations = explain(documents)
    render = render_json if args.output == "json" else render_text
    sys.stdout.write(render(explanations) + ("\n" if args.output == "json" else ""))
    return 0


def _os_reason(error: OSError) -> str:
    """``Address already in use`` rather than asyncio's ``error while attempting to bind on
    address (...): address already in use``."""
    return os.strerror(error.errno) if error.errno else str(error)


class UsageError(Exception):
    """Bad input found after parsing (a file that is not there, a port in use): `main`
    prints ``gpu-intent <command>: <message>`` and exits 2."""


def _kubeconfig_problem(path: str | None) -> str | None:
    """Why no cluster configuration can be found, or None if one may be (the order of
    `controller.kube.load_configuration`)."""
    if path is None:
        path = os.environ.get("KUBECONFIG") or None
        origin = "$KUBECONFIG"
    else:
        origin = "--kubeconfig"
    if path:
        first = path.split(os.pathsep)[0]
        if not Path(first).is_file():
            return f"kubeconfig file {first} (from {origin}) does not exist"
        return None
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    default = Path.home() / ".kube" / "config"
    if not default.is_file():
        return (
            f"no cluster to talk to: no --kubeconfig, no $KUBECONFIG, not in a pod"
            f" ($KUBERNETES_SERVICE_HOST unset), and {default} does not exist"
        )
    return None


async def _connect(kubeconfig: str | None, context: str | None) -> Any:
    """An API client for the cluster (`controller.kube.load_configuration`); raises
    `UsageError` when the configuration is missing or does not load."""
    from kubernetes_asyncio import client

    from controller.kube import KubeError, load_configuration

    problem = _kubeconfig_problem(kubeconfig)
    if problem:
        raise UsageError(problem)
    try:
        cfg = await load_configuration(kubeconfig, context)
    except KubeError as e:
        raise UsageError(f"cannot load the cluster configuration: {e.__cause__ or e}") from None
    return client.ApiClient(configuration=cfg)


def _certs(args: argparse.Namespace) -> int:
    """``gpu-intent certs`` in either mode; returns the exit code."""
    cluster = [args.secret, args.namespace, args.service, args.webhook_configuration]
    if args.out_dir is not None:
        if any(cluster):
            raise UsageError("give either --out-dir or --secret (with its options), not both")
        return _certs_to_files(args)
    if not all(cluster):
        raise UsageError(
            "give --out-dir DIR, or --secret, --namespace, --service and"
            " --webhook-configuration together"
        )
    from certs.incluster import CertsError
    from certs.rotation import CertSettings

    try:
        settings = CertSettings(
            service=args.service,
            namespace=args.namespace,
            days=args.days or 90,
            ca_days=args.ca_days,
            renew_before_days=args.renew_before_days,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        line = asyncio.run(_certs_in_cluster(args, settings))
    except CertsError as e:
        print(f"gpu-intent certs: {e}", file=sys.stderr)
        return 1
    print(line)
    return 0


async def _certs_in_cluster(args: argparse.Namespace, settings: Any) -> str:
    from certs.incluster import reconcile_secret

    api = await _connect(args.kubeconfig, args.context)
    try:
        outcome = await reconcile_secret(
            api, secret=args.secret, configuration=args.webhook_configuration, settings=settings
        )
    finally:
        await api.close()
    return outcome.summary(args.secret, settings.namespace, args.webhook_configuration)


def _certs_to_files(args: argparse.Namespace) -> int:
    from certs import write_tls_files

    if not args.dns_name and not args.ip:
        raise UsageError("give at least one --dns-name or --ip")
    try:
        files = write_tls_files(args.out_dir, args.dns_name, args.ip, days=args.days or 365)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        where = e.filename or args.out_dir
        raise UsageError(
            f"cannot write to --out-dir {args.out_dir}: {where}: {e.strerror}"
        ) from None
    print(f"wrote {files.ca_cert}, {files.cert}, {files.key} (the key with mode 0600)")
    return 0


def _check_tls_files(args: argparse.Namespace) -> None:
    """The webhook's certificate and key exist and load together, else `UsageError`
    naming the file (``--tls-key-file /x/tls.key: not a PEM private key (...); point it
    at ...``) and the fix; an encrypted key is refused, never prompted for
    (`webhook.certificates.check_pair`)."""
    from webhook.certificates import TLSFilesError
    from webhook.server import ssl_context

    for flag, path in (
        ("--tls-cert-file", args.tls_cert_file),
        ("--tls-key-file", args.tls_key_file),
    ):
        if not Path(path).is_file():
            raise UsageError(f"{flag} {path}: no such file")
        if not os.access(path, os.R_OK):
            raise UsageError(f"{flag} {path}: not readable")
    try:
        ssl_context(args.tls_cert_file, args.tls_key_file)
    except TLSFilesError as e:
        raise UsageError(e.describe("--tls-cert-file", "--tls-key-file")) from None
    except (ssl.SSLError, ValueError, OSError) as e:
        raise UsageError(
            f"--tls-cert-file {args.tls_cert_file} and --tls-key-file {args.tls_key_file}"
            f" do not load as a certificate and its key: {e}"
        ) from None
def _add_failure_flags(parser: argparse.ArgumentParser) -> None:
    """The controller's failure handling, protection and safety cap flags (see
    `controller.failures`); `_failure_settings` reads them."""
    group = parser.add_argument_group("failures, protection and safety caps")
    group.add_argument(
        "--max-gpus-per-trigger",
        type=_non_negative_int,
        default=8,
        help="most GPUs one trigger asks for; pods needing more wait (default 8)",
    )
    group.add_argument(
        "--max-triggers-per-pool",
        type=_non_negative_int,
        default=0,
        help="most live trigger pods per NodePool, 0 for no cap but --max-triggers (default 0)",
    )
    group.add_argument(
        "--trigger-creates-per-second",
        type=_non_negative,
        default=50.0,
        help="trigger creations per second at most (token bucket, burst the same), 0 for no "
        "limit (default 50)",
    )
    group.add_argument(
        "--retry-base-seconds",
        type=_positive,
        default=30.0,
        help="backoff after a pod's first failed scale-up, doubled per failure (default 30)",
    )
    group.add_argument(
        "--retry-max-seconds",
        type=_positive,
        default=600.0,
        help="longest backoff between scale-up attempts (default 600)",
    )
    group.add_argument(
        "--retry-attempts",
        type=_positive_int,
        default=3,
        help="failed scale-ups after which a pod is told Failed (default 3)",
    )
    group.add_argument(
        "--init-timeout-seconds",
        type=_positive,
        default=1200.0,
        help="a trigger's NodeClaim not Ready this long after creation has failed and is "
        "deleted (default 1200; Karpenter's registration timeout is 900)",
    )
    group.add_argument(
        "--cooldown-seconds",
        type=_non_negative,
        default=10.0,
        help="after a trigger no pod needed is removed, no new trigger for its group for this "
        "long (default 10)",
    )
    group.add_argument(
        "--protect-seconds",
        type=_positive,
        default=120.0,
        help="how long a new node stays karpenter.sh/do-not-disrupt after Ready while none of "
        "its pods has bound (default 120)",
    )
    group.add_argument(
        "--dra",
        choices=("auto", "on", "off"),
        default="auto",
        help="follow DRA ResourceClaims and ResourceSlices: auto when the API server serves "
        "resource.k8s.io/v1 (default auto)",
    )


def _failure_settings(args: argparse.Namespace, plan: PlanConfig) -> dict[str, Any]:
    """`ControllerConfig` keyword arguments for the flags of `_add_failure_flags`."""
    return {
        "plan": dataclasses.replace(
            plan,
            max_gpus_per_trigger=args.max_gpus_per_trigger,
            max_triggers_per_pool=args.max_triggers_per_pool,
            retry_base_seconds=args.retry_base_seconds,
            retry_max_seconds=args.retry_max_seconds,
            retry_attempts=args.retry_attempts,
            init_timeout_seconds=args.init_timeout_seconds,
            cooldown_seconds=args.cooldown_seconds,
        ),
        "trigger_creates_per_second": args.trigger_creates_per_second,
        "protect_seconds": args.protect_seconds,
        "dra": args.dra,
    }


async def _run_controller(args: argparse.Namespace) -> None:
    from controller import metrics
    from controller.kube import Kube
    from controller.leader import LeaderElectionConfig, LeaderElector
    from controller.reconciler import Controller, ControllerConfig
    from controller.server import start
    from controller.shutdown import run_until_stopped

    config = ControllerConfig(
        **_failure_settings(args, plan_config(args)),
        idle_seconds=args.pass_idle_seconds,
        max_delay_seconds=args.pass_max_delay_seconds,
        resync_seconds=args.resync_seconds,
        report_writes_per_second=args.report_writes_per_second,
    )
    elector_config = None
    if args.leader_elect:
        elector_config = LeaderElectionConfig(
            namespace=args.leader_election_namespace or config.namespace,
            identity=os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}",
            name=args.leader_election_lease_name,
            lease_seconds=args.leader_election_lease_duration,
            renew_deadline_seconds=args.leader_election_renew_deadline,
            retry_seconds=args.leader_election_retry_period,
        )
    kube = Kube(await _connect(args.kubeconfig, args.context))
    tune_gc(freeze=True)  # what is loaded now lives as long as the process
    try:
        elector = LeaderElector(kube, elector_config) if elector_config else None
        if elector is None:
            metrics.LEADER.set(1)  # a single replica without election always acts
        controller = Controller(kube, config, elector=elector)
        host, port = args.metrics_address
        try:
            runner = await start(controller, host, port)
        except OSError as e:
            raise UsageError(
                f"cannot serve metrics on --metrics-address {host}:{port}: {_os_reason(e)}"
            ) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await run_until_stopped(controller, stop, args.shutdown_timeout)
        finally:
            await runner.cleanup()
    finally:
        await kube.close()


async def _run_webhook(args: argparse.Namespace) -> None:
    """Serve the webhook until SIGTERM or SIGINT, then stop gracefully: ``/readyz`` 503
    and still serving for ``--drain-seconds``, then no new connections, requests in
    progress answered, then return (`webhook.server.serve`)."""
    from webhook.connections import Timeouts
    from webhook.scope import Scope
    from webhook.server import ServeOptions, serve

    options = ServeOptions(
        scope=Scope.for_release(args.release_namespace),
        timeouts=Timeouts(
            header=args.header_timeout, body=args.body_timeout, idle=args.idle_timeout
        ),
        reload_interval=args.tls_reload_interval,
        shutdown_timeout=args.shutdown_timeout,
        drain_seconds=args.drain_seconds,
        review_budget=args.review_budget,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, port = args.listen
    # What is loaded by now (modules, mostly) lives as long as the process: keep it out of
    # the cyclic collector's full passes, which otherwise walk it every few thousand
    # reviews and show up as millisecond pauses in the latency tail. A review allocates a
    # few hundred short-lived objects and frees them by reference counting, so the young
    # generation is collected every WEBHOOK_GC_THRESHOLD allocations, not every 700.
    tune_gc(WEBHOOK_GC_THRESHOLD, freeze=True)
    await serve(host, port, args.tls_cert_file, args.tls_key_file, options=options, stop=stop)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code: 0 done, 1 failed while running (an API
    error, a lost lease), 2 bad input (argparse's code for usage errors)."""
    from intent.logs import configure

    args = build_parser().parse_args(argv)
    configure(args.log_level, args.log_format)
    tune_gc()
    try:
        return _run(args)
    except UsageError as e:
        print(f"gpu-intent {args.command}: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "certs":
        return _certs(args)
    if args.command == "explain":
        return _explain(args)
    if args.command == "demo":
        from gpu_intent.demo import run_demo

        return asyncio.run(
            run_demo(
                args.examples,
                max_seconds=args.timeout,
                with_controller=not args.without_controller,
                output=args.output,
                timings=args.timings,
                plan=plan_config(args),
            )
        )
    if args.command == "webhook":
        if not _load_catalog(args):
            return 2
        _check_tls_files(args)
        from webhook.certificates import TLSFilesError

        try:
            asyncio.run(_run_webhook(args))
        except TLSFilesError as e:  # replaced between the check and the start
            raise UsageError(e.describe("--tls-cert-file", "--tls-key-file")) from None
        except OSError as e:
            host, port = args.listen
            raise UsageError(f"cannot serve on --listen {host}:{port}: {_os_reason(e)}") from None
        except (ssl.SSLError, ValueError) as e:
            log.error("webhook: %s", e)
            return 1
    elif args.command == "controller":
        from controller.kube import KubeError
        from controller.leader import LeadershipLost

        try:
            asyncio.run(_run_controller(args))
        except (KubeError, OSError, LeadershipLost, ValueError) as e:
            log.error("controller: %s", e)
            return 1
    return 0
