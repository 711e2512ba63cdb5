"""Chat-template probing, tool rendering and message validation."""

from __future__ import annotations

import copy
import json
import re

import pytest

from agentgym.parsing import parse_action
from agentgym.rollouts.chat import ChatRenderer, TemplateError, normalize_tool_schema, tool_system_prompt, validate_messages

LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order by id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}

CHATML_BODY = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS_TEMPLATE = "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}<|im_end|>\n{% endif %}" + CHATML_BODY
NO_TOOL_ROLE_TEMPLATE = (
    "{% for m in messages %}{% if m.role != 'tool' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLAIN_TEXT_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"


def test_default_template_probe(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer, tools=[LOOKUP])
    assert not renderer.tools_in_template  # SmolLM2's template ignores tools=
    assert renderer.tool_role_supported
    assert renderer.eot_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert (renderer.eot_text, renderer.after_eot_text) == ("<|im_end|>", "\n")


def test_tools_go_into_the_system_prompt_when_the_template_ignores_them(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer, tools=[LOOKUP])
    opened = renderer.prepare([{"role": "user", "content": "Refund order 7"}])
    assert [m["role"] for m in opened] == ["system", "user"]
    assert opened[0]["content"] == tool_system_prompt([LOOKUP])
    merged = renderer.prepare([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert merged[0]["content"].startswith("Be brief.\n\n# Tools")
    listed = re.search(r"<tools>\n(.*)\n</tools>", merged[0]["content"], re.DOTALL)
    assert listed is not None
    assert [json.loads(line) for line in listed.group(1).splitlines()] == [normalize_tool_schema(LOOKUP)]


def test_the_described_call_format_is_what_the_environment_parses() -> None:
    example = re.search(r"<tool_call>\n.*?</tool_call>", tool_system_prompt([LOOKUP]), re.DOTALL)
    assert example is not None
    parsed = parse_action(example.group(0))
    assert parsed.errors == ()
    assert [c.name for c in parsed.tool_calls] == ["<function name>"]


def test_prompt_ids_equal_apply_chat_template(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    messages = [{"role": "user", "content": "Hello there"}]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert renderer.prompt_ids(messages) == list(expected)


def test_templates_that_render_tools_get_them(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer, tools=[LOOKUP], chat_template=TOOLS_TEMPLATE)
    assert renderer.tools_in_template
    text = renderer.render_text(renderer.prepare([{"role": "user", "content": "hi"}]), add_generation_prompt=True)
    assert "TOOLS:lookup_order;" in text and "<tools>" not in text
    forced = ChatRenderer(tokenizer, tools=[LOOKUP], chat_template=TOOLS_TEMPLATE, tool_mode="system_prompt")
    assert not forced.tools_in_template
    assert "<tools>" in forced.prepare([{"role": "user", "content": "hi"}])[0]["content"]
    with pytest.raises(TemplateError, match="ignores tools"):
        ChatRenderer(tokenizer, tools=[LOOKUP], tool_mode="template")


def test_tool_results_survive_templates_without_a_tool_role(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer, chat_template=NO_TOOL_ROLE_TEMPLATE)
    assert not renderer.tool_role_supported
    messages = [
        {"role": "user", "content": "check order 7"},
        {"role": "assistant", "content": "looking"},
        {"role": "tool", "content": "order 7: delivered", "name": "lookup_order", "tool_call_id": "c0"},
    ]
    text = renderer.render_text(messages, add_generation_prompt=True)
    assert "<|im_start|>user\n<tool_response>\norder 7: delivered\n</tool_response><|im_end|>" in text


def test_unusable_templates_are_clear_errors(tokenizer) -> None:
    with pytest.raises(TemplateError, match="special token"):
        ChatRenderer(tokenizer, chat_template=PLAIN_TEXT_TEMPLATE)
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(TemplateError, match="no chat template"):
        ChatRenderer(bare)
    with pytest.raises(ValueError, match="tool_mode"):
        ChatRenderer(tokenizer, tool_mode="xml")  # type: ignore[arg-type]


def test_tool_schema_forms() -> None:
    wrapped = {"type": "function", "function": LOOKUP}
    assert normalize_tool_schema(LOOKUP) == wrapped
    assert normalize_tool_schema(wrapped) == wrapped
    with pytest.raises(ValueError, match="not a function tool schema"):
        normalize_tool_schema({"type": "retrieval"})
    with pytest.raises(ValueError, match="not a function tool schema"):
        normalize_tool_schema({"description": "no name"})


def test_message_validation() -> None:
    assert validate_messages([{"role": "tool", "content": "x", "name": "t"}]) == [{"role": "tool", "content": "x", "name": "t"}]
    with pytest.raises(ValueError, match="role 'robot'"):
        validate_messages([{"role": "robot", "content": "x"}])
    with pytest.raises(ValueError, match="string content"):
        validate_messages([{"role": "user", "content": None}])
    with pytest.raises(ValueError, match="not a mapping"):
        validate_messages(["hello"])  # type: ignore[list-item]
