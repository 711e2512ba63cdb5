"""What a sandboxed run returns, and the errors the sandbox raises."""

from __future__ import annotations

from dataclasses import dataclass


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start a run, its server died); never the code's fault."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot run on this machine; nothing was run unsandboxed instead."""


class SandboxLost(SandboxError):
    """The backend's machinery failed under the caller: its server stopped (taking the workspaces
    and runs it held with it), or it could not be restarted. Raised only from what the host saw of
    the server, never from anything a sandboxed program said or did: an infrastructure failure,
    not the program's (see docs/core.md, Failures)."""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one run.

    Attributes:
        stdout: standard output, decoded as UTF-8 (invalid bytes replaced), at most
            ``Limits.max_output_bytes`` of it.
        stderr: standard error, likewise.
        returncode: the exit status; negative when the process was killed by that signal.
        timed_out: the wall-clock limit killed the run.
        stdout_truncated: standard output exceeded the limit and was cut.
        stderr_truncated: standard error exceeded the limit and was cut.
    """

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """Whether the run finished in time with status 0."""
        return self.returncode == 0 and not self.timed_out
