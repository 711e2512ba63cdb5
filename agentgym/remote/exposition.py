"""The environment server's :class:`~agentgym.remote.server.Metrics` in the Prometheus text
exposition format (version 0.0.4), what ``GET /metrics`` answers unless JSON is asked for.

Names follow Prometheus' conventions: an ``agentgym_`` prefix, base units (seconds), ``_total``
on counters. Written by hand (a dozen lines of a stable format), so the server needs no client
library; the tests parse it with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentgym.remote.server import Metrics

__all__ = ["CONTENT_TYPE", "exposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition(metrics: Metrics) -> str:
    """The metrics as Prometheus text: ``# HELP`` and ``# TYPE`` lines, then the samples."""
    families: list[tuple[str, str, str, list[tuple[str, float]]]] = [
        ("agentgym_sessions_open", "gauge", "Sessions open now.", [("", metrics.sessions)]),
        ("agentgym_sessions_total", "counter", "Sessions opened since the server started.", [("", metrics.sessions_total)]),
        ("agentgym_steps_total", "counter", "Step requests answered.", [("", metrics.steps_total)]),
        ("agentgym_steps_per_second", "gauge", "Steps answered per second over the last 10 s.", [("", metrics.steps_per_s)]),
        (
            "agentgym_step_latency_seconds",
            "gauge",
            "Server-side step latency (the environment's own time) over the last 4096 steps, by quantile.",
            [('{quantile="0.5"}', metrics.step_p50_ms / 1e3), ('{quantile="0.99"}', metrics.step_p99_ms / 1e3)],
        ),
        ("agentgym_queue_depth", "gauge", "Environment calls waiting for or running on the worker threads.", [("", metrics.queue_depth)]),
        ("agentgym_workers", "gauge", "Worker threads for environment calls.", [("", metrics.workers)]),
        ("agentgym_uptime_seconds", "gauge", "Seconds since the server started.", [("", metrics.uptime_s)]),
    ]
    lines = []
    for name, kind, help_text, samples in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{labels} {float(value)!r}" for labels, value in samples]
    return "\n".join(lines) + "\n"
