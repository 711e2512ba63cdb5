"""Customer-support refund workflow with a scripted, deterministic customer: :class:`RefundEnv`
(agentgym/Refund-v0), its tools and its reward. The class docstring documents the environment in
Gymnasium's sections; ``docs/envs/refund.md`` is generated from it."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from importlib import resources
from typing import Any, Literal

from agentgym.env import Message, ToolEnv
from agentgym.envs.refund.records import RefundTask
from agentgym.envs.refund.rules import Condition, DenialReason, evaluate_item, money
from agentgym.parsing import ParsedAction
from agentgym.tools import ToolError, tool
from agentgym.verifiers import RewardResult, weighted_sum

Outcome = Literal["full_refund", "partial_refund", "denied"]
Question = Literal["email", "zip", "order_id", "items", "condition"]

WEIGHTS = {"format": 0.1, "execution": 0.4, "completion": 0.5}
POLICY_TEXT = (resources.files("agentgym.envs.refund") / "policy.md").read_text(encoding="utf-8")


class RefundEnv(ToolEnv[RefundTask]):
    """agentgym/Refund-v0: a refund request handled under a written policy.

    ## Description

    The agent is a support agent of an online shop. A customer asks for a refund of one or two items.
    The agent must verify the customer's identity, find the order, ask the customer about each item's
    condition, apply the written refund policy (per-category return windows, final-sale items, the
    damaged-on-arrival exception, restocking fees, original payment method only, no double refunds),
    confirm the refund with the customer, process the refund and/or record the denials, and send the
    customer a confirmation. About two thirds of the tasks have a refusal or a partial refund as the
    right outcome, so neither "always refund" nor "do nothing" does well.

    The customer is scripted from the task's fact table: they open with their request and answer
    ``ask_customer`` questions and ``confirm_with_customer`` requests, always the same way.

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``. Tools (schemas in ``env.unwrapped.tools``): ``ask_customer``,
    ``verify_identity``, ``get_customer``, ``get_order``, ``check_return_policy``,
    ``confirm_with_customer``, ``process_refund``, ``deny_refund``, ``send_confirmation``.

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`): ``reset`` returns the system
    message (the refund policy, ``policy.md``) and the customer's opening message; ``step`` returns one
    ``tool`` message per call (errors start with ``Error:``), or the customer's reply as a ``user``
    message when the turn called no tool.

    ## Rewards

    Given once, on the final step, from the final state: ``0.1·format + 0.4·execution +
    0.5·completion``, hard-gated on completion (a failed task scores 0, whatever the rest says).

    - completion (pass/fail): the refund records (order, items, amount to the cent, original payment
      method), the denials (items and reasons), the confirmation (outcome and amount) all match the
      task's expected final state, and every refund was confirmed with the customer beforehand.
    - execution: share of executed tool calls that did not return an error.
    - format: share of turns without a malformed tool call (bad JSON, unknown tool, invalid arguments).

    A solved task scores 1.0. ``info["success"]`` is the completion verdict.

    ## Starting State

    A task (customer, their orders, the request, the expected outcome) from the chosen split, drawn
    with the env's seeded RNG or named by ``options={"task_id": ...}``. Today is frozen at 2025-06-15.

    ## Episode End

    Terminates when ``send_confirmation`` runs. Truncates after ``max_turns`` assistant turns.

    ## Arguments

    ``split`` (``train``/``val``/``test``), ``tasks`` (a JSONL path or list of tasks), ``task_ids``,
    ``max_turns`` (default 20), ``max_tool_calls`` per turn (default 8), ``render_mode`` (``"ansi"``).

    ## Version History

    - v0: initial release (600 generated tasks, 70/15/15 train/val/test).
    """

    task_family = "refund"
    default_max_turns = 20

    # ------------------------------------------------------------------ episode lifecycle

    def setup_episode(self, task: RefundTask) -> list[Message]:
        self.customer = copy.deepcopy(task["customer"])
        self.orders = {o["order_id"]: copy.deepcopy(o) for o in task["orders"]}
        self.verified = False
        self.confirmed: list[tuple[str, tuple[str, ...], Decimal, str]] = []
        self.new_refunds: list[dict[str, Any]] = []
        self.denials: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.unconfirmed_refunds = 0
        return [{"role": "system", "content": POLICY_TEXT}, {"role": "user", "content": task["opening"]}]

    def respond(self, parsed: ParsedAction) -> list[Message]:
        return [{"role": "user", "content": "Could you please go ahead and sort out my refund request?"}]

    def is_done(self) -> bool:
        return bool(self.sent)

    # --------------------------------------------------------------------------- tools

    @tool
    def ask_customer(self, question: Question) -> str:
        """Ask the customer for one piece of information.

        Args:
            question: what to ask for: their email, ZIP code, order id, the items they want
                refunded, or the items' condition.
        """
        assert self.task is not None
        facts = self.task["facts"]
        if question == "email":
            return f"Customer: My email is {facts['email']}."
        if question == "zip":
            return f"Customer: My ZIP code is {facts['zip']}."
        if question == "order_id":
            order_id = facts["order_id"]
            return f"Customer: The order number is {order_id}." if order_id else "Customer: Sorry, I don't have the order number."
        if question == "items":
            return "Customer: " + " and ".join(f"the {name}" for name in facts["items"]) + "."
        return "Customer: " + "; ".join(f"the {name} is {state}" for name, state in facts["conditions"].items()) + "."

    @tool
    def verify_identity(self, email: str, zip_code: str) -> dict[str, Any]:
        """Verify the customer's identity from their email address and ZIP code.

        Args:
            email: the email address the customer gave.
            zip_code: the ZIP code the customer gave.
        """
        if email.strip().lower() != self.customer["email"] or zip_code.strip() != self.customer["zip"]:
            raise ToolError("identity could not be verified: email and ZIP code do not match an account")
        self.verified = True
        return {"verified": True, "customer_id": self.customer["customer_id"]}

    @tool
    def get_customer(self, customer_id: str) -> dict[str, Any]:
        """Look up the verified customer's profile, payment methods and orders.

        Args:
            customer_id: the id returned by verify_identity.
        """
        self._require_verified()
        if customer_id != self.customer["customer_id"]:
            raise ToolError(f"no access to customer {customer_id!r}: only the verified customer's account can be viewed")
        orders = [
            {"order_id": o["order_id"], "status": o["status"], "order_date": o["order_date"], "items": [i["name"] for i in o["items"]]}
            for o in (self.orders[oid] for oid in self.customer["order_ids"])
        ]
        return {k: v for k, v in self.customer.items() if k != "order_ids"} | {"orders": orders}

    @tool
    def get_order(self, order_id: str) -> dict[str, Any]:
        """Look up one of the verified customer's orders: items, prices, dates, payment and refunds.

        Args:
            order_id: the order id, e.g. "O-600123".
        """
        return self._order(order_id)

    @tool
    def check_return_policy(self, order_id: str, item_id: str, condition: Condition) -> dict[str, Any]:
        """Apply the refund policy to one item and report whether and how much it can be refunded.

        Args:
            order_id: the order holding the item.
            item_id: the item's id, e.g. "O-600123-1".
            condition: the condition the customer reported: unopened, opened or damaged.
        """
        order = self._order(order_id)
        item = self._item(order, item_id)
        return {"item_id": item_id} | evaluate_item(order, item, condition).to_dict()

    @tool
    def confirm_with_customer(self, order_id: str, item_ids: list[str], amount: float, payment_method_id: str) -> str:
        """Ask the customer to confirm a refund before processing it.

        Args:
            order_id: the order to refund.
            item_ids: the items to refund.
            amount: the total refund amount.
            payment_method_id: where the money will go.
        """
        self._order(order_id)
        self.confirmed.append((order_id, tuple(sorted(item_ids)), money(amount), payment_method_id))
        return f"Customer: Yes, please refund {money(amount)} for {', '.join(item_ids) or 'no items'} to {payment_method_id}."

    @tool
    def process_refund(self, order_id: str, item_ids: list[str], amount: float, payment_method_id: str) -> dict[str, Any]:
        """Refund items of an order. The system does not check the policy: that is your job.

        Args:
            order_id: the order to refund.
            item_ids: the items refunded by this call.
            amount: the total amount to refund, in dollars.
            payment_method_id: the payment method that receives the money.
        """
        order = self._order(order_id)
        if not item_ids or len(set(item_ids)) != len(item_ids):
            raise ToolError("item_ids must list each refunded item once")
        items = [self._item(order, item_id) for item_id in item_ids]
        ceiling = sum((money(i["price"]) for i in items), Decimal("0.00"))
        if not Decimal("0") < money(amount) <= ceiling:
            raise ToolError(f"amount must be positive and at most the items' total price ({ceiling})")
        if payment_method_id not in {m["payment_method_id"] for m in self.customer["payment_methods"]}:
            raise ToolError(f"unknown payment method {payment_method_id!r} for this customer")
        if (order_id, tuple(sorted(item_ids)), money(amount), payment_method_id) not in self.confirmed:
            self.unconfirmed_refunds += 1
        refund = {
            "refund_id": f"R-new-{len(self.new_refunds) + 1}",
            "item_ids": list(item_ids),
            "amount": float(money(amount)),
            "payment_method_id": payment_method_id,
        }
        order["refunds"].append(refund)
        self.new_refunds.append(refund | {"order_id": order_id})
        return {"refunded": True} | refund

    @tool
    def deny_refund(self, order_id: str, item_ids: list[str], reason: DenialReason) -> dict[str, Any]:
        """Record that items are not refundable, with the policy reason.

        Args:
            order_id: the order holding the items.
            item_ids: the denied items.
            reason: the policy reason for the denial.
        """
        order = self._order(order_id)
        if not item_ids:
            raise ToolError("item_ids must not be empty")
        for item_id in item_ids:
            self._item(order, item_id)
            self.denials.append({"order_id": order_id, "item_id": item_id, "reason": reason})
        return {"denied": list(item_ids), "reason": reason}

    @tool
    def send_confirmation(self, order_id: str, outcome: Outcome, refunded_amount: float) -> str:
        """Send the customer the final outcome of their request. This ends the conversation.

        Args:
            order_id: the order the request was about.
            outcome: full_refund, partial_refund or denied.
            refunded_amount: the total amount refunded, 0 when denied.
        """
        self._order(order_id)
        self.sent.append({"order_id": order_id, "outcome": outcome, "refunded_amount": float(money(refunded_amount))})
        return f"Confirmation sent to {self.customer['email']}. The customer thanks you."

    # -------------------------------------------------------------------------- reward

    def compute_reward(self) -> RewardResult:
        problems = self._completion_problems()
        completion = RewardResult(0.0 if problems else 1.0, "; ".join(problems) or "task solved", passed=not problems)
        return weighted_sum(self.format_and_execution() | {"completion": completion}, WEIGHTS, gate="completion")

    def _completion_problems(self) -> list[str]:
        assert self.task is not None
        expected = self.task["expected"]
        problems = []
        refund = expected["refund"]
        got_items = sorted(i for r in self.new_refunds for i in r["item_ids"])
        got_amount = sum((money(r["amount"]) for r in self.new_refunds), Decimal("0.00"))
        want_items = refund["item_ids"] if refund else []
        if got_items != want_items:
            problems.append(f"refunded items {got_items or 'none'}, expected {want_items or 'none'}")
        elif refund and got_amount != money(refund["amount"]):
            problems.append(f"refunded {got_amount}, expected {money(refund['amount'])}")
        if len(self.new_refunds) > 1:
            problems.append(f"refund split over {len(self.new_refunds)} process_refund calls; the policy asks for one")
        if refund and any(r["payment_method_id"] != refund["payment_method_id"] for r in self.new_refunds):
            problems.append("refund sent to a payment method other than the original one")
        if any(r["order_id"] != expected["order_id"] for r in self.new_refunds):
            problems.append("refund on the wrong order")
        if self.unconfirmed_refunds:
            problems.append("refund processed without the customer's confirmation of those exact details")
        got_denials = {d["item_id"]: d["reason"] for d in self.denials}
        if got_denials != expected["denials"] or len(self.denials) != len(got_denials):
            problems.append(f"denials {got_denials or 'none'}, expected {expected['denials'] or 'none'}")
        want_note = {"order_id": expected["order_id"], "outcome": expected["outcome"], "refunded_amount": expected["refunded_amount"]}
        if self.sent != [want_note]:
            problems.append(f"confirmation {json.dumps(self.sent) if self.sent else 'not sent'}, expected {json.dumps(want_note)}")
        return problems

    # ------------------------------------------------------------------------- helpers

    def _require_verified(self) -> None:
        if not self.verified:
            raise ToolError("verify the customer's identity with verify_identity first")

    def _order(self, order_id: str) -> dict[str, Any]:
        self._require_verified()
        if order_id not in self.orders:
            raise ToolError(f"order {order_id!r} not found for this customer")
        return self.orders[order_id]

    @staticmethod
    def _item(order: dict[str, Any], item_id: str) -> dict[str, Any]:
        for item in order["items"]:
            if item["item_id"] == item_id:
                return item
        raise ToolError(f"item {item_id!r} is not part of order {order['order_id']}")

    @classmethod
    def policies(cls):
        from agentgym.envs.refund.policies import AlwaysRefundPolicy, OraclePolicy

        return super().policies() | {"oracle": OraclePolicy, "always_refund": AlwaysRefundPolicy}
