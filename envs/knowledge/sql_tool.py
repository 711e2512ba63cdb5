"""Running the model's SQL against the snapshot safely.

Four layers, each enough on its own for some attacks and together for all we test:

* the connection is opened read-only (``mode=ro&immutable=1``), so SQLite itself refuses writes;
* an authorizer allows only reading the entity tables with a whitelist of deterministic
  functions: writes, DDL, ``ATTACH``, transactions, ``PRAGMA`` other than schema inspection,
  ``random()`` and the clock are denied with a reason the model can read;
* a progress handler stops a query after a fixed number of virtual-machine steps (deterministic:
  the same query is stopped at the same point on every machine) or, as a backstop, after a
  wall-clock limit; ``sqlite3.Connection.setlimit`` caps string sizes and nesting;
* results are capped at ``max_rows`` rows and long cells are shortened.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from typing import Any

from agentgym.envs.knowledge.world import TABLES
from agentgym.tools import ToolError

__all__ = ["ALLOWED_FUNCTIONS", "QueryInterrupted", "ReadOnlySQL"]

# Deterministic scalar, aggregate and window functions. Absent on purpose: random, randomblob,
# the date/time functions (they read the wall clock with 'now'), load_extension, zeroblob, and
# printf/format, whose width argument builds a huge string inside one VM step, out of reach of the
# progress handler.
ALLOWED_FUNCTIONS = frozenset(
    [
        "abs",
        "avg",
        "char",
        "coalesce",
        "count",
        "group_concat",
        "hex",
        "ifnull",
        "iif",
        "instr",
        "length",
        "like",
        "glob",
        "lower",
        "ltrim",
        "max",
        "min",
        "nullif",
        "quote",
        "replace",
        "round",
        "rtrim",
        "sign",
        "substr",
        "substring",
        "sum",
        "total",
        "trim",
        "typeof",
        "unicode",
        "upper",
        "row_number",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
        "ntile",
        "lag",
        "lead",
        "first_value",
        "last_value",
        "nth_value",
        "acos",
        "asin",
        "atan",
        "atan2",
        "ceil",
        "ceiling",
        "cos",
        "degrees",
        "exp",
        "floor",
        "ln",
        "log",
        "log10",
        "log2",
        "mod",
        "pi",
        "pow",
        "power",
        "radians",
        "sin",
        "sqrt",
        "tan",
        "trunc",
    ]
)
_READ_ONLY_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "foreign_key_list"})
_READABLE_TABLES = frozenset(TABLES) | {"sqlite_master", "sqlite_schema"}
_SCHEMA_TABLES = ("sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema")
_SCHEMA_CHANGE = "changing the database schema"
_WRITE_STATEMENTS = frozenset(
    [
        "INSERT",
        "UPDATE",
        "DELETE",
        "REPLACE",
        "CREATE",
        "DROP",
        "ALTER",
        "ATTACH",
        "DETACH",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
        "BEGIN",
        "COMMIT",
        "END",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
    ]
)
_FIRST_WORD = re.compile(r"\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*([A-Za-z]+)", re.DOTALL)
# Authorizer action codes the model may trigger, named for error messages.
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.lower().replace("_", " ")
    for name in (
        "INSERT",
        "UPDATE",
        "DELETE",
        "CREATE_TABLE",
        "CREATE_TEMP_TABLE",
        "CREATE_INDEX",
        "CREATE_TEMP_INDEX",
        "CREATE_VIEW",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_TEMP_TRIGGER",
        "CREATE_VTABLE",
        "DROP_TABLE",
        "DROP_TEMP_TABLE",
        "DROP_INDEX",
        "DROP_TEMP_INDEX",
        "DROP_VIEW",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_TEMP_TRIGGER",
        "DROP_VTABLE",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "ATTACH",
        "DETACH",
        "TRANSACTION",
        "SAVEPOINT",
        "PRAGMA",
    )
}
_PROGRESS_EVERY = 1_000  # VM instructions between progress-handler calls
_CELL_LIMIT = 300


class QueryInterrupted(ToolError):
    """The query ran past its step or time budget. Not cached: the wall-clock backstop can vary."""

    cacheable = False


class ReadOnlySQL:
    """A guarded, read-only SQL executor over one snapshot file.

    Args:
        connection: a connection opened with :func:`agentgym.envs.knowledge.snapshot.open_readonly`;
            this object installs its guards on it and owns it from then on.
        max_rows: rows returned at most; the result says when more existed.
        max_steps: SQLite VM instructions a query may run (deterministic budget).
        time_limit_s: wall-clock backstop for one query.
        max_query_chars: longest accepted query text.
    """

    def __init__(
        self, connection: sqlite3.Connection, *, max_rows: int = 50, max_steps: int = 10_000_000, time_limit_s: float = 2.0, max_query_chars: int = 4_000
    ):
        self.max_rows = max_rows
        self.max_steps = max_steps
        self.time_limit_s = time_limit_s
        self.max_query_chars = max_query_chars
        self._conn = connection
        self._lock = threading.Lock()
        self._denied: list[str] = []
        # names that are real tables: anything else an authorizer READ names is a CTE or subquery
        self._tables = frozenset(r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        self._steps = 0
        self._deadline = 0.0
        for limit, value in (
            (sqlite3.SQLITE_LIMIT_LENGTH, 100_000),
            (sqlite3.SQLITE_LIMIT_SQL_LENGTH, max_query_chars * 4),
            (sqlite3.SQLITE_LIMIT_ATTACHED, 0),
            (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 100),
            (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 20),
            (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 200),  # LIKE/GLOB with many wildcards backtracks
        ):
            connection.setlimit(limit, value)
        connection.set_authorizer(self._authorize)
        connection.set_progress_handler(self._progress, _PROGRESS_EVERY)

    def close(self) -> None:
        """Close the underlying connection."""
        self._conn.close()

    def run(self, query: str) -> dict[str, Any]:
        """Execute one SELECT statement.

        Returns:
            ``{"columns": [...], "rows": [[...], ...], "row_count": n, "truncated": bool}``;
            ``row_count`` counts the rows returned, ``truncated`` says more rows existed.

        Raises:
            ToolError: a clear reason: not read-only, a denied function or table, a syntax
                error, or a budget exceeded (:class:`QueryInterrupted`).
        """
        query = query.strip()
        if not query:
            raise ToolError("the query is empty")
        if len(query) > self.max_query_chars:
            raise ToolError(f"the query is {len(query)} characters long; the limit is {self.max_query_chars}")
        first = _FIRST_WORD.match(query)
        if first is not None and first.group(1).upper() in _WRITE_STATEMENTS:
            # a friendlier message for the common case; the authorizer is what enforces it
            raise ToolError(f"not allowed: {first.group(1).upper()} statements. Only read-only SELECT queries are permitted")
        with self._lock:
            self._denied = []
            self._steps = 0
            self._deadline = time.monotonic() + self.time_limit_s
            try:
                cursor = self._conn.execute(query)
                rows = cursor.fetchmany(self.max_rows + 1)
                columns = [d[0] for d in cursor.description or ()]
                cursor.close()
            except sqlite3.Error as exc:
                raise self._explain(exc) from None
            except (OverflowError, ValueError, MemoryError) as exc:  # e.g. an integer too large to bind
                raise ToolError(f"the query failed: {exc}") from None
        truncated = len(rows) > self.max_rows
        rows = rows[: self.max_rows]
        return {"columns": columns, "rows": [[_cell(v) for v in row] for row in rows], "row_count": len(rows), "truncated": truncated}

    def _explain(self, exc: sqlite3.Error) -> ToolError:
        if self._denied:
            # internal bookkeeping on the schema tables is denied too, but the user's own
            # statement is the reason worth reporting
            reasons = [r for r in self._denied if r != _SCHEMA_CHANGE] or self._denied
            return ToolError(f"not allowed: {reasons[0]}. Only read-only SELECT queries on the tables in the schema are permitted")
        message = str(exc)
        if "interrupted" in message:
            return QueryInterrupted(
                f"the query was stopped: it exceeded its budget of {self.max_steps:,} steps or {self.time_limit_s:g} s. "
                "Add a WHERE clause or a LIMIT, or avoid unbounded joins and recursion"
            )
        if "one statement at a time" in message:
            return ToolError("only one SQL statement per call is allowed")
        if "readonly" in message or "read-only" in message:
            return ToolError("not allowed: the database is read-only")
        return ToolError(f"SQL error: {message}")

    def _progress(self) -> int:
        self._steps += _PROGRESS_EVERY
        return int(self._steps > self.max_steps or time.monotonic() > self._deadline)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db_name: str | None, trigger: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if db_name in (None, "main") and (arg1 in _READABLE_TABLES or arg1 not in self._tables):
                return sqlite3.SQLITE_OK
            return self._deny(f"reading table {arg1!r}")
        if action == sqlite3.SQLITE_FUNCTION:
            if arg2 is not None and arg2.lower() in ALLOWED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            return self._deny(f"the function {arg2}()")
        if action == sqlite3.SQLITE_PRAGMA:
            if arg1 is not None and arg1.lower() in _READ_ONLY_PRAGMAS:
                return sqlite3.SQLITE_OK
            return self._deny(f"PRAGMA {arg1}")
        if arg1 in _SCHEMA_TABLES:
            return self._deny(_SCHEMA_CHANGE)
        what = _ACTION_NAMES.get(action, f"operation {action}")
        return self._deny(f"{what} {arg1}" if arg1 else what)

    def _deny(self, reason: str) -> int:
        self._denied.append(reason)
        return sqlite3.SQLITE_DENY


def _cell(value: Any) -> Any:
    if isinstance(value, bytes):
        value = "x'" + value.hex() + "'"
    if isinstance(value, str) and len(value) > _CELL_LIMIT:
        return value[:_CELL_LIMIT] + "..."
    return value
