"""The ``gpu-intent`` command: ``webhook``, ``controller``, ``explain``, ``certs`` and ``demo``.

Bad input (a missing file, a malformed value, a port in use) ends with one line on stderr
that names the input and exit code 2, never a traceback; argparse checks values with the
type functions of `gpu_intent.cli.common` (``positive`` and friends).

``webhook`` and ``controller`` are the production binaries: they find the cluster the
standard way (``--kubeconfig``, ``$KUBECONFIG``, in-cluster service account,
``~/.kube/config``) and know nothing of the simulated cluster the ``demo`` starts.
``explain`` runs the webhook's inference on manifests, offline.

This package holds `main` and `build_parser`; each subcommand lives in its own module
(`webhook`, `explain`, `controller`, `certs`, `demo`: the function adding its parser and
the one running it), the planning flags ``controller`` and ``demo`` share in
`planning`, and what all share in `common`. A flag whose default is a setting of a
component takes it from the component's configuration (``PlanConfig``, ``Timeouts``,
``ServeOptions``, ...), imported only when that subcommand is used.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import cast

from gpu_intent import __version__
from gpu_intent.cli import certs, controller, demo, explain, webhook
from gpu_intent.cli.common import (
    TRIGGER_NAMESPACE,
    HelpFormatter,
    Parser,
    Subcommands,
    UsageError,
    add_log_flags,
)
from gpu_intent.cli.planning import add_planning_flags, plan_config
from gpu_intent.cli.webhook import WEBHOOK_GC_THRESHOLD
from intent.runtime import tune_gc

__all__ = [
    "DESCRIPTION",
    "TRIGGER_NAMESPACE",
    "WEBHOOK_GC_THRESHOLD",
    "UsageError",
    "add_planning_flags",
    "build_parser",
    "main",
    "plan_config",
]

#: Top-level description shown by ``gpu-intent --help``.
DESCRIPTION = (
    "gpu-intent makes Karpenter provision GPU nodes for pods that ask for GPUs through a "
    "sharing layer (HAMi, KAI, tensor-fusion): a mutating webhook writes each pod's GPU "
    "intent, a controller turns pending intents into trigger pods Karpenter can see."
)

#: Each subcommand's run function, by name: it returns the exit code or raises
#: `UsageError`.
_RUNS: dict[str, Callable[[argparse.Namespace], int]] = {
    "webhook": webhook.run,
    "explain": explain.run,
    "controller": controller.run,
    "certs": certs.run,
    "demo": demo.run,
}


def build_parser(*, complete: bool = True) -> argparse.ArgumentParser:
    """The ``gpu-intent`` argument parser: global options, then one subcommand.

    ``complete=False`` leaves each subcommand's options to be added when a command line
    names it (`common.Subcommands`), as `main` does, so that a subcommand loads only the
    modules its own defaults come from; parsing gives the same result either way."""
    parser = Parser(prog="gpu-intent", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument(
        "--version", action="version", version=f"gpu-intent {__version__}",
        help="print the version and exit",
    )  # fmt: skip
    add_log_flags(parser)
    commands = cast(
        Subcommands,
        parser.add_subparsers(
            action=Subcommands, dest="command", required=True, metavar="COMMAND",
            title="commands",
        ),
    )  # fmt: skip
    for module in (webhook, explain, controller, certs, demo):
        module.add_parser(commands)
    if complete:
        commands.complete()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``argv`` without the program name; None: ``sys.argv[1:]``); returns
    the process exit code: 0 done, 1 failed while running (an API error, a lost lease), 2
    bad input (argparse's code for usage errors)."""
    from intent.logs import configure

    args = build_parser(complete=False).parse_args(argv)
    configure(args.log_level, args.log_format)
    tune_gc()
    try:
        return _RUNS[args.command](args)
    except UsageError as e:
        print(f"gpu-intent {args.command}: {e}", file=sys.stderr)
        return 2
