"""Deterministic generator of the Refund-v0 task set.

Each task is built backwards from the outcome it intends for each requested item (a full
refund, a restocking-fee refund, or a denial for a named reason): dates, categories, flags and
prior refunds are chosen to produce exactly that outcome. The expected final state is written
into the task, so the reward never re-derives it from the policy code.

    python -m agentgym.tasks.build.refund.tasks tasks/refund   # rewrites train/val/test.jsonl
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentgym.envs.names import FIRST_NAMES, LAST_NAMES
from agentgym.envs.refund.rules import DAMAGED_ON_ARRIVAL_DAYS, RESTOCKING_FEE, RETURN_WINDOW_DAYS, TODAY, money
from agentgym.tasks.build import folder_parser, split_seeded, write_splits

SEED = 20250615
N_TASKS = 600

CATALOGUE = {
    "electronics": [
        ("Wireless Earbuds", 59, 189),
        ("Graphics Card", 299, 899),
        ("Smart Watch", 129, 449),
        ("Bluetooth Speaker", 39, 159),
        ("Mechanical Keyboard", 69, 219),
        ("Portable SSD", 79, 249),
    ],
    "apparel": [("Rain Jacket", 49, 189), ("Wool Sweater", 39, 129), ("Running Shoes", 59, 179), ("Denim Jeans", 35, 110)],
    "home": [("Espresso Machine", 149, 599), ("Table Lamp", 25, 120), ("Ceramic Cookware Set", 89, 329), ("Throw Blanket", 29, 89)],
    "books": [("Hardcover Atlas", 25, 75), ("Cookbook", 18, 45), ("Graphic Novel Box Set", 40, 120)],
    "sports": [("Yoga Mat", 20, 80), ("Camping Tent", 99, 399), ("Road Bike Helmet", 45, 160), ("Dumbbell Pair", 30, 140)],
}
PAYMENT_KINDS = ("visa", "mastercard", "paypal", "gift")

# Intended per-item outcomes and how often single-item tasks draw them. At least 40% of tasks must
# have a refusal or a partial refund as the right answer, so "always refund" scores badly.
OUTCOME_WEIGHTS = {
    "full_unopened": 22,
    "full_opened": 10,
    "damaged_final_sale": 5,
    "damaged_late": 5,
    "fee_opened": 16,
    "deny_window": 15,
    "deny_final_sale": 10,
    "deny_refunded": 9,
    "deny_not_delivered": 8,
}
CONDITION_PHRASES = {"unopened": "It's still unopened in the box.", "opened": "I opened it, but it's not what I wanted.", "damaged": "It arrived damaged."}


def generate(seed: int = SEED, n_tasks: int = N_TASKS) -> dict[str, list[dict[str, Any]]]:
    """All tasks, by split. Same seed, same tasks, byte for byte."""
    rng = random.Random(seed)
    tasks = [_task(rng, index) for index in range(n_tasks)]
    return split_seeded(tasks, rng)


def _task(rng: random.Random, index: int) -> dict[str, Any]:
    difficulty = rng.choices(["easy", "medium", "hard"], weights=[40, 35, 25])[0]
    outcomes, categories, age = _plan(rng, 2 if difficulty == "hard" else 1)
    customer = _customer(rng, index)
    target, request_items, conditions = _target_order(rng, index, customer, outcomes, categories, age)
    taken = {i["name"] for i in target["items"]}
    distractors = [_distractor_order(rng, index, k, customer, taken) for k in range(rng.randrange(1, 3))]
    orders = [target, *distractors]
    rng.shuffle(orders)
    customer["order_ids"] = [o["order_id"] for o in orders]
    know_order_id = difficulty != "medium"
    names = " and the ".join(i["name"] for i in request_items)
    where = f"from order {target['order_id']}" if know_order_id else "from one of my recent orders"
    opening = f"Hi, I'd like a refund for the {names} {where}. {_condition_text(request_items, conditions)}"
    return {
        "task_id": f"refund-{index:04d}",
        "difficulty": difficulty,
        "outcomes": outcomes,
        "customer": customer,
        "orders": orders,
        "opening": opening,
        "facts": {
            "email": customer["email"],
            "zip": customer["zip"],
            "order_id": target["order_id"] if know_order_id else None,
            "items": [i["name"] for i in request_items],
            "conditions": {i["name"]: c for i, c in zip(request_items, conditions, strict=False)},
        },
        "expected": _expected(target, request_items, outcomes),
    }


def _plan(rng: random.Random, n_items: int) -> tuple[list[str], list[str], int]:
    """Outcomes, categories and a delivery age (days) consistent with one another."""
    while True:  # rejection sampling; seeded, so deterministic
        outcomes = rng.choices(list(OUTCOME_WEIGHTS), weights=list(OUTCOME_WEIGHTS.values()), k=n_items)
        if n_items > 1 and ("deny_not_delivered" in outcomes or len(set(outcomes)) == 1):
            continue  # one order has one status; two identical outcomes teach nothing new
        categories = [_category(rng, o) for o in outcomes]
        low, high = 1, DAMAGED_ON_ARRIVAL_DAYS + 60
        for outcome, category in zip(outcomes, categories, strict=False):
            window = RETURN_WINDOW_DAYS[category]
            if outcome in ("full_unopened", "full_opened", "fee_opened", "deny_final_sale"):
                high = min(high, window)
            elif outcome == "deny_window":
                low = max(low, window + 1)
            elif outcome == "damaged_late":
                low, high = max(low, window + 1), min(high, DAMAGED_ON_ARRIVAL_DAYS)
            elif outcome == "damaged_final_sale":
                high = min(high, DAMAGED_ON_ARRIVAL_DAYS)
        if low <= high:
            return outcomes, categories, rng.randint(low, high)


def _category(rng: random.Random, outcome: str) -> str:
    if outcome == "fee_opened":
        return rng.choice(sorted(RESTOCKING_FEE))
    if outcome == "full_opened":
        return rng.choice(sorted(c for c in RETURN_WINDOW_DAYS if c not in RESTOCKING_FEE))
    return rng.choice(sorted(RETURN_WINDOW_DAYS))


def _condition(rng: random.Random, outcome: str) -> str:
    if outcome.startswith("damaged"):
        return "damaged"
    if outcome in ("fee_opened", "full_opened"):
        return "opened"
    if outcome in ("full_unopened", "deny_not_delivered"):
        return "unopened"
    return rng.choice(["unopened", "opened"])


def _condition_text(items: list[dict[str, Any]], conditions: list[str]) -> str:
    if len(items) == 1:
        return CONDITION_PHRASES[conditions[0]]
    states = {"unopened": "is still unopened", "opened": "was opened", "damaged": "arrived damaged"}
    return " and the ".join(f"{i['name']} {states[c]}" for i, c in zip(items, conditions, strict=False)).join(("The ", "."))


def _customer(rng: random.Random, index: int) -> dict[str, Any]:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    methods = []
    for kind in rng.sample(PAYMENT_KINDS, k=rng.randrange(1, 4)):
        number = rng.randrange(1000, 10000)
        methods.append({"payment_method_id": f"pm_{kind}_{number}", "type": "gift_card" if kind == "gift" else "paypal" if kind == "paypal" else "card"})
    return {
        "customer_id": f"C-{10000 + index}",
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{rng.randrange(10, 100)}@example.com",
        "zip": f"{rng.randrange(10000, 100000)}",
        "payment_methods": methods,
    }


def _item(rng: random.Random, order_id: str, n: int, category: str, taken: set[str]) -> dict[str, Any]:
    choices = [c for c in CATALOGUE[category] if c[0] not in taken]
    if not choices:  # category exhausted: names must stay unique within a customer's orders
        category = next(c for c in sorted(CATALOGUE) if any(p[0] not in taken for p in CATALOGUE[c]))
        choices = [c for c in CATALOGUE[category] if c[0] not in taken]
    name, low, high = rng.choice(choices)
    price = money(rng.randrange(low * 100, high * 100) / 100)
    return {"item_id": f"{order_id}-{n}", "name": name, "category": category, "price": float(price), "final_sale": False}


def _target_order(
    rng: random.Random, index: int, customer: dict[str, Any], outcomes: list[str], categories: list[str], age: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    order_id = f"O-{600000 + index}"
    taken: set[str] = set()
    items = []
    for n, (outcome, category) in enumerate(zip(outcomes, categories, strict=False), 1):
        item = _item(rng, order_id, n, category, taken)
        item["final_sale"] = outcome in ("deny_final_sale", "damaged_final_sale")
        taken.add(item["name"])
        items.append(item)
    conditions = [_condition(rng, o) for o in outcomes]
    delivered = TODAY - timedelta(days=age)
    status = rng.choice(["processing", "shipped"]) if "deny_not_delivered" in outcomes else "delivered"
    ordered = delivered - timedelta(days=rng.randrange(2, 8))
    extra = _item(rng, order_id, len(items) + 1, rng.choice(sorted(CATALOGUE)), taken) if rng.random() < 0.5 else None
    payment = rng.choice(customer["payment_methods"])["payment_method_id"]
    refunds = [
        {"refund_id": f"R-{index}-{n}", "item_ids": [item["item_id"]], "amount": item["price"], "payment_method_id": payment}
        for n, (item, outcome) in enumerate(zip(items, outcomes, strict=False), 1)
        if outcome == "deny_refunded"
    ]
    order = {
        "order_id": order_id,
        "status": status,
        "order_date": ordered.isoformat(),
        "delivered_date": delivered.isoformat() if status == "delivered" else None,
        "payment_method_id": payment,
        "items": items + ([extra] if extra else []),
        "refunds": refunds,
    }
    return order, items, conditions


def _distractor_order(rng: random.Random, index: int, k: int, customer: dict[str, Any], taken: set[str]) -> dict[str, Any]:
    """Another order of the customer's, holding none of the requested products (no ambiguity)."""
    order_id = f"O-{700000 + index * 3 + k}"
    delivered = TODAY - timedelta(days=rng.randrange(1, 120))
    taken = set(taken)
    items = []
    for n in range(1, rng.randrange(2, 4)):
        item = _item(rng, order_id, n, rng.choice(sorted(CATALOGUE)), taken)
        taken.add(item["name"])
        items.append(item)
    return {
        "order_id": order_id,
        "status": "delivered",
        "order_date": (delivered - timedelta(days=rng.randrange(2, 8))).isoformat(),
        "delivered_date": delivered.isoformat(),
        "payment_method_id": rng.choice(customer["payment_methods"])["payment_method_id"],
        "items": items,
        "refunds": [],
    }


def _expected(order: dict[str, Any], items: list[dict[str, Any]], outcomes: list[str]) -> dict[str, Any]:
    refunded, denials, total, full = [], {}, Decimal("0.00"), Decimal("0.00")
    for item, outcome in zip(items, outcomes, strict=False):
        price = money(item["price"])
        full += price
        if outcome.startswith("deny"):
            denials[item["item_id"]] = {
                "deny_window": "outside_return_window",
                "deny_final_sale": "final_sale",
                "deny_refunded": "already_refunded",
                "deny_not_delivered": "not_delivered",
            }[outcome]
        else:
            refunded.append(item["item_id"])
            total += price - money(price * RESTOCKING_FEE[item["category"]]) if outcome == "fee_opened" else price
    outcome = "denied" if not refunded else "full_refund" if total == full else "partial_refund"
    return {
        "order_id": order["order_id"],
        "refund": {"item_ids": sorted(refunded), "amount": float(total), "payment_method_id": order["payment_method_id"]} if refunded else None,
        "denials": denials,
        "outcome": outcome,
        "refunded_amount": float(total),
    }


def write(folder: str | Path, seed: int = SEED, n_tasks: int = N_TASKS) -> list[Path]:
    """Write ``{train,val,test}.jsonl`` into ``folder``; returns their paths."""
    return write_splits(folder, generate(seed, n_tasks))


def main(argv: Sequence[str] | None = None) -> None:
    write(folder_parser(__doc__).parse_args(argv).folder)


if __name__ == "__main__":
    main()
