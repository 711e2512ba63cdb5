"""math_equivalent: math-verify's verdicts, a numeric shortcut that agrees with them, hard time bounds."""

import itertools
import json
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.verifiers import check_math_equivalence, math_equivalent, math_equivalent_batch
from agentgym.verifiers.math_equiv import numeric_shortcut, prepare_answer

CASES = Path(__file__).parent / "data" / "math_verify_cases.jsonl"

# Semantic tests use a long limit: on a loaded machine a slow comparison must not turn into a
# timeout verdict. Time bounds have their own tests.
GENEROUS = 60.0

EQUIVALENCES = [
    # prediction, reference, equivalent
    ("\\frac{1}{2}", "0.5", True),
    ("1/2", "\\frac{1}{2}", True),
    ("0.333333", "\\frac{1}{3}", True),  # decimals are compared rounded to 6 places
    ("0.33", "\\frac{1}{3}", False),
    ("x^2+2x+1", "(x+1)^2", True),
    ("2x", "2", False),
    ("\\sqrt{8}", "2\\sqrt{2}", True),
    ("[0, 1)", "$[0,1)$", True),
    ("(0, 1)", "[0,1)", False),
    ("\\{1, 2, 3\\}", "\\{3, 2, 1\\}", True),
    ("1, 2, 3", "3", False),  # a list of candidates is a set, not the answer
    ("$\\boxed{42}$", "42", True),
    ("50\\%", "50", True),
    ("y = 2x + 1", "y = 1 + 2x", True),
    ("1-\\frac{1}{\\mathrm{e}}", "1+\\frac{1}{e}", False),
    ("", "1", False),
]


def test_equivalences():
    got = math_equivalent_batch([(p, r) for p, r, _ in EQUIVALENCES], timeout=GENEROUS)
    assert got == [expected for _, _, expected in EQUIVALENCES]


def test_single_call_and_cache():
    assert math_equivalent("\\dfrac{3}{6}", "\\frac12", timeout=GENEROUS)
    again = check_math_equivalence("\\dfrac{3}{6}", "\\frac12", timeout=GENEROUS)
    assert again.equivalent and again.method == "cached"


def test_plain_numbers_take_the_shortcut():
    check = check_math_equivalence("\\boxed{1024}", "$1024$")
    assert check.equivalent and check.method == "numeric"
    assert check_math_equivalence("1023", "1024").method == "numeric"


def test_shortcut_declines_long_or_odd_input_quickly():
    assert numeric_shortcut("$" * 20_000 + "1x", "1") is None  # once a backtracking regex
    assert numeric_shortcut("5$", "5") is None


def test_rejects_non_strings():
    with pytest.raises(TypeError, match="prediction is int"):
        math_equivalent(1, "1")


ADVERSARIAL = ["9^9^9^9", "9^{9^{9^{9}}}", "10^10^10", "1000000!", "(10^{10})!", "2^{2^{40}}"]


_fresh = itertools.count()


def _wait_for_started_workers():
    # A worker killed by the previous case is replaced by one that needs a moment (longer on a
    # loaded machine) to import; that start-up is not part of the bound under test.
    pairs = [(f"x+{n}", f"{n}+x") for n in (next(_fresh) for _ in range(8))]
    assert all(math_equivalent_batch(pairs, timeout=GENEROUS))


@pytest.mark.parametrize("answer", ADVERSARIAL)
def test_adversarial_input_never_runs_past_its_bound(answer):
    _wait_for_started_workers()
    started = time.monotonic()
    check = check_math_equivalence(answer, "5", timeout=1.0)
    elapsed = time.monotonic() - started
    assert not check.equivalent
    # Without the bound these inputs run for minutes (or until memory runs out).
    assert elapsed < 1.0 + 2.0, f"{answer!r} took {elapsed:.1f} s"


def test_bounded_in_a_non_main_thread():
    box = {}

    def work():
        box["slow"] = check_math_equivalence("(10^{11})!", "6", timeout=0.5)
        box["fine"] = math_equivalent("\\frac{6}{4}", "1.5", timeout=GENEROUS)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert box["slow"].error == "timed out after 0.5 s" and not box["slow"].equivalent
    assert box["fine"]


def test_prepare_answer_wraps_bare_answers_only():
    assert prepare_answer(" 2x ") == "$2x$"
    assert prepare_answer("$2x$") == "$2x$"
    assert prepare_answer("\\boxed{2x}") == "\\boxed{2x}"
    assert prepare_answer("1-1/\\mathrm{e}") == "$1-1/e$"


_DIGITS = st.integers(min_value=0, max_value=10**12)


@st.composite
def number_pairs(draw):
    whole = draw(_DIGITS)
    frac = draw(st.one_of(st.just(""), st.integers(0, 10**8).map(lambda f: f".{f:08d}".rstrip("0") or ".0")))
    a = f"{'-' if draw(st.booleans()) else ''}{draw(st.sampled_from(['', '0', '00']))}{whole}{frac}"
    kind = draw(st.sampled_from(["same", "nudge", "other", "integer"]))
    if kind == "same":
        b = a
    elif kind == "nudge":  # lands near math-verify's 6-decimal rounding boundary
        digits = draw(st.sampled_from(["1", "0000001", "00000049", "00000051", "0"]))
        b = a + digits if "." in a else f"{a}.{digits}"
    elif kind == "integer":
        b = str(whole)
    else:
        b = f"{draw(_DIGITS)}{frac}"
    return (a, b) if draw(st.booleans()) else (b, a)


@settings(max_examples=150, deadline=None)
@given(number_pairs())
def test_numeric_shortcut_agrees_with_math_verify(pair):
    from agentgym.verifiers._math_worker import equivalent

    decided = numeric_shortcut(*pair)
    if decided is not None:
        assert decided == equivalent(prepare_answer(pair[0]), prepare_answer(pair[1])), pair


def _cases():
    return [json.loads(line) for line in CASES.read_text(encoding="utf-8").splitlines()]


def test_agreement_with_math_verify_test_cases():
    cases = _cases()
    got = math_equivalent_batch([(c["prediction"], c["reference"]) for c in cases], timeout=GENEROUS)
    agree = sum(g == c["upstream_equal"] for g, c in zip(got, cases)) / len(cases)
    assert agree >= 0.95, f"agreement {agree:.3f}"
    # Every difference from upstream is a documented policy choice, and every documented choice holds.
    wrong = [c["id"] for g, c in zip(got, cases) if g != c.get("agentgym_equal", c["upstream_equal"])]
    assert wrong == []
