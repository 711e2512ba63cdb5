"""Normalisation of text answers and parsing of numbers with units, commas and percent."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.verifiers import NumberParseError, normalize_text, parse_number


@pytest.mark.parametrize(
    "text, expected",
    [
        ("  The  Eiffel-Tower! ", "eiffel tower"),
        ("$\\boxed{\\text{New York}}$", "new york"),
        ("1,000,000 people", "1000000 people"),
        ("3.5 apples.", "3.5 apples"),
        ("A", "a"),  # a lone article-like letter is a multiple-choice answer, kept
        ("Ｐａｒｉｓ", "paris"),  # NFKC folds full-width letters
    ],
)
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected


def test_normalize_options():
    assert normalize_text("The Cat", lowercase=False, drop_articles=False) == "The Cat"
    assert normalize_text("a-b", drop_punctuation=False) == "a-b"


@pytest.mark.parametrize(
    "text, value, percent, unit",
    [
        ("42", 42, False, ""),
        ("-5", -5, False, ""),
        ("7,425,000", 7425000, False, ""),
        ("1 000", 1000, False, ""),
        ("$1,000.99", Fraction(100099, 100), False, ""),
        ("\\$-5", -5, False, ""),
        ("€5", 5, False, ""),
        ("28%", Fraction(28, 100), True, ""),
        ("28\\%", Fraction(28, 100), True, ""),
        ("12 percent", Fraction(12, 100), True, ""),
        (".4", Fraction(2, 5), False, ""),
        ("3/4", Fraction(3, 4), False, ""),
        ("-\\dfrac{1}{2}", Fraction(-1, 2), False, ""),
        ("1.5e3", 1500, False, ""),
        ("1.5 \\times 10^{3}", 1500, False, ""),
        ("2×10^-3", Fraction(1, 500), False, ""),
        ("12 cm", 12, False, "cm"),
        ("60 km/h", 60, False, "km/h"),
        ("5 \\text{ cm}^2", 5, False, "cm^2"),
        ("42.", 42, False, ""),
        ("−3", -3, False, ""),
    ],
)
def test_parse_number(text, value, percent, unit):
    parsed = parse_number(text)
    assert (parsed.value, parsed.percent, parsed.unit) == (Fraction(value), percent, unit)


@pytest.mark.parametrize(
    "text, message",
    [
        ("3 or 4", "expected one number"),
        ("1, 2, 3", "expected one number"),
        ("1,22", "expected one number"),  # decimal comma or a list: ambiguous, refused
        ("twelve", "no number"),
        ("", "no number"),
        ("1e999999", "out of range"),
        ("1/0", "division by zero"),
        ("9" * 300, "characters long"),
        ("5 " + "a" * 40 + "1", "expected one number"),  # once backtracked exponentially
    ],
)
def test_parse_number_refuses(text, message):
    with pytest.raises(NumberParseError, match=message):
        parse_number(text)


def test_percent_as_written():
    assert parse_number("28%").as_written == 28


@given(st.text(max_size=300))
def test_parse_number_never_crashes(text):
    try:
        parse_number(text)
    except NumberParseError:
        pass
