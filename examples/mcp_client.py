"""Any agentgym environment as an MCP server, driven by the official ``mcp`` SDK's client.

    python examples/mcp_client.py

Starts ``agentgym mcp agentgym/ToolMath-v0`` as a subprocess speaking MCP over stdio (one session,
one episode), lists its tools as a harness would (hiding the two ``agentgym_`` control tools from
the model), starts a seeded episode with ``agentgym_reset``, plays the environment's scripted
oracle through MCP calls (``send_message`` for a turn without tool calls), and reads the reward
with ``agentgym_reward``. With ``--http`` the same runs over streamable HTTP instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import anyio
from mcp import Client, StdioServerParameters

from agentgym.bridges.mcp_server import CONTROL_META, MESSAGE_TOOL, RESET_TOOL, REWARD_TOOL, STEP_META
from agentgym.envs import make_env
from agentgym.parsing import parse_action
from agentgym.rollouts.scripted import make_policy, run_episode

ENV_ID = "agentgym/ToolMath-v0"
SEED = 7


def oracle_calls() -> tuple[str, list[tuple[str, dict]]]:
    """The oracle's episode in process, as single calls: the 'agent' this example drives over MCP."""
    env = make_env(ENV_ID)
    record = run_episode(env, make_policy(env, "oracle", SEED), seed=SEED)
    env.close()
    calls = []
    for message in record["messages"]:
        if message["role"] == "assistant":
            parsed = parse_action(message["content"])
            calls += [(c.name, c.arguments) for c in parsed.tool_calls] or [(MESSAGE_TOOL, {"content": parsed.content})]
    return record["task_id"], calls


async def play(client: Client) -> None:
    tools = (await client.list_tools()).tools
    shown = [t.name for t in tools if not (t.meta or {}).get(CONTROL_META)]
    print(f"tools for the model: {', '.join(shown)}")
    task_id, calls = oracle_calls()
    opening = json.loads((await client.call_tool(RESET_TOOL, {"seed": SEED, "task_id": task_id})).content[0].text)
    print(f"episode {opening['task_id']} (seed {opening['seed']}): {opening['messages'][-1]['content']}")
    for name, arguments in calls:
        result = await client.call_tool(name, arguments)
        print(f"  {name}({json.dumps(arguments)}) -> {result.content[0].text[:80]}")
        if result.meta[STEP_META]["terminated"]:
            break
    reward = json.loads((await client.call_tool(REWARD_TOOL, {})).content[0].text)
    print(f"reward {reward['reward']} (success {reward['success']}): {reward['reward_reason']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    args = parser.parse_args()
    command = [sys.executable, "-m", "agentgym.cli", "mcp", ENV_ID]
    if not args.http:
        anyio.run(_stdio, command)
        return
    server = subprocess.Popen([*command, "--http", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().split(" at ", 1)[1].split()[0]  # "agentgym: serving ... at URL; ..."
        anyio.run(_http, url)
    finally:
        server.terminate()
        server.wait()


async def _stdio(command: list[str]) -> None:
    async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
        await play(client)


async def _http(url: str) -> None:
    async with Client(url) as client:
        await play(client)


if __name__ == "__main__":
    main()
