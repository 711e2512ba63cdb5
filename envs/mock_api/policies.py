"""Scripted policies for MockAPI-v0: the fault-tolerant oracle and a baseline that ignores errors.

Both run the same per-template plan: ordinary client code that asks for requests and gets the
decoded JSON back, finding ids through the API from what the instruction says (emails, names,
phrases), never from the task's expected changes. They differ only in how a request is carried
out:

- the oracle retries until it gets a clean answer: it waits ``Retry-After`` on 429/503, retries
  500s, timeouts, garbled JSON and list pages that carry a ``Warning``, re-authenticates on 401,
  and sends every write with an ``Idempotency-Key`` that it reuses on retries, so a write whose
  response was lost is never applied twice;
- the error-ignoring baseline sends each request once and carries on with whatever came back
  (a failed lookup ends the plan; a short page is taken as complete).

With ``fault_rate=0`` both solve every task; the gap under faults measures what recovery buys.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from agentgym.parsing import format_tool_call
from agentgym.policies import ScriptedPolicy

__all__ = ["PLANS", "Call", "IgnoreErrorsPolicy", "OraclePolicy"]


@dataclass(frozen=True)
class Call:
    """One request a plan wants made."""

    method: str
    path: str
    query: dict[str, Any] = field(default_factory=dict)
    body: Any = None


# A plan yields Calls and receives each one's decoded JSON ({} for an empty body), or None when
# the call failed (only the error-ignoring policy ever sends None).
Plan = Generator[Call, Any, None]
Turns = Generator[str, list[dict[str, Any]], None]


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: dict[str, str]
    body: str
    timed_out: bool = False

    def json(self) -> Any:
        """The decoded body ({} when empty), or ``None`` when it is not valid JSON."""
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except json.JSONDecodeError:
            return None


def _read_reply(observation: list[dict[str, Any]]) -> _Reply:
    """The http_request result: the last tool message of the turn."""
    content = observation[-1]["content"]
    if content.startswith("Error: timeout"):
        return _Reply(0, {}, "", timed_out=True)
    if content.startswith("Error:"):
        raise RuntimeError(f"scripted policy hit a tool error: {content}")
    head, _, body = content.partition("\n\n")
    status_line, *header_lines = head.split("\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return _Reply(int(status_line.split(" ")[1]), headers, body)


# ------------------------------------------------------------------------------- plans


def _find(path: str, query: dict[str, Any], match: Callable[[dict[str, Any]], bool]) -> Generator[Call, Any, dict[str, Any] | None]:
    """The first item of every page of ``path`` that ``match`` accepts, or ``None``."""
    for item in (yield from _collect(path, query)):
        if match(item):
            return item
    return None


def _collect(path: str, query: dict[str, Any]) -> Generator[Call, Any, list[dict[str, Any]]]:
    """Every item of a paginated list (as many as could be read)."""
    items: list[dict[str, Any]] = []
    page = 1
    while True:
        data = yield Call("GET", path, {**query, "page": page} if page > 1 else dict(query))
        if not data:
            return items
        items += data["data"]
        if data["next_page"] is None:
            return items
        page = data["next_page"]


def _customer(email: str) -> Generator[Call, Any, dict[str, Any] | None]:
    return (yield from _find("/customers", {"email": email}, lambda c: c["email"] == email))


def _agent(name: str) -> Generator[Call, Any, dict[str, Any] | None]:
    return (yield from _find("/agents", {"q": name}, lambda a: a["name"] == name))


def _bulk(ids: list[int], changes: dict[str, Any]) -> Plan:
    for start in range(0, len(ids), 50):
        yield Call("POST", "/tickets/bulk_update", body={"ids": ids[start : start + 50], "changes": changes})


def _plan_create_ticket(p: dict[str, Any]) -> Plan:
    customer = yield from _customer(p["customer_email"])
    if customer is not None:
        body = {"subject": p["subject"], "requester_id": customer["id"], "priority": p["priority"], "tags": p["tags"]}
        yield Call("POST", "/tickets", body=body)


def _plan_assign_ticket(p: dict[str, Any]) -> Plan:
    agent = yield from _agent(p["agent_name"])
    if agent is not None:
        yield Call("PATCH", f"/tickets/{p['ticket_id']}", body={"assignee_id": agent["id"], "status": "open"})


def _plan_update_customer(p: dict[str, Any]) -> Plan:
    customer = yield from _customer(p["old_email"])
    if customer is not None:
        yield Call("PATCH", f"/customers/{customer['id']}", body={"email": p["new_email"], "tier": p["tier"]})


def _plan_reply_and_pend(p: dict[str, Any]) -> Plan:
    customer = yield from _customer(p["customer_email"])
    if customer is None:
        return
    ticket = yield from _find("/tickets", {"requester_id": customer["id"], "q": p["subject"]}, lambda t: t["subject"] == p["subject"])
    if ticket is not None:
        yield Call("POST", f"/tickets/{ticket['id']}/comments", body={"body": p["reply"], "public": True})
        yield Call("PATCH", f"/tickets/{ticket['id']}", body={"status": "pending"})


def _plan_escalate_customer(p: dict[str, Any]) -> Plan:
    customer = yield from _customer(p["customer_email"])
    if customer is None:
        return
    live = yield from _collect("/tickets", {"requester_id": customer["id"], "status": "new,open,pending"})
    ids = [t["id"] for t in live if t["priority"] != "urgent"]
    if ids:
        yield from _bulk(ids, {"priority": "urgent"})


def _plan_delete_spam(p: dict[str, Any]) -> Plan:
    for ticket in (yield from _collect("/tickets", {"q": p["phrase"]})):
        yield Call("DELETE", f"/tickets/{ticket['id']}")


def _plan_close_solved(p: dict[str, Any]) -> Plan:
    solved = yield from _collect("/tickets", {"status": "solved", "tag": p["tag"]})
    if solved:
        yield from _bulk([t["id"] for t in solved], {"status": "closed"})


def _plan_handover(p: dict[str, Any]) -> Plan:
    leaving = yield from _agent(p["leaving_name"])
    successor = yield from _agent(p["successor_name"])
    if leaving is None or successor is None:
        return
    queue = yield from _collect("/tickets", {"assignee_id": leaving["id"], "status": "new,open,pending"})
    if queue:
        yield from _bulk([t["id"] for t in queue], {"assignee_id": successor["id"]})
    yield Call("PATCH", f"/agents/{leaving['id']}", body={"active": False})


def _plan_new_customer_ticket(p: dict[str, Any]) -> Plan:
    agent = yield from _agent(p["agent_name"])
    if agent is None:
        return
    customer = yield Call("POST", "/customers", body={"name": p["name"], "email": p["email"], "tier": p["tier"]})
    if customer:
        body = {"subject": p["subject"], "requester_id": customer["id"], "priority": p["priority"], "assignee_id": agent["id"]}
        yield Call("POST", "/tickets", body=body)


def _plan_merge_duplicate(p: dict[str, Any]) -> Plan:
    customer = yield from _customer(p["customer_email"])
    if customer is None:
        return
    found = yield from _collect("/tickets", {"requester_id": customer["id"], "q": p["subject"]})
    same = sorted((t for t in found if t["subject"] == p["subject"]), key=lambda t: t["id"])
    if len(same) != 2:
        return
    older, newer = same
    yield Call("POST", f"/tickets/{older['id']}/comments", body={"body": f"Merged duplicate #{newer['id']}.", "public": False})
    yield Call("PATCH", f"/tickets/{older['id']}", body={"tags": sorted({*older["tags"], "merged"})})
    yield Call("DELETE", f"/tickets/{newer['id']}")


def _plan_triage_urgent(p: dict[str, Any]) -> Plan:
    agent = yield from _agent(p["agent_name"])
    if agent is None:
        return
    waiting = yield from _collect("/tickets", {"status": "new", "priority": "urgent", "unassigned": True})
    if waiting:
        yield from _bulk([t["id"] for t in waiting], {"assignee_id": agent["id"], "status": "open"})


PLANS: dict[str, Callable[[dict[str, Any]], Plan]] = {
    "create_ticket": _plan_create_ticket,
    "assign_ticket": _plan_assign_ticket,
    "update_customer": _plan_update_customer,
    "reply_and_pend": _plan_reply_and_pend,
    "escalate_customer": _plan_escalate_customer,
    "delete_spam": _plan_delete_spam,
    "close_solved": _plan_close_solved,
    "handover": _plan_handover,
    "new_customer_ticket": _plan_new_customer_ticket,
    "merge_duplicate": _plan_merge_duplicate,
    "triage_urgent": _plan_triage_urgent,
}


# ----------------------------------------------------------------------------- drivers


class _PlanPolicy(ScriptedPolicy):
    """Runs the task's plan one request per turn (a wait may share the turn), then finishes."""

    resilient: bool  # whether failed calls are retried until they succeed

    def script(self, env: Any) -> Turns:
        task = env.task
        self._token, self._keys, self._task_id, self._api_key = None, 0, task["task_id"], env.api_key
        return self._run(PLANS[task["template"]](task["params"]))

    def _run(self, plan: Plan) -> Turns:
        try:
            call = next(plan)
            while True:
                result = yield from self._send(call)
                call = plan.send(result)
        except StopIteration:
            pass
        yield format_tool_call("finish", {"summary": "done"})

    def _send(self, call: Call, *, auth: bool = True) -> Generator[str, list[dict[str, Any]], Any]:
        """Carry out ``call``; returns its decoded JSON, or ``None`` if it failed."""
        headers = {}
        if auth:
            if self._token is None and not (yield from self._authenticate()):
                return None
            headers["Authorization"] = f"Bearer {self._token}"
        if auth and call.method != "GET":
            self._keys += 1
            headers["Idempotency-Key"] = f"{self._task_id}-{self._keys}"
        wait = 0
        while True:
            reply = yield from self._attempt(call, headers, wait)
            wait = 0
            data = reply.json() if 200 <= reply.status < 300 else None
            if not self.resilient or (data is not None and "Warning" not in reply.headers):
                return data
            if reply.status == 401 and auth:
                if not (yield from self._authenticate()):
                    return None
                headers["Authorization"] = f"Bearer {self._token}"
            elif reply.status in (429, 503):
                wait = int(reply.headers.get("Retry-After", "1"))
            elif not (reply.timed_out or reply.status == 500 or 200 <= reply.status < 300):
                raise RuntimeError(f"oracle got an unexpected answer to {call.method} {call.path}: {reply.status} {reply.body[:300]}")

    def _authenticate(self) -> Generator[str, list[dict[str, Any]], bool]:
        token = yield from self._send(Call("POST", "/auth/token", body={"api_key": self._api_key}), auth=False)
        self._token = token["access_token"] if token else None
        return self._token is not None

    @staticmethod
    def _attempt(call: Call, headers: dict[str, str], wait: int) -> Generator[str, list[dict[str, Any]], _Reply]:
        """One attempt: a turn with the request (after a wait, when one is due), then its reply."""
        arguments: dict[str, Any] = {"method": call.method, "path": call.path, "headers": headers}
        if call.query:
            arguments["query"] = call.query
        if call.body is not None:
            arguments["body"] = call.body
        turn = format_tool_call("http_request", arguments)
        if wait:
            turn = format_tool_call("wait", {"seconds": wait}) + "\n" + turn
        return _read_reply((yield turn))


class OraclePolicy(_PlanPolicy):
    """Solves every task at any fault rate by recovering from every fault kind."""

    resilient = True


class IgnoreErrorsPolicy(_PlanPolicy):
    """Sends each request once and carries on with whatever came back: the no-recovery baseline."""

    resilient = False
