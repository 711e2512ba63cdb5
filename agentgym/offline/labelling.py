"""Building hand-labelled trajectory sets for ``agentgym validate-reward``.

A labelled set is written as a table of *scenarios*: a kind of agent behaviour, the policy whose
turns it starts from, which tasks it applies to, how it alters those turns, and the verdict a
person gives that behaviour (with the reason). Labels come from that table, written by hand while
reasoning about the task, never from running the reward; the reward is then checked against them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.envs.registration import make_env
from agentgym.parsing import format_tool_call, parse_action
from agentgym.records import Label, LabelledRecord
from agentgym.rollouts.scripted import assistant_turns, make_policy, replay, run_episode

__all__ = [
    "Scenario",
    "Turns",
    "build_labelled",
    "calls_in",
    "edit_calls",
    "first_arguments",
    "insert_after",
    "keep",
    "prepend_malformed_turn",
    "to_openai_messages",
    "without_calls",
]

Turns = list[Any]
Transform = Callable[[Turns, dict[str, Any]], Turns]


@dataclass(frozen=True)
class Scenario:
    """One row of a labelled set.

    Attributes:
        name: what the agent does, in a few words.
        policy: the scripted policy whose turns the scenario starts from.
        applies: which tasks the scenario is built on.
        transform: how the policy's turns are altered (receives the turns and the task).
        label: the verdict: ``{"pass": bool, "kind": "success"|"partial"|"failure"|"hack",
            "justification": str}``.
    """

    name: str
    policy: str
    applies: Callable[[dict[str, Any]], bool]
    transform: Transform
    label: Label


def build_labelled(env_id: str, scenarios: Sequence[Scenario], *, split: str = "val", per_scenario: int = 3, **env_kwargs: Any) -> list[LabelledRecord]:
    """Episode records with labels: ``per_scenario`` tasks per scenario, spread over the split."""
    env = make_env(env_id, split=split, **env_kwargs)
    records: list[LabelledRecord] = []
    try:
        for number, scenario in enumerate(scenarios):
            tasks = [t for t in env.unwrapped.tasks if scenario.applies(t)][number % 3 :: 5][:per_scenario]
            if not tasks:
                raise ValueError(f"scenario {scenario.name!r} applies to no task of the {split} split")
            for seed, task in enumerate(tasks):
                base = run_episode(env, make_policy(env, scenario.policy, seed), seed=seed, task_id=task["task_id"], policy_name=scenario.policy)
                record = replay(env, base, scenario.transform(assistant_turns(base), task))
                records.append({**record, "policy": f"scenario: {scenario.name}", "label": scenario.label})
    finally:
        env.close()
    return records


# ------------------------------------------------------------------ reusable transforms


def keep(turns: Turns, task: dict[str, Any]) -> Turns:
    """The policy's turns unchanged."""
    return turns


def calls_in(turn: Any) -> list[str]:
    """Names of the tool calls in one turn."""
    return [c.name for c in parse_action(turn).tool_calls]


def first_arguments(turn: Any) -> dict[str, Any]:
    """Arguments of the first tool call in one turn."""
    return parse_action(turn).tool_calls[0].arguments


def without_calls(name: str) -> Transform:
    """Drop the turns that call ``name``."""
    return lambda turns, task: [t for t in turns if name not in calls_in(t)]


def edit_calls(name: str, change: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> Transform:
    """Rewrite the arguments of every single-call turn that calls ``name``."""

    def apply(turns: Turns, task: dict[str, Any]) -> Turns:
        return [format_tool_call(name, change(first_arguments(t), task)) if calls_in(t) == [name] else t for t in turns]

    return apply


def insert_after(index: int, extra: Callable[[dict[str, Any]], Turns]) -> Transform:
    """Insert the turns ``extra(task)`` after the first ``index`` turns."""
    return lambda turns, task: turns[:index] + extra(task) + turns[index:]


def prepend_malformed_turn(turns: Turns, task: dict[str, Any]) -> Turns:
    """A broken tool call (unterminated JSON) before the policy's own turns."""
    return ['<tool_call>{"name": "x", "arguments": {"a": </tool_call>', *turns]


def to_openai_messages(turns: Turns, task: dict[str, Any]) -> Turns:
    """The same calls sent as OpenAI-style assistant messages with ``tool_calls``."""
    out = []
    for i, turn in enumerate(turns):
        calls = parse_action(turn).tool_calls
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"oa_{i}_{j}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for j, c in enumerate(calls)
                ],
            }
        )
    return out
