"""Run functions in worker processes that are killed when a call overruns its time limit.

Why processes: ``signal.alarm`` timeouts (math-verify's own) work only in the main thread, and a
long C-level computation such as a huge big-integer power cannot be interrupted at all; killing
the process that runs it always works, from any thread.

Why ``subprocess`` rather than ``multiprocessing``: the spawn and forkserver start methods import
the caller's ``__main__`` script inside the worker, which re-runs a training script that lacks an
``if __name__ == "__main__"`` guard; fork copies a possibly multi-threaded trainer. A fresh
interpreter running :mod:`agentgym.verifiers._worker` has neither problem. Requires a POSIX system.

Every call's latency is bounded by: waiting for a free worker (each busy one finishes or is killed
within its own limit) + the worker's start-up (only for a fresh worker, ``startup_timeout``) +
``timeout``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

__all__ = ["BoundedPool", "Outcome"]

T = TypeVar("T")

# The CPU-time backstop a worker sets for itself per call; the parent's wall-clock kill comes
# first, so this only matters for a worker orphaned by a dead parent.
_CPU_SLACK_SECONDS = 1.0
# What a worker sends once its preload imports are done.
READY = "ready"


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What a bounded call produced: a value, or why there is none.

    Attributes:
        value: the function's return value (``None`` when the call failed).
        error: ``None`` on success; otherwise a short description (exception, timeout, crash).
        timed_out: whether the call was killed for overrunning its time limit.
    """

    value: T | None = None
    error: str | None = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Whether the call returned normally."""
        return self.error is None


class _Worker:
    """One child interpreter serving calls over a pair of pipes."""

    def __init__(self, memory_limit_mb: int | None, preload: Sequence[str]) -> None:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        command = [sys.executable, "-m", "agentgym.verifiers._worker", str(task_read), str(result_write), str(memory_limit_mb or 0), *preload]
        # One call at a time needs no BLAS threads, and on a many-core host their per-thread
        # buffers would eat into the address-space limit.
        env = os.environ | {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        try:
            self.process = subprocess.Popen(
                command, pass_fds=(task_read, result_write), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True, env=env
            )
        finally:
            os.close(task_read)
            os.close(result_write)
        self._tasks = Connection(task_write, readable=False)
        self._results = Connection(result_read, writable=False)
        self.ready = False

    def call(self, fn: Callable[..., Any] | str, args: tuple[Any, ...], timeout: float, startup_timeout: float) -> Outcome[Any]:
        # Start-up (interpreter + imports) is not charged to the call's own time limit.
        if not self.wait_started(startup_timeout):
            try:  # a worker that failed has closed its pipe and is exiting
                status = self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                return Outcome(error=f"worker did not start within {startup_timeout:g} s")
            return Outcome(error=f"worker failed to start (exit status {status})")
        try:
            self._tasks.send((fn, args, timeout + _CPU_SLACK_SECONDS))
        except (OSError, ValueError) as exc:
            return Outcome(error=f"could not send the call to the worker: {exc}")
        if not self._results.poll(timeout):
            return Outcome(error=f"timed out after {timeout:g} s", timed_out=True)
        reply = self._receive()
        if reply is None:
            return Outcome(error=f"worker process died (exit status {self.process.wait()})")
        succeeded, payload = reply
        return Outcome(value=payload) if succeeded else Outcome(error=payload)

    def _receive(self) -> Any:
        try:
            return self._results.recv()
        except (EOFError, OSError):
            return None

    def wait_started(self, timeout: float) -> bool:
        """Whether the worker has finished starting, waiting at most ``timeout`` seconds."""
        if not self.ready and self._results.poll(timeout):
            self.ready = self._receive() == READY
        return self.ready

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive:
            self.process.kill()
        self.process.wait()
        self._tasks.close()
        self._results.close()


def _kill_all(workers: set[_Worker], owner_pid: int) -> None:
    # A forked child inherits this finalizer; the workers are its parent's to kill, not its own.
    if os.getpid() != owner_pid:
        return
    for worker in list(workers):
        worker.kill()
    workers.clear()


class BoundedPool:
    """A small pool of worker processes, each call killed when it overruns ``timeout``.

    Safe to use from any number of threads. All workers start at the first call, serve calls one
    at a time and are replaced as soon as one times out or crashes. Functions and arguments travel by pickle, so a
    function must be importable by module and name (not defined in ``__main__``); naming it as
    ``"package.module:function"`` spares the caller from importing that module itself.

    Args:
        max_workers: how many calls may run at once.
        memory_limit_mb: address-space limit of each worker (``None``: unlimited), so that a
            runaway computation fails with ``MemoryError`` instead of swapping the machine.
        preload: modules every worker imports before it reports ready, so that their import
            time is not charged to the first call.
        startup_timeout: seconds a fresh worker may take to start.
    """

    def __init__(self, max_workers: int = 2, *, memory_limit_mb: int | None = 2048, preload: Sequence[str] = (), startup_timeout: float = 60.0) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        if os.name != "posix":
            raise OSError("BoundedPool needs a POSIX system (it passes pipe descriptors to its workers)")
        self.max_workers = max_workers
        self.memory_limit_mb = memory_limit_mb
        self.preload = tuple(preload)
        self.startup_timeout = startup_timeout
        self._reset_state()

    def _reset_state(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._closed = False
        weakref.finalize(self, _kill_all, self._live, self._pid)

    def run(self, fn: Callable[..., T] | str, *args: Any, timeout: float) -> Outcome[T]:
        """Call ``fn(*args)`` in a worker; kill it if it runs longer than ``timeout`` seconds."""
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        worker = self._checkout()
        outcome: Outcome[T] = worker.call(fn, args, timeout, self.startup_timeout)
        self._checkin(worker, healthy=worker.ready and worker.alive and not outcome.timed_out)
        return outcome

    def map(self, fn: Callable[..., T] | str, calls: Iterable[Sequence[Any]], *, timeout: float) -> list[Outcome[T]]:
        """Run ``fn(*args)`` for every ``args`` in ``calls`` across the workers; results in order."""
        argument_lists = [tuple(args) for args in calls]
        if len(argument_lists) <= 1:
            return [self.run(fn, *args, timeout=timeout) for args in argument_lists]
        # Parent threads only wait on pipes, so they do not contend for the GIL.
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(argument_lists))) as threads:
            return list(threads.map(lambda args: self.run(fn, *args, timeout=timeout), argument_lists))

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring, e.g. their CPU time)."""
        with self._cond:
            return sorted(w.process.pid for w in self._live)

    def close(self) -> None:
        """Kill every worker; later calls raise ``RuntimeError``."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live.difference_update(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()

    def __enter__(self) -> BoundedPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _checkout(self) -> _Worker:
        if os.getpid() != self._pid:
            # After os.fork the workers belong to the parent; this process needs its own.
            self._reset_state()
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("BoundedPool is closed")
                # Start every worker on first use: after a kill, the next call then finds another
                # started worker instead of waiting for the replacement to import.
                while len(self._live) < self.max_workers:
                    self._spawn()
                if self._idle:
                    # Prefer a worker that has started over a replacement still importing.
                    started = [w for w in self._idle if w.wait_started(0)]
                    worker = started[-1] if started else self._idle[0]
                    self._idle.remove(worker)
                    return worker
                self._cond.wait()

    def _spawn(self) -> None:
        worker = _Worker(self.memory_limit_mb, self.preload)
        self._live.add(worker)
        self._idle.append(worker)

    def _checkin(self, worker: _Worker, *, healthy: bool) -> None:
        if not healthy or self._closed:
            worker.kill()
        with self._cond:
            if healthy and not self._closed:
                self._idle.append(worker)
            else:
                self._live.discard(worker)
                if not self._closed:
                    self._spawn()  # now, so that its start-up overlaps other work
            self._cond.notify()
