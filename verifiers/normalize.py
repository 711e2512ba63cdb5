"""Normalising answers before they are compared: text, and numbers with units, commas, percent.

Both functions are pure and bounded: inputs are length-capped and exponents are range-checked,
so a hostile answer such as ``1e999999999`` is refused instead of building a giant number.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["NumberParseError", "ParsedNumber", "normalize_text", "parse_number", "strip_latex"]

MAX_NUMBER_CHARS = 200
MAX_EXPONENT = 400

_ARTICLES = frozenset({"a", "an", "the"})
# \text{...}-like wrappers whose content is the answer; the command itself is noise.
_WRAPPERS = re.compile(r"\\(?:boxed|fbox|text|textbf|textit|textrm|mathrm|mathbf|mathit|operatorname|mbox)\s*\{([^{}]*)\}")
_LATEX_SPACING = re.compile(r"\\[,;:! ]|~|\\quad|\\qquad")
_MATH_DELIMITERS = re.compile(r"\\[()\[\]]|\$")
_SIZING = re.compile(r"\\(?:left|right|displaystyle)\b")
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def strip_latex(text: str) -> str:
    """Remove math delimiters, spacing commands and text wrappers, keeping their content."""
    text = _MATH_DELIMITERS.sub(" ", text)
    text = _SIZING.sub("", text)
    text = _LATEX_SPACING.sub(" ", text)
    previous = None
    while previous != text:  # wrappers nest: \boxed{\text{Paris}}
        previous, text = text, _WRAPPERS.sub(r"\1", text)
    return text


def normalize_text(text: str, *, lowercase: bool = True, drop_punctuation: bool = True, drop_articles: bool = True) -> str:
    """Canonical form of a short text answer, for comparing answers that differ only cosmetically.

    Unicode is NFKC-normalised, LaTeX delimiters and ``\\text{}``-style wrappers are removed,
    then (each optional) the text is case-folded, punctuation becomes space (except a decimal
    point and thousands commas inside numbers, which are kept and removed respectively) and a
    leading article *a*, *an* or *the* is dropped when words follow it (so the multiple-choice
    answer ``A`` survives); whitespace is collapsed.

    >>> normalize_text("  The  Eiffel-Tower! ")
    'eiffel tower'
    """
    text = strip_latex(unicodedata.normalize("NFKC", text))
    if lowercase:
        text = text.casefold()
    if drop_punctuation:
        text = _THOUSANDS_COMMA.sub("", text)
        text = "".join(_keep_or_space(text, i) for i in range(len(text)))
    words = text.split()
    if drop_articles and len(words) > 1 and words[0].casefold() in _ARTICLES:
        words = words[1:]
    return " ".join(words)


def _keep_or_space(text: str, i: int) -> str:
    char = text[i]
    if not unicodedata.category(char).startswith(("P", "S")):
        return char
    decimal_point = char == "." and 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
    return char if decimal_point else " "


class NumberParseError(ValueError):
    """The text is not exactly one number (with an optional currency, percent sign and unit)."""


@dataclass(frozen=True)
class ParsedNumber:
    """One number read from an answer.

    Attributes:
        value: the exact value; a percentage is already divided by 100.
        percent: whether the number carried a percent sign (``28%`` has value 0.28).
        unit: the normalised unit or trailing word(s) (``"cm"``, ``"km/h"``), or ``""``.
    """

    value: Fraction
    percent: bool = False
    unit: str = ""

    @property
    def as_written(self) -> Fraction:
        """The number as written, before a percent sign's division by 100."""
        return self.value * 100 if self.percent else self.value


_CURRENCY = r"(?:\\\$|\$|€|£|¥|₹|usd|eur|gbp)"
_PLAIN = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_NUMBER = re.compile(
    rf"""^\s*(?P<sign>[-+−])?\s*{_CURRENCY}?\s*(?P<sign2>[-+−])?\s*
    (?:
        \\[dt]?frac\s*\{{\s*(?P<fnum>\d+)\s*\}}\s*\{{\s*(?P<fden>\d+)\s*\}}
      | (?P<num>{_PLAIN})\s*/\s*(?P<den>{_PLAIN})
      | (?P<mantissa>{_PLAIN})
        (?:\s*(?:e|E)(?P<exp>[-+]?\d+) | \s*(?:\\times|\\cdot|×|\*|x)\s*10\s*\^\s*\{{?\s*(?P<exp10>[-+−]?\d+)\s*\}}?)?
    )
    \s*(?P<percent>\\%|%|percent\b|per\s+cent\b)?
    (?P<unit>.*?)\s*$""",
    re.VERBOSE | re.IGNORECASE | re.DOTALL,
)
# A unit is words (and / ^ exponents) with no further number in it: "km/h", "m^2", "apples".
# One character per repetition: a nested quantifier here would backtrack exponentially.
_UNIT = re.compile(r"(?:[^\W\d_]|[\s/·.²³]|\^\d*)*")
_TRAILING = re.compile(r"[\s.;:!,]+$")


def parse_number(text: str) -> ParsedNumber:
    """Read exactly one number from a short answer.

    Accepts a sign, a currency symbol (``$``, ``€``, ``£``, ``¥``, ``₹``), thousands commas
    (``7,425,000``), decimals, ``a/b`` and ``\\frac{a}{b}``, scientific notation (``1.5e3``,
    ``1.5 \\times 10^{3}``), a percent sign and trailing unit words (``12 cm``, ``3 apples``).

    Raises:
        NumberParseError: with the reason, when the text is not one number: no number, several
            numbers (``3 or 4``), or too long or too large to be an answer.
    """
    if len(text) > MAX_NUMBER_CHARS:
        raise NumberParseError(f"answer is {len(text)} characters long; a number has at most {MAX_NUMBER_CHARS}")
    cleaned = _TRAILING.sub("", strip_latex(unicodedata.normalize("NFKC", text)))
    cleaned = re.sub(r"(?<=\d) (?=\d{3}(?!\d))", "", cleaned.strip())  # "1 000 000"
    match = _NUMBER.match(cleaned)
    if match is None:
        raise NumberParseError(f"no number in {_preview(text)}")
    unit = " ".join(match["unit"].split()).casefold()
    if not _UNIT.fullmatch(unit):
        raise NumberParseError(f"expected one number, got {_preview(text)}")
    negative = (match["sign"] or match["sign2"] or "+") in "-−"
    value = -_value(match) if negative else _value(match)
    percent = match["percent"] is not None
    return ParsedNumber(value=value / 100 if percent else value, percent=percent, unit=unit)


def _value(match: re.Match[str]) -> Fraction:
    if match["fnum"] is not None:
        return _ratio(Fraction(match["fnum"]), Fraction(match["fden"]))
    if match["num"] is not None:
        return _ratio(_decimal(match["num"]), _decimal(match["den"]))
    value = _decimal(match["mantissa"])
    exponent = match["exp"] if match["exp"] is not None else match["exp10"]
    if exponent is not None:
        power = int(exponent.replace("−", "-"))
        if abs(power) > MAX_EXPONENT:
            raise NumberParseError(f"exponent {power} is out of range (|exponent| <= {MAX_EXPONENT})")
        value *= Fraction(10) ** power
    return value


def _decimal(digits: str) -> Fraction:
    return Fraction(digits.replace(",", ""))


def _ratio(numerator: Fraction, denominator: Fraction) -> Fraction:
    if denominator == 0:
        raise NumberParseError("division by zero")
    return numerator / denominator


def _preview(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")
