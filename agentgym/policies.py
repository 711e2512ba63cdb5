"""Scripted policies: the interface every policy implements, and the generic baselines.

Environment-specific policies (each env's oracle, and baselines such as "always refund") live
next to their environment and are listed by the environment's ``policies()``.
"""

from __future__ import annotations

import abc
import json
import random
import string
from collections.abc import Generator
from typing import Any, Protocol

from agentgym.parsing import format_tool_call

__all__ = [
    "AnswerSpamPolicy",
    "DoNothingPolicy",
    "FormatOnlyPolicy",
    "Policy",
    "RandomPolicy",
    "ReplayPolicy",
    "Script",
    "ScriptedPolicy",
    "ToolSpamPolicy",
    "sample_arguments",
]


class Policy(Protocol):
    """Chooses assistant turns. ``reset`` is called with the unwrapped environment at the start of
    each episode (scripted oracles read the task from it; model policies ignore it)."""

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None: ...

    def act(self, observation: list[dict[str, Any]]) -> Any: ...


Script = Generator[Any, list[dict[str, Any]], None]


class ScriptedPolicy(abc.ABC):
    """A policy written as a generator: :meth:`script` yields turns and receives each turn's
    observation (``observation = yield action``), so a scripted oracle reads like the workflow
    it follows. Oracles and scripted baselines subclass it."""

    def __init__(self, seed: int = 0):
        del seed  # scripts are deterministic; the argument keeps one constructor for all policies
        self._script: Script | None = None
        self._started = False

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self._script = self.script(env)
        self._started = False

    def act(self, observation: list[dict[str, Any]]) -> Any:
        if self._script is None:
            raise RuntimeError("call reset() before act()")
        try:
            if not self._started:
                self._started = True
                return next(self._script)
            return self._script.send(observation)
        except StopIteration:
            raise RuntimeError("the scripted policy has no turn left") from None

    @abc.abstractmethod
    def script(self, env: Any) -> Script:
        """The turns for the episode ``env`` (the unwrapped environment) has just started."""


class ReplayPolicy:
    """Plays back a fixed list of assistant turns, then answers with text only."""

    def __init__(self, actions: list[Any]):
        self._actions = list(actions)
        self._next = 0

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self._next = 0

    def act(self, observation: list[dict[str, Any]]) -> Any:
        self._next += 1
        return self._actions[self._next - 1] if self._next <= len(self._actions) else "I have nothing more to do."


class DoNothingPolicy:
    """Answers every turn with text and never calls a tool: the floor any reward must hold."""

    def __init__(self, seed: int = 0):
        del seed  # deterministic by construction; accepted for a uniform constructor

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        pass

    def act(self, observation: list[dict[str, Any]]) -> str:
        return "I understand. Let me look into that for you."


def sample_arguments(parameters: dict[str, Any], rng: random.Random, *, wrong_type_rate: float = 0.0, drop_rate: float = 0.0) -> dict[str, Any]:
    """Random arguments for a tool's JSON Schema; valid unless ``wrong_type_rate``/``drop_rate`` say otherwise."""
    props = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    return {
        name: _sample_value(schema, rng, wrong_type_rate)
        for name, schema in props.items()
        if rng.random() >= drop_rate and (name in required or rng.random() < 0.5)
    }


def _sample_value(schema: dict[str, Any], rng: random.Random, wrong_type_rate: float) -> Any:
    if rng.random() < wrong_type_rate:
        return rng.choice([None, 3.5, ["x"], {"a": 1}, "text"])
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return rng.randrange(0, 100)
    if kind == "number":
        return round(rng.uniform(0.01, 500), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_sample_value(schema.get("items", {}), rng, wrong_type_rate) for _ in range(rng.randrange(1, 3))]
    if kind == "object":
        return {}
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(rng.randrange(1, 12)))


class _SchemaPolicy:
    """Base of the policies that only look at the tool schemas."""

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)
        self._tools: list[dict[str, Any]] = []

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self._tools = [t["function"] for t in env.tools]

    def _valid_call(self, spec: dict[str, Any] | None = None) -> str:
        spec = spec or self._rng.choice(self._tools)
        return format_tool_call(spec["name"], sample_arguments(spec["parameters"], self._rng))


class RandomPolicy(_SchemaPolicy):
    """Random, mostly malformed turns: bad JSON, unknown tools, schema-violating arguments,
    unterminated blocks, plain text, and now and then a well-formed call with random arguments.

    It is both a baseline (it should score near the floor) and a fuzzer for the parsing and
    validation paths. Seeded: the same seed gives the same turns.
    """

    def act(self, observation: list[dict[str, Any]]) -> str:
        rng = self._rng
        kind = rng.randrange(7)
        if kind == 0 or not self._tools:
            return self._text(rng.randrange(1, 80))
        name = rng.choice(self._tools)["name"]
        if kind == 1:
            return f'<tool_call>{{"name": "{name}", "arguments": {{{self._text(10)}</tool_call>'
        if kind == 2:
            return format_tool_call("tool_" + self._text(6, string.ascii_lowercase), {})
        if kind == 3:
            return f"<tool_call>{json.dumps({'name': name, 'arguments': {}})}"
        if kind == 4:
            return "</tool_call>" + self._text(20)
        calls = []
        for _ in range(1 if kind == 5 else rng.randrange(2, 4)):
            spec = rng.choice(self._tools)
            calls.append(format_tool_call(spec["name"], sample_arguments(spec["parameters"], rng, wrong_type_rate=0.1, drop_rate=0.15)))
        return "\n".join(calls)

    def _text(self, n: int, alphabet: str = string.ascii_letters + string.digits + ' .,{}"') -> str:
        return "".join(self._rng.choice(alphabet) for _ in range(n))


class FormatOnlyPolicy(_SchemaPolicy):
    """Perfectly formatted, schema-valid calls to random tools: farms format points, solves nothing."""

    def act(self, observation: list[dict[str, Any]]) -> str:
        return self._valid_call()


class ToolSpamPolicy(_SchemaPolicy):
    """The same valid call many times per turn: probes duplicate-call and tool-count shaping."""

    def act(self, observation: list[dict[str, Any]]) -> str:
        return "\n".join([self._valid_call(self._tools[0])] * 8)


class AnswerSpamPolicy(_SchemaPolicy):
    """Every tool with many different valid argument sets in one turn: tries to hit the answer by volume."""

    def act(self, observation: list[dict[str, Any]]) -> str:
        return "\n".join(self._valid_call(spec) for spec in self._tools for _ in range(3))
