"""The helpdesk API's OpenAPI 3.1 description, its routing table, and request/response validation.

The document is the single source of truth: the server routes with it, validates every request
(path, query and body) and, when asked, every response against it with ``jsonschema``, and the
agent reads it through ``GET /openapi.json`` or the docs tool. Validators are compiled once at
import; they are immutable and safe to share between server threads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from agentgym.envs.mock_api.world import PRIORITIES, STATUSES, TEAMS, TIERS

__all__ = [
    "DEFAULT_PER_PAGE",
    "DESCRIPTION",
    "MAX_PER_PAGE",
    "OPENAPI",
    "OPENAPI_JSON",
    "OPERATIONS",
    "SCHEMAS",
    "Operation",
    "RouteMiss",
    "coerce_query",
    "inline_schema",
    "match_route",
    "query_errors",
    "schema_errors",
]

Schema = dict[str, Any]

MAX_PER_PAGE = 50
DEFAULT_PER_PAGE = 10
EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$"
TAG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,29}$"
STATUS_LIST_PATTERN = "^({0})(,({0}))*$".format("|".join(STATUSES))


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: list[str], properties: dict[str, Schema], *, min_properties: int = 0) -> Schema:
    out: Schema = {"type": "object", "required": required, "properties": properties, "additionalProperties": False}
    if min_properties:
        out["minProperties"] = min_properties
    return out


def _page(item: str) -> Schema:
    return _obj(
        ["data", "page", "per_page", "total", "next_page"],
        {
            "data": {"type": "array", "items": _ref(item)},
            "page": {"type": "integer", "minimum": 1},
            "per_page": {"type": "integer", "minimum": 1, "maximum": MAX_PER_PAGE},
            "total": {"type": "integer", "minimum": 0},
            "next_page": {"type": ["integer", "null"], "minimum": 2},
        },
    )


ID = {"type": "integer", "minimum": 1}
TIME = {"type": "string", "format": "date-time"}
NAME = {"type": "string", "minLength": 1, "maxLength": 100}
EMAIL = {"type": "string", "maxLength": 200, "pattern": EMAIL_PATTERN}
TAGS = {"type": "array", "items": {"type": "string", "pattern": TAG_PATTERN}, "maxItems": 10, "uniqueItems": True}
SUBJECT = {"type": "string", "minLength": 1, "maxLength": 200}

SCHEMAS: dict[str, Schema] = {
    "Error": _obj(
        ["error"],
        {
            "error": _obj(
                ["code", "message"],
                {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {"type": "array", "items": _obj(["field", "message"], {"field": {"type": "string"}, "message": {"type": "string"}})},
                },
            )
        },
    ),
    "TokenRequest": _obj(["api_key"], {"api_key": {"type": "string", "minLength": 1, "maxLength": 200}}),
    "Token": _obj(
        ["access_token", "token_type", "expires_in"], {"access_token": {"type": "string"}, "token_type": {"const": "Bearer"}, "expires_in": {"type": "integer"}}
    ),
    "Agent": _obj(
        ["id", "name", "email", "team", "active"], {"id": ID, "name": NAME, "email": EMAIL, "team": {"enum": list(TEAMS)}, "active": {"type": "boolean"}}
    ),
    "AgentUpdate": _obj([], {"team": {"enum": list(TEAMS)}, "active": {"type": "boolean"}}, min_properties=1),
    "Customer": _obj(
        ["id", "name", "email", "tier", "created_at"], {"id": ID, "name": NAME, "email": EMAIL, "tier": {"enum": list(TIERS)}, "created_at": TIME}
    ),
    "CustomerCreate": _obj(["name", "email"], {"name": NAME, "email": EMAIL, "tier": {"enum": list(TIERS), "default": "free"}}),
    "CustomerUpdate": _obj([], {"name": NAME, "email": EMAIL, "tier": {"enum": list(TIERS)}}, min_properties=1),
    "Ticket": _obj(
        ["id", "subject", "description", "status", "priority", "requester_id", "assignee_id", "tags", "created_at", "updated_at"],
        {
            "id": ID,
            "subject": SUBJECT,
            "description": {"type": "string"},
            "status": {"enum": list(STATUSES)},
            "priority": {"enum": list(PRIORITIES)},
            "requester_id": ID,
            "assignee_id": {"type": ["integer", "null"], "minimum": 1},
            "tags": TAGS,
            "created_at": TIME,
            "updated_at": TIME,
        },
    ),
    "TicketCreate": _obj(
        ["subject", "requester_id"],
        {
            "subject": SUBJECT,
            "description": {"type": "string", "maxLength": 5000, "default": ""},
            "requester_id": ID,
            "priority": {"enum": list(PRIORITIES), "default": "normal"},
            "assignee_id": {"type": ["integer", "null"], "minimum": 1, "default": None},
            "tags": TAGS,
        },
    ),
    "TicketUpdate": _obj(
        [],
        {
            "subject": SUBJECT,
            "status": {"enum": list(STATUSES)},
            "priority": {"enum": list(PRIORITIES)},
            "assignee_id": {"type": ["integer", "null"], "minimum": 1},
            "tags": TAGS,
        },
        min_properties=1,
    ),
    "BulkTicketUpdate": _obj(
        ["ids", "changes"],
        {"ids": {"type": "array", "items": ID, "minItems": 1, "maxItems": MAX_PER_PAGE, "uniqueItems": True}, "changes": _ref("TicketUpdate")},
    ),
    "BulkTicketResult": _obj(["updated", "data"], {"updated": {"type": "integer"}, "data": {"type": "array", "items": _ref("Ticket")}}),
    "Comment": _obj(
        ["id", "ticket_id", "body", "public", "author_id", "created_at"],
        {"id": ID, "ticket_id": ID, "body": {"type": "string"}, "public": {"type": "boolean"}, "author_id": {"type": ["integer", "null"]}, "created_at": TIME},
    ),
    "CommentCreate": _obj(["body"], {"body": {"type": "string", "minLength": 1, "maxLength": 5000}, "public": {"type": "boolean", "default": True}}),
    "AgentPage": _page("Agent"),
    "CustomerPage": _page("Customer"),
    "TicketPage": _page("Ticket"),
    "CommentPage": _page("Comment"),
}

PAGE_PARAMS: dict[str, Schema] = {
    "page": {"type": "integer", "minimum": 1, "default": 1, "description": "1-based page number"},
    "per_page": {"type": "integer", "minimum": 1, "maximum": MAX_PER_PAGE, "default": DEFAULT_PER_PAGE, "description": "items per page"},
}
SEARCH = {"type": "string", "minLength": 1, "maxLength": 100}


@dataclass(frozen=True)
class Operation:
    """One endpoint: how to route to it, what it accepts and what it returns.

    Attributes:
        method: HTTP method, upper case.
        path: path template, e.g. ``/tickets/{ticket_id}``.
        operation_id: the OpenAPI ``operationId`` (also the service's handler name).
        summary: one line for the docs.
        query: query parameter name -> JSON Schema.
        body: component name of the request body schema, or ``None``.
        responses: status -> component name of the body schema (``None``: no body).
        auth: whether a bearer token is required.
        idempotency_key: whether an ``Idempotency-Key`` header is honoured.
        paginated: whether the response is a page of a list (subject to list faults).
    """

    method: str
    path: str
    operation_id: str
    summary: str
    query: dict[str, Schema] = field(default_factory=dict)
    body: str | None = None
    responses: dict[int, str | None] = field(default_factory=dict)
    auth: bool = True
    idempotency_key: bool = False
    paginated: bool = False

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)


_COMMON_ERRORS = {401: "Error", 404: "Error", 409: "Error", 422: "Error", 429: "Error", 500: "Error", 503: "Error"}


def _op(method: str, path: str, operation_id: str, summary: str, ok: tuple[int, str | None], **kw: Any) -> Operation:
    return Operation(method, path, operation_id, summary, responses={ok[0]: ok[1], **_COMMON_ERRORS}, **kw)


OPERATIONS: list[Operation] = [
    _op("GET", "/openapi.json", "getOpenApi", "This OpenAPI document (no token needed).", (200, None), auth=False),
    _op("POST", "/auth/token", "createToken", "Exchange the API key for a bearer token (valid 900 s).", (200, "Token"), body="TokenRequest", auth=False),
    _op(
        "GET",
        "/agents",
        "listAgents",
        "List support agents; filter by name/email substring, team, active.",
        (200, "AgentPage"),
        query={"q": SEARCH, "team": {"enum": list(TEAMS)}, "active": {"type": "boolean"}, **PAGE_PARAMS},
        paginated=True,
    ),
    _op("GET", "/agents/{agent_id}", "getAgent", "Get one agent.", (200, "Agent")),
    _op("PATCH", "/agents/{agent_id}", "updateAgent", "Change an agent's team or deactivate them.", (200, "Agent"), body="AgentUpdate", idempotency_key=True),
    _op(
        "GET",
        "/customers",
        "listCustomers",
        "List customers; filter by name/email substring, exact email, tier.",
        (200, "CustomerPage"),
        query={"q": SEARCH, "email": {"type": "string", "minLength": 3, "maxLength": 200}, "tier": {"enum": list(TIERS)}, **PAGE_PARAMS},
        paginated=True,
    ),
    _op("POST", "/customers", "createCustomer", "Create a customer (email must be unique).", (201, "Customer"), body="CustomerCreate", idempotency_key=True),
    _op("GET", "/customers/{customer_id}", "getCustomer", "Get one customer.", (200, "Customer")),
    _op(
        "PATCH",
        "/customers/{customer_id}",
        "updateCustomer",
        "Change a customer's name, email or tier.",
        (200, "Customer"),
        body="CustomerUpdate",
        idempotency_key=True,
    ),
    _op(
        "GET",
        "/tickets",
        "listTickets",
        "List tickets, oldest first; all filters combine with AND.",
        (200, "TicketPage"),
        query={
            "status": {"type": "string", "pattern": STATUS_LIST_PATTERN, "description": "one status or a comma-separated list, e.g. open,pending"},
            "priority": {"enum": list(PRIORITIES)},
            "assignee_id": ID,
            "unassigned": {"type": "boolean", "description": "true: only tickets without an assignee"},
            "requester_id": ID,
            "tag": {"type": "string", "pattern": TAG_PATTERN},
            "q": {**SEARCH, "description": "case-insensitive substring of the subject"},
            **PAGE_PARAMS,
        },
        paginated=True,
    ),
    _op("POST", "/tickets", "createTicket", "Create a ticket (status new, or open when assigned).", (201, "Ticket"), body="TicketCreate", idempotency_key=True),
    _op(
        "POST",
        "/tickets/bulk_update",
        "bulkUpdateTickets",
        "Apply the same changes to up to 50 tickets, all or nothing.",
        (200, "BulkTicketResult"),
        body="BulkTicketUpdate",
        idempotency_key=True,
    ),
    _op("GET", "/tickets/{ticket_id}", "getTicket", "Get one ticket.", (200, "Ticket")),
    _op(
        "PATCH",
        "/tickets/{ticket_id}",
        "updateTicket",
        "Change a ticket's subject, status, priority, assignee or tags.",
        (200, "Ticket"),
        body="TicketUpdate",
        idempotency_key=True,
    ),
    _op("DELETE", "/tickets/{ticket_id}", "deleteTicket", "Delete a ticket and its comments.", (204, None), idempotency_key=True),
    _op(
        "GET",
        "/tickets/{ticket_id}/comments",
        "listComments",
        "List a ticket's comments, oldest first.",
        (200, "CommentPage"),
        query=dict(PAGE_PARAMS),
        paginated=True,
    ),
    _op(
        "POST",
        "/tickets/{ticket_id}/comments",
        "createComment",
        "Add a comment (public: visible to the customer).",
        (201, "Comment"),
        body="CommentCreate",
        idempotency_key=True,
    ),
]

DESCRIPTION = """\
Deskly is a helpdesk back office: support agents, customers, tickets and comments.

Authentication: POST /auth/token with {"api_key": ...} returns a bearer token; send it as
`Authorization: Bearer <token>` on every other call. Tokens expire after 900 s (401 token_expired:
get a new one).

Lists are paginated: `page` (from 1) and `per_page` (default 10, at most 50); the response has
`data`, `page`, `per_page`, `total` and `next_page` (null on the last page). Unknown query
parameters are rejected with 422.

Errors are JSON: {"error": {"code", "message", "details"?}}. 400 malformed JSON, 401 missing or
bad token, 404 unknown resource, 405 wrong method, 409 conflict with the current state, 413 body
too large, 415 body not JSON, 422 validation error, 429 rate limited, 500/503 transient server
errors.

Reliability: the service is busy. 429 and 503 responses carry `Retry-After` (seconds): wait that
long before retrying; retrying earlier is refused again. 500 and 503 are transient: retry. A
response can be lost (client timeout) or arrive garbled (invalid JSON) even though the server
applied the change, so every write (POST, PATCH, DELETE) accepts an `Idempotency-Key` header:
retrying with the same key and request returns the original result (header
`Idempotent-Replayed: true`) instead of acting twice; a key reused for a different request is
refused with 422. Under load a list may come back empty or with a short page; such responses carry a
`Warning` header: retry the same request.
"""


def _document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        parameters = [{"name": name, "in": "path", "required": True, "schema": ID} for name in op.path_params] + [
            {"name": name, "in": "query", "required": False, "schema": {k: v for k, v in schema.items() if k != "description"}}
            | ({"description": schema["description"]} if "description" in schema else {})
            for name, schema in op.query.items()
        ]
        if op.idempotency_key:
            parameters.append(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                    "description": "makes retries safe: the same key and body return the first result",
                }
            )
        entry: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary}
        if parameters:
            entry["parameters"] = parameters
        if op.body:
            entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(op.body)}}}
        entry["responses"] = {
            str(status): {"description": "OK" if status < 300 else "error"} | ({"content": {"application/json": {"schema": _ref(name)}}} if name else {})
            for status, name in op.responses.items()
        }
        if op.auth:
            entry["security"] = [{"bearer": []}]
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": "Deskly helpdesk API", "version": "1.0.0", "description": DESCRIPTION},
        "servers": [{"url": "/", "description": "the episode's base URL (info['api_base_url'])"}],
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


OPENAPI: dict[str, Any] = _document()
OPENAPI_JSON: bytes = json.dumps(OPENAPI, separators=(",", ":")).encode()


def inline_schema(schema: Any) -> Any:
    """``schema`` with every component ``$ref`` replaced by the component itself.

    The components are not recursive, and inlined schemas validate about twice as fast as
    ``$ref`` lookups through a registry (measured).
    """
    if isinstance(schema, dict):
        if "$ref" in schema:
            return inline_schema(SCHEMAS[schema["$ref"].rsplit("/", 1)[1]])
        return {key: inline_schema(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [inline_schema(value) for value in schema]
    return schema


_VALIDATORS = {name: jsonschema.Draft202012Validator(inline_schema(schema)) for name, schema in SCHEMAS.items()}
_QUERY_VALIDATORS = {op.operation_id: jsonschema.Draft202012Validator(_obj([], op.query)) for op in OPERATIONS}


def schema_errors(schema_name: str, instance: Any, where: str) -> list[dict[str, str]]:
    """Violations of component ``schema_name`` as ``{"field", "message"}`` (empty when valid).

    ``where`` prefixes the field path (``body``, ``response``).
    """
    validator = _VALIDATORS[schema_name]
    return _describe(validator.iter_errors(instance), where)


def query_errors(op: Operation, query: dict[str, Any]) -> list[dict[str, str]]:
    """Violations of ``op``'s query parameters (after :func:`coerce_query`)."""
    return _describe(_QUERY_VALIDATORS[op.operation_id].iter_errors(query), "query")


def _describe(errors: Any, where: str) -> list[dict[str, str]]:
    out = []
    for error in sorted(errors, key=lambda e: (list(map(str, e.absolute_path)), e.message))[:10]:
        path = ".".join([where, *map(str, error.absolute_path)])
        message = error.message
        if error.validator == "additionalProperties":
            message = message.replace("Additional properties are not allowed", "unknown query parameter(s)" if where == "query" else "unknown field(s)")
        out.append({"field": path, "message": message})
    return out


def coerce_query(op: Operation, raw: dict[str, list[str]]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Typed query values for ``op`` from raw strings, and any problems found on the way.

    Integers and booleans are converted when they parse; anything else is left as a string for
    the validator to reject with a precise message. A repeated parameter is an error.
    """
    typed: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    for name, values in raw.items():
        if len(values) > 1:
            problems.append({"field": f"query.{name}", "message": "repeated query parameter: give it once"})
            continue
        value = values[0]
        kind = op.query.get(name, {}).get("type")
        if kind == "integer" and re.fullmatch(r"-?\d{1,18}", value):
            typed[name] = int(value)
        elif kind == "boolean" and value in ("true", "false"):
            typed[name] = value == "true"
        else:
            typed[name] = value
    return typed, problems + query_errors(op, typed)


@dataclass(frozen=True)
class RouteMiss:
    """Why no operation matched: 404 (no such path) or 405 (path exists, method does not)."""

    status: int
    allow: tuple[str, ...] = ()


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"{(\w+)}", r"(?P<\1>[^/]+)", path) + "$")


# Literal routes first, so /tickets/bulk_update is never read as /tickets/{ticket_id}.
_ROUTES = sorted(((_pattern(op.path), op) for op in OPERATIONS), key=lambda r: "{" in r[1].path)


def match_route(method: str, path: str) -> tuple[Operation, dict[str, str]] | RouteMiss:
    """The operation for ``method path`` with its raw path parameters, or why there is none."""
    allowed: list[str] = []
    literal_hit = False
    for pattern, op in _ROUTES:
        found = pattern.match(path)
        if found is None or (literal_hit and "{" in op.path):
            continue
        if op.method == method:
            return op, found.groupdict()
        allowed.append(op.method)
        literal_hit = literal_hit or "{" not in op.path
    return RouteMiss(405, tuple(sorted(set(allowed)))) if allowed else RouteMiss(404)
