"""Rollout throughput with a real model: batched generation against one episode at a time.

Plays the same episodes (same tasks, seeds and budgets) twice with :class:`agentgym.runner.RolloutRunner`:

* **batched**: every active episode in one ``generate`` call per round (the runner's default);
* **sequential**: ``max_concurrent=1``, one episode at a time, one prompt per ``generate`` call, the
  baseline measured in the same run.

For each it prints sampled tokens per second of wall time and how the wall time splits between
generation, the environments and chat-template rendering (the runner's own timers), then the
batched/sequential throughput ratio. Modes alternate over ``--repeats`` so a change in machine load
affects both alike; the best repeat of each is reported. Left padding changes floating-point
rounding, so batched and sequential samples can differ slightly on some hardware: the script
reports how many trajectories came out identical.

    python benchmarks/bench_rollout.py                         # default model, SearchQA-v0, CPU
    python benchmarks/bench_rollout.py --env agentgym/Refund-v0 --tasks 4 --group-size 4 --device cuda
    python benchmarks/bench_rollout.py --backend openai --base-url http://127.0.0.1:8000/v1 --json out.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from agentgym.models import create_backend
from agentgym.runner import Episode, RolloutConfig, RolloutRunner, RolloutTiming


def _play(runner: RolloutRunner, config: RolloutConfig) -> tuple[list[Episode], RolloutTiming]:
    episodes = runner.run(config)
    assert runner.last_timing is not None
    return episodes, runner.last_timing


def _row(name: str, timing: RolloutTiming) -> dict[str, Any]:
    render_share = timing.render_s / timing.wall_s if timing.wall_s > 0 else 0.0
    return {"mode": name, **timing.to_dict(), "render_share": render_share}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="agentgym/SearchQA-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--model", default=None, help="default: the bundled SmolLM2-135M-Instruct")
    parser.add_argument("--backend", default="hf", choices=["hf", "openai", "vllm"])
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    backend = create_backend(args.model, kind=args.backend, device=args.device, base_url=args.base_url)
    config = RolloutConfig(
        args.env,
        split=args.split,
        num_tasks=args.tasks,
        group_size=args.group_size,
        seed=args.seed,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
    )
    runner = RolloutRunner(backend)
    # Warm-up: first calls pay for lazy initialisation (kernels, allocator, template compilation).
    _play(runner, replace(config, num_tasks=1, group_size=1, max_turns=1, max_new_tokens=2))

    modes = {"batched": config, "sequential": replace(config, max_concurrent=1)}
    best: dict[str, RolloutTiming] = {}
    outputs: dict[str, list[Episode]] = {}
    for repeat in range(args.repeats):
        order = list(modes) if repeat % 2 == 0 else list(reversed(modes))
        for name in order:
            episodes, timing = _play(runner, modes[name])
            outputs[name] = episodes
            if name not in best or timing.tokens_per_s > best[name].tokens_per_s:
                best[name] = timing

    identical = sum(
        a.trajectory.token_ids == b.trajectory.token_ids
        for a, b in zip(outputs["batched"], outputs["sequential"], strict=True)
    )
    rows = [_row(name, best[name]) for name in modes]
    ratio = best["batched"].tokens_per_s / best["sequential"].tokens_per_s
    print(f"{args.env}: {config.num_episodes} episodes ({args.tasks} tasks x {args.group_size}), "
          f"max {args.max_turns} turns x {args.max_new_tokens} tokens, backend {backend.name}")
    print(f"{'mode':<11} {'wall s':>8} {'tokens':>7} {'tok/s':>8} {'generate':>9} {'envs':>7} {'render':>7} {'calls':>6}")
    for row in rows:
        print(f"{row['mode']:<11} {row['wall_s']:>8.2f} {row['sampled_tokens']:>7} {row['tokens_per_s']:>8.2f} "
              f"{row['generate_share']:>9.1%} {row['env_share']:>7.2%} {row['render_share']:>7.2%} {row['rounds']:>6}")
    print(f"batched / sequential throughput: {ratio:.2f}x; identical trajectories: {identical}/{config.num_episodes}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"config": {k: v for k, v in vars(args).items() if k != "json"}, "modes": rows,
                       "throughput_ratio": ratio, "identical_trajectories": identical}, out, indent=2)


if __name__ == "__main__":
    main()
