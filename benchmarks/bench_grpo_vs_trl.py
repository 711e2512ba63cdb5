"""Time one GRPO step of agentgym's trainer against TRL's ``GRPOTrainer`` on the same model and batch.

The batch is built once from an agentgym environment: per task, a group whose members alternate
the oracle's episode and random-policy episodes (different seeds), rendered token-exactly with
their loss masks, with the environment's rewards. TRL receives exactly these sequences through
its ``rollout_func`` (``prompt_ids``, ``completion_ids``, ``env_mask``) and the rewards through a
reward function, so both trainers run the same optimisation step:

    same model, same sequences and masks, same rewards and group-normalised advantages,
    per-sequence token-mean loss (TRL ``loss_type="grpo"``, ours ``seq-mean-token-mean``),
    PPO clip 0.2, K3 KL to a frozen reference copy with the same coefficient,
    AdamW at a constant learning rate with gradient clipping at 1.0,
    one optimiser step per batch (so neither computes separate old logprobs), accumulated over
    micro-batches of ``--micro-batch`` trajectories (memory: TRL's full-sequence pass over 8
    SQL-v0 trajectories at once needs more than 23 GB on a CPU).

Each side runs a warm-up step, then ``--steps`` timed steps (TRL's timed from its step-begin to
its step-end callback). The script prints the median step times and their ratio; ours is also
timed without the shared-prefix forward pass, to show where the difference comes from.

TRL is an optional benchmark dependency: ``pip install trl``. Run::

    python benchmarks/bench_grpo_vs_trl.py                       # default model, SQL-v0, 2 tasks x 4
    python benchmarks/bench_grpo_vs_trl.py --tasks 1 --group-size 2 --steps 2 --threads 1
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from typing import Any

import gymnasium as gym
import torch

import agentgym  # noqa: F401 - registers the environments
from agentgym.models import load_model
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.runner import Episode
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.trainers.config import GRPOSection, OptimSection
from agentgym.trainers.modeling import Reference, make_optimizer
from agentgym.trainers.sft import record_to_trajectory
from agentgym.trainers.trainer import grpo_update


def build_batch(env_id: str, tasks: int, group_size: int, tokenizer: Any, max_turns: int) -> list[Episode]:
    """``tasks`` groups of ``group_size`` episodes: oracle and random-policy episodes alternating."""
    env = gym.make(env_id, split="train", max_turns=max_turns)
    renderer = ChatRenderer(tokenizer, tools=env.unwrapped.tools)
    episodes = []
    for group, task_id in enumerate(env.unwrapped.task_ids[:tasks]):
        for member in range(group_size):
            policy = "oracle" if member % 2 == 0 else "random"
            record = run_episode(env, make_policy(env, policy, member), seed=member, task_id=task_id, policy_name=policy)
            episodes.append(
                Episode(
                    record=record,
                    trajectory=record_to_trajectory(record, renderer),
                    group=group,
                    reward=float(record["reward"]),
                    stop_reason="done",
                    turns=[],
                    member=member,
                )
            )
    env.close()
    return episodes


def time_ours(model: torch.nn.Module, episodes: list[Episode], args: argparse.Namespace, *, share_prefix: bool) -> tuple[list[float], float]:
    """Step times of :func:`grpo_update` and the first step's gradient norm (before clipping)."""
    model = copy.deepcopy(model)
    reference = Reference(model)
    grpo = GRPOSection(loss_agg="seq-mean-token-mean", kl_coef=args.beta, clip_eps=0.2, micro_batch_size=args.micro_batch, share_prefix=share_prefix)
    optimizer, scheduler = make_optimizer(model, OptimSection(lr=args.lr, max_grad_norm=1.0), total_steps=args.steps + 1)
    times, first_norm = [], float("nan")
    for step in range(args.steps + 1):
        start = time.perf_counter()
        metrics = grpo_update(
            model,
            reference,
            optimizer,
            scheduler,
            episodes,
            grpo,
            group_size=args.group_size,
            temperature=1.0,
            pad_token_id=0,
            max_len=4096,
            max_grad_norm=1.0,
            shuffle_seed=step,
        )
        elapsed = time.perf_counter() - start
        if step == 0:
            first_norm = metrics["optim/grad_norm"]
        else:
            times.append(elapsed)
    return times, first_norm


def time_trl(model_dir: str, tokenizer: Any, episodes: list[Episode], args: argparse.Namespace) -> tuple[list[float], float]:
    """The same step through ``trl.GRPOTrainer``; returns step times and the first step's gradient norm.

    TRL gets the model as a folder: with a KL term it loads its reference model from there.
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    groups: dict[str, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(f"group-{e.group}", []).append(e)

    def rollout_func(prompts: list[str], trainer: Any) -> dict[str, Any]:
        # TRL passes each prompt once per generation; hand out the group's members in order.
        taken: dict[str, int] = {}
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "env_mask": [], "agentgym_reward": []}
        for prompt in prompts:
            member = groups[prompt][taken.get(prompt, 0)]
            taken[prompt] = taken.get(prompt, 0) + 1
            t = member.trajectory
            cut = t.prompt_length
            out["prompt_ids"].append(list(t.token_ids[:cut]))
            out["completion_ids"].append(list(t.token_ids[cut:]))
            out["env_mask"].append(list(t.loss_mask[cut:]))
            out["agentgym_reward"].append(member.reward)
        return {**out, "logprobs": None}  # no sampling logprobs: TRL uses them only with vLLM

    def reward(prompts: list[str], completions: list[Any], agentgym_reward: list[float], **kwargs: Any) -> list[float]:
        return list(agentgym_reward)

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self._start = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.times.append(time.perf_counter() - self._start)

    longest = max(len(e.trajectory.token_ids) - e.trajectory.prompt_length for e in episodes)
    with tempfile.TemporaryDirectory() as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            max_steps=args.steps + 1,
            per_device_train_batch_size=args.micro_batch,
            num_generations=args.group_size,
            # One generation batch = the whole batch; one optimiser step accumulates its micro-batches.
            gradient_accumulation_steps=len(episodes) // args.micro_batch,
            steps_per_generation=len(episodes) // args.micro_batch,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            beta=args.beta,
            epsilon=0.2,
            loss_type="grpo",
            scale_rewards="group",
            num_iterations=1,
            max_completion_length=longest,
            disable_dropout=True,
            seed=0,
            dataloader_num_workers=0,
            shuffle_dataset=False,  # every step sees each group once, as ours does
            gradient_checkpointing=False,  # TRL's default trades compute for memory; ours does not checkpoint
        )
        timer = Timer()
        trainer = GRPOTrainer(
            model=model_dir,
            reward_funcs=reward,
            args=config,
            processing_class=tokenizer,
            train_dataset=Dataset.from_list([{"prompt": name} for name in groups] * (args.steps + 1) * args.group_size),
            rollout_func=rollout_func,
            callbacks=[timer],
        )
        trainer.train()
    norms = [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]
    return timer.times[1:], float(norms[0]) if norms else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model reference (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--env", default="agentgym/SQL-v0", help="environment the batch comes from")
    parser.add_argument("--tasks", type=int, default=2, help="task groups in the batch")
    parser.add_argument("--group-size", type=int, default=4, help="episodes per task")
    parser.add_argument("--max-turns", type=int, default=2, help="turns per episode")
    parser.add_argument("--micro-batch", type=int, default=4, help="trajectories per forward/backward pass (both trainers)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per trainer (after one warm-up step)")
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient (both trainers)")
    parser.add_argument("--lr", type=float, default=1e-6, help="learning rate (both trainers)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    try:
        import trl
    except ImportError:
        print("this benchmark needs TRL: pip install trl", file=sys.stderr)
        return 2
    if (args.tasks * args.group_size) % args.micro_batch:
        parser.error("--micro-batch must divide tasks x group size")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, device="cpu", dtype="float32")
    episodes = build_batch(args.env, args.tasks, args.group_size, tokenizer, args.max_turns)
    lengths = [len(e.trajectory.token_ids) for e in episodes]
    print(
        f"batch: {len(episodes)} trajectories of {min(lengths)}-{max(lengths)} tokens "
        f"({sum(sum(e.trajectory.loss_mask) for e in episodes)} loss tokens), rewards {[round(e.reward, 2) for e in episodes]}"
    )
    print(f"trl {trl.__version__}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")

    with tempfile.TemporaryDirectory() as model_dir:
        model.save_pretrained(model_dir)  # a complete folder (the converted default model's config names no architecture)
        tokenizer.save_pretrained(model_dir)
        trl_times, trl_norm = time_trl(model_dir, tokenizer, episodes, args)
    ours_times, ours_norm = time_ours(model, episodes, args, share_prefix=True)
    plain_times, _ = time_ours(model, episodes, args, share_prefix=False)
    trl_s, ours_s, plain_s = (statistics.median(t) for t in (trl_times, ours_times, plain_times))
    # Equal gradients show that both ran the same objective on the same batch.
    print(f"first-step gradient norm: agentgym {ours_norm:.5f}, TRL {trl_norm:.5f}")
    print(f"median step: TRL {trl_s:.2f} s, agentgym {ours_s:.2f} s (without the shared-prefix pass {plain_s:.2f} s)")
    print(f"ratio TRL / agentgym: {trl_s / ours_s:.2f}x (without the shared-prefix pass {trl_s / plain_s:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
