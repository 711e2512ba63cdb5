"""The value every verifier returns: a score, its named parts and a reason a person can read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RewardResult:
    """A verifier's verdict.

    Attributes:
        score: the reward itself.
        components: named sub-scores that produced ``score`` (empty for atomic verifiers).
        reason: one short sentence explaining the score.
        passed: whether the verifier considers the check met (``score`` alone can be partial).
        details: extra machine-readable facts (extracted answers, counts), JSON-serialisable.
    """

    score: float
    reason: str = ""
    components: dict[str, float] = field(default_factory=dict)
    passed: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __float__(self) -> float:
        return float(self.score)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with keys in a fixed order."""
        out: dict[str, Any] = {"score": self.score, "reason": self.reason, "components": dict(self.components)}
        if self.passed is not None:
            out["passed"] = self.passed
        if self.details:
            out["details"] = dict(self.details)
        return out
