"""Declaring tools from typed Python functions.

A tool is an environment method marked with :func:`tool`. Its signature is the single source of
truth: the JSON Schema shown to the model (OpenAI function format) is generated from the type
hints, parameter descriptions come from the docstring's ``Args:`` section, and the model's
arguments are validated against that schema with ``jsonschema`` before the method runs.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import jsonschema

from agentgym.parsing import scrub_text

__all__ = ["MAX_RESULT_BYTES", "InfraError", "Tool", "ToolError", "cap_result", "tool", "tools_of"]

# What one tool result may hold (UTF-8 bytes): a model's context, and every cache of results,
# stays bounded whatever a query or a program prints.
MAX_RESULT_BYTES = 64 << 10


class ToolError(Exception):
    """Raised by a tool for an error the model should read (bad id, policy violation...).

    The message becomes the tool's observation; the environment counts it as a tool error.
    """


class InfraError(Exception):
    """Raised by a tool (or an environment) when the machinery behind it failed: a sandbox server
    that stopped, a grading that could not run for that reason, a service that went away. Nothing
    the model did, so the episode does not score it: it ends with ``stop_reason == "infra_error"``
    and the cause in the record, and trainers and evaluations leave it out (docs/core.md, Failures).
    """


def cap_result(text: str, max_bytes: int = MAX_RESULT_BYTES) -> str:
    """``text`` as a tool result: encodable as UTF-8 (unpaired surrogates become U+FFFD) and at most
    ``max_bytes`` bytes, cut at a character boundary and ended by a marker saying what was cut
    (so capping twice changes nothing)."""
    text = scrub_text(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = f"\n[result truncated: {len(data)} bytes long; the part above is what fits in {max_bytes}]"
    return data[: max(0, max_bytes - len(marker))].decode("utf-8", errors="ignore") + marker


@dataclass(frozen=True)
class Tool:
    """A callable tool with its generated JSON Schema.

    Attributes:
        name: the name the model calls.
        description: first paragraph of the docstring.
        parameters: JSON Schema (``type: object``) of the arguments.
        fn: the underlying function (unbound when declared on a class).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def validation_error(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not fit the schema, or ``None`` when they do."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        error = jsonschema.exceptions.best_match(_validator(self).iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message


_VALIDATORS: dict[int, jsonschema.protocols.Validator] = {}


def _validator(t: Tool) -> jsonschema.protocols.Validator:
    # Building a validator costs more than validating; tools are immutable, so cache per tool.
    key = id(t)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = jsonschema.Draft202012Validator(t.parameters)
    return _VALIDATORS[key]


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Mark a function (usually an environment method) as a tool the model can call.

    Usable bare (``@tool``) or with a name override (``@tool(name="open")``). Every parameter
    except ``self`` must carry a type hint; parameters with defaults are optional.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__agentgym_tool__ = _build(f, name or f.__name__)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def tools_of(cls: type) -> list[Tool]:
    """The tools declared on ``cls`` and its bases, in definition order (bases first)."""
    found: dict[str, Tool] = {}
    for klass in reversed(cls.__mro__):
        for attr in vars(klass).values():
            t = getattr(attr, "__agentgym_tool__", None)
            if t is not None:
                found.pop(t.name, None)  # an override moves to its subclass's position
                found[t.name] = t
    return list(found.values())


def _build(fn: Callable[..., Any], name: str) -> Tool:
    hints = typing.get_type_hints(fn)
    doc = inspect.getdoc(fn) or ""
    arg_docs = _arg_docs(doc)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == "self":
            continue
        if param.name not in hints:
            raise TypeError(f"tool {name!r}: parameter {param.name!r} needs a type hint")
        prop = _json_schema(hints[param.name], f"{name}.{param.name}")
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif param.default is not None:
            prop["default"] = param.default
        properties[param.name] = prop
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    description = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    return Tool(name=name, description=description, parameters=parameters, fn=fn)


def _json_schema(hint: Any, where: str) -> dict[str, Any]:
    origin, args = get_origin(hint), get_args(hint)
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is Any:
        return {}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple) or hint in (list, tuple):
        return {"type": "array", "items": _json_schema(args[0], where)} if args else {"type": "array"}
    if origin is dict or hint is dict:
        if len(args) == 2:
            return {"type": "object", "additionalProperties": _json_schema(args[1], where)}
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # Optional[X]: optionality is expressed by the default
            return _json_schema(options[0], where)
        return {"anyOf": [_json_schema(a, where) for a in options]}
    raise TypeError(f"tool parameter {where}: unsupported type hint {hint!r}")


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    out: dict[str, str] = {}
    in_args, arg_indent, current = False, None, None
    for line in doc.splitlines():
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if not in_args or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section
        m = _ARG_LINE.match(line)
        if m and (arg_indent is None or indent == arg_indent):
            arg_indent, current = indent, m.group(1)
            out[current] = m.group(2).strip()
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}"
    return out
