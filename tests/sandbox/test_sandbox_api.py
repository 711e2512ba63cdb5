"""The sandbox's public API: limits, requests, backend choice, and ``run`` behaving like ``python -c``."""

import threading
import time

import pytest
from processes import children_of

from agentgym.sandbox import Limits, Sandbox, SandboxError, SandboxUnavailable, get_backend
from agentgym.sandbox.backend import Capture, check_relative_path, encode_request
from agentgym.sandbox.local import LocalBackend
from agentgym.sandbox.sandbox import BACKENDS

# ----------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    "field, value", [("wall_time_s", 0), ("cpu_time_s", -1), ("memory_bytes", 1 << 20), ("max_processes", True), ("max_output_bytes", "10")]
)
def test_bad_limits_are_clear_errors(field, value):
    with pytest.raises(ValueError, match=f"Limits.{field}"):
        Limits(**{field: value})


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../x", "a/../../x", ".", "a\0b"])
def test_file_names_must_stay_inside_the_workspace(name):
    with pytest.raises(ValueError):
        check_relative_path(name)


def test_request_encoding_checks_types():
    assert encode_request("print(1)", {"a/b.txt": "x"}).split(b"\n", 1)[0].isdigit()
    with pytest.raises(TypeError):
        encode_request(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_request("x", {"f": 3})  # type: ignore[dict-item]


def test_capture_keeps_a_bounded_prefix_and_splits_lines():
    capture = Capture(8)
    capture.add(b"ab\ncdefghij")
    assert capture.truncated and capture.take_line() == b"ab\n" and capture.take_line() == b"cdefg"


def test_unknown_backend_and_unreachable_docker_are_clear_errors():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_backend("chroot")
    assert BACKENDS == ("auto", "local", "docker")
    docker = pytest.importorskip("docker")
    try:
        docker.from_env().ping()
        pytest.skip("a Docker daemon is reachable here")
    except Exception:
        pass
    with pytest.raises(SandboxUnavailable, match="Docker daemon"):
        Sandbox(backend="docker")


# ------------------------------------------------------------------------- local backend


def test_auto_picks_the_local_backend(local_backend):
    assert get_backend("auto") is local_backend


def test_run_behaves_like_python_c(sandbox):
    result = sandbox.run("import sys\nprint('out'); print('err', file=sys.stderr); sys.exit(3)")
    assert (result.stdout, result.stderr, result.returncode, result.timed_out) == ("out\n", "err\n", 3, False)
    failed = sandbox.run("1/0")
    assert failed.returncode == 1 and failed.stderr.endswith("ZeroDivisionError: division by zero\n")
    assert 'File "<string>", line 1' in failed.stderr and "_bootstrap" not in failed.stderr
    assert sandbox.run("raise SystemExit('bye')").stderr == "bye\n"
    assert sandbox.run("import sys; print(sys.stdin.read()[::-1])", stdin="abc").stdout == "cba\n"
    assert sandbox.run("exit(0)").ok  # the site builtins exist
    threads = sandbox.run("import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), print('joined'))).start()")
    assert threads.stdout == "joined\n"  # non-daemon threads are joined at exit, as CPython does
    # As in `python -c`, threading is not imported before the code runs (its at-fork hook would
    # also cost every run of the fork server some forty page faults).
    assert sandbox.run("import sys; print('threading' in sys.modules)").stdout == "False\n"
    assert sandbox.run("import atexit; atexit.register(print, 'bye')").stdout == "bye\n"


def test_the_real_interpreter_and_standard_library_work(sandbox):
    code = (
        "import sys, subprocess, json, sqlite3, ssl, decimal, ctypes\n"
        "print(subprocess.run([sys.executable, '-c', 'print(6*7)'], capture_output=True, text=True).stdout.strip())\n"
        "import importlib.util; print(importlib.util.find_spec('numpy') is None)"
    )
    result = sandbox.run(code)
    assert result.stdout == "42\nTrue\n", result.stderr  # the stdlib works; site-packages stay hidden


def test_files_persist_within_a_sandbox_and_not_across(local_backend, sandbox, fast):
    sandbox.run("open('notes.txt', 'w').write('kept')")
    assert sandbox.run("print(open('notes.txt').read())", files={"extra/data.txt": b"\x00\x01"}).stdout == "kept\n"
    assert sandbox.run("print(open('extra/data.txt', 'rb').read())").stdout == "b'\\x00\\x01'\n"
    with Sandbox(local_backend, fast) as other:
        assert other.run("import os; print(os.listdir('.'))").stdout == "[]\n"


def test_workspace_modules_import_unless_isolated(sandbox):
    sandbox.run("open('helper.py', 'w').write('VALUE = 7')")
    assert sandbox.run("import helper; print(helper.VALUE)").stdout == "7\n"
    isolated = sandbox.run("import helper", isolated=True)
    assert isolated.returncode == 1 and "ModuleNotFoundError" in isolated.stderr


def test_output_is_capped_with_a_truncation_mark(sandbox, fast):
    result = sandbox.run("import sys\nsys.stdout.write('x' * 100000); sys.stderr.write('y' * 10)")
    assert result.stdout == "x" * fast.max_output_bytes and result.stdout_truncated
    assert result.stderr == "y" * 10 and not result.stderr_truncated


def test_closed_sandbox_refuses_to_run(local_backend, fast):
    box = Sandbox(local_backend, fast)
    box.close()
    box.close()  # idempotent
    with pytest.raises(SandboxError, match="closed"):
        box.run("print(1)")
    with pytest.raises(SandboxError, match="closed"):
        box.prepare()


def test_the_fork_server_ignores_a_malformed_control_message(local_backend, fast):
    with local_backend._lock:  # as the backend itself sends, one message at a time
        local_backend._sock.send(b"not a control message")
        local_backend._sock.send(b"\x00" * 8)
    with Sandbox(local_backend, fast) as box:
        assert box.run("print(1)").stdout == "1\n"  # it logged both to its standard error and went on


def test_a_prepared_run_is_a_new_run_whose_time_starts_with_its_code(local_backend, fast):
    with Sandbox(local_backend, fast) as box:
        box.run("open('kept.txt', 'w').write('x'); open('/tmp/scratch', 'w').write('y')")
        box.prepare()
        time.sleep(fast.wall_time_s + 0.5)  # longer than a run may last
        result = box.run("import os, time; time.sleep(0.5); print(open('kept.txt').read(), os.path.exists('/tmp/scratch'), os.getpid())")
        assert (result.stdout, result.timed_out) == ("x False 1\n", False)  # the workspace's files, its own /tmp, pid 1
        box.prepare()
        assert box.run("while True: pass").timed_out
        box.prepare()
        process = box.start("print(input()[::-1])")  # interactive runs take the prepared one too
        process.send(b"abc\n", timeout=2)
        assert process.readline(timeout=2) == b"cba\n" and process.wait().returncode == 0
        box.prepare()  # closing the sandbox stops it (the session's leftover check)


def test_a_close_that_does_not_wait_leaves_its_prepared_run_to_the_next_close(fast):
    # An episode that ends with the next one about to start does not wait for its prepared run to
    # end; the next close that waits does, so closing still leaves nothing running.
    backend = LocalBackend()
    try:
        (server,) = children_of(backend._proc.pid)
        box = Sandbox(backend, fast)
        box.prepare()
        deadline = time.monotonic() + 10
        while not children_of(server) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(children_of(server)) == 1  # the prepared run
        box.close(wait=False)
        with Sandbox(backend, fast) as other:
            assert other.run("print(1)").stdout == "1\n"
        assert children_of(server) == set()
    finally:
        backend.close()


def test_closes_that_never_wait_hold_only_the_runs_still_ending(fast):
    # Episode after episode reset without a waiting close: the stopped prepared runs that have
    # ended are forgotten (with their descriptors), not kept until the backend closes.
    backend = LocalBackend()
    try:
        for _ in range(12):
            box = Sandbox(backend, fast)
            box.run("print(1)")
            box.prepare()
            box.close(wait=False)
            time.sleep(0.2)  # the model's turn: the stopped run ends meanwhile
        assert len(backend._ending) <= 2
    finally:
        backend.close()


def test_concurrent_runs_stay_apart(local_backend, fast):
    outputs = {}

    def episode(index: int) -> None:
        with Sandbox(local_backend, fast) as box:
            box.run(f"open('me.txt', 'w').write('{index}')")
            outputs[index] = [box.run("print(open('me.txt').read())").stdout for _ in range(3)]

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outputs == {i: [f"{i}\n"] * 3 for i in range(12)}


def test_same_code_same_output(sandbox):
    code = "import os, sys, socket\nprint(os.getuid(), os.getpid(), socket.gethostname(), os.getcwd(), sorted(os.environ), list({'a', 'b', 'c'}))"
    first = sandbox.run(code)
    assert first.ok and first.stdout.startswith("1000 1 sandbox /workspace")
    assert all(sandbox.run(code).stdout == first.stdout for _ in range(3))


def test_input_is_fed_as_the_code_reads_it(sandbox):
    big = "x" * (1 << 20)
    assert sandbox.run("import sys; print(len(sys.stdin.read()))", stdin=big).stdout == f"{len(big)}\n"
    ignored = sandbox.run("print('done')", stdin=big)  # input the code never reads is dropped
    assert ignored.stdout == "done\n" and ignored.ok


def test_interactive_processes_answer_line_by_line(sandbox):
    process = sandbox.start("import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)")
    answers = []
    for word in (b"one\n", b"two\n"):
        process.send(word, timeout=2)
        answers.append(process.readline(timeout=2))
    result = process.wait()
    assert answers == [b"ONE\n", b"TWO\n"] and result.ok and result.stdout == ""
    sleeper = sandbox.start("import time; time.sleep(5)")
    with pytest.raises(TimeoutError):
        sleeper.readline(timeout=0.2)
    sleeper.kill()
    assert sleeper.wait().returncode == -9
