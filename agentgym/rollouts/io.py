"""Episode record files: JSON lines (and Parquet, through :mod:`agentgym.rollouts.parquet`), written and read."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from agentgym.parsing import UNPAIRED_SURROGATE
from agentgym.records import EpisodeRecord

__all__ = ["read_jsonl", "read_records", "to_json_line", "write_jsonl", "write_records"]

Row = TypeVar("Row", bound=Mapping[str, Any])


def to_json_line(record: Mapping[str, Any]) -> str:
    """Serialise a record as one line of JSON (deterministic; UTF-8 kept as is).

    Strings that UTF-8 cannot encode (unpaired surrogates, e.g. from a Python caller's action)
    are written as JSON escapes, so the line reads back to the same record instead of failing.
    """
    line = json.dumps(record, ensure_ascii=False, allow_nan=False)
    return UNPAIRED_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


def write_jsonl(path: str | Path, records: Iterable[Row]) -> list[Row]:
    """Write records to ``path`` (one per line) and return them.

    The file appears only once complete (written beside it, then renamed), so a failure midway
    never leaves a truncated file or destroys an existing one. What was written before the
    failure is kept, flushed line by line, in ``.{name}.partial`` beside it, and the error says so.
    """
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    written: list[Row] = []
    try:
        with open(partial, "w", encoding="utf-8") as out:
            for record in records:
                try:
                    line = to_json_line(record)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"record {len(written) + 1} for {path} is not JSON data ({exc})") from None
                out.write(line + "\n")
                out.flush()
                written.append(record)
    except BaseException as exc:
        if not written:
            partial.unlink(missing_ok=True)
        elif isinstance(exc, Exception):
            exc.add_note(f"the {len(written)} records written before the failure are in {partial}")
        raise
    os.replace(partial, path)
    return written


def write_records(path: str | Path, records: Iterable[Row]) -> list[Row]:
    """Write episode records as JSON lines (:func:`write_jsonl`), or as Parquet when ``path`` ends in
    ``.parquet`` (the ``data`` extra; nested types, see :mod:`agentgym.rollouts.parquet`). Returns the records."""
    path = Path(path)
    if path.suffix != ".parquet":
        return write_jsonl(path, records)
    from agentgym.rollouts.parquet import write_parquet

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ValueError(f"writing {path.name} needs the data extra: pip install 'agentgym[data]'") from None
    lines = path.with_name(f".{path.name}.jsonl")  # kept if the conversion fails, like a partial file
    written = write_jsonl(lines, records)
    partial = path.with_name(f".{path.name}.partial")
    write_parquet(partial, read_jsonl(lines))  # the records as the JSON lines hold them
    os.replace(partial, path)
    lines.unlink()
    return written


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file, with a clear error naming the first bad line."""
    records = []
    with open(path, encoding="utf-8") as src:
        for number, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    return records


def read_records(path: str | Path) -> list[EpisodeRecord]:
    """Read a JSONL file of episode records (``agentgym rollout --out``, ``agentgym eval --out``, a
    labelled set), typed as :class:`~agentgym.records.EpisodeRecord`. The lines are JSON, not
    checked against the type: a record of the richer kinds keeps its other fields."""
    return cast("list[EpisodeRecord]", read_jsonl(path))
