"""Length penalties, per-turn process rewards and composites with a hard gate."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.parsing import format_tool_call
from agentgym.verifiers import (
    Composite,
    ProcessReward,
    RewardResult,
    format_reward,
    linear_length_penalty,
    overlong_penalty,
    sigmoid_length_penalty,
    split_turns,
    weighted_sum,
)


def test_linear_length_penalty():
    assert linear_length_penalty(100, start=200, end=400).score == 0.0
    assert linear_length_penalty(100, start=200, end=400).passed
    assert linear_length_penalty(300, start=200, end=400).score == -0.5
    assert linear_length_penalty(900, start=200, end=400, max_penalty=0.3).score == -0.3
    assert linear_length_penalty(300, start=200, end=400).reason == "300 tokens, 100 over the 200-token budget"


def test_sigmoid_length_penalty():
    assert sigmoid_length_penalty(500, midpoint=500, scale=50).score == pytest.approx(-0.5)
    assert sigmoid_length_penalty(0, midpoint=500, scale=50).score > -0.001
    assert sigmoid_length_penalty(10**9, midpoint=500, scale=1).score == pytest.approx(-1.0)
    assert sigmoid_length_penalty(0, midpoint=10**9, scale=0.001).score == 0.0  # no overflow


def test_overlong_penalty_matches_dapo():
    # L_max = 1000, L_cache = 200: free up to 800, linear to -1 at 1000, -1 beyond.
    assert overlong_penalty(800, max_length=1000, buffer=200).score == 0.0
    assert overlong_penalty(900, max_length=1000, buffer=200).score == -0.5
    assert overlong_penalty(1000, max_length=1000, buffer=200).score == -1.0
    assert overlong_penalty(1001, max_length=1000, buffer=200).reason == "1001 tokens, over the 1000-token hard limit"


@given(st.integers(0, 10**6), st.integers(0, 10**5), st.integers(1, 10**5))
def test_penalties_stay_in_range(length, start, width):
    for result in (
        linear_length_penalty(length, start=start, end=start + width),
        sigmoid_length_penalty(length, midpoint=start, scale=width),
        overlong_penalty(length, max_length=start + width, buffer=width),
    ):
        assert -1.0 <= result.score <= 0.0


@pytest.mark.parametrize(
    "call",
    [
        lambda: linear_length_penalty(-1, start=0, end=1),
        lambda: linear_length_penalty(True, start=0, end=1),
        lambda: linear_length_penalty(1, start=5, end=5),
        lambda: sigmoid_length_penalty(1, midpoint=1, scale=0),
        lambda: overlong_penalty(1, max_length=10, buffer=0),
        lambda: overlong_penalty(1, max_length=10, buffer=11),
    ],
)
def test_length_penalty_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


TOOLS = {"search": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}}
MESSAGES = [
    {"role": "user", "content": "find it"},
    {"role": "assistant", "content": format_tool_call("search", {"q": "a"})},
    {"role": "tool", "name": "search", "tool_call_id": "call_1_0", "content": "[]"},
    {"role": "assistant", "content": format_tool_call("search", {"query": "b"})},
    {"role": "tool", "name": "search", "tool_call_id": "call_2_0", "content": "Error: invalid arguments"},
    {"role": "assistant", "content": "It is not there."},
]


def test_split_turns():
    turns = split_turns(MESSAGES)
    assert [t.index for t in turns] == [1, 2, 3]
    assert [len(t.observations) for t in turns] == [1, 1, 0]
    assert turns[2].action == "It is not there."
    with pytest.raises(TypeError):
        split_turns(["not a message"])


@pytest.mark.parametrize("aggregate, expected", [("mean", 2 / 3), ("min", 0.0), ("last", 1.0), ("discounted", (0.81 + 0 + 1) / (0.81 + 0.9 + 1))])
def test_process_reward_aggregates(aggregate, expected):
    process = ProcessReward(lambda turn: format_reward(turn.action, TOOLS), aggregate=aggregate)
    result = process(MESSAGES)
    assert result.score == pytest.approx(expected)
    assert result.components == {"turn_1": 1.0, "turn_2": 0.0, "turn_3": 1.0}
    assert result.details["step_scores"] == [1.0, 0.0, 1.0]
    assert result.reason.startswith("1 of 3 turns failed; turn 2:")
    assert result.passed is False


def test_process_reward_per_step_and_edge_cases():
    process = ProcessReward(lambda turn: format_reward(turn.action, TOOLS))
    assert [r.score for r in process.per_step(MESSAGES)] == [1.0, 0.0, 1.0]
    assert process([{"role": "user", "content": "hi"}]).reason == "no assistant turn to score"
    with pytest.raises(ValueError):
        ProcessReward(lambda t: RewardResult(1.0), aggregate="median")
    with pytest.raises(ValueError):
        ProcessReward(lambda t: RewardResult(1.0), gamma=0)


def part(score, passed=None, reason=""):
    return lambda *_, **__: RewardResult(score, reason, passed=passed)


def test_composite_gate_overrides_farmed_points():
    reward = Composite(
        {"format": (part(1.0), 0.1), "execution": (part(1.0), 0.4), "completion": (part(0.0, False, "wrong refund amount"), 0.5)}, gate="completion"
    )
    result = reward("episode")
    assert result.score == 0.0 and result.passed is False
    assert result.reason == "gate 'completion' failed: wrong refund amount"
    assert result.components == {"format": 1.0, "execution": 1.0, "completion": 0.0}


def test_composite_weighted_total_and_parts():
    reward = Composite(
        {
            "format": (part(0.5, reason="1 malformed call"), 0.1),
            "execution": (part(1.0), 0.4),
            "completion": (part(1.0, True), 0.5),
            "length": (part(0.0, True, "within budget"), 0.2),
        },
        gate="completion",
    )
    result = reward()
    assert result.score == pytest.approx(0.05 + 0.4 + 0.5)
    # A part that passed (a zero length penalty) is not listed as imperfect.
    assert result.reason == "format: 1 malformed call"
    assert result.details["parts"]["completion"] == {"score": 1.0, "reason": "", "components": {}, "passed": True}
    assert reward.weights == {"format": 0.1, "execution": 0.4, "completion": 0.5, "length": 0.2}
    json.dumps(result.to_dict())


def test_composite_validation():
    with pytest.raises(ValueError):
        Composite({})
    with pytest.raises(ValueError):
        Composite({"a": (part(1.0), 1.0)}, gate="b")
    with pytest.raises(TypeError):
        Composite({"a": part(1.0)})
    with pytest.raises(TypeError, match="returned float"):
        Composite({"a": (lambda: 1.0, 1.0)})()


def test_weighted_sum_failure_score():
    parts = {"done": RewardResult(0.0, "nope", passed=False), "style": RewardResult(1.0)}
    assert weighted_sum(parts, {"done": 1.0, "style": 0.2}, gate="done", failure_score=-1.0).score == -1.0
