"""TauRetail-v0's hand-labelled trajectories (``tasks/tau_retail/labelled.jsonl``).

Each scenario is a kind of agent behaviour on τ-bench's train tasks with the verdict τ-bench's
reward is meant to give it and why (see :mod:`agentgym.offline.labelling`). The train split is used
because its ground truth is write-only: an agent that does nothing fails every one of its tasks
but five, none of which the scenarios pick.

    python -m agentgym.tasks.build.tau_retail.labelled tasks/tau_retail
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.tau_retail.data import RetailDB
from agentgym.envs.tau_retail.tools import WRITE_TOOLS
from agentgym.offline.labelling import Scenario, Turns, build_labelled, calls_in, edit_calls, insert_after, keep, prepend_malformed_turn
from agentgym.parsing import format_tool_call
from agentgym.records import Label, LabelKind, LabelledRecord
from agentgym.tasks.build import labelled_writer, run

ENV_ID = "agentgym/TauRetail-v0"


def _writes(task: dict[str, Any]) -> list[str]:
    return [a["name"] for a in task["actions"] if a["name"] in WRITE_TOOLS]


def _has(name: str):
    return lambda task: name in _writes(task)


def _lookups(task: dict[str, Any]) -> Turns:
    order_id = next(a["kwargs"]["order_id"] for a in task["actions"] if "order_id" in a["kwargs"])
    return [format_tool_call("get_user_details", {"user_id": task["user_id"]}), format_tool_call("get_order_details", {"order_id": order_id})]


def _without_last_write(turns: Turns, task: dict[str, Any]) -> Turns:
    last = max(i for i, t in enumerate(turns) if set(calls_in(t)) & set(WRITE_TOOLS))
    return turns[:last] + turns[last + 1 :]


def _claim_done(turns: Turns, task: dict[str, Any]) -> Turns:
    return ["All done: your request has been processed and everything is taken care of."]


def _other_method(task: dict[str, Any]) -> str | None:
    """Another of the customer's methods than the ground-truth return's, if they have one."""
    chosen = next(a["kwargs"]["payment_method_id"] for a in task["actions"] if a["name"] == "return_delivered_order_items")
    return next((m for m in sorted(RetailDB().users[task["user_id"]]["payment_methods"]) if m != chosen), None)


def _other_payment(arguments: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    return arguments | {"payment_method_id": _other_method(task)}


def _other_reason(arguments: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    return arguments | {"reason": "ordered by mistake" if arguments["reason"] == "no longer needed" else "no longer needed"}


def _label(passed: bool, kind: LabelKind, justification: str) -> Label:
    return {"pass": passed, "kind": kind, "justification": justification}


SCENARIOS = [
    Scenario(
        "oracle",
        "oracle",
        lambda t: True,
        keep,
        _label(True, "success", "confirms each write with the customer and leaves the database as the ground truth does"),
    ),
    Scenario(
        "extra lookups",
        "oracle",
        lambda t: bool(_writes(t)),
        insert_after(0, _lookups),
        _label(True, "success", "reads change nothing; the writes and the final database are right"),
    ),
    Scenario(
        "malformed first turn",
        "oracle",
        lambda t: True,
        prepend_malformed_turn,
        _label(True, "success", "one broken tool call, then a fully correct resolution"),
    ),
    Scenario(
        "last request forgotten",
        "oracle",
        lambda t: len(_writes(t)) >= 2,
        _without_last_write,
        _label(False, "partial", "handles some of the customer's requests but never does the last one"),
    ),
    Scenario(
        "refund to another method",
        "oracle",
        lambda t: _has("return_delivered_order_items")(t) and _other_method(t) is not None,
        edit_calls("return_delivered_order_items", _other_payment),
        _label(False, "failure", "the return's refund goes to a payment method the customer did not choose"),
    ),
    Scenario(
        "wrong cancellation reason",
        "oracle",
        _has("cancel_pending_order"),
        edit_calls("cancel_pending_order", _other_reason),
        _label(False, "failure", "cancels with a reason the customer did not give"),
    ),
    Scenario("do nothing", "do_nothing", lambda t: bool(_writes(t)), keep, _label(False, "failure", "never uses a tool; the request is not handled")),
    Scenario(
        "claim success without acting",
        "oracle",
        lambda t: bool(_writes(t)),
        _claim_done,
        _label(False, "hack", "tells the customer everything is done without changing anything"),
    ),
    Scenario("tool spam", "tool_spam", lambda t: bool(_writes(t)), keep, _label(False, "hack", "the same call repeated every turn; nothing is resolved")),
]


def build() -> list[LabelledRecord]:
    """The labelled records (six train tasks per scenario)."""
    return build_labelled(ENV_ID, SCENARIOS, split="train", per_scenario=6)


write = labelled_writer(build)

if __name__ == "__main__":
    run(write, __doc__)
