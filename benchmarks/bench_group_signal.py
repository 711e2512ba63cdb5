"""How much learning signal GRPO's rollouts carry, per sampling temperature, before any training.

GRPO learns only from groups whose rewards differ: a group that all fails or all succeeds has zero
advantages. This plays the GRPO training tasks of a learning experiment with a model (typically the
experiment's SFT model) as the experiment's rollouts do (group size, turns, token budget,
environment options), once per temperature in the same run, and prints for each: the share of
training episodes that succeed (Wilson 95 % interval), the groups with reward variance, the
episodes with a malformed tool call, how often a failed data call (a seeded transient fault) was
retried and how often such an episode succeeded, and the wall time. It reads training tasks only,
so a setting chosen with it has not seen an evaluation episode. ``--env-kwargs`` replaces the
rollouts' environment options, to compare fault settings:

    python benchmarks/bench_group_signal.py --model runs/learning/sft/seed-0/run/model \\
        [--experiment trainers/configs/experiments/learning_cpu.yaml] [--tasks runs/learning/tasks.json] \\
        [--groups 16] [--temperatures 1.0,0.7,0.5] [--threads 2] \\
        [--env-kwargs '{"fault_rate": 0.5, "schema": "compact"}']
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym.envs.knowledge.base import FAULT_MESSAGE
from agentgym.records import TurnRecord
from agentgym.rollouts.evaluation import wilson_interval
from agentgym.rollouts.scripted import final_info
from agentgym.trainers.config import config_from_dict
from agentgym.trainers.experiment import load_experiment

if TYPE_CHECKING:
    from agentgym.rollouts.runner import RolloutConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the model to sample from (e.g. an experiment's SFT model)")
    parser.add_argument("--experiment", default="trainers/configs/experiments/learning_cpu.yaml")
    parser.add_argument("--tasks", default="runs/learning/tasks.json", help="the experiment's tasks.json (its grpo tasks are played)")
    parser.add_argument("--groups", type=int, default=16, help="GRPO tasks to play, one group each")
    parser.add_argument("--temperatures", default="1.0,0.7,0.5")
    parser.add_argument("--seed", type=int, default=1000, help="rollout seed (another than the experiment's steps use)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--env-kwargs", type=json.loads, help="JSON object replacing the rollouts' env_kwargs")
    args = parser.parse_args()

    import torch

    from agentgym.models import load_model
    from agentgym.models.hf import HFBackend
    from agentgym.rollouts.runner import RolloutRunner

    torch.set_num_threads(args.threads)
    episodes_config = training_episodes(args.experiment, args.tasks, args.groups, seed=args.seed, env_kwargs=args.env_kwargs)
    model, tokenizer = load_model(args.model, device="cpu")
    runner = RolloutRunner(HFBackend(model, tokenizer))
    print(
        f"{episodes_config.num_groups} GRPO training tasks x {episodes_config.group_size} episodes, model {args.model}, "
        f"environment options {dict(episodes_config.env_kwargs)}"
    )
    for temperature in (float(t) for t in args.temperatures.split(",")):
        started = time.perf_counter()
        episodes = runner.run(dataclasses.replace(episodes_config, temperature=temperature))
        rewards: dict[int, set[float]] = {}
        for episode in episodes:
            rewards.setdefault(episode.group, set()).add(round(episode.reward, 6))
        wins = sum(bool(e.record["success"]) for e in episodes)
        low, high = wilson_interval(wins, len(episodes))
        malformed = sum(int(final_info(e.record).get("format_errors", 0)) > 0 for e in episodes)
        informative = sum(len(values) > 1 for values in rewards.values())
        faulted = [e for e in episodes if int(final_info(e.record).get("faults", 0)) > 0]
        retried = sum(_retried_after_a_fault(e.turns) for e in faulted)
        recovered = sum(bool(e.record["success"]) for e in faulted)
        print(
            f"temperature {temperature:g}: success {wins}/{len(episodes)} = {wins / len(episodes):.3f} [{low:.3f}, {high:.3f}]; "
            f"groups with reward variance {informative}/{len(rewards)}; episodes with a malformed call {malformed}; "
            f"episodes with a fault {len(faulted)}, retried after one {retried}, succeeded {recovered}; "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )


def training_episodes(experiment_path: str, tasks_path: str, groups: int, *, seed: int, env_kwargs: dict[str, Any] | None = None) -> RolloutConfig:
    """The episodes a learning experiment's GRPO phase would play on its first ``groups`` training
    tasks (the trainer's defaults filled in), with another rollout ``seed`` and, if given, other
    environment options."""
    from agentgym.trainers.trainer import rollout_config

    experiment = load_experiment(experiment_path)
    entries = json.loads(Path(tasks_path).read_text(encoding="utf-8"))["grpo"][:groups]
    splits = sorted({entry.split(":", 1)[0] for entry in entries})
    if len(splits) != 1:
        raise SystemExit(f"the GRPO tasks must come from one split; got {splits}")
    training = {**experiment.training, "env_id": experiment.env_id}
    training["rollout"] = {**training.get("rollout", {}), "split": splits[0]}
    if env_kwargs is not None:
        training["rollout"]["env_kwargs"] = env_kwargs
    return rollout_config(config_from_dict(training), [entry.split(":", 1)[1] for entry in entries], seed=seed)


def _retried_after_a_fault(turns: list[TurnRecord]) -> bool:
    """Whether a turn calls a tool again right after that tool's call failed with a transient fault."""
    for turn, after in itertools.pairwise(turns):
        faulted = {m.get("name") for m in turn["env_messages"] if m.get("role") == "tool" and FAULT_MESSAGE in str(m.get("content"))}
        if faulted & {call["name"] for call in after["tool_calls"]}:
            return True
    return False


if __name__ == "__main__":
    main()
