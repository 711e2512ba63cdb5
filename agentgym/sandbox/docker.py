"""The Docker backend: one locked-down container per workspace, one ``docker exec`` per run.

Each workspace is a container started from a Python image with no network
(``network_mode="none"``), a read-only root filesystem, memory-backed ``/workspace`` and
``/tmp``, an unprivileged user, no capabilities, ``no-new-privileges``, a memory, process and
CPU cap, and file-size/open-file/CPU-time ulimits. A run executes the in-sandbox bootstrap
(``_bootstrap.py``) with ``python -I -c`` under ``timeout -s KILL``; afterwards every process
the run left behind is killed, so runs of one workspace are serialised.

Needs the ``docker`` package (``pip install agentgym[docker]``) and a reachable daemon;
otherwise constructing the backend raises :class:`SandboxUnavailable`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from importlib import resources
from typing import Any

from agentgym.sandbox.backend import Backend, Capture, SandboxProcess
from agentgym.sandbox.limits import Limits
from agentgym.sandbox.result import ExecResult, SandboxError, SandboxUnavailable

__all__ = ["DEFAULT_IMAGE", "DockerBackend"]

DEFAULT_IMAGE = "python:3.11-slim"
USER = "65534:65534"
GRACE_S = 5.0
KILLED_BY_TIMEOUT = 128 + 9  # what `timeout -s KILL` exits with when it fired
_BOOTSTRAP = (resources.files("agentgym.sandbox") / "_bootstrap.py").read_text(encoding="utf-8") + "\nmain()\n"


class DockerBackend(Backend):
    """Sandboxes as Docker containers (see the module docstring for the container settings).

    Args:
        image: the image to run; it needs ``python`` and coreutils' ``timeout`` on its PATH.
        client: a ``docker.DockerClient``; by default one from the environment (``DOCKER_HOST``).
    """

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, client: Any = None):
        try:
            import docker
        except ImportError:
            raise SandboxUnavailable("the docker backend needs the docker package: pip install 'agentgym[docker]'") from None
        self._docker = docker
        try:
            self.client = client or docker.from_env()
            self.client.ping()
        except Exception as exc:  # noqa: BLE001 - the SDK raises several unrelated types for "no daemon"
            raise SandboxUnavailable(f"the docker backend needs a reachable Docker daemon: {exc}") from None
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            try:
                self.client.images.pull(image)
            except docker.errors.DockerException as exc:
                raise SandboxUnavailable(f"docker image {image!r} is not available: {exc}") from None
        self.image = image
        self._containers: dict[str, Any] = {}
        self._run_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def container_settings(self, limits: Limits) -> dict[str, Any]:
        """Keyword arguments of ``containers.run`` for a workspace under ``limits``."""
        ulimit = self._docker.types.Ulimit
        cpu = int(limits.cpu_time_s)
        return {
            "command": ["sleep", "infinity"],
            "detach": True,
            "network_mode": "none",
            "read_only": True,
            "tmpfs": {"/workspace": f"size={limits.workspace_bytes},mode=1777", "/tmp": f"size={limits.workspace_bytes},mode=1777"},
            "user": USER,
            "working_dir": "/workspace",
            "environment": {},
            "hostname": "sandbox",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "mem_limit": limits.memory_bytes,
            "memswap_limit": limits.memory_bytes,
            "pids_limit": limits.max_processes,
            "nano_cpus": 1_000_000_000,
            "ulimits": [
                ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes),
                ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files),
                ulimit(name="core", soft=0, hard=0),
            ],
            "labels": {"agentgym.sandbox": "1"},
        }

    def open_workspace(self, limits: Limits) -> str:
        try:
            container = self.client.containers.run(self.image, **self.container_settings(limits))
        except self._docker.errors.DockerException as exc:
            raise SandboxError(f"could not start a sandbox container: {exc}") from None
        with self._lock:
            self._containers[container.id] = container
            self._run_locks[container.id] = threading.Lock()
        return str(container.id)

    def close_workspace(self, workspace: str, *, wait: bool = True) -> None:  # prepares nothing: always waits
        with self._lock:
            container = self._containers.pop(workspace, None)
            self._run_locks.pop(workspace, None)
        if container is not None:
            try:
                container.remove(force=True)
            except self._docker.errors.DockerException:
                pass  # already gone

    def start(self, workspace: str, request: bytes, limits: Limits) -> SandboxProcess:
        with self._lock:
            container = self._containers.get(workspace)
            run_lock = self._run_locks.get(workspace)
        if container is None or run_lock is None:
            raise SandboxError(f"workspace {workspace!r} is not open")
        run_lock.acquire()
        try:
            api = self.client.api
            command = ["timeout", "-s", "KILL", f"{limits.wall_time_s:g}", "python", "-I", "-c", _BOOTSTRAP]
            exec_id = api.exec_create(container.id, command, stdin=True, stdout=True, stderr=True, user=USER, workdir="/workspace")["Id"]
            connection = api.exec_start(exec_id, socket=True)
        except BaseException:
            run_lock.release()
            raise
        return DockerProcess(self, container, exec_id, connection, request, limits, run_lock)

    def kill_leftovers(self, container: Any) -> None:
        """Kill every process of the sandbox user in ``container`` except its init."""
        with contextlib.suppress(self._docker.errors.DockerException):
            container.exec_run(["kill", "-9", "-1"], user=USER)

    def close(self) -> None:
        with self._lock:
            workspaces = list(self._containers)
        for workspace in workspaces:
            self.close_workspace(workspace)


class DockerProcess(SandboxProcess):
    """Host end of one ``docker exec``: a socket carrying the daemon's multiplexed frames."""

    def __init__(self, backend: DockerBackend, container: Any, exec_id: str, connection: Any, request: bytes, limits: Limits, run_lock: threading.Lock):
        self._backend = backend
        self._container = container
        self._exec_id = exec_id
        self._connection = connection
        self._sock: socket.socket = getattr(connection, "_sock", connection)
        self._sock.setblocking(False)
        self._pending = bytearray(request)
        self._closing_stdin = False
        self._stdin_open = True
        self._frames = bytearray()
        self._out = Capture(limits.max_output_bytes)
        self._err = Capture(limits.max_output_bytes)
        self._eof = False
        self._started = time.monotonic()
        self._limits = limits
        self._run_lock: threading.Lock | None = run_lock
        self._result: ExecResult | None = None

    def send(self, data: bytes, timeout: float) -> None:
        if not self._stdin_open:
            return
        self._pending += data
        if not self._pump(lambda: not self._pending or not self._stdin_open, time.monotonic() + timeout):
            raise TimeoutError("the sandboxed program is not reading its input")

    def readline(self, timeout: float) -> bytes:
        if not self._pump(lambda: b"\n" in self._out.data or self._out.full() or self._eof, time.monotonic() + timeout):
            raise TimeoutError(f"no line of output within {timeout:g} s")
        return self._out.take_line()

    def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        self._closing_stdin = True
        finished = self._pump(lambda: self._eof, self._started + self._limits.wall_time_s + GRACE_S)
        self._finish()
        if not finished:
            raise SandboxError("the docker exec did not end after its time limit")
        info = self._backend.client.api.exec_inspect(self._exec_id)
        for _ in range(50):  # the daemon may take a moment to record the exit after the stream ends
            if not info.get("Running"):
                break
            time.sleep(0.02)
            info = self._backend.client.api.exec_inspect(self._exec_id)
        code = int(info.get("ExitCode") or 0)
        timed_out = code == KILLED_BY_TIMEOUT and time.monotonic() - self._started >= self._limits.wall_time_s - 0.05
        # `timeout` reports a child killed by signal N as 128+N, like a shell.
        returncode = -(code - 128) if code > 128 else code
        self._result = ExecResult(self._out.text(), self._err.text(), returncode, timed_out, self._out.truncated, self._err.truncated)
        return self._result

    def kill(self) -> None:
        self._finish()

    def stderr_so_far(self) -> str:
        # One multiplexed stream, read in order: what came before the last stdout line is here.
        return self._err.text()

    def _finish(self) -> None:
        if self._run_lock is None:
            return
        try:
            self._backend.kill_leftovers(self._container)
            self._connection.close()
        finally:
            self._run_lock.release()
            self._run_lock = None
            self._eof = True
            self._stdin_open = False

    def _pump(self, done: Any, until: float) -> bool:
        while not done():
            if self._eof:
                return done()
            want = select.POLLIN
            if self._stdin_open and (self._pending or self._closing_stdin):
                want |= select.POLLOUT
            poller = select.poll()
            poller.register(self._sock, want)
            left = until - time.monotonic()
            if left <= 0:
                return False
            for _, events in poller.poll(left * 1000):
                if events & select.POLLOUT:
                    self._feed()
                if events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    self._read()
        return True

    def _feed(self) -> None:
        try:
            while self._pending:
                sent = self._sock.send(self._pending[: 1 << 16])
                del self._pending[:sent]
        except BlockingIOError:
            return
        except OSError:
            self._pending.clear()
        if not self._pending and self._closing_stdin and self._stdin_open:
            self._stdin_open = False
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)

    def _read(self) -> None:
        try:
            chunk = self._sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._eof = True
            return
        self._frames += chunk
        # Frames: 1 byte stream (1 stdout, 2 stderr), 3 bytes padding, 4 bytes big-endian size.
        while len(self._frames) >= 8:
            stream, size = struct.unpack(">BxxxI", self._frames[:8])
            if len(self._frames) < 8 + size:
                break
            payload = bytes(self._frames[8 : 8 + size])
            del self._frames[: 8 + size]
            (self._err if stream == 2 else self._out).add(payload)
