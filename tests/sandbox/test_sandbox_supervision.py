"""The local backend supervises its fork server: a server that was killed, or is stuck, is replaced
on next use (bounded), what it held is reported lost, and a grading it broke is told apart from a
submission that broke its own grading."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from processes import alive, children_of

from agentgym.envs import make_env
from agentgym.parsing import format_tool_call
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.sandbox import Limits, Sandbox, SandboxError, SandboxLost, SandboxUnavailable
from agentgym.sandbox import local as local_module
from agentgym.sandbox.grading import GRADING_FAILED, FunctionTests, Grader, IOCase
from agentgym.sandbox.local import LocalBackend

LIMITS = Limits(wall_time_s=5.0, cpu_time_s=5, max_output_bytes=1 << 20)
DOUBLE_TESTS = FunctionTests("double", (IOCase.of([1], 2), IOCase.of([2], 4), IOCase.of([5], 10)))
DOUBLE = "def double(x):\n    return 2 * x\n"


@pytest.fixture
def backend(local_backend):
    """A backend of this test's own (the test kills its fork server)."""
    own = LocalBackend()
    yield own
    own.close()


def server_pid(backend: LocalBackend) -> int:
    """The fork server: the one child of its launcher (pid 1 of the sandboxes' pid namespace)."""
    (pid,) = children_of(backend._proc.pid)
    return pid


def kill_and_wait(pid: int) -> None:
    """SIGKILL ``pid`` (the fork server, as the OOM killer would) and return once it is dead: the
    kill completes milliseconds after the signal, and a use inside that window may still reach it."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not alive(pid)


@pytest.mark.parametrize("victim", ["launcher", "server"])
def test_twenty_oracle_episodes_succeed_after_the_fork_server_is_killed(local_backend, victim):
    env = make_env("agentgym/CodeExec-v0", backend="local")
    backend = env.unwrapped.backend
    assert backend is local_backend
    policy = make_policy(env, "oracle", 0)
    assert run_episode(env, policy, seed=0)["success"]  # spares and drivers are warm now
    restarts, generation = backend.restarts, backend.generation()
    server, launcher = server_pid(backend), backend._proc
    os.kill(launcher.pid if victim == "launcher" else server, signal.SIGKILL)  # as the OOM killer does
    # The server dies milliseconds after the signal, later still when its launcher is the victim
    # (it follows its parent); an episode begun inside that window is an infra error, retried by
    # the runner (tests/chaos). These episodes start once it is dead.
    deadline = time.monotonic() + 10
    while alive(server) and time.monotonic() < deadline:  # an orphaned server is reaped by the machine's init
        time.sleep(0.01)
    assert not alive(server)
    records = [run_episode(env, policy, seed=seed) for seed in range(20)]
    env.close()
    assert [r["reward_reason"] for r in records if not r["success"]] == []
    assert (backend.restarts, backend.generation()) == (restarts + 1, generation + 1)
    # How it ended shows on the launcher's status: killed itself, or 128 + the signal that killed its server.
    assert launcher.returncode == (-signal.SIGKILL if victim == "launcher" else 128 + signal.SIGKILL)


def test_a_workspace_the_reset_opened_and_lost_before_its_first_run_is_replaced(local_backend):
    # A reset after an episode that ran code opens the next workspace ahead; when the server stops
    # before anything ran in it, nothing of the episode is lost, and the episode goes on.
    env = make_env("agentgym/CodeExec-v0", backend="local")
    code_exec = env.unwrapped
    env.reset(seed=0)
    env.step(format_tool_call("run_python", {"code": "print(1)"}))
    env.reset(seed=1)
    assert code_exec._sandbox is not None  # opened ahead
    kill_and_wait(server_pid(code_exec.backend))
    observation, *_ = env.step(format_tool_call("run_python", {"code": "print(2)"}))
    env.close()
    assert observation[0]["content"] == "exit status 0\n--- stdout ---\n2\n"


def test_what_the_stopped_server_held_is_lost_and_new_workspaces_work(backend):
    box = Sandbox(backend, LIMITS)
    box.run("open('kept.txt', 'w').write('x')")
    box.prepare()  # a prepared run, held by the server too
    kill_and_wait(server_pid(backend))
    with pytest.raises(SandboxLost, match="fork server stopped"):
        box.run("print(open('kept.txt').read())")  # its files are gone: never a silently empty workspace
    box.close()
    with Sandbox(backend, LIMITS) as fresh:
        assert fresh.run("print(6 * 7)").stdout == "42\n"
    assert backend.restarts == 1 and backend.generation() == 1 and backend.alive


def test_a_run_in_flight_when_the_server_dies_is_lost(backend):
    with Sandbox(backend, LIMITS) as box:
        process = box.start("import time\ntime.sleep(30)\n")
        threading.Timer(0.3, os.kill, (server_pid(backend), signal.SIGKILL)).start()
        started = time.monotonic()
        with pytest.raises(SandboxLost, match="stopped during the run"):
            process.wait()
        assert time.monotonic() - started < 5  # no wait for the run's own deadline
    with Sandbox(backend, LIMITS) as box:
        assert box.run("print('ok')").stdout == "ok\n"


def test_a_stuck_server_is_ended_and_replaced(backend, monkeypatch):
    monkeypatch.setattr(local_module, "CONTROL_TIMEOUT_S", 0.5)
    stuck = server_pid(backend)
    os.kill(stuck, signal.SIGSTOP)
    try:
        with Sandbox(backend, LIMITS) as box:  # its "open" goes unanswered: the server is replaced and asked again
            assert box.run("print('ok')").stdout == "ok\n"
        assert backend.restarts == 1
        deadline = time.monotonic() + 5
        while alive(stuck) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(stuck), "the stuck server must be ended, not left behind"
    finally:
        if alive(stuck):
            os.kill(stuck, signal.SIGCONT)


def test_restarts_are_paced_and_bounded(backend, monkeypatch):
    launches = []

    def failing_launch():
        launches.append(time.monotonic())
        raise SandboxUnavailable("the local sandbox could not start (test)")

    monkeypatch.setattr(local_module, "_launch", failing_launch)
    monkeypatch.setattr(local_module, "RESTART_BACKOFF_S", 0.05)
    kill_and_wait(server_pid(backend))
    with pytest.raises(SandboxLost, match="gave up after 5 failed starts"):
        Sandbox(backend, LIMITS)  # one use tries them all, pausing between them
    assert len(launches) == local_module.MAX_FAILED_RESTARTS and not backend.alive
    pauses = [b - a for a, b in zip(launches, launches[1:], strict=False)]
    assert all(pause >= 0.05 * 2**i for i, pause in enumerate(pauses))  # doubling
    with pytest.raises(SandboxLost, match="gave up after 5 failed starts"):
        Sandbox(backend, LIMITS)
    assert len(launches) == local_module.MAX_FAILED_RESTARTS  # given up for good: no more tries


def test_a_failed_start_is_tried_again_after_a_pause(backend, monkeypatch):
    real_launch, launches = local_module._launch, []

    def flaky_launch():
        launches.append(time.monotonic())
        if len(launches) == 1:
            raise SandboxUnavailable("the local sandbox could not start (test)")
        return real_launch()

    monkeypatch.setattr(local_module, "_launch", flaky_launch)
    kill_and_wait(server_pid(backend))
    with Sandbox(backend, LIMITS) as box:  # the use that found it stopped waits for the second start
        assert box.run("print('ok')").stdout == "ok\n"
    assert len(launches) == 2 and launches[1] - launches[0] >= local_module.RESTART_BACKOFF_S
    assert backend.restarts == 1 and backend.alive


def test_a_first_start_killed_by_a_signal_is_tried_again(local_backend, monkeypatch):
    """A starting server can be the OOM killer's pick; a backend made at that moment still starts."""
    real_popen, launched = local_module.subprocess.Popen, []

    def popen_killed_once(command, *args, **kwargs):
        proc = real_popen(command, *args, **kwargs)
        if any(str(part).endswith("_zygote.py") for part in command):  # a launcher, not a helper tool
            launched.append(proc)
            if len(launched) == 1:
                kill_and_wait(proc.pid)
        return proc

    monkeypatch.setattr(local_module.subprocess, "Popen", popen_killed_once)
    monkeypatch.setattr(local_module, "RESTART_BACKOFF_S", 0.05)
    own = LocalBackend()
    try:
        assert len(launched) == 2 and launched[0].returncode == -signal.SIGKILL
        with Sandbox(own, LIMITS) as box:
            assert box.run("print('ok')").stdout == "ok\n"
    finally:
        own.close()


def test_a_first_start_that_fails_is_reported_at_once_with_the_servers_last_words(local_backend, monkeypatch):
    real_launch, launches = local_module._launch, []

    def counted_launch():
        launches.append(1)
        return real_launch()

    monkeypatch.setattr(local_module, "_launch", counted_launch)
    monkeypatch.setattr(local_module, "WARM_IMPORTS", (*local_module.WARM_IMPORTS, "agentgym_no_such_module"))
    with pytest.raises(SandboxUnavailable, match="(?s)could not start.*No module named 'agentgym_no_such_module'"):
        LocalBackend()
    assert len(launches) == 1  # it would fail the same way again


def test_a_closed_backend_is_not_restarted(backend):
    backend.close()
    with pytest.raises(SandboxError, match="closed") as caught:
        Sandbox(backend, LIMITS)
    assert not isinstance(caught.value, SandboxLost)  # the caller's mistake, not the machinery's
    assert backend.restarts == 0


def test_a_grading_the_server_died_under_is_an_infrastructure_failure(backend):
    slow = "import time\ntime.sleep(2)\n" + DOUBLE
    with Grader(backend, LIMITS) as grader:
        assert grader.grade(DOUBLE, DOUBLE_TESTS).score == 1.0
        threading.Timer(0.5, os.kill, (server_pid(backend), signal.SIGKILL)).start()
        grade = grader.grade(slow, DOUBLE_TESTS)
        assert (grade.score, grade.reason) == (0.0, GRADING_FAILED)
        assert grade.infra_error is not None and "fork server" in grade.infra_error
        again = grader.grade(DOUBLE, DOUBLE_TESTS)  # its stale spares and drivers are not used
        assert (again.score, again.infra_error) == (1.0, None)


@pytest.mark.parametrize(
    "attack",
    [
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",  # kills its own process
        "import os, signal\nos.kill(-1, signal.SIGKILL)\n",  # everything it can reach
        "import sys\nfor name in [m for m in sys.modules if 'harness' in m]:\n    vars(sys.modules[name]).clear()\n" + DOUBLE,  # wrecks the harness
        "x = bytearray(1 << 40)\n",  # more memory than its limit
    ],
)
def test_a_submission_that_breaks_its_own_grading_stays_a_failed_submission(local_backend, attack):
    generation = local_backend.generation()
    with Grader(local_backend, LIMITS) as grader:
        grade = grader.grade(attack, DOUBLE_TESTS)
    assert grade.infra_error is None and grade.score < 1.0  # a failed (or partial) submission, never an infra error
    assert local_backend.generation() == generation  # nothing it did stopped the fork server


FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\n" + DOUBLE


def test_a_fork_bombs_children_never_answer_for_it_so_its_grade_is_the_same_every_time(local_backend):
    # Every child of the bomb comes back into the harness once its fork fails; had they all
    # answered on the same pipes, the grade would depend on which answer was read first.
    generation = local_backend.generation()
    with Grader(local_backend, LIMITS) as grader:
        grades = [grader.grade(FORK_BOMB, DOUBLE_TESTS) for _ in range(10)]
    assert {(grade.score, grade.reason, grade.infra_error) for grade in grades} == {(1.0, "3 of 3 hidden tests passed", None)}
    assert local_backend.generation() == generation


def test_processes_a_submission_left_running_are_gone_before_its_first_call(local_backend):
    leaves_one = (
        "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n"
        "def processes():\n    return sorted(int(name) for name in os.listdir('/proc') if name.isdigit())\n"
    )
    with Grader(local_backend, LIMITS) as grader:
        grade = grader.grade(leaves_one, FunctionTests("processes", (IOCase.of([], [1]),)))
    assert (grade.score, grade.infra_error) == (1.0, None)  # only the harness (pid 1 of the run) is left
