"""JSON Schema checks, the format reward and tool-use shaping."""

import json

import pytest

from agentgym.parsing import format_tool_call
from agentgym.tools import tool, tools_of
from agentgym.verifiers import (
    episode_format_reward,
    format_reward,
    tool_calls_of,
    tool_schemas,
    tool_use_reward,
    validate_json,
    validate_json_text,
    validate_tool_call,
)


class Shop:
    @tool
    def lookup_order(self, order_id: str) -> str:
        """Find an order.

        Args:
            order_id: the order's id.
        """
        return order_id

    @tool
    def refund(self, order_id: str, amount: float, note: str | None = None) -> str:
        """Refund an order."""
        return order_id


TOOLS = tools_of(Shop)
OPENAI_SPECS = [t.schema for t in TOOLS]


def call(name, **arguments):
    return format_tool_call(name, arguments)


def test_tool_schemas_accepts_every_shape():
    by_name = {t.name: t.parameters for t in TOOLS}
    assert tool_schemas(TOOLS) == by_name
    assert tool_schemas(OPENAI_SPECS) == by_name
    assert tool_schemas(by_name) == by_name
    assert tool_schemas([{"name": "x", "input_schema": {"type": "object"}}]) == {"x": {"type": "object"}}
    with pytest.raises(TypeError):
        tool_schemas([42])


def test_validate_json():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert validate_json({"n": 1}, schema).passed
    bad = validate_json({"n": "one"}, schema)
    assert bad.score == 0.0 and bad.reason == "does not match the schema: n: 'one' is not of type 'integer'"
    with pytest.raises(ValueError, match="invalid JSON Schema"):
        validate_json({}, {"type": "no-such-type"})


def test_validate_json_text():
    schema = {"type": "object", "required": ["a"]}
    assert validate_json_text('```json\n{"a": 1}\n```', schema).passed
    assert validate_json_text("{oops", schema).reason.startswith("not valid JSON")
    assert not validate_json_text("{}", schema).passed
    assert validate_json_text("```" + " " * 20_000 + "x", schema).reason.startswith("not valid JSON")  # no backtracking


def test_validate_tool_call_shapes():
    assert validate_tool_call({"name": "lookup_order", "arguments": {"order_id": "A1"}}, TOOLS).passed
    openai_entry = {"id": "c", "type": "function", "function": {"name": "refund", "arguments": json.dumps({"order_id": "A1", "amount": 5})}}
    assert validate_tool_call(openai_entry, OPENAI_SPECS).passed
    missing = validate_tool_call({"name": "refund", "arguments": {"order_id": "A1"}}, TOOLS)
    assert missing.reason == "invalid arguments for 'refund': 'amount' is a required property"
    unknown = validate_tool_call({"name": "delete_db", "arguments": {}}, TOOLS)
    assert unknown.reason == "unknown tool 'delete_db' (known: lookup_order, refund)"
    extra = validate_tool_call({"name": "lookup_order", "arguments": {"order_id": "A1", "admin": True}}, TOOLS)
    assert not extra.passed
    text_args = validate_tool_call({"function": {"name": "refund", "arguments": "{not json"}}, TOOLS)
    assert text_args.reason == "arguments of 'refund' are not a JSON object"


def test_format_reward_valid_turn():
    result = format_reward("Let me check. " + call("lookup_order", order_id="A1"), TOOLS)
    assert result.score == 1.0 and result.passed
    assert result.components == {"syntax": 1.0, "known_tools": 1.0, "arguments": 1.0}


def test_format_reward_partial_turn():
    action = call("lookup_order", order_id="A1") + "<tool_call>{broken</tool_call>" + call("refund", order_id="A1") + call("fly", to="moon")
    result = format_reward(action, OPENAI_SPECS)
    assert result.score == pytest.approx(1 / 4)
    assert result.components == {"syntax": 0.75, "known_tools": pytest.approx(2 / 3), "arguments": 0.5}
    assert result.reason.startswith("1 of 4 tool calls valid; tool call is not valid JSON")
    assert len(result.details["problems"]) == 3


def test_format_reward_plain_turns():
    assert format_reward("Done, your refund is on its way.", TOOLS).score == 1.0
    assert format_reward("Done.", TOOLS, require_tool_call=True).score == 0.0
    message = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "refund", "arguments": "{}"}}]}
    assert format_reward(message, TOOLS).components["arguments"] == 0.0


def test_episode_format_reward_from_messages():
    messages = [
        {"role": "system", "content": "be helpful"},
        {"role": "user", "content": "refund A1"},
        {"role": "assistant", "content": call("lookup_order", order_id="A1")},
        {"role": "tool", "name": "lookup_order", "tool_call_id": "call_1_0", "content": "{}"},
        {"role": "assistant", "content": call("refund", order_id="A1")},
        {"role": "tool", "name": "refund", "tool_call_id": "call_2_0", "content": "Error: ..."},
    ]
    result = episode_format_reward(messages, TOOLS)
    assert result.score == 0.5 and result.details["turn_scores"] == [1.0, 0.0]
    assert result.reason.startswith("1 of 2 turns malformed; turn 2:")
    assert episode_format_reward([m["content"] for m in messages if m["role"] == "assistant"], TOOLS).score == 0.5
    assert episode_format_reward([], TOOLS).score == 0.0


def test_tool_calls_of_messages():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": call("lookup_order", order_id="A1") + call("refund", order_id="A1", amount=1)},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "refund", "arguments": "{}"}}]},
    ]
    assert [c.name for c in tool_calls_of(messages)] == ["lookup_order", "refund", "refund"]


def test_tool_use_clean():
    calls = [{"name": "lookup_order", "arguments": {"order_id": "A1"}}, {"name": "refund", "arguments": {"order_id": "A1", "amount": 5}}]
    result = tool_use_reward(calls, known=TOOLS, expected={"lookup_order", "refund"})
    assert result.score == 1.0 and result.passed
    assert result.components == {"right_tool": 1.0, "duplicate_calls": 0.0, "hallucinated_tools": 0.0, "excess_calls": 0.0}


def test_tool_use_penalties():
    same = {"name": "lookup_order", "arguments": {"order_id": "A1"}}
    calls = [same, same, same, {"name": "hack", "arguments": {}}]
    result = tool_use_reward(calls, known=["lookup_order", "refund"], expected={"lookup_order", "refund"})
    # right_tool 0.5; penalties 2 duplicates * 0.25 + 1 hallucination * 0.5 = 1.0
    assert result.score == 0.0
    assert result.components["right_tool"] == 0.5
    assert result.components["duplicate_calls"] == -0.5 and result.components["hallucinated_tools"] == -0.5
    assert "missing expected tool(s) ['refund']" in result.reason
    assert "2 consecutive duplicate call(s)" in result.reason
    assert "1 call(s) to unknown tool(s) ['hack']" in result.reason


def test_tool_use_duplicates_must_be_consecutive_and_identical():
    a1 = {"name": "lookup_order", "arguments": {"order_id": "A1"}}
    a2 = {"name": "lookup_order", "arguments": {"order_id": "A2"}}
    assert tool_use_reward([a1, a2, a1], known=TOOLS).details["duplicates"] == 0


def test_tool_use_spam_is_capped():
    spam = [{"name": "lookup_order", "arguments": {"order_id": str(i)}} for i in range(50)]
    result = tool_use_reward(spam, known=TOOLS, expected={"lookup_order"}, max_calls=5, max_penalty=0.5)
    assert result.details["excess"] == 45
    assert result.score == 0.5  # 1.0 right tool - penalty capped at 0.5
    assert "penalty capped at 0.5" in result.reason


def test_tool_use_bad_arguments():
    with pytest.raises(ValueError):
        tool_use_reward([], known=TOOLS, duplicate_penalty=-1)
