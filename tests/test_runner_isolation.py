"""One bad episode does not take its batch down: an environment that raises on a turn, or answers
with text the tokenizer cannot encode, fails that episode alone; the rest of the batch finishes
and every trajectory is written."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from fakes import SaysHello

from agentgym.env import ToolEnv
from agentgym.parsing import ParsedAction
from agentgym.rollouts.io import read_jsonl, write_jsonl
from agentgym.rollouts.runner import RolloutConfig, run_rollouts
from agentgym.tools import tool
from agentgym.verifiers.result import RewardResult

POISON_ENV = "agentgym-test/Poison-v0"
TASKS = [{"task_id": "fine"}, {"task_id": "raises"}, {"task_id": "unencodable"}, {"task_id": "fine-too"}]


class PoisonEnv(ToolEnv):
    """Two turns; on the first reply, task "raises" raises and task "unencodable" answers with a
    lone surrogate (which no tokenizer can encode)."""

    default_max_turns = 2

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", TASKS)
        super().__init__(**kwargs)

    def setup_episode(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": "Say anything."}, {"role": "user", "content": "Go on."}]

    @tool
    def noop(self) -> str:
        """Do nothing."""
        return "ok"

    def respond(self, parsed: ParsedAction) -> list[dict[str, Any]]:
        if self.task["task_id"] == "raises":
            raise RuntimeError("environment bug")
        if self.task["task_id"] == "unencodable":
            return [{"role": "user", "content": "bad \ud800 text"}]
        return [{"role": "user", "content": "Once more."}]

    def is_done(self) -> bool:
        return False

    def compute_reward(self) -> RewardResult:
        return RewardResult(1.0, "finished", {}, True)


gym.register(POISON_ENV, entry_point=PoisonEnv)


def test_a_poisoned_batch_finishes_and_writes_every_trajectory(default_tokenizer, tmp_path) -> None:
    config = RolloutConfig(POISON_ENV, num_tasks=len(TASKS), group_size=2, max_new_tokens=8, seed=0)
    tokenizer = default_tokenizer
    episodes = run_rollouts(SaysHello(tokenizer), config)

    assert len(episodes) == len(TASKS) * 2
    by_task: dict[str, list[Any]] = {}
    for episode in episodes:
        by_task.setdefault(episode.record["task_id"], []).append(episode)
    for task_id in ("fine", "fine-too"):
        assert [e.stop_reason for e in by_task[task_id]] == ["max_turns", "max_turns"]
        assert all(e.reward == 1.0 and "error" not in e.record for e in by_task[task_id])
    for task_id, words in (("raises", "environment failed on turn 1: RuntimeError: environment bug"), ("unencodable", "could not be tokenized")):
        for episode in by_task[task_id]:
            assert episode.stop_reason == "error" and episode.reward == 0.0
            assert words in episode.record["error"] and episode.record["success"] is False
            # The trajectory stops after the sampled turn, with its loss mask intact.
            assert episode.trajectory.token_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
            assert sum(episode.trajectory.loss_mask) == len(episode.turns[0]["sampled_ids"])

    out = tmp_path / "rollouts.jsonl"
    write_jsonl(out, (e.to_dict() for e in episodes))
    assert [r["task_id"] for r in read_jsonl(out)] == [e.record["task_id"] for e in episodes]
