"""agentgym mcp: every environment over MCP, driven by the official mcp SDK's client, gives the tool
outputs and the reward of the same calls in process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentgym.bridges.mcp_server import CONTROL_META, MESSAGE_TOOL, RESET_TOOL, REWARD_TOOL, STEP_META, EnvMCPServer
from agentgym.cli import main
from agentgym.envs import make_env
from agentgym.parsing import parse_action
from agentgym.rollouts.scripted import make_policy, run_episode

KWARGS = {"max_turns": 100}  # one MCP call is one turn; the oracles' multi-call turns need more
Step = tuple[str, dict[str, Any]]


def oracle_steps(env_id: str, seed: int) -> tuple[str, list[Step], list[str], float]:
    """The oracle's episode as single calls, with each call's text and the reward played in process one call per step."""
    env = make_env(env_id, **KWARGS)
    try:
        record = run_episode(env, make_policy(env, "oracle", seed), seed=seed)
        steps: list[Step] = []
        for message in record["messages"]:
            if message["role"] == "assistant":
                parsed = parse_action(message if "tool_calls" in message else message["content"])
                steps += [(c.name, c.arguments) for c in parsed.tool_calls] or [(MESSAGE_TOOL, {"content": parsed.content})]
        env.reset(seed=seed, options={"task_id": record["task_id"]})
        texts, reward = [], 0.0
        for name, arguments in steps:
            if name == MESSAGE_TOOL:
                action: Any = arguments["content"]
            else:
                action = f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
            observation, reward, _, _, _ = env.step(action)
            texts.append("\n".join(m["content"] for m in observation))
        assert reward == record["reward"] == 1.0
        return record["task_id"], steps, texts, float(reward)
    finally:
        env.close()


async def play(client: Client, task_id: str, seed: int, steps: list[Step]) -> tuple[list[str], dict[str, Any]]:
    opening = await client.call_tool(RESET_TOOL, {"seed": seed, "task_id": task_id})
    assert not opening.is_error and json.loads(opening.content[0].text)["task_id"] == task_id
    texts = []
    for name, arguments in steps:
        result = await client.call_tool(name, arguments)
        texts.append(result.content[0].text)
    assert result.meta[STEP_META]["terminated"]
    reward = await client.call_tool(REWARD_TOOL, {})
    assert not reward.is_error
    return texts, json.loads(reward.content[0].text)


def served(env_id: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "agentgym.cli", "mcp", env_id, "--env-kwargs", json.dumps(KWARGS), *args]


def test_every_environment_in_process(env_id):
    """The SDK's in-process connection: each registered environment's oracle calls through MCP."""
    task_id, steps, expected, reward = oracle_steps(env_id, seed=1)
    server = EnvMCPServer(env_id, KWARGS)

    async def main() -> tuple[list[str], dict[str, Any]]:
        async with Client(server.server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            env_tools = agent_tools(env_id)
            assert {n: tools[n].input_schema for n in env_tools} == env_tools
            assert tools[RESET_TOOL].meta == {CONTROL_META: True} and tools[MESSAGE_TOOL].meta is None
            return await play(client, task_id, 1, steps)

    try:
        texts, result = anyio.run(main)
    finally:
        server.close()
    assert texts == expected
    assert result["reward"] == reward and result["success"] and result["task_id"] == task_id and result["seed"] == 1


def agent_tools(env_id: str) -> dict[str, Any]:
    env = make_env(env_id)
    try:
        return {t["function"]["name"]: t["function"]["parameters"] for t in env.unwrapped.tools}
    finally:
        env.close()


def test_stdio_gives_the_in_process_outputs_and_reward():
    env_id = "agentgym/TauRetail-v0"
    task_id, steps, expected, reward = oracle_steps(env_id, seed=2)

    async def main() -> tuple[list[str], dict[str, Any]]:
        async with Client(StdioServerParameters(command=served(env_id)[0], args=served(env_id)[1:])) as client:
            return await play(client, task_id, 2, steps)

    texts, result = anyio.run(main)
    assert texts == expected and result["reward"] == reward


def test_http_with_a_token_two_sessions_two_episodes():
    """Streamable HTTP: the token is required, and each session holds its own episode."""
    env_id = "agentgym/Refund-v0"
    task_a, steps_a, expected_a, reward_a = oracle_steps(env_id, seed=0)
    task_b, steps_b, expected_b, _ = oracle_steps(env_id, seed=1)
    assert task_a != task_b
    process = subprocess.Popen(
        served(env_id, "--http", "127.0.0.1:0", "--token-env", "MCP_TEST_TOKEN"),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "MCP_TEST_TOKEN": "s3cret"},
    )
    try:
        url = process.stdout.readline().split(" at ", 1)[1].split()[0]

        async def main() -> None:
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}) as http:
                async with Client(streamable_http_client(url, http_client=http)) as a, Client(streamable_http_client(url, http_client=http)) as b:
                    await a.call_tool(RESET_TOOL, {"seed": 0, "task_id": task_a})
                    await b.call_tool(RESET_TOOL, {"seed": 5, "task_id": task_b})
                    again = await a.call_tool(RESET_TOOL, {"seed": 1})
                    assert again.is_error and "already begun" in again.content[0].text
                    early = await a.call_tool(REWARD_TOOL, {})
                    assert early.is_error and "not ended" in early.content[0].text
                    texts_a = [(await a.call_tool(n, args)).content[0].text for n, args in steps_a]
                    texts_b = [(await b.call_tool(n, args)).content[0].text for n, args in steps_b]
                    assert texts_a == expected_a and texts_b == expected_b
                    result = json.loads((await a.call_tool(REWARD_TOOL, {})).content[0].text)
                    assert result["reward"] == reward_a and result["task_id"] == task_a
                    over = await a.call_tool(steps_a[0][0], steps_a[0][1])
                    assert over.is_error and "episode is over" in over.content[0].text
                async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as stateless:
                    refusal = await stateless.call_tool(RESET_TOOL, {})
                    assert refusal.is_error and "one episode per MCP session" in refusal.content[0].text
            async with httpx2.AsyncClient() as http:
                refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
                assert refused.status_code == 401

        anyio.run(main)
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_bad_arguments_are_clear_errors():
    server = EnvMCPServer("agentgym/SQL-v0")

    async def main() -> None:
        async with Client(server.server) as client:
            bad = await client.call_tool(RESET_TOOL, {"seed": -1})
            assert bad.is_error and "invalid arguments for agentgym_reset" in bad.content[0].text
            unknown = await client.call_tool(RESET_TOOL, {"task_id": "nope"})
            assert unknown.is_error and "unknown task_id 'nope'" in unknown.content[0].text
            wrong = await client.call_tool("sql", {"query": 3})
            assert wrong.is_error and wrong.content[0].text.startswith("Error: invalid arguments for sql")
            assert wrong.meta[STEP_META] == {"terminated": False, "truncated": False, "turn": 1}

    try:
        anyio.run(main)
    finally:
        server.close()
    with pytest.raises(ValueError, match="unknown task id"):
        EnvMCPServer("agentgym/SQL-v0", task_id="nope")


def test_cli_bad_input_is_one_line(capsys):
    assert main(["mcp", "agentgym/SQL-v0", "--http", "nowhere"]) == 2
    assert capsys.readouterr().err == "agentgym: error: --http takes HOST:PORT (e.g. 127.0.0.1:8000), got 'nowhere'\n"
    assert main(["mcp", "agentgym/SQL-v0", "--token-env", "X"]) == 2
    assert "applies to --http only" in capsys.readouterr().err
    assert main(["mcp", "agentgym/Nope-v0"]) == 2
    assert capsys.readouterr().err.startswith("agentgym: error: unknown environment 'agentgym/Nope-v0'")
