"""The record types of agentgym/TauRetail-v0: its tasks and the entries it adds to ``info``."""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations.
from typing import Any, NotRequired, TypedDict

from agentgym.records import TaskRecord

__all__ = ["TauRetailInfo", "TauRetailTask"]


class TauRetailTask(TaskRecord):
    """A task of TauRetail-v0: τ-bench's retail task, under agentgym's id and split."""

    upstream_split: str  # τ-bench's split: "train", "dev" or "test"
    task_index: int  # the task's index in τ-bench's split
    annotator: str
    user_id: str
    instruction: str  # the customer's situation and goal
    actions: list[dict[str, Any]]  # the ground-truth tool calls: {"name", "kwargs"}
    outputs: list[str]  # facts the agent must tell the customer


class TauRetailInfo(TypedDict):
    """What TauRetail-v0 adds to every ``info`` (``extra_info()``)."""

    policy_violations: int
    policy_violations_by_rule: dict[str, int]
    user_errors: NotRequired[int]  # user="llm": how many times the customer model failed
    user_error: NotRequired[str | None]  # user="llm": the latest failure's message
