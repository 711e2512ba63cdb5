"""SFT warm start: demonstrations rendered token-exactly with the rollout masks, and the masked NLL update."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import pytest
import torch
from letters_env import TOY_ENV

from agentgym.models import load_model
from agentgym.parsing import format_tool_call
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.rollouts.trajectory import check_rendering
from agentgym.trainers.config import OptimSection, SFTSection
from agentgym.trainers.modeling import TrainerError, make_optimizer
from agentgym.trainers.sft import assistant_text, demonstration_records, demonstration_trajectories, record_to_trajectory, sft_batch_indices, sft_update


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), device="cpu", dtype="float32")


def renderer_for(env_id: str, tokenizer) -> ChatRenderer:
    env = gym.make(env_id)
    try:
        return ChatRenderer(tokenizer, tools=env.unwrapped.tools)
    finally:
        env.close()


@pytest.mark.parametrize("env_name", ["agentgym/SQL-v0", "agentgym/Refund-v0"])
def test_oracle_demonstrations_render_token_exactly_with_the_mask_on_assistant_tokens(env_name, tiny) -> None:
    tokenizer = tiny[1]
    env = gym.make(env_name)
    task_ids = env.unwrapped.task_ids[:2]
    env.close()
    renderer = renderer_for(env_name, tokenizer)
    for record in demonstration_records(env_name, SFTSection(), task_ids, split="train", seed=0):
        trajectory = record_to_trajectory(record, renderer)
        assert check_rendering(trajectory, renderer).tokens_match
        turns = [assistant_text(m) for m in record["messages"] if m["role"] == "assistant"]
        sampled = [s for s in trajectory.segments if s.kind == "sampled"]
        assert len(sampled) == len(turns)
        for segment, text in zip(sampled, turns, strict=True):
            assert segment.token_ids[-1] == renderer.eot_token_id
            assert tokenizer.decode(segment.token_ids[:-1]) == text
        trained = [t for t, m in zip(trajectory.token_ids, trajectory.loss_mask, strict=True) if m]
        assert trained == [t for s in sampled for t in s.token_ids]
        assert trajectory.segments[-1].kind == "sampled"  # nothing after the final turn


def test_openai_style_tool_calls_render_like_the_text_the_model_writes() -> None:
    message = {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sql", "arguments": json.dumps({"query": "SELECT 1"})}}],
    }
    assert assistant_text(message) == "Checking.\n" + format_tool_call("sql", {"query": "SELECT 1"})
    assert assistant_text({"role": "assistant", "content": "", "tool_calls": message["tool_calls"]}) == format_tool_call("sql", {"query": "SELECT 1"})
    assert assistant_text({"role": "assistant", "content": "plain"}) == "plain"


def test_recorded_demonstrations_keep_only_successes_of_the_env_and_tasks(tmp_path) -> None:
    env = gym.make(TOY_ENV)
    good = run_episode(env, make_policy(env, "oracle", 0), seed=0, task_id="letters-1")
    bad = run_episode(env, make_policy(env, "do_nothing", 0), seed=0, task_id="letters-2")
    env.close()
    other = {**good, "env_id": "agentgym/SQL-v0"}
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, bad, other)))
    kept = demonstration_records(TOY_ENV, SFTSection(source=str(path)), ["letters-1", "letters-2"], split="train", seed=0)
    assert kept == [good]
    with pytest.raises(TrainerError, match="no successful demonstration"):
        demonstration_records(TOY_ENV, SFTSection(source=str(path)), ["letters-2"], split="train", seed=0)
    with pytest.raises(TrainerError, match="neither 'oracle' nor an existing JSONL file"):
        demonstration_records(TOY_ENV, SFTSection(source=str(tmp_path / "absent.jsonl")), ["letters-1"], split="train", seed=0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"env_id": "x"\n', r"episodes\.jsonl:1: not valid JSON"),
        ("[1, 2]\n", r"record 1: not an episode record"),
        ('{"env_id": "x", "messages": [{"content": "no role"}]}\n', r"record 1: not an episode record"),
    ],
)
def test_unreadable_demonstration_files_are_clear_errors(tmp_path, content, message) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text(content)
    with pytest.raises(TrainerError, match=message):
        demonstration_records(TOY_ENV, SFTSection(source=str(path)), ["letters-1"], split="train", seed=0)


def test_a_demonstration_that_cannot_be_rendered_names_its_task(tiny) -> None:
    renderer = renderer_for(TOY_ENV, tiny[1])
    record = {
        "task_id": "letters-1",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "spell", "arguments": "{not json"}}]},
        ],
    }
    with pytest.raises(TrainerError, match="demonstration of task 'letters-1'"):
        demonstration_trajectories([record], renderer)
    with pytest.raises(TrainerError, match="no assistant turn"):
        demonstration_trajectories([{"task_id": "t", "messages": [{"role": "user", "content": "hi"}]}], renderer)


def test_batches_visit_every_demonstration_once_per_epoch_reproducibly() -> None:
    drawn = [i for step in range(6) for i in sft_batch_indices(5, 3, seed=4, step=step)]
    for epoch in range(3):
        assert sorted(drawn[epoch * 5 : (epoch + 1) * 5]) == list(range(5))
    assert drawn[:5] != drawn[5:10]  # reshuffled each epoch
    assert sft_batch_indices(5, 3, seed=4, step=3) == drawn[9:12]
    assert sft_batch_indices(5, 3, seed=5, step=0) != drawn[:3]


def toy_demos(tokenizer):
    renderer = renderer_for(TOY_ENV, tokenizer)
    records = demonstration_records(TOY_ENV, SFTSection(), ["letters-0", "letters-3", "letters-5"], split="train", seed=0)
    return [record_to_trajectory(r, renderer) for r in records]


def sft_step(model, demos, sft: SFTSection, lr: float = 1.0):
    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = sft_update(model, optimizer, scheduler, demos, sft, pad_token_id=0)
    return metrics, [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]


def test_micro_batches_give_the_one_batch_update(tiny) -> None:
    model, tokenizer = tiny
    demos = toy_demos(tokenizer)
    whole_metrics, whole = sft_step(model, demos, SFTSection(micro_batch_size=3, optim=OptimSection(max_grad_norm=None)))
    split_metrics, split = sft_step(model, demos, SFTSection(micro_batch_size=1, optim=OptimSection(max_grad_norm=None)))
    assert split_metrics["sft/loss"] == pytest.approx(whole_metrics["sft/loss"], rel=1e-5)
    assert whole_metrics["sft/loss_tokens"] == sum(sum(d.loss_mask) for d in demos)
    assert any(bool(d.abs().max() > 1e-4) for d in whole)
    for a, b in zip(split, whole, strict=True):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-4)


def test_sft_steps_lower_the_loss_on_the_demonstrations(tiny) -> None:
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    demos = toy_demos(tokenizer)
    sft = SFTSection(micro_batch_size=3, optim=OptimSection(lr=3e-2))
    optimizer, scheduler = make_optimizer(model, sft.optim, total_steps=8)
    losses = [sft_update(model, optimizer, scheduler, demos, sft, pad_token_id=0)["sft/loss"] for _ in range(8)]
    assert losses[-1] < 0.6 * losses[0]


def test_cut_demonstrations_without_assistant_tokens_are_an_error(tiny) -> None:
    model, tokenizer = tiny
    demos = toy_demos(tokenizer)
    prompt = min(d.prompt_length for d in demos)
    with pytest.raises(TrainerError, match="no assistant token"):
        sft_step(model, demos, SFTSection(max_length=prompt))
