"""Kubernetes resource quantities (``"3k"``, ``"20Gi"``, ``"500m"``) as exact Decimals.

A purely computational module: no I/O. Every error is an `IntentError` whose message names
the field being read, so the webhook can hand it to the user as a warning.

The grammar is the one kube-apiserver accepts (kubernetes/apimachinery,
``pkg/api/resource/quantity.go``)::

    <quantity>     ::= <sign>? <number> <suffix>
    <number>       ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>       ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>     ::= Ki | Mi | Gi | Ti | Pi | Ei            (powers of 1024)
    <decimalSI>    ::= n | u | m | "" | k | M | G | T | P | E (powers of 1000)
    <decimalExp>   ::= (e | E) <sign>? <digits>               (powers of 10)

``kubernetes_asyncio`` (the client this project depends on) ships no quantity parser, so
this module implements the grammar directly rather than pulling in the synchronous
``kubernetes`` client for one function.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Final

from intent.contract import IntentError
from intent.text import show

__all__ = ["MAX_EXPONENT", "parse_count", "parse_quantity", "quantity_or_reason", "to_mib"]

_QUANTITY_RE: Final = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[numkMGTPE]?))"
)

_BINARY_POWERS: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_EXPONENTS: Final = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip

#: Largest accepted power of ten (after the suffix is applied). int64, the largest value a
#: Kubernetes quantity holds in practice, is about 9.2e18; anything past 1e30 is a typo or
#: an attempt to make ``int()`` build a huge number.
MAX_EXPONENT: Final = 30

_MAX_TEXT: Final = 64
#: Largest decimal exponent (``e<n>``) accepted at all, whatever the digits before it.
_MAX_SHIFT: Final = MAX_EXPONENT + _MAX_TEXT
_MIB: Final = Decimal(1024 * 1024)
#: Distinct quantity strings `parse_quantity` remembers, and the longest string it keys on
#: (anything longer is parsed each time; over `_MAX_TEXT` it is an error anyway).
_MEMO_SIZE: Final = 1024
_MEMO_TEXT: Final = 2 * _MAX_TEXT
#: String -> `_parse` of it (the Decimal, or the error after the field).
_MEMO: Final[dict[str, Decimal | str]] = {}


def parse_quantity(value: str | int | float, field: str) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal in the quantity's base unit.

    A string is memoized (up to `_MEMO_SIZE` distinct strings of at most `_MEMO_TEXT`
    characters; then the memo starts over): a `Decimal` is immutable, so one parse serves
    every pod that writes the same ``"1"`` or ``"20000"``, and an error is kept as the
    text that follows ``field``, so the message still names the caller's field.

    Args:
        value: the quantity as the API gives it: a string (``"20Gi"``, ``"3k"``,
            ``"1.5"``, ``"100m"``) or, as a convenience for annotations written by
            hand, a JSON number.
        field: what is being parsed, e.g. ``'spec.containers[0].resources.limits
            ["nvidia.com/gpumem"]'``; it starts every error message.

    Returns:
        The value with the suffix applied: ``"20Gi"`` -> ``Decimal(21474836480)``,
        ``"3k"`` -> ``Decimal(3000)``, ``"500m"`` -> ``Decimal("0.5")``. May be negative
        or zero; callers decide what range their field allows.

    Raises:
        IntentError: not a string or number (``True`` included), empty, longer than 64
            characters, not in the grammar above, not finite, of magnitude above
            ``10**MAX_EXPONENT`` or (non-zero) below ``10**-MAX_EXPONENT``, or with a
            decimal exponent beyond +-94 even for a zero (``"0e9999999"``).
    """
    parsed = quantity_or_reason(value)
    if isinstance(parsed, str):
        raise IntentError(f"{field}: {parsed}")
    return parsed


def quantity_or_reason(value: object) -> Decimal | str:
    """`parse_quantity` for a caller that names its field only on failure: the Decimal, or
    why ``value`` is not a quantity (the message `parse_quantity` gives after
    ``<field>: ``, e.g. ``"'abc' is not a Kubernetes quantity"``). Memoized likewise.
    """
    if type(value) is str:  # the API's form: remembered
        found = _MEMO.get(value)
        if found is None:
            found = _parse(value)
            if len(value) <= _MEMO_TEXT:
                if len(_MEMO) >= _MEMO_SIZE:
                    _MEMO.clear()
                _MEMO[value] = found
        return found
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"{show(value)} is not a quantity"
    return _parse(value)


def _parse(value: str | int | float) -> Decimal | str:
    """`parse_quantity` of a string or number: the Decimal, or the error message after
    ``<field>: ``."""
    text = str(value).strip() if not isinstance(value, float) else repr(value)
    if not text:
        return "empty quantity"
    if len(text) > _MAX_TEXT:
        return f"quantity {show(text)} is too long"
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        return f"{show(text)} is not a Kubernetes quantity"
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover - the regex admits only digits
        return f"{show(text)} is not a Kubernetes quantity"
    with localcontext() as ctx:
        ctx.prec = 80
        if match["binary"] is not None:
            scaled = number * Decimal(1024) ** _BINARY_POWERS[match["binary"]]
        else:
            if match["exponent"] is not None:
                exponent = int(match["exponent"])
            else:
                exponent = _DECIMAL_EXPONENTS[match["decimal"] or ""]
            # Checked for zero too: Decimal(0).scaleb(9999999) raises InvalidOperation
            # (the shift lies beyond the context's Emax), and "0e9999999" matches the
            # grammar. No number of at most 64 characters brings an exponent this far back
            # into range.
            if abs(exponent) > _MAX_SHIFT or (
                number and abs(number.adjusted() + exponent) > MAX_EXPONENT
            ):
                return f"quantity {show(text)} is out of range"
            scaled = number.scaleb(exponent)
    if scaled and scaled.adjusted() > MAX_EXPONENT:
        return f"quantity {show(text)} is out of range"
    return scaled


def _ceil(value: Decimal) -> int:
    """Round toward positive infinity, exactly (``value`` is bounded by parse_quantity)."""
    whole = int(value)  # truncates toward zero
    return whole + 1 if value > whole else whole


def parse_count(value: str | int | float, field: str) -> int:
    """Parse a quantity that counts units (MiB, percent, devices) as an integer, rounded up.

    For resources that are already counts, e.g. HAMi ``nvidia.com/gpumem`` (MiB,
    Project-HAMi/HAMi): ``"3k"`` -> 3000, ``"8000"`` -> 8000, ``"1.5"`` -> 2.

    Raises:
        IntentError: as `parse_quantity`.
    """
    return _ceil(parse_quantity(value, field))


def to_mib(value: str | int | float, field: str) -> int:
    """Convert a byte quantity to MiB (1 MiB = 1048576 bytes), rounding up.

    For byte quantities such as tensor-fusion ``tensor-fusion.ai/vram-request``
    (NexusGPU/tensor-fusion): ``"20Gi"`` -> 20480, ``"1G"`` -> 954, ``"1"`` -> 1.

    Raises:
        IntentError: as `parse_quantity`.
    """
    number = parse_quantity(value, field)
    with localcontext() as ctx:
        ctx.prec = 80
        return _ceil(number / _MIB)
