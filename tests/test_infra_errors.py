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
from agentgym.rollouts.evaluation import eval_metrics, evaluate
from agentgym.rollouts.runner import RolloutConfig, RolloutRunner, run_rollouts
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


FLAKY_ENV = "agentgym-test/FlakyMachinery-v0"


class FlakyMachineryEnv(BrokenMachineryEnv):
    """Task "flaky" meets a failed service on its first play in this process (per seed), then works;
    task "machinery" always does."""

    failures: set[tuple[str, int | None]] = set()

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", [{"task_id": "fine"}, {"task_id": "flaky"}, {"task_id": "machinery"}])
        super().__init__(**kwargs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.seed_played = seed
        return super().reset(seed=seed, options=options)

    def respond(self, parsed: ParsedAction) -> list[dict[str, Any]]:
        key = (self.task["task_id"], self.seed_played)
        if self.task["task_id"] == "flaky" and key not in self.failures:
            self.failures.add(key)
            raise InfraError("the service restarted")
        return super().respond(parsed)


gym.register(FLAKY_ENV, entry_point=FlakyMachineryEnv)


def flaky_config(**kwargs: Any) -> RolloutConfig:
    return RolloutConfig(FLAKY_ENV, task_ids=["fine", "flaky", "machinery"], group_size=2, max_new_tokens=8, seed=0, distinct_env_seeds=True, **kwargs)


def test_the_runner_plays_infra_errors_again_with_the_same_seeds(default_tokenizer) -> None:
    FlakyMachineryEnv.failures.clear()
    runner = RolloutRunner(SaysHello(default_tokenizer))
    first = runner.run(flaky_config())
    FlakyMachineryEnv.failures.clear()
    episodes = runner.run(flaky_config(), infra_retries=2)
    assert [(e.group, e.member) for e in episodes] == [(e.group, e.member) for e in first]
    by_task = {(e.record["task_id"], e.member): e for e in episodes}
    for member in (0, 1):
        flaky = by_task["flaky", member]
        assert (flaky.stop_reason, flaky.record["infra_retries"]) == ("max_turns", 1)
        assert flaky.record["seed"] == next(e.record["seed"] for e in first if (e.group, e.member) == (flaky.group, member))
        assert flaky.turns[0]["seed"] == next(e.turns[0]["seed"] for e in first if (e.group, e.member) == (flaky.group, member))
        assert (by_task["machinery", member].stop_reason, by_task["machinery", member].record["infra_retries"]) == ("infra_error", 2)
        assert "infra_retries" not in by_task["fine", member].record
    with pytest.raises(ValueError, match="infra_retries"):
        runner.run(flaky_config(), infra_retries=-1)
    # An episode written as it finishes (agentgym eval's output) is written once, in its last try.
    FlakyMachineryEnv.failures.clear()
    written: list = []
    episodes = runner.run(flaky_config(), infra_retries=2, on_episode=written.append)
    assert sorted((e.group, e.member) for e in written) == sorted((e.group, e.member) for e in episodes)
    assert {(e.group, e.member): e.record.get("infra_retries", 0) for e in written} == {(e.group, e.member): e.record.get("infra_retries", 0) for e in episodes}


def test_evaluation_leaves_infra_errors_out_of_its_rates_and_counts_them(default_tokenizer) -> None:
    FlakyMachineryEnv.failures.clear()
    once = evaluate(SaysHello(default_tokenizer), flaky_config())  # the default: one more try
    assert once.metrics["infra_errors"] == 2 and once.metrics["infra_retried"] == 4  # "machinery" twice, "flaky" once per member
    assert once.metrics["episodes"] == 4 and once.metrics["success_rate"] == 1.0
    assert once.metrics["stop_reasons"] == {"infra_error": 2, "max_turns": 4}
    FlakyMachineryEnv.failures.clear()
    never = evaluate(SaysHello(default_tokenizer), flaky_config(), infra_retries=0)
    assert (never.metrics["infra_errors"], never.metrics["infra_retried"], never.metrics["episodes"]) == (4, 0, 2)
    assert never.metrics["success_rate"] == 1.0  # the model's episodes all succeeded; the rest says nothing about it
    assert eval_metrics([e for e in never.episodes if e.infra_error]) == {
        "episodes": 0,
        "infra_errors": 4,
        "infra_retried": 0,
        "stop_reasons": {"infra_error": 4},
    }


def test_the_eval_command_takes_the_number_of_retries(default_tokenizer, monkeypatch, capsys) -> None:
    import argparse
    import json

    from agentgym.cli import evaluate as command

    monkeypatch.setattr(command, "model_backend", lambda args: SaysHello(default_tokenizer))
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    counts = {}
    for retries in ("0", "1"):
        FlakyMachineryEnv.failures.clear()
        args = parser.parse_args(
            ["eval", FLAKY_ENV, "--task-ids", "fine", "flaky", "machinery", "--infra-retries", retries, "--max-new-tokens", "8", "--json", "-q"]
        )
        assert args.run(args) == 0
        summary = json.loads(capsys.readouterr().out)
        counts[retries] = (summary["infra_errors"], summary["infra_retried"])
    assert counts == {"0": (2, 0), "1": (1, 2)}  # one more try saves "flaky"; "machinery" always fails
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", FLAKY_ENV, "--infra-retries", "-1"])
    assert "must be at least 0" in capsys.readouterr().err
