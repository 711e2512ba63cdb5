"""Task completion from the final server state: the initial world plus the task's expected changes.

A task's ``expected`` holds three parts, all in JSON form:

- ``updated``: ``{table: {id: {field: value}}}``, the fields that must have changed;
- ``deleted``: ``{table: [id, ...]}``, the records that must be gone;
- ``created``: ``{table: [record, ...]}``, the new records, compared on :data:`CREATED_FIELDS`
  (a new ticket's requester is compared by email, since a new customer's id is not known in
  advance).

Everything else must be exactly as it was: a correct change next to collateral damage (an extra
deletion, a duplicate created by a careless retry) fails. Timestamps are ignored, since they
follow the logical clock and so depend on faults and waits.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agentgym.envs.mock_api.world import TABLES, World

__all__ = ["CREATED_FIELDS", "state_problems"]

IGNORED_FIELDS = frozenset({"created_at", "updated_at"})
CREATED_FIELDS = {
    "agents": ("name", "email", "team", "active"),
    "customers": ("name", "email", "tier"),
    "tickets": ("subject", "requester_email", "priority", "status", "assignee_id", "tags"),
    "comments": ("ticket_id", "body", "public"),
}
MAX_PROBLEMS = 6


def state_problems(initial: World, final: World, expected: dict[str, Any]) -> list[str]:
    """What differs between ``final`` and ``initial`` changed as ``expected`` says (empty: solved)."""
    problems: list[str] = []
    for table in TABLES:
        updates = {int(k): v for k, v in expected.get("updated", {}).get(table, {}).items()}
        deleted = set(expected.get("deleted", {}).get(table, []))
        noun = table[:-1]
        for record_id, before in initial.tables[table].items():
            after = final.tables[table].get(record_id)
            if record_id in deleted:
                if after is not None:
                    problems.append(f"{noun} {record_id} should have been deleted")
                continue
            if after is None:
                problems.append(f"{noun} {record_id} was deleted but should not have been")
                continue
            want = {**before, **updates.get(record_id, {})}
            for name in sorted(set(want) | set(after)):
                if name not in IGNORED_FIELDS and want.get(name) != after.get(name):
                    problems.append(f"{noun} {record_id}: {name} is {_show(after.get(name))}, expected {_show(want.get(name))}")
        new = [_project(table, r, final) for i, r in final.tables[table].items() if i not in initial.tables[table]]
        problems += _created_problems(noun, new, expected.get("created", {}).get(table, []))
    return problems[:MAX_PROBLEMS] + ([f"... and {len(problems) - MAX_PROBLEMS} more"] if len(problems) > MAX_PROBLEMS else [])


def _project(table: str, record: dict[str, Any], world: World) -> str:
    if table == "tickets":
        requester = world.customers.get(record["requester_id"])
        record = {**record, "requester_email": requester["email"] if requester else None}
    return json.dumps({name: record.get(name) for name in CREATED_FIELDS[table]}, sort_keys=True)


def _created_problems(noun: str, got: list[str], want: list[dict[str, Any]]) -> list[str]:
    got_count = Counter(got)
    want_count = Counter(json.dumps({name: w.get(name) for name in sorted(w)}, sort_keys=True) for w in want)
    missing = want_count - got_count
    extra = got_count - want_count
    return [f"missing new {noun} {m}" for m in sorted(missing.elements())] + [f"unexpected new {noun} {e}" for e in sorted(extra.elements())]


def _show(value: Any) -> str:
    return json.dumps(value)
