"""The record types of agentgym/Refund-v0: its tasks (``tasks/refund/{split}.jsonl``)."""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations.
from typing import Any

from agentgym.records import TaskRecord

__all__ = ["RefundTask"]


class RefundTask(TaskRecord):
    """A task of Refund-v0."""

    customer: dict[str, Any]  # the account: customer_id, name, email, zip, order_ids, payment_methods
    orders: list[dict[str, Any]]  # the customer's orders, with items, dates, status and past refunds
    opening: str  # the customer's first message
    facts: dict[str, Any]  # what the scripted customer answers when asked (email, zip, order, items, conditions)
    expected: dict[str, Any]  # the correct final state: outcome, refund, denials, confirmation
    outcomes: list[str]  # the policy cases the task exercises
