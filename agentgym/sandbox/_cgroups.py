"""Control groups for the local backend: one per workspace, capping what an episode uses in total.

Resource limits (rlimits) bound each process of a run; a control group bounds everything an
episode's runs do together: resident memory (with its tmpfs files), processes and CPU time. The
host (root) creates the group when a workspace opens and removes it when the workspace closes;
each run joins it first thing, through a descriptor of the group's ``cgroup.procs`` that the host
opened and passed with the run's pipes, so the fork server itself never sees ``/sys/fs/cgroup``.

cgroup v2 is used when the unified hierarchy offers the ``memory``, ``pids`` and ``cpu``
controllers to the host process's group; otherwise cgroup v1, when those controllers are
mounted as v1 hierarchies; otherwise none (rlimits only). :attr:`Cgroups.version` says which.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from agentgym.sandbox.limits import Limits

__all__ = ["Cgroups", "GroupHandle"]

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
SHM_BYTES = 16 << 20  # the run's /dev/shm (see _zygote._private_namespaces)


@dataclass
class GroupHandle:
    """The control group(s) of one workspace: folders to remove and ``cgroup.procs`` descriptors."""

    folders: list[str]
    procs_fds: list[int]


class Cgroups:
    """Creates and removes per-workspace control groups under the host process's own group."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"agentgym-{os.getpid()}"
        self.version, self._bases = _detect()
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

    def create(self, workspace: str, limits: Limits) -> GroupHandle | None:
        """A fresh group for ``workspace`` with ``limits``' totals; None when cgroups are inactive or refuse."""
        if not self.active:
            return None
        self.sweep()
        folders: list[str] = []
        fds: list[int] = []
        try:
            for controller, base in self._bases.items():
                folder = os.path.join(base, f"{self.prefix}-{workspace}")
                os.mkdir(folder, 0o700)
                folders.append(folder)
                for name, value in _settings(self.version, controller, limits):
                    _write(os.path.join(folder, name), value)
                fds.append(os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            self.remove(GroupHandle(folders, fds))
            raise
        return GroupHandle(folders, fds)

    def remove(self, handle: GroupHandle) -> None:
        """Close the descriptors and remove the folders (later, if processes are still leaving)."""
        for fd in handle.procs_fds:
            os.close(fd)
        handle.procs_fds.clear()
        self._stale.extend(handle.folders)
        handle.folders.clear()
        self.sweep()

    def sweep(self) -> None:
        """Remove the folders of closed workspaces whose last process has exited."""
        left = []
        for folder in self._stale:
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(folder)  # busy: its last processes are still being reaped
        self._stale = left

    def drain(self, timeout: float = 2.0) -> None:
        """Sweep until every closed workspace's group is gone (after the fork server has exited)."""
        deadline = time.monotonic() + timeout
        self.sweep()
        while self._stale and time.monotonic() < deadline:
            time.sleep(0.01)
            self.sweep()


def _alive(pid: str) -> bool:
    return not pid.isdigit() or os.path.exists(f"/proc/{pid}")


def _settings(version: str | None, controller: str, limits: Limits) -> list[tuple[str, str]]:
    memory = str(limits.episode_memory_bytes)
    quota = str(max(1000, int(limits.cpus * CPU_PERIOD_US)))
    if version == "v2":
        return {
            "memory": [("memory.max", memory), ("memory.swap.max", "0")],
            "pids": [("pids.max", str(limits.max_processes))],
            "cpu": [("cpu.max", f"{quota} {CPU_PERIOD_US}")],
        }[controller]
    return {
        "memory": [("memory.limit_in_bytes", memory)],
        "pids": [("pids.max", str(limits.max_processes))],
        "cpu": [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", quota)],
    }[controller]


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
