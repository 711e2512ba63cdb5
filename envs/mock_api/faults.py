"""Seeded fault injection: which call of an episode fails, how, and what the client then sees.

A :class:`FaultPlan` is drawn per episode from the environment's RNG. It consumes the same three
random numbers for every call, whatever happens, so the n-th call of an episode meets the same
fault on every replay of the same seed and the same actions. Faults are transient by design: at
most ``max_consecutive`` calls in a row fail, so a client that retries correctly always gets
through.

Kinds, and when each applies:

- ``rate_limit``: 429 with ``Retry-After`` (1-5 s). Until the logical clock has moved that far,
  every call is refused again with 429 (those refusals are the client's fault, not injected).
- ``server_error`` (500) and ``unavailable`` (503, ``Retry-After: 1``): nothing was applied.
- ``timeout``: the response takes longer than the client's timeout. For a write, the change is
  applied first half of the time (``detail`` decides), which is what idempotency keys are for.
- ``malformed_json``: a success whose JSON body is cut short; the change was applied.
- ``empty_results`` / ``truncated_page``: a list page that comes back empty or short, with a
  ``Warning`` header; only on list endpoints whose page has items (two or more for truncation).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["FAULT_KINDS", "LIST_FAULTS", "REFUSALS", "FaultConfig", "FaultDraw", "FaultPlan", "garble", "refusal", "thin_page"]

FAULT_KINDS = ("rate_limit", "server_error", "unavailable", "timeout", "malformed_json", "empty_results", "truncated_page")
# Faults that replace the response before the request is handled (nothing is applied).
REFUSALS = ("rate_limit", "server_error", "unavailable")
# Faults that empty or shorten a successful list page.
LIST_FAULTS = ("empty_results", "truncated_page")

WARNINGS = {
    "empty_results": '199 deskly "search index is rebuilding; results may be incomplete, retry the request"',
    "truncated_page": '199 deskly "partial page: some results were dropped, retry the request"',
}


@dataclass(frozen=True)
class FaultConfig:
    """How often and how an episode's calls fail.

    Attributes:
        rate: probability that a call (after the warm-up) is faulted, in [0, 1].
        kinds: the fault kinds to draw from (a subset of :data:`FAULT_KINDS`).
        max_consecutive: at most this many faulted calls in a row; the next one is clean.
        warmup_calls: the first calls of every episode that are never faulted.
        ramp_episodes: curriculum over episodes: the rate grows linearly from 0 to ``rate``
            over this many episodes of one environment instance (0: full rate at once).
    """

    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    max_consecutive: int = 2
    warmup_calls: int = 0
    ramp_episodes: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.rate, int | float) or not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault_rate must be a number in [0, 1]; got {self.rate!r}")
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"fault_kinds must be a non-empty subset of {', '.join(FAULT_KINDS)}; got {list(self.kinds)!r}")
        for name in ("max_consecutive", "warmup_calls", "ramp_episodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (1 if name == "max_consecutive" else 0):
                raise ValueError(f"fault {name} must be an integer >= {1 if name == 'max_consecutive' else 0}; got {value!r}")

    def rate_for_episode(self, episode: int) -> float:
        """The fault rate of the ``episode``-th episode (0-based) under the ramp."""
        if self.ramp_episodes == 0:
            return self.rate
        return self.rate * min(1.0, (episode + 1) / self.ramp_episodes)


@dataclass(frozen=True)
class FaultDraw:
    """The plan's decision for one call.

    Attributes:
        kind: the fault to inject, or ``None``.
        detail: a number in [0, 1) that fixes the fault's particulars (Retry-After length, where
            a body is cut, whether a timed-out write was applied).
    """

    kind: str | None
    detail: float

    @property
    def retry_after(self) -> int:
        """Seconds a ``rate_limit`` fault asks the client to wait (1-5)."""
        return 1 + int(self.detail * 5)

    @property
    def write_applied(self) -> bool:
        """Whether a timed-out write was applied before its response was lost."""
        return self.detail < 0.5


class FaultPlan:
    """One episode's seeded sequence of fault decisions (see the module docstring).

    Args:
        config: rates and kinds.
        seed: the episode's fault seed, drawn from the environment's RNG.
        rate: this episode's rate (``config.rate`` unless a curriculum says otherwise).
    """

    def __init__(self, config: FaultConfig, seed: int, rate: float | None = None):
        self.config = config
        self.rate = config.rate if rate is None else rate
        self._rng = random.Random(seed)
        self._calls = 0
        self._streak = 0

    def draw(self, applicable: Collection[str]) -> FaultDraw:
        """The decision for the next call, restricted to the kinds ``applicable`` to its endpoint."""
        roll, pick, detail = self._rng.random(), self._rng.random(), self._rng.random()
        self._calls += 1
        if self._calls <= self.config.warmup_calls or roll >= self.rate or self._streak >= self.config.max_consecutive:
            return FaultDraw(None, detail)
        options = [k for k in self.config.kinds if k in applicable]
        return FaultDraw(options[int(pick * len(options))] if options else None, detail)

    def settle(self, injected: str | None) -> None:
        """Record whether the last drawn fault was really injected (response faults can miss)."""
        self._streak = self._streak + 1 if injected else 0


def refusal(kind: str, retry_after: int) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, error body and headers of a refusal fault."""
    if kind == "rate_limit":
        return 429, _error("rate_limited", f"too many requests: retry after {retry_after} s"), {"Retry-After": str(retry_after)}
    if kind == "unavailable":
        return 503, _error("unavailable", "service temporarily unavailable: retry after 1 s"), {"Retry-After": "1"}
    return 500, _error("internal_error", "internal server error: the request was not applied; retry"), {}


def garble(body: bytes, detail: float) -> bytes:
    """``body`` cut somewhere between 30% and 80% of its length: no longer valid JSON."""
    return body[: max(1, int(len(body) * (0.3 + 0.5 * detail)))]


def thin_page(page: dict[str, Any], kind: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A list page emptied or cut short, with its ``Warning`` header; ``None`` if it cannot be."""
    items = page["data"]
    if kind == "empty_results" and items:
        return {**page, "data": [], "total": 0, "next_page": None}, {"Warning": WARNINGS[kind]}
    if kind == "truncated_page" and len(items) >= 2:
        return {**page, "data": items[: math.ceil(len(items) / 2)]}, {"Warning": WARNINGS[kind]}
    return None


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
