"""``gpu-intent explain``: the webhook's inference on the pod templates of manifests,
offline (`gpu_intent.explain`), printed as text or JSON."""

from __future__ import annotations

import argparse
import sys

from gpu_intent.cli.common import Subcommands, add_catalog_flag, read_catalog


def add_parser(commands: Subcommands) -> argparse.ArgumentParser:
    """Add ``explain`` to ``commands``; returns its parser."""
    return commands.add_command(
        "explain",
        "print each pod template's GPU intent and the reasoning, offline",
        "Run the webhook's inference on the pod templates of manifests (Pods, "
        "Deployments, Jobs, CronJobs, any object with a pod template) without a cluster.",
        add_arguments,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``-f/--filename`` (repeatable), ``-o/--output``, ``--catalog``."""
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="manifest file, directory of *.yaml/*.yml/*.json, or - for stdin (repeatable)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: for a person; json: a list with the annotation values under their keys "
        "(default text)",
    )
    add_catalog_flag(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``gpu-intent explain``; returns the exit code: 0 printed, 2 a manifest cannot
    be read (one line on stderr). Raises `UsageError` (exit code 2) for a ``--catalog``
    that does not load."""
    from gpu_intent.explain import ExplainError, explain, read_documents, render_json, render_text

    catalog = read_catalog(args)
    try:
        documents = read_documents(args.filename)
    except ExplainError as e:
        print(f"gpu-intent explain: {e}", file=sys.stderr)
        return 2
    explanations = explain(documents, catalog)
    render = render_json if args.output == "json" else render_text
    sys.stdout.write(render(explanations) + ("\n" if args.output == "json" else ""))
    return 0
