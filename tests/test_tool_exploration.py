"""``rollout.error_tool_exploration``: after a failed tool call, a turn may open with a call to a
random tool, given rather than sampled; the model writes the rest, and the given tokens are the
model's in the trajectory (loss mask 1, sampling logprob 0)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import pytest
import torch

from agentgym.models.backend import Generation, SamplingParams
from agentgym.parsing import format_tool_call, parse_action
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.episode import TokenEpisode
from agentgym.rollouts.runner import RolloutConfig, run_rollouts
from agentgym.rollouts.settings import NO_EXPLORATION, RolloutSettings
from agentgym.trainers.trainer import opening_mask

SQL_CALL = format_tool_call("sql", {"query": "SELECT 1"})


def _faulty_sql() -> gym.Env:
    """SQL-v0 whose every first sql call fails (a seeded transient fault); the next one runs."""
    return gym.make("agentgym/SQL-v0", split="train", fault_rate=1.0, max_consecutive_faults=1)


def _episode(tokenizer: Any, **settings: Any) -> TokenEpisode:
    env = _faulty_sql()
    opening, _ = env.reset(seed=0)
    rollout = RolloutSettings(max_new_tokens=64, temperature=0.7, **settings)
    return TokenEpisode(env, opening, rollout.renderer(tokenizer, env.unwrapped.tools), rollout)


def test_call_openings_end_at_each_tools_first_argument_name(default_tokenizer: Any) -> None:
    episode = _episode(default_tokenizer)
    openings = episode.renderer.call_openings
    # SQL-v0's tools in their order: answer(text), sql(query); the name comes first, so an opening fixes the tool.
    texts = [default_tokenizer.decode(o) for o in openings]
    assert texts == ['<tool_call>{"name": "answer", "arguments": {"text', '<tool_call>{"name": "sql", "arguments": {"query']
    # Each is the start of its whole call's own tokens, so the model continues as it would have.
    for opening, name, key in zip(openings, ("answer", "sql"), ("text", "query"), strict=True):
        whole = default_tokenizer.encode(format_tool_call(name, {key: "x"}), add_special_tokens=False)
        assert tuple(whole[: len(opening)]) == opening


def test_the_call_prefix_is_what_every_call_begins_with(default_tokenizer: Any) -> None:
    renderer = _episode(default_tokenizer).renderer
    assert default_tokenizer.decode(renderer.call_prefix) == '<tool_call>{"name": "'
    for opening in renderer.call_openings:
        assert opening[: len(renderer.call_prefix)] == renderer.call_prefix
    # With a single tool, its whole opening is shared.
    single = ChatRenderer(default_tokenizer, tools=[renderer.tools[1]])
    assert single.call_prefix == single.call_openings[0]


def _tool(name: str, *arguments: str) -> dict[str, Any]:
    properties = {a: {"type": "string"} for a in arguments}
    return {
        "type": "function",
        "function": {"name": name, "description": name, "parameters": {"type": "object", "properties": properties, "required": list(arguments)}},
    }


def test_a_call_closing_is_what_every_call_to_its_tool_ends_with(default_tokenizer: Any) -> None:
    renderer = _episode(default_tokenizer).renderer
    # SQL-v0: the name came first, so a call closes after its arguments' last value.
    texts = [default_tokenizer.decode(c) for c in renderer.call_closings]
    assert texts == ["}}</tool_call>", "}}</tool_call>"]
    # A tool without arguments: its whole call is the same every time; the closing starts after its name (a choice).
    tools = [_tool("get_order", "order_id"), _tool("cancel_order", "order_id"), _tool("search", "query"), _tool("stop")]
    other = ChatRenderer(default_tokenizer, tools=tools)
    texts = [default_tokenizer.decode(c) for c in other.call_closings]
    assert texts == ["}}</tool_call>", "}}</tool_call>", "}}</tool_call>", '", "arguments": {}}</tool_call>']
    assert other.call_format.closings == other.call_closings and other.call_format.prefix == other.call_prefix
    # Each closing is the last tokens of a call to its tool, whatever its arguments' values.
    for tool, closing in zip(tools, other.call_closings, strict=True):
        function = tool["function"]
        for value in ("1977", "Ada Lovelace", "it's 3."):
            ids = default_tokenizer.encode(
                format_tool_call(function["name"], dict.fromkeys(function["parameters"]["required"], value)), add_special_tokens=False
            )
            assert tuple(ids[-len(closing) :]) == closing


def test_the_turn_after_a_failed_call_opens_with_a_random_tool(default_tokenizer: Any) -> None:
    episode = _episode(default_tokenizer, error_tool_exploration=1.0)
    openings = episode.renderer.call_openings
    first = episode.sampling_params(seed=0)
    assert episode.opening_ids == () and first.max_new_tokens == 64  # no error yet: nothing given
    episode.play_turn(default_tokenizer.encode(SQL_CALL, add_special_tokens=False))  # the seeded fault
    assert episode.after_error()
    drawn = {}
    for seed in range(40):
        params = episode.sampling_params(seed=seed)
        drawn[seed] = episode.opening_ids
        assert params.max_new_tokens == 64 - len(episode.opening_ids)
    assert set(drawn.values()) == set(openings)  # both tools, drawn by the turn's seed
    assert sum(o == openings[1] for o in drawn.values()) in range(10, 31)  # about half each
    episode.sampling_params(seed=7)
    assert episode.opening_ids == drawn[7]  # the same seed draws the same tool

    # The caller must pass the opening first; the turn records how many tokens were given.
    rest = default_tokenizer.encode("SELECT 1", add_special_tokens=False)
    with pytest.raises(ValueError, match="must begin with its opening_ids"):
        episode.add_generation(rest)
    sql = next(seed for seed, o in drawn.items() if o == openings[1])
    episode.sampling_params(seed=sql)
    tail = default_tokenizer.encode('": "SELECT 1"}}</tool_call>', add_special_tokens=False)
    episode.play_turn([*episode.opening_ids, *tail])
    turn = episode.turns[-1]
    assert turn["opening_tokens"] == len(openings[1]) and episode.opening_ids == ()
    assert [c["name"] for c in turn["tool_calls"]] == ["sql"] and not turn["parse_errors"]
    assert int(turn["info"]["turn_tool_errors"]) == 0  # the retry ran


def test_exploration_is_off_by_default_and_at_probability_zero_changes_nothing(default_tokenizer: Any) -> None:
    def played(**settings: Any) -> list[Any]:
        episode = _episode(default_tokenizer, **settings)
        for seed in range(3):
            episode.sampling_params(seed=seed)
            episode.play_turn(default_tokenizer.encode(SQL_CALL, add_special_tokens=False))
            if not episode.wants_generation:
                break
        return episode.turns

    plain = played()
    assert RolloutSettings().error_tool_exploration == 0.0
    assert all("opening_tokens" not in t for t in plain)  # records keep their old fields
    assert played(error_tool_exploration=0.0) == plain
    with pytest.raises(ValueError, match="error_tool_exploration"):
        RolloutSettings(error_tool_exploration=1.5)


def test_evaluations_turn_every_exploration_setting_off() -> None:
    exploration = {f.name for f in dataclasses.fields(RolloutSettings) if f.name.startswith("error_")}
    assert set(NO_EXPLORATION) == exploration
    assert RolloutSettings(**NO_EXPLORATION) == RolloutSettings()


class _CompletesCalls:
    """A backend that finishes whatever call the prompt has opened (an sql call when none is open)
    and records the prompts it was given."""

    name = "completes-calls"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prompts: list[tuple[int, ...]] = []

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            self.prompts.append(tuple(prompt))
            tail = self.tokenizer.decode(prompt[-3:])
            if tail.endswith("query"):
                text = '": "SELECT 1"}}</tool_call>'
            elif tail.endswith("text"):
                text = '": "a guess"}}</tool_call>'
            else:
                text = SQL_CALL
            ids = (*self.tokenizer.encode(text, add_special_tokens=False), p.stop_token_ids[0])
            out.append(Generation(ids, (-0.5,) * len(ids), text, "stop"))
        return out


def test_the_runner_samples_after_the_opening_and_trains_on_it(default_tokenizer: Any) -> None:
    config = RolloutConfig(
        "agentgym/SQL-v0",
        split="train",
        num_tasks=4,
        group_size=4,
        max_turns=3,
        max_new_tokens=64,
        temperature=0.7,
        seed=3,
        env_kwargs={"fault_rate": 1.0, "max_consecutive_faults": 1},
        error_tool_exploration=1.0,
    )
    backend = _CompletesCalls(default_tokenizer)
    episodes = run_rollouts(backend, config)
    explored = [(e, t) for e in episodes for t in e.turns if "opening_tokens" in t]
    assert len(explored) == len(episodes)  # every episode's second turn follows the fault
    tools = set()
    for episode, turn in explored:
        n = turn["opening_tokens"]
        opening = tuple(turn["sampled_ids"][:n])
        # The model was asked to continue the opening, and its logprobs there are the given 0.0.
        assert (*turn["prompt_ids"], *opening) in backend.prompts
        assert turn["logprobs"][:n] == (0.0,) * n and turn["logprobs"][n:] == (-0.5,) * (len(turn["sampled_ids"]) - n)
        tools |= {c["name"] for c in turn["tool_calls"]}
        assert parse_action(turn["text"]).tool_calls  # a well-formed call of the drawn tool
        # Every token of the turn, the given ones included, is in the loss.
        assert sum(episode.trajectory.loss_mask) == sum(len(t["sampled_ids"]) for t in episode.turns)
    assert tools == {"sql", "answer"}
    # The trainer finds the given tokens by position (grpo.openings_in_loss).
    width = max(len(e.trajectory.token_ids) for e in episodes)
    given = opening_mask(episodes, width)
    for row, episode in enumerate(episodes):
        openings = [tuple(t["sampled_ids"][: t["opening_tokens"]]) for t in episode.turns if "opening_tokens" in t]
        assert tuple(int(i) for i in torch.tensor(episode.trajectory.token_ids)[given[row, : len(episode.trajectory.token_ids)]]) == sum(openings, ())
    # Seeded: the same configuration plays the same episodes.
    again = run_rollouts(_CompletesCalls(default_tokenizer), config)
    assert [e.to_dict() for e in again] == [e.to_dict() for e in episodes]
