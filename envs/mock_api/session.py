"""One episode's server-side state and the request pipeline, independent of the HTTP transport.

A :class:`Session` owns the episode's helpdesk, its logical clock, its fault plan, its
idempotency records and the log of every call. :meth:`Session.handle` runs one request:

1. analyse it against the OpenAPI description (route, path ids, query, body): this decides
   whether the call was schema-valid, whatever happens next;
2. draw the call's fault; refuse it if a ``Retry-After`` window is still open, or if the fault
   is a refusal (429/500/503) or a timeout that hits before the request is applied;
3. authenticate, reject invalid input (400/404/405/413/415/422), replay an idempotent retry or
   run the handler;
4. apply response faults (garbled JSON, empty or short pages, a timeout after a write was
   applied), validate the response body against the description, log the call.

A simulated timeout is answered at once with status 504 and the header
``X-Agentgym-Simulated: timeout``; the environment's HTTP tool turns that into a client-side
timeout error and the clock moves on by the client timeout, so nobody sleeps.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.mock_api.faults import LIST_FAULTS, REFUSALS, FaultDraw, FaultPlan, garble, refusal, thin_page
from agentgym.envs.mock_api.service import ApiError, Helpdesk
from agentgym.envs.mock_api.spec import OPENAPI_JSON, Operation, RouteMiss, coerce_query, match_route, schema_errors
from agentgym.envs.mock_api.world import World

__all__ = ["MAX_BODY_BYTES", "SIMULATED_HEADER", "CallRecord", "HttpRequest", "HttpResponse", "Session"]

SIMULATED_HEADER = "X-Agentgym-Simulated"
MAX_BODY_BYTES = 64 * 1024
CALL_LATENCY_S = 0.05  # logical time one call takes
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class HttpRequest:
    """A request as the transport received it.

    Attributes:
        method: upper-case HTTP method.
        path: the path below the session's base URL, e.g. ``/tickets/5001``.
        query: the raw query string (without ``?``).
        headers: header values by lower-case name.
        body: the raw body, or ``None`` when it was larger than :data:`MAX_BODY_BYTES` and not read.
    """

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = b""


@dataclass(frozen=True)
class HttpResponse:
    """Status, headers and encoded body to send back."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class CallRecord:
    """One logged call.

    Attributes:
        index: 1-based position in the episode.
        method: HTTP method.
        path: request path (at most 200 characters).
        operation: the matched ``operationId``, or ``None``.
        status: the status sent (504 for a simulated timeout).
        valid: whether the request fit the OpenAPI description (route, ids, query and body).
        fault: the injected fault kind, or ``None``.
    """

    index: int
    method: str
    path: str
    operation: str | None
    status: int
    valid: bool
    fault: str | None


@dataclass
class _Parsed:
    op: Operation | None
    ids: dict[str, int]
    query: dict[str, Any]
    body: Any
    problem: ApiError | None
    miss: RouteMiss | None = None


class Session:
    """The server side of one episode (see the module docstring).

    Args:
        world: the episode's data; the session mutates it.
        faults: the episode's fault plan.
        client_timeout_s: the client's timeout on the logical clock; a timeout fault costs this much.
        validate_responses: check every response body against the OpenAPI description; a
            mismatch is a server bug, answered with 500 and kept in :attr:`internal_errors`.
    """

    def __init__(self, world: World, faults: FaultPlan, *, client_timeout_s: float = 10.0, validate_responses: bool = True):
        self.helpdesk = Helpdesk(world)
        self.faults = faults
        self.client_timeout_s = client_timeout_s
        self.validate_responses = validate_responses
        self.clock = 0.0
        self.calls: list[CallRecord] = []
        self.internal_errors: list[str] = []
        self._blocked_until = 0.0
        self._replays: dict[str, tuple[str, int, bytes]] = {}
        self._lock = threading.Lock()

    @property
    def world(self) -> World:
        return self.helpdesk.world

    def advance(self, seconds: float) -> float:
        """Move the logical clock forward (the client waits); returns the new time."""
        with self._lock:
            self.clock += seconds
            return self.clock

    def handle(self, request: HttpRequest) -> HttpResponse:
        """Run one request through the pipeline; safe to call from several threads."""
        with self._lock:
            self.clock += CALL_LATENCY_S
            parsed = _Parsed(None, {}, {}, None, None)
            try:
                parsed = _parse(request)
                draw = self.faults.draw(_applicable(parsed.op))
                status, payload, headers, injected = self._respond(request, parsed, draw)
            except Exception as exc:  # noqa: BLE001 - a service bug must not kill the connection; it is kept for tests
                if not isinstance(exc, _InvalidResponse):
                    self.internal_errors.append(f"{request.method} {request.path[:100]}: {type(exc).__name__}: {exc}")
                status, payload, headers = self._encode(None, 500, {"error": {"code": "internal_error", "message": "internal server error"}}, {})
                injected = None
            self.faults.settle(injected)
            self.calls.append(
                CallRecord(
                    index=len(self.calls) + 1,
                    method=request.method[:10],
                    path=request.path[:200],
                    operation=parsed.op.operation_id if parsed.op else None,
                    status=status,
                    valid=parsed.op is not None and parsed.problem is None,
                    fault=injected,
                )
            )
            return HttpResponse(status, headers, payload)

    # ------------------------------------------------------------------------ internals

    def _respond(self, request: HttpRequest, parsed: _Parsed, draw: FaultDraw) -> tuple[int, bytes, dict[str, str], str | None]:
        op = parsed.op
        if op is not None and op.operation_id == "getOpenApi":
            return 200, OPENAPI_JSON, {"Content-Type": JSON_TYPE}, None
        if self.clock < self._blocked_until:
            wait = max(1, math.ceil(self._blocked_until - self.clock))
            return (*self._encode(op, *refusal("rate_limit", wait)), None)
        kind = draw.kind
        if kind in REFUSALS:
            if kind == "rate_limit":
                self._blocked_until = self.clock + draw.retry_after
            return (*self._encode(op, *refusal(kind, draw.retry_after)), kind)
        writes = request.method != "GET"
        if kind == "timeout" and not (writes and draw.write_applied):
            return (*self._timeout(), kind)
        try:
            status, data, headers = self._execute(request, parsed)
        except ApiError as exc:
            return (*self._encode(op, exc.status, exc.body(), _error_headers(exc)), None)
        if kind == "timeout":
            return (*self._timeout(), kind)
        if kind == "malformed_json" and data:
            encoded = self._encode(op, status, data, headers)
            return encoded[0], garble(encoded[1], draw.detail), encoded[2], kind
        if kind in LIST_FAULTS and isinstance(data, dict) and status == 200:
            self._check_response(op, status, data)
            thinned = thin_page(data, kind)
            if thinned is not None:
                return (*self._encode(None, status, thinned[0], headers | thinned[1]), kind)
        return (*self._encode(op, status, data, headers), None)

    def _execute(self, request: HttpRequest, parsed: _Parsed) -> tuple[int, Any, dict[str, str]]:
        """Authenticate, validate and run the request (or replay it); raises ApiError on refusal."""
        if parsed.miss is not None:
            if parsed.miss.status == 405:
                raise ApiError(405, "method_not_allowed", f"{request.method} is not allowed on {request.path[:100]}; allowed: {', '.join(parsed.miss.allow)}")
            raise ApiError(404, "not_found", f"no endpoint {request.path[:100]} (see GET /openapi.json)")
        op = parsed.op
        assert op is not None
        if op.auth:
            self.helpdesk.authenticate(request.headers.get("authorization"), self.clock)
        if parsed.problem is not None:
            raise parsed.problem
        key = request.headers.get("idempotency-key") if op.idempotency_key else None
        fingerprint = json.dumps([op.operation_id, parsed.ids, parsed.body], sort_keys=True)  # the key is bound to this request
        if key is not None and key in self._replays:
            stored_fingerprint, status, body = self._replays[key]
            if stored_fingerprint != fingerprint:
                raise ApiError(422, "idempotency_key_reused", "this Idempotency-Key was already used with a different request")
            return status, json.loads(body) if body else None, {"Idempotent-Replayed": "true"}
        data = self.helpdesk.dispatch(op.operation_id, parsed.ids, parsed.query, parsed.body, self.clock)
        status = next(s for s in op.responses if s < 300)
        headers = {}
        if status == 201 and "{" not in op.path:
            headers["Location"] = f"{op.path}/{data['id']}"
        if key is not None:
            self._replays[key] = (fingerprint, status, json.dumps(data, separators=(",", ":")).encode() if data is not None else b"")
        return status, data, headers

    def _timeout(self) -> tuple[int, bytes, dict[str, str]]:
        self.clock += self.client_timeout_s
        body = json.dumps({"error": {"code": "timeout", "message": "no response within the client timeout"}}).encode()
        return 504, body, {"Content-Type": JSON_TYPE, SIMULATED_HEADER: "timeout"}

    def _encode(self, op: Operation | None, status: int, data: Any, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        if data is None:
            return status, b"", dict(headers)
        if op is not None:
            self._check_response(op, status, data)
        return status, json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode(), {"Content-Type": JSON_TYPE, **headers}

    def _check_response(self, op: Operation | None, status: int, data: Any) -> None:
        if not self.validate_responses or op is None:
            return
        schema = op.responses.get(status, "Error")
        problems = schema_errors(schema, data, "response") if schema else []
        if problems:
            self.internal_errors.append(f"{op.operation_id} {status}: {problems}")
            raise _InvalidResponse(problems)


class _InvalidResponse(Exception):
    """A response that breaks the OpenAPI description: a bug in the service, never the client's."""


def _applicable(op: Operation | None) -> tuple[str, ...]:
    if op is not None and op.operation_id == "getOpenApi":
        return ()
    kinds = [*REFUSALS, "timeout"]
    if op is not None and any(s < 300 and name for s, name in op.responses.items()):
        kinds.append("malformed_json")
    if op is not None and op.paginated:
        kinds += LIST_FAULTS
    return tuple(kinds)


def _error_headers(exc: ApiError) -> dict[str, str]:
    return {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}


def _parse(request: HttpRequest) -> _Parsed:
    """Route and validate a request, collecting the first problem (none for a valid request)."""
    route = match_route(request.method, request.path)
    if isinstance(route, RouteMiss):
        return _Parsed(None, {}, {}, None, None, miss=route)
    op, raw_ids = route
    ids: dict[str, int] = {}
    details: list[dict[str, str]] = []
    for name, raw in raw_ids.items():
        if raw.isdigit() and len(raw) < 19 and int(raw) > 0:
            ids[name] = int(raw)
        else:
            details.append({"field": f"path.{name}", "message": f"{raw[:40]!r} is not a positive integer id"})
    try:
        raw_query = urllib.parse.parse_qs(request.query, keep_blank_values=True, strict_parsing=False, max_num_fields=50)
    except ValueError as exc:
        return _Parsed(op, ids, {}, None, ApiError(422, "validation_error", f"bad query string: {exc}"))
    query, query_problems = coerce_query(op, raw_query)
    details += query_problems
    body: Any = None
    if request.body is None:
        return _Parsed(op, ids, query, None, ApiError(413, "payload_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes"))
    if op.body is None:
        if request.body.strip():
            details.append({"field": "body", "message": f"{op.method} {op.path} takes no request body"})
    elif not request.body.strip():
        details.append({"field": "body", "message": f"a JSON body ({op.body}) is required"})
    else:
        if JSON_TYPE not in request.headers.get("content-type", "").lower():
            return _Parsed(op, ids, query, None, ApiError(415, "unsupported_media_type", "send the body as JSON with 'Content-Type: application/json'"))
        try:
            body = json.loads(request.body)
        except (UnicodeDecodeError, RecursionError):
            return _Parsed(op, ids, query, None, ApiError(400, "invalid_json", "the request body is not valid UTF-8 JSON"))
        except json.JSONDecodeError as exc:
            return _Parsed(
                op, ids, query, None, ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
            )
        details += schema_errors(op.body, body, "body")
    key = request.headers.get("idempotency-key")
    if op.idempotency_key and key is not None and not 1 <= len(key) <= 255:
        details.append({"field": "header.Idempotency-Key", "message": "must be 1 to 255 characters"})
    problem = ApiError(422, "validation_error", "; ".join(f"{d['field']}: {d['message']}" for d in details[:3]), details) if details else None
    return _Parsed(op, ids, query, body, problem)
