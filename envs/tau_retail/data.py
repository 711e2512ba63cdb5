"""τ-bench retail's database and tasks, read from the bundled copies in ``tasks/tau_retail/``.

The three tables (``orders``, ``products``, ``users``) are parsed once per process and shared.
Each episode gets a :class:`RetailDB`, a copy-on-write view: a record is deep-copied the first
time a tool writes it, so an episode starts from the pristine data without copying 2.3 MB, and
comparing two episodes' databases only has to look at the records either of them wrote.

The two whole-database hashes of ``SOURCE.md`` are kept exactly:

* :meth:`RetailDB.tau_bench_hash`: τ-bench's ``Env.get_data_hash()``, the SHA-256 of
  ``str(to_hashable(db))`` (dicts become key-sorted tuples of pairs, lists become tuples);
* :meth:`RetailDB.json_sha256`: the SHA-256 of ``json.dumps(db, sort_keys=True)``.

Both are streamed from per-record pieces, those of unwritten records computed once per process.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = ["TABLES", "RetailDB", "read_bundled", "to_hashable"]

TABLES = ("orders", "products", "users")
DATA = resources.files("agentgym.tasks") / "tau_retail"

Record = dict[str, Any]
Piece = Callable[[str, Record], str]


def read_bundled(name: str) -> Any:
    """The bundled JSON file ``tasks/tau_retail/{name}.json.gz``, parsed."""
    with (DATA / f"{name}.json.gz").open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
        return json.load(text)


@functools.cache
def _pristine() -> dict[str, dict[str, Record]]:
    # Shared by every episode: nothing may write into these records (RetailDB copies first).
    return {table: read_bundled(table) for table in TABLES}


def to_hashable(value: Any) -> Any:
    """τ-bench's canonical form: dicts become tuples of (key, value) sorted by key, lists tuples."""
    if isinstance(value, dict):
        return tuple((key, to_hashable(item)) for key, item in sorted(value.items()))
    if isinstance(value, list):
        return tuple(to_hashable(item) for item in value)
    return value


def _tau_piece(key: str, record: Record) -> str:
    """One record as it appears inside ``str(to_hashable(db))``."""
    return repr((key, to_hashable(record)))


def _json_piece(key: str, record: Record) -> str:
    """One record as it appears inside ``json.dumps(db, sort_keys=True)``."""
    return f"{json.dumps(key)}: {json.dumps(record, sort_keys=True)}"


@functools.cache
def _pristine_pieces(piece: Piece, table: str) -> dict[str, str]:
    return {key: piece(key, record) for key, record in _pristine()[table].items()}


class RetailDB:
    """One episode's database: the shared pristine tables, each record copied on its first write.

    Tools read records through :attr:`orders`, :attr:`users` and :attr:`products` and must call
    :meth:`writable` before changing one.
    """

    def __init__(self) -> None:
        self._tables = {table: dict(records) for table, records in _pristine().items()}
        self.written: set[tuple[str, str]] = set()

    @property
    def orders(self) -> dict[str, Record]:
        return self._tables["orders"]

    @property
    def users(self) -> dict[str, Record]:
        return self._tables["users"]

    @property
    def products(self) -> dict[str, Record]:
        return self._tables["products"]

    def writable(self, table: str, key: str) -> Record:
        """The record ``table[key]``, copied out of the shared data first if this episode has not yet."""
        if (table, key) not in self.written:
            self._tables[table][key] = copy.deepcopy(self._tables[table][key])
            self.written.add((table, key))
        return self._tables[table][key]

    def record_text(self, table: str, key: str) -> str:
        """The record in τ-bench's hashed form, so that equal texts mean equal hashes."""
        return _tau_piece(key, self._tables[table][key])

    def differences(self, other: RetailDB) -> list[str]:
        """The records (``"orders/#W0000000"``) whose τ-bench form differs between the two databases."""
        touched = sorted(self.written | other.written)
        return [f"{table}/{key}" for table, key in touched if not self._same_record(other, table, key)]

    def _same_record(self, other: RetailDB, table: str, key: str) -> bool:
        try:
            return self.record_text(table, key) == other.record_text(table, key)
        except RecursionError:
            # A value nested too deep to render, which only errors="upstream" stores (it passes the
            # arguments on as given): no record of τ-bench's data, hence of a ground truth, is.
            return False

    def tau_bench_hash(self) -> str:
        """τ-bench's ``Env.get_data_hash()`` of this database."""
        return self._digest(_TAU_FORM)

    def json_sha256(self) -> str:
        """SHA-256 of ``json.dumps(db, sort_keys=True)``."""
        return self._digest(_JSON_FORM)

    def _digest(self, form: _Form) -> str:
        parts = [f"{form.table_open.format(table)}{form.join(list(self._pieces(form.piece, table)))}{form.table_close}" for table in TABLES]
        return hashlib.sha256(f"{form.open}{', '.join(parts)}{form.close}".encode()).hexdigest()

    def _pieces(self, piece: Piece, table: str) -> Iterator[str]:
        pristine = _pristine_pieces(piece, table)
        records = self._tables[table]
        for key in sorted(records):
            yield piece(key, records[key]) if (table, key) in self.written else pristine[key]


def _tuple_body(items: list[str]) -> str:
    # str() of a tuple: a one-element tuple keeps its trailing comma.
    return items[0] + "," if len(items) == 1 else ", ".join(items)


@dataclass(frozen=True)
class _Form:
    """How a whole-database text is built from per-record pieces."""

    piece: Piece
    open: str
    table_open: str  # formatted with the table name
    join: Callable[[list[str]], str]
    table_close: str
    close: str


_TAU_FORM = _Form(_tau_piece, "(", "('{}', (", _tuple_body, "))", ")")
_JSON_FORM = _Form(_json_piece, "{", '"{}": {{', ", ".join, "}", "}")
