"""``gpu-intent demo``: the end-to-end story on an embedded simulated cluster
(`gpu_intent.demo.run_demo`). Its defaults (timings, timeout, output, the examples'
default NodePool) are the demo's own, and the planning flags' those of the controller
(`gpu_intent.cli.planning`), imported only when the subcommand is used."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from gpu_intent.cli.common import Subcommands, parameter_default, positive
from gpu_intent.cli.planning import add_planning_flags, plan_config


def add_parser(commands: Subcommands) -> argparse.ArgumentParser:
    """Add ``demo`` to ``commands``; returns its parser."""
    return commands.add_command(
        "demo",
        "run the end-to-end story on an embedded simulated cluster",
        "Start a simulated cluster (kube-apiserver, kube-scheduler, Karpenter, kubelets)"
        " in a child process, the webhook and the controller in this one, apply the examples and"
        " print what happens to every pod, the NodeClaims bought and their cost.",
        add_arguments,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's own options, then the planning flags (``--default-nodepool`` defaults
    to the examples' NodePool)."""
    from controller.triggers import TriggerSettings
    from gpu_intent.demo.manifests import DEFAULT_NODEPOOL

    _add_demo_flags(parser)
    namespace = TriggerSettings().namespace
    add_planning_flags(
        parser,
        namespace=namespace,
        namespace_help=f"namespace for trigger pods (default {namespace})",
        default_nodepool=DEFAULT_NODEPOOL,
    )


def _add_demo_flags(parser: argparse.ArgumentParser) -> None:
    from gpu_intent.demo import TIMINGS, default_timeout, run_demo

    fast, eks = (default_timeout(TIMINGS[name]) for name in ("fast", "eks"))
    parser.add_argument(
        "--timeout",
        type=positive,
        metavar="SECONDS",
        default=None,
        help=f"give up after this many seconds (default: {fast:g} with fast timings,"
        f" {eks:g} with eks)",
    )
    parser.add_argument(
        "--examples",
        type=Path,
        default=None,
        help="manifests directory; every Pod in it, in any namespace, is followed"
        " (default: examples/)",
    )
    parser.add_argument(
        "--without-controller", action="store_true", help="show what happens without gpu-intent"
    )
    output = parameter_default(run_demo, "output")
    parser.add_argument(
        "--output",
        choices=("text", "json"),
        default=output,
        help="text: timeline, tables and cost on stdout; json: one JSON summary on stdout,"
        f" the human text on stderr (default {output})",
    )
    timings = parameter_default(run_demo, "timings")
    parser.add_argument(
        "--timings",
        choices=tuple(TIMINGS),
        default=timings,
        help="NodeClaim lifecycle delays: fast (the sim's, ~4 s to Ready) or eks (~60 s to"
        f" Ready, EKS-like) (default {timings})",
    )
    from sim.scheduler import SCORING_STRATEGIES

    scoring = parameter_default(run_demo, "kube_scoring")
    parser.add_argument(
        "--kube-scheduler-scoring",
        dest="kube_scoring",
        choices=SCORING_STRATEGIES,
        default=scoring,
        help="the sim's kube-scheduler NodeResourcesFit scoring strategy: LeastAllocated"
        " (kube-scheduler's default: native GPU pods spread over nodes) or MostAllocated"
        " (nvidia.com/gpu weighted 10, as docs/limits.md recommends for GPU pods)"
        f" (default {scoring})",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``gpu-intent demo``; returns its exit code (`gpu_intent.demo.run_demo`: 0 every
    GPU pod got a node with nothing bought beyond the need, 1 not, 2 unreadable
    examples)."""
    from gpu_intent.demo import run_demo

    return asyncio.run(
        run_demo(
            args.examples,
            max_seconds=args.timeout,
            with_controller=not args.without_controller,
            output=args.output,
            timings=args.timings,
            plan=plan_config(args),
            kube_scoring=args.kube_scoring,
        )
    )
