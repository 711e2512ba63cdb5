"""The record types of :mod:`agentgym.records` against real records.

Every record here is real: episodes played by scripted policies in every registered environment,
model episodes through the rollout runner, their JSON lines read back, the bundled task files and
labelled sets. Each is held to its TypedDict key by key, nested values included: a key the type
does not declare, a required key missing or a value of another type fails the test, so the types
cannot drift from what the code writes. An environment's own task type and ``info`` entries are
found through its class (``ToolEnv.record_types()``), never listed here.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fakes import OracleScript, SaysHello
from record_types import assert_matches, env_types, problems

import agentgym
from agentgym import records as R
from agentgym.env import ToolEnv
from agentgym.envs import ENVIRONMENTS, env_class
from agentgym.models import OpenAICompatibleBackend
from agentgym.offline.labelling import to_openai_messages
from agentgym.parsing import ParsedAction
from agentgym.policies import ReplayPolicy
from agentgym.rollouts.io import read_records, to_json_line, write_jsonl
from agentgym.rollouts.runner import Episode, RolloutConfig, run_rollouts
from agentgym.rollouts.scripted import assistant_turns, make_policy, rollout, run_episode
from agentgym.rollouts.trajectory import Trajectory
from agentgym.tools import tool
from agentgym.verifiers.result import RewardResult

TASKS_DIR = Path(str(resources.files("agentgym.tasks")))


def json_round_trip(record: Any) -> Any:
    return json.loads(to_json_line(record))


def test_the_checker_catches_undeclared_missing_and_mistyped_keys() -> None:
    message: dict[str, Any] = {"role": "tool", "content": "ok", "name": "t", "tool_call_id": "call_1_0"}
    assert problems(message, R.ChatMessage) == []
    assert problems(message | {"extra": 1}, R.ChatMessage) == ["record: key 'extra' is not declared in ChatMessage"]
    assert problems({"role": "tool"}, R.ChatMessage) == ["record: required key 'content' of ChatMessage is missing"]
    assert problems(message | {"role": "robot"}, R.ChatMessage)
    assert problems({"reward": 1.0, "info": {"task_id": "t"}}, R.StepRecord)  # nested TypedDicts are checked too
    assert problems({"segments": [], "messages": [], "prefix_stable": 1}, R.TrajectoryDict)
    assert problems(True, float) and problems(True, int) and not problems(1, float)


# ------------------------------------------------------------------------- scripted episodes


def _episodes(env_id: str) -> list[dict[str, Any]]:
    """Records of the oracle and of the random policy (format errors, truncation) on two tasks."""
    return [
        *rollout(env_id, "oracle", episodes=2, seed=0, split="test"),
        *rollout(env_id, "random", episodes=1, seed=3, split="test", env_kwargs={"max_turns": 3}),
    ]


def test_episode_records_of_every_environment_match_the_type(env_id) -> None:  # env_id: every registered id (conftest.py)
    for record in _episodes(env_id):
        assert_matches(record, R.EpisodeRecord, env_id=env_id)
        assert_matches(json_round_trip(record), R.EpisodeRecord, env_id=env_id)  # what the JSONL line reads back as
        assert record["steps"], "an episode of at least one step"
        assert_matches(record["steps"][-1]["info"], R.StepInfo, env_id=env_id)
        assert R.RewardInfo.__required_keys__ <= set(record["steps"][-1]["info"])  # the final info explains the reward


@pytest.mark.parametrize(("env_name", "policy"), [("agentgym/MockAPI-v0", "oracle"), ("agentgym/SQL-v0", "format_only")])
def test_episode_records_with_injected_faults_match_the_type(env_name, policy) -> None:
    records = list(rollout(env_name, policy, episodes=3, seed=0, env_kwargs={"fault_rate": 0.5}))
    for record in records:
        assert_matches(record, R.EpisodeRecord, env_id=env_name)
    infos = [s["info"] for r in records for s in r["steps"]]
    assert any(i.get("turn_faults") or i.get("faults") for i in infos), "the faults the info entries describe"


def test_openai_style_assistant_messages_match_the_type() -> None:
    env = gym.make("agentgym/Refund-v0", split="test")
    try:
        task_id = env.unwrapped.task_ids[0]
        base = run_episode(env, make_policy(env, "oracle", 0), seed=0, task_id=task_id, policy_name="oracle")
        turns = to_openai_messages(assistant_turns(base), {})
        record = run_episode(env, ReplayPolicy(turns), seed=0, task_id=task_id, policy_name="replay")
    finally:
        env.close()
    assert_matches(record, R.EpisodeRecord, env_id="agentgym/Refund-v0")
    assert any("tool_calls" in m for m in record["messages"])


def test_reset_info_matches_the_type() -> None:
    for env_id in sorted(ENVIRONMENTS):
        env = gym.make(env_id)
        try:
            observation, info = env.reset(seed=0)
        finally:
            env.close()
        assert_matches(info, R.ResetInfo, f"{env_id} reset info", env_id=env_id)
        for i, message in enumerate(observation):
            assert_matches(message, R.ChatMessage, f"{env_id} opening[{i}]")


def test_records_read_back_from_a_file_match_the_type(tmp_path) -> None:
    path = tmp_path / "oracle.jsonl"
    write_jsonl(path, rollout("agentgym/SQL-v0", "oracle", episodes=2))
    records = read_records(path)
    assert len(records) == 2
    for record in records:
        assert_matches(record, R.EpisodeRecord, env_id="agentgym/SQL-v0")


# ---------------------------------------------------------------------------- model episodes


def _check_model_episode(episode: Episode, tokenizer_name: str, env_id: str) -> None:
    assert_matches(episode.record, R.ModelEpisodeRecord, env_id=env_id)
    for i, turn in enumerate(episode.turns):
        assert_matches(turn, R.TurnRecord, f"turn {i}", env_id=env_id)
    line = episode.to_dict() | {"tokenizer": tokenizer_name}  # what agentgym eval --out writes
    assert_matches(line, R.TrajectoryRecord, env_id=env_id)
    read_back = json_round_trip(line)
    assert_matches(read_back, R.TrajectoryRecord, env_id=env_id)
    assert Trajectory.from_dict(read_back["trajectory"]) == episode.trajectory


def test_model_episodes_match_the_types(fake_server, default_tokenizer) -> None:
    env_id = "agentgym/SQL-v0"  # its tasks have a difficulty and a template, which the runner copies
    env = gym.make(env_id, split="test")
    task_id = env.unwrapped.task_ids[0]
    env.close()
    script = OracleScript(env_id, [task_id], default_tokenizer)
    fake_server.responder = script.respond
    config = RolloutConfig(env_id, split="test", task_ids=[task_id], group_size=2, seed=1)
    with OpenAICompatibleBackend(fake_server.base_url, default_tokenizer) as client:
        episodes = run_rollouts(client, config)
    assert [e.stop_reason for e in episodes] == ["done", "done"]
    assert {"difficulty", "template"} <= set(episodes[0].record)
    for episode in episodes:
        _check_model_episode(episode, "SmolLM2-135M-Instruct", env_id)


class _RaisingEnv(ToolEnv):
    """Raises on its first reply to a turn without tool calls: the runner records a failed episode."""

    default_max_turns = 2

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", [{"task_id": "raises"}])
        super().__init__(**kwargs)

    def setup_episode(self, task: dict[str, Any]) -> list[R.ChatMessage]:
        return [{"role": "system", "content": "Say anything."}, {"role": "user", "content": "Go on."}]

    @tool
    def noop(self) -> str:
        """Do nothing."""
        return "ok"

    def respond(self, parsed: ParsedAction) -> list[R.ChatMessage]:
        raise RuntimeError("environment bug")

    def is_done(self) -> bool:
        return False

    def compute_reward(self) -> RewardResult:
        return RewardResult(1.0, "finished", {}, True)


gym.register("agentgym-test/RecordsRaising-v0", entry_point=_RaisingEnv)


def test_a_failed_model_episode_matches_the_types(default_tokenizer) -> None:
    config = RolloutConfig("agentgym-test/RecordsRaising-v0", num_tasks=1, max_new_tokens=8)
    [episode] = run_rollouts(SaysHello(default_tokenizer), config)
    assert episode.stop_reason == "error" and "error" in episode.record
    assert_matches(episode.turns[-1]["info"], R.StepError)
    _check_model_episode(episode, "SmolLM2-135M-Instruct", "agentgym-test/RecordsRaising-v0")


# ----------------------------------------------------------------------------- bundled data


def _families() -> dict[str, type]:
    """Each bundled environment's task folder (its class's ``task_family``) -> its task type."""
    classes = [env_class(env_id) for env_id in ENVIRONMENTS]
    return {cls.task_family: cls.record_types().task for cls in classes}


def _task_files(name: str) -> list[tuple[str, Any]]:
    """(family, file) for every bundled ``name`` file, e.g. ``train.jsonl``."""
    root = resources.files("agentgym.tasks")
    found = []
    for family in _families():
        path = root.joinpath(*family.split("/"), name)
        if path.is_file():
            found.append((family, path))
    return found


def _lines(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_bundled_environment_declares_its_task_type() -> None:
    for env_id in ENVIRONMENTS:
        task = env_class(env_id).record_types().task
        assert task is not R.TaskRecord and issubclass(task, dict) and R.TaskRecord.__required_keys__ <= task.__required_keys__, env_id
        assert not task.__module__.startswith("agentgym.records"), f"{env_id}'s task type belongs in its own package"


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_bundled_task_files_match_their_types(split) -> None:
    files = _task_files(f"{split}.jsonl")
    on_disk = {str(path.parent.relative_to(TASKS_DIR)) for path in TASKS_DIR.glob(f"**/{split}.jsonl")}
    assert {family for family, _ in files} == on_disk  # every task folder belongs to an environment
    assert len(files) == 6  # TauRetail-v0 builds its own from τ-bench's files
    types = _families()
    for family, path in files:
        for task in _lines(path):
            assert_matches(task, types[family], f"{family}/{split}.jsonl {task.get('task_id')}")


def test_environment_task_lists_match_their_types() -> None:
    for env_id in ENVIRONMENTS:
        task_type = env_class(env_id).record_types().task
        for split in ("train", "val", "test"):
            env = gym.make(env_id, split=split)
            try:
                for task in env.unwrapped.tasks:
                    assert_matches(task, task_type, f"{env_id} {split} {task['task_id']}")
            finally:
                env.close()


def test_bundled_labelled_sets_match_the_type() -> None:
    files = _task_files("labelled.jsonl")
    assert len(files) == len(ENVIRONMENTS)
    for family, path in files:
        for i, record in enumerate(_lines(path)):
            assert_matches(record, R.LabelledRecord, f"{family}/labelled.jsonl line {i + 1}", env_id=record["env_id"])


def test_an_environment_info_entry_it_does_not_declare_fails_its_type() -> None:
    info = {"task_id": "t", "turn": 0, "tool_calls": 0, "format_errors": 0, "tool_errors": 0}
    assert problems(info | {"cache_hits": 1, "cache_misses": 0, "faults": 0}, R.ResetInfo, read_as=env_types("agentgym/SQL-v0")) == []
    assert problems(info | {"cache_hits": 1, "cache_misses": 0, "faults": 0}, R.ResetInfo)  # the core's own declares none of them
    assert problems(info | {"sandbox_runs": 1}, R.ResetInfo, read_as=env_types("agentgym/SQL-v0"))  # CodeExec's entry, not SQL's


def test_the_record_types_are_exported() -> None:
    for name in ("ChatMessage", "EpisodeRecord", "StepRecord", "StepInfo", "RewardInfo", "TaskRecord", "TurnRecord", "TrajectoryRecord", "LabelledRecord"):
        assert getattr(agentgym, name) is getattr(R, name) and name in agentgym.__all__
