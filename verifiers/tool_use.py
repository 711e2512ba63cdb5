"""Tool-use shaping: credit for calling the tools a task needs, capped penalties for misuse.

Penalised: consecutive duplicate calls (same tool, same arguments, back to back), calls to tools
that do not exist (hallucinated), and calls beyond a budget (tool spam). The total penalty is
capped so that shaping can never outweigh the task itself; the score stays in [0, 1].
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from agentgym.verifiers.result import RewardResult
from agentgym.verifiers.schema import ToolSpecs, call_name_and_arguments, tool_schemas

__all__ = ["execution_reward", "tool_use_reward"]


def tool_use_reward(
    calls: Iterable[Any],
    *,
    known: ToolSpecs | Collection[str],
    expected: Collection[str] | None = None,
    duplicate_penalty: float = 0.25,
    hallucination_penalty: float = 0.5,
    max_calls: int | None = None,
    excess_penalty: float = 0.1,
    max_penalty: float = 1.0,
) -> RewardResult:
    """Shape an episode's tool use.

    ``score = max(0, right_tool - min(max_penalty, penalties))`` where ``right_tool`` is the
    share of ``expected`` tools called at least once (1.0 when nothing is expected).

    Args:
        calls: the episode's tool calls, in order (``ToolCall`` objects, ``{"name",
            "arguments"}`` dicts or OpenAI entries; see :func:`agentgym.verifiers.tool_calls_of`).
        known: the tools that exist, as names or tool specs.
        expected: tools the task needs.
        duplicate_penalty: per call identical to the call right before it.
        hallucination_penalty: per call to a tool not in ``known``.
        max_calls: calls allowed before each further call costs ``excess_penalty``.
        max_penalty: cap on the summed penalties.
    """
    for name, value in (
        ("duplicate_penalty", duplicate_penalty),
        ("hallucination_penalty", hallucination_penalty),
        ("excess_penalty", excess_penalty),
        ("max_penalty", max_penalty),
    ):
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value}")
    known_names = _names(known)
    sequence = [call_name_and_arguments(c) for c in calls]
    called = {name for name, _ in sequence}

    wanted = set(expected or ())
    right_tool = len(wanted & called) / len(wanted) if wanted else 1.0
    duplicates = sum(1 for previous, current in itertools.pairwise(sequence) if _same(previous, current))
    hallucinated = [name for name, _ in sequence if name not in known_names]
    excess = max(0, len(sequence) - max_calls) if max_calls is not None else 0

    penalties = {
        "duplicate_calls": duplicates * duplicate_penalty,
        "hallucinated_tools": len(hallucinated) * hallucination_penalty,
        "excess_calls": excess * excess_penalty,
    }
    penalty = min(max_penalty, sum(penalties.values()))
    score = max(0.0, right_tool - penalty)

    notes = []
    if wanted - called:
        notes.append(f"missing expected tool(s) {sorted(wanted - called)}")
    if duplicates:
        notes.append(f"{duplicates} consecutive duplicate call(s)")
    if hallucinated:
        notes.append(f"{len(hallucinated)} call(s) to unknown tool(s) {sorted(set(hallucinated))}")
    if excess:
        notes.append(f"{excess} call(s) over the budget of {max_calls}")
    if penalty < sum(penalties.values()):
        notes.append(f"penalty capped at {max_penalty:g}")
    return RewardResult(
        score,
        "; ".join(notes) or f"used the expected tools cleanly ({len(sequence)} calls)",
        {"right_tool": right_tool} | {k: -v for k, v in penalties.items()},
        passed=not notes,
        details={"calls": len(sequence), "duplicates": duplicates, "hallucinated": len(hallucinated), "excess": excess},
    )


def execution_reward(tool_calls: int, tool_errors: int) -> RewardResult:
    """Share of executed tool calls that did not fail (1.0 when none ran).

    Args:
        tool_calls: calls that passed validation and ran.
        tool_errors: those that raised or returned an error.
    """
    if tool_calls < 0 or not 0 <= tool_errors <= max(tool_calls, 0):
        raise ValueError(f"need 0 <= tool_errors <= tool_calls, got {tool_errors} and {tool_calls}")
    if not tool_calls:
        return RewardResult(1.0, "", passed=True)
    score = 1 - tool_errors / tool_calls
    return RewardResult(score, f"{tool_errors} of {tool_calls} tool calls returned errors" if tool_errors else "", passed=not tool_errors)


def _names(known: ToolSpecs | Collection[str]) -> set[str]:
    if isinstance(known, Mapping):
        return set(known)
    items = list(known)
    if all(isinstance(item, str) for item in items):
        return set(items)
    return set(tool_schemas(items))


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return a[0] == b[0] and _canonical(a[1]) == _canonical(b[1])


def _canonical(arguments: Any) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(arguments)
