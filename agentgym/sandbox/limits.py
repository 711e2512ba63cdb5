"""Resource limits of one sandboxed run."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What one run may use. Every value must be positive.

    Attributes:
        wall_time_s: wall-clock seconds before the run's whole process tree is killed.
        cpu_time_s: CPU seconds per process (``RLIMIT_CPU``; SIGXCPU, then SIGKILL a second later).
        memory_bytes: address space per process (``RLIMIT_AS``).
        max_processes: processes and threads the run may have at once (``RLIMIT_NPROC``,
            counted per run because every run has its own user namespace).
        max_file_bytes: largest file a process may write (``RLIMIT_FSIZE``).
        max_open_files: open file descriptors per process (``RLIMIT_NOFILE``).
        max_output_bytes: bytes of standard output and of standard error kept; the rest is
            read and dropped, and the result says it was truncated.
        workspace_bytes: size of the workspace and of the private ``/tmp`` (memory-backed).
        cpus: CPU cores an episode's runs may use together, where control groups are active
            (see :attr:`episode_memory_bytes` for the memory they cap).
    """

    wall_time_s: float = 10.0
    cpu_time_s: int = 10
    memory_bytes: int = 1 << 30
    max_processes: int = 64
    max_file_bytes: int = 16 << 20
    max_open_files: int = 256
    max_output_bytes: int = 64 << 10
    workspace_bytes: int = 64 << 20
    cpus: float = 1.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            allowed = (int, float) if field.type == "float" else (int,)
            if isinstance(value, bool) or not isinstance(value, allowed) or value <= 0:
                raise ValueError(f"Limits.{field.name} must be a positive {field.type}; got {value!r}")
        if self.memory_bytes < 32 << 20:
            raise ValueError(f"Limits.memory_bytes must be at least 32 MiB for the interpreter to run; got {self.memory_bytes}")

    @property
    def workspace_inodes(self) -> int:
        """Files and folders the workspace and ``/tmp`` may each hold: each costs host kernel
        memory whatever its size, so they are bounded like the bytes."""
        return max(1024, self.workspace_bytes // 4096)

    @property
    def episode_memory_bytes(self) -> int:
        """Resident memory all runs of one workspace may hold together where control groups are
        active: ``memory_bytes``, plus room for the workspace, ``/tmp`` and ``/dev/shm`` files,
        which are memory-backed and charged to the episode."""
        return self.memory_bytes + 2 * self.workspace_bytes + (16 << 20)

    def to_dict(self) -> dict[str, Any]:
        """The limits as a JSON-ready dict (with ``workspace_inodes``)."""
        # Not dataclasses.asdict, which deep-copies: this is built for every run.
        return {field.name: getattr(self, field.name) for field in _FIELDS} | {"workspace_inodes": self.workspace_inodes}


_FIELDS = fields(Limits)
