"""agentgym's environments, registered with Gymnasium under the ``agentgym/`` namespace."""

from __future__ import annotations

import gymnasium as gym

# id -> (entry point, one-line description)
ENVIRONMENTS: dict[str, tuple[str, str]] = {
    "agentgym/Refund-v0": (
        "agentgym.envs.refund.env:RefundEnv",
        "Customer-support refund workflow under a written policy, with a scripted customer",
    ),
}


def register_envs() -> None:
    """Register every environment id (idempotent)."""
    for env_id, (entry_point, _) in ENVIRONMENTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=False)
