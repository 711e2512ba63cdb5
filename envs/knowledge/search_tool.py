"""Full-text search over the snapshot's articles (SQLite FTS5, BM25 ranking) and opening them.

The model's query is free text: it is reduced to its words, each quoted, and joined with ``OR``,
so FTS5 query syntax in model output (quotes, ``NEAR``, ``*``, column filters) can neither fail nor
change the meaning. Ranking is BM25 with title matches weighted up; equal scores are ordered by
document id, so the same query always returns the same list.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from typing import Any

from agentgym.envs.knowledge.names import slugify
from agentgym.envs.knowledge.snapshot import BM25_WEIGHTS
from agentgym.tools import ToolError

__all__ = ["MAX_RESULTS", "ArticleIndex"]

MAX_RESULTS = 10
MAX_QUERY_WORDS = 32
_WORD = re.compile(r"\w+")
_SEARCH_SQL = f"""
SELECT a.doc_id, a.title, snippet(articles_fts, 1, '', '', '...', 24)
FROM articles_fts JOIN articles AS a ON a.rowid = articles_fts.rowid
WHERE articles_fts MATCH ?
ORDER BY bm25(articles_fts, {BM25_WEIGHTS[0]}, {BM25_WEIGHTS[1]}), a.doc_id
LIMIT ?
"""


class ArticleIndex:
    """Search and open the encyclopedia articles of one snapshot.

    Args:
        connection: a read-only connection to the snapshot; this object owns it.
    """

    def __init__(self, connection: sqlite3.Connection):
        self._conn = connection
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the underlying connection."""
        self._conn.close()

    def search(self, query: str, k: int = 5) -> list[dict[str, str]]:
        """The ``k`` best-matching articles: ``[{"doc_id", "title", "snippet"}, ...]``.

        Raises:
            ToolError: ``k`` outside 1..10, or a query without any word.
        """
        if not 1 <= k <= MAX_RESULTS:
            raise ToolError(f"k must be between 1 and {MAX_RESULTS}; got {k}")
        words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_QUERY_WORDS]
        if not words:
            raise ToolError("the search query has no words to look for")
        match = " OR ".join(f'"{w}"' for w in words)
        with self._lock:
            rows = self._conn.execute(_SEARCH_SQL, (match, k)).fetchall()
        return [{"doc_id": doc_id, "title": title, "snippet": snippet} for doc_id, title, snippet in rows]

    def open(self, doc_id: str) -> dict[str, Any]:
        """The full article ``{"doc_id", "title", "text"}``.

        A title given instead of an id is accepted when it names an article exactly.

        Raises:
            ToolError: no article has this id.
        """
        with self._lock:
            row = self._conn.execute("SELECT doc_id, title, body FROM articles WHERE doc_id IN (?, ?)", (doc_id, slugify(doc_id))).fetchone()
        if row is None:
            raise ToolError(f"no article with doc_id {doc_id!r}; use a doc_id returned by search")
        return {"doc_id": row[0], "title": row[1], "text": row[2]}
