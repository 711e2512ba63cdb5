"""Format reward: are a turn's tool calls well-formed, to known tools, with valid arguments?

Format alone is cheap to farm (a model can emit perfect calls that do nothing), so use it as a
small weighted part next to a gated task-completion check (:mod:`agentgym.verifiers.compose`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentgym.parsing import parse_action
from agentgym.verifiers.result import RewardResult
from agentgym.verifiers.schema import ToolSpecs, tool_schemas, validate_json
from agentgym.verifiers.trajectory import split_turns

__all__ = ["episode_format_reward", "format_reward"]


def format_reward(action: str | Mapping[str, Any], tools: ToolSpecs, *, require_tool_call: bool = False) -> RewardResult:
    """Score one assistant turn: the share of its attempted calls that are fully valid.

    A call is valid when it parses (``agentgym.parsing.parse_action``), names a known tool and
    its arguments satisfy that tool's schema (required arguments, types, no unknown keys when
    the schema forbids them). A turn with no call attempt scores 1.0, or 0.0 with
    ``require_tool_call``.

    Components: ``syntax`` (parsed / attempted), ``known_tools`` (known / parsed),
    ``arguments`` (valid arguments / known); each is 1.0 when there is nothing to judge.
    """
    return _score_turn(action, tool_schemas(tools), require_tool_call)


def _score_turn(action: str | Mapping[str, Any], schemas: dict[str, dict[str, Any]], require_tool_call: bool) -> RewardResult:
    parsed = parse_action(dict(action) if isinstance(action, Mapping) else action)
    attempted = len(parsed.tool_calls) + len(parsed.errors)
    if attempted == 0:
        if require_tool_call:
            return RewardResult(0.0, "no tool call in a turn that needs one", {"syntax": 0.0, "known_tools": 1.0, "arguments": 1.0}, passed=False)
        return RewardResult(1.0, "plain message, no tool call to check", {"syntax": 1.0, "known_tools": 1.0, "arguments": 1.0}, passed=True)
    problems = list(parsed.errors)
    known = [c for c in parsed.tool_calls if c.name in schemas]
    problems += [f"unknown tool {c.name!r}" for c in parsed.tool_calls if c.name not in schemas]
    valid = 0
    for call in known:
        check = validate_json(call.arguments, schemas[call.name])
        if check.passed:
            valid += 1
        else:
            problems.append(f"{call.name}: {check.reason.removeprefix('does not match the schema: ')}")
    components = {
        "syntax": _share(len(parsed.tool_calls), attempted),
        "known_tools": _share(len(known), len(parsed.tool_calls)),
        "arguments": _share(valid, len(known)),
    }
    score = valid / attempted
    reason = f"{valid} of {attempted} tool calls valid" + (f"; {problems[0]}" if problems else "")
    return RewardResult(score, reason, components, passed=not problems, details={"problems": problems[:5]} if problems else {})


def episode_format_reward(
    turns: Sequence[Mapping[str, Any]] | Iterable[str | Mapping[str, Any]], tools: ToolSpecs, *, require_tool_call: bool = False
) -> RewardResult:
    """Mean :func:`format_reward` over an episode's assistant turns.

    Args:
        turns: the episode's ``messages`` (assistant turns are picked out) or the actions
            themselves (texts or assistant message dicts).
    """
    schemas = tool_schemas(tools)
    actions = _actions(list(turns))
    if not actions:
        return RewardResult(0.0, "no assistant turn", passed=False)
    results = [_score_turn(a, schemas, require_tool_call) for a in actions]
    names = ("syntax", "known_tools", "arguments")
    components = {n: sum(r.components[n] for r in results) / len(results) for n in names}
    bad = [i for i, r in enumerate(results, 1) if not r.passed]
    reason = (
        f"all {len(results)} turns well-formed" if not bad else f"{len(bad)} of {len(results)} turns malformed; turn {bad[0]}: {results[bad[0] - 1].reason}"
    )
    return RewardResult(sum(r.score for r in results) / len(results), reason, components, passed=not bad, details={"turn_scores": [r.score for r in results]})


def _actions(items: list[Any]) -> list[str | Mapping[str, Any]]:
    if items and all(isinstance(m, Mapping) and "role" in m for m in items):
        return [turn.action for turn in split_turns(items)]
    return items


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 1.0
