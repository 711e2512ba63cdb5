"""``timings.json`` of a results folder: seconds per phase and in all, over every session of a resumed run."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["PhaseTimings"]


class PhaseTimings:
    """Seconds per phase and wall seconds in all, kept in a JSON file so a resumed run adds up all
    its sessions (phases that ran at once overlap: their sum exceeds the wall time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        self.phases: dict[str, float] = data.get("phase_seconds", {})
        self.wall: float = data.get("wall_seconds", 0.0)

    def add(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self._write()

    def add_wall(self, seconds: float) -> None:
        self.wall += seconds
        self._write()

    def _write(self) -> None:
        self.path.write_text(json.dumps({"phase_seconds": self.phases, "wall_seconds": self.wall}, indent=1) + "\n", encoding="utf-8")
