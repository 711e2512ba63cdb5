"""Auditing τ-bench retail tasks for ones an agent solves without doing the work.

τ-bench's reward is 1.0 when the final database equals the ground truth's and every required
output was said. A task whose ground truth leaves the database as it was and requires no output
is therefore solved by an agent that does nothing, or that transfers the customer to a human at
once, and across a training set that reward is a gradient a policy will follow. Two baselines are
played on every task, with the scripted customer:

- ``do_nothing``: the base canary that answers every turn with a polite sentence and no tool call;
- ``transfer_first``: ``transfer_to_human_agents`` as the first action.

A task passes when both score 0. :func:`solved_by_nothing` tells the same from the task's data
alone (no episode), and is what ``TauRetail-v0(strict=True)`` uses to drop such tasks.

    agentgym audit-tasks --env agentgym/TauRetail-v0             # all 635 tasks
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentgym.envs.tau_retail.data import RetailDB
from agentgym.envs.tau_retail.tools import replay_ground_truth
from agentgym.parsing import format_tool_call

__all__ = ["TaskAudit", "audit_tasks", "solved_by_nothing"]

# The first action of the transfer-first baseline.
TRANSFER = format_tool_call("transfer_to_human_agents", {"summary": "The customer needs help."})


@dataclass(frozen=True)
class TaskAudit:
    """The baseline rewards on one task.

    Attributes:
        task_id: the task.
        do_nothing: reward of an agent that never calls a tool.
        transfer_first: reward of an agent whose first action is ``transfer_to_human_agents``.
    """

    task_id: str
    do_nothing: float
    transfer_first: float

    @property
    def passed(self) -> bool:
        """Neither baseline earns any reward."""
        return self.do_nothing == 0 and self.transfer_first == 0


def solved_by_nothing(task: Mapping[str, Any]) -> bool:
    """Whether ``task`` requires no output and its ground truth leaves the database unchanged."""
    return not task["outputs"] and _changes_nothing(json.dumps(task["actions"], sort_keys=True))


@functools.cache
def _changes_nothing(actions: str) -> bool:
    # Keyed by the actions' text: every environment of a process loads its own task dicts.
    return not replay_ground_truth(json.loads(actions)).differences(RetailDB())


def audit_tasks(env: Any, task_ids: Iterable[str] | None = None) -> list[TaskAudit]:
    """Play both baselines on every task of ``env`` (a TauRetail-v0 environment), or on ``task_ids``."""
    from agentgym.policies import DoNothingPolicy

    audits = []
    for task_id in env.unwrapped.task_ids if task_ids is None else task_ids:
        rewards = []
        for first in (DoNothingPolicy().act([]), TRANSFER):
            env.reset(seed=0, options={"task_id": task_id})
            action, reward, over = first, 0.0, False
            while not over:
                _, reward, terminated, truncated, _ = env.step(action)
                over = terminated or truncated
                action = DoNothingPolicy().act([])
            rewards.append(float(reward))
        audits.append(TaskAudit(task_id, *rewards))
    return audits
