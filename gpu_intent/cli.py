"""The ``gpu-intent`` command: ``webhook``, ``controller``, ``explain``, ``certs`` and ``demo``.

``webhook`` and ``controller`` are the production binaries: they find the cluster the
standard way (``--kubeconfig``, ``$KUBECONFIG``, in-cluster service account,
``~/.kube/config``) and know nothing of the simulated cluster the ``demo`` starts.
``explain`` runs the webhook's inference on manifests, offline.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_intent import __version__

if TYPE_CHECKING:
    from controller.plan import PlanConfig

log = logging.getLogger("gpu_intent")

#: Allocations between two young-generation collections in ``gpu-intent webhook``
#: (CPython's default is 700; side by side, the server answered about 8% more requests per CPU
#: second at 20,000).
WEBHOOK_GC_THRESHOLD = 20_000

#: Default namespace for trigger pods (the chart's namespace).
TRIGGER_NAMESPACE = "gpu-intent-system"


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


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
    ``--gpu-memory-label``, ``--binding-triggers``, ``--trigger-image``, ``--trigger-priority-class``, ``--trigger-deadline-seconds``, ``--cover-seconds`` (seconds) and
    ``--max-triggers``. `plan_config` turns the parsed values into a ``PlanConfig``."""
    parser.add_argument("--namespace", default=namespace, help=namespace_help)
    parser.add_argument(
        "--default-nodepool",
        default=default_nodepool,
        help="NodePool for GPU intents that name no model"
        + (f" (default {default_nodepool})" if default_nodepool else ""),
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
    parser.add_argument("--trigger-image", default="registry.k8s.io/pause:3.10")
    parser.add_argument("--trigger-priority-class", help="PriorityClass for trigger pods")
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
        help="how long pods whose node is Ready are left to their scheduler before buying again (default 60)",
    )
    parser.add_argument(
        "--max-triggers",
        type=_non_negative_int,
        default=100,
        help="most live trigger pods (default 100)",
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
        max_triggers=args.max_triggers,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-intent", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"gpu-intent {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING (default INFO)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    webhook = sub.add_parser("webhook", help="serve the mutating admission webhook over HTTPS")
    webhook.add_argument("--listen", type=_address, default=("0.0.0.0", 8443), metavar="HOST:PORT")
    webhook.add_argument("--tls-cert-file", required=True, help="PEM certificate (tls.crt)")
    webhook.add_argument("--tls-key-file", required=True, help="PEM private key (tls.key)")
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
        help="after SIGTERM, how long requests in progress may take to finish (default 20)",
    )
    _add_catalog_flag(webhook)

    explain = sub.add_parser(
        "explain",
        help="print each pod template's GPU intent and the reasoning, offline",
        description="Run the webhook's inference on the pod templates of manifests (Pods, "
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

    controller = sub.add_parser("controller", help="run the trigger controller against a cluster")
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
        "--metrics-address", type=_address, default=("0.0.0.0", 8080), metavar="HOST:PORT"
    )
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

    certs = sub.add_parser(
        "certs", help="write a CA and a serving certificate (ca.crt, tls.crt, tls.key)"
    )
    certs.add_argument("--dns-name", action="append", default=[], help="DNS SAN (repeatable)")
    certs.add_argument("--ip", action="append", default=[], help="IP SAN (repeatable)")
    certs.add_argument("--out-dir", type=Path, required=True)
    certs.add_argument("--days", type=int, default=365, help="validity in days (default 365)")

    demo = sub.add_parser("demo", help="run the end-to-end story on an embedded simulated cluster")
    demo.add_argument(
        "--timeout",
        type=_positive,
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
        help="GPU catalog YAML merged over the built-in one (gpu_intent/catalog.yaml shows "
        "the shape): extra GPUs, spellings, instance types",
    )


def _load_catalog(args: argparse.Namespace) -> bool:
    """Load ``--catalog`` over the built-in catalog and make it the one inference uses;
    False (after saying why on stderr) when it cannot be loaded."""
    from gpu_intent.catalog import CatalogError, load_catalog, use_catalog

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


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def _run_controller(args: argparse.Namespace) -> None:
    from controller import metrics
    from controller.kube import Kube
    from controller.leader import LeaderElectionConfig, LeaderElector
    from controller.reconciler import Controller, ControllerConfig
    from controller.server import start
    from controller.shutdown import run_until_stopped

    config = ControllerConfig(
        plan=plan_config(args),
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
    kube = await Kube.connect(args.kubeconfig, args.context)
    elector = LeaderElector(kube, elector_config) if elector_config else None
    if elector is None:
        metrics.LEADER.set(1)  # a single replica without election always acts
    controller = Controller(kube, config, elector=elector)
    runner = await start(controller, *args.metrics_address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await run_until_stopped(controller, stop, args.shutdown_timeout)
    finally:
        await runner.cleanup()
        await kube.close()


async def _run_webhook(args: argparse.Namespace) -> None:
    """Serve the webhook until SIGTERM or SIGINT, then stop gracefully: no new
    connections, requests in progress answered, then return (`webhook.server.serve`)."""
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
    gc.freeze()
    gc.set_threshold(WEBHOOK_GC_THRESHOLD, *gc.get_threshold()[1:])
    await serve(host, port, args.tls_cert_file, args.tls_key_file, options=options, stop=stop)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    if args.command == "certs":
        from certs import write_tls_files

        if not args.dns_name and not args.ip:
            print("gpu-intent certs: give at least one --dns-name or --ip", file=sys.stderr)
            return 2
        files = write_tls_files(args.out_dir, args.dns_name, args.ip, days=args.days)
        print(f"wrote {files.ca_cert}, {files.cert}, {files.key}")
        return 0
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
        try:
            asyncio.run(_run_webhook(args))
        except (OSError, ssl.SSLError, ValueError) as e:
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
