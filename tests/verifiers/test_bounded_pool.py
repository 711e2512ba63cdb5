"""BoundedPool: calls run in worker processes and are killed at their time limit, from any thread."""

import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from processes import alive

from agentgym.verifiers import BoundedPool

# 9 ** (9 ** 81) never finishes, and as one C-level big-integer power it ignores signals.
ENDLESS = (9, 9**81)


@pytest.fixture(scope="module")
def pool():
    with BoundedPool(2, preload=("operator",)) as p:
        yield p


def test_returns_value(pool):
    outcome = pool.run(operator.add, 2, 3, timeout=5)
    assert outcome.ok and outcome.value == 5 and not outcome.timed_out


def test_exception_becomes_error_and_worker_survives(pool):
    pid = pool.run(os.getpid, timeout=5).value
    outcome = pool.run(operator.truediv, 1, 0, timeout=5)
    assert not outcome.ok and outcome.error.startswith("ZeroDivisionError")
    assert pool.run(os.getpid, timeout=5).value in {pid} | set(_worker_pids(pool))


def test_function_by_name(pool):
    assert pool.run("operator:mul", 6, 7, timeout=5).value == 42
    assert "does not name a function" in pool.run("operator:nothing_here", timeout=5).error


def test_uncatchable_computation_is_killed_within_its_limit(pool):
    started = time.monotonic()
    outcome = pool.run(pow, *ENDLESS, timeout=0.5)
    elapsed = time.monotonic() - started
    assert outcome.timed_out and outcome.error == "timed out after 0.5 s"
    assert elapsed < 3.0  # 0.5 s, plus the kill and scheduling on a busy machine
    # The killed worker was replaced; the pool keeps working.
    assert pool.run(operator.add, 1, 1, timeout=30).value == 2


def test_short_limit_after_a_long_one_is_still_a_timeout(pool):
    # The per-call CPU backstop must follow each call's own limit, down as well as up.
    assert pool.run(operator.add, 1, 1, timeout=120).ok
    assert pool.run(pow, *ENDLESS, timeout=0.5).timed_out


def test_memory_limit_turns_a_huge_allocation_into_an_error():
    with BoundedPool(1, memory_limit_mb=512) as small:
        outcome = small.run(bytearray, 4 * 1024**3, timeout=30)
    assert not outcome.ok and outcome.error.startswith("MemoryError")


def test_unpicklable_result_is_an_error(pool):
    outcome = pool.run(threading.Lock, timeout=5)
    assert not outcome.ok and "could not be sent back" in outcome.error


def test_calls_from_many_threads(pool):
    results = {}

    def call(i):
        results[i] = pool.run(operator.mul, i, i, timeout=30).value

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i * i for i in range(12)}


def test_timeout_from_a_non_main_thread(pool):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("outcome", pool.run(pow, *ENDLESS, timeout=0.5)))
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and box["outcome"].timed_out


def test_map_keeps_order_and_isolates_failures(pool):
    outcomes = pool.map(operator.floordiv, [(10, 2), (1, 0), (9, 3)], timeout=30)
    assert [o.value for o in outcomes] == [5, None, 3]
    assert outcomes[1].error.startswith("ZeroDivisionError")


def test_bad_arguments():
    with pytest.raises(ValueError):
        BoundedPool(0)
    with BoundedPool(1) as p:
        with pytest.raises(ValueError):
            p.run(operator.add, 1, 2, timeout=0)
    with pytest.raises(RuntimeError, match="closed"):
        p.run(operator.add, 1, 2, timeout=1)


def test_close_kills_workers():
    p = BoundedPool(1)
    pid = p.run(os.getpid, timeout=30).value
    p.close()
    assert not alive(pid)


def test_orphaned_worker_dies_by_its_cpu_backstop(tmp_path: Path):
    # The parent dies (SIGKILL, no cleanup) while its worker is stuck in C code; the worker's
    # per-call CPU timer (timeout + 1 s, SIGPROF) must end it.
    script = tmp_path / "orphan.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal, threading, time
            from agentgym.verifiers import BoundedPool
            pool = BoundedPool(1)
            print(pool.run(os.getpid, timeout=30).value, flush=True)
            threading.Thread(target=pool.run, args=(pow, 9, 9**81), kwargs={"timeout": 0.5}, daemon=True).start()
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    parent = subprocess.run([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL
    worker = int(parent.stdout.split()[0])
    assert alive(worker), "the parent must have died before its own 0.5 s kill"
    deadline = time.monotonic() + 20
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(worker)


def _worker_pids(pool: BoundedPool) -> list[int]:
    return [pool.run(os.getpid, timeout=5).value for _ in range(2)]


def test_worker_that_cannot_start_gives_an_error_not_a_hang():
    with BoundedPool(1, preload=("agentgym_no_such_module",)) as broken:
        outcome = broken.run(operator.add, 1, 2, timeout=5)
    assert not outcome.ok and outcome.error.startswith("worker failed to start")
