"""Checking a submitted answer against a task's answer specification, with the reward SDK.

A task's ``answer`` is ``{"type": "text" | "number" | "list", "value": ...}``; the ``answer`` tool's
text is the answer itself, so nothing is extracted from it:

* ``text``: :func:`~agentgym.verifiers.normalized_match` (case, punctuation, a leading article
  ignored);
* ``number``: :func:`~agentgym.verifiers.numeric_match` within ``tolerance``: the text must be
  exactly one number (thousands separators allowed) and nothing else, so listing candidates or
  hedging ("15 or more") fails. A trailing ``%`` is read as the unit the question asked for
  ("what percentage ...": ``0.9%`` and ``0.9`` both mean 0.9), never as a scale factor, so a
  value 100 times off cannot pass through a second reading;
* ``list``: comma-, semicolon- or newline-separated items compared as a set of normalised names
  (order does not matter; a missing or an extra item fails).
"""

from __future__ import annotations

import re
from typing import Any

from agentgym.verifiers import RewardResult, normalize_text, normalized_match, numeric_match

__all__ = ["check_answer"]

_ITEM_SEPARATORS = re.compile(r"[,;\n]")


def check_answer(given: str, spec: dict[str, Any]) -> RewardResult:
    """Score ``given`` against the task's answer ``spec``: 1.0 and ``passed`` when it matches."""
    kind = spec["type"]
    if kind == "number":
        text = given.strip()
        text = text[:-1] if text.endswith("%") else text
        return numeric_match(text, spec["value"], abs_tol=float(spec.get("tolerance", 0.0)), percent="strict", check_units=True, extract=None)
    if kind == "text":
        return normalized_match(given, spec["value"], extract=None)
    if kind == "list":
        return _check_list(given, spec["value"])
    raise ValueError(f"unknown answer type {kind!r}")


def _check_list(given: str, expected: list[str]) -> RewardResult:
    got = {normalize_text(item) for item in _ITEM_SEPARATORS.split(given)} - {""}
    want = {normalize_text(item) for item in expected}
    if got == want:
        return RewardResult(1.0, f"all {len(want)} list items match", passed=True)
    missing, extra = len(want - got), len(got - want)
    return RewardResult(0.0, f"list answer has {missing} missing and {extra} extra item(s)", passed=False, details={"expected": expected})
