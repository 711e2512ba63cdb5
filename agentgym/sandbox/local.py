"""The local backend: Linux namespaces, a read-only runtime-only mount view and a warm fork server.

This module is the host side. It starts the fork server (``_zygote.py``) once per backend,
writes its user-namespace id maps (which needs root), and talks to it over a Unix socket:
``open``/``close`` create and delete episode workspaces, ``run`` passes four pipe ends for a new
sandbox (standard input, output, error and a status pipe) and ``kill`` stops a run. What the
sandboxes run travels on the pipes, never through the server.

A run's isolation does not depend on its code, which it reads from standard input only once
that is in place. :meth:`LocalBackend.prepare` uses this: it starts a workspace's next run ahead
of time, and the next ``start`` hands that run its request (``go`` restarts its wall-time limit)
instead of waiting for a new one to set up.

The backend supervises its fork server. When the server is found stopped (it exited or was
killed: it is the first process the kernel's OOM killer picks; it stopped answering; a run's end
went unreported past its deadline while the server is stopped by a signal), what it held is lost: its workspaces and runs raise
:class:`SandboxLost`. The next use starts a new server (other threads wait for it): at once, and
after a failed start again after a doubling pause (``RESTART_BACKOFF_S``, then twice that...);
after ``MAX_FAILED_RESTARTS`` failed starts in a row the backend gives up for good, with an
error that says so. A backend's first start is tried again the same way only when a signal
killed the server (the OOM killer, on a machine short of memory for a moment); any other failure
of it would recur, and is raised at once with the server's last words. Each stop is logged once,
and counted (:meth:`LocalBackend.generation`, :attr:`LocalBackend.restarts`).
"""

from __future__ import annotations

import collections
import contextlib
import glob
import itertools
import json
import logging
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any

from agentgym.sandbox._cgroups import Cgroups, GroupHandle
from agentgym.sandbox.backend import Backend, Capture, SandboxProcess
from agentgym.sandbox.limits import Limits
from agentgym.sandbox.result import ExecResult, SandboxError, SandboxLost, SandboxUnavailable

__all__ = ["UID_BASE", "UID_COUNT", "LocalBackend", "leftovers", "runtime_view"]

# Host uids the sandboxes' user namespaces map to: 65536 ids no real account uses.
UID_BASE = 0x60000000
UID_COUNT = 65536
STARTUP_TIMEOUT_S = 30.0
GRACE_S = 5.0  # host-side patience beyond a run's wall-clock limit before declaring the server stuck
CONTROL_TIMEOUT_S = 10.0
# A prepared run not used within PREPARED_MAX_AGE_S is replaced; the server kills one that waits
# PREPARED_WAIT_S (so a run is never handed out as the server stops it).
PREPARED_MAX_AGE_S = 60.0
PREPARED_WAIT_S = 120.0
# A fork server that cannot be started again this many times in a row is given up for good; after
# a failed start, the next waits RESTART_BACKOFF_S, doubling with each further failure (0.5 + 1 +
# 2 + 4 s in all: long enough for a moment of memory pressure to pass).
MAX_FAILED_RESTARTS = 5
RESTART_BACKOFF_S = 0.5
# Pre-imported by the fork server so runs do not pay for them; all stdlib.
WARM_IMPORTS = (
    "abc", "array", "base64", "bisect", "calendar", "cmath", "collections", "copy", "csv", "dataclasses",
    "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "inspect", "io",
    "itertools", "json", "math", "numbers", "operator", "pathlib", "random", "re", "statistics",
    "string", "struct", "textwrap", "traceback", "typing", "unicodedata",
)  # fmt: skip
_STAGING_CANDIDATES = ("/tmp", "/mnt", "/media", "/srv", "/opt")
_log = logging.getLogger(__name__)


_BASE = {"base": sys.base_prefix, "installed_base": sys.base_prefix, "platbase": sys.base_exec_prefix, "installed_platbase": sys.base_exec_prefix}
"""sysconfig's installation variables of the base Python (the same as the defaults outside a virtual environment)."""


def runtime_view(python: str | None = None) -> tuple[list[str], list[str]]:
    """What the sandbox sees of the host: paths bound read-only, and folders inside them masked.

    Exposed: the interpreter binary, its standard library (with ``lib-dynload``), the folders
    holding the shared libraries those link against (as ``ldd`` resolves them) and the loader
    cache. Whole library folders rather than single files keep the view to a dozen mounts, and
    every run copies the view: that is most of what a run's mount namespace costs. Masked: the
    interpreter's ``site-packages``, so installed third-party packages stay invisible.
    """
    python = os.path.realpath(python or sys.executable)
    # The base installation's paths, also in a virtual environment: the real interpreter (the
    # venv's python links to it) runs on the base's library, and the venv's own lib folder holds
    # nothing but its site-packages (binding it would show the venv's path, /home/... say).
    stdlib = os.path.realpath(sysconfig.get_path("stdlib", vars=_BASE))
    platstdlib = os.path.realpath(sysconfig.get_path("platstdlib", vars=_BASE))
    binaries = [python, *sorted(glob.glob(os.path.join(platstdlib, "lib-dynload", "*.so")))]
    expose = {python, stdlib, platstdlib, *(os.path.dirname(os.path.realpath(p)) for p in _shared_libraries(binaries))}
    if os.path.exists("/etc/ld.so.cache"):
        expose.add("/etc/ld.so.cache")
    # The loader finds libraries by the paths ldd printed (e.g. through the /lib link), so the
    # links on those paths must exist in the view too.
    expose |= {p for p in _shared_libraries(binaries) if os.path.realpath(p) != p}
    mask = set()
    # The base's site-packages and, from a virtual environment, the venv's (whichever lie in the view).
    for key, scheme in itertools.product(("purelib", "platlib"), ({}, _BASE)):
        site = os.path.realpath(sysconfig.get_path(key, vars=scheme))
        if any(site.startswith(p + "/") for p in expose) and os.path.isdir(site):
            mask.add(site)
    # Real paths first, shorter first: a bound folder makes everything below it visible, and
    # a linked path then only needs its links.
    return sorted(expose, key=lambda p: (os.path.realpath(p) != p, p.count("/"), p)), sorted(mask)


def leftovers(folders: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")) -> list[str]:
    """Host processes, and entries of ``folders``, owned by the sandboxes' uids.

    While a local backend runs, its fork server is listed; once every backend is closed the
    list must be empty: nothing a sandbox started or wrote may outlive it on the host.
    """
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if UID_BASE <= os.stat(f"/proc/{entry}").st_uid < UID_BASE + UID_COUNT:
                    with open(f"/proc/{entry}/cmdline", "rb") as handle:
                        found.append(f"process {entry}: {handle.read()[:120]!r}")
            except OSError:
                continue  # exited meanwhile
    for folder in folders:
        if os.path.isdir(folder):
            for item in os.scandir(folder):
                try:
                    if UID_BASE <= item.stat(follow_symlinks=False).st_uid < UID_BASE + UID_COUNT:
                        found.append(f"file {item.path}")
                except OSError:
                    continue
    return found


def _shared_libraries(binaries: list[str]) -> set[str]:
    try:
        out = subprocess.run(["ldd", *binaries], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        # No ldd: fall back to the library folders themselves.
        return {p for p in ("/lib", "/lib64", "/usr/lib", "/usr/lib64") if os.path.exists(p)}
    libraries = set()
    for line in out.splitlines():
        line = line.strip()
        target = line.split("=>", 1)[1].strip() if "=>" in line else line
        path = target.split(" (", 1)[0].strip()
        if path.startswith("/") and os.path.exists(path):
            libraries.add(path)
    return libraries


def _staging_dir(expose: list[str]) -> str:
    # The launcher mounts the new root over this folder in its private mount namespace, so it
    # must not hold anything the view exposes; the host never sees the mount.
    for candidate in _STAGING_CANDIDATES:
        if os.path.isdir(candidate) and not os.path.islink(candidate) and not any(p.startswith(candidate + "/") for p in expose):
            return candidate
    raise SandboxUnavailable(f"no folder among {_STAGING_CANDIDATES} can stage the sandbox's root")


class LocalBackend(Backend):
    """Sandboxes from Linux namespaces on this machine (needs Linux and root; see docs/security.md)."""

    name = "local"
    preloaded = frozenset({"agentgym_sandbox__harness"})  # the fork server's _load_sibling("_harness")

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("the local sandbox backend needs Linux namespaces")
        if os.geteuid() != 0:
            raise SandboxUnavailable("the local sandbox backend needs root to map its user namespaces; use backend='docker'")
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._dead: str | None = None  # closed, abandoned or given up: for good
        self._stopped: str | None = None  # why the current fork server stopped; a new one starts on next use
        self._last_stop = ""  # why the last one did, for errors about what it took with it
        self._generation = 0
        self._restarts = 0
        self._failed_restarts = 0  # in a row
        self._workspaces: dict[str, int] = {}  # workspace -> the generation that opened it (atomic operations only)
        self._queued: collections.deque[dict[str, Any]] = collections.deque()  # messages a finalizer could not send
        self._cgroups = Cgroups()
        self._groups: dict[str, GroupHandle] = {}
        # workspace -> (run, limits, started); only atomic dict operations, no lock: a finalizer
        # may close a workspace while this thread holds the control lock.
        self._prepared: dict[str, tuple[LocalProcess, Limits, float]] = {}
        # Prepared runs stopped by close_workspace(wait=False), until a waiting close sees them end.
        self._ending: collections.deque[LocalProcess] = collections.deque()
        self._sock, self._proc = _first_launch()
        self._finalizer = weakref.finalize(self, _shutdown, self._sock, self._proc, self._cgroups, self._groups)

    @property
    def cgroup_version(self) -> str | None:
        """``"v2"`` or ``"v1"`` when each workspace gets a control group (memory, pids, cpu), None when
        only rlimits are active (no usable cgroup controllers, see docs/security.md)."""
        return self._cgroups.version

    # --------------------------------------------------------------------- Backend API

    def open_workspace(self, limits: Limits) -> str:
        for last_try in (False, True):
            workspace = f"w{next(self._ids)}"
            try:
                reply, generation = self._call({"op": "open", "workspace": workspace, "bytes": limits.workspace_bytes, "inodes": limits.workspace_inodes})
                break
            except SandboxLost:
                if last_try or self._dead is not None:
                    raise
                # The server stopped under this call: a new workspace on the next one loses nothing.
        if not reply.get("ok"):
            raise SandboxError(f"could not create a workspace: {reply.get('error')}")
        try:
            group = self._cgroups.create(limits)
        except OSError as exc:
            self.close_workspace(workspace)
            raise SandboxError(f"could not create the workspace's control group: {exc}") from None
        if group is not None:
            self._groups[workspace] = group
        self._workspaces[workspace] = generation
        return workspace

    def close_workspace(self, workspace: str, *, wait: bool = True) -> None:
        # Safe to call from a finalizer: if this thread already holds the lock (garbage
        # collection inside a send), the close is queued and goes out with the next message;
        # a prepared run, killed here, ends when that message is sent.
        prepared = self._prepared.pop(workspace, None)
        if self._workspaces.pop(workspace, None) == self._generation:  # an earlier server took its own with it
            if prepared is not None:
                self._queued.append({"op": "kill", "run": prepared[0].run_id})
            self._queued.append({"op": "close", "workspace": workspace})
        if not wait:
            self._forget_ended()
        if prepared is not None:
            self._ending.append(prepared[0])
        if self._lock.acquire(blocking=False):
            try:
                self._flush_queued()
            finally:
                self._lock.release()
            if wait:
                self._wait_ending()
        group = self._groups.pop(workspace, None)
        if group is not None:
            self._cgroups.release(group)  # reused once the workspace's last run has exited

    def _wait_ending(self) -> None:
        """Wait for the stopped prepared runs to end: gone when a close returns, as a finished run is."""
        while self._ending:
            try:
                run = self._ending.popleft()
            except IndexError:  # another thread took the last one
                return
            if run.generation == self._generation and self._dead is None and self._stopped is None:  # a stopped server cannot end it here
                with contextlib.suppress(SandboxError):
                    run.wait()

    def _forget_ended(self) -> None:
        """Drop the stopped prepared runs that have ended (their descriptors close with them), so
        that closes that never wait (an environment reset after reset) hold no more than a few."""
        for _ in range(len(self._ending)):
            try:
                run = self._ending.popleft()
            except IndexError:  # another thread took the last one
                return
            if run.waiting():  # not ended yet: its kill is on its way
                self._ending.append(run)

    def set_idle_priority(self, workspace: str, idle: bool) -> None:
        group = self._groups.get(workspace)
        if group is not None:
            with contextlib.suppress(OSError):  # a group that refuses keeps its priority
                self._cgroups.set_idle_priority(group, idle)

    def prepare(self, workspace: str, limits: Limits) -> None:
        """Start ``workspace``'s next run now; it waits for its request (see the module docstring)."""
        if workspace in self._prepared:
            return
        entry = (self._fork(workspace, b"", limits, wait_s=PREPARED_WAIT_S), limits, time.monotonic())
        if self._prepared.setdefault(workspace, entry) is not entry:
            entry[0].kill()  # another thread prepared one meanwhile

    def start(self, workspace: str, request: bytes, limits: Limits) -> SandboxProcess:
        prepared = self._prepared.pop(workspace, None)
        if prepared is not None:
            run, prepared_limits, started = prepared
            if prepared_limits == limits and time.monotonic() - started < PREPARED_MAX_AGE_S and run.waiting():
                self._send({"op": "go", "run": run.run_id}, [], generation=run.generation)
                run.go(request, limits)
                return run
            run.kill()
        return self._fork(workspace, request, limits)

    def start_connected(self, workspace: str, request: bytes, limits: Limits, peer: socket.socket) -> SandboxProcess:
        return self._fork(workspace, request, limits, peer=peer)

    def _fork(self, workspace: str, request: bytes, limits: Limits, *, wait_s: float | None = None, peer: socket.socket | None = None) -> LocalProcess:
        run_id = f"r{next(self._ids)}"
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        group = self._groups.get(workspace)
        cgroup_fds = group.procs_fds if group is not None else []
        message = {"op": "run", "run": run_id, "workspace": workspace, "limits": limits.to_dict(), "cgroups": len(cgroup_fds), "peer": peer is not None}
        if wait_s is not None:
            message["wait_s"] = wait_s
        peer_fds = [] if peer is None else [peer.fileno()]
        try:
            generation = self._send(message, [stdin_r, out_w, err_w, status_w, *peer_fds, *cgroup_fds], generation=self._workspaces.get(workspace, -1))
        except BaseException:
            for fd in (stdin_w, out_r, err_r, status_r):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, out_w, err_w, status_w):
                os.close(fd)
        return LocalProcess(self, run_id, generation, stdin_w, out_r, err_r, status_r, limits, request)

    def kill(self, run_id: str, generation: int | None = None) -> None:
        """Ask the server to kill a run's process tree (a run of an earlier ``generation`` died with its server)."""
        if self._dead is None and generation in (None, self._generation):
            with contextlib.suppress(SandboxLost):  # the server stopped meanwhile, and the run with it
                self._send({"op": "kill", "run": run_id}, [], generation=generation)

    def close(self) -> None:
        self._dead = self._dead or "closed"
        self._finalizer()

    def abandon(self) -> None:
        # Close only this process's copies of the descriptors: the parent keeps its fork server.
        self._dead = "abandoned in a forked child"
        self._finalizer.detach()
        self._sock.close()
        if self._proc.stderr is not None:
            self._proc.stderr.close()

    @property
    def alive(self) -> bool:
        """Whether the backend serves: its fork server runs, or stopped and starts again on next use."""
        return self._dead is None

    def generation(self) -> int:
        if self._dead is None and self._stopped is None and not self._serving():
            with self._lock:
                if self._stopped is None and not self._serving():
                    self._stop("it exited")
        return self._generation

    @property
    def restarts(self) -> int:
        return self._restarts

    def unreported(self, generation: int) -> SandboxError:
        """A run of ``generation`` went unreported past its deadline: the error for its caller. When
        its server is stopped (by a signal) or gone, the server is ended (a new one starts on next
        use) and the run is lost with it; a server that is only slow (busy tearing down large runs)
        is left alone, and the run alone fails."""
        with self._lock:
            if generation == self._generation and self._stopped is None and self._dead is None and self._serving() and not _halted(self._proc):
                return SandboxError("the sandbox did not report the end of the run")
        return self.lost(generation, "it did not report the end of a run past its deadline, and is stopped")

    def lost(self, generation: int, why: str) -> SandboxLost:
        """A run of ``generation`` saw its server die (see :meth:`LocalProcess.wait`): the server is
        recorded as stopped, and ended, if it is still the current one; the error for its caller."""
        with self._lock:
            if generation == self._generation and self._stopped is None and self._dead is None:
                self._stop(why)
        return SandboxLost(f"the sandbox's fork server stopped during the run ({self._last_stop})")

    # -------------------------------------------------------------------- control socket

    def _send(self, message: dict[str, Any], fds: list[int], *, generation: int | None = None) -> int:
        """Send ``message`` to the current server, which must be ``generation``'s when given; the generation."""
        with self._lock:
            self._ensure_running()
            if generation is not None and generation != self._generation:
                raise SandboxLost(f"the sandbox's fork server stopped and took this workspace with it ({self._last_stop})")
            self._flush_queued()
            try:
                socket.send_fds(self._sock, [marshal.dumps(message)], fds)
            except OSError as exc:
                raise self._died(f"{exc}") from None
            return self._generation

    def _flush_queued(self) -> None:
        while self._queued and self._dead is None and self._stopped is None:
            try:
                self._sock.send(marshal.dumps(self._queued.popleft()))
            except OSError as exc:
                self._died(f"{exc}")

    def _call(self, message: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Send ``message`` and wait for the reply: (reply, the server's generation)."""
        # Only "open" gets a reply, and the lock keeps one in flight at a time.
        with self._lock:
            self._ensure_running()
            self._flush_queued()
            try:
                self._sock.send(marshal.dumps(message))
                reply = _receive(self._sock, CONTROL_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise self._died(f"{exc}") from None
            if reply is None:
                raise self._died("it closed the control socket")
            return reply, self._generation

    def _serving(self) -> bool:
        """Whether the server is still up (its process runs and its end of the socket is open)."""
        poller = select.poll()
        poller.register(self._sock, select.POLLHUP)
        return self._proc.poll() is None and not any(event & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, event in poller.poll(0))

    def _ensure_running(self) -> None:
        """Raise if the backend is closed or given up; start a new server if the last one stopped.
        The caller holds the lock."""
        if self._dead is not None:
            error = SandboxLost if self._dead.startswith("gave up") else SandboxError
            raise error(f"the local sandbox backend is not running ({self._dead})")
        if self._stopped is None and not self._serving():
            self._stop("it exited")
        if self._stopped is not None:
            self._restart()

    def _died(self, why: str) -> SandboxLost:
        """The server failed a request: it is stopped (and ended); the error for the caller."""
        self._stop(why)
        return SandboxLost(self._stopped or self._last_stop)

    def _stop(self, why: str) -> None:
        """Record that the server stopped and end it for good (it may only be stuck); the caller holds the lock."""
        if self._stopped is not None or self._dead is not None:
            return
        if not self._finalizer.alive:  # shut down at interpreter exit, not stopped
            self._dead = "closed"
            return
        self._stopped = self._last_stop = f"the fork server stopped: {why}{_stderr_tail(self._proc)}"
        self._generation += 1
        _log.warning("agentgym sandbox: %s; a new one starts on next use", self._stopped)
        _stop_server(self._sock, self._proc)
        # What the server held went with it: nothing queued for it or prepared in it is of use.
        self._queued.clear()
        for run, _, _ in self._prepared.values():
            run.abandon()
        self._prepared.clear()
        while self._ending:
            with contextlib.suppress(IndexError):  # another thread took the last one
                self._ending.popleft().abandon()

    def _restart(self) -> None:
        """Start a new fork server in place of the stopped one (bounded, see the module docstring).
        The caller holds the lock: other threads wait for the new server rather than fail."""
        while True:
            pause = RESTART_BACKOFF_S * 2 ** (self._failed_restarts - 1) if self._failed_restarts else 0.0
            time.sleep(pause)
            self._finalizer.detach()
            try:
                self._sock, self._proc = _launch()
                break
            except SandboxUnavailable as exc:
                self._failed_restarts += 1
                if self._failed_restarts >= MAX_FAILED_RESTARTS:
                    self._dead = f"gave up after {self._failed_restarts} failed starts of its fork server in a row, the last: {exc}"
                    _log.error("agentgym sandbox: %s", self._dead)
                    raise SandboxLost(f"the local sandbox backend is not running ({self._dead})") from None
                _log.warning("agentgym sandbox: a new fork server could not start (%s); trying again", exc)
            finally:
                self._finalizer = weakref.finalize(self, _shutdown, self._sock, self._proc, self._cgroups, self._groups)
        self._stopped, self._failed_restarts = None, 0
        self._restarts += 1
        _log.warning("agentgym sandbox: started a new fork server (restart %d)", self._restarts)


def _launch() -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start the fork server and answer its handshake (uid/gid maps); raise if it cannot start."""
    python = os.path.realpath(sys.executable)
    expose, mask = runtime_view(python)
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    config = {"control_fd": child.fileno(), "expose": expose, "mask": mask, "staging_dir": _staging_dir(expose), "warm_imports": list(WARM_IMPORTS)}
    script = resources.files("agentgym.sandbox") / "_zygote.py"
    env = {"PYTHONHASHSEED": "0", "LANG": "C.UTF-8", "PATH": os.path.dirname(python)}
    proc = subprocess.Popen(
        [python, "-S", "-s", "-P", "-B", "-X", "utf8", str(script), json.dumps(config)],
        pass_fds=(child.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd="/",
        start_new_session=True,  # terminal signals go to the host, which decides
    )
    child.close()
    try:
        _expect(parent, "userns")
        for kind in ("uid", "gid"):
            with open(f"/proc/{proc.pid}/{kind}_map", "w") as handle:
                handle.write(f"0 {UID_BASE} {UID_COUNT}\n")
        # Written by the host's root (CAP_SYS_RESOURCE), the score is also the floor that the
        # server and every run inherit: sandboxed code cannot make itself harder to OOM-kill.
        with open(f"/proc/{proc.pid}/oom_score_adj", "w") as handle:
            handle.write("1000")
        parent.send(marshal.dumps({"op": "go"}))
        _expect(parent, "ready")
    except (OSError, TimeoutError, ValueError, EOFError) as exc:
        parent.close()
        ended_itself = _reap(proc)
        why = f"the local sandbox could not start ({exc or type(exc).__name__}){_stderr_tail(proc)}"
        if proc.stderr is not None:
            proc.stderr.close()
        # A launcher killed itself has a negative status; one whose server was, 128 + the signal.
        # One that had to be killed here (it hung) is not a passing kill.
        killed = ended_itself and (proc.returncode < 0 or proc.returncode > 128)
        raise (_KilledWhileStarting if killed else SandboxUnavailable)(why) from None
    return parent, proc


class _KilledWhileStarting(SandboxUnavailable):
    """The fork server was killed by a signal while it started: most often the OOM killer, whose
    first pick it is, on a machine short of memory for a moment."""


def _first_launch() -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start a backend's first fork server. A start killed by a signal is tried again, paced and
    bounded as restarts are; any other failure is final at once, as it would recur (no user
    namespaces, a broken runtime view), and its message carries the server's last words."""
    failures = 0
    while True:
        try:
            return _launch()
        except _KilledWhileStarting as exc:
            failures += 1
            if failures >= MAX_FAILED_RESTARTS:
                raise SandboxUnavailable(f"{exc}, {failures} times in a row") from None
            _log.warning("agentgym sandbox: %s; trying again", exc)
            time.sleep(RESTART_BACKOFF_S * 2 ** (failures - 1))


def _expect(sock: socket.socket, event: str) -> None:
    """Read the starting fork server's next handshake message, which must be ``event``."""
    reply = _receive(sock, STARTUP_TIMEOUT_S)
    if reply != {"event": event}:
        raise OSError("the fork server ended before it was ready" if reply is None else f"unexpected handshake {reply!r}")


def _receive(sock: socket.socket, timeout: float) -> dict[str, Any] | None:
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if not poller.poll(timeout * 1000):
        raise TimeoutError(f"no answer from the fork server within {timeout:g} s")
    data = sock.recv(1 << 16)
    return marshal.loads(data) if data else None  # the fork server's protocol (see _zygote.send)


def _stderr_tail(proc: subprocess.Popen[bytes]) -> str:
    if proc.stderr is None or proc.poll() is None:
        return ""
    try:
        text = proc.stderr.read().decode(errors="replace").strip()
    except (OSError, ValueError):
        return ""
    return f": {text[-2000:]}" if text else ""


def _halted(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the fork server under launcher ``proc`` (or the launcher itself) is stopped by a signal."""
    pids = [str(proc.pid)]
    with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/task/{proc.pid}/children", encoding="ascii") as handle:
        pids += handle.read().split()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return True
    return False


def _stop_server(sock: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    """End a fork server that stopped serving, at once, even one that is only stuck: killing the
    server kills every sandbox in its pid namespace, and its launcher reaps it and exits (a
    launcher that cannot is killed too, which kills the server by its parent-death signal)."""
    sock.close()
    with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/task/{proc.pid}/children", encoding="ascii") as handle:
        for pid in handle.read().split():
            os.kill(int(pid), signal.SIGKILL)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def _reap(proc: subprocess.Popen[bytes]) -> bool:
    """Wait for a launcher whose control socket is closed to exit (its server exits on that), and
    kill one that does not; whether it ended without that kill."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False
    return True


def _shutdown(sock: socket.socket, proc: subprocess.Popen[bytes], cgroups: Cgroups | None = None, groups: dict[str, GroupHandle] | None = None) -> None:
    # Closing the socket makes the server exit, which kills every sandbox in its pid namespace.
    sock.close()
    _reap(proc)
    if proc.stderr is not None:
        proc.stderr.close()
    if cgroups is not None:
        for group in (groups or {}).values():
            cgroups.release(group)
        cgroups.close()


class LocalProcess(SandboxProcess):
    """Host end of one run: non-blocking pipes multiplexed with ``poll``."""

    def __init__(
        self, backend: LocalBackend, run_id: str, generation: int, stdin_w: int, out_r: int, err_r: int, status_r: int, limits: Limits, request: bytes
    ):
        self._backend = backend
        self.run_id = run_id
        self.generation = generation  # of the fork server that started it
        self._stdin: int | None = stdin_w
        self._pending = bytearray(request)
        self._closing_stdin = False
        self._out = Capture(limits.max_output_bytes)
        self._err = Capture(limits.max_output_bytes)
        self._out_fd = out_r
        self._status_fd = status_r
        self._status = bytearray()
        self._open: dict[int, Capture | None] = {out_r: self._out, err_r: self._err, status_r: None}
        self._deadline = time.monotonic() + limits.wall_time_s + GRACE_S
        self._killed = False
        for fd in (stdin_w, out_r, err_r, status_r):
            os.set_blocking(fd, False)

    def waiting(self) -> bool:
        """Whether a prepared run is still alive and waiting for its request."""
        if self._status_fd not in self._open:
            return False
        poller = select.poll()  # not select(): descriptors past 1024 are common with many sandboxes
        poller.register(self._status_fd, select.POLLIN)
        return not poller.poll(0)

    def go(self, request: bytes, limits: Limits) -> None:
        """Hand a prepared run its request; its wall-time limit starts now."""
        self._pending += request
        self._deadline = time.monotonic() + limits.wall_time_s + GRACE_S

    def send(self, data: bytes, timeout: float) -> None:
        if self._stdin is None:
            return
        self._pending += data
        if not self._pump(lambda: not self._pending or self._stdin is None, time.monotonic() + timeout):
            raise TimeoutError("the sandboxed program is not reading its input")

    def readline(self, timeout: float) -> bytes:
        def ready() -> bool:
            return b"\n" in self._out.data or self._out.full() or self._out_fd not in self._open

        if not self._pump(ready, time.monotonic() + timeout):
            raise TimeoutError(f"no line of output within {timeout:g} s")
        return self._out.take_line()

    def wait(self) -> ExecResult:
        self._closing_stdin = True
        if not self._pump(lambda: not self._open, self._deadline):
            self.kill()
            if not self._pump(lambda: not self._open, time.monotonic() + GRACE_S):
                self._close_all()
                # The server kills a run at its deadline and reports it: one that did not is slow or stuck.
                raise self._backend.unreported(self.generation)
        try:
            status = marshal.loads(self._status) if self._status else {}
        except (ValueError, EOFError, TypeError):  # cut short: the fork server died while writing it
            status = {}
        if "error" in status:
            raise SandboxError(status["error"])
        if "returncode" not in status:
            # The server writes a status for every run it ends, so its status pipe closed empty
            # only because the server died. Its control socket closes in the same exit, but may
            # not look closed yet: waiting for that would let another thread's grading count the
            # same death as the submission's failure.
            raise self._backend.lost(self.generation, "it ended a run without writing its status")
        return ExecResult(
            stdout=self._out.text(),
            stderr=self._err.text(),
            returncode=int(status["returncode"]),
            timed_out=bool(status.get("timed_out")),
            stdout_truncated=self._out.truncated,
            stderr_truncated=self._err.truncated,
        )

    def kill(self) -> None:
        if not self._killed and self._status_fd in self._open:
            self._killed = True
            try:
                self._backend.kill(self.run_id, self.generation)
            except SandboxError:
                pass  # a dead server has already killed everything it ran

    def pipes(self) -> tuple[int, int]:
        if self._stdin is None or self._out_fd not in self._open:
            raise SandboxError("the run has ended")
        if not self._pump(lambda: not self._pending or self._stdin is None, self._deadline):
            raise SandboxError("the sandboxed program did not read its request")
        return self._stdin, self._out_fd

    def stderr_so_far(self) -> str:
        # The pumps drain every ready pipe at once, so what the program wrote to standard error
        # before a line of output was mostly read with it; this takes all that is left in the pipe.
        for fd in [fd for fd, capture in self._open.items() if capture is self._err]:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            for _ in range(64):  # at most 4 MiB a call: a program that keeps writing cannot hold it here
                if fd not in self._open or not poller.poll(0):
                    break
                self._drain(fd)
        return self._err.text()

    def abandon(self) -> None:
        """Its server stopped (and ended it): release the host's ends without asking anything."""
        self._killed = True
        self._close_all()

    def __del__(self) -> None:
        self._close_all()

    # ------------------------------------------------------------------------ internals

    def _pump(self, done: Callable[[], bool], until: float) -> bool:
        """Move data until ``done()`` or ``until`` (monotonic); False on timeout."""
        while not done():
            poller = select.poll()
            for fd in self._open:
                poller.register(fd, select.POLLIN)
            if self._stdin is not None and (self._pending or self._closing_stdin):
                poller.register(self._stdin, select.POLLOUT)
            elif not self._open:
                return done()
            left = until - time.monotonic()
            if left <= 0:
                return False
            for fd, _ in poller.poll(left * 1000):
                if fd == self._stdin:
                    self._feed()
                elif fd in self._open:
                    self._drain(fd)
        return True

    def _feed(self) -> None:
        assert self._stdin is not None
        try:
            while self._pending:
                written = os.write(self._stdin, self._pending[: 1 << 16])
                del self._pending[:written]
        except BlockingIOError:
            return
        except OSError:  # the program is gone or closed its input: what is left is dropped
            self._pending.clear()
            self._closing_stdin = True
        if not self._pending and self._closing_stdin:
            os.close(self._stdin)
            self._stdin = None

    def _drain(self, fd: int) -> None:
        capture = self._open[fd]
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            del self._open[fd]
            os.close(fd)
            if fd == self._status_fd and self._stdin is not None:
                os.close(self._stdin)  # the run is over; nobody reads its input any more
                self._stdin = None
                self._pending.clear()
            return
        if capture is None:
            self._status += chunk
        else:
            capture.add(chunk)

    def _close_all(self) -> None:
        for fd in list(self._open):
            os.close(fd)
        self._open.clear()
        if self._stdin is not None:
            os.close(self._stdin)
            self._stdin = None
