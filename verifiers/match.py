"""Answer verifiers: exact, normalised, numeric (with tolerance) and mathematical matches.

Each takes the model's response and the reference answer, extracts the final answer from the
response (pass ``extract=None`` when the response already is the answer) and returns a
:class:`RewardResult` with score 1.0 or 0.0, ``passed`` and a reason naming what was compared.
Only one extracted answer is ever compared, so a response that lists candidates cannot match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from agentgym.verifiers.extract import MAX_ANSWER_CHARS, AnswerExtractor, Extraction
from agentgym.verifiers.math_equiv import DEFAULT_TIMEOUT, MathCheck, check_math_equivalence, shared_math_equivalence
from agentgym.verifiers.normalize import NumberParseError, ParsedNumber, normalize_text, parse_number
from agentgym.verifiers.result import RewardResult

__all__ = ["DEFAULT_EXTRACTOR", "Extractor", "exact_match", "math_match", "math_match_batch", "normalized_match", "numeric_match"]

Extractor = Callable[[str], Extraction]

DEFAULT_EXTRACTOR: Extractor = AnswerExtractor()
"""Boxed answer, then ``<answer>`` tag, then "the answer is ..."; a short response is its own answer."""


def _extract(response: str, extract: Extractor | None) -> Extraction:
    if extract is not None:
        return extract(response)
    if not isinstance(response, str):
        return Extraction(None, problem=f"response is {type(response).__name__}, not text")
    answer = response.strip()
    if not answer:
        return Extraction(None, problem="empty answer")
    if len(answer) > MAX_ANSWER_CHARS:
        return Extraction(None, problem=f"answer is {len(answer)} characters long (at most {MAX_ANSWER_CHARS})")
    return Extraction(answer, "given", (answer,))


def _verdict(matched: bool, reason: str, extraction: Extraction, **details: Any) -> RewardResult:
    return RewardResult(score=1.0 if matched else 0.0, reason=reason, passed=matched, details=extraction.details() | details)


def _no_answer(extraction: Extraction) -> RewardResult:
    return _verdict(False, extraction.problem or "no answer", extraction)


def exact_match(response: str, reference: str, *, extract: Extractor | None = DEFAULT_EXTRACTOR) -> RewardResult:
    """1.0 when the extracted answer equals ``reference`` exactly (outer whitespace aside)."""
    extraction = _extract(response, extract)
    if extraction.answer is None:
        return _no_answer(extraction)
    matched = extraction.answer == reference.strip()
    relation = "equals" if matched else "differs from"
    return _verdict(matched, f"answer {_show(extraction.answer)} {relation} reference {_show(reference)}", extraction)


def normalized_match(
    response: str,
    reference: str | Sequence[str],
    *,
    extract: Extractor | None = DEFAULT_EXTRACTOR,
    lowercase: bool = True,
    drop_punctuation: bool = True,
    drop_articles: bool = True,
) -> RewardResult:
    """1.0 when the extracted answer equals the reference (or one of several accepted aliases)
    after :func:`~agentgym.verifiers.normalize.normalize_text`.

    Equality, not containment: ``"Paris, London"`` does not match ``"Paris"``.
    """
    references = [reference] if isinstance(reference, str) else list(reference)
    if not references:
        raise ValueError("normalized_match needs at least one reference")
    extraction = _extract(response, extract)
    if extraction.answer is None:
        return _no_answer(extraction)
    options = {"lowercase": lowercase, "drop_punctuation": drop_punctuation, "drop_articles": drop_articles}
    answer = normalize_text(extraction.answer, **options)
    if not answer:
        return _verdict(False, f"answer {_show(extraction.answer)} is empty once normalised", extraction, normalized=answer)
    for ref in references:
        if answer == normalize_text(ref, **options):
            return _verdict(True, f"answer {_show(extraction.answer)} matches {_show(ref)}", extraction, normalized=answer)
    shown = _show(references[0]) + (f" (or {len(references) - 1} aliases)" if len(references) > 1 else "")
    return _verdict(False, f"answer {_show(extraction.answer)} does not match {shown}", extraction, normalized=answer)


def numeric_match(
    response: str,
    reference: str | int | float | Fraction | Decimal,
    *,
    abs_tol: float = 0.0,
    rel_tol: float = 1e-9,
    percent: Literal["lenient", "strict"] = "lenient",
    check_units: bool = False,
    extract: Extractor | None = DEFAULT_EXTRACTOR,
) -> RewardResult:
    """1.0 when the extracted answer is one number within tolerance of the reference.

    The answer must be exactly one number (see :func:`~agentgym.verifiers.normalize.parse_number`):
    ``"3 or 4"`` is refused. It matches when ``|answer - reference| <= max(abs_tol,
    rel_tol * |reference|)``, computed exactly (tolerance is relative to the reference).

    Args:
        percent: ``"lenient"`` accepts both readings when exactly one side has a percent sign
            (``28%`` matches ``0.28`` and ``28``); ``"strict"`` compares values (``28%`` = 0.28).
        check_units: also require equal unit words (``"12 cm"`` vs ``"12 m"``); units are not
            converted. By default units are read and ignored.
    """
    if abs_tol < 0 or rel_tol < 0:
        raise ValueError("tolerances must be non-negative")
    if percent not in ("lenient", "strict"):
        raise ValueError(f"percent must be 'lenient' or 'strict', got {percent!r}")
    expected = _reference_number(reference)
    extraction = _extract(response, extract)
    if extraction.answer is None:
        return _no_answer(extraction)
    try:
        got = parse_number(extraction.answer)
    except NumberParseError as exc:
        return _verdict(False, f"answer is not a number: {exc}", extraction)
    details = {"value": str(got.value), "reference_value": str(expected.value)}
    if check_units and got.unit != expected.unit:
        return _verdict(False, f"unit {got.unit or 'none'!r} differs from reference unit {expected.unit or 'none'!r}", extraction, **details)
    tolerance = max(Fraction(abs_tol), Fraction(rel_tol) * abs(expected.value))
    readings = [(got.value, expected.value)]
    if percent == "lenient" and got.percent != expected.percent:
        readings.append((got.as_written, expected.as_written))
    for a, b in readings:
        if abs(a - b) <= tolerance:
            return _verdict(True, f"answer {_show(extraction.answer)} equals reference {_show(str(reference))} within tolerance", extraction, **details)
    return _verdict(
        False,
        f"answer {_show(extraction.answer)} is not {_show(str(reference))} (|difference| = {float(abs(got.value - expected.value)):.6g})",
        extraction,
        **details,
    )


def _reference_number(reference: str | int | float | Fraction | Decimal) -> ParsedNumber:
    if isinstance(reference, bool):
        raise TypeError("a boolean is not a numeric reference")
    if isinstance(reference, int | Fraction | Decimal):
        return ParsedNumber(Fraction(reference))
    if isinstance(reference, float):
        # The shortest repr, not the binary expansion: 0.1 means one tenth.
        return ParsedNumber(Fraction(repr(reference)))
    try:
        return parse_number(reference)
    except NumberParseError as exc:
        raise ValueError(f"reference {reference!r} is not a number: {exc}") from exc


def math_match(response: str, reference: str, *, extract: Extractor | None = DEFAULT_EXTRACTOR, timeout: float = DEFAULT_TIMEOUT) -> RewardResult:
    """1.0 when the extracted answer is mathematically equivalent to ``reference``.

    Uses :func:`~agentgym.verifiers.math_equiv.math_equivalent`: bounded by ``timeout`` seconds
    of computation; an answer that cannot be compared in time counts as wrong, with the reason.
    """
    extraction = _extract(response, extract)
    if extraction.answer is None:
        return _no_answer(extraction)
    return _math_verdict(extraction, reference, check_math_equivalence(extraction.answer, reference, timeout=timeout))


def math_match_batch(
    responses: Sequence[str], references: Sequence[str], *, extract: Extractor | None = DEFAULT_EXTRACTOR, timeout: float = DEFAULT_TIMEOUT
) -> list[RewardResult]:
    """:func:`math_match` for a batch (e.g. a GRPO group), compared in parallel worker processes."""
    if len(responses) != len(references):
        raise ValueError(f"{len(responses)} responses but {len(references)} references")
    extractions = [_extract(r, extract) for r in responses]
    todo = [i for i, e in enumerate(extractions) if e.answer is not None]
    checks = shared_math_equivalence().check_batch([(extractions[i].answer or "", references[i]) for i in todo], timeout=timeout)
    results = [_no_answer(e) for e in extractions]
    for i, check in zip(todo, checks, strict=False):
        results[i] = _math_verdict(extractions[i], references[i], check)
    return results


def _math_verdict(extraction: Extraction, reference: str, check: MathCheck) -> RewardResult:
    answer = extraction.answer or ""
    if check.error is not None:
        reason = f"answer {_show(answer)} could not be compared with {_show(reference)}: {check.error}"
    elif check.equivalent:
        reason = f"answer {_show(answer)} is equivalent to {_show(reference)}"
    else:
        reason = f"answer {_show(answer)} is not equivalent to {_show(reference)}"
    return _verdict(check.equivalent, reason, extraction, method=check.method, **({"error": check.error} if check.error else {}))


def _show(text: str, limit: int = 40) -> str:
    # Quoted but not repr(): reasons are for people, and LaTeX backslashes should stay single.
    text = " ".join(text.split())
    return f"'{text}'" if len(text) <= limit else f"'{text[:limit]}...'"
