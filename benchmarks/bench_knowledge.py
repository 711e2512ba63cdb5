"""Tool-step latency of SQL-v0, SearchQA-v0 and ToolMath-v0, and the tool-result cache on GRPO groups.

For each environment, ``--tasks`` test tasks are each played by a group of ``--group`` oracle
rollouts, every rollout in its own environment (as a vector env would run them). The same groups
are played twice in this run: with ``tool_cache="off"`` (the baseline) and with one shared
``ToolCache`` per group. Reported per environment: mean and p95 latency of a tool step (an
``env.step`` that runs tool calls, the final ``answer`` step excluded), the cache hit rate, and
the speed-up of cached over uncached steps.

    python benchmarks/bench_knowledge.py [--tasks 40] [--group 8] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from agentgym.envs.knowledge.cache import ToolCache
from agentgym.envs.knowledge.searchqa_env import SearchQAEnv
from agentgym.envs.knowledge.snapshot import snapshot_path
from agentgym.envs.knowledge.sql_env import SQLEnv
from agentgym.envs.knowledge.toolmath_env import ToolMathEnv

ENVS = {"agentgym/SQL-v0": SQLEnv, "agentgym/SearchQA-v0": SearchQAEnv, "agentgym/ToolMath-v0": ToolMathEnv}


def play_group(env_cls: type, task_id: str, group: int, cache: ToolCache | str) -> tuple[list[float], int, int]:
    """Play ``group`` oracle rollouts of one task; return tool-step latencies and cache counts."""
    latencies: list[float] = []
    hits = misses = 0
    for member in range(group):
        env = env_cls(split="test", tool_cache=cache)
        policy = env_cls.policies()["oracle"](member)
        observation, info = env.reset(seed=member, options={"task_id": task_id})
        policy.reset(env, observation, info)
        done = False
        while not done:
            action = policy.act(observation)
            start = time.perf_counter()
            observation, _, terminated, truncated, info = env.step(action)
            elapsed = time.perf_counter() - start
            done = terminated or truncated
            if not done:  # the answer step runs no lookup
                latencies.append(elapsed)
        if not info["success"]:
            raise RuntimeError(f"oracle failed on {task_id}: {info['reward_reason']}")
        hits, misses = hits + info["cache_hits"], misses + info["cache_misses"]
        env.close()
    return latencies, hits, misses


def measure(env_cls: type, tasks: int, group: int, repeats: int) -> dict[str, Any]:
    """Both modes, interleaved task by task so that machine noise hits them alike; best of ``repeats``."""
    task_ids = env_cls(split="test").task_ids[:tasks]
    best: dict[str, dict[str, Any]] = {}
    for _ in range(repeats):
        runs: dict[str, list[float]] = {"off": [], "cached": []}
        hits = misses = 0
        for task_id in task_ids:
            runs["off"] += play_group(env_cls, task_id, group, "off")[0]
            latencies, h, m = play_group(env_cls, task_id, group, ToolCache())
            runs["cached"] += latencies
            hits, misses = hits + h, misses + m
        for mode, latencies in runs.items():
            summary = {"steps": len(latencies), "mean_ms": 1000 * statistics.fmean(latencies), "p95_ms": 1000 * _p95(latencies)}
            if mode == "cached":
                summary["hit_rate"] = hits / (hits + misses)
            if mode not in best or summary["mean_ms"] < best[mode]["mean_ms"]:
                best[mode] = summary
    best["speedup_mean"] = best["off"]["mean_ms"] / best["cached"]["mean_ms"]
    return best


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40, help="test tasks per environment")
    parser.add_argument("--group", type=int, default=8, help="rollouts per group (G)")
    parser.add_argument("--repeats", type=int, default=3, help="repeat the whole measurement, keep the best")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    snapshot_path()  # build the snapshot (once per machine) before anything is timed
    results = {env_id: measure(cls, args.tasks, args.group, args.repeats) for env_id, cls in ENVS.items()}
    if args.json:
        print(json.dumps({"tasks": args.tasks, "group": args.group, "results": results}, indent=2))
        return
    print(f"{args.tasks} test tasks x G={args.group} oracle rollouts per environment, best of {args.repeats}")
    print(f"{'environment':22} {'steps':>6} {'off mean':>9} {'off p95':>8} {'cached mean':>12} {'cached p95':>11} {'hit rate':>9} {'speed-up':>9}")
    for env_id, r in results.items():
        off, on = r["off"], r["cached"]
        print(
            f"{env_id:22} {off['steps']:>6} {off['mean_ms']:>7.3f}ms {off['p95_ms']:>6.3f}ms {on['mean_ms']:>10.3f}ms "
            f"{on['p95_ms']:>9.3f}ms {on['hit_rate']:>8.1%} {r['speedup_mean']:>8.2f}x"
        )


if __name__ == "__main__":
    main()
