"""Combining verifier results: a weighted sum with a hard gate on task failure.

The design's recipe is ``0.1·format + 0.4·execution + 0.5·completion``, but a weighted sum alone
lets a model farm format and execution points while failing the task. The gate closes that hole:
when the gate component does not pass, the total is ``failure_score``, whatever the others say.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentgym.verifiers.result import RewardResult


def weighted_sum(
    parts: Mapping[str, RewardResult],
    weights: Mapping[str, float],
    *,
    gate: str | None = None,
    failure_score: float = 0.0,
) -> RewardResult:
    """Combine named verifier results into one reward.

    Args:
        parts: results by component name; every weighted name must be present.
        weights: weight per component name.
        gate: name of the component that must pass (``passed`` true, or score > 0 when
            ``passed`` is unset); otherwise the total is ``failure_score``.
        failure_score: the total when the gate fails.

    Returns:
        A result whose ``components`` hold each part's score and whose reason names the
        failed gate or the weakest part.
    """
    missing = [name for name in weights if name not in parts]
    if missing:
        raise ValueError(f"weighted_sum: no result for weighted component(s) {missing}")
    if gate is not None and gate not in parts:
        raise ValueError(f"weighted_sum: gate component {gate!r} has no result")
    components = {name: float(parts[name].score) for name in parts}
    if gate is not None and not _passes(parts[gate]):
        return RewardResult(
            score=failure_score,
            reason=f"gate '{gate}' failed: {parts[gate].reason}",
            components=components,
            passed=False,
        )
    total = sum(weights[name] * components[name] for name in weights)
    imperfect = [f"{name}: {parts[name].reason}" for name in weights if components[name] < 1.0 and parts[name].reason]
    reason = "; ".join(imperfect) if imperfect else "all components at their maximum"
    return RewardResult(score=total, reason=reason, components=components, passed=True)


def _passes(result: RewardResult) -> bool:
    return result.passed if result.passed is not None else result.score > 0
