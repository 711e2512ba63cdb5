"""Answer verifiers return explained RewardResults and do not reward hedging or spam."""

from decimal import Decimal
from fractions import Fraction

import pytest

from agentgym.verifiers import RewardResult, exact_match, math_match, math_match_batch, normalized_match, numeric_match

# Semantic tests use a long limit so that a loaded machine cannot turn them into timeouts.
GENEROUS = 60.0


def _assert_verdict(result: RewardResult, passed: bool) -> None:
    assert isinstance(result, RewardResult)
    assert result.passed is passed
    assert result.score == (1.0 if passed else 0.0)
    assert result.reason


def test_exact_match():
    _assert_verdict(exact_match("\\boxed{42}", "42"), True)
    _assert_verdict(exact_match("\\boxed{42.0}", "42"), False)
    result = exact_match("Paris", " Paris ", extract=None)
    _assert_verdict(result, True)
    assert result.details == {"answer": "Paris", "answer_source": "given"}


def test_normalized_match_with_aliases():
    result = normalized_match("<answer>the Eiffel tower!</answer>", ["Eiffel Tower", "Tour Eiffel"])
    _assert_verdict(result, True)
    assert result.details["answer_source"] == "tag" and result.details["normalized"] == "eiffel tower"
    _assert_verdict(normalized_match("Tour Eiffel", ["Eiffel Tower", "Tour Eiffel"]), True)


def test_normalized_match_is_equality_not_containment():
    _assert_verdict(normalized_match("Paris, London, Berlin", "Paris"), False)
    _assert_verdict(normalized_match("The answer is Paris or Rome.", "Paris"), False)


def test_normalized_match_refuses_empty_answers():
    result = normalized_match("<answer>!!!</answer>", "!?")
    _assert_verdict(result, False)
    assert "empty once normalised" in result.reason
    with pytest.raises(ValueError):
        normalized_match("x", [])


@pytest.mark.parametrize(
    "response, reference, kwargs, passed",
    [
        ("The answer is $1,000.", 1000, {}, True),
        ("\\boxed{7425000}", "7,425,000", {}, True),
        ("0.1", 0.1, {}, True),  # a float reference means its shortest decimal
        ("1/3", Fraction(1, 3), {}, True),
        ("2.50", Decimal("2.5"), {}, True),
        ("12 cm", "12", {}, True),  # units are read and ignored by default
        ("12 cm", "12 m", {"check_units": True}, False),
        ("0.333", "1/3", {}, False),
        ("0.333", "1/3", {"rel_tol": 1e-2}, True),
        ("101", "100", {"abs_tol": 1}, True),
        ("102", "100", {"abs_tol": 1}, False),
        ("28%", "0.28", {}, True),
        ("28", "28%", {}, True),
        ("28", "28%", {"percent": "strict"}, False),
        ("0.28", "28%", {"percent": "strict"}, True),
    ],
)
def test_numeric_match(response, reference, kwargs, passed):
    _assert_verdict(numeric_match(response, reference, **kwargs), passed)


@pytest.mark.parametrize("spam", ["The answer is 3 or 4.", "\\boxed{3} \\boxed{4}", "1, 2, 3, 4, 5", "<answer>3</answer><answer>4</answer>"])
def test_numeric_match_refuses_answer_spam(spam):
    for reference in ("3", "4"):
        _assert_verdict(numeric_match(spam, reference), False)


def test_numeric_match_errors():
    with pytest.raises(ValueError, match="not a number"):
        numeric_match("1", "seven")
    with pytest.raises(ValueError):
        numeric_match("1", 1, abs_tol=-1)
    with pytest.raises(TypeError):
        numeric_match("1", True)
    result = numeric_match("seven", 7)
    _assert_verdict(result, False)
    assert result.reason.startswith("answer is not a number")


def test_math_match():
    result = math_match("so \\boxed{\\frac{2}{4}}", "0.5", timeout=GENEROUS)
    _assert_verdict(result, True)
    assert result.reason == "answer '\\frac{2}{4}' is equivalent to '0.5'"
    _assert_verdict(math_match("\\boxed{x^2 - 1}", "(x-1)(x+1)", timeout=GENEROUS), True)


@pytest.mark.parametrize("spam", ["\\boxed{1} \\boxed{2} \\boxed{3}", "The answer is 1, 2, or 3.", "\\boxed{1, 2, 3}", "<answer>1</answer> <answer>2</answer>"])
def test_math_match_refuses_answer_spam(spam):
    for reference in ("1", "2", "3"):
        _assert_verdict(math_match(spam, reference, timeout=GENEROUS), False)


def test_math_match_batch_reports_timeouts_and_missing_answers():
    results = math_match_batch(["\\boxed{2^{2^{40}}}", "no answer here " * 20, "\\boxed{4}"], ["5", "3", "4"], timeout=1.0)
    assert [r.passed for r in results] == [False, False, True]
    assert "timed out after 1 s" in results[0].reason and results[0].details["error"] == "timed out after 1 s"
    assert results[1].reason.startswith("no answer found")
    with pytest.raises(ValueError):
        math_match_batch(["1"], [])


def test_overlong_answers_are_refused():
    result = exact_match("x" * 20_000, "x", extract=None)
    _assert_verdict(result, False)
    assert "characters long" in result.reason
