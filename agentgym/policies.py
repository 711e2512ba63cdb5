"""Scripted policies: the interface every policy implements, and the generic baselines.

Environment-specific policies (each env's oracle, and baselines such as "always refund") live
next to their environment and are listed by the environment's ``policies()``.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any, Protocol

from agentgym.parsing import format_tool_call

__all__ = ["Policy", "RandomPolicy", "DoNothingPolicy"]


class Policy(Protocol):
    """Chooses assistant turns. ``reset`` is called with the unwrapped environment at the start of
    each episode (scripted oracles read the task from it; model policies ignore it)."""

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None: ...

    def act(self, observation: list[dict[str, Any]]) -> Any: ...


class DoNothingPolicy:
    """Answers every turn with text and never calls a tool: the floor any reward must hold."""

    def __init__(self, seed: int = 0):
        del seed  # deterministic by construction; accepted for a uniform constructor

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        pass

    def act(self, observation: list[dict[str, Any]]) -> str:
        return "I understand. Let me look into that for you."


class RandomPolicy:
    """Random, mostly malformed turns: bad JSON, unknown tools, schema-violating arguments,
    unterminated blocks, plain text, and now and then a well-formed call with random arguments.

    It is both a baseline (it should score near the floor) and a fuzzer for the parsing and
    validation paths. Seeded: the same seed gives the same turns.
    """

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)
        self._tools: list[dict[str, Any]] = []

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self._tools = [t["function"] for t in env.tools]

    def act(self, observation: list[dict[str, Any]]) -> str:
        rng = self._rng
        kind = rng.randrange(7)
        if kind == 0 or not self._tools:
            return self._text(rng.randrange(1, 80))
        if kind == 1:
            return f"<tool_call>{{\"name\": \"{self._tool()['name']}\", \"arguments\": {{{self._text(10)}</tool_call>"
        if kind == 2:
            return format_tool_call("tool_" + self._text(6, string.ascii_lowercase), {})
        if kind == 3:
            return f"<tool_call>{json.dumps({'name': self._tool()['name'], 'arguments': {}})}"
        if kind == 4:
            return "</tool_call>" + self._text(20)
        calls = [self._call() for _ in range(1 if kind == 5 else rng.randrange(2, 4))]
        return "\n".join(calls)

    def _tool(self) -> dict[str, Any]:
        return self._rng.choice(self._tools)

    def _call(self) -> str:
        spec = self._tool()
        props = spec["parameters"].get("properties", {})
        args = {name: self._value(schema) for name, schema in props.items() if self._rng.random() < 0.85}
        return format_tool_call(spec["name"], args)

    def _value(self, schema: dict[str, Any]) -> Any:
        rng = self._rng
        if rng.random() < 0.1:  # wrong type on purpose
            return rng.choice([None, 3.5, ["x"], {"a": 1}, "text"])
        if "enum" in schema:
            return rng.choice(schema["enum"])
        kind = schema.get("type")
        if kind == "integer":
            return rng.randrange(-5, 100)
        if kind == "number":
            return round(rng.uniform(-10, 500), 2)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "array":
            return [self._value(schema.get("items", {})) for _ in range(rng.randrange(0, 3))]
        if kind == "object":
            return {}
        return self._text(rng.randrange(1, 12))

    def _text(self, n: int, alphabet: str = string.ascii_letters + string.digits + " .,{}\"") -> str:
        return "".join(self._rng.choice(alphabet) for _ in range(n))
