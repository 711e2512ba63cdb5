"""The public face of the sandbox: one :class:`Sandbox` per episode, on a shared backend."""

from __future__ import annotations

import atexit
import os
import socket
import threading
from collections.abc import Mapping
from types import TracebackType

from agentgym.sandbox.backend import Backend, SandboxProcess, encode_request
from agentgym.sandbox.limits import Limits
from agentgym.sandbox.result import ExecResult, SandboxError, SandboxUnavailable

__all__ = ["BACKENDS", "Sandbox", "get_backend"]

BACKENDS = ("auto", "local", "docker")
_shared: dict[str, Backend] = {}
_shared_lock = threading.Lock()


def get_backend(name: str = "auto") -> Backend:
    """The process-wide backend called ``name``, started on first use.

    ``"auto"`` picks the local namespace backend when this machine supports it, else Docker
    when a daemon answers. A backend that cannot run raises :class:`SandboxUnavailable`; code is
    never run unsandboxed instead.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
    with _shared_lock:
        if name == "auto":
            for candidate in ("local", "docker"):
                if candidate in _shared and _alive(_shared[candidate]):
                    return _shared[candidate]
            reasons = []
            for candidate in ("local", "docker"):
                try:
                    return _start(candidate)
                except SandboxUnavailable as exc:
                    reasons.append(f"{candidate}: {exc}")
            raise SandboxUnavailable("no sandbox backend can run here (" + "; ".join(reasons) + ")")
        if name in _shared and _alive(_shared[name]):
            return _shared[name]
        return _start(name)


def _alive(backend: Backend) -> bool:
    return bool(getattr(backend, "alive", True))


def _start(name: str) -> Backend:
    backend: Backend
    if name == "local":
        from agentgym.sandbox.local import LocalBackend

        backend = LocalBackend()
    else:
        from agentgym.sandbox.docker import DockerBackend

        backend = DockerBackend()
    _shared[name] = backend
    return backend


@atexit.register
def _close_shared() -> None:
    with _shared_lock:
        for backend in _shared.values():
            backend.close()
        _shared.clear()


def _forget_shared_in_child() -> None:
    # A forked child (a process pool worker, say) must not talk to its parent's fork server: it
    # drops those backends and starts its own on first use. The lock may have been held by
    # another thread at fork time, so the child gets a new one.
    global _shared_lock
    _shared_lock = threading.Lock()
    for backend in _shared.values():
        backend.abandon()
    _shared.clear()


os.register_at_fork(after_in_child=_forget_shared_in_child)


class Sandbox:
    """An isolated workspace for one episode: runs share its files, nothing else.

    Args:
        backend: ``"auto"``, ``"local"``, ``"docker"`` or a :class:`Backend` instance.
        limits: resource limits of every run (defaults: :class:`Limits`).

    Example::

        with Sandbox(limits=Limits(wall_time_s=5)) as sandbox:
            sandbox.run("open('data.txt', 'w').write('hi')")
            print(sandbox.run("print(open('data.txt').read())").stdout)  # hi
    """

    def __init__(self, backend: str | Backend = "auto", limits: Limits | None = None):
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits instance; got {type(limits).__name__}")
        self.limits = limits or Limits()
        self.backend = get_backend(backend) if isinstance(backend, str) else backend
        self._workspace: str | None = self.backend.open_workspace(self.limits)

    def run(self, code: str, *, files: Mapping[str, str | bytes] | None = None, stdin: str | bytes = b"", isolated: bool = False) -> ExecResult:
        """Run ``code`` like ``python -c`` in the workspace and wait for it to end.

        Args:
            code: Python source.
            files: files to write into the workspace first (relative path -> content).
            stdin: the program's standard input.
            isolated: like ``python -I``: the workspace is not on ``sys.path``.
        """
        if self._workspace is None:
            raise SandboxError("this sandbox is closed")
        # The input follows the request on the same stream, so wait() feeds it as the code reads.
        data = encode_request(code, files, isolated=isolated) + (stdin.encode() if isinstance(stdin, str) else bytes(stdin))
        return self.backend.start(self._workspace, data, self.limits).wait()

    def start(self, code: str, *, files: Mapping[str, str | bytes] | None = None, isolated: bool = False, peer: socket.socket | None = None) -> SandboxProcess:
        """Start ``code`` and return the running process, whose standard input stays open.

        ``peer``: one end of a Unix socket pair, open in the program as descriptor 4 (see
        :meth:`Backend.start_connected`; the local backend only).
        """
        if self._workspace is None:
            raise SandboxError("this sandbox is closed")
        request = encode_request(code, files, isolated=isolated)
        if peer is not None:
            return self.backend.start_connected(self._workspace, request, self.limits, peer)
        return self.backend.start(self._workspace, request, self.limits)

    def prepare(self) -> None:
        """Set up the next run's isolation now, while the caller does other work: the next
        :meth:`run` or :meth:`start` then only hands it the code (the local backend: a run that
        waits for its code; other backends: nothing). The prepared run costs an idle process until
        it is used or the sandbox closes."""
        if self._workspace is None:
            raise SandboxError("this sandbox is closed")
        self.backend.prepare(self._workspace, self.limits)

    def set_idle_priority(self, idle: bool) -> None:
        """Let the workspace's programs run only on CPU time nothing else wants (``idle``), or
        as usual again (see :meth:`Backend.set_idle_priority`): for programs that are done and
        about to be killed. A closed sandbox ignores it."""
        if self._workspace is not None:
            self.backend.set_idle_priority(self._workspace, idle)

    def close(self, *, wait: bool = True) -> None:
        """Delete the workspace (idempotent). The shared backend keeps serving other sandboxes.

        ``wait=False``: return without waiting for a prepared run to end (it is stopped, and a
        later ``close()`` of any sandbox of the backend waits for it), for an episode that ends
        with the next one about to start.
        """
        if self._workspace is not None:
            workspace, self._workspace = self._workspace, None
            self.backend.close_workspace(workspace, wait=wait)

    def abandon(self) -> None:
        """In a forked child: forget this sandbox without touching it (it belongs to the parent's
        backend, which the parent still serves)."""
        self._workspace = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except (SandboxError, AttributeError):
            pass  # best effort at garbage collection; the backend's own shutdown removes the rest
