"""Chaos: the CodeExec sandbox's machinery fails between and during model episodes (the fork server
killed or stopped, as the OOM killer or a stuck kernel would), and a program exhausts its own
limits. Nothing hangs; an episode the machinery failed under is labelled ``infra_error`` (never
the model's failure) and played again when asked; the next episodes succeed."""

from __future__ import annotations

import os
import signal
import time

import pytest
from chaos_oracle import ChaosOracle
from fakes import OracleScript
from processes import alive, children_of

from agentgym import InfraError
from agentgym.envs import make_env
from agentgym.parsing import format_tool_call
from agentgym.rollouts.runner import RolloutConfig, RolloutRunner
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.sandbox import Limits, Sandbox, SandboxLost
from agentgym.sandbox import local as local_module
from agentgym.sandbox.grading import Grader

ENV = "agentgym/CodeExec-v0"
TASKS = ["anagram_groups-0", "checksum-0"]


@pytest.fixture(scope="module")
def script(default_tokenizer, local_backend):
    return OracleScript(ENV, TASKS, default_tokenizer, split="test")


def config() -> RolloutConfig:
    return RolloutConfig(ENV, split="test", task_ids=TASKS, group_size=1, max_new_tokens=1024, seed=0, env_kwargs={"backend": "local"})


def kill_server(backend) -> None:
    """SIGKILL the fork server (pid 1 of the sandboxes' pid namespace), as the OOM killer would."""
    (server,) = children_of(backend._proc.pid)
    os.kill(server, signal.SIGKILL)


def kill_server_and_wait(backend) -> None:
    """:func:`kill_server`, returning once the server is dead: a kill completes a few milliseconds
    after the signal (pid 1 of a namespace ends its children first), and "between turns" means the
    next turn starts after that."""
    (server,) = children_of(backend._proc.pid)
    os.kill(server, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.001)


def once(wrapped, before):
    """``wrapped`` with ``before(*args)`` run ahead of its first call only."""
    done = []

    def call(*args, **kwargs):
        if not done:
            done.append(True)
            before(*args)
        return wrapped(*args, **kwargs)

    return call


def test_a_kill_between_turns_costs_nothing(script, local_backend):
    restarts = local_backend.restarts
    episodes = RolloutRunner(ChaosOracle(script, {2: lambda: kill_server_and_wait(local_backend)})).run(config())
    # run_python ran, then the server died; submit grades on a new server, from its own sandboxes.
    assert [(e.stop_reason, e.record["success"]) for e in episodes] == [("done", True)] * 2
    assert local_backend.restarts == restarts + 1


@pytest.mark.parametrize("during", ["run_python", "submit"])
def test_a_kill_during_a_tool_call_labels_that_episode_and_a_retry_succeeds(script, local_backend, monkeypatch, during):
    if during == "run_python":
        monkeypatch.setattr(local_module.LocalProcess, "wait", once(local_module.LocalProcess.wait, lambda process: kill_server_and_wait(local_backend)))
    else:
        monkeypatch.setattr(Grader, "_grade", once(Grader._grade, lambda grader, *_: kill_server_and_wait(local_backend)))
    episodes = RolloutRunner(ChaosOracle(script)).run(config(), infra_retries=0)
    labelled = [e for e in episodes if e.stop_reason == "infra_error"]
    assert labelled, [e.record.get("reward_reason") for e in episodes]
    for episode in labelled:
        assert f"InfraError: {during}" in episode.record["error"] and episode.reward == 0.0
    assert all(e.record["success"] for e in episodes if e not in labelled), [
        (e.stop_reason, e.record.get("reward_reason"), e.record.get("error")) for e in episodes
    ]  # the rest were graded as they deserved
    retried = RolloutRunner(ChaosOracle(script)).run(config(), infra_retries=1)
    assert [(e.stop_reason, e.record["success"]) for e in retried] == [("done", True)] * 2


def test_a_run_cut_off_by_its_servers_death_is_lost_before_the_death_shows(local_backend, monkeypatch):
    """The server's control socket closes in the same exit as a run's status pipe, but the host may
    see the empty status first: the run is lost (the server's failure, never the program's) and
    the server is recorded as stopped there and then, so every other run of it is lost too."""
    generation = local_backend.generation()
    with Sandbox(local_backend, Limits(wall_time_s=10.0, cpu_time_s=10)) as box:
        assert box.run("print(1)").stdout == "1\n"
        process = box.start("import time\ntime.sleep(30)")
        monkeypatch.setattr(local_module.LocalBackend, "_serving", lambda backend: True)  # the death does not show yet
        kill_server_and_wait(local_backend)
        with pytest.raises(SandboxLost, match="without writing its status"):
            process.wait()
        assert local_backend.generation() == generation + 1
        monkeypatch.undo()
    with Sandbox(local_backend, Limits(wall_time_s=10.0, cpu_time_s=10)) as box:
        assert box.run("print(2)").stdout == "2\n"


def test_a_stopped_server_past_the_run_deadline_is_replaced(local_backend, monkeypatch):
    monkeypatch.setattr(local_module, "GRACE_S", 0.5)
    limits = Limits(wall_time_s=1.0, cpu_time_s=1)
    with Sandbox(local_backend, limits) as box:
        assert box.run("print(1)").stdout == "1\n"
        (server,) = children_of(local_backend._proc.pid)
        process = box.start("print(2)")
        os.kill(server, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(SandboxLost, match="did not report the end of a run"):
            process.wait()
        assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server), "the stopped server must be ended"
    with Sandbox(local_backend, limits) as box:
        assert box.run("print(3)").stdout == "3\n"


@pytest.mark.parametrize(
    "exhaust",
    [
        "import os\nn = 0\nwhile True:\n    try:\n        os.fork()\n        n += 1\n    except OSError as e:\n        print('stopped', e.errno)\n        break\n",
        "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
        "with open('/tmp/big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
    ],
    ids=["pids", "workspace", "tmp"],
)
def test_a_program_that_exhausts_its_limits_is_the_models_doing(local_backend, exhaust):
    env = make_env(ENV, split="test", backend="local")
    generation = local_backend.generation()
    env.reset(seed=0, options={"task_id": TASKS[0]})
    observation, *_ = env.step(format_tool_call("run_python", {"code": exhaust}))  # an observation, not an InfraError
    assert observation[0]["name"] == "run_python"
    observation, *_ = env.step(format_tool_call("run_python", {"code": "print('still here')"}))
    assert "still here" in observation[0]["content"]
    assert local_backend.generation() == generation
    assert run_episode(env, make_policy(env, "oracle", 0), seed=1, task_id=TASKS[1])["success"]
    env.close()


def test_an_episode_whose_backend_gave_up_is_an_infra_error(local_backend, monkeypatch):
    backend = local_module.LocalBackend()
    env = make_env(ENV, split="test", backend="local")
    env.unwrapped.backend = env.unwrapped.grader.backend = backend
    env.unwrapped.grader._drivers.backend = backend
    monkeypatch.setattr(local_module, "MAX_FAILED_RESTARTS", 1)

    def cannot_start():
        raise local_module.SandboxUnavailable("the local sandbox could not start (test)")

    monkeypatch.setattr(local_module, "_launch", cannot_start)
    kill_server(backend)
    env.reset(seed=0, options={"task_id": TASKS[0]})
    with pytest.raises(InfraError, match="run_python"):
        env.step(format_tool_call("run_python", {"code": "print(1)"}))
    env.reset(seed=0, options={"task_id": TASKS[0]})
    with pytest.raises(InfraError, match="submit"):
        env.step(format_tool_call("submit", {"code": "def f(): pass\n"}))
    env.close()
    backend.close()
