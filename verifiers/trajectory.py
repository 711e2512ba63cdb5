"""Reading an episode's conversation (the rollout record's ``messages``) turn by turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.parsing import ParsedAction, ToolCall, parse_action

__all__ = ["Turn", "split_turns", "tool_calls_of"]


@dataclass(frozen=True)
class Turn:
    """One assistant turn and what came back before the next one.

    Attributes:
        index: 1-based turn number.
        message: the assistant message as recorded.
        observations: the tool, user or system messages that followed it.
    """

    index: int
    message: Mapping[str, Any]
    observations: tuple[Mapping[str, Any], ...]

    @property
    def action(self) -> str | Mapping[str, Any]:
        """The turn as ``parse_action`` takes it: the message dict when it carries structured
        ``tool_calls``, otherwise its text (which may hold ``<tool_call>`` blocks)."""
        if self.message.get("tool_calls"):
            return self.message
        content = self.message.get("content")
        return content if isinstance(content, str) else ""

    def parsed(self) -> ParsedAction:
        """The turn's tool calls and format errors."""
        return parse_action(dict(self.action) if isinstance(self.action, Mapping) else self.action, id_prefix=f"call_{self.index}")


def split_turns(messages: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """The assistant turns of a conversation; messages before the first one are the opening."""
    turns: list[Turn] = []
    current: Mapping[str, Any] | None = None
    observed: list[Mapping[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"a message must be a dict, got {type(message).__name__}")
        if message.get("role") == "assistant":
            if current is not None:
                turns.append(Turn(len(turns) + 1, current, tuple(observed)))
            current, observed = message, []
        elif current is not None:
            observed.append(message)
    if current is not None:
        turns.append(Turn(len(turns) + 1, current, tuple(observed)))
    return turns


def tool_calls_of(messages: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """Every well-formed tool call the assistant made, in order."""
    return [call for turn in split_turns(messages) for call in turn.parsed().tool_calls]
