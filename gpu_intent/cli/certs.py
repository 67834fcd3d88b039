"""``gpu-intent certs``: create or renew the webhook's CA and serving certificate.

Two modes: ``--out-dir`` writes files (`certs.write_tls_files`); ``--secret`` with its
options keeps a Secret in a cluster right (`certs.incluster.reconcile_secret`). The
validity defaults are those of `certs.rotation.CertSettings` (cluster mode) and
`certs.write_tls_files` (file mode), imported only when the subcommand is used.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_intent.cli.common import (
    Subcommands,
    UsageError,
    connect,
    field_default,
    non_negative_int,
    parameter_default,
    positive_int,
)

if TYPE_CHECKING:
    from certs.rotation import CertSettings


def add_parser(commands: Subcommands) -> argparse.ArgumentParser:
    """Add ``certs`` to ``commands``; returns its parser."""
    return commands.add_command(
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
        add_arguments,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The file mode's options, the cluster mode's, then the validity in days."""
    _add_file_flags(parser)
    _add_cluster_flags(parser)
    _add_validity_flags(parser)


def _add_file_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir", type=Path,
        help="file mode: directory to write ca.crt, tls.crt and tls.key to",
    )  # fmt: skip
    parser.add_argument(
        "--dns-name", action="append", default=[],
        help="file mode: DNS name of the serving certificate (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--ip", action="append", default=[],
        help="file mode: IP address of the serving certificate (repeatable)",
    )  # fmt: skip


def _add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--secret", metavar="NAME",
        help="cluster mode: the Secret holding ca.crt, ca.key, tls.crt, tls.key",
    )  # fmt: skip
    parser.add_argument(
        "--namespace", help="cluster mode: namespace of the Secret and the webhook's Service"
    )
    parser.add_argument(
        "--service", metavar="NAME",
        help="cluster mode: the webhook's Service; the certificate names SVC, SVC.NS,"
        " SVC.NS.svc and SVC.NS.svc.cluster.local",
    )  # fmt: skip
    parser.add_argument(
        "--webhook-configuration", metavar="NAME",
        help="cluster mode: the MutatingWebhookConfiguration whose caBundles to patch",
    )  # fmt: skip
    parser.add_argument(
        "--kubeconfig",
        help="cluster mode: kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    parser.add_argument("--context", help="cluster mode: kubeconfig context (default: current)")


def _add_validity_flags(parser: argparse.ArgumentParser) -> None:
    from certs.rotation import CertSettings

    parser.add_argument(
        "--days", type=positive_int, default=None,
        help="validity of the serving certificate in days (default:"
        f" {cluster_days()} with --secret, {file_days()} with --out-dir, where the CA lives"
        " as long)",
    )  # fmt: skip
    parser.add_argument(
        "--ca-days", type=positive_int, default=field_default(CertSettings, "ca_days"),
        help="cluster mode: validity of a new CA in days; must exceed --days plus"
        " --renew-before-days",
    )  # fmt: skip
    parser.add_argument(
        "--renew-before-days", type=non_negative_int,
        default=field_default(CertSettings, "renew_before_days"),
        help="cluster mode: renew the serving certificate this many days before it"
        " expires; the CA is rotated once it expires within --days plus this",
    )  # fmt: skip


def cluster_days() -> int:
    """Days a serving certificate lives in cluster mode without ``--days``
    (``CertSettings.days``)."""
    from certs.rotation import CertSettings

    days: int = field_default(CertSettings, "days")
    return days


def file_days() -> int:
    """Days the certificates live in file mode without ``--days`` (`write_tls_files`'s)."""
    from certs import write_tls_files

    days: int = parameter_default(write_tls_files, "days")
    return days


def run(args: argparse.Namespace) -> int:
    """Run ``gpu-intent certs`` in either mode; returns the exit code: 0 done, 1 the
    cluster refused (one line on stderr). Raises `UsageError` for options that do not
    make one mode, settings that do not hold together and files it cannot write."""
    cluster = [args.secret, args.namespace, args.service, args.webhook_configuration]
    if args.out_dir is not None:
        if any(cluster):
            raise UsageError("give either --out-dir or --secret (with its options), not both")
        return _to_files(args)
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
            days=args.days or cluster_days(),
            ca_days=args.ca_days,
            renew_before_days=args.renew_before_days,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        line = asyncio.run(_in_cluster(args, settings))
    except CertsError as e:
        print(f"gpu-intent certs: {e}", file=sys.stderr)
        return 1
    print(line)
    return 0


async def _in_cluster(args: argparse.Namespace, settings: CertSettings) -> str:
    """Reconcile the Secret and the caBundles; the line saying what was done."""
    from certs.incluster import reconcile_secret

    api = await connect(args.kubeconfig, args.context)
    try:
        outcome = await reconcile_secret(
            api, secret=args.secret, configuration=args.webhook_configuration, settings=settings
        )
    finally:
        await api.close()
    return outcome.summary(args.secret, settings.namespace, args.webhook_configuration)


def _to_files(args: argparse.Namespace) -> int:
    from certs import write_tls_files

    if not args.dns_name and not args.ip:
        raise UsageError("give at least one --dns-name or --ip")
    try:
        files = write_tls_files(args.out_dir, args.dns_name, args.ip, days=args.days or file_days())
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        where = e.filename or args.out_dir
        raise UsageError(
            f"cannot write to --out-dir {args.out_dir}: {where}: {e.strerror}"
        ) from None
    print(f"wrote {files.ca_cert}, {files.cert}, {files.key} (the key with mode 0600)")
    return 0
