"""Length penalties: linear, sigmoid and DAPO's soft overlong punishment.

Each takes a length (tokens, as the trainer counts them) and returns a score in
``[-max_penalty, 0]``: 0 means no penalty. Add them to a composite with a positive weight.
``passed`` is true when there is no penalty.
"""

from __future__ import annotations

import math

from agentgym.verifiers.result import RewardResult

__all__ = ["linear_length_penalty", "overlong_penalty", "sigmoid_length_penalty"]


def _check(length: int, max_penalty: float) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be a non-negative integer, got {length!r}")
    if max_penalty < 0:
        raise ValueError(f"max_penalty must be non-negative, got {max_penalty}")


def _result(penalty: float, length: int, reason: str) -> RewardResult:
    return RewardResult(-penalty if penalty else 0.0, reason, passed=penalty == 0, details={"length": length})


def linear_length_penalty(length: int, *, start: int, end: int, max_penalty: float = 1.0) -> RewardResult:
    """No penalty up to ``start`` tokens, rising linearly to ``max_penalty`` at ``end`` and beyond."""
    _check(length, max_penalty)
    if not 0 <= start < end:
        raise ValueError(f"need 0 <= start < end, got start={start}, end={end}")
    fraction = min(1.0, max(0.0, (length - start) / (end - start)))
    penalty = fraction * max_penalty
    if penalty == 0:
        return _result(0.0, length, f"{length} tokens, within the {start}-token budget")
    return _result(penalty, length, f"{length} tokens, {length - start} over the {start}-token budget")


def sigmoid_length_penalty(length: int, *, midpoint: int, scale: float, max_penalty: float = 1.0) -> RewardResult:
    """A smooth penalty ``max_penalty / (1 + exp(-(length - midpoint) / scale))``: half at the
    midpoint, approaching ``max_penalty`` for long outputs. It is never exactly 0, so
    ``passed`` is true below the midpoint."""
    _check(length, max_penalty)
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    z = (length - midpoint) / scale
    # exp overflows past ~709; the penalty is max_penalty (or 0) to float precision long before.
    penalty = max_penalty / (1.0 + math.exp(-z)) if z > -700 else 0.0
    return RewardResult(-penalty, f"{length} tokens, midpoint {midpoint}: penalty {penalty:.3g}", passed=length < midpoint, details={"length": length})


def overlong_penalty(length: int, *, max_length: int, buffer: int, max_penalty: float = 1.0) -> RewardResult:
    """DAPO's soft overlong punishment ("overlong reward shaping", Yu et al., 2025).

    No penalty up to ``max_length - buffer``; inside the buffer (the paper's ``L_cache``) the
    penalty grows linearly to ``max_penalty``; beyond ``max_length`` (a truncated answer) it is
    ``max_penalty``.
    """
    _check(length, max_penalty)
    if not 0 < buffer <= max_length:
        raise ValueError(f"need 0 < buffer <= max_length, got buffer={buffer}, max_length={max_length}")
    safe = max_length - buffer
    if length <= safe:
        return _result(0.0, length, f"{length} tokens, under the {safe}-token soft limit")
    if length > max_length:
        return _result(max_penalty, length, f"{length} tokens, over the {max_length}-token hard limit")
    penalty = (length - safe) / buffer * max_penalty
    return _result(penalty, length, f"{length} tokens, {length - safe} into the {buffer}-token overlong buffer")
