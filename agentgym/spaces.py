"""Gymnasium spaces for chat: what an agent environment observes and accepts.

Observations are lists of chat messages (role/content dicts) so any chat template can render
them; actions are one assistant turn, as text or as an OpenAI-style message dict.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Space

from agentgym.records import ChatMessage, Role

__all__ = ["OBSERVATION_ROLES", "AssistantTurn", "ChatMessages"]

OBSERVATION_ROLES: tuple[Role, ...] = ("system", "user", "tool")
_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


def _random_text(rng: np.random.Generator, max_len: int = 64) -> str:
    n = int(rng.integers(0, max_len + 1))
    return "".join(_SAMPLE_CHARS[i] for i in rng.integers(0, len(_SAMPLE_CHARS), size=n))


class ChatMessages(Space[list[ChatMessage]]):
    """A list of chat messages produced by the environment (:class:`agentgym.records.ChatMessage`).

    Each message is a dict with ``role`` in ``system``/``user``/``tool`` and a string
    ``content``; tool messages also carry string ``name`` and ``tool_call_id``.
    """

    def __init__(self, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(_is_observation_message(m) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[ChatMessage]:
        messages = []
        for _ in range(int(self.np_random.integers(1, 4))):
            role = OBSERVATION_ROLES[int(self.np_random.integers(0, len(OBSERVATION_ROLES)))]
            message: ChatMessage = {"role": role, "content": _random_text(self.np_random)}
            if role == "tool":
                message["name"] = _random_text(self.np_random, 12)
                message["tool_call_id"] = _random_text(self.np_random, 12)
            messages.append(message)
        return messages

    def __repr__(self) -> str:
        return "ChatMessages()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatMessages)


class AssistantTurn(Space[Any]):
    """One assistant turn: a string, or a dict ``{"role": "assistant", "content": str | None,
    "tool_calls": [...]}`` in the OpenAI format."""

    def __init__(self, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if not isinstance(x, dict) or x.get("role") != "assistant":
            return False
        content = x.get("content")
        calls = x.get("tool_calls", [])
        return (content is None or isinstance(content, str)) and isinstance(calls, list | type(None))

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string: almost never a valid tool call, which is exactly what a fuzzer wants."""
        return _random_text(self.np_random, 256)

    def __repr__(self) -> str:
        return "AssistantTurn()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantTurn)


def _is_observation_message(m: Any) -> bool:
    if not isinstance(m, dict) or m.get("role") not in OBSERVATION_ROLES or not isinstance(m.get("content"), str):
        return False
    if m["role"] == "tool":
        return isinstance(m.get("name"), str) and isinstance(m.get("tool_call_id"), str)
    return True
