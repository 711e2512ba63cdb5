"""The environment server and its client env: same episodes as in-process, many sessions at once,
malformed requests answered without harm, limits, authentication and a clean shutdown."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401 - registers the environments
from agentgym.env import EpisodeOver
from agentgym.remote import EnvServer, RemoteEnvError
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, replay, run_episode

pytest.importorskip("websockets")
from websockets.sync.client import connect  # noqa: E402

REMOTE = "agentgym/Remote-v0"


@pytest.fixture(scope="module")
def server():
    with EnvServer() as running:
        yield running


def remote(server: EnvServer, env_id: str, **kwargs) -> gym.Env:
    return gym.make(REMOTE, url=server.url, env_id=env_id, **kwargs)


def http_get(server: EnvServer, path: str, token: str | None = None, accept: str = "application/json") -> tuple[int, dict]:
    request = urllib.request.Request(server.url.replace("ws://", "http://") + path, headers={"Accept": accept})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_client_passes_gymnasiums_checker(server):
    env = remote(server, "agentgym/Refund-v0")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("served", ["agentgym/SQL-v0", "agentgym/MockAPI-v0", "agentgym/CodeExec-v0", "agentgym/TauRetail-v0"])
def test_episodes_are_byte_identical_to_in_process(server, served):
    env_id = served
    local = gym.make(env_id, split="val")
    task_ids = local.unwrapped.task_ids[:2]
    records = [run_episode(local, make_policy(local, name, 3), seed=3, task_id=t) for t in task_ids for name in ("oracle", "random")]
    local.close()
    env = remote(server, env_id, split="val")
    assert env.unwrapped.task_ids == gym.make(env_id, split="val").unwrapped.task_ids
    for record in records:
        assert to_json_line(replay(env, record)) == to_json_line(record)
    env.close()


def test_rollout_runner_gives_the_same_trajectories_remote_and_local(server, default_tokenizer):
    from fakes import OracleScript
    from test_runner import Recording

    from agentgym.rollouts.runner import RolloutConfig, run_rollouts

    class NoModel:  # every turn comes from the script
        tokenizer, name = default_tokenizer, "script"

    env_id = "agentgym/SQL-v0"
    task_ids = gym.make(env_id, split="test").unwrapped.task_ids[:2]
    script = OracleScript(env_id, task_ids, default_tokenizer)
    local = RolloutConfig(env_id, split="test", task_ids=task_ids, group_size=2, seed=5, max_turns=3, max_new_tokens=256)
    far = RolloutConfig(
        REMOTE, split="test", task_ids=task_ids, group_size=2, seed=5, max_turns=3, max_new_tokens=256, env_kwargs={"url": server.url, "env_id": env_id}
    )
    near = run_rollouts(Recording(NoModel(), script, scripted_turns=3), local)
    away = run_rollouts(Recording(NoModel(), script, scripted_turns=3), far)
    assert [e.trajectory.token_ids for e in away] == [e.trajectory.token_ids for e in near]
    assert [e.reward for e in away] == [e.reward for e in near] and any(e.reward > 0 for e in near)
    assert [to_json_line(e.record) for e in away] == [to_json_line(e.record) for e in near]


def test_concurrent_sessions_do_not_interfere(server):
    env_id = "agentgym/MockAPI-v0"
    local = gym.make(env_id, split="val")
    records = [run_episode(local, make_policy(local, "oracle", 0), seed=1, task_id=t) for t in local.unwrapped.task_ids[:16]]
    local.close()

    def play(record: dict) -> bool:
        env = remote(server, env_id, split="val")
        try:
            return to_json_line(replay(env, record)) == to_json_line(record)
        finally:
            env.close()

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(play, records))
    status, metrics = http_get(server, "/metrics?format=json")
    assert status == 200 and metrics["steps_total"] > 0 and metrics["step_p50_ms"] > 0 and metrics["sessions_total"] >= 16


def test_metrics_are_in_the_prometheus_text_format(server):
    parser = pytest.importorskip("prometheus_client.parser")
    env = remote(server, "agentgym/Refund-v0")
    env.reset(seed=0)
    env.step("hello")
    with urllib.request.urlopen(server.url.replace("ws://", "http://") + "/metrics", timeout=10) as response:
        content_type, text = response.headers["Content-Type"], response.read().decode()
    env.close()
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {family.name: family for family in parser.text_string_to_metric_families(text)}
    assert {"agentgym_steps", "agentgym_sessions", "agentgym_sessions_open", "agentgym_step_latency_seconds", "agentgym_queue_depth"} <= set(families)
    assert families["agentgym_steps"].type == "counter" and families["agentgym_steps"].samples[0].value >= 1
    quantiles = {s.labels["quantile"]: s.value for s in families["agentgym_step_latency_seconds"].samples}
    assert set(quantiles) == {"0.5", "0.99"} and 0 < quantiles["0.5"] <= quantiles["0.99"]
    as_json = http_get(server, "/metrics", accept="application/json")[1]
    assert as_json["steps_total"] == families["agentgym_steps"].samples[0].value


def test_errors_cross_the_wire_and_the_session_goes_on(server):
    env = remote(server, "agentgym/SQL-v0", max_turns=1)
    with pytest.raises(gym.error.ResetNeeded):  # the served env's own error (the client's wrappers would say it first)
        env.unwrapped.step("hello")
    observation, _ = env.reset(seed=0)
    assert observation
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "no-such-task"})
    env.reset(seed=0)
    assert env.step("hello")[3]  # truncated after its one turn
    with pytest.raises(EpisodeOver):
        env.unwrapped.step("hello")
    env.close()
    with pytest.raises(RemoteEnvError, match="closed"):
        env.unwrapped.step("hello")
    with pytest.raises(ValueError, match="disallowed"):
        remote(server, "agentgym/NoSuchEnv-v0")


@pytest.mark.parametrize(
    "messages",
    [
        ["not json"],
        ["[1, 2]"],
        [json.dumps({"op": "explode"})],
        [json.dumps({"op": "step", "action": "hi"})],  # before make
        [json.dumps({"op": "make", "env_id": "agentgym/SQL-v0", "kwargs": []})],
        [json.dumps({"op": "make", "env_id": "agentgym/SQL-v0", "kwargs": {"no_such_argument": 1}})],
        [json.dumps({"op": "make", "env_id": "agentgym/SQL-v0"}), json.dumps({"op": "reset", "seed": "zero"})],
        [json.dumps({"op": "make", "env_id": "agentgym/SQL-v0"}), json.dumps({"op": "step"})],
        [json.dumps({"op": "make", "env_id": "agentgym/SQL-v0"}), json.dumps({"op": "make", "env_id": "agentgym/SQL-v0"})],
    ],
)
def test_malformed_requests_get_clear_errors_and_the_server_stays_up(server, messages):
    with connect(server.url + "/v1/session") as ws:
        replies = []
        for message in messages:
            ws.send(message)
            replies.append(json.loads(ws.recv(timeout=10)))
    assert "error" in replies[-1] and replies[-1]["error"]["message"], replies
    assert http_get(server, "/healthz")[0] == 200
    env = remote(server, "agentgym/SQL-v0")  # still serving
    assert env.reset(seed=0)[0]
    env.close()


def test_unknown_paths_and_oversized_messages_are_refused(server):
    assert http_get(server, "/nothing")[0] == 404
    small = EnvServer(max_message_bytes=4096)
    small.start()
    try:
        env = remote(small, "agentgym/SQL-v0")
        env.reset(seed=0)
        with pytest.raises(RemoteEnvError):
            env.step("x" * 10_000)
        assert http_get(small, "/healthz")[0] == 200
    finally:
        small.close()


def test_token_is_required_when_set():
    with EnvServer(token="s3cret") as guarded:
        with pytest.raises(RemoteEnvError, match="401"):
            remote(guarded, "agentgym/SQL-v0")
        with pytest.raises(RemoteEnvError, match="401") as refused:
            remote(guarded, "agentgym/SQL-v0", token="wrong")
        assert str(refused.value).endswith("(HTTP 401): a valid bearer token is required")  # the reason, not the raw body
        env = remote(guarded, "agentgym/SQL-v0", token="s3cret")
        assert env.reset(seed=0)[0]
        env.close()
        assert http_get(guarded, "/metrics")[0] == 401
        assert http_get(guarded, "/metrics", token="s3cret")[0] == 200
        assert http_get(guarded, "/healthz")[0] == 200


def test_session_limit_and_idle_timeout():
    with EnvServer(max_sessions=1, idle_timeout_s=0.5) as limited:
        first = remote(limited, "agentgym/SQL-v0")
        with pytest.raises(RemoteEnvError, match="maximum of 1 sessions"):
            remote(limited, "agentgym/SQL-v0")
        time.sleep(1.0)  # first says nothing: the server closes it
        with pytest.raises(RemoteEnvError):
            first.reset(seed=0)
        deadline = time.monotonic() + 5
        while http_get(limited, "/healthz")[1]["sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        second = remote(limited, "agentgym/SQL-v0")  # the slot is free again
        assert second.reset(seed=0)[0]
        second.close()


def test_shutdown_ends_every_session_and_closes_its_environment():
    server = EnvServer()
    server.start()
    envs = [remote(server, "agentgym/CodeExec-v0", split="val") for _ in range(3)]
    for env in envs:
        env.reset(seed=0)
    closed = []
    for session in server._sessions.values():
        original = session.close
        session.close = lambda original=original: (closed.append(1), original())
    server.close()
    assert len(closed) == 3 and server._sessions == {}
    for env in envs:
        with pytest.raises(RemoteEnvError):
            env.step("hello")
    assert not [t for t in threading.enumerate() if t.name.startswith(server.name)]


def test_an_adapter_spec_makes_a_remote_environment(server):
    from agentgym.trainers.adapters.spec import EpisodeSpec

    task_id = gym.make("agentgym/SQL-v0", split="val").unwrapped.task_ids[0]
    spec = EpisodeSpec(env_id=REMOTE, task_id=task_id, split="val", seed=2, env_kwargs={"url": server.url, "env_id": "agentgym/SQL-v0"})
    env = spec.make()
    observation, _ = spec.reset(env)
    local = EpisodeSpec(env_id="agentgym/SQL-v0", task_id=task_id, split="val", seed=2)
    assert observation == local.reset(local.make())[0]
    env.close()


# ---------------------------------------------------------------------- security review (issue #35)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "envs-0.internal", ""])
def test_a_server_without_a_token_refuses_to_listen_beyond_loopback(host, caplog):
    with pytest.raises(ValueError, match="without a token"):
        EnvServer(host)
    EnvServer(host, token="s3cret").close()  # with a token, any interface
    with caplog.at_level("WARNING", logger="agentgym.remote"):
        EnvServer(host, insecure=True).close()  # said explicitly: allowed, and loudly
    assert "WITHOUT A TOKEN" in caplog.text


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_server_without_a_token_may_listen_on_loopback(host, caplog):
    with caplog.at_level("WARNING", logger="agentgym.remote"):
        EnvServer(host).close()
    assert not caplog.text


def test_the_cli_refuses_a_public_bind_without_a_token(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", "serve", "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "without a token" in result.stderr, result.stderr


def _task_file(folder, name: str, records: list[dict]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


SQL_TASK = {"task_id": "probe-1", "question": "How many?", "answer": "3", "answer_type": "int", "sql": "select 3", "template": "probe", "difficulty": 1}


def test_clients_cannot_read_server_files_through_make_arguments(tmp_path):
    # The review's reproduction: tasks=PATH loaded any JSONL file the server could read and the
    # `tasks` request returned its records; links and '..' must not get around the roots either.
    secret = _task_file(tmp_path / "private", "secret.jsonl", [{**SQL_TASK, "question": "the launch code is 0000"}])
    allowed = tmp_path / "allowed"
    inside = _task_file(allowed, "tasks.jsonl", [SQL_TASK])
    (allowed / "link.jsonl").symlink_to(secret)
    with EnvServer() as closed_server:
        with pytest.raises(ValueError, match="names a location on the server"):
            remote(closed_server, "agentgym/SQL-v0", tasks=secret)
        with pytest.raises(ValueError, match="names a location on the server"):
            remote(closed_server, "agentgym/SQL-v0", tasks=inside)  # no roots named: no file at all
    with EnvServer(allowed_roots=[allowed]) as open_server:
        for outside in (secret, str(allowed / "link.jsonl"), str(allowed / ".." / "private" / "secret.jsonl"), "private/secret.jsonl"):
            with pytest.raises(ValueError, match="outside the folders this server allows"):
                remote(open_server, "agentgym/SQL-v0", tasks=outside)
        env = remote(open_server, "agentgym/SQL-v0", tasks=inside)
        assert env.unwrapped.task_ids == ["probe-1"]
        env.close()
        env = remote(open_server, "agentgym/SQL-v0", tasks=[SQL_TASK])  # inline tasks are the client's own
        assert env.unwrapped.task_ids == ["probe-1"]
        env.close()


def test_make_errors_tell_clients_nothing_about_server_files(tmp_path, caplog):
    # Loader errors said which files exist and listed their JSON keys.
    allowed = tmp_path / "allowed"
    keys = _task_file(allowed, "keys.jsonl", [{"aws_secret_access_key": "x", "task_id": "k"}])
    messages = []
    with EnvServer(allowed_roots=[allowed]) as server, caplog.at_level("WARNING", logger="agentgym.remote"):
        for path in (keys, str(allowed / "missing.jsonl")):
            with pytest.raises(ValueError, match="the server's log has the details") as refused:
                remote(server, "agentgym/CodeExec-v0", tasks=path)
            messages.append(str(refused.value))
    assert not any(word in message for message in messages for word in ("aws_secret", "not found", "record", "missing.jsonl"))
    assert "aws_secret_access_key" in caplog.text and "task file not found" in caplog.text  # the operator sees why


@pytest.mark.parametrize(
    "served, kwargs, fragment",
    [
        ("agentgym/CodeExec-v0", {"backend": "docker"}, "may not set 'backend'"),
        ("agentgym/CodeExec-v0", {"limits": {"wall_time_s": 1e6}}, "may not set 'limits'"),
        ("agentgym/SQL-v0", {"tool_cache": "process"}, "may not set 'tool_cache'"),
        ("agentgym/TauRetail-v0", {"user_cache": "/tmp/customer.jsonl"}, "'user_cache' names a location"),
        ("agentgym/TauRetail-v0", {"user": "llm", "user_model": "/root/models/private"}, "'user_model' names a location"),
        ("agentgym/Refund-v0", {"tasks": [1, 2]}, "must hold JSON objects"),
    ],
)
def test_clients_set_only_allow_listed_arguments(server, served, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        remote(server, served, **kwargs)


def test_allow_listed_arguments_still_work(server):
    env = remote(server, "agentgym/CodeExec-v0", tasks="humaneval", max_turns=3)  # a bundled set by name
    assert env.unwrapped.max_turns == 3 and len(env.unwrapped.task_ids) == 164
    env.close()
    env = remote(server, "agentgym/MockAPI-v0", split="val", fault_rate=0.2, max_turns=4)
    assert env.reset(seed=0)[0]
    env.close()


def test_the_session_limit_holds_under_concurrent_makes(monkeypatch):
    # The review's reproduction: --max-sessions 2 and 12 concurrent makes opened 12 sessions,
    # because the limit was checked before the environment was made and counted after.
    import agentgym.remote.server as server_module

    made = server_module.environment_for

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return made(*args, **kwargs)

    monkeypatch.setattr(server_module, "environment_for", slow)
    with EnvServer(max_sessions=2, workers=12) as limited:

        def open_one(_: int) -> gym.Env | str:
            try:
                return remote(limited, "agentgym/SQL-v0")
            except RemoteEnvError as exc:
                return str(exc)

        with ThreadPoolExecutor(12) as pool:
            outcomes = list(pool.map(open_one, range(12)))
        opened = [o for o in outcomes if not isinstance(o, str)]
        assert len(opened) == 2 and all("maximum of 2 sessions" in o for o in outcomes if isinstance(o, str)), outcomes
        assert http_get(limited, "/healthz")[1]["sessions"] == 2
        for env in opened:
            env.close()
        failing = EnvServer(max_sessions=1)  # a make that fails gives its place back
    with failing:
        for _ in range(3):
            with pytest.raises(ValueError):
                remote(failing, "agentgym/SQL-v0", split="nope")
        env = remote(failing, "agentgym/SQL-v0")
        env.close()


def test_scripted_policies_are_refused_clearly_on_a_remote_env(server, tmp_path, capsys):
    from agentgym.cli import main

    env = remote(server, "agentgym/SQL-v0")
    with pytest.raises(ValueError, match=r"Remote-v0 runs no scripted policies.*agentgym.make_env\('agentgym/SQL-v0'\)"):
        run_episode(env, "oracle")
    env.close()
    kwargs = json.dumps({"url": server.url, "env_id": "agentgym/SQL-v0"})
    assert main(["rollout", REMOTE, "--env-kwargs", kwargs, "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "runs no scripted policies" in err and "choose from" not in err
