"""Chaos: the MockAPI HTTP server stops on its own mid-episode. The episode that was using it ends
as an infrastructure error (never as the model's failure), nothing waits for a timeout, and the
next episode runs on a new server."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import pytest

from agentgym import InfraError
from agentgym.envs.mock_api.server import _POOL, THREAD_PREFIX, server_status
from agentgym.parsing import format_tool_call
from agentgym.rollouts.scripted import make_policy, run_episode


def crash(server) -> None:
    """Make the server's loop fail as an uncaught error would: it raises out of its thread."""

    def fail() -> None:
        raise SystemExit("injected failure")

    server._loop.call_soon_threadsafe(fail)
    server._thread.join(5)
    assert not server.alive


def server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def test_the_episode_on_a_stopped_server_is_an_infra_error_and_the_next_one_succeeds():
    assert server_status()["leases"] == 0, "an earlier test left a MockAPI env open"
    env = gym.make("agentgym/MockAPI-v0", split="test")
    policy = make_policy(env, "oracle", 0)
    assert run_episode(env, policy, seed=0)["success"]
    env.reset(seed=1)
    env.step(format_tool_call("read_api_docs", {}))
    restarts = server_status()["restarts"]
    crash(_POOL.server)
    started = time.monotonic()
    with pytest.raises(InfraError, match="mock API server stopped"):
        env.step(format_tool_call("http_request", {"method": "GET", "path": "/tickets"}))
    assert time.monotonic() - started < 5  # refused at once: no client timeout
    records = [run_episode(env, policy, seed=seed) for seed in range(3)]
    assert [r["success"] for r in records] == [True] * 3
    assert server_status()["restarts"] == restarts + 1 and server_status()["running"]
    env.close()
    assert server_status() == {"running": False, "port": None, "leases": 0, "sessions": 0, "restarts": restarts + 1}
    assert server_threads() == []
