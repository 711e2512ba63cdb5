"""Soak test of MockAPI-v0: many concurrent episodes for a long time, then a check for leaks.

Each of ``--episodes`` threads owns one environment and plays the fault-tolerant oracle on task
after task (faults on) until ``--duration`` seconds have passed; then every environment is
closed. The script samples the process's threads, open sockets and resident memory before
anything starts, at regular checkpoints, at the end and after the close, and fails (exit code
1) if a thread or socket outlives the environments, memory keeps growing over the second half
of the run (the first half being the warm-up), or an episode is not solved.

    python benchmarks/soak_mock_api.py                       # 10 minutes, 256 episodes
    python benchmarks/soak_mock_api.py --duration 60 --episodes 64

Linux only (it reads /proc/self).
"""

from __future__ import annotations

import argparse
import gc
import os
import threading
import time

from agentgym.envs.mock_api.env import MockApiEnv
from agentgym.rollouts.scripted import make_policy, run_episode


def sample() -> dict[str, float]:
    """Threads, open sockets and resident memory (MiB) of this process."""
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # the descriptor of the listing itself
    with open("/proc/self/status", encoding="ascii") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {"threads": threading.active_count(), "sockets": sockets, "rss_mib": rss_kib / 1024}


def soak(duration: float, episodes: int, fault_rate: float, checkpoints: int) -> dict[str, object]:
    before = sample()
    envs = [MockApiEnv(split="train", fault_rate=fault_rate) for _ in range(episodes)]
    stats = [{"episodes": 0, "solved": 0, "calls": 0} for _ in range(episodes)]
    errors: list[str] = []

    def worker(index: int, env: MockApiEnv) -> None:
        task_ids = env.task_ids
        n = index
        try:
            while time.monotonic() < deadline:
                task_id = task_ids[n % len(task_ids)]
                record = run_episode(env, make_policy(env, "oracle", n), seed=n, task_id=task_id)
                stats[index]["episodes"] += 1
                stats[index]["solved"] += bool(record["success"])
                stats[index]["calls"] += record["steps"][-1]["info"]["api_calls"]
                n += episodes
        except Exception as exc:  # reported, and fails the soak
            errors.append(f"worker {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i, env), name=f"soak-{i}") for i, env in enumerate(envs)]
    started = time.monotonic()
    deadline = started + duration
    for t in threads:
        t.start()
    trend = []
    for k in range(1, checkpoints + 1):
        time.sleep(max(0.0, started + duration * k / checkpoints - time.monotonic()))
        trend.append({"t_s": round(time.monotonic() - started), **sample()})
        print(f"  t={trend[-1]['t_s']:>5}s threads={trend[-1]['threads']:>4} sockets={trend[-1]['sockets']:>4} rss={trend[-1]['rss_mib']:.1f} MiB", flush=True)
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    end = sample()
    for env in envs:
        env.close()
    envs.clear()
    gc.collect()
    after = sample()
    totals = {key: sum(s[key] for s in stats) for key in ("episodes", "solved", "calls")}
    # The first half is the warm-up (world cache, allocator arenas); a leak keeps growing after it.
    mid = trend[len(trend) // 2 - 1] if len(trend) > 1 else end
    return {
        "before": before,
        "mid": mid,
        "end": end,
        "after_close": after,
        "trend": trend,
        "errors": errors,
        "elapsed_s": elapsed,
        **totals,
        "leaked_threads": after["threads"] - before["threads"],
        "leaked_sockets": after["sockets"] - before["sockets"],
        "rss_growth_second_half_mib": end["rss_mib"] - mid["rss_mib"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--episodes", type=int, default=256, help="concurrent episodes (default 256)")
    parser.add_argument("--fault-rate", type=float, default=0.3)
    parser.add_argument("--checkpoints", type=int, default=10, help="samples during the run (the first half is the warm-up)")
    parser.add_argument("--max-rss-growth-mib", type=float, default=16.0, help="allowed growth over the second half of the run")
    args = parser.parse_args(argv)
    print(f"soak: {args.episodes} concurrent episodes, fault_rate {args.fault_rate}, {args.duration:g} s")
    r = soak(args.duration, args.episodes, args.fault_rate, max(1, args.checkpoints))
    for label in ("before", "mid", "end", "after_close"):
        s = r[label]
        print(f"{label:>12}: threads={s['threads']:>4} sockets={s['sockets']:>4} rss={s['rss_mib']:.1f} MiB")
    print(
        f"episodes {r['episodes']} (solved {r['solved']}), API calls {r['calls']}, {r['calls'] / r['elapsed_s']:.0f} calls/s, "
        f"{r['episodes'] / r['elapsed_s']:.1f} episodes/s over {r['elapsed_s']:.0f} s"
    )
    print(
        f"leaked threads {r['leaked_threads']}, leaked sockets {r['leaked_sockets']}, "
        f"RSS growth over the second half {r['rss_growth_second_half_mib']:+.1f} MiB"
    )
    failures = list(r["errors"])
    if r["leaked_threads"] > 0 or r["leaked_sockets"] > 0:
        failures.append("threads or sockets outlived the environments")
    if r["rss_growth_second_half_mib"] > args.max_rss_growth_mib:
        failures.append(f"memory grew by more than {args.max_rss_growth_mib:g} MiB over the second half")
    if r["solved"] != r["episodes"]:
        failures.append(f"the oracle failed {r['episodes'] - r['solved']} episodes")
    for failure in failures:
        print("FAIL:", failure)
    print("PASS" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
