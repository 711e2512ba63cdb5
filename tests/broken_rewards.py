"""Deliberately broken rewards that ``agentgym validate-reward`` must reject (used by test_validate_reward)."""

from agentgym.verifiers import RewardResult


def format_only(record):
    """Scores only the absence of malformed calls: the classic gameable reward."""
    turns = max(record["turns"], 1)
    errors = record["steps"][-1]["info"]["format_errors"] if record["steps"] else 0
    return RewardResult(score=1 - errors / turns, reason="format only")


def stored_reward(record):
    """Trusts the reward stored in the record (honest on honest files)."""
    return RewardResult(score=record["reward"], passed=record["success"], reason=record["reward_reason"])
