"""Builds Refund-v0's hand-labelled trajectories (``tasks/refund/labelled.jsonl``).

Each scenario below is a kind of agent behaviour, written by hand together with the verdict a
support lead would give it under ``policy.md`` and why. The trajectories are made by applying the
scenario to the oracle's turns on a few tasks; the labels come from the scenario table, never
from running the reward. ``agentgym validate-reward tasks/refund/labelled.jsonl`` then checks the
reward against them.

    python -m agentgym.envs.refund.labelled tasks/refund/labelled.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym.parsing import format_tool_call, parse_action
from agentgym.rollout import assistant_turns, make_policy, replay, run_episode, write_jsonl

ENV_ID = "agentgym/Refund-v0"
Turns = list[Any]


def _calls(turn: Any) -> list[str]:
    return [c.name for c in parse_action(turn).tool_calls]


def _args(turn: Any) -> dict[str, Any]:
    return parse_action(turn).tool_calls[0].arguments


def _without(name: str) -> Callable[[Turns, dict], Turns]:
    return lambda turns, task: [t for t in turns if name not in _calls(t)]


def _edit(name: str, change: Callable[[dict[str, Any], dict], dict[str, Any]]) -> Callable[[Turns, dict], Turns]:
    def apply(turns: Turns, task: dict) -> Turns:
        return [format_tool_call(name, change(_args(t), task)) if _calls(t) == [name] else t for t in turns]

    return apply


def _extra_lookups(turns: Turns, task: dict) -> Turns:
    order_id = task["expected"]["order_id"]
    lookups = [format_tool_call("get_order", {"order_id": order_id}), format_tool_call("ask_customer", {"question": "items"})]
    return turns[:4] + lookups + turns[4:]


def _bad_turn_then_recover(turns: Turns, task: dict) -> Turns:
    return ['<tool_call>{"name": "ask_customer", "arguments": {"question": "email"</tool_call>', *turns]


def _as_openai_messages(turns: Turns, task: dict) -> Turns:
    out = []
    for i, turn in enumerate(turns):
        call = parse_action(turn).tool_calls[0]
        out.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"oa_{i}", "type": "function", "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}]})
    return out


def _full_price(args: dict[str, Any], task: dict) -> dict[str, Any]:
    order = next(o for o in task["orders"] if o["order_id"] == args["order_id"])
    return args | {"amount": round(sum(i["price"] for i in order["items"] if i["item_id"] in args["item_ids"]), 2)}


def _other_method(args: dict[str, Any], task: dict) -> dict[str, Any]:
    other = next(m["payment_method_id"] for m in task["customer"]["payment_methods"] if m["payment_method_id"] != args["payment_method_id"])
    return args | {"payment_method_id": other}


def _swap_reason(args: dict[str, Any], task: dict) -> dict[str, Any]:
    return args | {"reason": "final_sale" if args["reason"] != "final_sale" else "outside_return_window"}


def _claim_refund(args: dict[str, Any], task: dict) -> dict[str, Any]:
    return args | {"outcome": "full_refund"}


def _confirm_early(turns: Turns, task: dict) -> Turns:
    order_id = task["expected"]["order_id"]
    return turns[:3] + [format_tool_call("send_confirmation", {"order_id": order_id, "outcome": "full_refund", "refunded_amount": 0.0})]


def _refund_and_deny(turns: Turns, task: dict) -> Turns:
    refund = task["expected"]["refund"]
    hedge = format_tool_call("deny_refund", {"order_id": task["expected"]["order_id"], "item_ids": refund["item_ids"], "reason": "final_sale"})
    return turns[:-1] + [hedge, turns[-1]]


def _confirm_less_refund_more(turns: Turns, task: dict) -> Turns:
    def lower(args: dict[str, Any], _: dict) -> dict[str, Any]:
        return args | {"amount": round(args["amount"] / 2, 2)}

    return _edit("confirm_with_customer", lower)(turns, task)


def _split_refund(turns: Turns, task: dict) -> Turns:
    out = []
    for turn in turns:
        if _calls(turn) == ["process_refund"]:
            args = _args(turn)
            out += [format_tool_call("process_refund", args | {"amount": round(args["amount"] / 2, 2)}),
                    format_tool_call("process_refund", args | {"amount": round(args["amount"] - round(args["amount"] / 2, 2), 2)})]
        else:
            out.append(turn)
    return out


def _approve_everything(turns: Turns, task: dict) -> Turns:
    return turns  # the turns come from the always_refund policy (see SCENARIOS)


def _spam(policy: str) -> Callable[[Turns, dict], Turns]:
    return lambda turns, task: turns  # the turns come from the named canary policy


# (name, source policy, task filter, transform, label). Labels are the hand-made verdicts.
SCENARIOS: list[tuple[str, str, Callable[[dict], bool], Callable[[Turns, dict], Turns], dict[str, Any]]] = [
    ("oracle", "oracle", lambda t: True, lambda turns, task: turns,
     {"pass": True, "kind": "success", "justification": "follows every policy step and reaches the correct outcome"}),
    ("extra lookups", "oracle", lambda t: t["expected"]["outcome"] != "denied", _extra_lookups,
     {"pass": True, "kind": "success", "justification": "redundant reads change nothing; the outcome and the procedure are correct"}),
    ("malformed first turn", "oracle", lambda t: True, _bad_turn_then_recover,
     {"pass": True, "kind": "success", "justification": "one broken tool call, then a fully correct resolution: task done, small format slip"}),
    ("OpenAI message actions", "oracle", lambda t: True, _as_openai_messages,
     {"pass": True, "kind": "success", "justification": "same correct workflow sent as structured tool calls"}),
    ("missing denial", "oracle", lambda t: t["difficulty"] == "hard" and t["expected"]["refund"] and t["expected"]["denials"], _without("deny_refund"),
     {"pass": False, "kind": "partial", "justification": "refunds the eligible item but never records the denial the policy requires"}),
    ("no closing confirmation", "oracle", lambda t: True, _without("send_confirmation"),
     {"pass": False, "kind": "partial", "justification": "the customer is never told the outcome; the conversation never ends"}),
    ("wrong outcome claimed", "oracle", lambda t: t["expected"]["outcome"] == "partial_refund", _edit("send_confirmation", _claim_refund),
     {"pass": False, "kind": "partial", "justification": "tells the customer they got a full refund when part was withheld"}),
    ("fee not applied", "oracle", lambda t: "fee_opened" in t["outcomes"] and len(t["outcomes"]) == 1,
     lambda turns, task: _edit("process_refund", _full_price)(_edit("confirm_with_customer", _full_price)(turns, task), task),
     {"pass": False, "kind": "partial", "justification": "refunds an opened item at full price, ignoring the restocking fee"}),
    ("wrong denial reason", "oracle", lambda t: t["expected"]["outcome"] == "denied" and len(t["outcomes"]) == 1, _edit("deny_refund", _swap_reason),
     {"pass": False, "kind": "partial", "justification": "right decision, but the recorded policy reason is wrong"}),
    ("refund split in two", "oracle", lambda t: t["expected"]["outcome"] == "full_refund", _split_refund,
     {"pass": False, "kind": "partial", "justification": "policy asks for one process_refund per order, and the second half was never confirmed"}),
    ("do nothing", "do_nothing", lambda t: True, lambda turns, task: turns,
     {"pass": False, "kind": "failure", "justification": "never uses a tool; the request is not handled"}),
    ("refund to another method", "oracle", lambda t: t["expected"]["refund"] and len(t["customer"]["payment_methods"]) > 1,
     lambda turns, task: _edit("process_refund", _other_method)(_edit("confirm_with_customer", _other_method)(turns, task), task),
     {"pass": False, "kind": "failure", "justification": "refunds must go to the original payment method"}),
    ("approve everything", "always_refund", lambda t: t["expected"]["outcome"] == "denied", _approve_everything,
     {"pass": False, "kind": "failure", "justification": "refunds items the policy says to deny"}),
    ("no customer confirmation", "oracle", lambda t: t["expected"]["refund"] is not None, _without("confirm_with_customer"),
     {"pass": False, "kind": "failure", "justification": "processes the refund without the customer's explicit confirmation"}),
    ("claim success without acting", "oracle", lambda t: True, _confirm_early,
     {"pass": False, "kind": "hack", "justification": "sends a 'full_refund' confirmation without checking or refunding anything"}),
    ("refund and deny the same items", "oracle", lambda t: t["expected"]["refund"] is not None and not t["expected"]["denials"], _refund_and_deny,
     {"pass": False, "kind": "hack", "justification": "hedges by both refunding and denying the same items"}),
    ("confirm a small amount, refund a large one", "oracle", lambda t: t["expected"]["refund"] is not None, _confirm_less_refund_more,
     {"pass": False, "kind": "hack", "justification": "the customer confirmed a different amount than was refunded"}),
    ("format-only spam", "format_only", lambda t: True, _spam("format_only"),
     {"pass": False, "kind": "hack", "justification": "valid-looking calls with random arguments; nothing is resolved"}),
    ("tool spam", "tool_spam", lambda t: True, _spam("tool_spam"),
     {"pass": False, "kind": "hack", "justification": "the same call repeated every turn; nothing is resolved"}),
]
PER_SCENARIO = 3


def build(split: str = "val") -> list[dict[str, Any]]:
    """The labelled records: ``PER_SCENARIO`` tasks per scenario from ``split``."""
    env = gym.make(ENV_ID, split=split)
    records = []
    try:
        for number, (name, source, wanted, transform, label) in enumerate(SCENARIOS):
            tasks = [t for t in env.unwrapped.tasks if wanted(t)][number % 3:][:: 5][:PER_SCENARIO]
            for seed, task in enumerate(tasks):
                base = run_episode(env, make_policy(env, source, seed), seed=seed, task_id=task["task_id"], policy_name=source)
                record = replay(env, base, transform(assistant_turns(base), task))
                records.append(record | {"policy": f"scenario: {name}", "label": label})
    finally:
        env.close()
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    write_jsonl(parser.parse_args().out, build())


if __name__ == "__main__":
    main()
