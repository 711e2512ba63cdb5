"""agentgym proxy: a tool loop written only against the official openai client records, through the
proxy, the token ids the rollout runner samples for the same seeds, and the trainer's GRPO update
on those recorded episodes is the update on the runner's."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("openai")
pytest.importorskip("torch")
import gymnasium as gym
import httpx
import openai
import torch

import agentgym  # noqa: F401 - registers the environments
from agentgym.bridges.asgi import serve_in_thread
from agentgym.bridges.proxy import ChatProxy
from agentgym.models import load_model
from agentgym.models.hf import HFBackend
from agentgym.rollouts.runner import RolloutConfig, run_rollouts
from agentgym.trainers.config import GRPOSection
from agentgym.trainers.trainer import grpo_update

ENV = "agentgym/SQL-v0"
SEED = 3
MAX_TURNS = 3
MAX_TOKENS = 12
TOKEN = "proxy-test-token"


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    model, tokenizer = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    model.config.max_position_embeddings = 4096  # SQL-v0's prompt is ~1,300 tokens; rotary positions have no table to outgrow
    return model, tokenizer


@pytest.fixture(scope="module")
def proxy(tiny):
    proxy = ChatProxy(HFBackend(*tiny), model_name="tiny")
    url, stop = serve_in_thread(proxy.app(TOKEN))
    yield proxy, url
    stop()
    proxy.close()


def play(client: openai.OpenAI, task_id: str, episode_id: str) -> float:
    """The harness: an OpenAI tool loop over the environment, knowing nothing of agentgym's tokens."""
    env = gym.make(ENV, split="test", max_turns=MAX_TURNS)
    messages, _ = env.reset(seed=SEED, options={"task_id": task_id})
    reward, done = 0.0, False
    while not done:
        answer = client.chat.completions.create(
            model="tiny", messages=messages, tools=env.unwrapped.tools, temperature=0, max_tokens=MAX_TOKENS, extra_headers={"X-Episode-Id": episode_id}
        )
        message = answer.choices[0].message
        turn = {"role": "assistant", "content": message.content or ""}
        if message.tool_calls:
            turn["tool_calls"] = [call.model_dump() for call in message.tool_calls]
        observation, reward, terminated, truncated, _ = env.step(turn)
        messages = [*messages, turn, *observation]
        done = terminated or truncated
    env.close()
    return float(reward)


def update(tiny, episodes) -> list[torch.Tensor]:
    """One GRPO update of the bundled trainer on a copy of the model; the parameters' changes."""
    model = copy.deepcopy(tiny[0])
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = grpo_update(
        model,
        None,
        optimizer,
        scheduler,
        episodes,
        GRPOSection(kl_coef=0.0),
        group_size=2,
        temperature=1.0,
        pad_token_id=0,
        max_len=4096,
        max_grad_norm=None,
        shuffle_seed=0,
    )
    assert metrics["batch/loss_tokens"] == sum(sum(e.trajectory.loss_mask) for e in episodes)
    return [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]


def test_recorded_episodes_are_the_runners_and_train_alike(tiny, proxy):
    proxy, url = proxy
    config = RolloutConfig(ENV, split="test", num_tasks=2, group_size=1, seed=SEED, max_turns=MAX_TURNS, max_new_tokens=MAX_TOKENS, temperature=0.0)
    runner = run_rollouts(HFBackend(*tiny), config)
    # The runner seeds group g's environment with seed + g; the harness plays each task at SEED.
    runner = [e for e in runner if e.group == 0] + run_rollouts(
        HFBackend(*tiny), RolloutConfig(**{**config.__dict__, "task_ids": [runner[1].record["task_id"]]})
    )
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    recorded = []
    for index, episode in enumerate(runner):
        episode_id = f"episode-{index}"
        reward = play(client, episode.record["task_id"], episode_id)
        assert reward == episode.reward
        proxy.end_episode(episode_id, reward)
        mine = proxy.episodes[episode_id]
        assert mine.trajectory().token_ids == episode.trajectory.token_ids
        assert mine.trajectory().loss_mask == episode.trajectory.loss_mask
        assert [t["prompt_ids"] for t in mine.turns] == [t["prompt_ids"] for t in episode.turns]
        assert [t["sampled_ids"] for t in mine.turns] == [t["sampled_ids"] for t in episode.turns]
        assert mine.trajectory().logprobs == pytest.approx(episode.trajectory.logprobs, abs=1e-4)
        assert len(mine.turns) == MAX_TURNS and any(t["env_message_ids"] for t in mine.turns)
        recorded.append(mine.to_episode(reward=float(index == 0), member=index))
    # The same labels on both: the update from the recorded episodes is the runner's update.
    labelled = [copy.copy(e) for e in runner]
    for index, episode in enumerate(labelled):
        episode.reward, episode.member = float(index == 0), index
    from_proxy, from_runner = update(tiny, recorded), update(tiny, labelled)
    assert any(bool(d.abs().max() > 1e-6) for d in from_proxy), "the update moved nothing; the comparison would be vacuous"
    for a, b in zip(from_proxy, from_runner, strict=True):
        torch.testing.assert_close(a, b)


def test_requests_that_cannot_be_recorded_exactly_are_refused(proxy):
    proxy, url = proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)
    opening = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    first = client.chat.completions.create(model="tiny", messages=opening, n=2, temperature=1.0, seed=5, max_tokens=4, metadata={"episode_id": "e"})
    assert len(first.choices) == 2
    rewritten = [{"role": "system", "content": "Be long."}, opening[1], {"role": "assistant", "content": first.choices[0].message.content}, opening[1]]
    with pytest.raises(openai.ConflictError, match="message 0 differs"):
        client.chat.completions.create(model="tiny", messages=rewritten, max_tokens=4, metadata={"episode_id": "e"})
    second = [*opening, {"role": "assistant", "content": first.choices[1].message.content}, {"role": "user", "content": "More"}]
    client.chat.completions.create(model="tiny", messages=second, max_tokens=4, metadata={"episode_id": "e"})
    assert proxy.episodes["e"].turns[0]["seed"] != 5  # the harness took choice 1, whose seed derives from 5
    with pytest.raises(openai.BadRequestError, match="stream is not supported"):
        client.chat.completions.create(model="tiny", messages=opening, stream=True)
    with pytest.raises(openai.BadRequestError, match="temperature must be >= 0"):
        client.chat.completions.create(model="tiny", messages=opening, temperature=-1)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    line = httpx.post(f"{url}/v1/episodes/e/end", json={"reward": 0.5}, headers=headers).json()
    episode = proxy.episodes["e"]
    assert line["reward"] == 0.5 and line["token_ids"] == list(episode.trajectory().token_ids) and line["loss_mask"] == list(episode.trajectory().loss_mask)
    assert [len(r["choices"]) for r in line["requests"]] == [2, 1] and len(episode.turns) == 2
    again = httpx.post(f"{url}/v1/chat/completions", json={"messages": second, "max_tokens": 4}, headers={**headers, "X-Episode-Id": "e"})
    assert again.status_code == 409 and "has ended" in again.json()["error"]["message"]
    assert httpx.post(f"{url}/v1/episodes/nope/end", json={}, headers=headers).status_code == 404


def test_cli_bad_input_is_one_line(capsys, monkeypatch, tmp_path):
    from agentgym.cli import main

    monkeypatch.delenv("AGENTGYM_PROXY_TEST_TOKEN", raising=False)
    assert main(["proxy", "--token-env", "AGENTGYM_PROXY_TEST_TOKEN"]) == 2
    assert capsys.readouterr().err == "agentgym: error: --token-env AGENTGYM_PROXY_TEST_TOKEN: that environment variable is empty or unset\n"
    assert main(["proxy", "--out", str(tmp_path / "missing" / "x.jsonl")]) == 2
    assert "its directory does not exist" in capsys.readouterr().err
    assert main(["proxy", "--backend", "openai"]) == 2
    assert capsys.readouterr().err == "agentgym: error: --backend openai needs --base-url, e.g. http://127.0.0.1:8000/v1\n"
