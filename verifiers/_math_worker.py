"""Runs inside a :class:`~agentgym.verifiers.bounded.BoundedPool` worker: math-verify's comparison.

Kept apart from :mod:`agentgym.verifiers.math_equiv` so that only worker processes pay for
importing SymPy and math-verify, and so that nothing here runs outside the pool's hard time limit.
"""

from __future__ import annotations

import logging

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

# With its timeouts off math-verify warns once per process; the pool's kill is the timeout.
logging.getLogger("math_verify").setLevel(logging.ERROR)

# Boxed answers first, as in math-verify's own test harness; plain expressions as a fallback.
_TARGETS = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def equivalent(prediction: str, reference: str) -> bool:
    """math-verify's verdict on two prepared answers (see ``math_equiv.prepare_answer``)."""
    # None disables math-verify's signal.alarm timeouts, which fail outside the main thread and
    # cannot interrupt C-level big-integer arithmetic; the pool kills this process instead.
    gold = parse(reference, _TARGETS, parsing_timeout=None)
    pred = parse(prediction, _TARGETS, parsing_timeout=None)
    return bool(verify(gold, pred, timeout_seconds=None))
