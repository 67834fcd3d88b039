"""What the subcommands of ``gpu-intent`` share.

- the parser classes: `Parser` (usage errors in one line, exit code 2), `HelpFormatter`
  (each option's default shown) and `Subcommands` (the ``COMMAND`` positional, whose
  subcommands get their options when first needed);
- argparse type functions (`positive`, `non_negative`, `positive_int`,
  `non_negative_int`, `address`, `log_level`, `log_format`): each returns the parsed
  value or raises ``argparse.ArgumentTypeError`` with a one-line reason;
- the shared flags (`add_log_flags`: ``--log-level``/``--log-format``; `add_catalog_flag`
  and `read_catalog`: ``--catalog``);
- `UsageError` (bad input found after parsing), `os_reason`;
- finding the cluster (`kubeconfig_problem`, `connect`) for ``controller`` and ``certs``;
- `field_default` and `parameter_default`, which read a default where it is defined so
  that a flag's default is not written twice.

Only light modules are imported here: ``gpu-intent webhook`` starts quickly and loads
little.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from intent.catalog import Catalog

log = logging.getLogger("gpu_intent")

#: The chart's namespace: where gpu-intent runs when ``$POD_NAMESPACE`` does not say, and
#: where trigger pods live by default (``TriggerSettings().namespace``, a test checks).
TRIGGER_NAMESPACE = "gpu-intent-system"

#: Adds a subcommand's options to its parser.
AddArguments = Callable[[argparse.ArgumentParser], None]


class HelpFormatter(argparse.HelpFormatter):
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


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line: ``<prog>: <what is wrong>
    (see <prog> --help)``, exit code 2 (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


if TYPE_CHECKING:  # generic in typeshed only
    _SubParsersAction = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsersAction = argparse._SubParsersAction


class Subcommands(_SubParsersAction):
    """The ``COMMAND`` positional (``parser.add_subparsers(action=Subcommands, ...)``).

    A subcommand added with `add_command` gets its options when the command line names
    it, or when `complete` is called: their defaults come from the modules that use them
    (the controller's import the Kubernetes client), which the other subcommands then
    never load. ``gpu-intent --help`` lists the subcommands without their options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, tuple[argparse.ArgumentParser, AddArguments]] = {}

    def add_command(
        self, name: str, summary: str, description: str, add_arguments: AddArguments
    ) -> argparse.ArgumentParser:
        """Add subcommand ``name`` (``summary``: its line in ``gpu-intent --help``;
        ``description``: the top of ``gpu-intent NAME --help``); ``add_arguments`` adds
        its options when needed. Returns the subcommand's parser."""
        parser = self.add_parser(
            name, help=summary, description=description, formatter_class=HelpFormatter
        )
        self._pending[name] = (parser, add_arguments)
        return parser

    def complete(self, name: str | None = None) -> None:
        """Add the options of subcommand ``name`` (of every subcommand when None) if not
        yet added; an unknown name does nothing (parsing reports it)."""
        for each in [name] if name is not None else list(self._pending):
            pending = self._pending.pop(each, None)
            if pending is not None:
                parser, add_arguments = pending
                add_arguments(parser)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, Sequence) and not isinstance(values, str) and values:
            self.complete(str(values[0]))
        super().__call__(parser, namespace, values, option_string)


# --- argument types ------------------------------------------------------------------


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too; an empty host is ``0.0.0.0``) as ``(host,
    port)``, port 0-65535."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def show_address(value: tuple[str, int]) -> str:
    """``HOST:PORT``, for help texts (the inverse of `address` for IPv4 hosts)."""
    host, port = value
    return f"{host}:{port}"


def positive(text: str) -> float:
    """A finite number > 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def non_negative(text: str) -> float:
    """A finite number >= 0 (seconds or rates where 0 means none)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (counts where 0 means none)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number > 0 (days, counts that cannot be none)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value


def log_format(text: str) -> str:
    """One of `intent.logs.LOG_FORMATS`, as given."""
    from intent.logs import LOG_FORMATS

    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_FORMATS)}, got {text!r}")
    return text


def log_level(text: str) -> str:
    """One of `intent.logs.LOG_LEVELS` in any case, upper-cased."""
    from intent.logs import LOG_LEVELS

    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.upper()


# --- shared flags --------------------------------------------------------------------


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` (default ``$LOG_LEVEL`` or INFO) and ``--log-format`` (default
    ``$LOG_FORMAT`` or text); a bad value from the environment is rejected as one given
    on the command line."""
    from intent.logs import LOG_FORMATS, LOG_LEVELS

    parser.add_argument(
        "--log-level",
        type=log_level,
        default=os.environ.get("LOG_LEVEL", "INFO"),
        metavar="LEVEL",
        help=f"least severe log lines shown: {', '.join(LOG_LEVELS)} (default: $LOG_LEVEL or INFO)",
    )
    parser.add_argument(
        "--log-format",
        type=log_format,  # not choices: argparse checks a $LOG_FORMAT default only by type
        metavar="{" + ",".join(LOG_FORMATS) + "}",
        default=os.environ.get("LOG_FORMAT", "text"),
        help="text: for a person; json: one JSON object per line with time, level, logger,"
        " message and the object (namespace/name) a line is about"
        " (default: $LOG_FORMAT or text)",
    )


def add_catalog_flag(parser: argparse.ArgumentParser) -> None:
    """``--catalog FILE``: a GPU catalog merged over the built-in one (`read_catalog`)."""
    parser.add_argument(
        "--catalog",
        metavar="FILE",
        help="GPU catalog YAML merged over the built-in one (intent/catalog.yaml shows "
        "the shape): extra GPUs, spellings, instance types",
    )


def read_catalog(args: argparse.Namespace) -> Catalog | None:
    """``--catalog FILE`` loaded over the built-in catalog (`intent.catalog.load_catalog`),
    for the caller to pass to what infers; None without the flag (the built-in one).

    Raises:
        UsageError: the file cannot be read or is not a catalog (the message names the
            file and the entry).
    """
    if args.catalog is None:
        return None
    from intent.catalog import CatalogError, load_catalog

    try:
        return load_catalog(args.catalog)
    except CatalogError as e:
        raise UsageError(str(e)) from None


# --- errors --------------------------------------------------------------------------


class UsageError(Exception):
    """Bad input found after parsing (a file that is not there, a port in use): `main`
    prints ``gpu-intent <command>: <message>`` and exits 2."""


def os_reason(error: OSError) -> str:
    """``Address already in use`` rather than asyncio's ``error while attempting to bind on
    address (...): address already in use``."""
    return os.strerror(error.errno) if error.errno else str(error)


# --- the cluster ---------------------------------------------------------------------


def kubeconfig_problem(path: str | None) -> str | None:
    """Why no cluster configuration can be found, or None if one may be (the order of
    `intent.kube.load_configuration`: ``path`` from ``--kubeconfig``, else
    ``$KUBECONFIG``, else in-cluster, else ``~/.kube/config``)."""
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


async def connect(kubeconfig: str | None, context: str | None) -> Any:
    """A ``kubernetes_asyncio`` ``ApiClient`` for the cluster
    (`intent.kube.load_configuration`; the caller closes it); raises `UsageError`
    when the configuration is missing or does not load."""
    from kubernetes_asyncio import client

    from intent.kube import KubeError, load_configuration

    problem = kubeconfig_problem(kubeconfig)
    if problem:
        raise UsageError(problem)
    try:
        cfg = await load_configuration(kubeconfig, context)
    except KubeError as e:
        raise UsageError(f"cannot load the cluster configuration: {e.__cause__ or e}") from None
    return client.ApiClient(configuration=cfg)


# --- defaults where they are defined -------------------------------------------------


def field_default(cls: type, name: str) -> Any:
    """The default of dataclass ``cls``'s field ``name`` (its factory's value for a
    ``default_factory``), for classes with required fields, which cannot be built bare.
    Raises LookupError if the field does not exist or has no default."""
    for each in dataclasses.fields(cls):
        if each.name != name:
            continue
        if each.default is not dataclasses.MISSING:
            return each.default
        if each.default_factory is not dataclasses.MISSING:
            return each.default_factory()
        raise LookupError(f"{cls.__name__}.{name} has no default")
    raise LookupError(f"{cls.__name__} has no field {name}")


def parameter_default(function: Callable[..., Any], name: str) -> Any:
    """The default of ``function``'s parameter ``name``; LookupError if it has none."""
    default = inspect.signature(function).parameters[name].default
    if default is inspect.Parameter.empty:
        raise LookupError(f"{function.__name__}({name}) has no default")
    return default
