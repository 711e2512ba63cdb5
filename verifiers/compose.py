"""Combining verifier results: a weighted sum with a hard gate on task failure.

The design's recipe is ``0.1·format + 0.4·execution + 0.5·completion``, but a weighted sum alone
lets a model farm format and execution points while failing the task. The gate closes that hole:
when the gate component does not pass, the total is ``failure_score``, whatever the others say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from agentgym.verifiers.result import RewardResult

__all__ = ["Composite", "weighted_sum"]


def weighted_sum(parts: Mapping[str, RewardResult], weights: Mapping[str, float], *, gate: str | None = None, failure_score: float = 0.0) -> RewardResult:
    """Combine named verifier results into one reward.

    Args:
        parts: results by component name; every weighted name must be present.
        weights: weight per component name.
        gate: name of the component that must pass (``passed`` true, or score > 0 when
            ``passed`` is unset); otherwise the total is ``failure_score``.
        failure_score: the total when the gate fails.

    Returns:
        A result whose ``components`` hold each part's score and whose reason names the
        failed gate or the parts below their maximum (a part that reports ``passed=True``, such
        as a length penalty of 0, is not listed).
    """
    missing = [name for name in weights if name not in parts]
    if missing:
        raise ValueError(f"weighted_sum: no result for weighted component(s) {missing}")
    if gate is not None and gate not in parts:
        raise ValueError(f"weighted_sum: gate component {gate!r} has no result")
    components = {name: float(parts[name].score) for name in parts}
    if gate is not None and not _passes(parts[gate]):
        return RewardResult(score=failure_score, reason=f"gate '{gate}' failed: {parts[gate].reason}", components=components, passed=False)
    total = sum(weights[name] * components[name] for name in weights)
    imperfect = [f"{name}: {parts[name].reason}" for name in weights if components[name] < 1.0 and parts[name].passed is not True and parts[name].reason]
    reason = "; ".join(imperfect) if imperfect else "all components at their maximum"
    return RewardResult(score=total, reason=reason, components=components, passed=True)


def _passes(result: RewardResult) -> bool:
    return result.passed if result.passed is not None else result.score > 0


Verifier = Callable[..., RewardResult]


class Composite:
    """A named, reusable reward: verifiers with weights, combined by :func:`weighted_sum`.

    Every part is called with the same arguments; the result's ``components`` hold each part's
    score and ``details["parts"]`` each part's full result, so the total explains itself.

    Args:
        parts: ``{name: (verifier, weight)}``; a weight of 0 makes a part a pure gate or
            diagnostic.
        gate: the part that must pass, or the total is ``failure_score``.
        failure_score: the total when the gate fails.

    Example: the design's ``0.1·format + 0.4·execution + 0.5·completion``, gated on completion::

        reward = Composite(
            {"format": (format_part, 0.1), "execution": (execution_part, 0.4), "completion": (completion_part, 0.5)},
            gate="completion",
        )
        result = reward(episode)
    """

    def __init__(self, parts: Mapping[str, tuple[Verifier, float]], *, gate: str | None = None, failure_score: float = 0.0) -> None:
        if not parts:
            raise ValueError("Composite needs at least one part")
        for name, part in parts.items():
            if not (isinstance(part, tuple) and len(part) == 2 and callable(part[0])):
                raise TypeError(f"part {name!r} must be a (verifier, weight) pair")
        if gate is not None and gate not in parts:
            raise ValueError(f"gate {gate!r} is not one of the parts {sorted(parts)}")
        self.parts = dict(parts)
        self.gate = gate
        self.failure_score = failure_score

    @property
    def weights(self) -> dict[str, float]:
        """The weight of each part."""
        return {name: float(weight) for name, (_, weight) in self.parts.items()}

    def __call__(self, *args: Any, **kwargs: Any) -> RewardResult:
        """Run every part on the same arguments and combine the results."""
        results = {}
        for name, (verifier, _) in self.parts.items():
            result = verifier(*args, **kwargs)
            if not isinstance(result, RewardResult):
                raise TypeError(f"part {name!r} returned {type(result).__name__}, not RewardResult")
            results[name] = result
        total = weighted_sum(results, self.weights, gate=self.gate, failure_score=self.failure_score)
        return dataclasses.replace(total, details=total.details | {"parts": {n: r.to_dict() for n, r in results.items()}})
