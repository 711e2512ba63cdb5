"""TokenEpisode (the episode driver the runner and every adapter share) and the environment pool."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from adapter_support import REFUND, ScriptedEngine, oracle_turns, rendered_conversation

from agentgym.rollouts.episode import RolloutSettings, TokenEpisode
from agentgym.trainers.adapters.export import export_rows
from agentgym.trainers.adapters.pool import EnvPool
from agentgym.trainers.adapters.spec import EpisodeSpec


def _spec(index: int = 0) -> EpisodeSpec:
    return EpisodeSpec.from_json(export_rows("openrlhf", REFUND, split="val", limit=index + 1)[index]["label"])


def _start(spec: EpisodeSpec, tokenizer: Any, response_budget: int | None = None, **settings: Any) -> TokenEpisode:
    env = spec.make()
    opening, _ = spec.reset(env)
    rollout = RolloutSettings(**{"max_new_tokens": 4096, **settings})
    episode = TokenEpisode(env, opening, rollout.renderer(tokenizer, env.unwrapped.tools), rollout)
    if response_budget is not None:
        episode.cap_response(response_budget)
    return episode


def test_oracle_episode_masks_exactly_the_sampled_tokens(tiny_tokenizer: Any) -> None:
    spec = _spec()
    engine = ScriptedEngine(tiny_tokenizer, oracle_turns(spec))
    episode = _start(spec, tiny_tokenizer)
    while episode.wants_generation:
        turn = engine.next_turn(episode.token_ids)
        episode.play_turn(turn, [-1.0] * len(turn))
    tokens = episode.split()
    assert [t for t, m in zip(tokens.response_ids, tokens.response_mask, strict=True) if m] == engine.sampled
    assert tiny_tokenizer.decode(tokens.prompt_ids + tokens.response_ids, skip_special_tokens=False) == rendered_conversation(tiny_tokenizer, spec)
    assert [lp for lp, m in zip(tokens.response_logprobs, tokens.response_mask, strict=True) if m] == [-1.0] * len(engine.sampled)
    outcome = episode.outcome()
    assert (outcome.reward, outcome.success, outcome.terminated, outcome.truncated) == (1.0, True, True, False)
    assert outcome.metrics()["agentgym_turns"] == len(engine.turns)
    # Every generation prompt is the whole sequence so far.
    assert all(prompt == (tokens.prompt_ids + tokens.response_ids)[: len(prompt)] for prompt, _ in engine.calls)


def test_budget_stops_the_episode_and_scores_the_state(tiny_tokenizer: Any) -> None:
    spec = _spec()
    engine = ScriptedEngine(tiny_tokenizer, oracle_turns(spec))
    episode = _start(spec, tiny_tokenizer, response_budget=120)
    while episode.wants_generation:
        episode.play_turn(engine.next_turn(episode.token_ids)[: episode.room()])
    assert episode.stopped_by_budget and len(engine.calls) < len(engine.turns)
    tokens = episode.split()
    # The budget is never exceeded; the reply that left no room for a turn was dropped, so the
    # response ends with the last sampled turn (closed by an end-of-turn token).
    assert len(tokens.response_ids) == len(tokens.response_mask) <= 120
    assert episode.trajectory().segments[-1].kind in ("sampled", "closing")
    outcome = episode.outcome()
    assert (outcome.reward, outcome.terminated, outcome.truncated) == (0.0, False, True)
    assert "stopped before the episode ended" in outcome.reason


def test_phases_must_come_in_order(tiny_tokenizer: Any) -> None:
    episode = _start(_spec(), tiny_tokenizer)
    with pytest.raises(RuntimeError, match="add_generation"):
        episode.step_env("hello")
    with pytest.raises(ValueError, match="no tokens"):
        episode.add_generation([])
    with pytest.raises(ValueError, match="logprobs"):
        episode.add_generation([5, 6], [0.0])
    content = episode.add_generation(tiny_tokenizer("Hello there.", add_special_tokens=False)["input_ids"])
    with pytest.raises(RuntimeError, match="step_env"):
        episode.add_generation([5])
    reply = episode.step_env(content)
    assert reply is not None and reply[0]["role"] == "user"  # the scripted customer answers plain text
    episode.add_observation(reply)
    episode.stop()
    assert not episode.wants_generation and episode.outcome().truncated
    with pytest.raises(ValueError, match="response budget"):
        _start(_spec(), tiny_tokenizer, response_budget=0)
    with pytest.raises(ValueError, match="max_total_tokens"):
        _start(_spec(), tiny_tokenizer, max_total_tokens=1)


def test_a_turn_the_budget_cut_is_closed_but_not_trained(tiny_tokenizer: Any) -> None:
    episode = _start(_spec(), tiny_tokenizer)
    cut = tiny_tokenizer('<tool_call>{"name": "ask_cus', add_special_tokens=False)["input_ids"]
    episode.play_turn(cut)
    tokens = episode.split()
    closing = len(cut)
    assert tokens.response_ids[:closing] == cut and tokens.response_mask[:closing] == [1] * closing
    assert tokens.response_ids[closing] == tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokens.response_mask[closing] == 0
    assert episode.env.unwrapped.counts["format_errors"] == 1  # the environment read the broken call


def test_pool_reuses_environments_per_make_key() -> None:
    pool = EnvPool(max_idle=1)
    spec = EpisodeSpec(env_id=REFUND, task_id="refund-0000")
    other = EpisodeSpec(env_id=REFUND, task_id="refund-0001", env_kwargs={"max_turns": 3})
    with pool.lease(spec) as env:
        assert pool.idle(spec) == 0
    assert pool.idle(spec) == 1 and pool.acquire(EpisodeSpec(env_id=REFUND, task_id="refund-0002")) is env
    assert pool.acquire(other) is not env  # other make() arguments need their own environment
    pool.release(spec, env)
    pool.release(spec, spec.make())  # beyond max_idle: closed, not kept
    assert pool.idle(spec) == 1 and pool.idle(other) == 0
    pool.close()
    assert pool.idle(spec) == 0
    with pytest.raises(ValueError, match="max_idle"):
        EnvPool(max_idle=-1)


def test_error_temperature_applies_only_to_the_turn_after_a_failed_tool_call(tiny_tokenizer: Any) -> None:
    import gymnasium as gym

    # Every first sql call fails (a seeded transient fault, counted as a tool error) and the retry runs.
    env = gym.make("agentgym/SQL-v0", split="train", fault_rate=1.0, max_consecutive_faults=1)
    opening, _ = env.reset(seed=0)
    settings = RolloutSettings(max_new_tokens=512, temperature=0.7, error_temperature=1.3)
    episode = TokenEpisode(env, opening, settings.renderer(tiny_tokenizer, env.unwrapped.tools), settings)
    call = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT 1"}}</tool_call>'
    seen = []
    for text in (call, call, "no call at all", call):  # fault, retry runs, format error, fault again
        seen.append(episode.sampling_params(seed=len(seen)).temperature)
        episode.play_turn(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])
        if not episode.wants_generation:
            break
    seen.append(episode.sampling_params(seed=len(seen)).temperature)
    counts = [(int(t["info"]["tool_errors"]), int(t["info"]["format_errors"])) for t in episode.turns]
    assert counts[:2] == [(1, 0), (1, 0)]  # the fault, then the retry that ran
    # First turn at 0.7; after the fault 1.3; after the retry that ran 0.7 again; a malformed turn
    # (a format error, not a failed tool call) changes nothing; after the next fault 1.3.
    assert seen == [0.7, 1.3, 0.7, 0.7, 1.3]
    assert RolloutSettings(temperature=0.7).error_temperature is None
    with pytest.raises(ValueError, match="error_temperature"):
        RolloutSettings(error_temperature=0.0)


def test_error_temperature_tokens_heat_only_the_opening_of_the_turn_after_a_failed_call(tiny_tokenizer: Any) -> None:
    import gymnasium as gym

    env = gym.make("agentgym/SQL-v0", split="train", fault_rate=1.0, max_consecutive_faults=1)
    opening, _ = env.reset(seed=0)
    settings = RolloutSettings(max_new_tokens=512, temperature=0.7, error_temperature=2.0, error_temperature_tokens=8)
    episode = TokenEpisode(env, opening, settings.renderer(tiny_tokenizer, env.unwrapped.tools), settings)
    call = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT 1"}}</tool_call>'
    first = episode.sampling_params(seed=0)
    assert (first.temperature, first.hot_tokens, first.hot_temperature) == (0.7, 0, None)
    episode.play_turn(tiny_tokenizer(call, add_special_tokens=False)["input_ids"])  # the seeded fault
    after = episode.sampling_params(seed=1)
    assert (after.temperature, after.hot_tokens, after.hot_offset, after.hot_temperature) == (0.7, 8, 0, 2.0)
    assert [after.temperature_at(n) for n in (0, 7, 8, 30)] == [2.0, 2.0, 0.7, 0.7]
    # Only the decision's token: the 10th of the turn.
    windowed = dataclasses.replace(settings, error_temperature_tokens=1, error_temperature_offset=9)
    episode = TokenEpisode(env, env.reset(seed=0)[0], settings.renderer(tiny_tokenizer, env.unwrapped.tools), windowed)
    episode.play_turn(tiny_tokenizer(call, add_special_tokens=False)["input_ids"])
    assert [episode.sampling_params(seed=1).temperature_at(n) for n in (0, 8, 9, 10)] == [0.7, 0.7, 2.0, 0.7]
    with pytest.raises(ValueError, match="error_temperature_offset needs error_temperature_tokens"):
        RolloutSettings(error_temperature=2.0, error_temperature_offset=9)
    with pytest.raises(ValueError, match="error_temperature_tokens needs error_temperature"):
        RolloutSettings(error_temperature_tokens=8)
    with pytest.raises(ValueError, match="error_temperature_tokens"):
        RolloutSettings(error_temperature=2.0, error_temperature_tokens=0)
