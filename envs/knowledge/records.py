"""The record types of the knowledge environments (SQL-v0, SearchQA-v0, ToolMath-v0): their tasks
and the entries they add to ``info``."""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations.
from typing import Any, TypedDict

from agentgym.records import TaskRecord

__all__ = ["KnowledgeInfo", "KnowledgeTask", "SQLTask", "SearchQATask", "ToolMathTask"]


class KnowledgeTask(TaskRecord):
    """A question over the synthetic world (SQL-v0, SearchQA-v0, ToolMath-v0)."""

    question: str
    answer: dict[str, Any]  # the expected answer and how it is compared: type, value, tolerance, ...
    solution: dict[str, Any]  # how the oracle finds it (a query, documents, facts and an expression)


class SQLTask(KnowledgeTask):
    """A task of SQL-v0."""


class SearchQATask(KnowledgeTask):
    """A task of SearchQA-v0."""

    hops: int  # documents the answer chains through


class ToolMathTask(KnowledgeTask):
    """A task of ToolMath-v0."""

    hops: int  # facts the computation needs


class KnowledgeInfo(TypedDict):
    """What the knowledge environments add to every ``info`` (``extra_info()``)."""

    cache_hits: int
    cache_misses: int
    faults: int  # seeded tool faults injected so far
