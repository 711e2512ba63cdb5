"""Linux system calls the local backend needs and Python 3.11 lacks, through ctypes.

``os.unshare`` and ``os.setns`` arrived in Python 3.12; ``mount``, ``umount2``, ``pivot_root``
and ``sethostname`` have no wrapper at all. This module is stdlib-only because the fork server
(``_zygote.py``) loads it by path before the host's filesystem disappears from its view.
"""

from __future__ import annotations

import ctypes
import os
import platform

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

# pivot_root has no libc wrapper; its number depends on the architecture.
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (``unshare(2)``)."""
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    """Join the namespace behind ``fd`` (``setns(2)``)."""
    _check(_libc.setns(fd, nstype), f"setns({nstype:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """``mount(2)``."""
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    """``umount2(2)``."""
    _check(_libc.umount2(_b(target), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """``pivot_root(2)``: make ``new_root`` the root of this mount namespace."""
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: unsupported architecture {platform.machine()}")
    _check(_libc.syscall(number, _b(new_root), _b(put_old)), "pivot_root")


def sethostname(name: str) -> None:
    """``sethostname(2)`` (in the caller's UTS namespace)."""
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), "sethostname")


def prctl(option: int, arg: int = 0) -> None:
    """``prctl(2)`` with one argument."""
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")
