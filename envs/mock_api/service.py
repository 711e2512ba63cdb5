"""The helpdesk's business logic over one :class:`World`: authentication and the endpoints' rules.

Handlers receive input that already passed the OpenAPI validation and enforce what a schema
cannot: references that must exist, unique emails, the ticket status workflow, and that an agent
still holding live tickets cannot be deactivated. Every failure is an :class:`ApiError` that the
session turns into a JSON error response. Time is the session's logical clock, passed in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from agentgym.envs.mock_api.spec import DEFAULT_PER_PAGE
from agentgym.envs.mock_api.world import World, timestamp

__all__ = ["LIVE_STATUSES", "TOKEN_TTL_S", "ApiError", "Helpdesk"]

Record = dict[str, Any]
TOKEN_TTL_S = 900
LIVE_STATUSES = ("new", "open", "pending")


class ApiError(Exception):
    """An error response: HTTP status, machine-readable code, message and optional field details."""

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details or []

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


class Helpdesk:
    """The endpoints of one episode's helpdesk.

    Args:
        world: the episode's own copy of the data (mutated in place).
    """

    def __init__(self, world: World):
        self.world = world
        self._tokens: dict[str, float] = {}  # token -> expiry on the logical clock

    def dispatch(self, operation_id: str, ids: dict[str, int], query: Record, body: Any, now: float) -> Any:
        """Run the handler of ``operation_id``; returns the response payload (``None`` for 204)."""
        handlers = {
            "createToken": lambda: self.create_token(body, now),
            "listAgents": lambda: self.list_agents(query),
            "getAgent": lambda: self.get_agent(ids["agent_id"]),
            "updateAgent": lambda: self.update_agent(ids["agent_id"], body),
            "listCustomers": lambda: self.list_customers(query),
            "createCustomer": lambda: self.create_customer(body, now),
            "getCustomer": lambda: self.get_customer(ids["customer_id"]),
            "updateCustomer": lambda: self.update_customer(ids["customer_id"], body),
            "listTickets": lambda: self.list_tickets(query),
            "createTicket": lambda: self.create_ticket(body, now),
            "bulkUpdateTickets": lambda: self.bulk_update_tickets(body, now),
            "getTicket": lambda: self.get_ticket(ids["ticket_id"]),
            "updateTicket": lambda: self.update_ticket(ids["ticket_id"], body, now),
            "deleteTicket": lambda: self.delete_ticket(ids["ticket_id"]),
            "listComments": lambda: self.list_comments(ids["ticket_id"], query),
            "createComment": lambda: self.create_comment(ids["ticket_id"], body, now),
        }
        return handlers[operation_id]()

    # ------------------------------------------------------------------------ auth

    def create_token(self, body: Record, now: float) -> Record:
        if body["api_key"] != self.world.api_key:
            raise ApiError(401, "invalid_api_key", "the API key is not valid")
        token = "tok_" + hashlib.sha256(f"{self.world.api_key}:{len(self._tokens)}".encode()).hexdigest()[:32]
        self._tokens[token] = now + TOKEN_TTL_S
        return {"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_TTL_S}

    def authenticate(self, authorization: str | None, now: float) -> None:
        """Check an ``Authorization`` header value; raise 401 unless it holds a live token."""
        if not authorization:
            raise ApiError(401, "missing_token", "send 'Authorization: Bearer <token>' (get a token from POST /auth/token)")
        scheme, _, token = authorization.partition(" ")
        expiry = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if expiry is None:
            raise ApiError(401, "invalid_token", "the bearer token is not valid")
        if now >= expiry:
            raise ApiError(401, "token_expired", "the bearer token has expired: get a new one from POST /auth/token")

    # ---------------------------------------------------------------------- agents

    def list_agents(self, query: Record) -> Record:
        q = query.get("q", "").lower()
        return _page(
            (
                a
                for a in self.world.agents.values()
                if q in a["name"].lower() + " " + a["email"] and query.get("team", a["team"]) == a["team"] and query.get("active", a["active"]) == a["active"]
            ),
            query,
        )

    def get_agent(self, agent_id: int) -> Record:
        return self._get("agents", agent_id, "agent")

    def update_agent(self, agent_id: int, body: Record) -> Record:
        agent = self._get("agents", agent_id, "agent")
        if body.get("active") is False and agent["active"]:
            held = sorted(t["id"] for t in self.world.tickets.values() if t["assignee_id"] == agent_id and t["status"] in LIVE_STATUSES)
            if held:
                raise ApiError(409, "agent_has_tickets", f"agent {agent_id} still holds new/open/pending tickets {held[:10]}: reassign them first")
        agent.update(body)
        return agent

    # ------------------------------------------------------------------- customers

    def list_customers(self, query: Record) -> Record:
        q = query.get("q", "").lower()
        email = query.get("email", "").lower()
        return _page(
            (
                c
                for c in self.world.customers.values()
                if q in c["name"].lower() + " " + c["email"] and (not email or c["email"] == email) and query.get("tier", c["tier"]) == c["tier"]
            ),
            query,
        )

    def create_customer(self, body: Record, now: float) -> Record:
        email = body["email"].lower()
        self._check_email_free(email)
        return self.world.add("customers", {"name": body["name"], "email": email, "tier": body.get("tier", "free"), "created_at": timestamp(now)})

    def get_customer(self, customer_id: int) -> Record:
        return self._get("customers", customer_id, "customer")

    def update_customer(self, customer_id: int, body: Record) -> Record:
        customer = self._get("customers", customer_id, "customer")
        if "email" in body:
            body = {**body, "email": body["email"].lower()}
            if body["email"] != customer["email"]:
                self._check_email_free(body["email"])
        customer.update(body)
        return customer

    # --------------------------------------------------------------------- tickets

    def list_tickets(self, query: Record) -> Record:
        # Only the filters given are checked: most lists use one or two of the seven.
        checks: list[Callable[..., bool]] = []  # each called with a ticket; filter values are bound as defaults
        if "status" in query:
            statuses = set(query["status"].split(","))
            checks.append(lambda t: t["status"] in statuses)
        for name in ("priority", "assignee_id", "requester_id"):
            if name in query:
                checks.append(lambda t, name=name, value=query[name]: t[name] == value)
        if "unassigned" in query:
            checks.append(lambda t, unassigned=query["unassigned"]: (t["assignee_id"] is None) == unassigned)
        if "tag" in query:
            checks.append(lambda t, tag=query["tag"]: tag in t["tags"])
        if "q" in query:
            checks.append(lambda t, q=query["q"].lower(): q in t["subject"].lower())  # noqa: B008 - lowered once, bound as the default
        return _page((t for t in self.world.tickets.values() if all(check(t) for check in checks)), query)

    def create_ticket(self, body: Record, now: float) -> Record:
        self._get("customers", body["requester_id"], "customer", status=422, field="body.requester_id")
        assignee = body.get("assignee_id")
        if assignee is not None:
            self._check_assignee(assignee, "body.assignee_id")
        return self.world.add(
            "tickets",
            {
                "subject": body["subject"],
                "status": "new" if assignee is None else "open",
                "priority": body.get("priority", "normal"),
                "requester_id": body["requester_id"],
                "assignee_id": assignee,
                "tags": sorted(body.get("tags", [])),
                "description": body.get("description", ""),
                "created_at": timestamp(now),
                "updated_at": timestamp(now),
            },
        )

    def get_ticket(self, ticket_id: int) -> Record:
        return self._get("tickets", ticket_id, "ticket")

    def update_ticket(self, ticket_id: int, body: Record, now: float) -> Record:
        ticket = self._get("tickets", ticket_id, "ticket")
        self._check_update(ticket, body, "body")
        return self._apply(ticket, body, now)

    def bulk_update_tickets(self, body: Record, now: float) -> Record:
        missing = [i for i in body["ids"] if i not in self.world.tickets]
        if missing:
            raise ApiError(422, "validation_error", f"no tickets with ids {missing}", [{"field": "body.ids", "message": f"unknown ids {missing}"}])
        tickets = [self.world.tickets[i] for i in body["ids"]]
        for ticket in tickets:  # check all before changing any: all or nothing
            self._check_update(ticket, body["changes"], "body.changes", label=f"ticket {ticket['id']}: ")
        return {"updated": len(tickets), "data": [self._apply(t, body["changes"], now) for t in tickets]}

    def delete_ticket(self, ticket_id: int) -> None:
        self._get("tickets", ticket_id, "ticket")
        del self.world.tickets[ticket_id]
        for comment_id in [c["id"] for c in self.world.comments.values() if c["ticket_id"] == ticket_id]:
            del self.world.comments[comment_id]

    def list_comments(self, ticket_id: int, query: Record) -> Record:
        self._get("tickets", ticket_id, "ticket")
        return _page((c for c in self.world.comments.values() if c["ticket_id"] == ticket_id), query)

    def create_comment(self, ticket_id: int, body: Record, now: float) -> Record:
        ticket = self._get("tickets", ticket_id, "ticket")
        if ticket["status"] == "closed":
            raise ApiError(409, "ticket_closed", f"ticket {ticket_id} is closed: closed tickets cannot be changed")
        ticket["updated_at"] = timestamp(now)
        return self.world.add(
            "comments", {"ticket_id": ticket_id, "body": body["body"], "public": body.get("public", True), "author_id": None, "created_at": timestamp(now)}
        )

    # --------------------------------------------------------------------- helpers

    def _get(self, table: str, record_id: int, noun: str, *, status: int = 404, field: str | None = None) -> Record:
        record = self.world.tables[table].get(record_id)
        if record is None:
            details = [{"field": field, "message": f"no {noun} with id {record_id}"}] if field else None
            raise ApiError(status, "not_found" if status == 404 else "validation_error", f"no {noun} with id {record_id}", details)
        return record

    def _check_email_free(self, email: str) -> None:
        if any(c["email"] == email for c in self.world.customers.values()):
            raise ApiError(409, "email_taken", f"a customer with email {email} already exists")

    def _check_assignee(self, agent_id: int, field: str) -> None:
        agent = self._get("agents", agent_id, "agent", status=422, field=field)
        if not agent["active"]:
            raise ApiError(422, "validation_error", f"agent {agent_id} is inactive", [{"field": field, "message": f"agent {agent_id} is inactive"}])

    def _check_update(self, ticket: Record, changes: Record, where: str, label: str = "") -> None:
        if ticket["status"] == "closed":
            raise ApiError(409, "ticket_closed", f"{label}ticket {ticket['id']} is closed: closed tickets cannot be changed")
        status = changes.get("status")
        if status == "new" and ticket["status"] != "new":
            raise ApiError(409, "invalid_transition", f"{label}a ticket cannot go back to status new")
        if status == "closed" and ticket["status"] != "solved":
            raise ApiError(409, "invalid_transition", f"{label}only solved tickets can be closed (ticket {ticket['id']} is {ticket['status']})")
        if changes.get("assignee_id") is not None:
            self._check_assignee(changes["assignee_id"], f"{where}.assignee_id")

    @staticmethod
    def _apply(ticket: Record, changes: Record, now: float) -> Record:
        ticket.update({k: sorted(v) if k == "tags" else v for k, v in changes.items()})
        ticket["updated_at"] = timestamp(now)
        return ticket


def _page(items: Iterable[Record], query: Record) -> Record:
    matches = list(items)
    page, per_page = query.get("page", 1), query.get("per_page", DEFAULT_PER_PAGE)
    start = (page - 1) * per_page
    return {
        "data": matches[start : start + per_page],
        "page": page,
        "per_page": per_page,
        "total": len(matches),
        "next_page": page + 1 if start + per_page < len(matches) else None,
    }
