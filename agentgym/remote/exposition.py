"""The environment server's metrics (:class:`Metrics`) and their Prometheus text exposition
format (version 0.0.4), what ``GET /metrics`` answers unless JSON is asked for.

Names follow Prometheus' conventions: an ``agentgym_`` prefix, base units (seconds), ``_total``
on counters. Written by hand (a dozen lines of a stable format), so the server needs no client
library; the tests parse it with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONTENT_TYPE", "Metrics", "exposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Metrics:
    """What ``GET /metrics`` reports: in the Prometheus text format (:mod:`agentgym.remote.exposition`),
    or as these fields in JSON with ``?format=json`` or ``Accept: application/json``.

    Attributes:
        sessions: sessions open now.
        sessions_total: sessions opened since the server started.
        steps_total: ``step`` requests answered.
        steps_per_s: steps answered per second over the last 10 s.
        step_p50_ms, step_p99_ms: server-side latency of ``step`` (the environment's own time,
            over the last 4,096 steps).
        queue_depth: environment calls waiting for or running on the worker threads; above
            ``workers`` means sessions wait (a CodeExec server's sandbox queue).
        workers: worker threads for environment calls.
        uptime_s: seconds since the server started.
    """

    sessions: int
    sessions_total: int
    steps_total: int
    steps_per_s: float
    step_p50_ms: float
    step_p99_ms: float
    queue_depth: int
    workers: int
    uptime_s: float


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
