"""Rollout throughput with a real model: key/value reuse and continuous batching against prefilling from scratch.

Plays the same episodes (same tasks, seeds and budgets) with :class:`agentgym.rollouts.runner.RolloutRunner`
and the local transformers backend in two modes:

* ``no-cache``: ``HFBackend(reuse_cache=False)``, the path before key/value reuse: every round
  left-pads the conversations of all live episodes and prefills them from scratch;
* ``cache``: the default engine (:mod:`agentgym.models.engine`): an episode's next turn prefills
  only its new tokens, a group's shared prompt and the environment's system prompt are computed
  once, and episodes join and leave the batch as their turns finish.

Each mode runs in its own process (so its peak memory is its own) and the modes alternate over
``--repeats``; the best repeat of each is reported. For each it prints sampled tokens per second of
wall time, peak resident memory, and the share of wall time in prefill, decode and the
environments, then the cache/no-cache throughput ratio and how many trajectories came out
token-identical (the seeds are the same, so they should all be). Last, the decode roofline of the
cache mode: the memory bandwidth the process measures (summing a 256 MiB buffer), the bytes its
decode passes must read (the weights once per pass, each running row's keys and values at its
length), the tokens per second those two imply, and the fraction of it the decode passes achieved.

    python benchmarks/bench_rollout.py                    # SQL-v0, 2 tasks x 4, 2 turns x 48 tokens
    python benchmarks/bench_rollout.py --larger           # 8 tasks x 8, 4 turns
    python benchmarks/bench_rollout.py --temperature 0    # greedy: the two modes must agree exactly
    python benchmarks/bench_rollout.py --modes cache --device cuda --json out.json
"""

from __future__ import annotations

import argparse
import json
import resource
from typing import Any

from child_process import measure_in_child

MODES = ("no-cache", "cache")


def _run_mode(args: argparse.Namespace, mode: str, queue: Any) -> None:
    """Child process: load the model, warm up, play the episodes once, report timing and memory."""
    import torch

    from agentgym.models import load_model
    from agentgym.models.hf import HFBackend
    from agentgym.rollouts.runner import RolloutConfig, RolloutRunner

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, device=args.device)
    backend = HFBackend(model, tokenizer, reuse_cache=mode == "cache")
    config = RolloutConfig(
        args.env,
        split=args.split,
        num_tasks=args.tasks,
        group_size=args.group_size,
        seed=args.seed,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
    )
    runner = RolloutRunner(backend)
    # Warm-up on another task: first calls pay for lazy initialisation (kernels, allocator, templates).
    runner.run(RolloutConfig(args.env, split="val", num_tasks=1, max_turns=1, max_new_tokens=2))
    before = backend.engine.stats.decode_read_bytes, backend.engine.stats.decode_steps
    episodes = runner.run(config)
    timing = runner.last_timing
    assert timing is not None
    queue.put(
        {
            "mode": mode,
            **timing.to_dict(),
            "read_bytes_per_s": _read_bandwidth(),
            "decode_read_bytes": backend.engine.stats.decode_read_bytes - before[0],
            "decode_steps": backend.engine.stats.decode_steps - before[1],
            "render_share": timing.render_s / timing.wall_s,
            "prefill_share": timing.prefill_s / timing.wall_s,
            "decode_share": timing.decode_s / timing.wall_s,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "trajectories": [list(e.trajectory.token_ids) for e in episodes],
            "successes": sum(bool(e.record["success"]) for e in episodes),
        }
    )


def _read_bandwidth(size: int = 2**28, repeats: int = 5) -> float:
    """Bytes per second this process reads from memory with torch's threads (best of ``repeats``
    sums over a buffer far larger than any cache): the roofline's denominator."""
    import time

    import torch

    buffer = torch.ones(size // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - started)
    return size / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="agentgym/SQL-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--larger", action="store_true", help="8 tasks x group of 8, 4 turns (overrides those three)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--model", default=None, help="default: the bundled SmolLM2-135M-Instruct")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    if args.larger:
        args.tasks, args.group_size, args.max_turns = 8, 8, 4

    best: dict[str, dict[str, Any]] = {}
    for repeat in range(args.repeats):
        order = args.modes if repeat % 2 == 0 else list(reversed(args.modes))
        for mode in order:
            result = measure_in_child(_run_mode, args, mode, what=f"{mode} run")
            if mode not in best or result["tokens_per_s"] > best[mode]["tokens_per_s"]:
                best[mode] = result

    episodes = args.tasks * args.group_size
    print(
        f"{args.env} ({args.split}): {episodes} episodes ({args.tasks} tasks x {args.group_size}), "
        f"max {args.max_turns} turns x {args.max_new_tokens} tokens, temperature {args.temperature}"
    )
    print(
        f"{'mode':<9} {'wall s':>8} {'tokens':>7} {'tok/s':>8} {'prefill':>8} {'decode':>7} {'envs':>6} "
        f"{'render':>7} {'reused':>7} {'peak MiB':>9} {'success':>8}"
    )
    for mode in args.modes:
        row = best[mode]
        reused = row["reused_tokens"] / row["prompt_tokens"] if row["prompt_tokens"] else 0.0
        print(
            f"{mode:<9} {row['wall_s']:>8.2f} {row['sampled_tokens']:>7} {row['tokens_per_s']:>8.2f} "
            f"{row['prefill_share']:>8.1%} {row['decode_share']:>7.1%} {row['env_share']:>6.1%} "
            f"{row['render_share']:>7.1%} {reused:>7.1%} {row['peak_rss_mib']:>9.0f} {row['successes']:>4}/{episodes}"
        )
    summary: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "json"}}
    if set(MODES) <= set(best):
        fast, slow = best["cache"], best["no-cache"]
        identical = sum(a == b for a, b in zip(fast["trajectories"], slow["trajectories"], strict=True))
        summary.update(
            throughput_ratio=fast["tokens_per_s"] / slow["tokens_per_s"],
            peak_memory_ratio=fast["peak_rss_mib"] / slow["peak_rss_mib"],
            identical_trajectories=identical,
        )
        print(
            f"cache / no-cache: throughput {summary['throughput_ratio']:.2f}x, peak memory "
            f"{summary['peak_memory_ratio']:.2f}x; token-identical trajectories: {identical}/{episodes}"
        )
    print("(prefill and decode shares are measured inside the engine, so the no-cache mode shows none)")
    if "cache" in best and best["cache"]["decode_read_bytes"]:
        row = best["cache"]
        # Decoding must read the weights once per pass and every running row's keys and values:
        # at the measured bandwidth, that bounds the tokens per second of the decode passes.
        bandwidth, must_read = row["read_bytes_per_s"], row["decode_read_bytes"]
        tokens = row["sampled_tokens"]
        roofline = tokens / (must_read / bandwidth)
        achieved = tokens / row["decode_s"] if row["decode_s"] else 0.0
        summary.update(read_bandwidth=bandwidth, decode_read_bytes=must_read, roofline_tokens_per_s=roofline, decode_tokens_per_s=achieved)
        print(
            f"decode roofline (cache): memory read {bandwidth / 1e9:.1f} GB/s; the decode passes must read {must_read / 1e9:.2f} GB "
            f"({must_read / max(row['decode_steps'], 1) / 2**20:.0f} MiB a pass: weights + keys/values at the batch's lengths) for {tokens} tokens; "
            f"roofline {roofline:.1f} tok/s, achieved {achieved:.1f} tok/s in decode ({achieved / roofline:.0%})"
        )
    if args.json:
        summary["modes"] = [{k: v for k, v in best[m].items() if k != "trajectories"} for m in args.modes]
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2)


if __name__ == "__main__":
    main()
