"""Episode records as Parquet with real nested types, and back.

The Arrow schema comes from the record types of :mod:`agentgym.records` (their type hints), so
``messages`` is a list of structs, ``steps[].info`` a struct, token ids a list of integers, in
pandas, pyarrow and ``datasets`` alike. What the types leave open is settled by the records:

* a column or struct field is there when some record has it (a rollout file has no
  ``trajectory``; an environment's info has its own counters), so every file of an environment
  and record kind has one schema;
* ``dict[str, float]`` and ``dict[str, int]`` (``reward_components``,
  ``policy_violations_by_rule``) become structs of the keys the records use (an environment's
  reward has fixed components);
* values typed ``Any`` (``env_kwargs``, ``trajectory.messages``, which may hold anything JSON
  does) are stored as JSON text;
* keys the types do not declare (an environment of your own adding info) get the type Arrow
  infers from their values, or JSON text when it cannot.

:func:`read_parquet` reverses it: it drops the nulls that stand for keys a record did not have and
parses the JSON text, so the records equal the JSON lines they were written from.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from agentgym.records import LabelledRecord, TrajectoryRecord

__all__ = ["read_parquet", "records_schema", "write_parquet"]

_JSON = object()
"""The type of a value kept as JSON text."""
_JSON_KEY = b"agentgym.json"
"""Field metadata marking a string field that holds JSON text."""


def _fields(typed: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's field types and its required keys."""
    return get_type_hints(typed), frozenset(typed.__required_keys__)


class _RecordFields(TrajectoryRecord, LabelledRecord):
    """Every field an episode record may have: the richest line (``agentgym eval --out``) and a labelled one."""


_RECORD_FIELDS = get_type_hints(_RecordFields)


def _strip_optional(hint: Any) -> Any:
    """``X | None`` as ``X`` (Arrow values are nullable anyway)."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else Any
    return hint


def _arrow_type(hint: Any, samples: Sequence[Any]) -> Any:
    """The Arrow type of values of type ``hint``, given every non-null value the records hold."""
    import pyarrow as pa

    hint = _strip_optional(hint)
    origin = get_origin(hint)
    if hint is str or origin is Literal:
        return pa.string()
    if hint is bool:
        return pa.bool_()
    if hint is int:
        return pa.int64()
    if hint is float:
        return pa.float64()
    if is_typeddict(hint):
        hints, _ = _fields(hint)
        # Parquet has no empty structs: with no value to go by, every declared field.
        return _struct(hints, samples) if any(samples) else _struct(hints, [dict.fromkeys(hints)])
    if origin in (list, tuple):
        element = get_args(hint)[0]
        return pa.list_(_field("element", _arrow_type(element, [v for sample in samples for v in sample if v is not None])))
    if origin is dict and get_args(hint)[1] is not Any:
        keys = list(dict.fromkeys(k for sample in samples for k in sample))
        return _struct(dict.fromkeys(keys, get_args(hint)[1]), samples) if keys else _JSON
    return _JSON


def _struct(hints: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> Any:
    """A struct of the fields the samples have, in their order, typed by ``hints`` where it declares them."""
    import pyarrow as pa

    names = list(dict.fromkeys(k for sample in samples for k in sample))  # the records' own order
    fields = []
    for name in names:
        values = [s[name] for s in samples if s.get(name) is not None]
        arrow = _arrow_type(hints[name], values) if name in hints else _inferred(values)
        fields.append(_field(name, arrow))
    return pa.struct(fields)


def _field(name: str, arrow: Any) -> Any:
    """An Arrow field; a value kept as JSON text is a string field marked so."""
    import pyarrow as pa

    return pa.field(name, pa.string(), metadata={_JSON_KEY: "1"}) if arrow is _JSON else pa.field(name, arrow)


def _inferred(values: Sequence[Any]) -> Any:
    """Arrow's own type for values no record type declares; JSON text when it has none."""
    import pyarrow as pa

    try:
        inferred = pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return _JSON
    return _JSON if pa.types.is_null(inferred) else inferred


def records_schema(records: Sequence[Mapping[str, Any]]) -> Any:
    """The Arrow schema of episode records (see the module docstring)."""
    import pyarrow as pa

    return pa.schema(list(_struct(_RECORD_FIELDS, records)))


def _encode(value: Any, arrow: Any) -> Any:
    """A record value in the form ``pyarrow`` builds ``arrow`` from (JSON text where the type says)."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_struct(arrow):
        return {f.name: _field_encoded(value.get(f.name), f) for f in arrow}
    if pa.types.is_list(arrow):
        return [_field_encoded(v, arrow.value_field) for v in value]
    return value


def _field_encoded(value: Any, field: Any) -> Any:
    if field.metadata and field.metadata.get(_JSON_KEY) and value is not None:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    return _encode(value, field.type)


def _decode(value: Any, arrow: Any, hint: Any) -> Any:
    """Inverse of :func:`_encode`: a value of Arrow type ``arrow`` (record type ``hint``, for which
    keys are required) as pyarrow read it back."""
    import pyarrow as pa

    if value is None:
        return None
    hint = _strip_optional(hint)
    if pa.types.is_struct(arrow):
        hints, required = _fields(hint) if is_typeddict(hint) else ({}, frozenset())
        if get_origin(hint) is dict:
            hints = dict.fromkeys(value, get_args(hint)[1])
        return {f.name: _field_value(value[f.name], f, hints.get(f.name)) for f in arrow if value[f.name] is not None or f.name in required}
    if pa.types.is_list(arrow):
        element = get_args(hint)[0] if get_origin(hint) in (list, tuple) else None
        return [_field_value(v, arrow.value_field, element) for v in value]
    return value


def _field_value(value: Any, field: Any, hint: Any) -> Any:
    if field.metadata and field.metadata.get(_JSON_KEY) and value is not None:
        return json.loads(value)
    return _decode(value, field.type, hint)


def write_parquet(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Write episode records to a Parquet file with the schema of :func:`records_schema`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = list(records)
    schema = records_schema(records)
    columns = [pa.array([_field_encoded(r.get(f.name), f) for r in records], type=f.type) for f in schema]
    pq.write_table(pa.Table.from_arrays(columns, schema=schema), str(path))


def read_parquet(path: str | Path) -> list[dict[str, Any]]:
    """The episode records of a file :func:`write_parquet` wrote, as the JSON lines hold them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(str(path))
    root = pa.struct(list(table.schema))
    return [_decode(row, root, _RecordFields) for row in table.to_pylist()]
