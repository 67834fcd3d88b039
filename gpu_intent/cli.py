"""The ``gpu-intent`` command: ``webhook``, ``controller``, ``certs`` and ``demo``.

``webhook`` and ``controller`` are the production binaries: they find the cluster the
standard way (``--kubeconfig``, ``$KUBECONFIG``, in-cluster service account,
``~/.kube/config``) and know nothing of the simulated cluster the ``demo`` starts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from gpu_intent import __version__

log = logging.getLogger("gpu_intent")


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

    controller = sub.add_parser("controller", help="run the trigger controller against a cluster")
    controller.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    controller.add_argument("--context", help="kubeconfig context (default: current)")
    controller.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "gpu-intent-system"),
        help="namespace for trigger pods (default: $POD_NAMESPACE or gpu-intent-system)",
    )
    controller.add_argument(
        "--default-nodepool", help="NodePool for GPU intents that name no model"
    )
    controller.add_argument(
        "--gpu-name-label",
        default="karpenter.k8s.aws/instance-gpu-name",
        help="node label carrying the GPU model (default: the AWS provider's)",
    )
    controller.add_argument("--trigger-image", default="registry.k8s.io/pause:3.10")
    controller.add_argument("--trigger-priority-class", help="PriorityClass for trigger pods")
    controller.add_argument(
        "--cover-seconds",
        type=_positive,
        default=60.0,
        help="how long pods whose node is Ready are left to their scheduler before buying again (default 60)",
    )
    controller.add_argument(
        "--max-triggers", type=int, default=100, help="most live trigger pods (default 100)"
    )
    controller.add_argument(
        "--metrics-address", type=_address, default=("0.0.0.0", 8080), metavar="HOST:PORT"
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
        "--timeout", type=_positive, default=60.0, help="give up after this many seconds"
    )
    demo.add_argument(
        "--examples", type=Path, default=None, help="manifests directory (default: examples/)"
    )
    demo.add_argument(
        "--without-controller", action="store_true", help="show what happens without gpu-intent"
    )
    return parser


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def _run_controller(args: argparse.Namespace) -> None:
    from controller.kube import Kube
    from controller.plan import PlanConfig
    from controller.reconciler import Controller, ControllerConfig
    from controller.server import start
    from controller.triggers import TriggerSettings

    config = ControllerConfig(
        plan=PlanConfig(
            trigger=TriggerSettings(
                namespace=args.namespace,
                image=args.trigger_image,
                gpu_name_label=args.gpu_name_label,
                priority_class=args.trigger_priority_class,
            ),
            default_nodepool=args.default_nodepool,
            cover_seconds=args.cover_seconds,
            max_triggers=args.max_triggers,
        )
    )
    kube = await Kube.connect(args.kubeconfig, args.context)
    controller = Controller(kube, config)
    runner = await start(controller, *args.metrics_address)
    try:
        await controller.run()
    finally:
        await runner.cleanup()
        await kube.close()


async def _until_signalled(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` until it ends or SIGTERM/SIGINT arrives (Kubernetes stops pods with
    SIGTERM), then cancel it so its clean-up runs."""
    task = asyncio.ensure_future(coro)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped by signal")


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
    if args.command == "demo":
        from gpu_intent.demo import run_demo

        return asyncio.run(
            run_demo(
                args.examples, max_seconds=args.timeout, with_controller=not args.without_controller
            )
        )
    if args.command == "webhook":
        from webhook.server import serve

        host, port = args.listen
        try:
            asyncio.run(_until_signalled(serve(host, port, args.tls_cert_file, args.tls_key_file)))
        except (OSError, ssl.SSLError) as e:
            log.error("webhook: %s", e)
            return 1
    elif args.command == "controller":
        from controller.kube import KubeError

        try:
            asyncio.run(_until_signalled(_run_controller(args)))
        except (KubeError, OSError) as e:
            log.error("controller: %s", e)
            return 1
    return 0
