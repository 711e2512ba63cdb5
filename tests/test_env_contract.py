"""The contract every registered environment keeps: Gymnasium's checker, spaces, determinism,
error observations for bad input, and an oracle that solves what it is given."""

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.env import EpisodeOver
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.spaces import AssistantTurn, ChatMessages


def test_check_env(env_id, make_env):
    env = make_env(env_id)
    check_env(env.unwrapped, skip_render_check=True)


def test_spaces_and_tools(env_id, make_env):
    env = make_env(env_id)
    assert isinstance(env.observation_space, ChatMessages) and isinstance(env.action_space, AssistantTurn)
    observation, info = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    assert observation[0]["role"] == "system"
    tools = env.unwrapped.tools
    assert tools and all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in tools)
    json.dumps(tools)  # schemas are plain JSON


def test_same_seed_same_actions_same_episode(env_id, make_env):
    lines = []
    for _ in range(2):
        env = make_env(env_id)
        for seed in (0, 1):
            lines.append(to_json_line(run_episode(env, make_policy(env, "random", seed), seed=seed)))
    assert lines[:2] == lines[2:]


def test_oracle_solves_sampled_tasks(env_id, make_env):
    env = make_env(env_id, split="val")
    for seed, task_id in enumerate(env.unwrapped.task_ids[:5]):
        record = run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)
        assert record["success"] and record["reward"] == pytest.approx(1.0), record["reward_reason"]


def test_a_policy_given_by_name_is_the_named_policy(make_env):
    env = make_env("agentgym/Refund-v0", split="val")
    task_id = env.unwrapped.task_ids[0]
    by_name = run_episode(env, "oracle", seed=4, task_id=task_id)
    assert by_name == run_episode(env, make_policy(env, "oracle", 4), seed=4, task_id=task_id, policy_name="oracle")
    assert by_name["policy"] == "oracle" and by_name["success"]


def test_bad_turns_become_error_observations(env_id, make_env):
    env = make_env(env_id)
    env.reset(seed=0)
    name = env.unwrapped.tools[0]["function"]["name"]
    for action in [
        "<tool_call>{",
        '<tool_call>{"name": "no_such_tool"}</tool_call>',
        f'<tool_call>{{"name": "{name}", "arguments": {{"zzz": 1}}}}</tool_call>',
        {"role": "assistant", "tool_calls": [{}]},
    ]:
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation and observation[0]["content"].startswith("Error:")
        assert info["turn_format_errors"] >= 1
        if terminated or truncated:
            break


def test_step_after_end_or_before_reset_is_refused(env_id, make_env):
    env = make_env(env_id, max_turns=1)
    with pytest.raises((EpisodeOver, gym.error.ResetNeeded)):
        env.step("hello")
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("hello")
    assert truncated or terminated
    assert "reward_components" in info and "success" in info
    with pytest.raises((EpisodeOver, gym.error.ResetNeeded)):
        env.step("hello")


def test_unknown_task_id_and_split_are_clear_errors(env_id, make_env):
    env = make_env(env_id)
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "no-such-task"})
    with pytest.raises(ValueError, match="split must be one of"):
        gym.make(env_id, split="dev")


def test_task_ids_are_checked_in_one_place() -> None:
    from agentgym.env import check_task_ids

    assert check_task_ids(("b", "a"), ["a", "b", "c"]) == ["b", "a"]
    with pytest.raises(ValueError, match=r"^unknown task ids for X: u0, u1, u2, u3, u4 and 2 more$"):
        check_task_ids([f"u{i}" for i in range(7)], ["a"], source="X")
    with pytest.raises(ValueError, match="empty"):
        check_task_ids([], ["a"])
