"""The interface every sandbox backend implements, and the request format they share."""

from __future__ import annotations

import abc
import base64
import json
import posixpath
import socket
from collections.abc import Mapping
from typing import ClassVar

from agentgym.sandbox.limits import Limits
from agentgym.sandbox.result import ExecResult

__all__ = ["Backend", "Capture", "SandboxProcess", "check_relative_path", "encode_request"]


class SandboxProcess(abc.ABC):
    """A sandboxed program that is running, with a live standard input.

    Interactive protocols (the grader's) use ``send``/``readline``; :meth:`Sandbox.run` only
    calls ``wait``. Standard error is collected in the background, up to the output limit.
    """

    @abc.abstractmethod
    def send(self, data: bytes, timeout: float) -> None:
        """Write ``data`` to the program's standard input (dropped silently if it has exited).

        Raises:
            TimeoutError: the program did not take the data within ``timeout`` seconds.
        """

    @abc.abstractmethod
    def readline(self, timeout: float) -> bytes:
        """The next line of standard output, with its newline; without one at end of output or
        when the line exceeds the output limit; ``b""`` once output has ended.

        Raises:
            TimeoutError: no complete line arrived within ``timeout`` seconds.
        """

    @abc.abstractmethod
    def wait(self) -> ExecResult:
        """Close standard input, wait for the run to end (at most its wall-clock limit plus a
        grace period) and return its result, with standard output not yet read by ``readline``."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the run's whole process tree now (idempotent)."""

    def pipes(self) -> tuple[int, int]:
        """The host's ends of the program's standard input (write) and output (read), once the
        request has been delivered: for handing the conversation to another sandbox (see
        :meth:`Backend.start_connected`), after which the caller no longer calls ``send`` or
        ``readline``. Backends without such pipes raise ``NotImplementedError``."""
        raise NotImplementedError("this backend's programs cannot hand over their standard streams")

    @abc.abstractmethod
    def stderr_so_far(self) -> str:
        """Standard error received up to now, without waiting: everything the program wrote there
        before the last line :meth:`readline` returned, and possibly more."""


class Backend(abc.ABC):
    """Runs sandboxed programs. Thread-safe: many episodes share one backend."""

    name: ClassVar[str]
    # Modules every run has loaded already, by their name in ``sys.modules`` (the local backend's
    # fork server loads the grading harness once, so grading programs need not ship it).
    preloaded: ClassVar[frozenset[str]] = frozenset()

    @abc.abstractmethod
    def open_workspace(self, limits: Limits) -> str:
        """Create a private, empty, writable workspace whose files persist across runs; its id."""

    @abc.abstractmethod
    def close_workspace(self, workspace: str, *, wait: bool = True) -> None:
        """Delete a workspace and everything in it (after its running programs end). A run
        prepared for it (:meth:`prepare`) is stopped; ``wait=False`` returns without waiting for it
        to end (a later close with ``wait=True`` does), for a caller that opens the next workspace
        at once."""

    @abc.abstractmethod
    def start(self, workspace: str, request: bytes, limits: Limits) -> SandboxProcess:
        """Start the program described by ``request`` (see :func:`encode_request`) in ``workspace``."""

    def start_connected(self, workspace: str, request: bytes, limits: Limits, peer: socket.socket) -> SandboxProcess:
        """Like :meth:`start`, with ``peer`` (one end of a Unix socket pair) open in the program as
        descriptor 4, so that the host can pass it descriptors later (a test driver receives the
        pipes of each submission it tests). Backends that cannot raise ``NotImplementedError``."""
        raise NotImplementedError(f"the {self.name} backend cannot connect a socket to a sandbox")

    def prepare(self, workspace: str, limits: Limits) -> None:  # noqa: B027 - optional: backends that cannot prepare ahead start each run on demand
        """Set up ``workspace``'s next run under ``limits`` now, so that the next :meth:`start` with
        the same limits skips that work."""

    def set_idle_priority(self, workspace: str, idle: bool) -> None:  # noqa: B027 - optional: where it cannot, programs keep their priority
        """Let ``workspace``'s programs use only CPU time nothing else wants (``idle``), or their
        usual share again: for programs whose results are in and that are being ended, so that
        tearing them down does not slow the work that comes next. A closed workspace ignores it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every sandbox of this backend and release its resources (idempotent)."""

    def abandon(self) -> None:  # noqa: B027 - an optional hook: backends without host state need nothing here
        """In a forked child: drop this (the parent's) backend without touching its sandboxes."""

    def generation(self) -> int:
        """How many times this backend's machinery (the local backend's fork server) has been found
        stopped; 0 for backends with no such server. Workspaces and runs begun in an earlier
        generation were lost with it, so a caller that compares the value before and after some
        work tells a failure of the machinery from one of the sandboxed code. Checking costs a poll."""
        return 0

    @property
    def restarts(self) -> int:
        """How many times this backend restarted its machinery after it stopped (see :meth:`generation`)."""
        return 0


class Capture:
    """A bounded byte buffer for one output stream: bytes beyond ``limit`` are counted as truncated."""

    def __init__(self, limit: int):
        self.data = bytearray()
        self.limit = limit
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]

    def full(self) -> bool:
        return len(self.data) >= self.limit

    def take_line(self) -> bytes:
        """Remove and return the first line (everything, when no newline is buffered)."""
        end = self.data.find(b"\n")
        end = len(self.data) if end < 0 else end + 1
        line = bytes(self.data[:end])
        del self.data[:end]
        return line

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def check_relative_path(name: str) -> str:
    """``name`` if it is a safe relative POSIX path inside the workspace, else ``ValueError``."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        raise ValueError(f"file name must be a non-empty relative path; got {name!r}")
    normal = posixpath.normpath(name)
    if normal == "." or normal.startswith("../") or normal == "..":
        raise ValueError(f"file name must stay inside the workspace; got {name!r}")
    return normal


def encode_request(code: str, files: Mapping[str, str | bytes] | None = None, *, isolated: bool = False) -> bytes:
    """The length-prefixed request the in-sandbox bootstrap reads first from standard input."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a str; got {type(code).__name__}")
    encoded: dict[str, str] = {}
    for name, content in (files or {}).items():
        if not isinstance(content, str | bytes):
            raise TypeError(f"content of file {name!r} must be str or bytes; got {type(content).__name__}")
        raw = content.encode() if isinstance(content, str) else content
        encoded[check_relative_path(name)] = base64.b64encode(raw).decode("ascii")
    payload = json.dumps({"code": code, "files": encoded, "isolated": bool(isolated)}).encode()
    return b"%d\n" % len(payload) + payload
