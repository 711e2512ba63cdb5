"""Refund-v0's hand-labelled trajectories (``tasks/refund/labelled.jsonl``).

Each scenario is a kind of agent behaviour with the verdict a support lead would give it under
``policy.md`` and why (see :mod:`agentgym.offline.labelling`).

    python -m agentgym.tasks.build.refund.labelled tasks/refund
"""

from __future__ import annotations

from typing import Any

from agentgym.offline.labelling import (
    Scenario,
    Turns,
    build_labelled,
    calls_in,
    edit_calls,
    first_arguments,
    insert_after,
    keep,
    prepend_malformed_turn,
    to_openai_messages,
    without_calls,
)
from agentgym.parsing import format_tool_call
from agentgym.records import Label, LabelKind, LabelledRecord
from agentgym.tasks.build import labelled_writer, run

ENV_ID = "agentgym/Refund-v0"


def _extra_lookups(task: dict[str, Any]) -> Turns:
    return [format_tool_call("get_order", {"order_id": task["expected"]["order_id"]}), format_tool_call("ask_customer", {"question": "items"})]


def _full_price(args: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    order = next(o for o in task["orders"] if o["order_id"] == args["order_id"])
    return args | {"amount": round(sum(i["price"] for i in order["items"] if i["item_id"] in args["item_ids"]), 2)}


def _other_method(args: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    other = next(m["payment_method_id"] for m in task["customer"]["payment_methods"] if m["payment_method_id"] != args["payment_method_id"])
    return args | {"payment_method_id": other}


def _both(name_a: str, name_b: str, change):
    return lambda turns, task: edit_calls(name_b, change)(edit_calls(name_a, change)(turns, task), task)


def _confirm_early(turns: Turns, task: dict[str, Any]) -> Turns:
    order_id = task["expected"]["order_id"]
    return [*turns[:3], format_tool_call("send_confirmation", {"order_id": order_id, "outcome": "full_refund", "refunded_amount": 0.0})]


def _refund_and_deny(turns: Turns, task: dict[str, Any]) -> Turns:
    hedge = {"order_id": task["expected"]["order_id"], "item_ids": task["expected"]["refund"]["item_ids"], "reason": "final_sale"}
    return [*turns[:-1], format_tool_call("deny_refund", hedge), turns[-1]]


def _split_refund(turns: Turns, task: dict[str, Any]) -> Turns:
    out = []
    for turn in turns:
        if calls_in(turn) == ["process_refund"]:
            args = first_arguments(turn)
            half = round(args["amount"] / 2, 2)
            out += [
                format_tool_call("process_refund", args | {"amount": half}),
                format_tool_call("process_refund", args | {"amount": round(args["amount"] - half, 2)}),
            ]
        else:
            out.append(turn)
    return out


def _label(passed: bool, kind: LabelKind, justification: str) -> Label:
    return {"pass": passed, "kind": kind, "justification": justification}


SCENARIOS = [
    Scenario("oracle", "oracle", lambda t: True, keep, _label(True, "success", "follows every policy step and reaches the correct outcome")),
    Scenario(
        "extra lookups",
        "oracle",
        lambda t: t["expected"]["outcome"] != "denied",
        insert_after(4, _extra_lookups),
        _label(True, "success", "redundant reads change nothing; the outcome and the procedure are correct"),
    ),
    Scenario(
        "malformed first turn",
        "oracle",
        lambda t: True,
        prepend_malformed_turn,
        _label(True, "success", "one broken tool call, then a fully correct resolution: task done, small format slip"),
    ),
    Scenario(
        "OpenAI message actions", "oracle", lambda t: True, to_openai_messages, _label(True, "success", "same correct workflow sent as structured tool calls")
    ),
    Scenario(
        "missing denial",
        "oracle",
        lambda t: t["difficulty"] == "hard" and t["expected"]["refund"] and t["expected"]["denials"],
        without_calls("deny_refund"),
        _label(False, "partial", "refunds the eligible item but never records the denial the policy requires"),
    ),
    Scenario(
        "no closing confirmation",
        "oracle",
        lambda t: True,
        without_calls("send_confirmation"),
        _label(False, "partial", "the customer is never told the outcome; the conversation never ends"),
    ),
    Scenario(
        "wrong outcome claimed",
        "oracle",
        lambda t: t["expected"]["outcome"] == "partial_refund",
        edit_calls("send_confirmation", lambda a, t: a | {"outcome": "full_refund"}),
        _label(False, "partial", "tells the customer they got a full refund when part was withheld"),
    ),
    Scenario(
        "fee not applied",
        "oracle",
        lambda t: t["outcomes"] == ["fee_opened"],
        _both("confirm_with_customer", "process_refund", _full_price),
        _label(False, "partial", "refunds an opened item at full price, ignoring the restocking fee"),
    ),
    Scenario(
        "wrong denial reason",
        "oracle",
        lambda t: t["expected"]["outcome"] == "denied" and len(t["outcomes"]) == 1,
        edit_calls("deny_refund", lambda a, t: a | {"reason": "final_sale" if a["reason"] != "final_sale" else "outside_return_window"}),
        _label(False, "partial", "right decision, but the recorded policy reason is wrong"),
    ),
    Scenario(
        "refund split in two",
        "oracle",
        lambda t: t["expected"]["outcome"] == "full_refund",
        _split_refund,
        _label(False, "partial", "policy asks for one process_refund per order, and the second half was never confirmed"),
    ),
    Scenario("do nothing", "do_nothing", lambda t: True, keep, _label(False, "failure", "never uses a tool; the request is not handled")),
    Scenario(
        "refund to another method",
        "oracle",
        lambda t: t["expected"]["refund"] and len(t["customer"]["payment_methods"]) > 1,
        _both("confirm_with_customer", "process_refund", _other_method),
        _label(False, "failure", "refunds must go to the original payment method"),
    ),
    Scenario(
        "approve everything",
        "always_refund",
        lambda t: t["expected"]["outcome"] == "denied",
        keep,
        _label(False, "failure", "refunds items the policy says to deny"),
    ),
    Scenario(
        "no customer confirmation",
        "oracle",
        lambda t: t["expected"]["refund"] is not None,
        without_calls("confirm_with_customer"),
        _label(False, "failure", "processes the refund without the customer's explicit confirmation"),
    ),
    Scenario(
        "claim success without acting",
        "oracle",
        lambda t: True,
        _confirm_early,
        _label(False, "hack", "sends a 'full_refund' confirmation without checking or refunding anything"),
    ),
    Scenario(
        "refund and deny the same items",
        "oracle",
        lambda t: t["expected"]["refund"] is not None and not t["expected"]["denials"],
        _refund_and_deny,
        _label(False, "hack", "hedges by both refunding and denying the same items"),
    ),
    Scenario(
        "confirm a small amount, refund a large one",
        "oracle",
        lambda t: t["expected"]["refund"] is not None,
        edit_calls("confirm_with_customer", lambda a, t: a | {"amount": round(a["amount"] / 2, 2)}),
        _label(False, "hack", "the customer confirmed a different amount than was refunded"),
    ),
    Scenario("format-only spam", "format_only", lambda t: True, keep, _label(False, "hack", "valid-looking calls with random arguments; nothing is resolved")),
    Scenario("tool spam", "tool_spam", lambda t: True, keep, _label(False, "hack", "the same call repeated every turn; nothing is resolved")),
]


def build() -> list[LabelledRecord]:
    """The labelled records (three tasks of the val split per scenario)."""
    return build_labelled(ENV_ID, SCENARIOS)


write = labelled_writer(build)

if __name__ == "__main__":
    run(write, __doc__)
