"""Render chat conversations to token ids through a model's chat template.

:class:`ChatRenderer` wraps a tokenizer and inspects its chat template once:

* whether the template renders ``tools=`` itself; if not, the tool schemas go into the system prompt
  with Hermes-style ``<tool_call>`` instructions (the format :mod:`agentgym.parsing` reads);
* whether it renders ``tool``-role messages; if not, tool results are sent as user messages wrapped in
  ``<tool_response>`` tags so they are not silently dropped;
* the end-of-turn token that closes an assistant message, which must be a special token so text after
  it tokenises the same alone as in context.

It renders to text and tokenises with ``add_special_tokens=False``, which is what
``apply_chat_template(tokenize=True)`` does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from agentgym.parsing import format_tool_call

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Message = dict[str, Any]
ToolMode = Literal["auto", "template", "system_prompt"]

ROLES = frozenset({"system", "user", "assistant", "tool"})

_PROBE_USER = "agentgym-probe-user"
_PROBE_ASSISTANT = "agentgym-probe-assistant"
_PROBE_TOOL = "agentgym-probe-tool-output"
_PROBE_SCHEMA = {"type": "function", "function": {"name": "agentgym_probe_tool", "description": "probe", "parameters": {"type": "object", "properties": {}}}}


# Argument values whose last characters tokenise differently (a digit, a word, a sentence's end):
# what every rendering of a call shares after them is the call format's own.
_PROBE_VALUES = ("0", "a", "a b.")


@dataclass(frozen=True)
class CallFormat:
    """The tool-call format's own tokens, as a model samples them (:attr:`ChatRenderer.call_format`).

    Attributes:
        prefix: the token ids every call begins with, whichever tool it calls.
        closings: per tool, the token ids that close a call to it after its arguments' last value
            (``}}</tool_call>`` as the tokenizer splits it); for a tool without arguments, what
            follows its name.
    """

    prefix: tuple[int, ...] = ()
    closings: tuple[tuple[int, ...], ...] = ()


NO_CALL_FORMAT = CallFormat()
"""No call format known: nothing is kept out of the loss for being part of one."""


class TemplateError(ValueError):
    """The chat template cannot render the conversation token-exactly (the message says why)."""


def normalize_tool_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``tool`` in the OpenAI ``{"type": "function", "function": {...}}`` form.

    Accepts that form or a bare ``{"name", "description", "parameters"}`` function schema.
    """
    function = tool.get("function", tool) if tool.get("type", "function") == "function" else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError(f"not a function tool schema: {dict(tool)!r}")
    return {"type": "function", "function": dict(function)}


def tool_system_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """Hermes-style instructions describing ``tools`` for templates that cannot render them."""
    lines = "\n".join(json.dumps(normalize_tool_schema(t), ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\n"
        "You may call one or more of the functions below. Each is described by a JSON schema, one per line, "
        "inside <tools></tools>:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "To call a function, write a JSON object with its name and arguments between <tool_call> and "
        "</tool_call> tags:\n"
        '<tool_call>\n{"name": "<function name>", "arguments": {"<argument>": "<value>"}}\n</tool_call>\n'
        "The results come back in the next message."
    )


def validate_messages(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Check that ``messages`` are chat messages with a known role and string content; return copies."""
    out: list[Message] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {i} is not a mapping: {message!r}")
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"message {i} has role {role!r}; expected one of {sorted(ROLES)}")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"message {i} ({role}) needs string content, got {type(message.get('content')).__name__}")
        out.append(dict(message))
    return out


def common_prefix_length(*sequences: Sequence[int]) -> int:
    """How many leading token ids all ``sequences`` share (0 for none)."""
    length = 0
    for column in zip(*sequences, strict=False):
        if any(token != column[0] for token in column):
            break
        length += 1
    return length


def _first_argument(function: Mapping[str, Any]) -> str | None:
    """A function schema's first required argument (its first argument when none is required; None
    when it takes none): the name a call to it writes first."""
    parameters = function.get("parameters") or {}
    return next(iter([*parameters.get("required", ()), *parameters.get("properties", {})]), None)


class ChatRenderer:
    """Renders conversations for one tokenizer, chat template and tool set.

    Args:
        tokenizer: a tokenizer with a chat template (or pass ``chat_template``).
        tools: tool schemas (OpenAI function form or bare function schemas).
        tool_mode: ``"template"`` passes ``tools=`` to the template, ``"system_prompt"`` describes the tools
            in the system message, ``"auto"`` picks ``"template"`` when the template renders tools.
        template_kwargs: extra variables for the template (e.g. ``{"enable_thinking": False}``).
        chat_template: a Jinja template overriding the tokenizer's own.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_mode: ToolMode = "auto",
        template_kwargs: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> None:
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template; pass chat_template=...")
        if tool_mode not in ("auto", "template", "system_prompt"):
            raise ValueError(f"tool_mode must be 'auto', 'template' or 'system_prompt', got {tool_mode!r}")
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        self.tools = [normalize_tool_schema(t) for t in tools]
        supports_tools = self._renders_tools()
        if tool_mode == "template" and not supports_tools:
            raise TemplateError("tool_mode='template' but the chat template ignores tools=")
        self.tools_in_template = bool(self.tools) and tool_mode != "system_prompt" and supports_tools
        self.tool_role_supported = self._renders_tool_role()
        self.eot_token_id, self.eot_text, self.after_eot_text = self._probe_end_of_turn()

    # -- template probing -------------------------------------------------------------------------

    def _apply(self, messages: Sequence[Message], add_generation_prompt: bool, tools: list[dict] | None) -> str:
        kwargs = dict(self.template_kwargs)
        if tools:
            kwargs["tools"] = tools
        text = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, chat_template=self.chat_template, **kwargs
        )
        if not isinstance(text, str):
            raise TemplateError(f"chat template returned {type(text).__name__}, expected text")
        return text

    def _renders_tools(self) -> bool:
        probe = [{"role": "user", "content": _PROBE_USER}]
        try:
            return self._apply(probe, True, [_PROBE_SCHEMA]) != self._apply(probe, True, None)
        except Exception:  # noqa: BLE001 - a template that fails on tools= does not support them
            return False

    def _renders_tool_role(self) -> bool:
        probe = [
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": _PROBE_ASSISTANT},
            {"role": "tool", "content": _PROBE_TOOL, "name": "agentgym_probe_tool", "tool_call_id": "probe"},
        ]
        try:
            return _PROBE_TOOL in self._apply(probe, True, self._template_tools())
        except Exception:  # noqa: BLE001 - templates reject unknown roles in many different ways
            return False

    def _probe_end_of_turn(self) -> tuple[int, str, str]:
        probe = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT}]
        try:
            text = self._apply(probe, False, self._template_tools())
        except Exception as exc:  # noqa: BLE001
            raise TemplateError(f"the chat template cannot render a user/assistant exchange: {exc}") from None
        at = text.rfind(_PROBE_ASSISTANT)
        if at < 0:
            raise TemplateError("the chat template drops assistant message content")
        tail = text[at + len(_PROBE_ASSISTANT) :]
        ids = self.encode(tail)
        special = set(self.tokenizer.all_special_ids) | set(self.tokenizer.get_added_vocab().values())
        if not ids or ids[0] not in special:
            raise TemplateError(
                f"the chat template does not close assistant turns with a special token (text after the "
                f"content: {tail[:40]!r}); token-exact turn boundaries need one"
            )
        # decode() is annotated str | list[str]: one flat list of ids decodes to one string
        eot_text = cast(str, self.tokenizer.decode([ids[0]], skip_special_tokens=False))
        if not tail.startswith(eot_text):
            raise TemplateError(f"end-of-turn token {eot_text!r} does not round-trip through the tokenizer")
        return ids[0], eot_text, tail[len(eot_text) :]

    # -- rendering --------------------------------------------------------------------------------

    def _template_tools(self) -> list[dict] | None:
        return self.tools if self.tools_in_template else None

    def prepare(self, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Validate an opening conversation and add the tool description to its system message if needed."""
        prepared = validate_messages(messages)
        if self.tools and not self.tools_in_template:
            block = tool_system_prompt(self.tools)
            if prepared and prepared[0]["role"] == "system":
                prepared[0]["content"] = f"{prepared[0]['content']}\n\n{block}"
            else:
                prepared.insert(0, {"role": "system", "content": block})
        return prepared

    def _template_messages(self, messages: Sequence[Message]) -> list[Message]:
        if self.tool_role_supported:
            return list(messages)
        return [{"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"} if m["role"] == "tool" else m for m in messages]

    def render_text(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The template's text for ``messages`` (already prepared)."""
        try:
            return self._apply(self._template_messages(messages), add_generation_prompt, self._template_tools())
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - jinja raises many exception types for bad conversations
            raise TemplateError(f"the chat template cannot render this conversation: {exc}") from None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added BOS/EOS (templates write those themselves)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_after_eot(self, text: str) -> list[int]:
        """Token ids of ``text`` as it tokenises right after the end-of-turn token.

        Encoding it behind the end-of-turn text (and dropping that token) keeps tokenizers that add a
        prefix space at the start of a string from doing so here.
        """
        ids = self.encode(self.eot_text + text)
        if not ids or ids[0] != self.eot_token_id:
            raise TemplateError(f"text after the end-of-turn token merges with it: {text[:40]!r}")
        return ids[1:]

    @functools.cached_property
    def call_openings(self) -> tuple[tuple[int, ...], ...]:
        """Per tool, the token ids that open a call to it, up to its first argument's name.

        A call is rendered as :func:`agentgym.parsing.format_tool_call` writes it (the format the
        scripted demonstrations use) and cut after the name of the tool's first required argument
        (its first argument when none is required; the whole call when it takes none). The ids are
        those of the whole call's tokenisation that end by that point, so the model continues the
        call as it would have tokenised it (the key name is not merged with what follows).
        Computed once per renderer (the tools do not change).
        """
        openings = []
        for tool in self.tools:
            function = tool["function"]
            first = _first_argument(function)
            text = format_tool_call(function["name"], {first: ""} if first is not None else {})
            end = text.index(json.dumps(first)) + len(json.dumps(first)) - 1 if first is not None else len(text)
            ids = self.encode(text)
            # The longest prefix of the call's own tokens that stays within the opening.
            kept = max(k for k in range(len(ids) + 1) if len(self.tokenizer.decode(ids[:k])) <= end)
            openings.append(tuple(ids[:kept]))
        return tuple(openings)

    @functools.cached_property
    def call_prefix(self) -> tuple[int, ...]:
        """The token ids every call to a tool begins with (the longest prefix all
        :attr:`call_openings` share): the call format's own tokens, whichever tool is called."""
        openings = self.call_openings
        return openings[0][: common_prefix_length(*openings)] if openings else ()

    @functools.cached_property
    def call_closings(self) -> tuple[tuple[int, ...], ...]:
        """Per tool, the token ids that close a call to it after its arguments' last value.

        The tokens that every rendering of a call to the tool shares at its end, whatever the value
        (:data:`_PROBE_VALUES`), in the format :func:`agentgym.parsing.format_tool_call` writes. A
        closing never holds a choice the opening did not make: where the tool's name would be part
        of it (a tool without arguments, whose whole call is the same every time, or a format that
        writes the name after the arguments, where tools open alike), it starts after the name.
        """
        closings = []
        for tool, opening in zip(self.tools, self.call_openings, strict=True):
            function = tool["function"]
            first = _first_argument(function)
            calls = [self.encode(format_tool_call(function["name"], {first: value} if first is not None else {}))[::-1] for value in _PROBE_VALUES]
            closing = calls[0][: common_prefix_length(*calls)][::-1]
            if first is None or self.call_openings.count(opening) > 1:
                # Up to the name's value without its closing quote, which may merge with the brace after it.
                named_text = json.dumps({"name": function["name"]})[1:-2]
                named = next(k for k in range(len(closing) + 1) if named_text in self.tokenizer.decode(closing[:k]))
                closing = closing[named:]
            closings.append(tuple(closing))
        return tuple(closings)

    @property
    def call_format(self) -> CallFormat:
        """The call format's own tokens: :attr:`call_prefix` and :attr:`call_closings`."""
        return CallFormat(self.call_prefix, self.call_closings)

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Token ids of an opening conversation followed by the assistant generation prompt."""
        return self.encode(self.render_text(self.prepare(messages), add_generation_prompt=True))

    def isolated_delta(self, new_messages: Sequence[Message]) -> str:
        """Text that follows an assistant end-of-turn token when ``new_messages`` come next.

        Rendered after a fixed neutral exchange and cut right behind its assistant turn: the fallback
        for templates whose rendering of the real conversation is not prefix-stable.
        """
        base = [{"role": "system", "content": _PROBE_USER}, {"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT}]
        full = self.render_text([*base, *new_messages], add_generation_prompt=True)
        anchor = _PROBE_ASSISTANT + self.eot_text
        at = full.find(anchor)
        if at < 0:
            raise TemplateError("the chat template does not close the assistant turn before the next messages")
        return full[at + len(anchor) :]
