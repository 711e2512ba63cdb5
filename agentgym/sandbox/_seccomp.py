"""A seccomp filter for sandboxed runs: the system calls that namespaces and rlimits do not contain.

Namespaces isolate the network, mounts, processes and IPC, but some kernel interfaces are not
namespaced at all, or are large attack surface that sandboxed Python never needs. The filter
(a classic BPF program, installed with ``PR_SET_SECCOMP`` after ``PR_SET_NO_NEW_PRIVS``, inherited
by every child) makes these calls fail with ``EPERM``:

- debugging and kernel facilities: ``ptrace``, ``process_vm_readv/writev``, ``kexec_*``, module
  loading, ``bpf``, ``perf_event_open``, ``userfaultfd``, the ``io_uring_*`` calls, the key
  ring (``keyctl``, ``add_key``, ``request_key``), ``personality``, ``acct``, ``swapon/off``,
  ``reboot``, clock and time setting;
- namespace and mount changes (``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``,
  ``chroot``, the new mount API), and ``clone`` with any namespace flag;
- ``clone3`` fails with ``ENOSYS`` (its flags live in memory a filter cannot read), so C
  libraries fall back to ``clone``, whose flags it can;
- file locks (``flock`` and ``fcntl`` record locks), file watches (``inotify``, ``fanotify``,
  and ``fcntl``'s ``F_NOTIFY``), leases (``fcntl``'s ``F_SETLEASE``) and ``mincore``: covert
  channels between runs through the runtime files they all share;
- ``socket`` and ``socketpair`` for any family but ``AF_UNIX``, ``AF_INET`` and ``AF_INET6``
  (the network namespace isolates those; ``AF_VSOCK``, ``AF_NETLINK``, ``AF_PACKET`` and the
  others reach the host or the hypervisor), with ``EAFNOSUPPORT``.

Calls from another architecture's ABI (x32, or 32-bit calls on a 64-bit kernel) are killed.
Stdlib only: the fork server loads it by path.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

__all__ = ["compile_filter", "install", "supported"]

# Audit architecture of the native 64-bit ABI, and its system call numbers.
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000  # x86_64 only: x32 ABI calls carry this bit
_SYSCALLS = {
    "x86_64": {
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "personality": 135,
        "acct": 163,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "adjtimex": 159,
        "unshare": 272,
        "setns": 308,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "lookup_dcookie": 212,
        "quotactl": 179,
        "nfsservctl": 180,
        "iopl": 172,
        "ioperm": 173,
        "vhangup": 153,
        "syslog": 103,
        "clone": 56,
        "clone3": 435,
        "socket": 41,
        "socketpair": 53,
        "flock": 73,
        "inotify_init": 253,
        "inotify_init1": 294,
        "inotify_add_watch": 254,
        "fanotify_init": 300,
        "fanotify_mark": 301,
        "mincore": 27,
        "fcntl": 72,
    },
    "aarch64": {
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "personality": 92,
        "acct": 89,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "adjtimex": 171,
        "unshare": 97,
        "setns": 268,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "name_to_handle_at": 264,
        "open_by_handle_at": 265,
        "lookup_dcookie": 18,
        "quotactl": 60,
        "nfsservctl": 42,
        "vhangup": 58,
        "syslog": 116,
        "clone": 220,
        "clone3": 435,
        "socket": 198,
        "socketpair": 199,
        "flock": 32,
        "inotify_init1": 26,
        "inotify_add_watch": 27,
        "fanotify_init": 262,
        "fanotify_mark": 263,
        "mincore": 232,
        "fcntl": 25,
    },
}
_DENIED = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "personality",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "name_to_handle_at",
    "open_by_handle_at",
    "lookup_dcookie",
    "quotactl",
    "nfsservctl",
    "iopl",
    "ioperm",
    "vhangup",
    "syslog",
    "flock",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "fanotify_init",
    "fanotify_mark",
    "mincore",
]
# fcntl commands refused: record locks (F_GETLK, F_SETLK, F_SETLKW and their open-file-description
# forms), because a read lock on a runtime file is visible to every other run (the lock type lives
# in memory the filter cannot read, so all of them get EPERM, which SQLite reports at once, not as
# "busy"); F_SETLEASE, whose lease breaks when another process opens the file; and F_NOTIFY
# (dnotify), which signals a run when any process reads or changes a file in a watched folder.
_FCNTL_DENIED = (5, 6, 7, 36, 37, 38, 1024, 1026)
_SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
_CLONE_NAMESPACES = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x02000000  # NEWNS..NEWNET, NEWCGROUP

# Classic BPF opcodes and seccomp constants.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_NR, _ARCH_OFFSET, _ARG0_LOW, _ARG1_LOW = 0, 4, 16, 24  # offsets in struct seccomp_data
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return platform.machine() in _ARCH


def _program(machine: str) -> list[tuple[int, int, int, int]]:
    numbers = _SYSCALLS[machine]
    errno_eperm = _RET_ERRNO | errno.EPERM
    prog: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        (_JEQ_K, 1, 0, _ARCH[machine]),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":
        prog += [(_JGE_K, 0, 1, _X32_SYSCALL_BIT), (_RET_K, 0, 0, _RET_KILL_PROCESS)]
    for name in _DENIED:
        if name in numbers:
            prog += [(_JEQ_K, 0, 1, numbers[name]), (_RET_K, 0, 0, errno_eperm)]
    prog += [(_JEQ_K, 0, 1, numbers["clone3"]), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    # clone: refuse any namespace flag (the flags are the first argument on both architectures).
    prog += [
        (_JEQ_K, 0, 4, numbers["clone"]),
        (_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_JSET_K, 0, 1, _CLONE_NAMESPACES),
        (_RET_K, 0, 0, errno_eperm),
        (_RET_K, 0, 0, _RET_ALLOW),
    ]
    # socket and socketpair: only the families the network namespace isolates.
    for name in ("socket", "socketpair"):
        checks = [(_JEQ_K, len(_SOCKET_FAMILIES) - i, 0, family) for i, family in enumerate(_SOCKET_FAMILIES)]
        prog += [
            (_JEQ_K, 0, len(checks) + 3, numbers[name]),
            (_LD_W_ABS, 0, 0, _ARG0_LOW),
            *checks,
            (_RET_K, 0, 0, _RET_ERRNO | errno.EAFNOSUPPORT),
            (_RET_K, 0, 0, _RET_ALLOW),
            (_LD_W_ABS, 0, 0, _NR),  # not this call: reload the number for the next check
        ]
    checks = [(_JEQ_K, len(_FCNTL_DENIED) - i, 0, command) for i, command in enumerate(_FCNTL_DENIED)]
    prog += [(_JEQ_K, 0, len(checks) + 3, numbers["fcntl"]), (_LD_W_ABS, 0, 0, _ARG1_LOW), *checks, (_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, errno_eperm)]
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    return prog


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_compiled: tuple[_Fprog, ctypes.Array[ctypes.c_char], ctypes.CDLL] | None = None


def compile_filter() -> None:
    """Build the filter once (the fork server does this before it forks any run, so runs only install it)."""
    global _compiled
    machine = platform.machine()
    if machine not in _ARCH:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine}")
    prog = _program(machine)
    filters = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *instruction) for instruction in prog))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    _compiled = (_Fprog(len(prog), ctypes.addressof(filters)), filters, libc)


def install() -> None:
    """Install the filter on the calling thread (needs ``PR_SET_NO_NEW_PRIVS`` set first)."""
    if _compiled is None:
        compile_filter()
    assert _compiled is not None
    fprog, _, libc = _compiled
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"seccomp filter: {__import__('os').strerror(code)}")
