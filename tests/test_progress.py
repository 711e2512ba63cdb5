"""The progress display of the long commands (agentgym.progress): plain lines at a steady interval
when piped, bars that move with turns on a terminal, nothing with --quiet."""

from __future__ import annotations

import io
import time

from rich.console import Console

from agentgym.progress import ProgressReport
from agentgym.rollouts.runner import RolloutProgress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _piped() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200), out


def test_piped_output_gets_a_line_at_a_steady_interval_with_rate_and_estimate() -> None:
    console, out = _piped()
    clock = Clock()
    with ProgressReport(console, interval_s=30, clock=clock) as progress:
        update = progress.episodes()
        update(RolloutProgress(finished=0, total=8, turns=0, sampled_tokens=0, work=0.0))  # a line at once
        for second in range(1, 100):
            clock.now = float(second)
            update(RolloutProgress(finished=0, total=8, turns=second, sampled_tokens=10 * second, work=min(second / 50, 0.99) * 2))
    lines = out.getvalue().splitlines()
    # One when the run starts, one every 30 s while no episode has finished, one at the end.
    assert len(lines) == 5, lines
    assert lines[0] == "agentgym: episodes 0/8 (0 turns); elapsed 0:00:00"
    assert lines[1] == "agentgym: episodes 0/8 (30 turns, 10.0 tokens/s), about 0:02:50 left; elapsed 0:00:30"
    assert lines[-1].startswith("agentgym: episodes 0/8 (99 turns, 10.0 tokens/s)") and lines[-1].endswith("elapsed 0:01:39")


def test_the_lines_keep_their_beat_while_nothing_reports() -> None:
    console, out = _piped()
    with ProgressReport(console, interval_s=0.05) as progress:
        progress.phase("episodes", 4)  # then a long generation round: no report for a while
        time.sleep(0.5)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and all(line.startswith("agentgym: episodes 0/4") for line in lines)


def test_phases_and_steps_share_the_line() -> None:
    console, out = _piped()
    clock = Clock()
    with ProgressReport(console, interval_s=10, clock=clock) as progress:
        progress.phase("GRPO", 4)
        clock.now = 20.0
        progress.advance("GRPO", "reward 0.500")
    lines = out.getvalue().splitlines()
    assert lines == [
        "agentgym: GRPO 0/4; elapsed 0:00:00",
        "agentgym: GRPO 1/4 (reward 0.500), about 0:01:00 left; elapsed 0:00:20",
        "agentgym: GRPO 1/4 (reward 0.500), about 0:01:00 left; elapsed 0:00:20",  # the closing line
    ]


def test_a_resumed_bar_estimates_from_the_steps_done_since_it_started() -> None:
    # An experiment resumed at phase 37 of 49: the 37 phases of earlier sessions took no time in this
    # one, so they must not set the pace (they made it claim seconds left for hours of phases).
    console, out = _piped()
    clock = Clock()
    with ProgressReport(console, interval_s=10, clock=clock) as progress:
        progress.phase("phases", 49, completed=37)
        clock.now = 600.0
        progress.advance("phases")
    lines = out.getvalue().splitlines()
    assert lines[0] == "agentgym: phases 37/49; elapsed 0:00:00"
    assert lines[1] == "agentgym: phases 38/49, about 1:50:00 left; elapsed 0:10:00"


def test_a_terminal_gets_a_bar_that_moves_before_any_episode_finishes() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with ProgressReport(console) as progress:
        assert progress.live
        update = progress.episodes()
        update(RolloutProgress(finished=0, total=4, turns=6, sampled_tokens=300, work=1.5))
        bar = progress._progress
        [task] = bar.tasks
        assert task.completed == 1.5 and task.total == 4 and task.fields["count"] == 0 and "6 turns" in task.fields["status"]
    assert "0/4" in out.getvalue()


def test_quiet_shows_nothing_but_messages() -> None:
    console, out = _piped()
    with ProgressReport(console, enabled=False) as progress:
        progress.phase("SFT", 3)
        progress.advance("SFT")
        progress.episodes()(RolloutProgress(finished=1, total=2, turns=3, sampled_tokens=5, work=1.0))
        progress.message("eval (start): success 0.500")
    assert out.getvalue() == "eval (start): success 0.500\n"
