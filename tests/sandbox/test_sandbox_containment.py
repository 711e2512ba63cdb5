"""What sandboxed code cannot do: the attack catalogue's resource and escape attacks, run for real."""

import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import agentgym
from agentgym.sandbox import Limits, Sandbox, _cgroups
from agentgym.sandbox.local import UID_BASE, LocalBackend, runtime_view

SANDBOX_KUID = UID_BASE + 1000  # the host uid of every sandboxed process


def sandbox_user_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == SANDBOX_KUID:
                found.append(int(entry))
        except OSError:
            pass
    return found


def wait_until_no_sandbox_processes(seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while sandbox_user_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    return sandbox_user_processes()


# -------------------------------------------------------------------------------- network


def test_no_network_not_even_the_hosts_loopback(sandbox):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    listener = threading.Thread(target=accept)
    listener.start()
    code = (
        "import socket\n"
        f"targets = [('127.0.0.1', {port}), ('127.0.0.1', 22), ('10.0.0.1', 80), ('1.1.1.1', 53)]\n"
        "for host, port in targets:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=1); print('NET_OK', host)\n"
        "    except OSError as exc:\n"
        "        print('blocked', exc.errno)\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 80); print('NET_OK dns')\n"
        "except OSError:\n"
        "    print('no dns')\n"
    )
    result = sandbox.run(code)
    listener.join()
    server.close()
    assert "NET_OK" not in result.stdout and result.stdout.count("blocked") == 4, result
    assert not accepted


def test_code_cannot_bring_up_a_network(sandbox):
    result = sandbox.run(
        "import socket, fcntl, struct\ns = socket.socket()\ntry:\n    fcntl.ioctl(s, 0x8914, struct.pack('16sH', b'lo', 1)); print('UP')\nexcept OSError as exc:\n    print(exc.errno)"
    )
    assert result.stdout == "1\n"  # EPERM: no CAP_NET_ADMIN


# ----------------------------------------------------------------------------- filesystem


def test_host_files_are_invisible(sandbox, tmp_path):
    secret = tmp_path / "canary.txt"
    secret.write_text("host secret")
    project = os.path.dirname(os.path.dirname(agentgym.__file__))
    code = (
        "import os\n"
        f"for path in [{str(secret)!r}, {project!r}, '/work', '/home', '/etc/passwd', '/etc/shadow', '/root/.bashrc', '/var', '/usr/bin', '/sys']:\n"
        "    print(path, os.path.exists(path))\n"
        "print(sorted(os.listdir('/')))\n"
        "print(sorted(os.listdir('/etc')), sorted(os.listdir('/dev')))\n"
        "print([p for p in os.listdir('/proc') if p.isdigit()])\n"
    )
    lines = sandbox.run(code).stdout.splitlines()
    assert all(line.endswith(" False") for line in lines[:10]), lines
    expose, _ = runtime_view()
    allowed_top = {p.split("/")[1] for p in expose} | {"dev", "proc", "tmp", "workspace", ".ws"}
    assert set(eval(lines[10])) <= allowed_top  # only the runtime's own top-level folders
    assert lines[11] == "['ld.so.cache'] ['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']"
    assert lines[12] == "['1']"  # only the sandbox's own process


def test_from_a_virtual_environment_the_view_is_the_base_installations(tmp_path):
    # A venv's python runs on the base installation's library: the view binds that, never the venv's
    # own folders (their path would show where the project lives), and masks the base's
    # site-packages as it does outside a venv (from a venv they used to stay visible).
    venv = tmp_path / "project" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True, timeout=120)
    script = "import json; from agentgym.sandbox.local import runtime_view; print(json.dumps(runtime_view()))"
    # The venv sees the system's packages (agentgym among them) but not through the tree's own path.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, check=True, timeout=120, env=env)
    expose, mask = json.loads(done.stdout)
    assert not [p for p in expose if p.startswith(str(tmp_path))]
    assert [expose, mask] == [list(part) for part in runtime_view()]


def test_secrets_in_the_hosts_environment_do_not_leak(local_backend, fast, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CANARY_SECRET", "s3cr3t")
    with Sandbox(local_backend, fast) as box:
        result = box.run(
            "import os\nprint(sorted(os.environ))\nprint(open('/proc/self/environ', 'rb').read().count(b'CANARY'))\nprint(open('/proc/1/environ', 'rb').read().count(b'CANARY'))"
        )
    assert result.stdout == "['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', 'USER']\n0\n0\n"


def test_writes_stay_in_the_workspace(sandbox):
    marker = f"agentgym_escape_{os.getpid()}"
    code = (
        "import os, sys\n"
        f"for path in ['/{marker}', '/tmp/{marker}', '/dev/shm/{marker}', os.path.join(os.path.dirname(os.__file__), '{marker}'), sys.executable]:\n"
        "    try:\n"
        "        open(path, 'a').write('x'); print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
    )
    result = sandbox.run(code)
    assert result.stdout.count("refused") == 3 and result.stdout.count("wrote") == 2  # private /tmp and /dev/shm
    assert not any(os.path.exists(p) for p in (f"/{marker}", f"/tmp/{marker}", f"/dev/shm/{marker}"))
    assert sandbox.run(f"import os; print(os.path.exists('/tmp/{marker}'))").stdout == "False\n"  # fresh /tmp per run


def test_no_privileges_left(sandbox):
    status = sandbox.run("print(open('/proc/self/status').read())").stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split() == ["1000"] * 4 and fields["Gid"].split() == ["1000"] * 4
    assert fields["CapEff"] == fields["CapPrm"] == fields["CapInh"] == fields["CapAmb"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"
    escapes = sandbox.run(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for flag in (0x10000000, 0x00020000, 0x40000000, 0x20000000):\n"
        "    print(libc.unshare(flag), ctypes.get_errno())\n"
        "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
        "print(libc.chroot(b'/tmp'), ctypes.get_errno())"
    )
    assert escapes.stdout.split("\n")[:6] == ["-1 1"] * 6  # EPERM: the seccomp filter refuses them before the kernel's other checks


def test_runs_cannot_see_each_other(local_backend, fast):
    with Sandbox(local_backend, fast) as first, Sandbox(local_backend, fast) as second:
        background = first.start("import time; print('started', flush=True); time.sleep(2)")
        assert background.readline(timeout=3) == b"started\n"
        seen = second.run("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
        background.kill()
        background.wait()
    assert seen.stdout == "[1]\n"


# ------------------------------------------------------------------------------ resources


@pytest.mark.parametrize(
    "code",
    [
        "while True: pass",
        "import time; time.sleep(10**6)",
        "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\nwhile True: pass",
    ],
    ids=["infinite_loop", "sleep_forever", "ignore_signals_then_loop"],
)
def test_wall_clock_limit_kills(sandbox, fast, code):
    start = time.monotonic()
    result = sandbox.run(code)
    assert result.timed_out and result.returncode == -9
    assert time.monotonic() - start < fast.wall_time_s + 2


def test_cpu_limit_kills_before_the_wall_clock(local_backend):
    with Sandbox(local_backend, Limits(wall_time_s=60, cpu_time_s=1)) as box:
        result = box.run("while True: pass")
    assert not result.timed_out and result.returncode == -9  # SIGKILL at the hard CPU limit, long before 60 s


def test_memory_is_capped(sandbox, fast):
    result = sandbox.run(
        "import mmap\nmaps = []\ntry:\n    while True: maps.append(mmap.mmap(-1, 32 << 20))\nexcept (OSError, MemoryError) as exc:\n    print(len(maps), type(exc).__name__)"
    )
    count, kind = result.stdout.split()
    assert int(count) * (32 << 20) <= fast.memory_bytes and kind in ("OSError", "MemoryError")
    assert "MemoryError" in sandbox.run("x = bytearray(1 << 30)").stderr


def _cgroups_or_skip(backend):
    if backend.cgroup_version is None:
        pytest.skip("no usable cgroup controllers (memory, pids, cpu) on this machine: rlimits only")


def test_an_episodes_memory_is_capped_as_a_whole(local_backend):
    # Six processes, each well inside its own 128 MiB rlimit, together over the episode's group.
    _cgroups_or_skip(local_backend)
    limits = Limits(wall_time_s=10, memory_bytes=128 << 20, workspace_bytes=1 << 20)
    code = (
        "import os, time\nkids = []\nfor _ in range(6):\n    pid = os.fork()\n    if pid == 0:\n"
        "        block = bytearray(40 << 20)\n        for i in range(0, len(block), 4096): block[i] = 1\n"
        "        time.sleep(1); os._exit(0)\n    kids.append(pid)\n"
        "print(sum(os.waitpid(k, 0)[1] != 0 for k in kids))"
    )
    with Sandbox(local_backend, limits) as box:
        killed = int(box.run(code).stdout)
    assert 6 * (40 << 20) > limits.episode_memory_bytes
    assert killed >= 1


def test_an_episodes_cpu_is_capped_as_a_whole(local_backend):
    _cgroups_or_skip(local_backend)
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores to tell one CPU's quota from the machine's")
    code = (
        "import os, time\nstart = time.monotonic()\nfor _ in range(2):\n    if os.fork() == 0:\n"
        "        end = time.monotonic() + 1.5\n        while time.monotonic() < end: pass\n        os._exit(0)\n"
        "os.wait(); os.wait()\nprint(os.times().children_user / (time.monotonic() - start))"
    )
    with Sandbox(local_backend, Limits(wall_time_s=10, cpus=1.0)) as box:
        cores_used = float(box.run(code).stdout)
    assert cores_used < 1.3


def test_control_groups_are_private_reused_and_removed(local_backend):
    _cgroups_or_skip(local_backend)
    backend = LocalBackend()  # its own, to see its groups go when it closes

    def groups():
        return sorted(f for base in backend._cgroups._bases.values() for f in os.listdir(base) if f.startswith(backend._cgroups.prefix))

    with Sandbox(backend, Limits(wall_time_s=5)) as box:
        seen = box.run("print(open('/proc/self/cgroup').read())").stdout
        first = groups()
    assert first  # one group per hierarchy while the episode is open
    assert all(line.endswith(":/") for line in seen.split()), seen  # no host cgroup path leaks
    with Sandbox(backend, Limits(wall_time_s=5, memory_bytes=512 << 20)) as box:
        box.run("pass")
        assert groups() == first  # the idle group was handed to the next episode, with its limits
    backend.close()
    assert groups() == []


def test_an_idle_priority_workspace_keeps_running_until_its_group_is_reused(local_backend):
    _cgroups_or_skip(local_backend)
    backend = LocalBackend()

    def cpu_idle(box):
        folder = backend._cgroups.cpu_folder(backend._groups[box._workspace])
        if not os.path.exists(f"{folder}/cpu.idle"):
            pytest.skip("this kernel has no cpu.idle (Linux 5.15 and later)")
        with open(f"{folder}/cpu.idle") as handle:
            return handle.read().strip()

    try:
        with Sandbox(backend, Limits(wall_time_s=5)) as box:
            assert cpu_idle(box) == "0"
            box.set_idle_priority(True)
            assert cpu_idle(box) == "1"
            box.set_idle_priority(False)
            assert cpu_idle(box) == "0"
            box.set_idle_priority(True)
            assert box.run("print(sum(range(10**5)))").stdout == "4999950000\n"  # slower, never stopped
        with Sandbox(backend, Limits(wall_time_s=5)) as box:
            assert cpu_idle(box) == "0"  # the reused group is back to normal priority
    finally:
        backend.close()


def test_cgroup_v2_groups_get_every_controllers_limits(tmp_path, monkeypatch):
    # The unified hierarchy has one folder per group holding every controller's files; a kernel
    # makes those files when the folder is made, which this stands in for.
    files = ("cgroup.procs", "memory.max", "memory.swap.max", "pids.max", "cpu.max", "cpu.idle")
    make_folder = os.mkdir

    def mkdir(path, mode=0o777):
        make_folder(path, mode)
        for name in files:
            open(os.path.join(path, name), "w").close()

    monkeypatch.setattr(_cgroups, "_detect", lambda: ("v2", {"group": str(tmp_path)}))
    monkeypatch.setattr(os, "mkdir", mkdir)
    groups = _cgroups.Cgroups()
    limits = Limits(max_processes=9, cpus=0.5)
    handle = groups.create(limits)

    def read(name):
        with open(os.path.join(handle.folders[0], name)) as file:
            return file.read()

    assert [read(name) for name in files[1:]] == [str(limits.episode_memory_bytes), "0", "9", "50000 100000", ""]
    groups.set_idle_priority(handle, True)
    assert read("cpu.idle") == "1"
    groups.release(handle)
    assert groups.create(limits) is handle and read("cpu.idle") == "0"
    for fd in handle.procs_fds:
        os.close(fd)


def test_fork_bomb_hits_the_process_limit_and_leaves_nothing(sandbox):
    code = (
        "import os, time\nn = 0\ntry:\n"
        "    while n < 10000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as exc:\n    print('stopped at', n, exc.errno)\n"
    )
    result = sandbox.run(code)
    assert result.stdout.startswith("stopped at") and result.stdout.split()[-1] == "11"  # EAGAIN
    assert int(result.stdout.split()[2]) < Limits().max_processes
    assert wait_until_no_sandbox_processes() == []


def test_process_limit_is_per_run(local_backend):
    limits = Limits(wall_time_s=5, max_processes=8)
    hold = "import os, time\nkids = []\nfor _ in range(5):\n    pid = os.fork()\n    if pid == 0: time.sleep(3); os._exit(0)\n    kids.append(pid)\nprint('forked', len(kids), flush=True)\ntime.sleep(3)"
    with Sandbox(local_backend, limits) as a, Sandbox(local_backend, limits) as b:
        first, second = a.start(hold), b.start(hold)
        lines = [first.readline(timeout=5), second.readline(timeout=5)]
        first.kill(), second.kill()
        first.wait(), second.wait()
    assert lines == [b"forked 5\n"] * 2  # 12 processes together, but each run has its own 8


def test_daemons_die_with_the_run(sandbox):
    code = (
        "import subprocess, sys\n"
        'subprocess.Popen([sys.executable, \'-c\', \'import time; time.sleep(2); open("/workspace/daemon.txt", "w").write("alive")\'], start_new_session=True)\n'
        "print('spawned')"
    )
    assert sandbox.run(code).stdout == "spawned\n"
    assert wait_until_no_sandbox_processes() == []
    time.sleep(2.5)
    assert sandbox.run("import os; print(os.path.exists('daemon.txt'))").stdout == "False\n"


def test_timeout_kills_the_whole_tree(sandbox):
    code = "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        os.setsid(); time.sleep(60)\ntime.sleep(60)"
    assert sandbox.run(code).timed_out
    assert wait_until_no_sandbox_processes() == []


def test_output_flood_is_cut_and_bounded(sandbox, fast):
    result = sandbox.run("import sys\nwhile True: sys.stdout.write('x' * 65536)")
    assert result.stdout_truncated and len(result.stdout) == fast.max_output_bytes and result.timed_out


def test_file_size_and_open_files_are_capped(local_backend):
    limits = Limits(wall_time_s=10, max_file_bytes=1 << 20, max_open_files=32)
    with Sandbox(local_backend, limits) as box:
        big = box.run("try:\n    open('big', 'wb').write(b'x' * (2 << 20))\nexcept OSError as exc:\n    print(exc.errno)")
        files = box.run(
            "handles = []\ntry:\n    while True: handles.append(open('/dev/null'))\nexcept OSError as exc:\n    print(len(handles) < 32, exc.errno)"
        )
    assert big.stdout == "27\n"  # EFBIG
    assert files.stdout == "True 24\n"  # EMFILE


# ------------------------------------------------------------------------- kernel surface


def _host_has_cap_sys_resource() -> bool:
    with open("/proc/self/status") as status:
        effective = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) >> 24 & 1)


def test_code_cannot_lower_its_oom_score(sandbox):
    if not _host_has_cap_sys_resource():
        pytest.skip("the OOM-score floor needs CAP_SYS_RESOURCE in the launcher, which this machine's root lacks (see docs/security.md)")
    result = sandbox.run(
        "adj = open('/proc/self/oom_score_adj')\nprint(adj.read().strip())\n"
        "try:\n    open('/proc/self/oom_score_adj', 'w').write('0')\n    print('lowered')\nexcept OSError as exc:\n    print(type(exc).__name__)\n"
        "print(open('/proc/self/oom_score_adj').read().strip())"
    )
    assert result.stdout.split() == ["1000", "PermissionError", "1000"]


def test_socket_families_outside_the_network_namespace_are_refused(sandbox):
    result = sandbox.run(
        "import socket\n"
        "for name, family in (('AF_VSOCK', 40), ('AF_NETLINK', 16), ('AF_PACKET', 17), ('AF_ALG', 38), ('AF_BLUETOOTH', 31), ('AF_CAN', 29)):\n"
        "    for kind in (socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):\n"
        "        try:\n            socket.socket(family, kind).close()\n            print(name, 'open')\n"
        "        except OSError as exc:\n            print(name, exc.errno)\n"
        "    try:\n        socket.socketpair(family, socket.SOCK_DGRAM)\n        print(name, 'pair')\n"
        "    except OSError as exc:\n        print(name, exc.errno)\n"
        "for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):\n    socket.socket(family, socket.SOCK_STREAM).close()\n"
        "print('inet ok')"
    )
    lines = result.stdout.splitlines()
    assert lines[-1] == "inet ok"
    assert all(line.split()[1] == "97" for line in lines[:-1]), lines  # EAFNOSUPPORT


def test_kernel_facilities_are_refused(sandbox):
    # x86_64 and aarch64 numbers: ptrace, bpf, perf_event_open, userfaultfd, io_uring_setup, keyctl, kexec_load, init_module
    result = sandbox.run(
        "import ctypes, os, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "calls = {'x86_64': [101, 321, 298, 323, 425, 250, 246, 175], 'aarch64': [117, 280, 241, 282, 425, 219, 104, 105]}[platform.machine()]\n"
        "for number in calls:\n    print(libc.syscall(number, 0, 0, 0, 0, 0), ctypes.get_errno())\n"
        "print(os.fork() if False else 'fork ok')\n"
        "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(1)'], capture_output=True, text=True).stdout.strip())"
    )
    lines = result.stdout.splitlines()
    assert lines[:8] == ["-1 1"] * 8, result  # EPERM
    assert lines[8:] == ["fork ok", "1"]  # processes still start (clone without namespace flags)


def test_covert_channels_through_runtime_files_are_closed(local_backend, fast):
    # The runtime's files are the same inodes for every run: a lock, a watch or a page-cache
    # probe on one would carry bits from one run to another.
    code = (
        "import ctypes, errno, fcntl, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "f = open(os.__file__, 'rb')\n"
        "def attempt(call):\n    try:\n        call()\n        return 'allowed'\n"
        "    except OSError as exc:\n        return errno.errorcode[exc.errno]\n"
        "print(attempt(lambda: fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)))\n"
        "print(attempt(lambda: fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)))\n"
        "print(attempt(lambda: fcntl.fcntl(f, fcntl.F_GETLK, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0))))\n"
        "print(attempt(lambda: fcntl.fcntl(f, 37, bytes(32))))\n"  # F_OFD_SETLK
        "print(libc.inotify_init1(0), errno.errorcode[ctypes.get_errno()])\n"
        "print(libc.mincore(ctypes.c_void_p(0), 4096, ctypes.create_string_buffer(1)), errno.errorcode[ctypes.get_errno()])\n"  # ENOMEM unfiltered
        "print(fcntl.fcntl(f, fcntl.F_GETFD) >= 0)\n"  # other fcntl commands still work
        "import sqlite3\nprint(sqlite3.connect(':memory:').execute('select 1').fetchone())"
    )
    with Sandbox(local_backend, fast) as box:
        result = box.run(code)
    assert result.stdout.splitlines() == ["EPERM"] * 4 + ["-1 EPERM"] * 2 + ["True", "(1,)"], result


def test_folder_watches_and_leases_are_refused(local_backend, fast):
    # The review's reproduction: fcntl(F_NOTIFY) on a runtime folder signalled a run whenever any
    # other run (or the host) read a file there, and concurrent episodes passed 7 of 8 bits that
    # way. A lease (F_SETLEASE) breaks when another process opens the file: the same kind of channel.
    code = (
        "import errno, fcntl, os\n"
        "def attempt(call):\n    try:\n        call()\n        return 'allowed'\n"
        "    except OSError as exc:\n        return errno.errorcode[exc.errno]\n"
        "folder = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\n"
        "print(attempt(lambda: fcntl.fcntl(folder, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)))\n"
        "open('leased', 'w').close()\nowned = os.open('leased', os.O_RDONLY)\n"  # a file of its own: a lease is allowed unfiltered
        "print(attempt(lambda: fcntl.fcntl(owned, fcntl.F_SETLEASE, fcntl.F_RDLCK)))\n"
        "print(fcntl.fcntl(owned, fcntl.F_GETLEASE))\n"  # reading one's own lease state reaches no one
    )
    with Sandbox(local_backend, fast) as box:
        result = box.run(code)
    assert result.stdout.splitlines() == ["EPERM", "EPERM", str(fcntl.F_UNLCK)], result


def test_episodes_cannot_reach_each_other_over_sockets(local_backend, fast):
    # An abstract Unix socket lives in its network namespace: another run of the same episode
    # reaches it, a run of another episode does not.
    listen = (
        "import socket\nserver = socket.socket(socket.AF_UNIX)\nserver.bind('\\0agentgym-probe')\nserver.listen()\n"
        "print('listening', flush=True)\nserver.settimeout(3)\ntry:\n    server.accept()\nexcept OSError:\n    pass"
    )
    probe = (
        "import socket\nclient = socket.socket(socket.AF_UNIX)\ntry:\n    client.connect('\\0agentgym-probe')\n    print('reached')\n"
        "except OSError as exc:\n    print(type(exc).__name__)"
    )
    with Sandbox(local_backend, Limits(wall_time_s=5)) as episode, Sandbox(local_backend, fast) as other:
        listener = episode.start(listen)
        assert listener.readline(timeout=5) == b"listening\n"
        assert other.run(probe).stdout == "ConnectionRefusedError\n"
        assert episode.run(probe).stdout == "reached\n"
        listener.kill()
        listener.wait()


def test_tmp_and_shm_have_inode_limits(sandbox):
    result = sandbox.run(
        "import os\nfor folder in ('/tmp', '/dev/shm'):\n    n = 0\n"
        "    try:\n        while n < 100000:\n            open(f'{folder}/f{n}', 'w').close()\n            n += 1\n"
        "    except OSError as exc:\n        print(folder, n < 100000, exc.errno)\n"
    )
    assert result.stdout.split() == ["/tmp", "True", "28", "/dev/shm", "True", "28"]  # ENOSPC


def test_nothing_an_episode_does_to_its_namespaces_reaches_a_later_episode(local_backend, fast):
    # A network namespace keeps per-namespace state that unprivileged code can change and read
    # (packet counters in /proc/net/snmp), and SysV IPC objects outlive their processes: an
    # episode that leaves a number in either must not be able to hand it to the next one.
    write = (
        "import socket, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(37):\n    try:\n        s.sendto(b'x', ('10.1.2.3', 9))\n    except OSError:\n        pass\n"
        "print(libc.shmget(4242, 4096, 0o1000 | 0o2000 | 0o600) >= 0)"  # IPC_CREAT | IPC_EXCL
    )
    read = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "lines = [l.split() for l in open('/proc/net/snmp') if l.startswith('Ip:')]\n"
        "print(dict(zip(lines[0][1:], lines[1][1:]))['OutNoRoutes'], libc.shmget(4242, 0, 0) >= 0)"
    )
    for _ in range(3):
        with Sandbox(local_backend, fast) as episode:
            assert episode.run(write).stdout == "True\n"
            assert episode.run(read).stdout == "37 True\n"  # within the episode both persist
        with Sandbox(local_backend, fast) as later:
            assert later.run(read).stdout == "0 False\n"
