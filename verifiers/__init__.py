"""Verifiable rewards: every verifier returns a :class:`RewardResult` that explains its score."""

from agentgym.verifiers.compose import weighted_sum
from agentgym.verifiers.result import RewardResult

__all__ = ["RewardResult", "weighted_sum"]
