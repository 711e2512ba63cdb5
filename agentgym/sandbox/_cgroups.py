"""Control groups for the local backend: one per workspace, capping what an episode uses in total.

Resource limits (rlimits) bound each process of a run; a control group bounds everything an
episode's runs do together: resident memory (with its tmpfs files), processes and CPU time. The
host (root) gives each workspace a group when it opens and takes it back when it closes;
each run joins it first thing, through a descriptor of the group's ``cgroup.procs`` that the host
opened and passed with the run's pipes, so the fork server itself never sees ``/sys/fs/cgroup``.

cgroup v2 is used when the unified hierarchy offers the ``memory``, ``pids`` and ``cpu``
controllers to the host process's group; otherwise cgroup v1, when those controllers are
mounted as v1 hierarchies; otherwise none (rlimits only). :attr:`Cgroups.version` says which.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass

from agentgym.sandbox.limits import Limits

__all__ = ["Cgroups", "GroupHandle"]

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
SHM_BYTES = 16 << 20  # the run's /dev/shm (see _zygote._private_namespaces)


@dataclass
class GroupHandle:
    """The control group(s) of one workspace: one folder per hierarchy and its ``cgroup.procs`` descriptor."""

    folders: list[str]
    procs_fds: list[int]
    limits: Limits | None = None  # what the folders' settings say now
    idle_priority: bool = False  # cpu.idle is 1 (Cgroups.set_idle_priority)


class Cgroups:
    """Per-workspace control groups under the host process's own group.

    Creating a memory group costs the kernel far more than a run does, so groups whose workspace
    closed are kept (up to ``pool_size``) and handed to the next workspace once their last
    process has exited, with that workspace's limits (written again where they differ). A workspace's files are
    gone by then (its tmpfs is unmounted), so nothing of the previous episode stays charged.
    """

    def __init__(self, prefix: str | None = None, pool_size: int = 64) -> None:
        self.prefix = prefix or f"agentgym-{os.getpid()}-{next(_instances)}"
        self.pool_size = pool_size
        self.version, self._bases = _detect()
        self._names = itertools.count(1)
        # Workspaces open and close from many threads (and from finalizers): one lock for the lists.
        self._lock = threading.Lock()
        self._idle: list[GroupHandle] = []
        # Groups left by a host process that was killed before it could remove them.
        self._stale: list[str] = [
            os.path.join(base, name)
            for base in self._bases.values()
            for name in os.listdir(base)
            if name.startswith("agentgym-") and not _alive(name.split("-")[1])
        ]

    @property
    def active(self) -> bool:
        """Whether workspaces get control groups (False: rlimits only)."""
        return self.version is not None

    def create(self, limits: Limits) -> GroupHandle | None:
        """A group with ``limits``' totals and no process in it; None when cgroups are inactive."""
        if not self.active:
            return None
        with self._lock:
            self._sweep()
            handle = self._take_idle() or self._make()
        try:
            for folder, key in zip(handle.folders, self._bases, strict=True):
                # Only the host writes these files, so a reused group's settings are still the
                # ones written last time.
                if handle.limits != limits:
                    for name, value in _settings(self.version, key, limits):
                        _write(os.path.join(folder, name), value)
                handle.procs_fds.append(os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
            handle.limits = limits
            if handle.idle_priority:  # left so by its last workspace
                self.set_idle_priority(handle, False)
        except OSError:
            with self._lock:
                self._discard(handle)
            raise
        return handle

    def set_idle_priority(self, handle: GroupHandle, idle: bool) -> None:
        """Let the group's processes run only when nothing else wants the CPU (``cpu.idle``,
        Linux 5.15 and later; elsewhere nothing changes), or as usual again. A reused group starts
        as usual."""
        _write(os.path.join(self.cpu_folder(handle), "cpu.idle"), "1" if idle else "0")
        handle.idle_priority = idle

    def cpu_folder(self, handle: GroupHandle) -> str:
        """The folder of ``handle`` with the cpu controller's files (v2: its only one)."""
        return handle.folders[list(self._bases).index("cpu")] if self.version == "v1" else handle.folders[0]

    def release(self, handle: GroupHandle) -> None:
        """The workspace of ``handle`` closed: keep the group for another one, or remove it."""
        for fd in handle.procs_fds:  # an idle group holds no descriptor
            os.close(fd)
        handle.procs_fds.clear()
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(handle)
            else:
                self._discard(handle)

    def close(self, timeout: float = 2.0) -> None:
        """Remove every group (after the fork server has exited), waiting for their last processes."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._idle:
                self._discard(self._idle.pop())
            while self._stale and time.monotonic() < deadline:
                time.sleep(0.01)
                self._sweep()

    def _sweep(self) -> None:
        """Remove the folders of discarded groups whose last process has exited (holding the lock)."""
        left = []
        for folder in self._stale:
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(folder)  # busy: its last processes are still being reaped
        self._stale = left

    def _make(self) -> GroupHandle:
        handle = GroupHandle([], [])
        name = f"{self.prefix}-{next(self._names)}"
        try:
            for base in self._bases.values():
                folder = os.path.join(base, name)
                os.mkdir(folder, 0o700)
                handle.folders.append(folder)
        except OSError:
            self._discard(handle)
            raise
        return handle

    def _take_idle(self) -> GroupHandle | None:
        for index, handle in enumerate(self._idle):
            if _empty(handle.folders[0]):
                return self._idle.pop(index)
        return None

    def _discard(self, handle: GroupHandle) -> None:
        for fd in handle.procs_fds:
            os.close(fd)
        handle.procs_fds.clear()
        self._stale.extend(handle.folders)
        self._sweep()


_instances = itertools.count(1)  # several backends in one process each get their own names


def _empty(folder: str) -> bool:
    """Whether no process is left in the group at ``folder``."""
    try:
        with open(os.path.join(folder, "cgroup.procs"), "rb") as handle:
            return not handle.read(1)
    except OSError:
        return False


def _alive(pid: str) -> bool:
    return not pid.isdigit() or os.path.exists(f"/proc/{pid}")


def _settings(version: str | None, key: str, limits: Limits) -> list[tuple[str, str]]:
    """What to write into the group folder for ``key``: a v1 controller's name, or ``"group"``,
    the one v2 folder that holds every controller's files."""
    memory = str(limits.episode_memory_bytes)
    quota = str(max(1000, int(limits.cpus * CPU_PERIOD_US)))
    if version == "v2":
        return [("memory.max", memory), ("memory.swap.max", "0"), ("pids.max", str(limits.max_processes)), ("cpu.max", f"{quota} {CPU_PERIOD_US}")]
    return {
        "memory": [("memory.limit_in_bytes", memory)],
        "pids": [("pids.max", str(limits.max_processes))],
        "cpu": [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", quota)],
    }[key]


def _write(path: str, value: str) -> None:
    if os.path.exists(path):  # e.g. memory.swap.max exists only where swap accounting is on
        with open(path, "w", encoding="ascii") as handle:
            handle.write(value)


def _detect() -> tuple[str | None, dict[str, str]]:
    """The cgroup version to use and, per controller, the folder new groups go in."""
    if os.geteuid() != 0:
        return None, {}
    mounts = _cgroup_mounts()
    own = _own_groups()
    unified = mounts.get("cgroup2")
    if unified is not None and "" in own:
        base = unified + own[""]
        if _v2_ready(base):
            return "v2", {"group": base}
    bases = {}
    for controller in CONTROLLERS:
        mount = mounts.get(controller)
        if mount is None or controller not in own:
            return None, {}
        base = mount + own[controller]
        if not os.access(base, os.W_OK):
            return None, {}
        bases[controller] = base
    return "v1", bases


def _v2_ready(base: str) -> bool:
    """Whether children of ``base`` get all three controllers (enabling them where allowed)."""
    try:
        with open(os.path.join(base, "cgroup.subtree_control"), encoding="ascii") as handle:
            enabled = set(handle.read().split())
        if set(CONTROLLERS) <= enabled:
            return True
        with open(os.path.join(base, "cgroup.controllers"), encoding="ascii") as handle:
            if not set(CONTROLLERS) <= set(handle.read().split()):
                return False
        # Allowed only where the group holds no process itself (the root group excepted).
        _write(os.path.join(base, "cgroup.subtree_control"), " ".join(f"+{c}" for c in CONTROLLERS))
        return True
    except OSError:
        return False


def _cgroup_mounts() -> dict[str, str]:
    """Mount points: ``"cgroup2"`` for the unified hierarchy, each v1 controller by name."""
    found: dict[str, str] = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            separator = fields.index("-")
            kind, options = fields[separator + 1], fields[separator + 3].split(",")
            mount_point = fields[4]
            if kind == "cgroup2":
                found.setdefault("cgroup2", mount_point)
            elif kind == "cgroup":
                for option in options:
                    if option in CONTROLLERS:
                        found.setdefault(option, mount_point)
    return found


def _own_groups() -> dict[str, str]:
    """This process's group per v1 controller, and under ``""`` in the unified hierarchy."""
    groups: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                groups[controller] = path.rstrip("/")
    return groups
