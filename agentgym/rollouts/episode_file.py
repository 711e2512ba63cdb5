"""The output file of ``agentgym eval`` and ``agentgym rollout``: each episode written as it finishes,
so an interrupted run keeps its work and a rerun with the same arguments resumes it.

While a run goes on, every finished episode is one JSON line appended and flushed to the working
file: the output itself for JSON lines, ``OUT.jsonl`` beside ``OUT.parquet`` for Parquet. A
hidden note beside it holds the run's settings until the run completes. On completion the lines
are put in the run's order (the order an uninterrupted run writes them in) and, for Parquet,
converted; the note goes, so the file is exactly what an uninterrupted run writes.

A run that finds the note of an unfinished run at its output resumes it when its settings are the
same (the finished episodes are kept and not played again) and refuses, naming what differs, when
they are not. Without a note, the output is replaced as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import IO, Any

from agentgym.rollouts.io import to_json_line

__all__ = ["EpisodeFile"]


class EpisodeFile:
    """Episode records written as they finish, resumable.

    Args:
        path: the output (``.parquet`` for Parquet, the ``data`` extra; JSON lines otherwise).
        settings: what decides the episodes (environment, policy, seeds, sampling): a run with other
            settings must not resume this one. JSON values.
        key: an episode's place in the run, from its record (e.g. its group and member); the
            completed file is ordered by it.
    """

    def __init__(self, path: str | Path, settings: Mapping[str, Any], key: Callable[[Mapping[str, Any]], Any]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"cannot write {path}: it is a directory")
        self.parquet = self.path.suffix == ".parquet"
        self.working = self.path.with_name(self.path.name + ".jsonl") if self.parquet else self.path
        self._note = self.path.with_name(f".{self.path.name}.run.json")
        self.settings = json.loads(json.dumps(dict(settings)))  # as they read back from the note
        self.key = key
        self._lines: dict[Any, str] = {}  # key -> line; keys sort (ints, tuples of ints)
        self._out: IO[str] | None = None

    def open(self) -> list[dict[str, Any]]:
        """Start writing; returns the records of the unfinished run this one resumes (none for a new run).

        Raises:
            ValueError: the output holds an unfinished run with other settings, or cannot be written.
        """
        if self.parquet:
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ValueError(f"writing {self.path.name} needs the data extra: pip install 'agentgym[data]'") from None
        if not self.path.parent.is_dir():
            raise ValueError(f"cannot write {self.path}: its directory does not exist")
        if self.working.is_dir():
            raise ValueError(f"cannot write {self.working}: it is a directory")
        if not os.access(self.path.parent, os.W_OK):
            raise ValueError(f"cannot write {self.path}: its directory is not writable")
        resumed, length = self._resumable()
        for record in resumed:
            self._lines[_hashable(self.key(record))] = to_json_line(record)
        if resumed:
            os.truncate(self.working, length)  # a line cut off by a killed process goes
            self._out = open(self.working, "a", encoding="utf-8")  # noqa: SIM115 - closed by complete() or close()
        # A new run touches nothing on disk until its first episode: a run that fails to start
        # (a model that will not load) leaves an earlier output as it was.
        return resumed

    def _resumable(self) -> tuple[list[dict[str, Any]], int]:
        """The finished records of an unfinished run with the same settings at this output, and
        the length in bytes of the lines that hold them."""
        if not (self._note.is_file() and self.working.is_file()):
            return [], 0
        try:
            earlier = json.loads(self._note.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return [], 0  # not a note this class wrote: start over
        if earlier != self.settings:
            differs = sorted(k for k in {*earlier, *self.settings} if earlier.get(k) != self.settings.get(k))
            shown = ", ".join(f"{k} {json.dumps(earlier.get(k))} there, {json.dumps(self.settings.get(k))} now" for k in differs)
            raise ValueError(
                f"{self.working} holds an unfinished run with other settings ({shown}); "
                "rerun with those to resume it, or write to another --out (or delete that file) to start over"
            )
        records = []
        length = 0
        with open(self.working, "rb") as lines:
            for line in lines:
                try:
                    records.append(json.loads(line))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    break  # the last line, cut off when the process was killed mid-write
                if not line.endswith(b"\n"):
                    records.pop()  # complete JSON but cut before its newline: written again
                    break
                length += len(line)
        return records, length

    @property
    def finished(self) -> int:
        """Episodes in the file so far."""
        return len(self._lines)

    def keys(self) -> set[Any]:
        """The keys of the episodes in the file."""
        return set(self._lines)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one finished episode (flushed: it survives the process)."""
        if self._out is None:  # the new run's first episode: from now on the output is this run's
            self._note.write_text(json.dumps(self.settings, sort_keys=True) + "\n", encoding="utf-8")
            self._out = open(self.working, "w", encoding="utf-8")  # noqa: SIM115 - closed by complete() or close()
        line = to_json_line(record)
        self._out.write(line + "\n")
        self._out.flush()
        self._lines[_hashable(self.key(record))] = line

    def complete(self) -> None:
        """The run is over: order the episodes, convert to Parquet where asked, drop the note."""
        self.close()
        ordered = [self._lines[k] for k in sorted(self._lines)]
        if self.parquet:
            from agentgym.rollouts.parquet import write_parquet

            partial = self.path.with_name(f".{self.path.name}.partial")
            write_parquet(partial, [json.loads(line) for line in ordered])
            os.replace(partial, self.path)
            self.working.unlink(missing_ok=True)
        else:
            partial = self.path.with_name(f".{self.path.name}.partial")
            partial.write_text("".join(line + "\n" for line in ordered), encoding="utf-8")
            os.replace(partial, self.path)
        self._note.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop writing; what was written stays, and a rerun resumes from it."""
        if self._out is not None:
            self._out.close()
            self._out = None


def _hashable(key: Any) -> Hashable:
    return tuple(key) if isinstance(key, list) else key
