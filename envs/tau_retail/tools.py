"""τ-bench retail's 16 tools, with its names, arguments, results and database effects.

Every tool reads ``self.db`` (a :class:`~agentgym.envs.tau_retail.data.RetailDB`) and returns a
string, as τ-bench's do: JSON for records, a bare user id, ``""`` for ``think``. A refusal raises
:class:`ToolError` with τ-bench's message, which the environment shows as ``"Error: <message>"``;
every check runs before the first write, so a refused call leaves the database as it was.

Behaviours kept on purpose because they change the final database, hence τ-bench's hash:

* cancelling refunds every payment of the order; gift cards are credited at once (balance
  rounded to cents), other methods only get the refund record;
* ``modify_pending_order_items`` pays or refunds the price difference *unrounded* (a float sum
  in item order), and replaces, for each pair, the first item that still has the old id;
* ``exchange_delivered_order_items`` rounds the difference and moves no money;
* return and exchange store their item id lists sorted;
* checks compare ids as τ-bench does (``"gift_card" in payment_method_id`` where it tests the
  id, the method's ``source`` where it tests that).
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any, Literal, cast, get_args

from agentgym.envs.tau_retail.data import Record, RetailDB
from agentgym.parsing import parse_python
from agentgym.tools import ToolError, tool, tools_of

__all__ = ["TERMINATE_TOOLS", "WRITE_TOOLS", "RetailTools", "calculate_expression", "replay_ground_truth"]

CancelReason = Literal["no longer needed", "ordered by mistake"]

TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
WRITE_TOOLS = (
    "cancel_pending_order",
    "exchange_delivered_order_items",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
)


class RetailTools:
    """The tools, as methods over ``self.db``; the environment inherits them.

    Used on its own (``RetailTools(db).call(name, arguments)``) it replays actions the way
    τ-bench's reward does: a refusal becomes the ``"Error: ..."`` observation.
    """

    db: RetailDB
    transferred: bool

    def __init__(self, db: RetailDB) -> None:
        self.db = db
        self.transferred = False

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run tool ``name`` as τ-bench's ``Env.step`` does: a refusal is returned as its error text."""
        try:
            return _TOOL_FUNCTIONS[name](self, **arguments)
        except ToolError as exc:
            return f"Error: {exc}"

    # ----------------------------------------------------------------------- read tools

    @tool
    def calculate(self, expression: str) -> str:
        """Calculate the result of a mathematical expression.

        Args:
            expression: numbers, + - * /, parentheses and spaces, e.g. "2 + 2".
        """
        return calculate_expression(expression)

    @tool
    def find_user_id_by_email(self, email: str) -> str:
        """Find user id by email.

        Args:
            email: the user's email, compared case-insensitively.
        """
        # Lowered per user, as upstream does: the same exception for an argument of another type.
        return _first_user(self.db, lambda user: user["email"].lower() == email.lower())

    @tool
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find user id by first name, last name, and zip code.

        Args:
            first_name: compared case-insensitively.
            last_name: compared case-insensitively.
            zip: compared exactly.
        """
        # Each part compared only if the ones before matched, as upstream does: with errors="upstream"
        # a last name of another type raises only on a user whose first name matches.
        return _first_user(
            self.db,
            lambda user: (
                user["name"]["first_name"].lower() == first_name.lower()
                and user["name"]["last_name"].lower() == last_name.lower()
                and user["address"]["zip"] == zip
            ),
        )

    @tool
    def get_order_details(self, order_id: str) -> str:
        """Get the status and details of an order.

        Args:
            order_id: e.g. "#W0000000".
        """
        return json.dumps(_order(self.db, order_id))

    @tool
    def get_product_details(self, product_id: str) -> str:
        """Get the inventory details of a product.

        Args:
            product_id: e.g. "6086499569" (not an item id).
        """
        if product_id not in self.db.products:
            raise ToolError("product not found")
        return json.dumps(self.db.products[product_id])

    @tool
    def get_user_details(self, user_id: str) -> str:
        """Get the details of a user, including their orders.

        Args:
            user_id: e.g. "sara_doe_496".
        """
        return json.dumps(_user(self.db, user_id))

    @tool
    def list_all_product_types(self) -> str:
        """List the name and product id of all product types, sorted by name."""
        # A name shared by two products keeps the later one, as building a dict does upstream.
        by_name = {product["name"]: product["product_id"] for product in self.db.products.values()}
        return json.dumps(dict(sorted(by_name.items())))

    @tool
    def think(self, thought: str) -> str:
        """Think about something; changes nothing and returns an empty string.

        Args:
            thought: the thought.
        """
        return ""

    @tool
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent; this ends the episode.

        Args:
            summary: a summary of the user's issue.
        """
        self.transferred = True
        return "Transfer successful"

    # ---------------------------------------------------------------------- write tools

    @tool
    def cancel_pending_order(self, order_id: str, reason: CancelReason) -> str:
        """Cancel a pending order and refund its payments.

        Args:
            order_id: e.g. "#W0000000".
            reason: "no longer needed" or "ordered by mistake".
        """
        order = _order(self.db, order_id)
        if order["status"] != "pending":
            raise ToolError("non-pending order cannot be cancelled")
        if reason not in get_args(CancelReason):  # reachable through call(), which skips the schema
            raise ToolError("invalid reason")
        payments = [dict(p) for p in order["payment_history"]]
        # Gift cards are refunded at once, in payment order; other methods only get the record.
        gift_card_refunds = [p for p in payments if "gift_card" in p["payment_method_id"]]
        _require_methods(self.db, order, [p["payment_method_id"] for p in gift_card_refunds])
        if gift_card_refunds:
            methods = self.db.writable("users", order["user_id"])["payment_methods"]
            for payment in gift_card_refunds:
                _credit(methods[payment["payment_method_id"]], payment["amount"])
        order = self.db.writable("orders", order_id)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend({"transaction_type": "refund", "amount": p["amount"], "payment_method_id": p["payment_method_id"]} for p in payments)
        return json.dumps(order)

    @tool
    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> str:
        """Exchange items of a delivered order for other variants of the same products.

        Args:
            order_id: e.g. "#W0000000".
            item_ids: the items to exchange; an id may repeat.
            new_item_ids: the new item for each position of item_ids.
            payment_method_id: pays or receives the price difference.
        """
        order = _order(self.db, order_id)
        if order["status"] != "delivered":
            raise ToolError("non-delivered order cannot be exchanged")
        # Exchanges round the difference (modifications do not).
        difference = round(_price_difference(self.db, order, item_ids, new_item_ids), 2)
        method = _payment_method(self.db, order, payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < difference:
            raise ToolError("insufficient gift card balance to pay for the price difference")
        order = self.db.writable("orders", order_id)
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = difference
        return json.dumps(order)

    @tool
    def modify_pending_order_address(self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str) -> str:
        """Modify the shipping address of a pending order (``address2`` may be empty)."""
        _pending_order(self.db, order_id)
        order = self.db.writable("orders", order_id)
        order["address"] = _address(address1, address2, city, state, country, zip)
        return json.dumps(order)

    @tool
    def modify_pending_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> str:
        """Modify items of a pending order to other variants of the same products.

        Args:
            order_id: e.g. "#W0000000".
            item_ids: the items to modify; an id may repeat.
            new_item_ids: the new item for each position of item_ids.
            payment_method_id: pays or receives the price difference.
        """
        order = _pending_order(self.db, order_id)
        difference = _price_difference(self.db, order, item_ids, new_item_ids)
        method = _payment_method(self.db, order, payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < difference:
            raise ToolError("insufficient gift card balance to pay for the new item")
        order = self.db.writable("orders", order_id)
        order["payment_history"].append(
            {"transaction_type": "payment" if difference > 0 else "refund", "amount": abs(difference), "payment_method_id": payment_method_id}
        )
        if method["source"] == "gift_card":
            _credit(self.db.writable("users", order["user_id"])["payment_methods"][payment_method_id], -difference)
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
            item = next(i for i in order["items"] if i["item_id"] == item_id)
            variant = self.db.products[item["product_id"]]["variants"][new_item_id]
            item["item_id"] = new_item_id
            item["price"] = variant["price"]
            item["options"] = dict(variant["options"])  # a copy: the shared product data stays untouched
        order["status"] = "pending (item modified)"
        return json.dumps(order)

    @tool
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> str:
        """Pay a pending order with another payment method.

        Args:
            order_id: e.g. "#W0000000".
            payment_method_id: the new method, e.g. "gift_card_0000000".
        """
        order = _pending_order(self.db, order_id)
        method = _payment_method(self.db, order, payment_method_id)
        history = order["payment_history"]
        if len(history) > 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("there should be exactly one payment for a pending order")
        old_method_id, amount = history[0]["payment_method_id"], history[0]["amount"]
        if old_method_id == payment_method_id:
            raise ToolError("the new payment method should be different from the current one")
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise ToolError("insufficient gift card balance to pay for the order")
        _require_methods(self.db, order, [old_method_id] if "gift_card" in old_method_id else [])
        order = self.db.writable("orders", order_id)
        order["payment_history"].extend(
            [
                {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
                {"transaction_type": "refund", "amount": amount, "payment_method_id": old_method_id},
            ]
        )
        if method["source"] == "gift_card" or "gift_card" in old_method_id:
            methods = self.db.writable("users", order["user_id"])["payment_methods"]
            if method["source"] == "gift_card":
                _credit(methods[payment_method_id], -amount)
            if "gift_card" in old_method_id:
                _credit(methods[old_method_id], amount)
        return json.dumps(order)

    @tool
    def modify_user_address(self, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str) -> str:
        """Modify the default address of a user (``address2`` may be empty)."""
        _user(self.db, user_id)
        user = self.db.writable("users", user_id)
        user["address"] = _address(address1, address2, city, state, country, zip)
        return json.dumps(user)

    @tool
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
        """Request the return of items of a delivered order; no money moves yet.

        Args:
            order_id: e.g. "#W0000000".
            item_ids: the items to return; an id may repeat.
            payment_method_id: receives the refund: the original method or a gift card.
        """
        order = _order(self.db, order_id)
        if order["status"] != "delivered":
            raise ToolError("non-delivered order cannot be returned")
        _payment_method(self.db, order, payment_method_id)
        if "gift_card" not in payment_method_id and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ToolError("payment method should be either the original payment method or a gift card")
        if _missing_item(order, item_ids):
            raise ToolError("some item not found")
        order = self.db.writable("orders", order_id)
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return json.dumps(order)


_TOOL_FUNCTIONS: dict[str, Callable[..., str]] = {t.name: t.fn for t in tools_of(RetailTools)}


def replay_ground_truth(actions: list[dict[str, Any]]) -> RetailDB:
    """The database after a task's ground-truth ``actions``, replayed as τ-bench's reward does:
    on fresh data, terminate tools skipped, refusals ignored."""
    replay = RetailTools(RetailDB())
    for action in actions:
        if action["name"] not in TERMINATE_TOOLS:
            replay.call(action["name"], action["kwargs"])
    return replay.db


# ------------------------------------------------------------------------------ helpers


def _first_user(db: RetailDB, matches: Callable[[Record], bool]) -> str:
    for user_id, user in db.users.items():
        if matches(user):
            return user_id
    raise ToolError("user not found")


def _order(db: RetailDB, order_id: str) -> Record:
    if order_id not in db.orders:
        raise ToolError("order not found")
    return db.orders[order_id]


def _pending_order(db: RetailDB, order_id: str) -> Record:
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ToolError("non-pending order cannot be modified")
    return order


def _user(db: RetailDB, user_id: str) -> Record:
    if user_id not in db.users:
        raise ToolError("user not found")
    return db.users[user_id]


def _payment_method(db: RetailDB, order: Record, payment_method_id: str) -> Record:
    """One of the order owner's payment methods (read-only)."""
    methods = db.users[order["user_id"]]["payment_methods"]
    if payment_method_id not in methods:
        raise ToolError("payment method not found")
    return methods[payment_method_id]


def _require_methods(db: RetailDB, order: Record, method_ids: list[str]) -> None:
    """Refuse when a gift card to credit is gone from the user's methods. Upstream fails such a call
    only after crediting the gift cards before it; here the check comes before any write."""
    methods = db.users[order["user_id"]]["payment_methods"]
    missing = next((m for m in method_ids if m not in methods), None)
    if missing is not None:
        raise ToolError(repr(missing))


def _credit(method: Record, amount: float) -> None:
    """Add ``amount`` (negative to charge) to a gift card, rounded to cents as upstream does."""
    method["balance"] = round(method["balance"] + amount, 2)


def _missing_item(order: Record, item_ids: list[str]) -> tuple[Any, ...]:
    """The first requested id that occurs more often in ``item_ids`` than in the order, as a
    1-tuple (``()`` if none): with errors="upstream" that id may be ``None``."""
    held = [item["item_id"] for item in order["items"]]
    return next(((i,) for i in item_ids if item_ids.count(i) > held.count(i)), ())


def _price_difference(db: RetailDB, order: Record, item_ids: list[str], new_item_ids: list[str]) -> float:
    """New minus old price over the pairs, summed in order from an integer 0 as upstream does
    (the float noise of that sum ends up in the database). Refuses unknown or unavailable items."""
    missing = _missing_item(order, item_ids)
    if missing:
        raise ToolError(f"{missing[0]} not found")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("the number of items to be exchanged should match")
    difference: float = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        variants = db.products[item["product_id"]]["variants"]
        if new_item_id not in variants or not variants[new_item_id]["available"]:
            raise ToolError(f"new item {new_item_id} not found or available")
        difference += variants[new_item_id]["price"] - item["price"]
    return difference


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
    # Key order as upstream writes it: json.dumps of the record shows it.
    return {"address1": address1, "address2": address2, "city": city, "state": state, "country": country, "zip": zip}


# -------------------------------------------------------------------------- calculate

_CALCULATOR_CHARACTERS = frozenset("0123456789+-*/(). ")
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    # In floats, so that "9**9**9" overflows at once instead of building a huge integer.
    ast.Pow: lambda base, exponent: float(base) ** float(exponent),
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def calculate_expression(expression: str) -> str:
    """τ-bench's ``calculate``: the value rounded to 2 decimals, as ``str(float)``.

    Upstream ``eval``s the expression after checking its characters; this walks the syntax tree
    instead, with the same operators, so no input can run code or hang the step.
    """
    if not all(char in _CALCULATOR_CHARACTERS for char in expression):
        raise ToolError("invalid characters in expression")
    try:
        value = _evaluate(cast(ast.Expression, parse_python(expression.strip(" "), mode="eval")).body)
        return str(round(float(value), 2))
    except (SyntaxError, ArithmeticError, TypeError, ValueError, RecursionError) as exc:
        raise ToolError(str(exc)) from None


def _evaluate(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise TypeError(f"unsupported expression: {ast.dump(node)[:80]}")
