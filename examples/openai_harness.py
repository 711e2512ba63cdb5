"""An agent harness written only against the OpenAI API, trained token-exactly through ``agentgym proxy``.

    python examples/openai_harness.py --episodes 4 [--env agentgym/SQL-v0] [--model MODEL]

Part 1 starts the recording proxy in front of the bundled SmolLM2-135M-Instruct (what
``agentgym proxy`` serves) and runs a plain OpenAI tool loop in SQL-v0: the harness sends the
chat messages and the tool schemas with the official ``openai`` client, steps the environment on
the returned tool calls, and names each episode in an ``X-Episode-Id`` header. It never sees a
token. Part 2 takes the episodes the proxy recorded (the exact prompt and sampled token ids, with
the rollout runner's loss mask) and runs one update of the bundled GRPO trainer on them.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import openai
import torch

import agentgym  # noqa: F401 - registers the environments
from agentgym.bridges.asgi import serve_in_thread
from agentgym.bridges.proxy import ChatProxy
from agentgym.models import HFBackend, load_model
from agentgym.trainers.config import GRPOSection
from agentgym.trainers.trainer import grpo_update


def harness(client: openai.OpenAI, env_id: str, seed: int, episode_id: str, max_turns: int, max_tokens: int) -> float:
    """Part 1: an OpenAI tool loop; nothing of agentgym but the environment."""
    env = gym.make(env_id, split="val", max_turns=max_turns)
    messages, _ = env.reset(seed=seed)
    done, reward = False, 0.0
    while not done:
        answer = client.chat.completions.create(
            model="policy", messages=messages, tools=env.unwrapped.tools, temperature=1.0, max_tokens=max_tokens, extra_headers={"X-Episode-Id": episode_id}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="agentgym/SQL-v0", help="environment id (default agentgym/SQL-v0)")
    parser.add_argument("--model", help="model id or folder (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--episodes", type=int, default=4, help="episodes, one GRPO group (default 4)")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, tokenizer = load_model(args.model, device="cpu", dtype="float32")
    proxy = ChatProxy(HFBackend(model, tokenizer), model_name="policy")
    url, stop = serve_in_thread(proxy.app())
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    episodes = []
    try:
        for index in range(args.episodes):
            episode_id = f"episode-{index}"
            reward = harness(client, args.env, 0, episode_id, args.max_turns, args.max_tokens)  # one task, so the episodes form a group
            proxy.end_episode(episode_id, reward)
            recorded = proxy.episodes[episode_id]
            episodes.append(recorded.to_episode(reward, member=index))
            trajectory = recorded.trajectory()
            print(
                f"part 1: episode {episode_id}: {len(recorded.turns)} turns, reward {reward}, {len(trajectory.token_ids)} tokens recorded, {sum(trajectory.loss_mask)} of them sampled (loss mask 1)"
            )
    finally:
        stop()
        proxy.close()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = grpo_update(
        model,
        None,
        optimizer,
        scheduler,
        episodes,
        GRPOSection(kl_coef=0.0, micro_batch_size=1),
        group_size=len(episodes),
        temperature=1.0,
        pad_token_id=tokenizer.pad_token_id or 0,
        max_len=max(len(e.trajectory.token_ids) for e in episodes),
        max_grad_norm=1.0,
        shuffle_seed=0,
    )
    rewards = [e.reward for e in episodes]
    note = "" if len(set(rewards)) > 1 else " (every reward is equal, so every advantage is 0: the step leaves the model as it was)"
    print(
        f"part 2: one GRPO step on the recorded episodes: rewards {rewards}, {metrics['batch/loss_tokens']:.0f} loss tokens, loss {metrics.get('loss/total', 0.0):.4f}{note}"
    )


if __name__ == "__main__":
    main()
