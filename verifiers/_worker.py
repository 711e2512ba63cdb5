"""The child side of :class:`agentgym.verifiers.bounded.BoundedPool`.

Started as ``python -m agentgym.verifiers._worker TASK_FD RESULT_FD MEMORY_MB [MODULE ...]``.
It imports the preload modules, says ready, then answers ``(fn, args, cpu_seconds)`` messages
(``fn`` a function or a ``"module:function"`` name) with
``(True, value)`` or ``(False, "error text")`` until the parent closes the pipe.
"""

from __future__ import annotations

import importlib
import pickle
import resource
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from agentgym.verifiers.bounded import READY

_MAX_ERROR_CHARS = 300


def _arm_cpu_backstop(seconds: float) -> None:
    # Backstop for an orphan: if the parent dies while this worker is stuck in a C-level
    # computation, nobody kills it, so the kernel ends it once the call has used ``seconds`` of
    # CPU time: SIGPROF's default action terminates the process, no Python code needs to run.
    # (Lowering RLIMIT_CPU instead is unreliable: some kernels signal at once.)
    signal.setitimer(signal.ITIMER_PROF, seconds)


def _limit_memory(megabytes: int) -> None:
    limit = megabytes * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "..."


def resolve(reference: str) -> Callable[..., Any]:
    """The function named ``"package.module:function"``."""
    module, _, name = reference.partition(":")
    target = getattr(importlib.import_module(module), name, None)
    if not callable(target):
        raise TypeError(f"{reference!r} does not name a function")
    return target


def serve(tasks: Connection, results: Connection) -> None:
    """Answer calls until the parent closes the task pipe."""
    while True:
        try:
            message = tasks.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            fn, args, cpu_seconds = pickle.loads(message)
            if isinstance(fn, str):
                fn = resolve(fn)
            _arm_cpu_backstop(cpu_seconds)
            reply: tuple[bool, object] = (True, fn(*args))
        except Exception as exc:  # noqa: BLE001 - the parent reads any failure as this call's error
            reply = (False, _describe(exc))
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        try:
            results.send(reply)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable return value
            results.send((False, f"result could not be sent back: {_describe(exc)}"))


def main(argv: list[str]) -> None:
    """Entry point: ``TASK_FD RESULT_FD MEMORY_MB [MODULE ...]``."""
    task_fd, result_fd, memory_mb, *preload = argv
    # Ctrl-C goes to the whole process group; the parent decides what happens to its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if int(memory_mb) > 0:
        _limit_memory(int(memory_mb))
    tasks = Connection(int(task_fd), writable=False)
    results = Connection(int(result_fd), readable=False)
    for module in preload:
        importlib.import_module(module)
    results.send(READY)
    serve(tasks, results)


if __name__ == "__main__":
    main(sys.argv[1:])
