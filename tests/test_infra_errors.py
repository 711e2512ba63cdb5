"""Failures of the machinery are not the model's: an environment whose machinery fails (an
``InfraError``) ends the episode with ``stop_reason == "infra_error"`` and the cause in the record,
while a bug of the environment stays an ``"error"`` and a tool's own failure stays an observation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from fakes import SaysHello

from agentgym import InfraError
from agentgym.env import ToolEnv
from agentgym.parsing import ParsedAction, format_tool_call
from agentgym.runner import RolloutConfig, run_rollouts
from agentgym.tools import tool
from agentgym.verifiers.result import RewardResult

BROKEN_ENV = "agentgym-test/BrokenMachinery-v0"
TASKS = [{"task_id": "fine"}, {"task_id": "machinery"}, {"task_id": "bug"}]


class BrokenMachineryEnv(ToolEnv):
    """Task "machinery" meets a failed service on the first reply, task "bug" an environment bug."""

    default_max_turns = 2

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", TASKS)
        super().__init__(**kwargs)

    def setup_episode(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": "Say anything."}, {"role": "user", "content": "Go on."}]

    @tool
    def service(self, fail: str = "") -> str:
        """Call the service behind this environment.

        Args:
            fail: "machinery" or "bug" to make it fail that way.
        """
        if fail == "machinery":
            raise InfraError("the service stopped")
        if fail == "bug":
            raise RuntimeError("tool bug")
        return "ok"

    def respond(self, parsed: ParsedAction) -> list[dict[str, Any]]:
        if self.task["task_id"] == "machinery":
            raise InfraError("the service stopped answering")
        if self.task["task_id"] == "bug":
            raise RuntimeError("environment bug")
        return [{"role": "user", "content": "Once more."}]

    def is_done(self) -> bool:
        return False

    def compute_reward(self) -> RewardResult:
        return RewardResult(1.0, "finished", {}, True)


gym.register(BROKEN_ENV, entry_point=BrokenMachineryEnv)


def test_a_tool_whose_machinery_fails_ends_the_step_with_an_infra_error() -> None:
    env = gym.make(BROKEN_ENV)
    env.reset(seed=0, options={"task_id": "fine"})
    observation, *_ = env.step(format_tool_call("service", {"fail": "bug"}))
    assert "tool bug" in observation[0]["content"]  # a tool's own failure: an observation, as before
    with pytest.raises(InfraError, match="the service stopped"):
        env.step(format_tool_call("service", {"fail": "machinery"}))


def test_model_episodes_label_infra_errors_apart_from_errors(default_tokenizer) -> None:
    config = RolloutConfig(BROKEN_ENV, num_tasks=len(TASKS), group_size=2, max_new_tokens=8, seed=0)
    episodes = run_rollouts(SaysHello(default_tokenizer), config)
    by_task: dict[str, list[Any]] = {}
    for episode in episodes:
        by_task.setdefault(episode.record["task_id"], []).append(episode)
    assert [(e.stop_reason, e.infra_error, e.reward) for e in by_task["fine"]] == [("max_turns", False, 1.0)] * 2
    for episode in by_task["machinery"]:
        assert (episode.stop_reason, episode.infra_error, episode.reward) == ("infra_error", True, 0.0)
        assert episode.record["stop_reason"] == "infra_error"
        assert "InfraError: the service stopped answering" in episode.record["error"]
    assert [(e.stop_reason, e.infra_error) for e in by_task["bug"]] == [("error", False)] * 2
