"""Throughput and latency of isolated executions against plain ``python -c`` subprocesses.

For each concurrency level (episodes running at once, one thread and one sandbox workspace per
episode), runs a trivial snippet many times through :class:`agentgym.sandbox.Sandbox` and, in the
same run on the same machine, through ``subprocess.run([python, "-c", snippet])`` with the same
interpreter binary and no isolation at all. Prints executions per second, p50/p99 latency and
the ratio sandbox/plain per level, then the ratio of the best throughputs (the target is >= 10x).

Wall-clock numbers on a shared machine are noisy, so both sides of every ratio are measured
back to back, alternating in slices, and the output also reports CPU milliseconds per execution
of this process and all its descendants (the fork server included), which other load disturbs less.

Usage: python benchmarks/bench_sandbox.py [--runs 400] [--plain-runs 80] [--concurrency 1,2,4,8,16,32,64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentgym.sandbox import Limits, Sandbox

SNIPPET = "print(1)"
PYTHON = os.path.realpath(sys.executable)


@dataclass
class Measurement:
    runs: int
    wall_s: float
    latencies: list[float]
    cpu_s: float

    @property
    def per_s(self) -> float:
        return self.runs / self.wall_s

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    def merge(self, other: Measurement) -> Measurement:
        return Measurement(self.runs + other.runs, self.wall_s + other.wall_s, self.latencies + other.latencies, self.cpu_s + other.cpu_s)


def _cpu() -> float:
    """CPU seconds of this process, its reaped children and every live descendant (the fork
    server and its sandboxes are long-lived children that os.times() alone would miss)."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    me = os.getpid()
    for pid in ticks:
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, me):
            ancestor = parents.get(ancestor)
        if ancestor == me:
            total += ticks[pid] / os.sysconf("SC_CLK_TCK")
    return total


def measure(concurrency: int, runs: int, make_worker: Callable[[], Callable[[], None]]) -> Measurement:
    """Run ``runs`` executions spread over ``concurrency`` threads, each with its own worker."""
    workers = [make_worker() for _ in range(concurrency)]
    latencies: list[float] = []
    lock = threading.Lock()
    left = [runs]
    errors: list[BaseException] = []

    def loop(work: Callable[[], None]) -> None:
        while True:
            with lock:
                if left[0] == 0 or errors:
                    return
                left[0] -= 1
            start = time.perf_counter()
            try:
                work()
            except BaseException as exc:  # reported after the threads stop
                with lock:
                    errors.append(exc)
                return
            with lock:
                latencies.append(time.perf_counter() - start)

    cpu0, t0 = _cpu(), time.perf_counter()
    threads = [threading.Thread(target=loop, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    for w in workers:
        getattr(w, "close", lambda: None)()
    if errors:
        raise errors[0]
    return Measurement(runs, wall, latencies, cpu)


class SandboxWorker:
    """One episode: its own sandbox workspace, running the snippet over and over."""

    def __init__(self) -> None:
        self.sandbox = Sandbox(backend="local", limits=Limits(wall_time_s=10))

    def __call__(self) -> None:
        result = self.sandbox.run(SNIPPET)
        if result.stdout != "1\n" or result.returncode != 0:
            raise RuntimeError(f"sandboxed run failed: {result}")

    def close(self) -> None:
        self.sandbox.close()


def plain_worker() -> Callable[[], None]:
    def work() -> None:
        done = subprocess.run([PYTHON, "-c", SNIPPET], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
        if done.stdout != b"1\n" or done.returncode != 0:
            raise RuntimeError(f"plain run failed: {done}")

    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="sandboxed executions per concurrency level")
    parser.add_argument("--plain-runs", type=int, default=80, help="plain subprocess executions per level")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    parser.add_argument("--slices", type=int, default=4, help="alternate sandbox/plain in this many slices per level")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    Sandbox(backend="local").close()  # start the shared fork server outside the timings
    print(f"python {PYTHON} ({sys.version.split()[0]}), {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"snippet {SNIPPET!r}; sandbox: local backend, full isolation; plain: subprocess python -c")
    header = f"{'conc':>4} | {'sandbox/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms':>7} | {'plain/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms':>7} | {'ratio':>6}"
    print(header)
    print("-" * len(header))
    rows = []
    for level in levels:
        sandboxed = plain = None
        for _ in range(args.slices):  # alternate, so load changes hit both sides alike
            s = measure(level, max(level, args.runs // args.slices), SandboxWorker)
            p = measure(level, max(level, args.plain_runs // args.slices), plain_worker)
            sandboxed = s if sandboxed is None else sandboxed.merge(s)
            plain = p if plain is None else plain.merge(p)
        assert sandboxed is not None and plain is not None
        ratio = sandboxed.per_s / plain.per_s
        row = {
            "concurrency": level,
            "sandbox_per_s": round(sandboxed.per_s, 1),
            "sandbox_p50_ms": round(sandboxed.percentile(0.5), 2),
            "sandbox_p99_ms": round(sandboxed.percentile(0.99), 2),
            "sandbox_cpu_ms": round(sandboxed.cpu_s / sandboxed.runs * 1e3, 2),
            "plain_per_s": round(plain.per_s, 1),
            "plain_p50_ms": round(plain.percentile(0.5), 2),
            "plain_p99_ms": round(plain.percentile(0.99), 2),
            "plain_cpu_ms": round(plain.cpu_s / plain.runs * 1e3, 2),
            "ratio": round(ratio, 2),
        }
        rows.append(row)
        print(
            f"{level:>4} | {row['sandbox_per_s']:>9} {row['sandbox_p50_ms']:>7} {row['sandbox_p99_ms']:>7} {row['sandbox_cpu_ms']:>7} | "
            f"{row['plain_per_s']:>8} {row['plain_p50_ms']:>7} {row['plain_p99_ms']:>7} {row['plain_cpu_ms']:>7} | {ratio:>5.1f}x",
            flush=True,
        )
    best = max(r["sandbox_per_s"] for r in rows) / max(r["plain_per_s"] for r in rows)
    print(f"peak throughput: sandbox {max(r['sandbox_per_s'] for r in rows)}/s vs plain {max(r['plain_per_s'] for r in rows)}/s -> {best:.1f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"python": PYTHON, "cpus": os.cpu_count(), "rows": rows, "peak_ratio": round(best, 2)}, handle, indent=1)


if __name__ == "__main__":
    main()
