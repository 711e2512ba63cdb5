"""agentgym: deterministic multi-turn tool environments and verifiable rewards for agent RL."""

__version__ = "0.1.0"
