"""agentgym: deterministic multi-turn tool environments and verifiable rewards for agent RL.

``import agentgym`` registers every environment, so ``gym.make("agentgym/Refund-v0")`` works.
Linters that flag the import as unused accept ``gym.register_envs(agentgym)`` instead.
"""

# First: old import paths of moved modules keep working for one version (it installs their finder).
from agentgym import _moved  # noqa: F401  # isort: skip
from agentgym.env import ToolEnv
from agentgym.envs.catalogue import ENVIRONMENTS
from agentgym.envs.registration import make_env, register_envs
from agentgym.parsing import ParsedAction, ToolCall, parse_action
from agentgym.records import (
    ChatMessage,
    EnvInfo,
    EpisodeRecord,
    Label,
    LabelledRecord,
    ModelEpisodeRecord,
    ResetInfo,
    RewardInfo,
    StepInfo,
    StepRecord,
    TaskRecord,
    TrajectoryRecord,
    TurnRecord,
)
from agentgym.tools import InfraError, Tool, ToolError, tool

__version__ = "0.1.0"
__all__ = [
    "ENVIRONMENTS",
    "ChatMessage",
    "EnvInfo",
    "EpisodeRecord",
    "InfraError",
    "Label",
    "LabelledRecord",
    "ModelEpisodeRecord",
    "ParsedAction",
    "ResetInfo",
    "RewardInfo",
    "StepInfo",
    "StepRecord",
    "TaskRecord",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolError",
    "TrajectoryRecord",
    "TurnRecord",
    "make_env",
    "parse_action",
    "register_envs",
    "tool",
]

register_envs()
