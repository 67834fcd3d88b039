"""Short, bounded text for values a user or a client supplied, for error messages and
warnings, and numbers written for people (`gpus_for_people`, `usd_for_people`: statuses,
Events, logs, tables; never the annotation values, which stay exact). Purely
computational: no I/O.

A value from an AdmissionReview may be anything JSON can hold: a string of megabytes, a
list nested a thousand levels deep. ``repr`` of either costs time in its size, and of the
second reaches Python's recursion limit (a `RecursionError` per request). `show` looks at
a bounded part only: at most `_DEPTH` levels of nesting, a few items per container and a
few dozen characters per string or number (the standard library's `reprlib`, whose
recursion stops at its ``maxlevel``).
"""

from __future__ import annotations

import reprlib
from decimal import ROUND_HALF_UP, Decimal
from typing import Final

__all__ = ["gpus_for_people", "show", "usd_for_people"]

_CENT: Final = Decimal("0.01")
_BASIS: Final = Decimal("0.0001")


def gpus_for_people(value: Decimal) -> str:
    """GPUs with at most 2 decimals and no trailing zeros: ``0.6990562740`` -> ``"0.7"``,
    ``0.4474`` -> ``"0.45"``, ``2`` -> ``"2"``; a share above 0 and below 0.005 shows as
    ``"<0.01"`` rather than as nothing."""
    if 0 < value < Decimal("0.005"):
        return "<0.01"
    text = format(value.quantize(_CENT, rounding=ROUND_HALF_UP), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def usd_for_people(value: Decimal) -> str:
    """Money with 2 to 4 decimals: ``0.526`` -> ``"0.526"``, ``5`` -> ``"5.00"``,
    ``0.80481`` -> ``"0.8048"``."""
    text = f"{value.quantize(_BASIS, rounding=ROUND_HALF_UP):.4f}"
    while text.endswith("0") and len(text.partition(".")[2]) > 2:
        text = text[:-1]
    return text


#: Levels of nesting `show` descends into; deeper containers print as ``[...]``.
_DEPTH: Final = 3


def _repr(limit: int) -> reprlib.Repr:
    shown = reprlib.Repr()  # Python 3.11's Repr takes no keyword arguments
    shown.maxlevel = _DEPTH
    shown.maxstring = limit
    shown.maxother = limit
    shown.maxlong = limit
    shown.maxlist = shown.maxtuple = shown.maxdict = shown.maxset = 4
    return shown


_SHOWN: Final = {40: _repr(40), 60: _repr(60)}


def show(value: object, limit: int = 40) -> str:
    """A repr of ``value`` of at most ``limit`` characters (``...`` marks a cut), for a
    message: ``show("20Gi")`` -> ``"'20Gi'"``; a long string, a big number or a deep or
    long container is cut, in time bounded by ``limit`` whatever the value's size or
    depth. ``limit`` is 40 or 60."""
    if type(value) is str and len(value) <= limit - 2:  # the common case: a short string
        text = repr(value)
    else:
        text = _SHOWN[limit].repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
