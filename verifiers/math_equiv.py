"""Mathematical equivalence of two answers, bounded in time in any thread or process.

The comparison itself is math-verify's (LaTeX and plain expressions, sets, intervals, matrices,
relations, percentages, fractions against decimals rounded to 6 places), run in worker processes
of a :class:`~agentgym.verifiers.bounded.BoundedPool` that are killed when a call overruns its
limit. Two things happen before a worker is asked:

- plain numbers on both sides (``42``, ``-3.50``, ``$7$``, ``\\boxed{12}``) are decided in this
  process with exact decimal arithmetic whenever the answer cannot depend on math-verify's
  rounding rule, which is the common case of an RL math reward and costs microseconds;
- every verdict is cached (least recently used first out), because a group of sampled answers to
  one prompt repeats the same final answers.

Answers are answers, not whole responses: extract the final answer first
(:mod:`agentgym.verifiers.extract`). See ``docs/rewards.md`` for the policy choices.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from agentgym.verifiers.bounded import BoundedPool, Outcome

__all__ = [
    "DEFAULT_TIMEOUT",
    "MathCheck",
    "MathEquivalence",
    "check_math_equivalence",
    "math_equivalent",
    "math_equivalent_batch",
    "numeric_shortcut",
    "prepare_answer",
    "shared_math_equivalence",
]

DEFAULT_TIMEOUT = 5.0
"""Seconds one comparison may run before its worker is killed (math-verify's own default)."""

_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox")
# math-verify 0.9.0 reads an upright \mathrm{e} as a unit and drops it, so 1-1/\mathrm{e} and
# 1+1/\mathrm{e} both parse as 1; the plain letter is Euler's number to it.
_UPRIGHT_E = re.compile(r"\\mathrm\{\s*e\s*\}")
_PLAIN_NUMBER = re.compile(r"-?\d{1,100}(?:\.\d{1,100})?")
_MAX_BARE_NUMBER_CHARS = 300  # a plain number (at most 201 characters) with its wrapping
_OUTER_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# Where math-verify rounds: it compares numbers with a float on either side at 6 decimals, in
# SymPy floats of 15 significant digits.
_ROUNDING_STEP = Decimal("1e-6")
_FLOAT_DIGITS = 15
# Named, not imported: only the workers import SymPy and math-verify.
_WORKER_MODULE = "agentgym.verifiers._math_worker"
_WORKER_FUNCTION = f"{_WORKER_MODULE}:equivalent"


@dataclass(frozen=True)
class MathCheck:
    """A verdict with how it was reached.

    Attributes:
        equivalent: whether the answers are mathematically the same.
        method: ``"numeric"`` (exact decimal shortcut), ``"symbolic"`` (math-verify in a worker),
            ``"cached"``, or ``"invalid"`` (an empty answer, never compared).
        error: why the comparison could not finish (timeout, crash, bad input); the answers then
            count as not equivalent.
        timed_out: whether the comparison was killed at its time limit.
    """

    equivalent: bool
    method: Literal["numeric", "symbolic", "cached", "invalid"]
    error: str | None = None
    timed_out: bool = False


def prepare_answer(answer: str) -> str:
    """The answer as math-verify should read it: a bare answer is wrapped in ``$...$``.

    Wrapping matters: without delimiters math-verify's number extractor reads ``2x`` as ``2``,
    ``1,2,3`` as ``1.2`` and ``y = 2x + 1`` as ``1``.
    """
    answer = _UPRIGHT_E.sub("e", answer.strip())
    if answer and not _DELIMITED.search(answer):
        answer = f"${answer}$"
    return answer


def _bare_number(answer: str) -> str | None:
    if len(answer) > _MAX_BARE_NUMBER_CHARS:
        return None
    text = answer.strip()
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    boxed = _OUTER_BOXED.fullmatch(text)
    if boxed:
        text = boxed.group(1).strip()
    return text if _PLAIN_NUMBER.fullmatch(text) else None


def _significant_digits(number: str) -> int:
    return len(number.lstrip("-").replace(".", "").lstrip("0"))


def numeric_shortcut(prediction: str, reference: str) -> bool | None:
    """Decide two plain numbers exactly as math-verify would, or ``None`` when unsure.

    Equal values are equivalent. Integers that differ are not. With a decimal on either side,
    math-verify rounds both to 6 places, so values at least 1e-6 apart differ; closer values, and
    decimals longer than a SymPy float holds, are left to math-verify.
    """
    a, b = _bare_number(prediction), _bare_number(reference)
    if a is None or b is None:
        return None
    x, y = Decimal(a), Decimal(b)
    if x == y:
        return True
    if "." not in a and "." not in b:
        return False
    if max(_significant_digits(a), _significant_digits(b)) > _FLOAT_DIGITS:
        return None
    return False if abs(x - y) >= _ROUNDING_STEP else None


class _VerdictCache:
    """A thread-safe LRU map from prepared answer pairs to their checks."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, str], tuple[MathCheck, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str], timeout: float) -> MathCheck | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            check, limit = hit
            # A timeout under a shorter limit says nothing about a longer one.
            if check.timed_out and timeout > limit:
                return None
            self._items.move_to_end(key)
            return dataclasses.replace(check, method="cached")

    def put(self, key: tuple[str, str], check: MathCheck, timeout: float) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._items[key] = (check, timeout)
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class MathEquivalence:
    """Math-answer comparison with its own worker pool, time limit and verdict cache.

    The module-level functions share one default instance; build your own to choose the
    number of workers or the memory limit.

    Args:
        timeout: default seconds per comparison before the worker is killed.
        max_workers: worker processes (default: up to 4, at most the CPU count).
        memory_limit_mb: address-space limit of each worker.
        cache_size: how many verdicts to remember (0 disables the cache).

    Attributes:
        pool: the :class:`~agentgym.verifiers.bounded.BoundedPool` running the comparisons.
    """

    def __init__(
        self, *, timeout: float = DEFAULT_TIMEOUT, max_workers: int | None = None, memory_limit_mb: int | None = 2048, cache_size: int = 65536
    ) -> None:
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError("math equivalence needs the math-verify package: pip install 'math-verify>=0.9'")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.pool = BoundedPool(max_workers or max(1, min(4, os.cpu_count() or 1)), memory_limit_mb=memory_limit_mb, preload=(_WORKER_MODULE,))
        self._cache = _VerdictCache(cache_size)

    def check(self, prediction: str, reference: str, *, timeout: float | None = None) -> MathCheck:
        """Compare one answer with its reference."""
        return self.check_batch([(prediction, reference)], timeout=timeout)[0]

    def check_batch(self, pairs: Iterable[tuple[str, str]], *, timeout: float | None = None) -> list[MathCheck]:
        """Compare many ``(prediction, reference)`` pairs, in parallel across the workers."""
        limit = self.timeout if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {limit}")
        pairs = list(pairs)
        checks: dict[int, MathCheck] = {}
        pending: dict[tuple[str, str], list[int]] = {}  # identical pairs are compared once
        for index, (prediction, reference) in enumerate(pairs):
            _require_text(prediction, reference)
            key = (prepare_answer(prediction), prepare_answer(reference))
            decided = numeric_shortcut(prediction, reference)
            cached = self._cache.get(key, limit)
            if decided is not None:
                checks[index] = MathCheck(decided, "numeric")
            elif not key[0] or not key[1]:
                checks[index] = MathCheck(False, "invalid", "empty answer")
            elif cached is not None:
                checks[index] = cached
            else:
                pending.setdefault(key, []).append(index)
        keys = list(pending)
        outcomes: list[Outcome[bool]] = self.pool.map(_WORKER_FUNCTION, keys, timeout=limit)  # the worker returns a bool
        for key, outcome in zip(keys, outcomes, strict=False):
            check = MathCheck(bool(outcome.value) if outcome.ok else False, "symbolic", outcome.error, outcome.timed_out)
            if outcome.ok or outcome.timed_out:  # not a crash, which may not happen again
                self._cache.put(key, check, limit)
            for index in pending[key]:
                checks[index] = check
        return [checks[index] for index in range(len(pairs))]

    def close(self) -> None:
        """Stop the worker processes."""
        self.pool.close()


def _require_text(prediction: object, reference: object) -> None:
    for name, value in (("prediction", prediction), ("reference", reference)):
        if not isinstance(value, str):
            raise TypeError(f"math equivalence compares strings; {name} is {type(value).__name__}")


_default: MathEquivalence | None = None
_default_lock = threading.Lock()


def shared_math_equivalence() -> MathEquivalence:
    """The instance behind the module-level functions, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathEquivalence()
        return _default


def check_math_equivalence(prediction: str, reference: str, *, timeout: float = DEFAULT_TIMEOUT) -> MathCheck:
    """Like :func:`math_equivalent`, but says how the verdict was reached and what went wrong."""
    return shared_math_equivalence().check(prediction, reference, timeout=timeout)


def math_equivalent(prediction: str, reference: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Whether ``prediction`` is mathematically the same answer as ``reference``.

    Both are answers in LaTeX (``\\frac{1}{2}``, ``$[0, 1)$``, ``\\boxed{x^2+1}``) or plain
    notation (``1/2``, ``0.5``). The call never takes longer than ``timeout`` seconds of
    computation, in any thread; an answer that cannot be compared in time, or at all, is not
    equivalent.
    """
    return check_math_equivalence(prediction, reference, timeout=timeout).equivalent


def math_equivalent_batch(pairs: Sequence[tuple[str, str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[bool]:
    """:func:`math_equivalent` for many ``(prediction, reference)`` pairs, run in the worker pool."""
    return [check.equivalent for check in shared_math_equivalence().check_batch(pairs, timeout=timeout)]
