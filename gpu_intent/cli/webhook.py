"""``gpu-intent webhook``: serve the mutating admission webhook over HTTPS.

`add_parser` adds the subcommand; its options' defaults come from
`webhook.server.ServeOptions` (with `webhook.connections.Timeouts`) and
`webhook.server.DRAIN_SECONDS`, imported only when the subcommand is used. `run` checks
the certificate files, then serves until SIGTERM or SIGINT (`webhook.server.serve`).
The webhook loads little: neither the Kubernetes client nor the controller.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_intent.cli.common import (
    TRIGGER_NAMESPACE,
    Subcommands,
    UsageError,
    add_catalog_flag,
    address,
    log,
    non_negative,
    os_reason,
    positive,
    read_catalog,
    show_address,
)
from intent.runtime import tune_gc

if TYPE_CHECKING:
    from intent.catalog import Catalog
    from webhook.server import ServeOptions

#: Allocations between two young-generation collections in ``gpu-intent webhook``
#: (CPython's default is 700; side by side, the server answered about 8% more requests per CPU
#: second at 20,000).
WEBHOOK_GC_THRESHOLD = 20_000

#: ``--listen``'s default (host, port).
LISTEN = ("0.0.0.0", 8443)


def add_parser(commands: Subcommands) -> argparse.ArgumentParser:
    """Add ``webhook`` to ``commands``; returns its parser."""
    return commands.add_command(
        "webhook",
        "serve the mutating admission webhook over HTTPS",
        "Serve the mutating admission webhook over HTTPS: it writes each new pod's GPU"
        " intent as annotations. The certificate files are re-read when they change (a"
        " mounted Secret).",
        add_arguments,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The webhook's options: where and what it serves, its timeouts, ``--catalog``."""
    from webhook.server import DRAIN_SECONDS, ServeOptions

    options = ServeOptions()
    _add_serving_flags(parser, options)
    _add_timeout_flags(parser, options, drain_seconds=DRAIN_SECONDS)
    add_catalog_flag(parser)


def _add_serving_flags(parser: argparse.ArgumentParser, options: ServeOptions) -> None:
    """``--listen``, the certificate files and their reloading, the release namespace."""
    parser.add_argument(
        "--listen", type=address, default=LISTEN, metavar="HOST:PORT",
        help=f"address to serve HTTPS on (default {show_address(LISTEN)})",
    )  # fmt: skip
    parser.add_argument("--tls-cert-file", required=True, help="PEM certificate (tls.crt)")
    parser.add_argument(
        "--tls-key-file", required=True, help="PEM private key (tls.key), unencrypted"
    )
    parser.add_argument(
        "--release-namespace",
        default=os.environ.get("POD_NAMESPACE", TRIGGER_NAMESPACE),
        help="namespace gpu-intent runs in; its pods are never annotated, nor kube-system's"
        f" (default: $POD_NAMESPACE or {TRIGGER_NAMESPACE})",
    )
    parser.add_argument(
        "--tls-reload-interval",
        type=positive,
        default=options.reload_interval,
        metavar="SECONDS",
        help="how often the certificate files are re-read; a changed pair that loads"
        f" replaces the served one (default {options.reload_interval:g})",
    )


def _add_timeout_flags(
    parser: argparse.ArgumentParser, options: ServeOptions, *, drain_seconds: float
) -> None:
    """Connection timeouts, the graceful shutdown, the review budget (seconds)."""
    timeouts = options.timeouts
    parser.add_argument(
        "--header-timeout",
        type=positive,
        default=timeouts.header,
        metavar="SECONDS",
        help="TLS handshake and request headers, from connect or from a request's first"
        f" byte (default {timeouts.header:g})",
    )
    parser.add_argument(
        "--body-timeout",
        type=positive,
        default=timeouts.body,
        metavar="SECONDS",
        help=f"a request's body and answer, from its headers (default {timeouts.body:g})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=positive,
        default=timeouts.idle,
        metavar="SECONDS",
        help=f"a kept-alive connection waiting for its next request (default {timeouts.idle:g})",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=positive,
        default=options.shutdown_timeout,
        metavar="SECONDS",
        help="after SIGTERM and --drain-seconds, how long requests in progress may take to"
        f" finish (default {options.shutdown_timeout:g})",
    )
    parser.add_argument(
        "--drain-seconds",
        type=non_negative,
        default=drain_seconds,
        metavar="SECONDS",
        help="after SIGTERM, how long to keep serving with /readyz answering 503, so that"
        " the pod leaves the Service's endpoints before the listener closes; 0 closes it"
        f" at once (default {drain_seconds:g})",
    )
    parser.add_argument(
        "--review-budget",
        type=positive,
        default=options.review_budget,
        metavar="SECONDS",
        help="CPU time one review may spend inferring a pod's intent; past it the pod is"
        ' admitted without an intent, with a warning (outcome "deadline";'
        f" default {options.review_budget:g})",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``gpu-intent webhook``; returns the exit code: 0 stopped by a signal, 1 a
    failure while serving. Raises `UsageError` (exit code 2) for a ``--catalog`` that does
    not load, certificate files that do not load together and an address it cannot serve
    on."""
    catalog = read_catalog(args)
    check_tls_files(args)
    from webhook.certificates import TLSFilesError

    try:
        asyncio.run(serve(args, catalog))
    except TLSFilesError as e:  # replaced between the check and the start
        raise UsageError(e.describe("--tls-cert-file", "--tls-key-file")) from None
    except OSError as e:
        host, port = args.listen
        raise UsageError(f"cannot serve on --listen {host}:{port}: {os_reason(e)}") from None
    except (ssl.SSLError, ValueError) as e:
        log.error("webhook: %s", e)
        return 1
    return 0


def check_tls_files(args: argparse.Namespace) -> None:
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


def serve_options(args: argparse.Namespace, catalog: Catalog | None = None) -> ServeOptions:
    """The ``ServeOptions`` for the parsed ``webhook`` options (``args``) and the catalog
    ``--catalog`` loaded (`read_catalog`; None: the built-in one); raises ValueError for a
    value the webhook refuses."""
    from webhook.connections import Timeouts
    from webhook.scope import Scope
    from webhook.server import ServeOptions

    return ServeOptions(
        scope=Scope.for_release(args.release_namespace),
        timeouts=Timeouts(
            header=args.header_timeout, body=args.body_timeout, idle=args.idle_timeout
        ),
        reload_interval=args.tls_reload_interval,
        shutdown_timeout=args.shutdown_timeout,
        drain_seconds=args.drain_seconds,
        review_budget=args.review_budget,
        catalog=catalog,
    )


async def serve(args: argparse.Namespace, catalog: Catalog | None = None) -> None:
    """Serve the webhook, its reviews inferring with ``catalog`` (None: the built-in one),
    until SIGTERM or SIGINT, then stop gracefully: ``/readyz`` 503 and still serving for
    ``--drain-seconds``, then no new connections, requests in progress answered, then
    return (`webhook.server.serve`, whose errors propagate)."""
    from webhook.server import serve as serve_webhook

    options = serve_options(args, catalog)
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
    await serve_webhook(
        host, port, args.tls_cert_file, args.tls_key_file, options=options, stop=stop
    )
