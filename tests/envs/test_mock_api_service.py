"""MockAPI-v0's service without the network: the request pipeline, every fault kind, idempotency,
validation, the helpdesk's rules, the OpenAPI description and the state grader."""

import json

import pytest

from agentgym.envs.mock_api.faults import FAULT_KINDS, FaultConfig, FaultDraw, FaultPlan
from agentgym.envs.mock_api.grading import state_problems
from agentgym.envs.mock_api.session import SIMULATED_HEADER, HttpRequest, Session
from agentgym.envs.mock_api.spec import OPENAPI, OPERATIONS
from agentgym.envs.mock_api.world import generate_world

SEED = 7


class ScriptedFaults:
    """Stands in for a FaultPlan: injects the given kinds call after call, then nothing."""

    rate = 1.0

    def __init__(self, *kinds, detail=0.3):
        self.kinds, self.detail = list(kinds), detail

    def draw(self, applicable):
        kind = self.kinds.pop(0) if self.kinds else None
        return FaultDraw(kind if kind in applicable else None, self.detail)

    def settle(self, injected):
        pass


class Api:
    """A session plus a logged-in caller."""

    def __init__(self, *faults, detail=0.3, authenticate=True):
        self.world = generate_world(SEED)
        self.session = Session(self.world.copy(), ScriptedFaults(*faults, detail=detail), validate_responses=True)
        self.token = self.call("POST", "/auth/token", {"api_key": self.world.api_key})[2]["access_token"] if authenticate else None

    def call(self, method, path, body=None, query="", headers=None, raw=None):
        sent = {"content-type": "application/json"} | ({"authorization": f"Bearer {self.token}"} if getattr(self, "token", None) else {})
        sent |= {k.lower(): v for k, v in (headers or {}).items()}
        content = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        response = self.session.handle(HttpRequest(method, path, query, sent, content))
        try:
            data = json.loads(response.body) if response.body else None
        except json.JSONDecodeError:
            data = response.body
        return response.status, response.headers, data

    @property
    def last(self):
        return self.session.calls[-1]

    @property
    def state(self):
        return self.session.world


def _new_ticket(api):
    requester = next(iter(api.state.customers))
    return {"subject": "Printer on fire", "requester_id": requester, "priority": "high", "tags": ["bug"]}


def _count_tickets(api, subject="Printer on fire"):
    return sum(t["subject"] == subject for t in api.state.tickets.values())


# ------------------------------------------------------------------------------ faults


@pytest.mark.parametrize("kind,status", [("rate_limit", 429), ("server_error", 500), ("unavailable", 503)])
def test_refusals_apply_nothing_and_a_retry_succeeds(kind, status):
    api = Api(None, kind)
    got, headers, body = api.call("POST", "/tickets", _new_ticket(api))
    assert got == status and body["error"]["code"] and api.last.fault == kind
    assert ("Retry-After" in headers) == (kind != "server_error")
    assert _count_tickets(api) == 0
    api.session.advance(10)
    assert api.call("POST", "/tickets", _new_ticket(api))[0] == 201 and _count_tickets(api) == 1


def test_retry_after_is_enforced_on_the_logical_clock():
    api = Api(None, "rate_limit", detail=0.5)  # Retry-After: 3
    assert api.call("GET", "/tickets")[1]["Retry-After"] == "3"
    status, headers, _ = api.call("GET", "/tickets")
    assert status == 429 and api.last.fault is None  # refused again: the client's fault, not injected
    assert int(headers["Retry-After"]) in (2, 3)
    api.session.advance(3)
    assert api.call("GET", "/tickets")[0] == 200


@pytest.mark.parametrize("detail,applied", [(0.2, True), (0.8, False)])
def test_a_timed_out_write_may_be_applied_and_the_idempotency_key_makes_the_retry_safe(detail, applied):
    api = Api(None, "timeout", detail=detail)
    before = api.session.clock
    status, headers, _ = api.call("POST", "/tickets", _new_ticket(api), headers={"Idempotency-Key": "k-1"})
    assert status == 504 and headers[SIMULATED_HEADER] == "timeout" and api.last.fault == "timeout"
    assert api.session.clock - before >= api.session.client_timeout_s
    assert _count_tickets(api) == int(applied)
    status, headers, body = api.call("POST", "/tickets", _new_ticket(api), headers={"Idempotency-Key": "k-1"})
    assert status == 201 and (headers.get("Idempotent-Replayed") == "true") == applied
    assert _count_tickets(api) == 1


def test_a_retry_without_an_idempotency_key_duplicates_a_lost_write():
    api = Api(None, "timeout", detail=0.2)
    api.call("POST", "/tickets", _new_ticket(api))
    api.call("POST", "/tickets", _new_ticket(api))
    assert _count_tickets(api) == 2


def test_malformed_json_is_a_cut_body_after_the_change_was_applied():
    api = Api(None, "malformed_json")
    status, _, body = api.call("POST", "/tickets", _new_ticket(api), headers={"Idempotency-Key": "k"})
    assert status == 201 and isinstance(body, bytes)
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    assert _count_tickets(api) == 1
    status, headers, body = api.call("POST", "/tickets", _new_ticket(api), headers={"Idempotency-Key": "k"})
    assert status == 201 and headers["Idempotent-Replayed"] == "true" and body["subject"] == "Printer on fire"


@pytest.mark.parametrize("kind", ["empty_results", "truncated_page"])
def test_list_faults_thin_the_page_and_say_so(kind):
    api = Api(None, kind)
    status, headers, thin = api.call("GET", "/tickets", query="per_page=10")
    assert status == 200 and "Warning" in headers and api.last.fault == kind
    status, headers, full = api.call("GET", "/tickets", query="per_page=10")
    assert "Warning" not in headers and len(full["data"]) == 10
    assert len(thin["data"]) == (0 if kind == "empty_results" else 5)


def test_response_faults_that_cannot_apply_are_not_injected():
    api = Api(None, "empty_results", "malformed_json", "truncated_page")
    assert api.call("GET", "/tickets/1")[0] == 404 and api.last.fault is None  # an error is not emptied
    assert api.call("DELETE", "/tickets/5001")[0] == 204 and api.last.fault is None  # no body to garble
    assert api.call("GET", "/agents", query="q=nobody-at-all")[0] == 200 and api.last.fault is None  # nothing to cut


def test_the_openapi_document_is_never_faulted():
    api = Api(None, "server_error", authenticate=True)
    status, _, body = api.call("GET", "/openapi.json")
    assert status == 200 and body["openapi"] == "3.1.0" and api.last.fault is None


def test_fault_plans_are_seeded_bounded_and_respect_the_warm_up():
    config = FaultConfig(rate=0.9, max_consecutive=2, warmup_calls=3)
    every = tuple(FAULT_KINDS)

    def kinds(seed):
        plan = FaultPlan(config, seed)
        out = []
        for _ in range(300):
            kind = plan.draw(every).kind
            plan.settle(kind)
            out.append(kind)
        return out

    first = kinds(1)
    assert first == kinds(1) and first != kinds(2)
    assert first[:3] == [None] * 3
    assert not any(all(first[i + j] for j in range(3)) for i in range(len(first) - 2))
    assert set(first) - {None} == set(FAULT_KINDS)
    restricted = FaultPlan(FaultConfig(rate=1.0, kinds=("timeout",)), 3)
    assert {restricted.draw(("server_error",)).kind for _ in range(20)} == {None}  # not applicable here


def test_the_curriculum_ramp():
    config = FaultConfig(rate=0.6, ramp_episodes=3)
    assert [round(config.rate_for_episode(e), 2) for e in range(5)] == [0.2, 0.4, 0.6, 0.6, 0.6]
    assert FaultConfig(rate=0.6).rate_for_episode(0) == 0.6


@pytest.mark.parametrize("kwargs", [{"rate": 1.5}, {"rate": "high"}, {"kinds": ("meteor",)}, {"kinds": ()}, {"max_consecutive": 0}, {"warmup_calls": -1}])
def test_bad_fault_settings_are_clear_errors(kwargs):
    with pytest.raises(ValueError, match="fault"):
        FaultConfig(**kwargs)


# ------------------------------------------------------------------ idempotency, auth


def test_an_idempotency_key_is_bound_to_its_request():
    api = Api()
    assert api.call("POST", "/tickets", _new_ticket(api), headers={"Idempotency-Key": "k"})[0] == 201
    status, _, body = api.call("POST", "/tickets", {**_new_ticket(api), "priority": "low"}, headers={"Idempotency-Key": "k"})
    assert status == 422 and body["error"]["code"] == "idempotency_key_reused"
    assert api.call("DELETE", "/tickets/5001", headers={"Idempotency-Key": "d"})[0] == 204
    status, headers, _ = api.call("DELETE", "/tickets/5001", headers={"Idempotency-Key": "d"})
    assert status == 204 and headers["Idempotent-Replayed"] == "true"
    assert api.call("DELETE", "/tickets/5001")[0] == 404


def test_authentication():
    api = Api(authenticate=False)
    assert api.call("GET", "/tickets")[2]["error"]["code"] == "missing_token"
    assert api.call("POST", "/auth/token", {"api_key": "wrong"})[0] == 401
    assert api.call("GET", "/tickets", headers={"Authorization": "Bearer tok_forged"})[2]["error"]["code"] == "invalid_token"
    token = api.call("POST", "/auth/token", {"api_key": api.world.api_key})[2]["access_token"]
    assert api.call("GET", "/tickets", headers={"Authorization": f"Bearer {token}"})[0] == 200
    api.session.advance(901)
    status, headers, body = api.call("GET", "/tickets", headers={"Authorization": f"Bearer {token}"})
    assert status == 401 and body["error"]["code"] == "token_expired" and headers["WWW-Authenticate"] == "Bearer"


# ------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "method,path,body,query,raw,headers,status,field",
    [
        ("POST", "/tickets", {"subject": "x", "requester_id": 1001, "colour": "red"}, "", None, {}, 422, "body"),
        ("POST", "/tickets", {"subject": "x", "requester_id": 1001, "priority": "asap"}, "", None, {}, 422, "body.priority"),
        ("POST", "/tickets", {"subject": "", "requester_id": "1001"}, "", None, {}, 422, "body.requester_id"),
        ("GET", "/tickets", None, "state=open", None, {}, 422, "query"),
        ("GET", "/tickets", None, "status=open,closd", None, {}, 422, "query.status"),
        ("GET", "/tickets", None, "per_page=500", None, {}, 422, "query.per_page"),
        ("GET", "/tickets", None, "page=1&page=2", None, {}, 422, "query.page"),
        ("GET", "/tickets/abc", None, "", None, {}, 422, "path.ticket_id"),
        ("GET", "/tickets/5001", {"x": 1}, "", None, {}, 422, "body"),
        ("POST", "/tickets", None, "", None, {}, 422, "body"),
        ("POST", "/tickets", None, "", b'{"subject": ', {}, 400, None),
        ("POST", "/tickets", None, "", b"[" * 20000 + b"]" * 20000, {}, 400, None),
        ("POST", "/tickets", None, "", b"\xff\xfe", {}, 400, None),
        ("POST", "/tickets", {"subject": "x", "requester_id": 1001}, "", None, {"Content-Type": "text/plain"}, 415, None),
        ("POST", "/tickets", {"subject": "x", "requester_id": 1001}, "", None, {"Idempotency-Key": "k" * 300}, 422, "header.Idempotency-Key"),
        ("GET", "/nowhere", None, "", None, {}, 404, None),
        ("PUT", "/tickets/5001", {"status": "open"}, "", None, {}, 405, None),
    ],
)
def test_invalid_requests_get_precise_errors_and_count_as_invalid(method, path, body, query, raw, headers, status, field):
    api = Api()
    got, _, data = api.call(method, path, body, query, headers, raw)
    assert got == status, data
    assert data["error"]["message"]
    if field is not None:
        assert any(d["field"] == field for d in data["error"]["details"]), data
    assert api.last.valid is False


def test_oversized_bodies_are_refused_and_logged():
    api = Api()
    response = api.session.handle(HttpRequest("POST", "/tickets", "", {"authorization": f"Bearer {api.token}"}, None))
    assert response.status == 413 and api.last.valid is False


def test_valid_requests_count_as_valid():
    api = Api()
    for method, path, body in [("GET", "/tickets", None), ("GET", "/agents/1", None), ("POST", "/tickets", _new_ticket(api))]:
        api.call(method, path, body)
        assert api.last.valid, (method, path)
    assert api.session.internal_errors == []


# --------------------------------------------------------------------- business rules


def _ticket(api, **match):
    return next(t for t in api.state.tickets.values() if all(t[k] == v for k, v in match.items()))


def test_the_ticket_workflow():
    api = Api()
    open_ticket = _ticket(api, status="open")
    status, _, body = api.call("PATCH", f"/tickets/{open_ticket['id']}", {"status": "closed"})
    assert status == 409 and body["error"]["code"] == "invalid_transition"
    assert api.call("PATCH", f"/tickets/{open_ticket['id']}", {"status": "new"})[0] == 409
    closed = _ticket(api, status="closed")
    assert api.call("PATCH", f"/tickets/{closed['id']}", {"priority": "low"})[2]["error"]["code"] == "ticket_closed"
    assert api.call("POST", f"/tickets/{closed['id']}/comments", {"body": "hi"})[0] == 409
    solved = _ticket(api, status="solved")
    status, _, body = api.call("PATCH", f"/tickets/{solved['id']}", {"status": "closed", "tags": ["z", "a"]})
    assert status == 200 and body["status"] == "closed" and body["tags"] == ["a", "z"]


def test_agents_with_live_tickets_cannot_be_deactivated_and_inactive_agents_get_no_tickets():
    api = Api()
    busy = _ticket(api, status="open")["assignee_id"]
    status, _, body = api.call("PATCH", f"/agents/{busy}", {"active": False})
    assert status == 409 and body["error"]["code"] == "agent_has_tickets"
    live = [t["id"] for t in api.state.tickets.values() if t["assignee_id"] == busy and t["status"] in ("new", "open", "pending")]
    other = next(a for a in api.state.agents if a != busy and api.state.agents[a]["active"])
    assert api.call("POST", "/tickets/bulk_update", {"ids": live, "changes": {"assignee_id": other}})[0] == 200
    assert api.call("PATCH", f"/agents/{busy}", {"active": False})[0] == 200
    status, _, body = api.call("POST", "/tickets", {**_new_ticket(api), "assignee_id": busy})
    assert status == 422 and body["error"]["details"][0]["field"] == "body.assignee_id"


def test_bulk_updates_are_all_or_nothing():
    api = Api()
    solved, open_ticket = _ticket(api, status="solved"), _ticket(api, status="open")
    status, _, body = api.call("POST", "/tickets/bulk_update", {"ids": [solved["id"], open_ticket["id"]], "changes": {"status": "closed"}})
    assert status == 409 and str(open_ticket["id"]) in body["error"]["message"]
    assert api.state.tickets[solved["id"]]["status"] == "solved"
    assert api.call("POST", "/tickets/bulk_update", {"ids": [solved["id"], 1], "changes": {"status": "closed"}})[0] == 422


def test_customer_emails_are_unique():
    api = Api()
    first, second = list(api.state.customers.values())[:2]
    assert api.call("POST", "/customers", {"name": "X Y", "email": first["email"].upper()})[2]["error"]["code"] == "email_taken"
    assert api.call("PATCH", f"/customers/{second['id']}", {"email": first["email"]})[0] == 409
    assert api.call("PATCH", f"/customers/{first['id']}", {"email": first["email"], "tier": "pro"})[0] == 200


def test_lists_filter_and_paginate():
    api = Api()
    expected = [t["id"] for t in api.state.tickets.values() if t["status"] in ("open", "pending") and "billing" in t["tags"]]
    seen, page = [], 1
    while page:
        status, _, body = api.call("GET", "/tickets", query=f"status=open,pending&tag=billing&per_page=4&page={page}")
        assert status == 200 and body["total"] == len(expected) and len(body["data"]) <= 4
        seen += [t["id"] for t in body["data"]]
        page = body["next_page"]
    assert seen == expected
    assert api.call("GET", "/tickets", query="page=999")[2]["data"] == []
    email = next(iter(api.state.customers.values()))["email"]
    assert [c["email"] for c in api.call("GET", "/customers", query=f"email={email.upper()}")[2]["data"]] == [email]


def test_deleting_a_ticket_deletes_its_comments():
    api = Api()
    ticket_id = next(iter(api.state.comments.values()))["ticket_id"]
    assert api.call("DELETE", f"/tickets/{ticket_id}")[0] == 204
    assert not any(c["ticket_id"] == ticket_id for c in api.state.comments.values())
    assert api.call("GET", f"/tickets/{ticket_id}/comments")[0] == 404


# ------------------------------------------------------------------- spec and grading


def test_the_openapi_document_is_valid():
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(OPENAPI)
    assert {op.operation_id for op in OPERATIONS} == {e["operationId"] for p in OPENAPI["paths"].values() for e in p.values()}


def test_the_grader_names_missing_extra_and_collateral_changes():
    world = generate_world(SEED)
    api = Api()
    ticket = _ticket(api, status="solved")
    expected = {"updated": {"tickets": {str(ticket["id"]): {"status": "closed"}}}}
    assert state_problems(world, api.state, expected) == [f'ticket {ticket["id"]}: status is "solved", expected "closed"']
    api.call("PATCH", f"/tickets/{ticket['id']}", {"status": "closed"})
    assert state_problems(world, api.state, expected) == []
    api.call("DELETE", "/tickets/5002")
    api.call("POST", "/tickets", _new_ticket(api))
    problems = state_problems(world, api.state, expected)
    assert "ticket 5002 was deleted but should not have been" in problems
    assert any(p.startswith("unexpected new ticket") and "Printer on fire" in p for p in problems)
