"""A checker of records against their TypedDicts, key by key, nested values included; an
environment's own ``info`` entries are read through its class (``ToolEnv.record_types()``)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, Required, Union

from agentgym import records as R
from agentgym.envs import env_class


def problems(value: Any, tp: Any, where: str = "record", read_as: Mapping[Any, Any] | None = None) -> list[str]:
    """Everything in ``value`` that does not match the type ``tp`` (empty when it matches).

    TypedDicts are checked key by key (no undeclared key, every required key), containers item by
    item, unions by their members, literals by value. ``read_as`` replaces types wherever they occur
    (an environment's own ``StepInfo``, with its entries, for the core's).
    """
    read_as = read_as or {}
    tp = read_as.get(tp, tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return []
    if origin in (NotRequired, Required):
        return problems(value, args[0], where, read_as=read_as)
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a {tp.__name__}"]
        hints = typing.get_type_hints(tp, include_extras=True)
        assert set(hints) == tp.__required_keys__ | tp.__optional_keys__
        found = [f"{where}: key {key!r} is not declared in {tp.__name__}" for key in value if key not in hints]
        found += [f"{where}: required key {key!r} of {tp.__name__} is missing" for key in sorted(tp.__required_keys__ - set(value))]
        for key, item in value.items():
            if key in hints:
                found += problems(item, hints[key], f"{where}[{key!r}]", read_as=read_as)
        return found
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {args}"]
    if origin in (Union, types.UnionType):
        options = [problems(value, arg, where, read_as=read_as) for arg in args]
        return [] if any(not p for p in options) else [f"{where}: {value!r} matches none of {args}: {options}"]
    if tp is type(None) or tp is None:
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if origin in (list, tuple, dict):
        if not isinstance(value, origin):
            return [f"{where}: {type(value).__name__}, not a {origin.__name__}"]
        if origin is dict:
            return [
                p
                for k, v in value.items()
                for p in problems(k, args[0], f"{where} key", read_as=read_as) + problems(v, args[1], f"{where}[{k!r}]", read_as=read_as)
            ]
        return [p for i, item in enumerate(value) for p in problems(item, args[0], f"{where}[{i}]", read_as=read_as)]
    if tp is float:  # an int is a float to the type system (JSON writes 1.0 as 1 only if told to)
        return [] if isinstance(value, int | float) and not isinstance(value, bool) else [f"{where}: {value!r} is not a float"]
    if tp is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{where}: {value!r} is not an int"]
    assert isinstance(tp, type), f"the checker does not know {tp!r}"
    return [] if isinstance(value, tp) else [f"{where}: {value!r} is not a {tp.__name__}"]


def assert_matches(value: Any, tp: Any, where: str = "record", env_id: str | None = None) -> None:
    """Fail on every problem of ``value`` as a ``tp``, reading ``info`` as ``env_id``'s declares it."""
    found = problems(value, tp, where, read_as=env_types(env_id) if env_id else None)
    assert not found, "\n".join(found[:20])


def env_types(env_id: str) -> dict[Any, Any]:
    """The core's info types -> ``env_id``'s, found through its class."""
    declared = env_class(env_id).record_types()
    return {R.StepInfo: declared.step_info, R.ResetInfo: declared.reset_info}
