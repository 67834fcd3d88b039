"""Log output of every ``gpu-intent`` command: text for a person, or one JSON object a line.

``--log-format json`` writes each record as one JSON object on stderr, through
python-json-logger (``pythonjsonlogger.json.JsonFormatter``): ``time`` (RFC 3339, UTC,
milliseconds), ``level``, ``logger``, ``message``, ``exc_info`` with a traceback when
there is one, and ``object`` (``namespace/name``) when the line is about a Kubernetes
object. Code that logs about an object passes ``extra=about(ref)``; in text format the
message itself already names the object, so nothing is added.

`LOG_FORMATS` and `LOG_LEVELS` are what the command line accepts; `configure` installs
the handler on the root logger.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Final, TextIO

from pythonjsonlogger.json import JsonFormatter

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "OBJECT", "about", "configure"]

LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: The ``extra`` key (and JSON field) naming the object a line is about.
OBJECT: Final = "object"
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def about(ref: object) -> dict[str, str]:
    """``extra`` for a log call about an object: ``{"object": "namespace/name"}``
    (``str(ref)``: a ``PodRef`` or a ``"namespace/name"`` string; cluster-scoped objects
    are named alone)."""
    return {OBJECT: str(ref)}


class _Json(JsonFormatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Send every record at ``level`` (one of `LOG_LEVELS`) or above to ``stream``
    (default stderr) in ``fmt`` (``text`` or ``json``), replacing earlier handlers."""
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter: logging.Formatter
    if fmt == "json":
        formatter = _Json(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    elif fmt == "text":
        formatter = logging.Formatter(_TEXT_FORMAT)
    else:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, got {fmt!r}")
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
