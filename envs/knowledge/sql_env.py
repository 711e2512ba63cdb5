"""Answering questions by querying a fixed SQLite snapshot of an invented world: :class:`SQLEnv`
(agentgym/SQL-v0) and the schema text it shows. The class docstring documents the environment in
Gymnasium's sections; ``docs/envs/sql.md`` is generated from it."""

from __future__ import annotations

from typing import Any, Literal

from agentgym.envs.knowledge.base import KnowledgeEnv
from agentgym.envs.knowledge.records import SQLTask
from agentgym.envs.knowledge.snapshot import open_readonly
from agentgym.envs.knowledge.sql_tool import ReadOnlySQL
from agentgym.envs.knowledge.world import FOREIGN_KEYS, TABLES
from agentgym.tools import tool

__all__ = ["SQLEnv", "SchemaStyle", "schema_text"]


SchemaStyle = Literal["full", "compact"]


def schema_text(style: SchemaStyle = "full") -> str:
    """The tables and their columns as shown to the agent.

    ``"full"``: every column with its SQLite type and description, then the foreign keys.
    ``"compact"``: one line per table, ``table(column, ...)``, with each foreign key and each column's
    :attr:`~agentgym.envs.knowledge.world.Column.note` beside its name; about 40 % of the full text's
    tokens, for small models whose training cost grows with the prompt.
    """
    if style == "full":
        return _full_schema()
    if style == "compact":
        return _compact_schema()
    raise ValueError(f"schema must be 'full' or 'compact'; got {style!r}")


def _full_schema() -> str:
    blocks = []
    for table, columns in TABLES.items():
        lines = [f"TABLE {table}"] + [f"  {c.name} {c.type} -- {c.description}" for c in columns]
        blocks.append("\n".join(lines))
    keys = [f"{table}.{column} -> {other}.id" for table, pairs in FOREIGN_KEYS.items() for column, other in pairs]
    return "\n\n".join(blocks) + "\n\nFOREIGN KEYS\n" + "\n".join(f"  {k}" for k in keys)


def _compact_schema() -> str:
    references = {(table, column): other for table, pairs in FOREIGN_KEYS.items() for column, other in pairs}
    lines = []
    for table, columns in TABLES.items():
        described = []
        for c in columns:
            other = references.get((table, c.name))
            described.append(c.name + (f" -> {other}.id" if other else "") + (f" ({c.note})" if c.note else ""))
        lines.append(f"{table}({', '.join(described)})")
    return "\n".join(lines)


class SQLEnv(KnowledgeEnv[SQLTask]):
    """agentgym/SQL-v0: answer a question with read-only SQL over the snapshot.

    ## Description

    The agent answers a question about an invented world (countries, cities, universities, people,
    companies, films/novels/albums and awards) by running SQL against a read-only SQLite snapshot whose
    schema is shown in the system message. The world is generated from a fixed seed, so no answer can
    be recalled from pretraining, and the snapshot never changes, so the same query always returns the
    same rows. Difficulty: easy questions read one table, medium ones join or aggregate once, hard ones
    join three or more tables or group and rank.

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``. Tools: ``sql(query)`` runs one read-only SELECT (writes, DDL,
    ``ATTACH``, ``PRAGMA`` changes, ``random()`` and clock functions are refused; a query is stopped
    after 10 million SQLite steps or 2 s; at most ``max_rows`` rows come back); ``answer(text)``
    submits the final answer and ends the episode.

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`): ``reset`` returns the system
    message (instructions and the schema) and the question; ``step`` returns one ``tool`` message per
    call (``{"columns", "rows", "row_count", "truncated"}`` as JSON, or ``Error: ...``), or a nudge to
    use the tools when the turn called none.

    ## Rewards

    Given once, on the final step: ``0.1·format + 0.4·execution + 0.5·completion``, hard-gated on
    completion (a wrong or missing answer scores 0).

    - completion: the submitted answer matches: numbers within the task's tolerance (one unit of the
      requested rounding, 0 for counts), names after normalisation (case, punctuation, articles),
      lists as sets of normalised names.
    - execution: share of executed tool calls that did not return an error.
    - format: share of turns without a malformed tool call.

    ## Starting State

    A task from the chosen split, drawn with the env's seeded RNG or named by
    ``options={"task_id": ...}``. The snapshot is built once per machine into ``$AGENTGYM_CACHE``
    (default ``~/.cache/agentgym``) and never rebuilt by ``reset``.

    ## Episode End

    Terminates when ``answer`` runs. Truncates after ``max_turns`` assistant turns (default 10).

    ## Arguments

    ``split``, ``tasks``, ``task_ids``, ``max_turns``, ``max_tool_calls``, ``render_mode`` (see
    :class:`agentgym.env.ToolEnv`); ``max_rows`` (default 50); ``tool_cache`` (``"instance"``,
    ``"process"``, ``"off"`` or a shared :class:`~agentgym.envs.knowledge.cache.ToolCache`; cache hits
    and misses of the episode are in ``info["cache_hits"]`` / ``info["cache_misses"]``); ``fault_rate``
    (default 0: each ``sql`` call fails with a transient error with this probability, drawn from the
    episode's seed and task; counted in ``info["faults"]``); ``max_consecutive_faults``
    (default ``None``: no cap; with a cap, that many failed calls in a row are followed by one that
    runs, and ``fault_rate`` may be 1); ``schema`` (``"full"``, the default: each
    column with its type and description, then the foreign keys; ``"compact"``: one line per table
    with the foreign keys and the few notes a column's name does not make clear, about 330 instead of
    785 tokens with SmolLM2's tokenizer).

    ## Version History

    - v0: initial release (600 generated tasks, 200 per difficulty, 70/15/15 train/val/test);
      ``fault_rate`` added (default off, so episodes without it are unchanged); ``max_consecutive_faults``
      added (default no cap, so episodes without it are unchanged); ``schema="compact"``
      added (default ``"full"``, so episodes without it are unchanged).
    """

    task_family = "knowledge/sql"
    default_max_turns = 10
    intro = (
        "You answer questions about a database by running SQL with the sql tool: one read-only SQLite "
        "SELECT statement per call, results capped at a few dozen rows.\n\nSchema:\n"
    )

    def __init__(self, *, max_rows: int = 50, schema: SchemaStyle = "full", **kwargs: Any):
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1; got {max_rows}")
        self.intro = type(self).intro + schema_text(schema)  # checks schema before anything is opened
        super().__init__(**kwargs)
        self.max_rows = max_rows
        self._db: ReadOnlySQL | None = None

    @property
    def db(self) -> ReadOnlySQL:
        """The guarded SQL executor, opened on first use."""
        if self._db is None:
            self._db = ReadOnlySQL(open_readonly(self.snapshot), max_rows=self.max_rows)
        return self._db

    @tool
    def sql(self, query: str) -> str:
        """Run one read-only SQLite SELECT query on the database and return the rows as JSON.

        Args:
            query: a single SELECT statement, e.g. "SELECT name FROM cities WHERE population > 1000000".
        """
        return self.cached("sql", {"query": query, "max_rows": self.max_rows}, lambda: self.db.run(query))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        super().close()
