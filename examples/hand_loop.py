"""A training loop written by hand, from the Gymnasium API up to a masked policy-gradient step.

    python examples/hand_loop.py --steps 3

Part 1 plays one episode the plain Gymnasium way: render the chat, let the model write a turn,
``env.step(text)``, until the episode ends. Part 2 is what a trainer does with that loop, built
from the library's pieces: the rollout runner plays a group of episodes per task with token-exact
trajectories (the loss mask is 1 exactly on the tokens the model sampled), rewards become
group-relative advantages, and the masked GRPO loss takes one optimiser step. The reference
trainer (``agentgym train``, ``trainers/trainer.py``) adds SFT, several epochs, KL, clipping
schedules, evaluation and checkpoints to these same calls.

Runs on CPU with the bundled SmolLM2-135M-Instruct (a few minutes for 3 steps).
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch

import agentgym  # noqa: F401 - registers the environments
from agentgym.models import HFBackend, load_model
from agentgym.rollouts.batching import collate
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.runner import RolloutConfig, run_rollouts
from agentgym.trainers.grpo import group_advantages, masked_grpo_loss
from agentgym.trainers.modeling import TensorBatch, token_logprobs

ENV_ID = "agentgym/SQL-v0"


def play_one_episode(model: torch.nn.Module, tokenizer, max_new_tokens: int) -> float:
    """Part 1: the Gymnasium loop, with nothing of agentgym's but the environment."""
    env = gym.make(ENV_ID, split="val", max_turns=3)
    messages, _ = env.reset(seed=0)
    renderer = ChatRenderer(tokenizer, tools=env.unwrapped.tools)  # the chat template, with the tool schemas
    done, reward = False, 0.0
    while not done:
        prompt = renderer.prompt_ids(messages)
        with torch.no_grad():
            output = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False)
        text = tokenizer.decode(output[0, len(prompt) :], skip_special_tokens=True)
        observation, reward, terminated, truncated, _ = env.step(text)  # tool calls inside the text
        messages += [{"role": "assistant", "content": text}, *observation]
        done = terminated or truncated
    print(f"part 1: one episode, {len(messages)} messages, reward {reward}")
    return float(reward)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2, help="tasks per step")
    parser.add_argument("--group-size", type=int, default=4, help="episodes per task")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    model, tokenizer = load_model(device="cpu")
    play_one_episode(model, tokenizer, args.max_new_tokens)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for step in range(args.steps):
        # Rollouts: group_size episodes of each task, sampled by the model being trained.
        config = RolloutConfig(
            ENV_ID, split="train", num_tasks=args.tasks, group_size=args.group_size, seed=step, max_turns=3, max_new_tokens=args.max_new_tokens, temperature=1.0
        )
        episodes = run_rollouts(HFBackend(model, tokenizer), config)
        # Rewards -> advantages: each episode against the other episodes of its task.
        rewards = torch.tensor([e.reward for e in episodes])
        advantages, stats = group_advantages(rewards, args.group_size)  # a group whose rewards are all equal teaches nothing
        # The loss covers only the sampled tokens (trajectory.loss_mask), never the tool output.
        batch = TensorBatch.from_tokens(collate([e.trajectory for e in episodes], pad_token_id=pad), "cpu")
        logprobs, _ = token_logprobs(model, batch, temperature=1.0)
        loss, metrics = masked_grpo_loss(logprobs, logprobs.detach(), None, advantages, batch.loss_mask, kl_coef=0.0)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        print(
            f"part 2, step {step + 1}: mean reward {rewards.mean():.3f}, success {sum(e.record['success'] for e in episodes)}/{len(episodes)}, "
            f"groups without signal {int(stats['degenerate_groups'])}/{args.tasks}, "
            f"trained tokens {int(batch.loss_mask.sum())} of {int(batch.attention_mask.sum())}, loss {metrics['loss']:.4f}"
        )


if __name__ == "__main__":
    main()
