"""The API reference as the agent reads it: an overview, or one endpoint in detail.

Both are rendered from the OpenAPI description in :mod:`agentgym.envs.mock_api.spec`, so the
docs cannot drift from what the server enforces.
"""

from __future__ import annotations

import json
from typing import Any

from agentgym.envs.mock_api.spec import DESCRIPTION, OPERATIONS, SCHEMAS, Operation

__all__ = ["endpoint_docs", "find_operation", "overview"]


def overview() -> str:
    """The service description and one line per endpoint."""
    lines = [DESCRIPTION, "Endpoints:"]
    lines += [f"  {op.method} {op.path} ({op.operation_id}): {op.summary}" for op in OPERATIONS]
    lines.append('\nFor parameters and schemas, read one endpoint, e.g. read_api_docs(endpoint="GET /tickets").')
    return "\n".join(lines)


def find_operation(name: str) -> Operation | None:
    """The operation named ``"METHOD /path"`` (any case for the method) or by operationId."""
    method, _, path = name.strip().partition(" ")
    for op in OPERATIONS:
        if op.operation_id.lower() == name.strip().lower() or (op.method == method.upper() and op.path == path.strip()):
            return op
    return None


def endpoint_docs(op: Operation) -> str:
    """Everything needed to call ``op``: auth, parameters, body and response schemas, errors."""
    lines = [f"{op.method} {op.path} ({op.operation_id})", op.summary]
    lines.append("Auth: Authorization: Bearer <token>" if op.auth else "Auth: none")
    for name in op.path_params:
        lines.append(f"Path parameter {name}: integer id")
    for name, schema in op.query.items():
        lines.append(f"Query parameter {name}: {_compact(schema)}")
    if op.idempotency_key:
        lines.append("Header Idempotency-Key (optional, 1-255 chars): retrying with the same key and body returns the first result")
    named = []
    if op.body:
        lines.append(f"Request body (application/json): {op.body}")
        named.append(op.body)
    for status, schema_name in op.responses.items():
        if status < 300:
            lines.append(f"Success: {status}" + (f", body {schema_name}" if schema_name else ", no body"))
            named += [schema_name] if schema_name else []
    errors = sorted(s for s in op.responses if s >= 400)
    lines.append(f"Errors: {', '.join(map(str, errors))}, with body Error")
    lines.append("Schemas ($ref #/components/schemas/X means schema X below):")
    lines += [f"  {name}: {_compact(SCHEMAS[name])}" for name in _closure([*named, "Error"])]
    return "\n".join(lines)


def _closure(names: list[str]) -> list[str]:
    """``names`` and every schema they reference, each once, in first-use order."""
    out: list[str] = []
    pending = list(names)
    while pending:
        name = pending.pop(0)
        if name not in out:
            out.append(name)
            pending += _refs(SCHEMAS[name])
    return out


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else []
        return own + [r for value in schema.values() for r in _refs(value)]
    if isinstance(schema, list):
        return [r for value in schema for r in _refs(value)]
    return []


def _compact(schema: Any) -> str:
    return json.dumps(schema, separators=(",", ":"))
