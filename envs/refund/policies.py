"""Scripted policies for Refund-v0: the oracle and the "always refund" baseline.

Both follow the same workflow and read the facts they need from the tools' answers; they differ
only in how they decide each item. The oracle takes the policy check's verdict; the baseline
refunds every requested item in full.
"""

from __future__ import annotations

import abc
import json
from decimal import Decimal
from typing import Any

from agentgym.envs.refund.rules import money
from agentgym.parsing import format_tool_call
from agentgym.policies import Script, ScriptedPolicy


def _call(name: str, **arguments: Any) -> str:
    return format_tool_call(name, arguments)


def _result(observation: list[dict[str, Any]]) -> Any:
    """The JSON result of the single tool call the previous turn made."""
    (message,) = observation
    if message["content"].startswith("Error:"):
        raise RuntimeError(f"scripted policy hit a tool error: {message['content']}")
    return json.loads(message["content"])


class _WorkflowPolicy(ScriptedPolicy):
    """Verify, find the order, check every requested item, refund/deny, confirm, one call a turn."""

    @abc.abstractmethod
    def decide(self, item: dict[str, Any], verdict: dict[str, Any]) -> Decimal | str:
        """A refund amount for the item, or a denial reason (subclasses choose)."""

    def script(self, env: Any) -> Script:
        facts = env.task["facts"]
        yield _call("ask_customer", question="email")
        yield _call("ask_customer", question="zip")
        customer_id = _result((yield _call("verify_identity", email=facts["email"], zip_code=facts["zip"])))["customer_id"]
        order_id = facts["order_id"]
        if order_id is None:
            profile = _result((yield _call("get_customer", customer_id=customer_id)))
            order_id = next(o["order_id"] for o in profile["orders"] if set(facts["items"]) <= set(o["items"]))
        order = _result((yield _call("get_order", order_id=order_id)))
        yield _call("ask_customer", question="condition")
        decisions: dict[str, Decimal | str] = {}
        full_price = Decimal("0.00")
        for item in (i for i in order["items"] if i["name"] in facts["items"]):
            condition = facts["conditions"][item["name"]]
            verdict = _result((yield _call("check_return_policy", order_id=order_id, item_id=item["item_id"], condition=condition)))
            decisions[item["item_id"]] = self.decide(item, verdict)
            full_price += money(item["price"])
        refunds = {i: a for i, a in decisions.items() if isinstance(a, Decimal)}
        total = sum(refunds.values(), Decimal("0.00"))
        if refunds:
            args = {"order_id": order_id, "item_ids": sorted(refunds), "amount": float(total), "payment_method_id": order["payment_method_id"]}
            yield _call("confirm_with_customer", **args)
            yield _call("process_refund", **args)
        for reason in sorted({r for r in decisions.values() if isinstance(r, str)}):
            yield _call("deny_refund", order_id=order_id, item_ids=sorted(i for i, r in decisions.items() if r == reason), reason=reason)
        outcome = "denied" if not refunds else "full_refund" if total == full_price else "partial_refund"
        yield _call("send_confirmation", order_id=order_id, outcome=outcome, refunded_amount=float(total))


class OraclePolicy(_WorkflowPolicy):
    """Follows the policy check's verdict for every item: solves every task with the maximum reward."""

    def decide(self, item: dict[str, Any], verdict: dict[str, Any]) -> Decimal | str:
        return money(verdict["refund_amount"]) if verdict["eligible"] else verdict["reason"]


class AlwaysRefundPolicy(_WorkflowPolicy):
    """Refunds every requested item in full, whatever the policy says: a baseline that must score badly."""

    def decide(self, item: dict[str, Any], verdict: dict[str, Any]) -> Decimal | str:
        return money(item["price"])
