"""The refund policy as code: return windows, exceptions and fees, and the verdict for one item.

``policy.md`` states the same rules in prose for the agent; ``check_return_policy`` applies this
module. The task generator does not use it: it builds each task from the outcome it intends,
so the oracle reaching 100% is an independent check that both agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal

DenialReason = Literal["not_delivered", "already_refunded", "final_sale", "outside_return_window"]
Condition = Literal["unopened", "opened", "damaged"]

TODAY = date(2025, 6, 15)
RETURN_WINDOW_DAYS = {"electronics": 30, "apparel": 60, "home": 45, "books": 30, "sports": 45}
DAMAGED_ON_ARRIVAL_DAYS = 90
RESTOCKING_FEE = {"electronics": Decimal("0.15"), "home": Decimal("0.10")}
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Verdict:
    """What the policy allows for one item: a refund amount, or a denial reason."""

    eligible: bool
    refund_amount: Decimal
    restocking_fee: Decimal
    reason: str
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "eligible": self.eligible,
            "refund_amount": float(self.refund_amount),
            "restocking_fee": float(self.restocking_fee),
            "reason": self.reason,
            "explanation": self.explanation,
        }


def money(value: float | str | Decimal) -> Decimal:
    """A money amount rounded half-up to the cent."""
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def days_since(iso_day: str, today: date = TODAY) -> int:
    return (today - date.fromisoformat(iso_day)).days


def evaluate_item(order: dict[str, Any], item: dict[str, Any], condition: Condition, today: date = TODAY) -> Verdict:
    """Apply the policy's rules, in the policy's order of precedence, to one item of an order."""
    price = money(item["price"])
    if order["status"] != "delivered":
        return _deny("not_delivered", f"order status is '{order['status']}'; only delivered orders can be refunded")
    if any(item["item_id"] in refund["item_ids"] for refund in order.get("refunds", [])):
        return _deny("already_refunded", "this item has already been refunded")
    age = days_since(order["delivered_date"], today)
    if condition == "damaged":
        if age <= DAMAGED_ON_ARRIVAL_DAYS:
            return Verdict(True, price, Decimal("0.00"), "damaged_on_arrival", f"damaged on arrival, reported {age} days after delivery: full refund")
        return _deny("outside_return_window", f"damage reported {age} days after delivery; the limit is {DAMAGED_ON_ARRIVAL_DAYS}")
    if item["final_sale"]:
        return _deny("final_sale", "final-sale items are not refundable unless damaged on arrival")
    window = RETURN_WINDOW_DAYS[item["category"]]
    if age > window:
        return _deny("outside_return_window", f"delivered {age} days ago; the {item['category']} window is {window} days")
    rate = RESTOCKING_FEE.get(item["category"]) if condition == "opened" else None
    if rate is not None:
        fee = money(price * rate)
        return Verdict(True, price - fee, fee, "restocking_fee", f"opened {item['category']} item: {int(rate * 100)}% restocking fee")
    return Verdict(True, price, Decimal("0.00"), "within_window", f"within the {window}-day {item['category']} window: full refund")


def _deny(reason: DenialReason, explanation: str) -> Verdict:
    return Verdict(False, Decimal("0.00"), Decimal("0.00"), reason, explanation)
