"""Write a reward with the SDK, check it against hand-labelled trajectories, and fix what it finds.

    python examples/new_reward.py

Both rewards score SQL-v0 episode records from the record alone, against the task's reference
answer. ``naive_reward`` takes the last ``answer`` call and compares leniently; validation against
the labels bundled in ``tasks/knowledge/sql/labelled.jsonl`` (agreement, Cohen's kappa, the
oracle at the top, canary policies at the floor, the same scores in other processes, a gap
between honest successes and labelled hacks) shows how it can be gamed: hedged answers ("15 or
more") and several answers in a row pass. ``reward`` closes both (exactly one answer; numbers
parsed strictly, units checked) and validates. The same check from the command line:

    agentgym validate-reward tasks/knowledge/sql/labelled.jsonl --reward new_reward:reward
    (run from examples/, so that the module imports)
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401 - registers the environments
from agentgym.offline.validation import validate
from agentgym.verifiers import RewardResult, normalized_match, numeric_match, tool_calls_of

LABELS = Path(__file__).resolve().parent.parent / "tasks" / "knowledge" / "sql" / "labelled.jsonl"


@functools.cache
def references() -> dict[str, dict[str, Any]]:
    """Every SQL-v0 task's reference answer, by task id."""
    out = {}
    for split in ("train", "val", "test"):
        env = gym.make("agentgym/SQL-v0", split=split)
        out |= {t["task_id"]: t["answer"] for t in env.unwrapped.tasks}
        env.close()
    return out


def naive_reward(record: dict[str, Any]) -> RewardResult:
    """1 when the last submitted answer matches the reference, leniently (a first attempt)."""
    answers = [c for c in tool_calls_of(record["messages"]) if c.name == "answer"]
    if not answers or not isinstance(answers[-1].arguments.get("text"), str):
        return RewardResult(0.0, "no answer submitted", passed=False)
    text, spec = answers[-1].arguments["text"], references()[record["task_id"]]
    if spec["type"] == "number":
        return numeric_match(text, spec["value"], abs_tol=float(spec.get("tolerance", 0.0)), extract=None)
    return normalized_match(text, spec["value"], extract=None)


def reward(record: dict[str, Any]) -> RewardResult:
    """1 when the one submitted answer matches the reference: a number alone (units checked), or the text."""
    answers = [c for c in tool_calls_of(record["messages"]) if c.name == "answer"]
    if len(answers) != 1 or not isinstance(answers[0].arguments.get("text"), str):
        return RewardResult(0.0, f"{len(answers)} answers submitted; exactly one counts", passed=False)
    text, spec = answers[0].arguments["text"], references()[record["task_id"]]
    if spec["type"] == "number":
        tolerance = float(spec.get("tolerance", 0.0))
        return numeric_match(text, spec["value"], abs_tol=tolerance, percent="strict", check_units=True, extract=None)
    return normalized_match(text, spec["value"], extract=None)


def report(name: str, records: list[dict[str, Any]]) -> bool:
    result = validate(records, globals()[name], env_id="agentgym/SQL-v0", probe_episodes=5, reward_spec=f"new_reward:{name}")
    print(f"{name}: {result.n} labelled records, agreement {result.accuracy:.3f}, kappa {result.kappa:.3f}")
    for check in result.checks:
        print(f"  {'ok  ' if check.passed else 'FAIL'} {check.name}: {check.detail}")
    for disagreement in result.disagreements[:3]:
        print(f"  disagrees on {disagreement.task_id}: labelled {disagreement.label['justification']!r}, scored {disagreement.score}")
    print(f"  -> {'valid' if result.ok else 'not valid'}\n")
    return result.ok


def main() -> int:
    records = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]
    naive_ok = report("naive_reward", records)
    fixed_ok = report("reward", records)
    return 0 if fixed_ok and not naive_ok else 1


if __name__ == "__main__":
    sys.exit(main())
