"""A process-wide cache of tool results over the read-only snapshot.

The snapshot never changes, so a tool's result depends only on the tool and its arguments: the G
rollouts of a GRPO group that all search "population of Drelovia" should run the query once. The
cache is shared by every environment instance in the process (and thread-safe, for vector envs
stepped from threads); each environment counts its own hits and misses for ``info``.

Results and deterministic :class:`~agentgym.tools.ToolError` messages are cached alike; errors
marked ``cacheable = False`` (a query stopped by the wall-clock backstop) are recomputed.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym.tools import ToolError

__all__ = ["SHARED_CACHE", "CacheStats", "ToolCache"]


@dataclass
class CacheStats:
    """Hit and miss counts, with the hit rate."""

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before any lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ToolCache:
    """A bounded LRU map from (namespace, tool, arguments) to the tool's outcome (its text or error).

    Args:
        max_entries: entries kept; the least recently used go first.
        max_bytes: characters of keys and texts kept in all (about their bytes); the least recently
            used entries go first, and an outcome larger than this is returned but not kept.
    """

    def __init__(self, max_entries: int = 50_000, max_bytes: int = 64 << 20):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[str, tuple[bool, str]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Characters held, keys and texts together."""
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def call(self, namespace: str, tool: str, arguments: dict[str, Any], compute: Callable[[], str]) -> tuple[bool, str, bool]:
        """Return ``(ok, text, hit)``: the outcome of this call, from the cache when ``hit``.

        ``ok`` is false when the tool raised :class:`ToolError`; ``text`` is then its message.
        The computation runs outside the lock, so a slow query does not block other calls.
        """
        key = json.dumps([namespace, tool, arguments], sort_keys=True, ensure_ascii=False)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.stats.hits += 1
            else:
                self.stats.misses += 1
        if entry is not None:
            return entry[0], entry[1], True
        try:
            outcome = (True, compute())
        except ToolError as exc:
            outcome = (False, str(exc))
            if not getattr(exc, "cacheable", True):
                return outcome[0], outcome[1], False
        self._store(key, outcome)
        return outcome[0], outcome[1], False

    def clear(self) -> None:
        """Drop every entry and reset the counts."""
        with self._lock:
            self._entries.clear()
            self._size = 0
            self.stats = CacheStats()

    def _store(self, key: str, entry: tuple[bool, str]) -> None:
        size = len(key) + len(entry[1])
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:  # two threads computed the same call
                self._size -= len(key) + len(old[1])
            self._entries[key] = entry
            self._size += size
            while len(self._entries) > self.max_entries or self._size > self.max_bytes:
                gone_key, gone = self._entries.popitem(last=False)
                self._size -= len(gone_key) + len(gone[1])


SHARED_CACHE = ToolCache()
