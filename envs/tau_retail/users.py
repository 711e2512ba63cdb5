"""The customers of TauRetail-v0: a scripted one for training and a "ticket" with no dialogue.

τ-bench's customer is an LLM role-playing the task's instruction, so the same agent can get
different conversations; ``user="llm"`` is that customer (:mod:`agentgym.envs.tau_retail.llm_user`).
The two customers here are deterministic functions of the task:

* :class:`ScriptedUser` (``user="scripted"``) asks for the task's ground-truth writes, answers
  identity questions from the user's record, says yes to a confirmation that names every detail of
  one of those writes and no to any other, and ends the conversation with ``###STOP###`` once the
  database matches the ground truth and every required output has been said.
* :class:`TicketUser` (``user="ticket"``) sends the task's instruction as the only message; the
  agent's first reply without a tool call closes the ticket.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentgym.envs.tau_retail.data import RetailDB
from agentgym.envs.tau_retail.records import TauRetailTask
from agentgym.envs.tau_retail.tools import WRITE_TOOLS

__all__ = [
    "STOP",
    "USER_MODES",
    "Progress",
    "ScriptedUser",
    "TicketUser",
    "User",
    "UserMode",
    "asks_confirmation",
    "describe",
    "make_user",
    "says_yes",
    "target_record",
]

STOP = "###STOP###"
UserMode = Literal["scripted", "ticket", "llm"]
USER_MODES: tuple[str, ...] = ("scripted", "ticket", "llm")

Action = dict[str, Any]

# A confirmation request: the policy asks for an explicit "yes" before any write.
_ASKS_CONFIRMATION = re.compile(r"\b(confirm|proceed|yes)\b")
_ASKS_IDENTITY = re.compile(r"\b(email|e-mail|name|zip|zip code|postal code|verify|authenticate|identify|identity|user id)\b")
_YES = re.compile(r"\byes\b")
_STARTS_WITH_NO = re.compile(r"\W*no\b")


def asks_confirmation(text: str) -> bool:
    """Whether an agent message asks the customer to confirm (it says *confirm*, *proceed* or *yes*)."""
    return _ASKS_CONFIRMATION.search(text.lower()) is not None


def says_yes(text: str) -> bool:
    """Whether a customer's reply is an explicit yes: the word *yes*, in a reply that does not open with *no*."""
    said = text.lower()
    return _YES.search(said) is not None and _STARTS_WITH_NO.match(said) is None


@dataclass(frozen=True)
class Progress:
    """What the customer can tell about the episode when the agent writes to them.

    Attributes:
        done: the database matches the ground truth and every required output was said.
        unfinished: the ground-truth writes whose record does not yet look as the ground truth leaves it.
        missing_outputs: whether some required output has not been said yet.
    """

    done: bool
    unfinished: tuple[Action, ...]
    missing_outputs: bool


class User(Protocol):
    """A customer: the opening message, then a reply to each agent message (``None``: no reply, the episode ends)."""

    def opening(self) -> str: ...

    def reply(self, text: str, progress: Progress) -> str | None: ...


def make_user(mode: str, task: TauRetailTask) -> User:
    """The deterministic customer of ``task`` for ``mode`` (``scripted`` or ``ticket``; the LLM
    customer needs a model, see :class:`agentgym.envs.tau_retail.llm_user.LLMCustomer`)."""
    if mode == "ticket":
        return TicketUser(task)
    if mode == "scripted":
        return ScriptedUser(task)
    raise ValueError(f"no deterministic customer for user={mode!r}")


class TicketUser:
    """The whole request arrives as the first message; there is no one to talk to afterwards."""

    def __init__(self, task: TauRetailTask) -> None:
        self.instruction = task["instruction"]

    def opening(self) -> str:
        return self.instruction

    def reply(self, text: str, progress: Progress) -> str | None:
        return None


class ScriptedUser:
    """A customer who wants exactly the task's ground-truth writes (see the module docstring)."""

    def __init__(self, task: TauRetailTask) -> None:
        self.task = task
        # A database of its own, never written: the customer remembers the orders as they were.
        self.db = RetailDB()
        self.profile = self.db.users[task["user_id"]]
        self.writes = [a for a in task["actions"] if a["name"] in WRITE_TOOLS]
        self.wants_transfer = any(a["name"] == "transfer_to_human_agents" for a in task["actions"])

    def opening(self) -> str:
        wishes = [_summary(self.db, action) for action in self.writes]
        if self.wants_transfer:
            wishes.append("talk to a human agent")
        text = "Hi! I'd like to " + _join(wishes) + "." if wishes else "Hi! I need some help."
        # Questions and refusals are only in the instruction: no write says what to answer.
        if self.task["outputs"] or not self.writes:
            text += f" Here is my situation: {self.task['instruction']}"
        return text

    def reply(self, text: str, progress: Progress) -> str:
        said = text.lower()
        if progress.done:
            return f"That's everything I needed, thank you! {STOP}"
        wanted = any(all(key.lower() in said for key in confirmation_keys(action)) for action in self.writes)
        asks_identity = _ASKS_IDENTITY.search(said) is not None
        if asks_confirmation(said) and (wanted or not asks_identity):
            return "Yes, please go ahead." if wanted else "No, that is not what I asked for. " + self._restate(progress)
        if asks_identity:
            return self._identity(said)
        return self._restate(progress)

    def _identity(self, said: str) -> str:
        if "email" in said:
            return f"My email is {self.profile['email']}."
        name = self.profile["name"]
        return f"My name is {name['first_name']} {name['last_name']} and my zip code is {self.profile['address']['zip']}."

    def _restate(self, progress: Progress) -> str:
        if progress.unfinished:
            return "I'd like to " + _join([describe(self.db, action) for action in progress.unfinished]) + "."
        if progress.missing_outputs:
            return f"I still need an answer. Here is my situation again: {self.task['instruction']}"
        if self.wants_transfer:
            return "Please transfer me to a human agent."
        return "That is not what I asked for."


# ------------------------------------------------------------------------ descriptions


def target_record(action: Action) -> tuple[str, str]:
    """The record a write changes: ``("users", id)`` for the default address, else the order."""
    if action["name"] == "modify_user_address":
        return ("users", action["kwargs"]["user_id"])
    return ("orders", action["kwargs"]["order_id"])


def confirmation_keys(action: Action) -> list[str]:
    """What a confirmation must mention for the customer to recognise the write: every id and
    choice in its arguments (for an address, its first line and zip code). Not the user id of a
    default-address change: the customer's own account is implied, and :func:`describe` (so the
    oracle's confirmation) does not name it."""
    kwargs = action["kwargs"]
    keys = [kwargs[k] for k in ("order_id", "payment_method_id", "reason", "address1", "zip") if k in kwargs]
    return keys + list(kwargs.get("item_ids", [])) + list(kwargs.get("new_item_ids", []))


def _summary(db: RetailDB, action: Action) -> str:
    """The wish in a customer's words, without the ids the agent must look up or ask for."""
    kwargs = action["kwargs"]
    order_id = kwargs.get("order_id")
    items = _join([f"the {_item_name(db, order_id, i)}" for i in kwargs.get("item_ids", [])])
    return {
        "cancel_pending_order": f"cancel my order {order_id}",
        "exchange_delivered_order_items": f"exchange {items} from my order {order_id}",
        "modify_pending_order_address": f"change the shipping address of my order {order_id}",
        "modify_pending_order_items": f"change {items} in my pending order {order_id}",
        "modify_pending_order_payment": f"change the payment method of my order {order_id}",
        "modify_user_address": "update my default address",
        "return_delivered_order_items": f"return {items} from my order {order_id}",
    }[action["name"]]


def describe(db: RetailDB, action: Action) -> str:
    """The write with every detail (the confirmation keys among them), as the customer wants it."""
    kwargs = action["kwargs"]
    order_id = kwargs.get("order_id")
    name = action["name"]
    if name == "cancel_pending_order":
        return f"cancel order {order_id} (reason: {kwargs['reason']})"
    if name == "modify_pending_order_payment":
        return f"pay for order {order_id} with {kwargs['payment_method_id']} instead"
    if name in ("modify_pending_order_address", "modify_user_address"):
        where = f"the shipping address of order {order_id}" if order_id else "my default address"
        return f"change {where} to {_address(kwargs)}"
    items = [f"the {_item_name(db, order_id, i)} (item {i})" for i in kwargs["item_ids"]]
    if name == "return_delivered_order_items":
        return f"return {_join(items)} from order {order_id}, with the refund to {kwargs['payment_method_id']}"
    swaps = _join([f"{old} for item {new} ({_options(db, new)})" for old, new in zip(items, kwargs["new_item_ids"], strict=False)])
    verb = "exchange" if name == "exchange_delivered_order_items" else "change"
    return f"{verb} {swaps} in order {order_id}, settling the price difference with {kwargs['payment_method_id']}"


def _item_name(db: RetailDB, order_id: str, item_id: str) -> str:
    order = db.orders.get(order_id)
    item = next((i for i in order["items"] if i["item_id"] == item_id), None) if order else None
    return item["name"] if item else f"item {item_id}"


def _options(db: RetailDB, new_item_id: str) -> str:
    """The new variant's options, found among the products (the ground truth may name a bad id)."""
    for product in db.products.values():
        variant = product["variants"].get(new_item_id)
        if variant:
            return ", ".join(f"{k}: {v}" for k, v in variant["options"].items())
    return "an item I saw in the store"


def _address(kwargs: dict[str, str]) -> str:
    parts = [kwargs[k] for k in ("address1", "address2", "city", "state", "country", "zip")]
    return ", ".join(p for p in parts if p)


def _join(parts: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(parts) < 2:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]
