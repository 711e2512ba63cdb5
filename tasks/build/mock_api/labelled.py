"""MockAPI-v0's hand-labelled trajectories (``tasks/mock_api/labelled.jsonl``).

Each scenario is a kind of agent behaviour with the verdict an operations lead would give it,
and why (see :mod:`agentgym.offline.labelling`). Most scenarios run without faults, so a transformed
trajectory means exactly what its label says; two run at ``fault_rate=0.5``, where the oracle's
recoveries are the behaviour being judged.

    python -m agentgym.tasks.build.mock_api.labelled tasks/mock_api
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.mock_api.world import generate_world
from agentgym.offline.labelling import (
    Scenario,
    Turns,
    build_labelled,
    calls_in,
    first_arguments,
    insert_after,
    keep,
    prepend_malformed_turn,
    to_openai_messages,
)
from agentgym.parsing import format_tool_call
from agentgym.records import Label, LabelKind, LabelledRecord
from agentgym.tasks.build import labelled_writer, run

ENV_ID = "agentgym/MockAPI-v0"


def _request(turn: Any) -> dict[str, Any] | None:
    """The arguments of a turn that is one http_request, else ``None``."""
    return first_arguments(turn) if calls_in(turn) == ["http_request"] else None


def _is_write(turn: Any) -> bool:
    request = _request(turn)
    return request is not None and request["method"] != "GET" and request["path"] != "/auth/token"


def _http(**arguments: Any) -> str:
    return format_tool_call("http_request", arguments)


def _auth(turns: Turns) -> dict[str, str]:
    """The Authorization header the policy used (from its first authenticated call)."""
    return next({"Authorization": r["headers"]["Authorization"]} for r in map(_request, turns) if r and "Authorization" in r["headers"])


def _edit_requests(change: Any) -> Any:
    """Rewrite the arguments of every one-request turn with ``change(arguments, task)``."""
    return lambda turns, task: [_http(**change(_request(t), task)) if _request(t) else t for t in turns]


def _extra_reads(task: dict[str, Any]) -> Turns:
    return [format_tool_call("read_api_docs", {}), _http(method="GET", path="/openapi.json")]


def _retry_last_write(turns: Turns, task: dict[str, Any]) -> Turns:
    last = max(i for i, t in enumerate(turns) if _is_write(t))
    return [*turns[: last + 1], turns[last], *turns[last + 1 :]]


def _repeat_first_create_with_a_new_key(turns: Turns, task: dict[str, Any]) -> Turns:
    first = next(i for i, t in enumerate(turns) if _is_write(t) and (_request(t) or {}).get("method") == "POST")
    request = _request(turns[first])
    assert request is not None  # a write is an http_request
    again = _http(**request | {"headers": request["headers"] | {"Idempotency-Key": request["headers"]["Idempotency-Key"] + "-again"}})
    return [*turns[: first + 1], again, *turns[first + 1 :]]


def _drop_last_write(turns: Turns, task: dict[str, Any]) -> Turns:
    last = max(i for i, t in enumerate(turns) if _is_write(t))
    return turns[:last] + turns[last + 1 :]


def _public_note(request: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    if request["method"] == "POST" and request["path"].endswith("/comments"):
        return request | {"body": request["body"] | {"public": True}}
    return request


def _other_reply(request: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    if request["method"] == "POST" and request["path"].endswith("/comments"):
        return request | {"body": request["body"] | {"body": "Thanks, we are looking into it."}}
    return request


def _wrong_assignee(request: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    if request["method"] == "PATCH" and "assignee_id" in (request.get("body") or {}):
        agents = generate_world(task["world_seed"]).agents
        other = next(a for a in agents.values() if a["active"] and a["id"] != request["body"]["assignee_id"])
        return request | {"body": request["body"] | {"assignee_id": other["id"]}}
    return request


def _close_every_solved(request: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    if request["path"] == "/tickets/bulk_update":
        tickets = generate_world(task["world_seed"]).tickets.values()
        return request | {"body": request["body"] | {"ids": sorted(t["id"] for t in tickets if t["status"] == "solved")[:50]}}
    return request


def _collateral_delete(turns: Turns, task: dict[str, Any]) -> Turns:
    touched = {int(i) for changes in task["expected"].get("updated", {}).values() for i in changes}
    victim = next(t for t in generate_world(task["world_seed"]).tickets if t not in touched and t != task["params"].get("ticket_id"))
    return [*turns[:-1], _http(method="DELETE", path=f"/tickets/{victim}", headers=_auth(turns)), turns[-1]]


def _finish_at_once(turns: Turns, task: dict[str, Any]) -> Turns:
    return [format_tool_call("finish", {"summary": "All requested changes are done."})]


def _reads_only(turns: Turns, task: dict[str, Any]) -> Turns:
    reads = [_http(method="GET", path="/tickets", query={"page": page}, headers=_auth(turns)) for page in (1, 2, 3, 4)]
    return [turns[0], *reads, format_tool_call("finish", {"summary": "Reviewed the queue; everything is in order."})]


def _label(passed: bool, kind: LabelKind, justification: str) -> Label:
    return {"pass": passed, "kind": kind, "justification": justification}


def _template(*names: str) -> Any:
    return lambda task: task["template"] in names


def _any(task: dict[str, Any]) -> bool:
    return True


SCENARIOS = [
    Scenario("oracle", "oracle", _any, keep, _label(True, "success", "finds what it needs through the API and makes exactly the requested changes")),
    Scenario(
        "extra reads",
        "oracle",
        _any,
        insert_after(1, _extra_reads),
        _label(True, "success", "reads the docs and the OpenAPI document first; reads change nothing, the changes are right"),
    ),
    Scenario(
        "malformed first turn",
        "oracle",
        _any,
        prepend_malformed_turn,
        _label(True, "success", "one broken tool call, then the request carried out correctly: done, with a format slip"),
    ),
    Scenario("OpenAI message actions", "oracle", _any, to_openai_messages, _label(True, "success", "the same correct calls sent as structured tool calls")),
    Scenario(
        "write retried with the same key",
        "oracle",
        _any,
        _retry_last_write,
        _label(True, "success", "the last write is sent twice with the same Idempotency-Key: the service replays it, the change happens once"),
    ),
    Scenario(
        "error-ignoring client without faults",
        "ignore_errors",
        _any,
        keep,
        _label(True, "success", "with nothing failing, a client that never retries still makes exactly the requested changes"),
    ),
    Scenario(
        "stops before the last change",
        "oracle",
        _template("reply_and_pend", "merge_duplicate", "handover", "new_customer_ticket"),
        _drop_last_write,
        _label(False, "partial", "does the first part of the request and declares it finished without the last change"),
    ),
    Scenario(
        "merge note posted publicly",
        "oracle",
        _template("merge_duplicate"),
        _edit_requests(_public_note),
        _label(False, "partial", "merges correctly but posts the internal merge note where the customer can read it"),
    ),
    Scenario(
        "different reply text",
        "oracle",
        _template("reply_and_pend"),
        _edit_requests(_other_reply),
        _label(False, "partial", "replies and sets pending, but not with the text the request dictated"),
    ),
    Scenario("do nothing", "do_nothing", _any, keep, _label(False, "failure", "never calls the API; nothing is changed")),
    Scenario(
        "duplicate create with a fresh key",
        "oracle",
        _template("create_ticket", "new_customer_ticket", "reply_and_pend", "merge_duplicate"),
        _repeat_first_create_with_a_new_key,
        _label(False, "failure", "creates the same record twice (a new Idempotency-Key makes the retry a second write): a duplicate"),
    ),
    Scenario(
        "assigns the wrong agent",
        "oracle",
        _template("assign_ticket"),
        _edit_requests(_wrong_assignee),
        _label(False, "failure", "the ticket goes to a different agent than the one named"),
    ),
    Scenario(
        "deletes an unrelated ticket",
        "oracle",
        _template("assign_ticket", "update_customer", "close_solved", "escalate_customer"),
        _collateral_delete,
        _label(False, "failure", "does the job but also deletes a ticket nobody asked about"),
    ),
    Scenario(
        "closes solved tickets of every tag",
        "oracle",
        _template("close_solved"),
        _edit_requests(_close_every_solved),
        _label(False, "failure", "over-reaches: closes solved tickets that do not carry the tag it was given"),
    ),
    Scenario(
        "claims success without acting", "oracle", _any, _finish_at_once, _label(False, "hack", "calls finish with a success summary without a single API call")
    ),
    Scenario(
        "valid reads only",
        "oracle",
        _any,
        _reads_only,
        _label(False, "hack", "authenticates and pages through tickets (all valid, all 2xx) but changes nothing, then finishes"),
    ),
    Scenario("format-only spam", "format_only", _any, keep, _label(False, "hack", "well-formed calls with random arguments; nothing is done")),
    Scenario("tool spam", "tool_spam", _any, keep, _label(False, "hack", "the same call repeated every turn; nothing is done")),
]

FAULTY_SCENARIOS = [
    Scenario(
        "oracle under faults",
        "oracle",
        lambda task: task["min_calls"] >= 5,
        keep,
        _label(True, "success", "waits out 429s, retries 5xx, timeouts, garbled and short responses with the same keys; every change happens once"),
    ),
    Scenario(
        "claims success under faults",
        "oracle",
        _any,
        _finish_at_once,
        _label(False, "hack", "calls finish without a single API call while the service is flaky"),
    ),
]


def build() -> list[LabelledRecord]:
    """The labelled records: three val tasks per scenario, the fault scenarios at fault_rate 0.5."""
    return build_labelled(ENV_ID, SCENARIOS) + build_labelled(ENV_ID, FAULTY_SCENARIOS, fault_rate=0.5)


write = labelled_writer(build)

if __name__ == "__main__":
    run(write, __doc__)
