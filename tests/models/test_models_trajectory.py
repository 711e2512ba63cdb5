"""Token-exact trajectories: masks, logprobs, re-rendering, unstable templates, batching."""

from __future__ import annotations

import json
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401 - registers the environments
from agentgym.models import Generation, SamplingParams
from agentgym.rollouts.batching import collate
from agentgym.rollouts.chat import ChatRenderer, TemplateError
from agentgym.rollouts.trajectory import RenderCheck, Trajectory, TrajectoryBuilder, check_rendering

LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order by id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Restates the conversation length in the system turn, so every new message rewrites earlier text.
COUNTING = "<|im_start|>system\n{{ messages | length }} messages so far<|im_end|>\n" + CHATML


def tool_result(episode: int, turn: int) -> str:
    return f'{{"order": "A-{episode}{turn}", "status": "delivered", "note": "café ✓"}}'


def env_messages(episode: int, turn: int) -> list[dict]:
    return [
        {"role": "tool", "name": "lookup_order", "tool_call_id": f"call_{turn}", "content": tool_result(episode, turn)},
        {"role": "user", "content": "Anything else?"},
    ]


def generation(tokenizer, ids: Sequence[int], finish: str = "stop") -> Generation:
    return Generation(tuple(ids), tuple(-0.25 - 0.01 * i for i in range(len(ids))), tokenizer.decode(list(ids)), finish)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def assert_mask_is_exactly_the_samples(trajectory: Trajectory, generations: Sequence[Generation]) -> None:
    sampled = [s for s in trajectory.segments if s.kind == "sampled"]
    assert [s.token_ids for s in sampled] == [g.token_ids for g in generations]
    trained = {i for s in sampled for i in range(s.start, s.end)}
    assert [int(i in trained) for i in range(len(trajectory.token_ids))] == list(trajectory.loss_mask)
    expected_logprobs = np.zeros(len(trajectory.token_ids))
    for segment, gen in zip(sampled, generations, strict=True):
        expected_logprobs[segment.start : segment.end] = gen.logprobs
    np.testing.assert_allclose(trajectory.logprobs, expected_logprobs)


def test_batched_model_episodes_are_token_exact(backend, tokenizer) -> None:
    renderer = ChatRenderer(tokenizer, tools=[LOOKUP])
    builders = [TrajectoryBuilder(renderer, [{"role": "user", "content": f"Where is order A-{e}?"}]) for e in range(2)]
    generations: list[list[Generation]] = [[] for _ in builders]
    prompts_seen: list[list[list[int]]] = [[] for _ in builders]
    for turn in range(3):
        prompts = [b.token_ids for b in builders]
        params = [SamplingParams(temperature=1.0, max_new_tokens=8, seed=1000 * e + turn) for e in range(2)]
        for e, (builder, gen) in enumerate(zip(builders, backend.generate(prompts, params), strict=True)):
            prompts_seen[e].append(prompts[e])
            generations[e].append(gen)
            builder.add_generation(gen)
            if turn < 2:
                builder.add_messages(env_messages(e, turn))

    for e, builder in enumerate(builders):
        trajectory = builder.build()
        assert_mask_is_exactly_the_samples(trajectory, generations[e])
        sampled = [s for s in trajectory.segments if s.kind == "sampled"]
        # Each turn was prompted with exactly the sequence preceding its sampled tokens.
        assert [list(trajectory.token_ids[: s.start]) for s in sampled] == prompts_seen[e]
        env_segments = [s for s in trajectory.segments if s.kind == "env"]
        for turn, segment in enumerate(env_segments):
            assert set(trajectory.loss_mask[segment.start : segment.end]) == {0}
            assert tool_result(e, turn) in tokenizer.decode(list(segment.token_ids))
        closed = sum(1 for g in generations[e] if g.token_ids[-1] != renderer.eot_token_id)
        assert trajectory.num_closed_turns == closed
        assert check_rendering(trajectory, renderer) == RenderCheck(True, True, None)


def test_refund_oracle_episode_through_the_builder(tokenizer) -> None:
    """Real environment observations (system policy, tool results with ids, customer replies)."""
    from agentgym.rollouts.scripted import make_policy

    env = gym.make("agentgym/Refund-v0")
    observation, info = env.reset(seed=3)
    oracle = make_policy(env, "oracle", 3)
    oracle.reset(env.unwrapped, observation, info)
    renderer = ChatRenderer(tokenizer, tools=env.unwrapped.tools)
    builder = TrajectoryBuilder(renderer, observation)
    generations = []
    done = False
    while not done:
        action = oracle.act(observation)
        generations.append(generation(tokenizer, [*encode(tokenizer, action), renderer.eot_token_id]))
        assert builder.add_generation(generations[-1]) == action
        observation, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
        if not done:
            builder.add_messages(observation)
            delta = tokenizer.decode(list(builder.build().segments[-1].token_ids))
            assert all(message["content"] in delta for message in observation)
    env.close()
    trajectory = builder.build()
    assert trajectory.num_turns == len(generations) > 3
    assert_mask_is_exactly_the_samples(trajectory, generations)
    assert check_rendering(trajectory, renderer) == RenderCheck(True, True, None)


def test_a_turn_the_model_ended_needs_no_closing_token(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "hi"}])
    gen = generation(tokenizer, [*encode(tokenizer, "Hello!"), renderer.eot_token_id])
    assert builder.add_generation(gen) == "Hello!"
    builder.add_messages([{"role": "user", "content": "bye"}])
    trajectory = builder.build()
    assert [s.kind for s in trajectory.segments] == ["prompt", "sampled", "env"]
    env = trajectory.segments[-1]
    assert tokenizer.decode(list(env.token_ids)) == "\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"
    assert_mask_is_exactly_the_samples(trajectory, [gen])
    assert check_rendering(trajectory, renderer) == RenderCheck(True, True, None)


def test_cut_off_turns_are_closed_with_a_masked_end_of_turn(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    for last in ([], [tokenizer.convert_tokens_to_ids("<|endoftext|>")]):
        builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "count"}])
        gen = generation(tokenizer, encode(tokenizer, "one two three") + last, finish="length")
        builder.add_generation(gen)
        trajectory = builder.build()
        closing = trajectory.segments[-1]
        assert (closing.kind, closing.token_ids) == ("closing", (renderer.eot_token_id,))
        assert trajectory.loss_mask[-1] == 0 and trajectory.num_closed_turns == 1
        assert_mask_is_exactly_the_samples(trajectory, [gen])
        assert check_rendering(trajectory, renderer) == RenderCheck(True, True, None)


def test_sampled_ids_are_kept_even_when_retokenising_would_change_them(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "hi"}])
    # One token per character: the text re-tokenises to far fewer, different tokens.
    spelled = [t for ch in "Sure thing" for t in encode(tokenizer, ch)]
    assert spelled != encode(tokenizer, "Sure thing")
    gen = generation(tokenizer, [*spelled, renderer.eot_token_id])
    builder.add_generation(gen)
    builder.add_messages([{"role": "user", "content": "thanks"}])
    trajectory = builder.build()
    assert_mask_is_exactly_the_samples(trajectory, [gen])
    check = check_rendering(trajectory, renderer)
    assert check.text_matches and not check.tokens_match
    assert check.first_mismatch == trajectory.segments[1].start


def test_templates_that_rewrite_history(tokenizer) -> None:
    opening = [{"role": "user", "content": "hi"}]
    reply = [*encode(tokenizer, "Hello"), tokenizer.convert_tokens_to_ids("<|im_end|>")]
    strict = TrajectoryBuilder(ChatRenderer(tokenizer, chat_template=COUNTING), opening, on_unstable="raise")
    strict.add_generation(generation(tokenizer, reply))
    with pytest.raises(TemplateError, match="not prefix-stable"):
        strict.add_messages(env_messages(0, 0))

    stable = TrajectoryBuilder(ChatRenderer(tokenizer, chat_template=CHATML), opening)
    stable.add_generation(generation(tokenizer, reply))
    stable.add_messages(env_messages(0, 0))
    renderer = ChatRenderer(tokenizer, chat_template=COUNTING)
    isolated = TrajectoryBuilder(renderer, opening)
    isolated.add_generation(generation(tokenizer, reply))
    isolated.add_messages(env_messages(0, 0))
    trajectory = isolated.build()
    assert not trajectory.prefix_stable and stable.build().prefix_stable
    assert trajectory.segments[-1].token_ids == stable.build().segments[-1].token_ids
    assert not check_rendering(trajectory, renderer).text_matches


def test_builder_call_order_and_bad_input(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "hi"}])
    with pytest.raises(RuntimeError, match="must follow add_generation"):
        builder.add_messages([{"role": "user", "content": "again"}])
    with pytest.raises(ValueError, match="no tokens"):
        builder.add_generation(Generation((), (), "", "stop"))
    builder.add_generation(generation(tokenizer, encode(tokenizer, "ok")))
    with pytest.raises(RuntimeError, match="twice"):
        builder.add_generation(generation(tokenizer, encode(tokenizer, "ok")))
    with pytest.raises(ValueError, match="role"):
        builder.add_messages([{"role": "observer", "content": "x"}])
    with pytest.raises(ValueError, match="on_unstable"):
        TrajectoryBuilder(renderer, [{"role": "user", "content": "hi"}], on_unstable="ignore")  # type: ignore[arg-type]


def test_json_round_trip(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer, tools=[LOOKUP])
    builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "hi"}])
    builder.add_generation(generation(tokenizer, encode(tokenizer, "Let me check."), finish="length"))
    builder.add_messages(env_messages(0, 0))
    trajectory = builder.build()
    restored = Trajectory.from_dict(json.loads(json.dumps(trajectory.to_dict())))
    assert restored == trajectory
    broken = trajectory.to_dict()
    broken["segments"][1]["start"] += 1
    with pytest.raises(ValueError, match="segment starts"):
        Trajectory.from_dict(broken)


def test_collate_pads_right_and_truncates(tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    trajectories = []
    for text in ("short", "a noticeably longer answer than the other one"):
        builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "hi"}])
        builder.add_generation(generation(tokenizer, [*encode(tokenizer, text), renderer.eot_token_id]))
        trajectories.append(builder.build())
    short, long = trajectories
    batch = collate(trajectories, pad_token_id=-1)
    assert batch.input_ids.shape == (2, len(long.token_ids))
    assert list(batch.lengths) == [len(short.token_ids), len(long.token_ids)]
    assert list(batch.input_ids[0, : len(short.token_ids)]) == list(short.token_ids)
    assert set(batch.input_ids[0, len(short.token_ids) :]) == {-1}
    assert batch.attention_mask[0].sum() == len(short.token_ids)
    assert list(batch.loss_mask[1]) == list(long.loss_mask)
    np.testing.assert_allclose(batch.logprobs[1], long.logprobs, rtol=1e-6)
    assert not batch.truncated.any()

    cut = len(short.token_ids) + 2
    kept = collate(trajectories, pad_token_id=0, max_length=cut)
    assert kept.input_ids.shape == (2, cut) and list(kept.truncated) == [False, True]
    assert list(kept.loss_mask[1]) == list(long.loss_mask[:cut])
    dropped = collate(trajectories, pad_token_id=0, max_length=cut, mask_truncated=True)
    assert dropped.loss_mask[1].sum() == 0 and dropped.loss_mask[0].sum() == sum(short.loss_mask)
    with pytest.raises(ValueError, match="at least one"):
        collate([], pad_token_id=0)
    with pytest.raises(ValueError, match="max_length"):
        collate(trajectories, pad_token_id=0, max_length=0)
