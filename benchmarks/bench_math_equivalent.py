"""Speed of agentgym's math_equivalent against math-verify's own parse+verify, in the same run.

Baseline: ``math_verify.verify(parse(reference), parse(prediction))`` called in this process's
main thread with its default settings (signal-based timeouts), the way its README uses it.
agentgym: ``math_equivalent`` one call at a time, and ``math_equivalent_batch`` over the whole
workload. Every string is distinct, so neither side's caches help; agentgym's worker pool is
started before timing. Workloads mirror a math RL reward: integer answers, fractions against
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


def run_math_verify(pairs: Pairs) -> tuple[float, list[bool]]:
    from math_verify import parse, verify

    started = time.perf_counter()
    verdicts = [bool(verify(parse(_as_math(ref)), parse(_as_math(pred)))) for pred, ref in pairs]
    return time.perf_counter() - started, verdicts


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

    print(f"CPU cores: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f}")
    header = f"{'workload':24} {'pairs':>6} {'math-verify/s':>14} {'agentgym 1-by-1/s':>18} {'ratio':>6} {'agentgym batch/s':>17} {'ratio':>6} {'agree':>6}"
    print(header)
    print("-" * len(header))
    for name, (make, size) in WORKLOADS.items():
        pairs = make(max(1, int(size * args.scale)), random.Random(args.seed))
        baseline_s, expected = run_math_verify(pairs)

        single = MathEquivalence(max_workers=args.workers, cache_size=0)
        single.check("0", "1/2")  # start the workers outside the timing
        started = time.perf_counter()
        one_by_one = [single.check(p, r).equivalent for p, r in pairs]
        single_s = time.perf_counter() - started
        single.close()

        batched = MathEquivalence(max_workers=args.workers, cache_size=0)
        batched.check_batch([("0", "1/2")] * 8)
        started = time.perf_counter()
        in_batch = [c.equivalent for c in batched.check_batch(pairs)]
        batch_s = time.perf_counter() - started
        batched.close()

        agree = sum(a == b == c for a, b, c in zip(expected, one_by_one, in_batch))
        n = len(pairs)
        print(
            f"{name:24} {n:6d} {n / baseline_s:14.0f} {n / single_s:18.0f} {baseline_s / single_s:5.2f}x"
            f" {n / batch_s:17.0f} {baseline_s / batch_s:5.2f}x {agree:3d}/{n}"
        )
    print("ratio = math-verify time / agentgym time (above 1: agentgym is faster)")

    adversarial = "(10^{10})!"
    bounded = MathEquivalence(max_workers=args.workers)
    bounded.check("0", "1/2")
    started = time.perf_counter()
    check = bounded.check(adversarial, "5", timeout=1.0)
    print(f"adversarial {adversarial!r}: agentgym returned {check.equivalent} ({check.error}) in {time.perf_counter() - started:.2f} s, in any thread")
    bounded.close()


if __name__ == "__main__":
    main()
