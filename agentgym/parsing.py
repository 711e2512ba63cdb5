"""Reading tool calls out of an assistant turn.

An action is either the model's raw text, with Hermes/Qwen-style blocks
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several per turn allowed), or an
OpenAI-style assistant message dict with ``tool_calls``. Malformed calls are normal model output:
they are reported as errors next to the calls that did parse, never raised.

Everything that leaves this module is plain JSON data that encodes as UTF-8: arguments are
round-tripped through JSON (a value JSON cannot carry, such as a set, or a number too long to
convert, is an error for that call), and unpaired UTF-16 surrogates, which no tokenizer or file
can encode, are replaced by U+FFFD (and reported, so the turn still counts as malformed).
"""

from __future__ import annotations

import ast
import json
import re
import reprlib
import threading
from dataclasses import dataclass
from typing import Any

from agentgym.records import OpenAIToolCall

__all__ = ["UNPAIRED_SURROGATE", "ParsedAction", "ToolCall", "format_tool_call", "parse_action", "parse_python", "scrub_text"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
# Valid in a Python str (a JSON escape or a caller can put one there), not encodable as UTF-8.
UNPAIRED_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ERROR = "the turn contains unpaired UTF-16 surrogates (not valid Unicode text); they were replaced by U+FFFD"


def scrub_text(text: str) -> str:
    """``text`` with every unpaired UTF-16 surrogate (unencodable as UTF-8) replaced by U+FFFD."""
    return UNPAIRED_SURROGATE.sub("\ufffd", text)


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: a tool name, its JSON-object arguments and a call id."""

    name: str
    arguments: dict[str, Any]
    id: str

    def to_openai(self) -> OpenAIToolCall:
        """The call as an entry of an OpenAI assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


@dataclass(frozen=True)
class ParsedAction:
    """What an assistant turn contained.

    Attributes:
        content: the text outside tool-call blocks, stripped.
        tool_calls: the calls that parsed, in order.
        errors: one message per malformed call or malformed action.
    """

    content: str
    tool_calls: tuple[ToolCall, ...]
    errors: tuple[str, ...]


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render a call in the text format this module parses (used by scripted policies).

    The name comes first, as the tool instructions show it (:func:`agentgym.rollouts.chat.tool_system_prompt`):
    a model imitating these calls chooses the tool before writing its arguments, so a call's opening
    (``rollout.error_tool_exploration``) fixes the tool. The arguments' keys are sorted."""
    payload = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {json.dumps(arguments, ensure_ascii=False, sort_keys=True)}}}'
    return f"{TOOL_CALL_OPEN}{payload}{TOOL_CALL_CLOSE}"


def parse_action(action: Any, *, id_prefix: str = "call") -> ParsedAction:
    """Parse an assistant turn given as text or as an OpenAI-style message dict.

    Args:
        action: the model's text, or ``{"role": "assistant", "content": ..., "tool_calls": [...]}``.
        id_prefix: prefix for generated call ids (``{id_prefix}_{index}``); ids already present
            in a dict action are kept.
    """
    if isinstance(action, str):
        text = scrub_text(action)
        parsed = _parse_text(text, id_prefix)
        if text != action:
            return ParsedAction(parsed.content, parsed.tool_calls, (_SURROGATE_ERROR, *parsed.errors))
        return parsed
    if isinstance(action, dict):
        return _parse_message(action, id_prefix)
    return ParsedAction("", (), (f"action must be a string or an assistant message dict, got {type(action).__name__}",))


def _parse_text(text: str, id_prefix: str) -> ParsedAction:
    calls: list[ToolCall] = []
    errors: list[str] = []
    for block in _BLOCK.findall(text):
        call, error = _call_from_json(block, f"{id_prefix}_{len(calls) + len(errors)}")
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
    outside = _BLOCK.sub("", text)
    if TOOL_CALL_OPEN in outside:
        errors.append("unterminated <tool_call> block: every <tool_call> needs a closing </tool_call>")
    elif TOOL_CALL_CLOSE in outside:
        errors.append("</tool_call> without a matching <tool_call>")
    return ParsedAction(outside.strip(), tuple(calls), tuple(errors))


def _call_from_json(raw: str, call_id: str) -> tuple[ToolCall | None, str]:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return None, f"tool call is not valid JSON ({_json_problem(exc)}): {_preview(raw)}"
    if not isinstance(obj, dict):
        return None, f'tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, got: {_preview(raw)}'
    return _call_from_fields(obj.get("name"), obj.get("arguments", {}), call_id, raw)


def _call_from_fields(name: Any, arguments: Any, call_id: str, raw: str) -> tuple[ToolCall | None, str]:
    if not isinstance(name, str) or not name:
        return None, f'tool call needs a string "name": {_preview(raw)}'
    name = scrub_text(name)
    if isinstance(arguments, str):
        # OpenAI messages carry arguments as a JSON string.
        arguments = scrub_text(arguments)
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return None, f"arguments of {name!r} are not valid JSON ({_json_problem(exc)}): {_preview(arguments)}"
    if not isinstance(arguments, dict):
        return None, f'"arguments" of {name!r} must be a JSON object, got {type(arguments).__name__}'
    try:
        # One canonical form whatever the source: JSON values only, text encodable as UTF-8.
        arguments = json.loads(scrub_text(json.dumps(arguments, ensure_ascii=False)))
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"arguments of {name!r} must be JSON values ({_json_problem(exc)})"
    return ToolCall(name=name, arguments=arguments, id=call_id), ""


def _json_problem(exc: Exception) -> str:
    """What was wrong, in words that do not depend on Python internals."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, RecursionError):
        return "nesting too deep"
    if isinstance(exc, TypeError):
        return "a value is not JSON: " + _preview(str(exc))
    if "integer string conversion" in str(exc):  # more digits than sys.get_int_max_str_digits()
        return "a number is too long"
    return _preview(str(exc))


def _parse_message(message: dict[str, Any], id_prefix: str) -> ParsedAction:
    if message.get("role", "assistant") != "assistant":
        return ParsedAction("", (), (f"action message must have role 'assistant', got {message.get('role')!r}",))
    content = message.get("content") or ""
    if not isinstance(content, str):
        return ParsedAction("", (), ("assistant message content must be a string or null",))
    scrubbed = scrub_text(content)
    problems = [_SURROGATE_ERROR] if scrubbed != content else []
    content = scrubbed
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        return ParsedAction(content.strip(), (), (*problems, "tool_calls must be a list"))
    calls: list[ToolCall] = []
    errors: list[str] = problems
    for index, entry in enumerate(raw_calls):
        given_id = entry.get("id") if isinstance(entry, dict) else None
        call_id = scrub_text(given_id) if isinstance(given_id, str) and given_id else f"{id_prefix}_{index}"
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict):
            errors.append(f'tool_calls[{index}] needs a "function" object with "name" and "arguments"')
            continue
        call, error = _call_from_fields(function.get("name"), function.get("arguments", {}), call_id, _short_repr(entry))
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
    return ParsedAction(content.strip(), tuple(calls), tuple(errors))


def _short_repr(value: Any) -> str:
    """``repr`` for an error message: bounded in size, and never raising (huge ints, deep nesting)."""
    try:
        return reprlib.repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


def _preview(raw: str, limit: int = 120) -> str:
    raw = raw.strip()
    return raw if len(raw) <= limit else raw[:limit] + "..."


_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<string>", mode: str = "exec") -> ast.AST:
    """``ast.parse``, one call at a time in the process: CPython 3.11 keeps the recursion depth of
    its AST-to-object conversion in interpreter-wide state, so two threads parsing at once can fail
    with ``SystemError: AST constructor recursion depth mismatch`` (gh-106905, fixed in 3.12.4).
    Environments parse in the runner's stepping threads (calculators) and while loading tasks."""
    with _AST_LOCK:
        return ast.parse(source, filename, mode)
