"""Auditing code tasks for hidden tests that a trivial function passes.

A task whose hidden tests mostly share one answer rewards doing nothing clever: a function that
returns a constant, or the answer most common among the visible examples, earns credit on it,
and across a task set that credit is a gradient a policy will follow. Two baselines are scored
per task:

- ``constant``: the best any function returning one fixed value can score (the largest share of
  hidden tests that expect one value);
- ``majority_visible``: a function returning the visible examples' most common answer.

A task passes when both are at most :data:`MAX_BASELINE_SCORE`. CodeExec's own tasks (format
``function``) are audited from their data, exactly and without running code. HumanEval and MBPP
tasks keep their expected values inside test code, so their ``constant`` score is measured by
grading a fixed set of constant submissions in the sandbox (a lower bound of the best constant),
and ``majority_visible`` is not measured.

    agentgym audit-tasks                       # CodeExec-v0's bundled tasks, all splits
    agentgym audit-tasks --tasks my_mbpp.jsonl # a task file of your own
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from agentgym.envs.code_exec.loaders import grading_spec, load_tasks

if TYPE_CHECKING:
    from agentgym.sandbox.grading import Grader
from agentgym.sandbox._harness import canonical

__all__ = ["MAX_BASELINE_SCORE", "TaskAudit", "audit_task", "audit_tasks", "bundled_tasks"]

MAX_BASELINE_SCORE = 0.5
# The constants tried on tasks whose answers live in test code.
_CONSTANTS: tuple[object, ...] = (None, 0, 1, -1, True, False, "", [], {}, ())


@dataclass(frozen=True)
class TaskAudit:
    """The baseline scores of one task.

    Attributes:
        task_id: the task.
        constant: best score of a function returning one fixed value.
        majority_visible: score of a function returning the most common visible answer (None
            where the format does not expose the examples' answers).
    """

    task_id: str
    constant: float
    majority_visible: float | None

    @property
    def passed(self) -> bool:
        """Both baselines at most :data:`MAX_BASELINE_SCORE`."""
        return max(self.constant, self.majority_visible or 0.0) <= MAX_BASELINE_SCORE


def audit_task(task: dict[str, Any], *, backend: str = "auto", grader: Grader | None = None) -> TaskAudit:
    """Score the baselines on one normalised task (see :mod:`agentgym.envs.code_exec.loaders`),
    with ``grader`` (default: a new one on ``backend``)."""
    if task["format"] == "function":
        hidden = [canonical(test["expected"]) for test in task["tests"]]
        if not hidden:
            raise ValueError(f"task {task['task_id']} has no hidden tests")
        shown = Counter(canonical(example["expected"]) for example in task["examples"])
        majority = shown.most_common(1)[0][0] if shown else None
        return TaskAudit(
            task_id=task["task_id"],
            constant=max(Counter(hidden).values()) / len(hidden),
            majority_visible=sum(answer == majority for answer in hidden) / len(hidden),
        )
    from agentgym.sandbox.grading import Grader

    grader, spec = grader or Grader(backend), grading_spec(task)
    names = [task["entry_point"]] if task["format"] == "humaneval" else list(task["names"])
    scores = []
    for value in _CONSTANTS:
        code = "".join(f"def {name}(*args, **kwargs):\n    return {value!r}\n" for name in names)
        scores.append(max(grader.grade(code, spec).score, 0.0))
    return TaskAudit(task_id=task["task_id"], constant=max(scores), majority_visible=None)


def audit_tasks(tasks: Sequence[dict[str, Any]], *, backend: str = "auto") -> list[TaskAudit]:
    """:func:`audit_task` for every task, in order."""
    from agentgym.sandbox.grading import Grader

    with Grader(backend) as grader:
        return [audit_task(task, grader=grader) for task in tasks]


def bundled_tasks() -> list[dict[str, Any]]:
    """CodeExec-v0's bundled tasks, every split."""
    tasks = []
    for split in ("train", "val", "test"):
        with resources.as_file(resources.files("agentgym.tasks") / "code_exec" / f"{split}.jsonl") as path:
            tasks += load_tasks(path)
    return tasks
