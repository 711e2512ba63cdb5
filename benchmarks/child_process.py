"""Run one benchmark measurement in a fresh process, so that its peak memory is its own."""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable
from typing import Any


def measure_in_child(target: Callable[..., None], *args: Any, what: str) -> dict[str, Any]:
    """Run ``target(*args, queue)`` in a spawned process and return the one result it puts on
    ``queue``; exit with a message naming ``what`` if the process fails."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    if process.exitcode != 0:
        sys.exit(f"the {what} failed (exit code {process.exitcode})")
    return result
