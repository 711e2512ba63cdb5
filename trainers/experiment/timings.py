"""``timings.json`` of a results folder: seconds per phase and in all, over every session of a resumed
run, and each phase process's peak resident memory."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["PhaseTimings"]


class PhaseTimings:
    """Seconds per phase and wall seconds in all, kept in a JSON file so a resumed run adds up all
    its sessions (phases that ran at once overlap: their sum exceeds the wall time); and the peak
    resident memory (MiB) of each phase that ran in a worker process of its own (over its sessions)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        self.phases: dict[str, float] = data.get("phase_seconds", {})
        self.peaks: dict[str, float] = data.get("phase_peak_mib", {})
        self.wall: float = data.get("wall_seconds", 0.0)

    def add(self, phase: str, seconds: float, peak_mib: float | None = None) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        if peak_mib is not None:
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), peak_mib)
        self._write()

    def add_wall(self, seconds: float) -> None:
        self.wall += seconds
        self._write()

    def _write(self) -> None:
        self.path.write_text(
            json.dumps({"phase_seconds": self.phases, "phase_peak_mib": self.peaks, "wall_seconds": self.wall}, indent=1) + "\n", encoding="utf-8"
        )
