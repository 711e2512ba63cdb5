"""Parsing assistant turns: both action formats, and every malformed shape as an error, not an exception."""

import json

from agentgym.parsing import format_tool_call, parse_action


def test_text_with_several_calls_and_surrounding_text():
    text = 'Let me check. <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n<tool_call>{"name": "b"}</tool_call> done'
    parsed = parse_action(text, id_prefix="call_3")
    assert [(c.name, c.arguments, c.id) for c in parsed.tool_calls] == [("a", {"x": 1}, "call_3_0"), ("b", {}, "call_3_1")]
    assert parsed.content == "Let me check. \n done"
    assert parsed.errors == ()


def test_round_trip_of_format_tool_call():
    parsed = parse_action(format_tool_call("pay", {"amount": 1.5, "note": "é"}))
    assert parsed.tool_calls[0].arguments == {"amount": 1.5, "note": "é"}


def test_malformed_text_calls_become_errors():
    cases = {
        "<tool_call>{not json}</tool_call>": "not valid JSON",
        "<tool_call>[1, 2]</tool_call>": "must be a JSON object",
        '<tool_call>{"arguments": {}}</tool_call>': 'needs a string "name"',
        '<tool_call>{"name": "a", "arguments": [1]}</tool_call>': "must be a JSON object",
        '<tool_call>{"name": "a", "arguments": "{bad"}</tool_call>': "not valid JSON",
        '<tool_call>{"name": "a"}': "unterminated",
        'text </tool_call>': "without a matching",
        "<tool_call>" + "[" * 100000 + "</tool_call>": "",
    }
    for text, fragment in cases.items():
        parsed = parse_action(text)
        assert parsed.tool_calls == () and len(parsed.errors) >= 1, text[:40]
        assert fragment in parsed.errors[0]


def test_openai_message_dict():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "abc", "type": "function", "function": {"name": "a", "arguments": json.dumps({"x": 2})}},
            {"type": "function", "function": {"name": "b", "arguments": {"y": 3}}},
            {"type": "function"},
            {"function": {"name": "c", "arguments": "{oops"}},
        ],
    }
    parsed = parse_action(message, id_prefix="call_1")
    assert [(c.name, c.arguments, c.id) for c in parsed.tool_calls] == [("a", {"x": 2}, "abc"), ("b", {"y": 3}, "call_1_1")]
    assert len(parsed.errors) == 2 and parsed.content == ""


def test_non_actions_are_errors():
    assert parse_action(42).errors
    assert parse_action({"role": "user", "content": "hi"}).errors
    assert parse_action({"role": "assistant", "tool_calls": "nope"}).errors
