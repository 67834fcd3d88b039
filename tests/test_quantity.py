"""intent.quantity on hostile input: every string is a Decimal or an IntentError."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intent.contract import IntentError
from intent.quantity import MAX_EXPONENT, parse_count, parse_quantity, to_mib


@pytest.mark.parametrize(
    "raw",
    [
        "0e9999999",  # Decimal(0).scaleb(9999999) raised decimal.InvalidOperation
        "0e-9999999",
        "0.0e999999999999",
        "00e123456789012345678901234567890",
        "-0E95",
        "1e9999999",
    ],
)
def test_huge_exponents_are_out_of_range_even_for_zero(raw: str) -> None:
    with pytest.raises(IntentError, match=r"^f: quantity .* is out of range$"):
        parse_quantity(raw, "f")


@pytest.mark.parametrize(
    ("raw", "expected"), [("0e94", 0), ("0e-94", 0), ("0.000001e35", 10**29), ("0Ei", 0)]
)
def test_exponents_within_reach_still_parse(raw: str, expected: int) -> None:
    assert parse_quantity(raw, "f") == expected


def test_vram_request_that_raised_now_warns() -> None:
    with pytest.raises(IntentError, match=r"tensor-fusion\.ai/vram-request"):
        to_mib("0e9999999", 'metadata.annotations["tensor-fusion.ai/vram-request"]')


_QUANTITY_ALPHABET = "0123456789.+-eEKMGTPEinumk "


def _check(raw: str | int | float) -> None:
    try:
        value = parse_quantity(raw, "f")
    except IntentError as e:
        assert str(e).startswith("f: ")
        return
    assert value.is_finite()
    assert value == 0 or abs(value.adjusted()) <= MAX_EXPONENT
    parse_count(raw, "f")
    to_mib(raw, "f")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_QUANTITY_ALPHABET, max_size=24) | st.text(max_size=70))
def test_any_text_parses_or_raises_intent_error(raw: str) -> None:
    _check(raw)


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        lambda sign, digits, frac, exp: f"{sign}{digits}{frac}e{exp}",
        st.sampled_from(["", "+", "-"]),
        st.text("0123456789", min_size=1, max_size=20),
        st.sampled_from(["", ".", ".0", ".5"]),
        st.integers(min_value=-(10**12), max_value=10**12),
    )
    | st.integers()
    | st.floats()
)
def test_exponent_forms_and_numbers_parse_or_raise_intent_error(raw: str | int | float) -> None:
    _check(raw)


def test_parsed_values_are_exact() -> None:
    assert parse_quantity("1.5e3", "f") == Decimal(1500)


def test_memoized_parse_names_each_callers_field() -> None:
    for field in ("first", "second"):  # the second parse of "abc" comes from the memo
        with pytest.raises(IntentError, match=rf"^{field}: 'abc' is not a Kubernetes quantity$"):
            parse_quantity("abc", field)
    long_text = " " * 200 + "1"  # past the memo's key length: parsed each time, same answer
    assert parse_quantity(long_text, "f") == 1
    assert parse_quantity("1", "f") is parse_quantity("1", "g")


def test_memo_keeps_numbers_and_strings_apart() -> None:
    assert parse_quantity(1, "f") == parse_quantity(1.0, "f") == parse_quantity("1", "f") == 1
    assert parse_quantity(1.5, "f") == parse_quantity("1.5", "f") == Decimal("1.5")
    with pytest.raises(IntentError, match=r"^f: True is not a quantity$"):
        parse_quantity(True, "f")
    with pytest.raises(IntentError, match=r"^f: \[1\] is not a quantity$"):
        parse_quantity([1], "f")  # type: ignore[arg-type]  # unhashable: never reaches the memo
