"""``timings.json`` of a results folder: seconds per phase and in all, over every session of a resumed
run, and each phase process's peak resident memory."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

__all__ = ["PhaseTimings"]


class PhaseTimings:
    """Seconds per phase and wall seconds in all, kept in a JSON file so a resumed run adds up all
    its sessions (phases that ran at once overlap: their sum exceeds the wall time); and the peak
    resident memory (MiB) of each phase that ran in a worker process of its own (over its sessions).

    The wall time of the session under way is written with every phase that finishes and on every
    :meth:`tick`, so a session that is killed outright (no chance to clean up) still counts up to
    its last write. A phase cut short by a session's end counts only the session that finished it.
    ``sessions`` is how many sessions ran phases (``None`` in a file written before it was kept).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        self.phases: dict[str, float] = data.get("phase_seconds", {})
        self.peaks: dict[str, float] = data.get("phase_peak_mib", {})
        self.wall: float = data.get("wall_seconds", 0.0)
        self.sessions: int | None = data.get("sessions", None if data else 0)
        self._session: tuple[float, float] | None = None  # (wall before this session, its start)

    def start_session(self) -> None:
        """Count a new session's wall time from now on."""
        self._session = (self.wall, time.perf_counter())
        if self.sessions is not None:
            self.sessions += 1
        self._write()

    def tick(self) -> None:
        """Write the session's wall time so far."""
        self._write()

    def add(self, phase: str, seconds: float, peak_mib: float | None = None) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        if peak_mib is not None:
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), peak_mib)
        self._write()

    def _write(self) -> None:
        if self._session is not None:
            before, started = self._session
            self.wall = before + time.perf_counter() - started
        data = {"phase_seconds": self.phases, "phase_peak_mib": self.peaks, "wall_seconds": self.wall, "sessions": self.sessions}
        # Written aside and renamed: a session killed mid-write (it writes every minute) leaves the
        # previous file whole, never a truncated one the resumed run cannot read.
        partial = self.path.with_name(f".{self.path.name}.partial")
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, self.path)
