"""The rollout runner: the real default model in real environments, and the OpenAI-compatible path.

The real-model runs keep the model's work tiny (one batched round of a few tokens per test) because
the test machine's CPU is small and shared. To put tool output into those trajectories without
waiting for a 135M model to call a tool, the first turn of each episode is the environment's oracle
turn (a scripted backend); every later turn is sampled by the model. The fake server of
``tests/fakes.py`` serves whole oracle episodes over the OpenAI-compatible API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from fakes import OracleScript

import agentgym  # noqa: F401 - registers the environments
from agentgym.models import Generation, OpenAICompatibleBackend, SamplingParams
from agentgym.models.backend import decode_visible
from agentgym.parsing import parse_action
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.runner import Episode, RolloutConfig, RolloutProgress, RolloutRunner, run_rollouts, turn_seed
from agentgym.rollouts.scripted import assistant_turns
from agentgym.rollouts.trajectory import RenderCheck, check_rendering


class Recording:
    """Wraps a backend and records every generate() call; the first ``scripted_turns`` come from a script."""

    def __init__(self, inner: Any, script: OracleScript | None = None, scripted_turns: int = 0) -> None:
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.name = inner.name
        self.script = script
        self.scripted_turns = scripted_turns
        self.calls: list[list[SamplingParams]] = []

    def clear_cache(self) -> None:
        """Passed through, so every run starts the wrapped backend from an empty key/value cache."""
        if hasattr(self.inner, "clear_cache"):
            self.inner.clear_cache()

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        self.calls.append(list(params))
        out: list[Generation | None] = [None] * len(prompts)
        sampled = []
        for i, prompt in enumerate(prompts):
            if self.script is not None and self.script.turn_of(prompt) < self.scripted_turns:
                ids = self.script.reply(prompt, params[i].max_new_tokens)
                out[i] = Generation(tuple(ids), (-0.5,) * len(ids), decode_visible(self.tokenizer, ids), "stop")
            else:
                sampled.append(i)
        if sampled:
            generations = self.inner.generate([prompts[i] for i in sampled], [params[i] for i in sampled])
            for i, generation in zip(sampled, generations, strict=True):
                out[i] = generation
        return [g for g in out if g is not None]


def first_test_task(env_id: str) -> str:
    env = gym.make(env_id, split="test")
    task_id = env.unwrapped.task_ids[0]
    env.close()
    return task_id


def renderer_for(env_id: str, tok: Any) -> ChatRenderer:
    env = gym.make(env_id)
    renderer = ChatRenderer(tok, tools=env.unwrapped.tools)
    env.close()
    return renderer


def assert_token_exact(episode: Episode, renderer: ChatRenderer) -> None:
    """The trajectory is the recorded prompts and samples, masked 1 exactly on the sampled ids."""
    trajectory = episode.trajectory
    ids = trajectory.token_ids
    expected_mask = np.zeros(len(ids), dtype=int)
    expected_logprobs = np.zeros(len(ids))
    for turn in episode.turns:
        start = len(turn["prompt_ids"])
        end = start + len(turn["sampled_ids"])
        assert ids[:start] == turn["prompt_ids"]  # each turn was prompted with the sequence before it
        assert ids[start:end] == turn["sampled_ids"]
        expected_mask[start:end] = 1
        expected_logprobs[start:end] = turn["logprobs"]
    assert list(trajectory.loss_mask) == expected_mask.tolist()
    np.testing.assert_allclose(trajectory.logprobs, expected_logprobs)
    # Each next prompt extends the last one by exactly the samples, a closing token when the model did
    # not end its turn, and the environment's delta: nothing was re-tokenised.
    for turn, following in zip(episode.turns, episode.turns[1:], strict=False):
        closing = () if turn["sampled_ids"][-1] == renderer.eot_token_id else (renderer.eot_token_id,)
        assert following["prompt_ids"] == turn["prompt_ids"] + turn["sampled_ids"] + closing + turn["env_message_ids"]
    # Every environment message (tool output included) lies inside a fully masked delta.
    for turn in episode.turns:
        if not turn["env_message_ids"]:
            continue
        [segment] = [s for s in trajectory.segments if s.kind == "env" and s.token_ids == turn["env_message_ids"]]
        assert set(trajectory.loss_mask[segment.start : segment.end]) == {0}
        delta = renderer.tokenizer.decode(list(segment.token_ids))
        assert all(message["content"] in delta for message in turn["env_messages"])
    assert check_rendering(trajectory, renderer) == RenderCheck(True, True, None)
    assistant = [m["content"] for m in episode.record["messages"] if m["role"] == "assistant"]
    assert assistant == [turn["text"] for turn in episode.turns]


# ----------------------------------------------------------------------------- the real default model


@pytest.fixture(scope="module", params=["agentgym/SQL-v0", "agentgym/SearchQA-v0"])
def real_run(request, backend, tokenizer) -> tuple[RolloutConfig, Recording, list[Episode], ChatRenderer]:
    """One task, a group of two: the oracle's first turn, then one turn sampled by the real model."""
    env_id = request.param
    task_id = first_test_task(env_id)
    recording = Recording(backend, OracleScript(env_id, [task_id], tokenizer), scripted_turns=1)
    config = RolloutConfig(env_id, split="test", task_ids=[task_id], group_size=2, seed=5, max_turns=2, max_new_tokens=6)
    return config, recording, run_rollouts(recording, config), renderer_for(env_id, tokenizer)


def test_real_model_trajectories_are_token_exact(real_run) -> None:
    config, recording, episodes, renderer = real_run
    assert [(e.group, e.member) for e in episodes] == [(0, 0), (0, 1)]
    for episode in episodes:
        assert episode.stop_reason == "max_turns" and len(episode.turns) == 2
        assert episode.record["stop_reason"] == "max_turns" and episode.record["group"] == 0
        assert episode.record["policy"] == recording.name and episode.reward == episode.record["reward"]
        assert any(m["role"] == "tool" for m in episode.turns[0]["env_messages"])  # tool output is in the sequence
        assert episode.turns[1]["env_message_ids"] == ()  # nothing follows the last turn
        assert_token_exact(episode, renderer)


def test_one_batched_generate_per_round_with_seeded_params(real_run) -> None:
    config, recording, episodes, renderer = real_run
    assert [len(call) for call in recording.calls] == [2, 2]
    for turn, call in enumerate(recording.calls):
        for episode, params in enumerate(call):
            assert params.stop_token_ids == (renderer.eot_token_id,)
            assert params.seed == turn_seed(config.seed, episode, turn) == episodes[episode].turns[turn]["seed"]
            assert (params.temperature, params.top_p, params.max_new_tokens) == (1.0, 1.0, 6)


def test_group_members_differ(real_run) -> None:
    _, _, episodes, _ = real_run
    first, second = (e.turns[1]["sampled_ids"] for e in episodes)
    assert first != second


@pytest.mark.parametrize("real_run", ["agentgym/SearchQA-v0"], indirect=True)  # the cheaper prompt
def test_reruns_are_identical(real_run, backend) -> None:
    config, recording, episodes, _ = real_run
    again = run_rollouts(Recording(backend, recording.script, scripted_turns=1), config)
    assert [e.trajectory.token_ids for e in again] == [e.trajectory.token_ids for e in episodes]
    assert [e.trajectory.logprobs for e in again] == [e.trajectory.logprobs for e in episodes]


# ------------------------------------------------------------------- OpenAI-compatible path, fake server


@pytest.mark.parametrize("env_name", ["agentgym/Refund-v0", "agentgym/SQL-v0"])
def test_oracle_episodes_through_the_openai_backend(fake_server, tokenizer, env_name) -> None:
    task_id = first_test_task(env_name)
    script = OracleScript(env_name, [task_id], tokenizer)
    fake_server.responder = script.respond
    config = RolloutConfig(env_name, split="test", task_ids=[task_id], group_size=2, seed=9, temperature=0.7, top_p=0.9)
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer) as client:
        episodes = run_rollouts(client, config)
    oracle = script.records[task_id]
    renderer = renderer_for(env_name, tokenizer)
    for episode in episodes:
        assert episode.stop_reason == "done" and episode.record["success"] and episode.reward == oracle["reward"]
        assert episode.record["messages"] == oracle["messages"]
        assert len(episode.turns) == len(assistant_turns(oracle)) > 1
        assert_token_exact(episode, renderer)
    first_calls = parse_action(assistant_turns(oracle)[0], id_prefix="call_1").tool_calls
    assert episodes[0].turns[0]["tool_calls"] == [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in first_calls]
    assert [m["tool_call_id"] for m in episodes[0].turns[0]["env_messages"]] == [c.id for c in first_calls]
    bodies = fake_server.requests
    assert len(bodies) == sum(len(e.turns) for e in episodes)
    assert all(b["stop_token_ids"] == [renderer.eot_token_id] for b in bodies)
    assert all((b["temperature"], b["top_p"]) == (0.7, 0.9) for b in bodies)
    assert len({b["seed"] for b in bodies}) == len(bodies)  # every episode and turn has its own seed


def test_token_budget_stops_episodes_within_the_budget(fake_server, tokenizer) -> None:
    env_id = "agentgym/SQL-v0"
    task_id = first_test_task(env_id)
    script = OracleScript(env_id, [task_id], tokenizer)
    fake_server.responder = script.respond
    prompt_length = len(renderer_for(env_id, tokenizer).prompt_ids(_opening(env_id, task_id)))
    budget = prompt_length + 12
    config = RolloutConfig(env_id, split="test", task_ids=[task_id], max_total_tokens=budget)
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer) as client:
        [episode] = run_rollouts(client, config)
    [body] = fake_server.requests
    assert body["max_tokens"] == 11  # one token stays free for the closing end-of-turn token
    assert episode.stop_reason == "token_budget" and episode.record["stop_reason"] == "token_budget"
    assert len(episode.trajectory.token_ids) == budget
    assert [s.kind for s in episode.trajectory.segments] == ["prompt", "sampled", "closing"]
    assert not episode.record["success"] and episode.reward == 0.0
    assert episode.turns[0]["env_message_ids"] == () and episode.turns[0]["env_messages"]

    fake_server.requests.clear()
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer) as client:
        [too_long] = run_rollouts(client, RolloutConfig(env_id, split="test", task_ids=[task_id], max_total_tokens=10))
    assert too_long.stop_reason == "token_budget" and too_long.turns == [] and fake_server.requests == []
    assert [s.kind for s in too_long.trajectory.segments] == ["prompt"]


def _opening(env_id: str, task_id: str) -> list[dict[str, Any]]:
    env = gym.make(env_id, split="test")
    observation, _ = env.reset(options={"task_id": task_id})
    env.close()
    return observation


def test_one_at_a_time_plays_the_same_episodes(fake_server, tokenizer) -> None:
    env_id = "agentgym/Refund-v0"
    env = gym.make(env_id, split="test")
    task_ids = env.unwrapped.task_ids[:3]
    env.close()
    script = OracleScript(env_id, task_ids, tokenizer)
    fake_server.responder = script.respond
    config = RolloutConfig(env_id, split="test", task_ids=task_ids, group_size=2)
    runs = {}
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer) as client:
        for concurrent in (None, 1):
            recording = Recording(client)
            progress: list[RolloutProgress] = []
            runner = RolloutRunner(recording)
            episodes = runner.run(replace(config, max_concurrent=concurrent), progress=progress.append)
            runs[concurrent] = episodes
            sizes = [len(call) for call in recording.calls]
            assert max(sizes) == (6 if concurrent is None else 1)
            assert (progress[0].finished, progress[0].total, progress[0].work) == (0, 6, 0.0)
            assert (progress[-1].finished, progress[-1].work) == (6, 6.0)
            assert [p.work for p in progress] == sorted(p.work for p in progress)
            # The estimate moves on turns that finish no episode.
            assert any(p.work > p.finished for p in progress)
            assert progress[-1].turns == sum(len(e.turns) for e in episodes) and progress[-1].sampled_tokens == runner.last_timing.sampled_tokens
            timing = runner.last_timing
            assert timing is not None and timing.rounds == len(recording.calls) and timing.episodes == 6
            assert timing.sampled_tokens == sum(len(t["sampled_ids"]) for e in episodes for t in e.turns)
            assert timing.prompt_tokens == sum(len(t["prompt_ids"]) for e in episodes for t in e.turns)
            assert 0 < timing.generate_s + timing.env_s + timing.render_s <= timing.wall_s
    assert [e.to_dict() for e in runs[None]] == [e.to_dict() for e in runs[1]]
    assert [e.record["task_id"] for e in runs[1]] == [t for t in task_ids for _ in range(2)]
    assert all(e.record["success"] for e in runs[1])


def test_default_tasks_are_a_seeded_shuffle(fake_server, tokenizer) -> None:
    env_id = "agentgym/Refund-v0"
    env = gym.make(env_id, split="val")
    available = env.unwrapped.task_ids
    env.close()
    order = np.random.default_rng(4).permutation(len(available))
    expected = [available[int(i)] for i in order[:3]]
    script = OracleScript(env_id, expected, tokenizer, split="val")
    fake_server.responder = script.respond
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer) as client:
        episodes = run_rollouts(client, RolloutConfig(env_id, split="val", num_tasks=3, seed=4, max_turns=1))
    assert [e.record["task_id"] for e in episodes] == expected
    assert [e.record["seed"] for e in episodes] == [4, 5, 6]
    assert all(e.stop_reason == "max_turns" and e.record["difficulty"] in {"easy", "medium", "hard"} for e in episodes)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"env_id": "agentgym/Nope-v0"}, "unknown environment"),
        ({"task_ids": ["no-such-task"]}, "unknown task ids"),
        ({"env_kwargs": {"colour": 1}}, "cannot make"),
    ],
)
def test_bad_rollouts_fail_before_generating(kwargs, fragment) -> None:
    class Unused:
        tokenizer = None
        name = "unused"

        def generate(self, prompts, params):
            raise AssertionError("nothing may be generated")

    config = RolloutConfig(**{"env_id": "agentgym/Refund-v0", **kwargs})
    with pytest.raises(ValueError, match=fragment):
        run_rollouts(Unused(), config)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"group_size": 0}, "group_size"),
        ({"num_tasks": 0}, "num_tasks"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_total_tokens": 1}, "max_total_tokens"),
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"env_workers": 0}, "env_workers"),
        ({"seed": -1}, "seed"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"split": "dev"}, "split"),
        ({"task_ids": []}, "task_ids"),
        ({"task_ids": "refund-0001"}, "task_ids"),
        ({"env_kwargs": {"max_turns": 3}}, "max_turns"),
    ],
)
def test_config_is_validated(kwargs, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        RolloutConfig("agentgym/Refund-v0", **kwargs)


def test_turn_seeds_are_distinct_and_stable() -> None:
    seeds = {turn_seed(0, episode, turn) for episode in range(20) for turn in range(20)}
    assert len(seeds) == 400
    assert turn_seed(3, 1, 2) == turn_seed(3, 1, 2) != turn_seed(4, 1, 2)


def test_distinct_env_seeds_give_each_member_its_own_seed(fake_server, tokenizer) -> None:
    env_id = "agentgym/Refund-v0"
    env = gym.make(env_id, split="val")
    task_ids = env.unwrapped.task_ids[:2]
    env.close()
    fake_server.responder = OracleScript(env_id, task_ids, tokenizer, split="val").respond
    config = RolloutConfig(env_id, split="val", task_ids=task_ids, group_size=3, seed=4, max_turns=1, distinct_env_seeds=True)
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer) as client:
        seeds = [e.record["seed"] for e in run_rollouts(client, config)]
        again = [e.record["seed"] for e in run_rollouts(client, config)]
        shared = [e.record["seed"] for e in run_rollouts(client, replace(config, distinct_env_seeds=False))]
    assert len(set(seeds)) == 6 and seeds == again
    assert shared == [4, 4, 4, 5, 5, 5]
