"""Checking a submitted answer against a task's answer specification.

A task's ``answer`` is ``{"type": "text" | "number" | "list", "value": ...}``:

* ``text``: normalised exact match (case, accents, punctuation and the articles a/an/the ignored);
* ``number``: the submission must contain exactly one number (thousands separators allowed),
  within ``tolerance`` of ``value``; a reply listing several candidates is wrong;
* ``list``: comma-, semicolon- or newline-separated items compared as a set of normalised names,
  so order does not matter but missing and extra items both fail.
"""

from __future__ import annotations

import re
from typing import Any

from agentgym.envs.knowledge.names import normalize_name
from agentgym.verifiers import RewardResult

__all__ = ["check_answer", "parse_single_number"]

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_ITEM_SEPARATORS = re.compile(r"[,;\n]")


def parse_single_number(text: str) -> float | None:
    """The one number in ``text`` (``"1,234.5 people"`` gives 1234.5), or ``None`` if not exactly one."""
    found = _NUMBER.findall(text)
    if len(found) != 1:
        return None
    return float(found[0].replace(",", ""))


def check_answer(given: str, spec: dict[str, Any]) -> RewardResult:
    """Score ``given`` against the task's answer ``spec``: 1.0 and ``passed`` when it matches."""
    kind = spec["type"]
    if kind == "number":
        return _check_number(given, float(spec["value"]), float(spec.get("tolerance", 0.0)))
    if kind == "list":
        return _check_list(given, spec["value"])
    if kind == "text":
        ok = normalize_name(given) == normalize_name(spec["value"])
        return _verdict(ok, given, spec["value"])
    raise ValueError(f"unknown answer type {kind!r}")


def _check_number(given: str, expected: float, tolerance: float) -> RewardResult:
    value = parse_single_number(given)
    if value is None:
        return RewardResult(0.0, f"the answer {given[:80]!r} does not contain exactly one number", passed=False)
    # a relative epsilon absorbs float noise in "exact" integer and decimal answers
    ok = abs(value - expected) <= tolerance + 1e-9 * max(1.0, abs(expected))
    return _verdict(ok, given, expected, {"parsed": value})


def _check_list(given: str, expected: list[str]) -> RewardResult:
    got = {normalize_name(item) for item in _ITEM_SEPARATORS.split(given) if normalize_name(item)}
    want = {normalize_name(item) for item in expected}
    if got == want:
        return _verdict(True, given, expected)
    missing, extra = len(want - got), len(got - want)
    return RewardResult(0.0, f"list answer has {missing} missing and {extra} extra item(s)", passed=False, details={"expected": expected})


def _verdict(ok: bool, given: str, expected: Any, details: dict[str, Any] | None = None) -> RewardResult:
    if ok:
        return RewardResult(1.0, "correct answer", passed=True, details=details or {})
    return RewardResult(0.0, f"wrong answer {given[:80]!r}; expected {expected!r}", passed=False, details=details or {})
