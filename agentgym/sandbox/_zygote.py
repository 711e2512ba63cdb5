"""Fork server of the local backend: a warm, clean interpreter that forks one sandbox per run.

Started by :mod:`agentgym.sandbox.local` as
``python -S -s -P -B -X utf8 _zygote.py CONFIG_JSON`` with its control socket on ``config["control_fd"]``.
It is a separate, freshly executed interpreter on purpose: forked sandboxes inherit its memory,
which therefore never holds anything the host knows (hidden tests, other episodes' code). Only
run requests (limits, ids) cross the control socket; code, files and input go straight from the
host to the sandbox over pipes the fork server never reads.

Process tree (host pids on the left)::

    launcher (host root) builds the mount view, enters a user namespace, forks:
      server (pid 1 of its own pid namespace; root of that user namespace only), forks per run:
        run  (pid 1 of a new pid namespace; new mount and cgroup namespaces; its episode's
              network, IPC and UTS namespaces, made when the workspace opened; then uid 1000 in a
              user namespace of its own, no capabilities, rlimits) runs the request in-process

A run is pid 1 of its pid namespace, so when it exits or is killed the kernel kills everything
it started. When the host closes the control socket the server exits, which tears down every
sandbox at once.

Stdlib only: it runs before and after the host's filesystem disappears from its view.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import importlib.util
import json
import marshal
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

SANDBOX_UID = 1000  # the uid code runs as, inside its own user namespace
WORKSPACES = "/.ws"  # where the server mounts episode workspaces (hidden from runs)
DEVICES = ("null", "zero", "full", "random", "urandom")
MAX_MESSAGE = 1 << 16


def _load_sibling(name: str) -> ModuleType:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"agentgym_sandbox_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:  # the same files, which run time loads by path (below) rather than from the package
    from agentgym.sandbox import _bootstrap as bootstrap
    from agentgym.sandbox import _linux as linux
    from agentgym.sandbox import _seccomp as seccomp
else:
    linux = _load_sibling("_linux")
    bootstrap = _load_sibling("_bootstrap")
    seccomp = _load_sibling("_seccomp")
# The grading programs, compiled once here rather than in every grading run (see grading._program).
_load_sibling("_harness")

# Namespaces one episode's runs share (made when its workspace opens): they hold nothing a run
# could not already pass to another run of the same episode through the shared workspace, and
# a network namespace costs more to make and destroy than the rest of a run's isolation.
EPISODE_NAMESPACES = {"net": linux.CLONE_NEWNET, "ipc": linux.CLONE_NEWIPC, "uts": linux.CLONE_NEWUTS}
# They are never reused by a later episode, although that would be cheaper: a network namespace
# keeps state any run can change and read (its packet counters in /proc/net/snmp, for one), which
# would carry data from one episode (a graded submission and its hidden test inputs) to the next.


# Control messages and run statuses travel as marshal data, not JSON: json's Python-level code
# cost the server about 40 of its 180 copy-on-write page faults per run (the run it has just
# forked still shares every page that code touches) and a tenth of its CPU per run. marshal is
# no format for untrusted data, and it needs none: both ends are the same interpreter (local.py
# starts this file with its own executable), and no sandboxed process can reach the control
# socket or a status pipe (a run closes every other inherited descriptor before its code runs).
def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(marshal.dumps(message))


def receive(sock: socket.socket) -> dict[str, Any] | None:
    data = sock.recv(MAX_MESSAGE)
    return marshal.loads(data) if data else None


# ---------------------------------------------------------------------------------- launcher


def main() -> NoReturn:
    config = json.loads(sys.argv[1])
    control = socket.socket(fileno=config["control_fd"])
    for name in config["warm_imports"]:
        importlib.import_module(name)
    _add_exit_builtins()
    # Everything imported so far is shared by every run; frozen objects are never visited by
    # the collector, so runs do not copy those pages just to scan them.
    gc.collect()
    gc.freeze()
    _build_view(config)
    linux.unshare(linux.CLONE_NEWUSER)
    send(control, {"event": "userns"})  # the host writes our uid/gid maps, then says go
    if receive(control) != {"op": "go"}:
        os._exit(1)
    os.setresgid(0, 0, 0)
    os.setgroups([])
    os.setresuid(0, 0, 0)
    # The uid change made us non-dumpable, which hands /proc/<pid> of the server and of every
    # run to the host's root: a run could not even write its own /proc/self/oom_score_adj.
    linux.prctl(linux.PR_SET_DUMPABLE, 1)
    # A mount namespace owned by the new user namespace (the view's mounts stay locked
    # read-only in it) lets the server and each run mount their own proc, tmp and workspace.
    linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWPID)
    pid = os.fork()
    if pid == 0:
        try:
            Server(control, config).serve()
        except BaseException:  # noqa: BLE001 - the host reads this from our stderr
            traceback.print_exc()
        os._exit(1)
    control.close()
    _, status = os.waitpid(pid, 0)
    # 128 + the signal for a server killed by one, as shells report it: the host tells a kill from a failure.
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status))


def _add_exit_builtins() -> None:
    # Started with -S for speed; restore the exit()/quit() builtins `python -c` code expects.
    import site

    site.setquit()
    site.setcopyright()
    site.sethelper()


def _build_view(config: dict[str, Any]) -> None:
    """Enter a private mount namespace whose root holds only the Python runtime."""
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    root = config["staging_dir"]
    linux.mount("agentgym-sandbox", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=4m,mode=0755")
    bound: list[str] = []
    for path in config["expose"]:
        _expose(root, path, bound)
    for path in config["mask"]:
        if os.path.isdir(root + path):
            linux.mount("agentgym-mask", root + path, "tmpfs", linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV, "size=4k,mode=0755")
    os.makedirs(root + "/dev/shm")
    for device in DEVICES:
        _bind(f"/dev/{device}", f"{root}/dev/{device}", readonly=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for folder in ("proc", "tmp", "workspace", WORKSPACES.lstrip("/"), "old"):
        os.makedirs(f"{root}/{folder}", exist_ok=True)
    # The kernel lets a user namespace mount procfs only where one is already fully visible;
    # the server and every run mount their own pid namespace's procfs over this one.
    linux.mount("proc", f"{root}/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
    os.chdir(root)
    linux.pivot_root(".", "old")
    os.chdir("/")
    linux.umount("/old", linux.MNT_DETACH)
    os.rmdir("/old")
    linux.mount(None, "/", None, linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV)


def _expose(root: str, path: str, bound: list[str]) -> None:
    """Make ``path`` resolve inside ``root`` as on the host: links copied, the target bound read-only."""
    current = "/"
    parts = [p for p in path.split("/") if p]
    for index, part in enumerate(parts):
        host = os.path.join(current, part)
        if any(host == b or host.startswith(b + "/") for b in bound):
            return  # already visible through a bound ancestor
        if os.path.islink(host):
            link = os.readlink(host)
            if not os.path.lexists(root + host):
                os.symlink(link, root + host)
            resolved = os.path.normpath(os.path.join(current, link))
            _expose(root, os.path.join(resolved, *parts[index + 1 :]), bound)
            return
        if index == len(parts) - 1:
            _bind(host, root + host, readonly=True)
            bound.append(host)
            return
        os.makedirs(root + host, mode=0o755, exist_ok=True)
        current = host


def _bind(source: str, target: str, *, readonly: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "ab"):
            pass
    linux.mount(source, target, None, linux.MS_BIND)
    flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_NOSUID
    linux.mount(None, target, None, flags | (linux.MS_RDONLY | linux.MS_NODEV if readonly else linux.MS_NOEXEC))


# ------------------------------------------------------------------------------------ server


class Run:
    """One sandboxed execution the server is tracking."""

    __slots__ = ("deadline", "killed", "pid", "pidfd", "report_fd", "status_fd", "timed_out", "wall_s", "workspace")

    def __init__(self, pid: int, status_fd: int, report_fd: int, deadline: float, wall_s: float, workspace: str):
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.status_fd = status_fd
        self.report_fd = report_fd
        self.deadline = deadline
        self.wall_s = wall_s
        self.workspace = workspace
        self.timed_out = False
        self.killed = False


class Server:
    """Serves open/close/run/kill requests on the control socket; single-threaded, so fork is safe."""

    def __init__(self, control: socket.socket, config: dict[str, Any]):
        self.control = control
        self.config = config
        self.runs: dict[str, Run] = {}
        self.by_pidfd: dict[int, str] = {}
        self.workspaces: dict[str, dict[str, Any]] = {}

    def serve(self) -> NoReturn:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        # Once here rather than in every run: a forked run that rewrites os.environ touches enough
        # new objects to cost it some sixty copy-on-write page faults.
        bootstrap.set_environment()
        # The runs' standard streams, built once here and never used by the server, so that each
        # run starts with streams nothing has read or written (building three per run cost it
        # some thirty copy-on-write faults). The server's own stay referenced here, so that no
        # run pays for tearing them down either.
        self.run_streams = _run_streams()
        self.own_streams = (sys.stdin, sys.stdout, sys.stderr)
        if seccomp.supported():
            seccomp.compile_filter()  # once, here: every run inherits it and only installs it
        linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
        linux.mount("agentgym-workspaces", WORKSPACES, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=64k,mode=0700")
        self.pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
        # Namespaces of our own user namespace to return to after making an episode's (the host's
        # would refuse us), and none of the host's network for the server either.
        linux.unshare(sum(EPISODE_NAMESPACES.values()))
        self.own_namespaces = {kind: os.open(f"/proc/self/ns/{kind}", os.O_RDONLY) for kind in EPISODE_NAMESPACES}
        self.poller = select.poll()
        self.poller.register(self.control, select.POLLIN)
        send(self.control, {"event": "ready"})
        while True:
            for fd, _ in self.poller.poll(self._poll_timeout()):
                if fd == self.control.fileno():
                    self._on_message()
                else:
                    self._reap(self.by_pidfd[fd])
            self._expire()

    def _poll_timeout(self) -> int | None:
        deadlines = [r.deadline for r in self.runs.values() if not r.timed_out]
        if not deadlines:
            return None
        return max(0, int((min(deadlines) - time.monotonic()) * 1000) + 1)

    def _expire(self) -> None:
        now = time.monotonic()
        for run in self.runs.values():
            if not run.timed_out and now >= run.deadline:
                run.timed_out = True
                os.kill(run.pid, signal.SIGKILL)

    def _on_message(self) -> None:
        data, fds, _flags, _ = socket.recv_fds(self.control, MAX_MESSAGE, 8)
        if not data:
            os._exit(0)  # the host is gone: exiting tears down every sandbox with our pid namespace
        try:
            message = marshal.loads(data)
            op = message["op"]
            handler: Callable[[dict[str, Any], list[int]], None] = getattr(self, f"_op_{op}")
        except (ValueError, EOFError, KeyError, TypeError, AttributeError):
            for fd in fds:
                os.close(fd)
            print(f"agentgym fork server: ignored malformed request {data[:200]!r}", file=sys.stderr, flush=True)
            return
        handler(message, fds)

    # ----------------------------------------------------------------------- workspaces

    def _op_open(self, message: dict[str, Any], fds: list[int]) -> None:
        name = str(message["workspace"])
        path = f"{WORKSPACES}/{name}"
        try:
            if not name.isalnum() or name in self.workspaces:
                raise ValueError(f"bad or duplicate workspace id {name!r}")
            os.mkdir(path, 0o700)
            options = f"size={int(message['bytes'])},nr_inodes={int(message['inodes'])},mode=0755,uid={SANDBOX_UID},gid={SANDBOX_UID}"
            linux.mount("agentgym-workspace", path, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, options)
            namespaces = self._episode_namespaces()
        except (OSError, ValueError) as exc:
            send(self.control, {"ok": False, "error": str(exc)})
            return
        self.workspaces[name] = {"runs": 0, "closing": False, "namespaces": namespaces}
        send(self.control, {"ok": True})

    def _episode_namespaces(self) -> dict[str, int]:
        """New network (no interface up), IPC and UTS namespaces for one episode, held by descriptors."""
        linux.unshare(sum(EPISODE_NAMESPACES.values()))
        try:
            linux.sethostname("sandbox")
            return {kind: os.open(f"/proc/self/ns/{kind}", os.O_RDONLY) for kind in EPISODE_NAMESPACES}
        finally:
            for kind, flag in EPISODE_NAMESPACES.items():
                linux.setns(self.own_namespaces[kind], flag)

    def _op_close(self, message: dict[str, Any], fds: list[int]) -> None:
        name = str(message["workspace"])
        workspace = self.workspaces.get(name)
        if workspace is not None:
            workspace["closing"] = True
            self._drop_if_idle(name)

    def _drop_if_idle(self, name: str) -> None:
        workspace = self.workspaces[name]
        if workspace["closing"] and workspace["runs"] == 0:
            path = f"{WORKSPACES}/{name}"
            linux.umount(path, linux.MNT_DETACH)
            os.rmdir(path)
            for fd in workspace["namespaces"].values():
                os.close(fd)
            del self.workspaces[name]

    # ----------------------------------------------------------------------------- runs

    def _op_kill(self, message: dict[str, Any], fds: list[int]) -> None:
        run = self.runs.get(str(message["run"]))
        if run is not None and not run.killed:
            run.killed = True
            os.kill(run.pid, signal.SIGKILL)

    def _op_go(self, message: dict[str, Any], fds: list[int]) -> None:
        run = self.runs.get(str(message["run"]))
        if run is not None and not run.timed_out:
            run.deadline = time.monotonic() + run.wall_s

    def _op_run(self, message: dict[str, Any], fds: list[int]) -> None:
        peers = 1 if message.get("peer") else 0
        if len(fds) != 4 + peers + int(message.get("cgroups", 0)):
            for fd in fds:
                os.close(fd)
            return
        stdin_fd, stdout_fd, stderr_fd, status_fd, *rest = fds
        peer_fds, cgroup_fds = rest[:peers], rest[peers:]
        run_id = str(message["run"])
        workspace = str(message["workspace"])
        problem = None
        if workspace not in self.workspaces or self.workspaces[workspace]["closing"]:
            problem = f"workspace {workspace!r} is not open"
        elif run_id in self.runs:
            problem = f"duplicate run id {run_id!r}"
        report_r, report_w = os.pipe()
        pid = -1
        if problem is None:
            try:
                linux.unshare(linux.CLONE_NEWPID)
                try:
                    pid = os.fork()
                finally:
                    if pid != 0:
                        linux.setns(self.pidns, linux.CLONE_NEWPID)
            except OSError as exc:
                problem = f"could not start the sandbox: {exc}"
        if pid == 0:
            _sandbox(message, stdin_fd, stdout_fd, stderr_fd, report_w, peer_fds, cgroup_fds, self.workspaces[workspace]["namespaces"], self.run_streams)
        for fd in (stdin_fd, stdout_fd, stderr_fd, report_w, *peer_fds, *cgroup_fds):
            os.close(fd)
        if problem is not None:
            os.close(report_r)
            _write_status(status_fd, {"error": problem})
            return
        # A prepared run waits for its request (its code) for at most "wait_s"; its own wall-time
        # limit starts when the host says "go", as the request is sent.
        wall_s = float(message["limits"]["wall_time_s"])
        run = Run(pid, status_fd, report_r, time.monotonic() + float(message.get("wait_s", wall_s)), wall_s, workspace)
        self.runs[run_id] = run
        self.by_pidfd[run.pidfd] = run_id
        self.poller.register(run.pidfd, select.POLLIN)
        self.workspaces[workspace]["runs"] += 1

    def _reap(self, run_id: str) -> None:
        run = self.runs.pop(run_id)
        del self.by_pidfd[run.pidfd]
        self.poller.unregister(run.pidfd)
        _, status = os.waitpid(run.pid, 0)
        os.close(run.pidfd)
        report = _read_all(run.report_fd)
        os.close(run.report_fd)
        result: dict[str, Any] = {"timed_out": run.timed_out, "killed": run.killed}
        errors = [json.loads(line)["error"] for line in report.splitlines() if line.strip()]
        if errors and not (run.timed_out or run.killed):
            result["error"] = errors[0]
        else:
            result["returncode"] = os.waitstatus_to_exitcode(status)
        _write_status(run.status_fd, result)
        self.workspaces[run.workspace]["runs"] -= 1
        self._drop_if_idle(run.workspace)


def _sandbox(
    message: dict[str, Any],
    stdin_fd: int,
    stdout_fd: int,
    stderr_fd: int,
    report_fd: int,
    peer_fds: list[int],
    cgroup_fds: list[int],
    namespaces: dict[str, int],
    streams: bootstrap.Streams,
) -> NoReturn:
    """One run, as pid 1 of its own pid namespace: isolate, drop every privilege, run the request.

    Being pid 1 means the kernel kills everything the code started when it exits or is killed.
    Setup failures go to the report pipe as JSON; the code never sees that pipe. A peer socket
    (``Sandbox.start(peer=...)``) becomes descriptor 4.
    """
    _join_cgroups(cgroup_fds, report_fd)
    try:
        for kind, fd in namespaces.items():  # the episode's network, IPC and UTS namespaces
            linux.setns(fd, EPISODE_NAMESPACES[kind])
        os.setsid()
        for target, fd in enumerate((stdin_fd, stdout_fd, stderr_fd, report_fd, *peer_fds)):
            os.dup2(fd, target)
        os.closerange(4 + len(peer_fds), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        limits = message["limits"]
        _private_namespaces(limits, str(message["workspace"]))
        # Under memory pressure, sandboxes go first. The host's launcher set the same value as the
        # server's floor, so the code cannot lower it again.
        _write_proc("/proc/self/oom_score_adj", b"1000")
        _set_limits(limits)
        os.setgroups([])
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)  # leaves the server's user-ns root: no capabilities
        # The uid change cleared "dumpable", which would hand /proc/self to the host's root.
        linux.prctl(linux.PR_SET_DUMPABLE, 1)
        _own_user_namespace()
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["max_processes"]),) * 2)
        _drop_capabilities()
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
        bootstrap.settle(environment=False, streams=streams)  # the server set both up for every run (Server.serve)
        if seccomp.supported():
            seccomp.install()  # last: from here on, only what the filter allows (see _seccomp)
        # Everything above is the same for every run, so a prepared run has done it before its
        # request (the code) arrives; reading the request and writing its files run filtered.
        request = bootstrap.read_request(0)
        bootstrap.prepare(request)
    except BaseException as exc:  # noqa: BLE001 - reported to the host as a sandbox error
        try:
            os.write(3, json.dumps({"error": f"sandbox setup failed: {type(exc).__name__}: {exc}"}).encode() + b"\n")
        finally:
            os._exit(bootstrap.SETUP_FAILED)
    os.close(3)
    bootstrap.execute(request["code"])


def _run_streams() -> bootstrap.Streams:
    """Standard streams for the runs, built while fds 0-2 are pipes, as every run's are."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    read_end, write_end = os.pipe()
    try:
        for fd, end in ((0, read_end), (1, write_end), (2, write_end)):
            os.dup2(end, fd)
        return bootstrap.standard_streams()
    finally:
        for fd, copy in enumerate(saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(read_end)
        os.close(write_end)


def _join_cgroups(fds: list[int], report_fd: int) -> None:
    """Join the workspace's control group(s) before anything is allocated or started; a run that
    cannot join its limits does not run. The host opened these ``cgroup.procs`` files as root;
    writing ``0`` moves the writer itself."""
    try:
        for fd in fds:
            os.write(fd, b"0")
    except OSError as exc:
        os.write(report_fd, json.dumps({"error": f"sandbox setup failed: joining the control group: {exc}"}).encode() + b"\n")
        os._exit(bootstrap.SETUP_FAILED)


def _private_namespaces(limits: dict[str, Any], workspace: str) -> None:
    """New mount and cgroup namespaces: own /proc, /tmp, /dev/shm and workspace, no network."""
    # A cgroup namespace too: /proc/self/cgroup then shows the workspace's group as "/", not host paths.
    linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWCGROUP)
    private = linux.MS_NOSUID | linux.MS_NODEV
    linux.mount("proc", "/proc", "proc", private | linux.MS_NOEXEC)
    tmp = f"size={int(limits['workspace_bytes'])},nr_inodes={int(limits['workspace_inodes'])},mode=1777"
    linux.mount("agentgym-tmp", "/tmp", "tmpfs", private, tmp)
    linux.mount("agentgym-shm", "/dev/shm", "tmpfs", private | linux.MS_NOEXEC, "size=16m,nr_inodes=1024,mode=1777")
    linux.mount(f"{WORKSPACES}/{workspace}", "/workspace", None, linux.MS_BIND)
    linux.umount(WORKSPACES, linux.MNT_DETACH)  # other episodes' workspaces disappear


def _own_user_namespace() -> None:
    """Enter a user namespace of this run alone, mapping only our uid and gid to themselves.

    Runs then cannot ptrace or signal one another even though they share a uid, and
    ``RLIMIT_NPROC`` counts this run's processes only (it is set after this call so that the
    parent namespace's share is unlimited). Nested user namespaces are then forbidden, which
    closes the only way unprivileged code could create namespaces of its own.
    """
    linux.unshare(linux.CLONE_NEWUSER)
    for path, text in _OWN_USER_NAMESPACE:
        _write_proc(path, text)


_OWN_USER_NAMESPACE = (
    ("/proc/self/setgroups", b"deny"),
    ("/proc/self/uid_map", f"{SANDBOX_UID} {SANDBOX_UID} 1\n".encode()),
    ("/proc/self/gid_map", f"{SANDBOX_UID} {SANDBOX_UID} 1\n".encode()),
    ("/proc/sys/user/max_user_namespaces", b"0"),
)


def _write_proc(path: str, data: bytes) -> None:
    # One write(2), as these files require, and no file object: a freshly forked run pays a
    # copy-on-write page fault for every page of the server's memory it first writes to, and the
    # io stack writes many (see docs/envs/code_exec.md).
    fd = os.open(path, os.O_WRONLY)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {path}")
    finally:
        os.close(fd)


def _set_limits(limits: dict[str, Any]) -> None:
    cpu = int(limits["cpu_time_s"])
    for which, value in (
        # SIGXCPU first, SIGKILL a second later (pid 1 ignores SIGXCPU unless it handles it).
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, int(limits["memory_bytes"])),
        (resource.RLIMIT_FSIZE, int(limits["max_file_bytes"])),
        (resource.RLIMIT_NOFILE, int(limits["max_open_files"])),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, value if isinstance(value, tuple) else (value, value))


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once by the server, not by every run


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


# capset(2)'s arguments for "no capabilities at all", built once by the server (see _write_proc).
_NO_CAPABILITIES = (ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)())  # _LINUX_CAPABILITY_VERSION_3


def _drop_capabilities() -> None:
    # The uid change keeps capabilities here (our uid was never root of this user namespace),
    # so clear all three sets explicitly.
    if _LIBC.capset(*_NO_CAPABILITIES) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capset: {os.strerror(errno)}")


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _write_status(fd: int, status: dict[str, Any]) -> None:
    try:
        os.write(fd, marshal.dumps(status))
    except OSError:
        pass  # the host stopped listening; nothing else to tell
    os.close(fd)


if __name__ == "__main__":
    main()
