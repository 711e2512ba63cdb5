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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentgym.rollouts.batching import TokenBatch, collate
    from agentgym.rollouts.chat import ChatRenderer, TemplateError, normalize_tool_schema, tool_system_prompt
    from agentgym.rollouts.evaluation import EvalResult, eval_metrics, evaluate
    from agentgym.rollouts.io import read_jsonl, read_records, write_jsonl, write_records
    from agentgym.rollouts.runner import Episode, RolloutRunner, run_rollouts
    from agentgym.rollouts.scripted import make_policy, replay, rollout, run_episode
    from agentgym.rollouts.settings import RolloutConfig, RolloutSettings
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

# The names load with their module on first use: the package stays cheap to enter, so the command
# line can read the rollout settings (settings.py) without importing the models and environments.
_HOME = {
    **dict.fromkeys(["TokenBatch", "collate"], "batching"),
    **dict.fromkeys(["ChatRenderer", "TemplateError", "normalize_tool_schema", "tool_system_prompt"], "chat"),
    **dict.fromkeys(["EvalResult", "eval_metrics", "evaluate"], "evaluation"),
    **dict.fromkeys(["read_jsonl", "read_records", "write_jsonl", "write_records"], "io"),
    **dict.fromkeys(["Episode", "RolloutRunner", "run_rollouts"], "runner"),
    **dict.fromkeys(["make_policy", "replay", "rollout", "run_episode"], "scripted"),
    **dict.fromkeys(["RolloutConfig", "RolloutSettings"], "settings"),
    **dict.fromkeys(["RenderCheck", "Segment", "Trajectory", "TrajectoryBuilder", "check_rendering"], "trajectory"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
