"""Speed of agentgym's math_equivalent against math-verify's own parse+verify, in the same run.

Baseline: ``math_verify.verify(parse(reference), parse(prediction))`` called in this process's
main thread with its default settings (signal-based timeouts), the way its README uses it.
agentgym: ``MathEquivalence.check`` one call at a time, and ``check_batch`` over the whole
workload (what ``math_equivalent`` and ``math_equivalent_batch`` run). Every string is distinct
and agentgym's verdict cache is off, so no cache helps; agentgym's workers are started before
timing. Besides wall-clock throughput it prints CPU time per pair (agentgym's includes its worker
processes, read from /proc, so Linux only): on a loaded machine the wall clock penalises the
extra process hop far more than the work it costs. Workloads mirror a math RL reward: integer answers, fractions against
decimals, symbolic expressions, and math-verify's own test cases (tests/verifiers/data).

Run: ``python benchmarks/bench_math_equivalent.py [--scale 1.0] [--workers N]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

from agentgym.verifiers import MathEquivalence

CASES = Path(__file__).resolve().parent.parent / "tests" / "verifiers" / "data" / "math_verify_cases.jsonl"
Pairs = list[tuple[str, str]]


def integer_answers(n: int, rng: random.Random) -> Pairs:
    """Gold ``$N$`` against a boxed integer, right half the time."""
    pairs = []
    for i in range(n):
        gold = rng.randrange(10**6) * 1000 + i  # distinct
        pred = gold if rng.random() < 0.5 else gold + rng.randrange(1, 50)
        pairs.append((f"\\boxed{{{pred}}}", f"${gold}$"))
    return pairs


def fractions_vs_decimals(n: int, rng: random.Random) -> Pairs:
    """``\\frac{k}{8}`` against its decimal (or a wrong one)."""
    pairs = []
    for i in range(n):
        k = 8 * i + rng.randrange(1, 8)
        value = k / 8 if rng.random() < 0.5 else k / 8 + 0.25
        pairs.append((f"{value}", f"\\frac{{{k}}}{{8}}"))
    return pairs


def symbolic(n: int, rng: random.Random) -> Pairs:
    """``x^2+2kx+k^2`` against ``(x+k)^2`` (or ``(x+k+1)^2``)."""
    pairs = []
    for k in range(1, n + 1):
        shift = 0 if rng.random() < 0.5 else 1
        pairs.append((f"x^2+{2 * k}x+{k * k}", f"(x+{k + shift})^2"))
    return pairs


def upstream_cases(_: int, __: random.Random) -> Pairs:
    """math-verify's own test cases, as shipped in tests/verifiers/data."""
    rows = [json.loads(line) for line in CASES.read_text(encoding="utf-8").splitlines()]
    return [(r["prediction"], r["reference"]) for r in rows]


WORKLOADS: dict[str, tuple[Callable[[int, random.Random], Pairs], int]] = {
    "integer answers": (integer_answers, 2000),
    "fractions vs decimals": (fractions_vs_decimals, 300),
    "symbolic": (symbolic, 60),
    "math-verify test cases": (upstream_cases, 0),
}


def run_math_verify(pairs: Pairs) -> tuple[float, float, list[bool]]:
    """Wall seconds, CPU seconds and verdicts of math-verify in this process."""
    from math_verify import parse, verify

    wall, cpu = time.perf_counter(), time.process_time()
    verdicts = [bool(verify(parse(_as_math(ref)), parse(_as_math(pred)))) for pred, ref in pairs]
    return time.perf_counter() - wall, time.process_time() - cpu, verdicts


def run_agentgym(checker: MathEquivalence, pairs: Pairs, *, batch: bool) -> tuple[float, float | None, list[bool]]:
    """Wall seconds, CPU seconds (this process and the workers; None if a worker was replaced)
    and verdicts of agentgym."""
    wall, cpu, workers = time.perf_counter(), time.process_time(), _worker_cpu(checker)
    if batch:
        verdicts = [c.equivalent for c in checker.check_batch(pairs)]
    else:
        verdicts = [checker.check(p, r).equivalent for p, r in pairs]
    elapsed = time.perf_counter() - wall
    after = _worker_cpu(checker)
    if after.keys() != workers.keys():
        return elapsed, None, verdicts
    return elapsed, time.process_time() - cpu + sum(after.values()) - sum(workers.values()), verdicts


def _worker_cpu(checker: MathEquivalence) -> dict[int, float]:
    # CPU time is what a loaded machine does not distort; the workers' comes from /proc.
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for pid in checker.pool.worker_pids():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        seconds[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return seconds


def _as_math(answer: str) -> str:
    # The same bare-answer wrapping agentgym applies, so both sides read the same expression.
    from agentgym.verifiers.math_equiv import prepare_answer

    return prepare_answer(answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the generated workload sizes")
    parser.add_argument("--workers", type=int, default=None, help="agentgym worker processes (default: up to 4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    import math_verify  # noqa: F401  (import time is not part of the baseline's measurement)

    # Like the baseline's process, each agentgym pool lives through all workloads; no verdict
    # cache, and every string is seen once per side.
    # A generous limit: this measures speed, and a loaded machine must not turn a slow case into
    # a timeout (which would also replace a worker and lose its CPU count).
    single = MathEquivalence(max_workers=args.workers, cache_size=0, timeout=120.0)
    batched = MathEquivalence(max_workers=args.workers, cache_size=0, timeout=120.0)
    for checker in (single, batched):
        checker.check_batch([(f"x+{i}", f"{i}+x") for i in range(8)])  # start the workers outside the timing

    print(f"CPU cores: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f}; agentgym workers: {len(single.pool.worker_pids())}")
    print("pairs/s is wall-clock throughput; cpu ms is CPU time per pair (agentgym: caller + workers)")
    header = (
        f"{'workload':24} {'pairs':>5} | {'math-verify':>11} {'cpu ms':>7} | {'agentgym 1-by-1':>15} {'ratio':>6} {'cpu ms':>7} {'cpu ratio':>9}"
        f" | {'agentgym batch':>14} {'ratio':>6} | {'agree':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, (make, size) in WORKLOADS.items():
        pairs = make(max(1, int(size * args.scale)), random.Random(args.seed))
        n = len(pairs)
        base_s, base_cpu, expected = run_math_verify(pairs)
        one_s, one_cpu, one_by_one = run_agentgym(single, pairs, batch=False)
        batch_s, _, in_batch = run_agentgym(batched, pairs, batch=True)
        agree = sum(a == b == c for a, b, c in zip(expected, one_by_one, in_batch, strict=False))
        measured = one_cpu is not None and one_cpu > 0
        cpu = f"{1000 * one_cpu / n:7.2f} {base_cpu / one_cpu:8.2f}x" if measured else f"{'n/a':>7} {'n/a':>9}"
        print(
            f"{name:24} {n:5d} | {n / base_s:11.0f} {1000 * base_cpu / n:7.2f} | {n / one_s:15.0f} {base_s / one_s:5.2f}x"
            f" {cpu} | {n / batch_s:14.0f} {base_s / batch_s:5.2f}x | {agree:4d}/{n}"
        )
    print("ratio = math-verify / agentgym (above 1: agentgym is faster)")

    adversarial = "(10^{10})!"
    started = time.perf_counter()
    check = single.check(adversarial, "5", timeout=1.0)
    print(f"adversarial {adversarial!r}: agentgym returned {check.equivalent} ({check.error}) in {time.perf_counter() - started:.2f} s, in any thread")
    single.close()
    batched.close()


if __name__ == "__main__":
    main()
