"""JSON Schema validation of tool calls, tool responses and structured answers (``jsonschema``).

Tools can be given in any of the shapes agentgym meets: :class:`agentgym.tools.Tool` objects,
OpenAI function specs (``ToolEnv.tools``), ``{"name", "parameters"}`` dicts, or a mapping from
tool name to its parameters schema. :func:`tool_schemas` turns each into ``{name: schema}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from agentgym.verifiers.result import RewardResult

__all__ = ["ToolSpecs", "call_name_and_arguments", "tool_schemas", "validate_json", "validate_json_text", "validate_tool_call"]

ToolSpecs = Mapping[str, Mapping[str, Any]] | Iterable[Any]
"""Tools in any accepted shape (see the module docstring)."""

_MAX_ERRORS = 5


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    # Keyed by the schema's canonical JSON: building a validator costs more than validating.
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid JSON Schema: {exc.message}") from exc
    return cls(schema)


def _errors(instance: Any, schema: Mapping[str, Any]) -> list[str]:
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = list(validator.iter_errors(instance))
    if not errors:
        return []
    first = best_match(errors)
    ordered = [first] + [e for e in errors if e is not first]
    return [_describe(e) for e in ordered[:_MAX_ERRORS]]


def _describe(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def validate_json(instance: Any, schema: Mapping[str, Any]) -> RewardResult:
    """1.0 when the decoded JSON value ``instance`` satisfies ``schema``; the reason names the
    most relevant violation and ``details["errors"]`` lists up to five.

    Raises:
        ValueError: when ``schema`` itself is not a valid JSON Schema.
    """
    errors = _errors(instance, schema)
    if errors:
        return RewardResult(0.0, f"does not match the schema: {errors[0]}", passed=False, details={"errors": errors})
    return RewardResult(1.0, "matches the schema", passed=True)


def validate_json_text(text: str, schema: Mapping[str, Any]) -> RewardResult:
    """Like :func:`validate_json` for a JSON document given as text (a ```json fence is allowed)."""
    try:
        instance = json.loads(_unfenced(text))
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nesting too deep"
        return RewardResult(0.0, f"not valid JSON: {reason}", passed=False)
    return validate_json(instance, schema)


def _unfenced(text: str) -> str:
    # String operations, not a regex: a backtracking pattern over a long unclosed fence is slow.
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        first_line, newline, rest = inner.partition("\n")
        return rest if newline and first_line.strip().lower() in ("", "json") else inner
    return text


def tool_schemas(tools: ToolSpecs) -> dict[str, dict[str, Any]]:
    """``{tool name: parameters JSON Schema}`` from tools in any accepted shape."""
    if isinstance(tools, Mapping):
        return {str(name): dict(schema) for name, schema in tools.items()}
    out: dict[str, dict[str, Any]] = {}
    for spec in tools:
        name, parameters = _name_and_parameters(spec)
        out[name] = parameters
    return out


def _name_and_parameters(spec: Any) -> tuple[str, dict[str, Any]]:
    if hasattr(spec, "name") and hasattr(spec, "parameters"):  # agentgym.tools.Tool
        return spec.name, dict(spec.parameters)
    if isinstance(spec, Mapping):
        body = spec.get("function", spec)
        if isinstance(body, Mapping) and isinstance(body.get("name"), str):
            parameters = body.get("parameters", body.get("input_schema", {"type": "object"}))
            return body["name"], dict(parameters)
    raise TypeError(f"not a tool spec: {spec!r:.120}")


def call_name_and_arguments(call: Any) -> tuple[str, Any]:
    """The name and arguments of a call given as a ``ToolCall``, ``{"name", "arguments"}`` or an
    OpenAI ``tool_calls`` entry (whose arguments are a JSON string)."""
    if hasattr(call, "name") and hasattr(call, "arguments"):
        return call.name, call.arguments
    if isinstance(call, Mapping):
        body = call.get("function", call)
        if isinstance(body, Mapping) and "name" in body:
            arguments = body.get("arguments", {})
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except (json.JSONDecodeError, RecursionError):
                    pass  # left as text: validation reports it is not an object
            return str(body["name"]), arguments
    raise TypeError(f"not a tool call: {call!r:.120}")


def validate_tool_call(call: Any, tools: ToolSpecs) -> RewardResult:
    """1.0 when the call names a known tool and its arguments satisfy that tool's schema."""
    schemas = tool_schemas(tools)
    name, arguments = call_name_and_arguments(call)
    if name not in schemas:
        known = ", ".join(sorted(schemas)) or "none"
        return RewardResult(0.0, f"unknown tool {name!r} (known: {known})", passed=False, details={"tool": name})
    if not isinstance(arguments, dict):
        return RewardResult(0.0, f"arguments of {name!r} are not a JSON object", passed=False, details={"tool": name})
    result = validate_json(arguments, schemas[name])
    reason = f"valid call to {name!r}" if result.passed else f"invalid arguments for {name!r}: {result.reason.removeprefix('does not match the schema: ')}"
    return RewardResult(result.score, reason, passed=result.passed, details={"tool": name} | result.details)
