"""Step-level (process) rewards: score every assistant turn, then aggregate.

The per-turn scores are kept: :meth:`ProcessReward.per_step` returns one result per turn (for
trainers that assign credit per turn), and the aggregate result carries them as components
``turn_1``, ``turn_2``, ... and in ``details["step_scores"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from agentgym.verifiers.result import RewardResult
from agentgym.verifiers.trajectory import Turn, split_turns

__all__ = ["Aggregate", "ProcessReward"]

Aggregate = Literal["mean", "min", "last", "discounted"]


class ProcessReward:
    """Apply a per-turn verifier to every assistant turn and aggregate the scores.

    Args:
        step_verifier: scores one :class:`~agentgym.verifiers.trajectory.Turn`.
        aggregate: ``"mean"``; ``"min"`` (the weakest step decides, as with process reward
            models); ``"last"``; or ``"discounted"``: ``sum(gamma**(n-t) * s_t) / sum(gamma**(n-t))``,
            weighting later turns more.
        gamma: the discount for ``"discounted"``, in (0, 1].

    Example: the weakest turn's format decides::

        per_turn_format = ProcessReward(lambda turn: format_reward(turn.action, env.tools), aggregate="min")
        result = per_turn_format(record["messages"])
    """

    def __init__(self, step_verifier: Callable[[Turn], RewardResult], *, aggregate: Aggregate = "mean", gamma: float = 0.9) -> None:
        if aggregate not in ("mean", "min", "last", "discounted"):
            raise ValueError(f"aggregate must be mean, min, last or discounted, got {aggregate!r}")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        self.step_verifier = step_verifier
        self.aggregate = aggregate
        self.gamma = gamma

    def per_step(self, messages: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
        """One result per assistant turn of the conversation, in order."""
        return [self.step_verifier(turn) for turn in split_turns(messages)]

    def __call__(self, messages: Sequence[Mapping[str, Any]]) -> RewardResult:
        """The aggregated process reward of an episode's ``messages``."""
        steps = self.per_step(messages)
        if not steps:
            return RewardResult(0.0, "no assistant turn to score", passed=False)
        scores = [float(s.score) for s in steps]
        weakest = min(range(len(steps)), key=scores.__getitem__)
        failed = [i for i, s in enumerate(steps, 1) if s.passed is False]
        if failed:
            reason = f"{len(failed)} of {len(steps)} turns failed; turn {failed[0]}: {steps[failed[0] - 1].reason}"
        else:
            reason = f"all {len(steps)} turns passed" if all(s.passed for s in steps) else f"weakest turn {weakest + 1}: {steps[weakest].reason}"
        return RewardResult(
            self._aggregate(scores),
            reason,
            {f"turn_{i}": score for i, score in enumerate(scores, 1)},
            passed=not failed,
            details={"step_scores": scores, "step_reasons": [s.reason for s in steps]},
        )

    def _aggregate(self, scores: list[float]) -> float:
        if self.aggregate == "mean":
            return sum(scores) / len(scores)
        if self.aggregate == "min":
            return min(scores)
        if self.aggregate == "last":
            return scores[-1]
        weights = [self.gamma ** (len(scores) - t) for t in range(1, len(scores) + 1)]
        return sum(w * s for w, s in zip(weights, scores, strict=False)) / sum(weights)
