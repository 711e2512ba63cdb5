"""Answer extraction: boxed (nested braces), tags, phrases, regex, and the anti-hedging policy."""

import pytest

from agentgym.verifiers import AnswerExtractor, extract_boxed, extract_final_answer, extract_regex, extract_tagged


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{42}.", ["42"]),
        ("\\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"]),
        ("\\boxed{\\{1, 2\\}}", ["\\{1, 2\\}"]),  # escaped braces do not close the box
        ("\\boxed{a_{i}^{2}} and \\fbox{7}", ["a_{i}^{2}", "7"]),
        ("\\boxed 5$ done", ["5"]),
        ("\\boxed{unclosed", []),
        ("\\boxedfoo{1}", []),
        ("nothing", []),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_tagged():
    assert extract_tagged("<answer> Paris </answer> then <ANSWER>Rome</ANSWER>") == ["Paris", "Rome"]
    assert extract_tagged("<final>x</final>", tag="final") == ["x"]
    with pytest.raises(ValueError):
        extract_tagged("", tag="a|b")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 42.", ["42"]),
        ("**Final Answer:** $x = 3$\nThanks", ["$x = 3$"]),
        ("final answer is 3.5", ["3.5"]),
        ("answer = 7", ["7"]),
        ("the answer is 3. No wait, the answer is 4.", ["3", "4"]),
        ("I have no idea", []),
    ],
)
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


def test_extract_regex():
    assert extract_regex("id=12, id=34", r"id=(\d+)") == ["12", "34"]
    assert extract_regex("A: x", r"A:\s*(?P<answer>\w+)", group="answer") == ["x"]


def test_priority_boxed_then_tag_then_phrase():
    extract = AnswerExtractor()
    assert extract("The answer is 3. <answer>4</answer> \\boxed{5}").answer == "5"
    assert extract("The answer is 3. <answer>4</answer>").source == "tag"
    assert extract("The answer is 3.").source == "final_answer"


def test_different_boxed_answers_are_rejected():
    result = AnswerExtractor()("\\boxed{3} or maybe \\boxed{4}")
    assert result.answer is None
    assert result.problem == "2 different boxed answers: '3', '4'"
    assert result.candidates == ("3", "4")


def test_repeated_boxed_answer_is_fine():
    assert AnswerExtractor()("\\boxed{3} ... so \\boxed{ 3 }").answer == "3"


def test_last_policy_takes_the_last_box():
    assert AnswerExtractor(on_conflict="last")("\\boxed{3} \\boxed{4}").answer == "4"


def test_conflicting_tags_are_rejected():
    assert AnswerExtractor()("<answer>1</answer><answer>2</answer>").answer is None


def test_last_phrase_wins():
    assert AnswerExtractor()("So the answer is 3. Checking again, the answer is 4.").answer == "4"


def test_whole_text_fallback_is_short_only():
    assert AnswerExtractor()("  42 ").answer == "42"
    long = AnswerExtractor()("word " * 100)
    assert long.answer is None and long.problem.startswith("no answer found")
    assert AnswerExtractor(whole_text_max_chars=0)("42").answer is None


def test_empty_and_non_text():
    assert AnswerExtractor()("   ").problem == "empty response"
    assert AnswerExtractor()(None).problem == "response is NoneType, not text"


def test_regex_strategy_and_bad_configuration():
    extract = AnswerExtractor(order=("regex",), pattern=r"ANSWER:\s*(\S+)")
    assert extract("blah ANSWER: B").answer == "B"
    with pytest.raises(ValueError):
        AnswerExtractor(order=("regex",))
    with pytest.raises(ValueError):
        AnswerExtractor(order=("telepathy",))
    with pytest.raises(ValueError):
        AnswerExtractor(on_conflict="first")
