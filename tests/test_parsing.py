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
        "text </tool_call>": "without a matching",
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


def test_numbers_too_long_to_convert_are_format_errors_in_both_formats():
    digits = "9" * 5000  # a degenerate digit loop, past Python's int-string conversion limit
    text = parse_action(f'<tool_call>{{"name": "a", "arguments": {{"x": {digits}}}}}</tool_call>')
    openai = parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": f'{{"x": {digits}}}'}}]})
    python = parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {"x": int(digits[:4000]) ** 2}}}]})
    for parsed in (text, openai, python):
        assert not parsed.tool_calls and len(parsed.errors) == 1
        assert "a number is too long" in parsed.errors[0] and "set_int_max_str_digits" not in parsed.errors[0]


def test_arguments_become_json_data_or_an_error():
    message = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "a", "arguments": {"tags": {1, 2}}}}, {"function": {"name": "b", "arguments": {"pair": (1, 2), 3: "x"}}}],
    }
    parsed = parse_action(message)
    assert parsed.errors == ("arguments of 'a' must be JSON values (a value is not JSON: Object of type set is not JSON serializable)",)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("b", {"pair": [1, 2], "3": "x"})]  # as JSON carries them


def test_unpaired_surrogates_are_replaced_and_reported():
    text = parse_action('bad \udc80 <tool_call>{"name": "a\\ud800", "arguments": {"q": "x\\udfff"}}</tool_call>')
    assert text.content == "bad \ufffd"
    assert [(c.name, c.arguments) for c in text.tool_calls] == [("a\ufffd", {"q": "x\ufffd"})]
    assert len(text.errors) == 1 and "surrogates" in text.errors[0]
    message = parse_action(
        {"role": "assistant", "content": "\ud83d", "tool_calls": [{"id": "i\ud800", "function": {"name": "a", "arguments": {"q": "\udc00"}}}]}
    )
    assert message.content == "\ufffd" and message.tool_calls[0].id == "i\ufffd" and message.tool_calls[0].arguments == {"q": "\ufffd"}
    assert len(message.errors) == 1
    for parsed in (text, message):  # everything that leaves the parser encodes
        json.dumps([parsed.content, [c.to_openai() for c in parsed.tool_calls], parsed.errors], ensure_ascii=False).encode("utf-8")


def test_python_source_parses_from_many_threads_at_once() -> None:
    # CPython 3.11 fails concurrent ast.parse calls now and then (gh-106905); environments parse in
    # the runner's stepping threads, so parse_python takes them one at a time.
    import threading

    from agentgym.parsing import parse_python

    deep = "(" * 40 + "1" + ")" * 40 + " + [[[[2]]]]"
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(300):
                parse_python(deep, mode="eval")
        except BaseException as exc:  # noqa: BLE001  (any failure is what this test looks for)
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
