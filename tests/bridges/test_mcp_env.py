"""agentgym/MCP-v0: a server written with the mcp SDK alone (atlas_mcp_server.py) as a gymnasium
environment, over stdio and streamable HTTP, played by scripts and by the rollout runner."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("mcp")
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.bridges.mcp_env import MCPEpisode
from agentgym.verifiers import RewardResult

ATLAS = str(Path(__file__).with_name("atlas_mcp_server.py"))
TASKS = [
    {"task_id": "atlantis", "prompt": "How many people live in Atlantis?", "answer": 41200},
    {"task_id": "lemuria", "prompt": "How many people live in Lemuria?", "answer": 980},
]


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def atlas_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, ATLAS, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=30)


def test_stdio_server_plays_episodes_with_a_fresh_session_each():
    env = gym.make("agentgym/MCP-v0", server=[sys.executable, ATLAS], verifier="numeric_match", tasks=TASKS)
    try:
        assert [t["function"]["name"] for t in env.unwrapped.tools] == ["population", "lookups"]
        assert env.unwrapped.tools[0]["function"]["parameters"]["required"] == ["city"]
        opening, _ = env.reset(seed=0, options={"task_id": "atlantis"})
        assert opening[1] == {"role": "user", "content": "How many people live in Atlantis?"}
        observation, *_ = env.step(call("population", city="Atlantis") + call("population", city="Mu") + call("population"))
        assert [m["content"] for m in observation] == [
            "41200",
            "Error: Error executing tool population: unknown city 'Mu'",  # the server's error text
            "Error: invalid arguments for population: 'city' is a required property",
        ]
        observation, _, _, _, info = env.step(call("lookups"))
        assert observation[0]["content"] == "2" and info["tool_errors"] == 1 and info["format_errors"] == 1
        _, reward, terminated, _, info = env.step("The answer is 41,200.")
        assert terminated and reward == 1.0 and info["success"]
        env.reset(seed=0, options={"task_id": "lemuria"})
        assert env.step(call("lookups"))[0][0]["content"] == "0"  # a new session: a new server process
        _, reward, terminated, _, _ = env.step("The answer is 41200.")
        assert terminated and reward == 0.0
    finally:
        env.close()


def test_http_server_passes_the_checker_and_runs_under_the_rollout_runner(atlas_url, tiny_model_dir):
    def verify(episode: MCPEpisode) -> RewardResult:
        said = episode.answer is not None and str(episode.task["answer"]) in episode.answer
        return RewardResult(float(said), "the answer names the population" if said else "no population in the answer", passed=said)

    kwargs = {"server": atlas_url, "verifier": verify, "tasks": TASKS}
    env = gym.make("agentgym/MCP-v0", **kwargs)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()

    from agentgym.models import HFBackend, load_model
    from agentgym.rollouts.runner import RolloutConfig, run_rollouts

    backend = HFBackend(*load_model(str(tiny_model_dir), device="cpu", dtype="float32"))

    config = RolloutConfig("agentgym/MCP-v0", task_ids=["atlantis"], group_size=2, max_turns=2, max_new_tokens=12, temperature=1.0, env_kwargs=kwargs)
    episodes = run_rollouts(backend, config)
    assert len(episodes) == 2 and all(e.stop_reason in ("done", "max_turns") for e in episodes)
    for episode in episodes:
        assert sum(episode.trajectory.loss_mask) == sum(len(t["sampled_ids"]) for t in episode.turns)
        assert episode.record["env_id"] == "agentgym/MCP-v0" and episode.record["task_id"] == "atlantis"


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="unknown verifier 'nope'"):
        agentgym.make_env("agentgym/MCP-v0", server=[sys.executable, ATLAS], verifier="nope", tasks=TASKS)
    with pytest.raises(ValueError, match="cannot connect to the MCP server 'no-such-command-here': FileNotFoundError"):
        agentgym.make_env("agentgym/MCP-v0", server="no-such-command-here", verifier="exact_match", tasks=TASKS)
    with pytest.raises(ValueError, match="needs a string 'prompt'"):
        agentgym.make_env("agentgym/MCP-v0", server=[sys.executable, ATLAS], verifier="exact_match", tasks=[{"task_id": "x"}])


def test_agentgym_serve_never_makes_it():
    from agentgym.remote.session import CLIENT_ENV_IDS

    assert "agentgym/MCP-v0" in CLIENT_ENV_IDS
