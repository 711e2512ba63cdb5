"""GRPO steps' rollouts, path by path: every key/value row kept, the rows of finished episodes
left behind when the buffers grow, the shared prompt stored once, and the weights cast once.

The local engine keeps one row of keys and values per cached sequence, in one rectangle as long as
the longest; when a turn outgrows it, the rectangle is reallocated. Before, every row was carried
over, those of episodes already over included; now the runner tells the backend when an episode
ends (``HFBackend.forget``), and a reallocation leaves those rows behind. In a GRPO step the late,
long turns belong to the few episodes still going (those that met a fault and retry), so the
rectangle they need has a few rows, not one per episode.

Every episode of a step also starts with the same system prompt and tool schemas (most of its
tokens); each row used to hold its own copy of them, and now the engine stores them once
(``KVEngine.store_prefix``) and every row holds only what follows.

A budget for the buffers (the trainer's ``rollout.max_cache_mib``) makes turns wait for room
instead of widening the rectangle: fewer rows decode at once, so the buffers and the process stay
smaller and the steps take longer; the tokens stay the same.

Under the trainer's autocast (bf16 products on CPUs that have them) every linear layer cast its
float32 weight to bfloat16 in every forward pass; now the engine casts each weight once per
weights version (``KVEngine.cast_weights``), with the same products.

This plays GRPO steps' rollouts as an experiment's GRPO phase does (its rollout settings, an arm's
changes, the training tasks; each step ``num_tasks`` tasks drawn from them and a group per task,
seeds from ``--seed``) from a given model, under the experiment's autocast as its trainer would
(``--autocast`` replaces it), in five modes, each in its own process: ``keep-all`` (the runner
never forgets, the prompt in every row, weights cast in every pass), ``forget`` (finished rows
left behind), ``prefix-once`` (and the prompt stored once), ``cast-once`` (today's: and the
weights cast once; the same as ``prefix-once`` without autocast), and ``budget``: today's with the
buffers held to ``--budget-mib``. For each it prints every step's
largest key/value buffers (MiB), the process's peak resident memory, and the seconds; then the
ratios of each mode to the one before it and how many trajectories came out token-identical.
``--modes`` runs some of them.

    python benchmarks/bench_kv_rows.py --model runs/tool-exploration-cpu/sft/seed-28/model \\
        --experiment trainers/configs/experiments/tool_exploration_cpu.yaml --arm tool_exploration_guarded

The model should be an SFT phase's (the bundled model fails every task, so its episodes all run
to the turn limit together and none ends early).
"""

from __future__ import annotations

import argparse
import itertools
import random
import resource
import time
from pathlib import Path
from typing import Any

from child_process import measure_in_child

MODES = ("keep-all", "forget", "prefix-once", "cast-once", "budget")
MIB = 2**20
EXPERIMENT = Path(__file__).resolve().parents[1] / "trainers" / "configs" / "experiments" / "learning_cpu.yaml"


def _run_mode(args: argparse.Namespace, mode: str, queue: Any) -> None:
    """Child process: play the steps' rollouts in one mode and report sizes, memory and tokens."""
    import torch

    from agentgym.models import load_model
    from agentgym.models.hf import HFBackend
    from agentgym.rollouts.runner import RolloutRunner
    from agentgym.trainers.experiment.config import GRPO, load_experiment, train_config_for
    from agentgym.trainers.experiment.run import _pick
    from agentgym.trainers.modeling import autocast
    from agentgym.trainers.trainer import rollout_config

    torch.set_num_threads(args.threads)
    experiment = load_experiment(args.experiment)
    change = experiment.ablations.get(args.arm) if args.arm != "grpo" else None
    picked = _pick(experiment.env_id, experiment.grpo_tasks, args.seed, exclude=())
    train = train_config_for(experiment, GRPO, args.seed, [], picked, Path("unused"), model=Path(args.model), change=change)
    tasks = sorted(train.rollout.task_ids or ())
    model, tokenizer = load_model(args.model)
    backend = HFBackend(model, tokenizer)
    if mode == "keep-all":
        backend.forget = None  # type: ignore[method-assign,assignment]  # the runner then never forgets
    backend.engine.store_prefix = MODES.index(mode) >= MODES.index("prefix-once")
    backend.engine.cast_weights = MODES.index(mode) >= MODES.index("cast-once")
    if mode == "budget":
        backend.engine.max_cache_bytes = int(args.budget_mib * MIB)
    runner = RolloutRunner(backend)
    draw = random.Random(args.seed)
    steps, trajectories = [], []
    started = time.perf_counter()
    for step in range(args.steps):
        backend.engine.reset_stats()
        chosen = draw.sample(tasks, train.rollout.num_tasks)
        with autocast(torch.device("cpu"), args.autocast or train.autocast):
            episodes = runner.run(rollout_config(train, chosen, seed=args.seed * 1000 + step))
        stats = backend.engine.stats
        steps.append(
            {
                "peak_cache_mib": stats.peak_cache_bytes / MIB,
                "prefix": stats.stored_prefix_tokens,
                "tokens": sum(len(e.trajectory.token_ids) for e in episodes) / len(episodes),
            }
        )
        trajectories.extend(list(e.trajectory.token_ids) for e in episodes)
    queue.put(
        {
            "mode": mode,
            "steps": steps,
            "seconds": time.perf_counter() - started,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "trajectories": trajectories,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder (an SFT phase's)")
    parser.add_argument("--experiment", default=str(EXPERIMENT), help="the experiment file whose GRPO rollouts to play")
    parser.add_argument("--arm", default="grpo", help="grpo, or one of the file's ablations (its changes apply)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the experiment's phases use 1)")
    parser.add_argument("--autocast", choices=["auto", "bf16", "off"], help="replace the experiment's training.autocast")
    parser.add_argument("--budget-mib", type=float, default=150.0, help="the key/value budget of the budget mode (rollout.max_cache_mib)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="the modes to run, in this order")
    args = parser.parse_args()

    results = {mode: measure_in_child(_run_mode, args, mode, what=f"{mode} run") for mode in args.modes}
    print(f"{Path(args.experiment).name}, arm {args.arm}, {args.steps} steps' rollouts from {args.model}, autocast {args.autocast or 'as the file sets'}")
    print(f"{'mode':<11} {'KV MiB per step':<28} {'peak RSS MiB':>13} {'s':>7}")
    for mode in args.modes:
        row = results[mode]
        sizes = " ".join(f"{step['peak_cache_mib']:.0f}" for step in row["steps"])
        print(f"{mode:<11} {sizes:<28} {row['peak_rss_mib']:>13.0f} {row['seconds']:>7.1f}")
    steps = results[args.modes[-1]]["steps"]
    print("per step, tokens an episode (mean) and stored once:", ", ".join(f"{step['tokens']:.0f} / {step['prefix']}" for step in steps))
    for before, after in itertools.pairwise(args.modes):
        old, new = results[before], results[after]
        largest = [max(step["peak_cache_mib"] for step in r["steps"]) for r in (old, new)]
        identical = sum(a == b for a, b in zip(old["trajectories"], new["trajectories"], strict=True))
        print(
            f"{after} / {before}: largest key/value buffers {largest[1] / largest[0]:.2f}x, peak resident memory "
            f"{new['peak_rss_mib'] / old['peak_rss_mib']:.2f}x, seconds {new['seconds'] / old['seconds']:.2f}x; "
            f"token-identical trajectories: {identical}/{len(old['trajectories'])}"
        )


if __name__ == "__main__":
    main()
