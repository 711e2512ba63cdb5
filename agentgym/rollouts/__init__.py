"""Rollouts: playing episodes and recording them, token for token.

* :mod:`~agentgym.rollouts.episode`: one model episode, turn by turn (:class:`RolloutSettings`: the
  budgets and the sampling);
* :mod:`~agentgym.rollouts.runner`: many episodes at once through a generation backend
  (:func:`run_rollouts`, GRPO groups);
* :mod:`~agentgym.rollouts.evaluation`: success with intervals and the other metrics of ``agentgym eval``;
* :mod:`~agentgym.rollouts.scripted`: scripted policies (oracles, baselines) through environments;
* :mod:`~agentgym.rollouts.chat` and :mod:`~agentgym.rollouts.trajectory`: the chat rendering and the
  token-exact trajectory with its loss mask; :mod:`~agentgym.rollouts.batching` pads them into tensors;
* :mod:`~agentgym.rollouts.io`, :mod:`~agentgym.rollouts.parquet`, :mod:`~agentgym.rollouts.episode_file`:
  the record files (JSON lines, Parquet, the resumable output of ``eval`` and ``rollout``).
"""

from agentgym.rollouts.batching import TokenBatch, collate
from agentgym.rollouts.chat import ChatRenderer, TemplateError, normalize_tool_schema, tool_system_prompt
from agentgym.rollouts.episode import RolloutSettings
from agentgym.rollouts.evaluation import EvalResult, eval_metrics, evaluate
from agentgym.rollouts.io import read_jsonl, read_records, write_jsonl, write_records
from agentgym.rollouts.runner import Episode, RolloutConfig, RolloutRunner, run_rollouts
from agentgym.rollouts.scripted import make_policy, replay, rollout, run_episode
from agentgym.rollouts.trajectory import RenderCheck, Segment, Trajectory, TrajectoryBuilder, check_rendering

__all__ = [
    "ChatRenderer",
    "Episode",
    "EvalResult",
    "RenderCheck",
    "RolloutConfig",
    "RolloutRunner",
    "RolloutSettings",
    "Segment",
    "TemplateError",
    "TokenBatch",
    "Trajectory",
    "TrajectoryBuilder",
    "check_rendering",
    "collate",
    "eval_metrics",
    "evaluate",
    "make_policy",
    "normalize_tool_schema",
    "read_jsonl",
    "read_records",
    "replay",
    "rollout",
    "run_episode",
    "run_rollouts",
    "tool_system_prompt",
    "write_jsonl",
    "write_records",
]
