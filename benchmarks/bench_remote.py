"""Per-step overhead of an environment served by ``agentgym serve`` against the same environment in-process.

Two measurements, each with its in-process baseline in the same run:

1. Round trip of a non-code step: SQL-v0, a turn without a tool call (the environment answers
   with its fixed reminder; no query runs), stepped ``--steps`` times in-process, through
   ``agentgym/Remote-v0`` on a loopback server, and through ``agentgym/Ray-v0`` in an actor of a
   local Ray runtime. Prints p50/p99 per step. Targets: server p50 < 1 ms, Ray actor p50 < 2 ms.
2. CodeExec throughput: ``run_python`` of a trivial snippet from 1, 2 and 4 sessions at once:
   in-process (as many threads), through the server, and through Ray pools of 1, 2 and 4 actors
   (one session each). Target: the 2-actor pool >= 0.8x in-process on the same cores (going
   remote costs little next to the sandbox's work).

The Ray part runs when ``ray`` is installed (``pip install 'agentgym[ray]'``).

Usage: python benchmarks/bench_remote.py [--steps 2000] [--runs 300]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
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

    with_ray = importlib.util.find_spec("ray") is not None
    if with_ray:
        import ray

        from agentgym.remote.ray_pool import RayEnvPool

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)

    def local(env_id: str, **kwargs: object) -> Callable[[], gym.Env]:
        return lambda: gym.make(env_id, max_turns=100_000, **kwargs)

    def in_ray(pool: str, env_id: str, **kwargs: object) -> Callable[[], gym.Env]:
        return lambda: gym.make("agentgym/Ray-v0", env_id=env_id, pool=pool, max_turns=100_000, **kwargs)

    with EnvServer() as server:

        def remote(env_id: str, **kwargs: object) -> Callable[[], gym.Env]:
            return lambda: gym.make("agentgym/Remote-v0", url=server.url, env_id=env_id, max_turns=100_000, **kwargs)

        print(f"server {server.url}, {server.workers} worker threads; Ray: {'local runtime' if with_ray else 'not installed'}")
        sides = {"in-process": local("agentgym/SQL-v0"), "server": remote("agentgym/SQL-v0")}
        if with_ray:
            RayEnvPool(size=1, num_cpus=0.5, name="latency")
            sides["Ray actor"] = in_ray("latency", "agentgym/SQL-v0")
        latencies: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(2):  # alternate, so load changes hit every side alike
            for name, make in sides.items():
                latencies[name] += step_latencies(make, args.steps // 2)
        print("\nnon-code step (SQL-v0, a turn without a tool call)")
        print(f"{'':>12} {'p50 ms':>8} {'p99 ms':>8}")
        for name, values in latencies.items():
            print(f"{name:>12} {percentile(values, 0.5):>8.3f} {percentile(values, 0.99):>8.3f}")
        print("targets: server p50 < 1 ms, Ray actor p50 < 2 ms")
        if with_ray:
            RayEnvPool.named("latency").close()

        print("\nCodeExec-v0 run_python('print(1)'), executions/s (Ray: one actor per session)")
        print(f"{'sessions':>8} {'in-process':>11} {'server':>8} {'ratio':>6}" + (f" {'Ray pool':>9} {'ratio':>6}" if with_ray else ""))
        for sessions in (1, 2, 4):
            a = throughput(local("agentgym/CodeExec-v0", split="val"), sessions, args.runs)
            b = throughput(remote("agentgym/CodeExec-v0", split="val"), sessions, args.runs)
            line = f"{sessions:>8} {a:>11.1f} {b:>8.1f} {b / a:>5.2f}x"
            if with_ray:
                pool = RayEnvPool(size=sessions, num_cpus=(os.cpu_count() or 1) / sessions, sessions_per_actor=1, name=f"pool{sessions}")
                c = throughput(in_ray(pool.name, "agentgym/CodeExec-v0", split="val"), sessions, args.runs)
                pool.close()
                line += f" {c:>9.1f} {c / a:>5.2f}x"
            print(line, flush=True)
        print("targets: server >= 0.8x in-process; the 2-actor Ray pool >= 0.8x in-process")
    if with_ray:
        ray.shutdown()


if __name__ == "__main__":
    main()
