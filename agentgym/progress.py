"""How far a long command is (``agentgym eval``, ``rollout``, ``train``, ``experiment``).

One :class:`ProgressReport` shows one or more named bars (a training phase, the episodes of a
rollout). Where it shows them depends on its console:

* on a terminal, live bars (rich) that move with every generation round: a rollout's bar counts
  finished episodes plus the share of its turn limit each live episode has played, so it moves
  while the episodes of a batch are still running (they tend to finish together);
* piped to a file, a plain line on stderr when a bar starts, then every ``interval_s`` seconds (30
  by default; a background thread keeps the beat while a long generation round reports nothing),
  and once at the end: each bar's count, tokens per second, the elapsed time and an estimate of
  the time left. Log files get a steady heartbeat, not a stream of redraws;
* disabled (``--quiet``), nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from agentgym.rollouts.runner import ProgressFn, RolloutProgress

__all__ = ["DEFAULT_INTERVAL_S", "ProgressReport"]

DEFAULT_INTERVAL_S = 30.0
"""Seconds between two plain progress lines when the output is not a terminal."""


@dataclass
class _Bar:
    """One named bar's state."""

    total: float
    completed: float  # what the bar and the estimate use; may be fractional
    count: int  # what the line shows: whole steps or finished episodes
    started: float
    initial: float = 0.0  # completed when the bar (re)started: a resumed run's earlier steps set no pace
    status: str = ""
    tokens: int = 0
    task: Any = None  # the rich task id, on a terminal


class ProgressReport:
    """Progress bars on a terminal, a plain line at a steady interval otherwise, or nothing.

    Use it as a context manager. ``phase`` starts (or restarts) a bar, ``advance`` moves it one step,
    ``episodes`` gives the callback :class:`~agentgym.rollouts.runner.RolloutRunner` reports to, ``message``
    prints a line above the bars.

    Args:
        console: where to draw (default: a rich console on stderr); whether it is a terminal decides
            between bars and lines.
        enabled: show anything at all (``--quiet`` turns it off).
        interval_s: seconds between plain lines.
        clock: the time source (tests pass a fake one).
    """

    def __init__(
        self, console: Console | None = None, *, enabled: bool = True, interval_s: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.interval_s = interval_s
        self.clock = clock
        self.live = enabled and self.console.is_terminal and not self.console.is_dumb_terminal
        self._bars: dict[str, _Bar] = {}
        self._started = clock()
        self._last_line: float | None = None
        self._progress: Any = None
        self._lock = threading.Lock()  # the heartbeat thread prints too
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def __enter__(self) -> ProgressReport:
        if self.live:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description:<10}"),
                BarColumn(bar_width=24),
                TextColumn("{task.fields[count]}/{task.total:.0f}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
                console=self.console,
            )
            self._progress.start()
        elif self.enabled:
            self._heartbeat = threading.Thread(target=self._beat, name="agentgym-progress", daemon=True)
            self._heartbeat.start()
        return self

    def _beat(self) -> None:
        """Print a line every ``interval_s`` seconds, whether or not anything reported meanwhile."""
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if self._bars and (self._last_line is None or self.clock() - self._last_line >= self.interval_s):
                    self._print_line()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        elif self.enabled and self._bars:
            self._print_line()

    def phase(self, name: str, total: int, completed: int = 0) -> None:
        """Show (or restart) the bar ``name`` at ``completed`` of ``total`` steps."""
        self._show(name, self._start(name, total, completed), force=True)

    def _start(self, name: str, total: int, completed: int = 0) -> _Bar:
        bar = self._bars.get(name)
        if bar is None:
            bar = self._bars[name] = _Bar(total=total, completed=completed, count=completed, started=self.clock(), initial=completed)
        else:
            bar.total, bar.completed, bar.count, bar.started, bar.initial, bar.status, bar.tokens = total, completed, completed, self.clock(), completed, "", 0
        return bar

    def advance(self, name: str, status: str = "") -> None:
        """One step of bar ``name`` done; ``status`` is shown beside it."""
        bar = self._bars.get(name)
        if bar is not None:
            bar.completed += 1
            bar.count += 1
            bar.status = status
            self._show(name, bar)

    def episodes(self, name: str = "episodes") -> ProgressFn:
        """A callback for :meth:`agentgym.rollouts.runner.RolloutRunner.run`: bar ``name`` follows the run's
        turns and tokens, and counts its finished episodes."""

        def update(progress: RolloutProgress) -> None:
            bar = self._bars.get(name)
            new_run = bar is None or progress.total != bar.total or progress.work < bar.completed
            if new_run:
                bar = self._start(name, progress.total)
            assert bar is not None
            bar.completed, bar.count, bar.tokens = progress.work, progress.finished, progress.sampled_tokens
            elapsed = self.clock() - bar.started
            rate = f", {progress.sampled_tokens / elapsed:.1f} tokens/s" if elapsed > 0 and progress.sampled_tokens else ""
            bar.status = f"{progress.turns} turns{rate}"
            self._show(name, bar, force=new_run)

        return update

    def message(self, text: str) -> None:
        """Print a line above the bars (warnings, evaluation results), shown even when the bars are off."""
        self.console.print(text)

    def _show(self, name: str, bar: _Bar, *, force: bool = False) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            if bar.task is None:
                bar.task = self._progress.add_task(name, total=bar.total, completed=bar.completed, count=bar.count, status=bar.status)
            elif force:
                self._progress.reset(bar.task, total=bar.total, completed=bar.completed, count=bar.count, status=bar.status)
            else:
                self._progress.update(bar.task, total=bar.total, completed=bar.completed, count=bar.count, status=bar.status)
            return
        with self._lock:
            if force or self._last_line is None or self.clock() - self._last_line >= self.interval_s:
                self._print_line()

    def _print_line(self) -> None:
        now = self.clock()
        self._last_line = now
        parts = [f"{name} {bar.count}/{bar.total:.0f}" + (f" ({bar.status})" if bar.status else "") + _estimate(bar, now) for name, bar in self._bars.items()]
        self.console.print(f"agentgym: {'; '.join(parts)}; elapsed {_clock_text(now - self._started)}", highlight=False, soft_wrap=True)


def _estimate(bar: _Bar, now: float) -> str:
    """``", about H:MM:SS left"`` from the bar's pace since it started; empty before any progress or when done."""
    done = bar.completed - bar.initial
    if done <= 0 or bar.completed >= bar.total:
        return ""
    left = (now - bar.started) * (bar.total - bar.completed) / done
    return f", about {_clock_text(left)} left"


def _clock_text(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
