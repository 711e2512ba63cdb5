"""Per-step overhead of an environment served by ``agentgym serve`` against the same environment in-process.

Two measurements, each with its in-process baseline in the same run:

1. Round trip of a non-code step: SQL-v0, a turn without a tool call (the environment answers
   with its fixed reminder; no query runs), stepped ``--steps`` times in-process and through
   ``agentgym/Remote-v0`` on a loopback server. Prints p50/p99 per step and the overhead.
   Target: server round trip p50 < 1 ms.
2. CodeExec throughput: ``run_python`` of a trivial snippet from 1, 2 and 4 sessions at once,
   through the server against local environments stepped from as many threads. Target: the
   server path >= 0.8x in-process (going remote costs little next to the sandbox's work).

Ray actor pools are not measured here yet (not built).

Usage: python benchmarks/bench_remote.py [--steps 2000] [--runs 300]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

import gymnasium as gym

import agentgym  # noqa: F401 - registers the environments
from agentgym.parsing import format_tool_call
from agentgym.remote import EnvServer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def step_latencies(make: Callable[[], gym.Env], steps: int) -> list[float]:
    env = make()
    env.reset(seed=0)
    latencies = []
    for _ in range(steps):
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step("Let me think about it.")
        latencies.append(time.perf_counter() - start)
        if terminated or truncated:
            env.reset(seed=0)
    env.close()
    return latencies


def throughput(make: Callable[[], gym.Env], sessions: int, runs: int) -> float:
    envs = [make() for _ in range(sessions)]
    action = format_tool_call("run_python", {"code": "print(1)"})
    for env in envs:
        env.reset(seed=0)
        env.step(action)  # warm: the sandbox workspace exists
    left = [runs]
    lock = threading.Lock()

    def loop(env: gym.Env) -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset(seed=0)

    threads = [threading.Thread(target=loop, args=(env,)) for env in envs]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    for env in envs:
        env.close()
    return runs / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="non-code steps per side")
    parser.add_argument("--runs", type=int, default=300, help="run_python calls per side and session count")
    args = parser.parse_args()

    with EnvServer() as server:
        def remote(env_id: str, **kwargs: object) -> Callable[[], gym.Env]:
            return lambda: gym.make("agentgym/Remote-v0", url=server.url, env_id=env_id, max_turns=100_000, **kwargs)

        def local(env_id: str, **kwargs: object) -> Callable[[], gym.Env]:
            return lambda: gym.make(env_id, max_turns=100_000, **kwargs)

        print(f"server {server.url}, {server.workers} worker threads")
        near, far = [], []
        for _ in range(2):  # alternate, so load changes hit both sides alike
            near += step_latencies(local("agentgym/SQL-v0"), args.steps // 2)
            far += step_latencies(remote("agentgym/SQL-v0"), args.steps // 2)
        print("\nnon-code step (SQL-v0, a turn without a tool call)")
        print(f"{'':>12} {'p50 ms':>8} {'p99 ms':>8}")
        print(f"{'in-process':>12} {percentile(near, 0.5):>8.3f} {percentile(near, 0.99):>8.3f}")
        print(f"{'server':>12} {percentile(far, 0.5):>8.3f} {percentile(far, 0.99):>8.3f}")
        print(f"server round trip overhead p50 {percentile(far, 0.5) - percentile(near, 0.5):.3f} ms (target: server p50 < 1 ms)")

        print("\nCodeExec-v0 run_python('print(1)'), executions/s")
        print(f"{'sessions':>8} {'in-process':>11} {'server':>8} {'ratio':>6}")
        for sessions in (1, 2, 4):
            a = throughput(local("agentgym/CodeExec-v0", split="val"), sessions, args.runs)
            b = throughput(remote("agentgym/CodeExec-v0", split="val"), sessions, args.runs)
            print(f"{sessions:>8} {a:>11.1f} {b:>8.1f} {b / a:>5.2f}x", flush=True)
        print("target: server >= 0.8x in-process")


if __name__ == "__main__":
    main()
