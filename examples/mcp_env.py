"""Any MCP server as a Gymnasium environment: ``gym.make("agentgym/MCP-v0", server=..., verifier=..., tasks=...)``.

    python examples/mcp_env.py

The server is written here with the ``mcp`` SDK alone (``MCPServer``, FastMCP's successor) and
runs as a stdio subprocess (this file with ``--serve``). agentgym discovers its tools, and the
episode is an ordinary agentgym environment: a model turn with ``<tool_call>`` blocks in, tool
results out, a turn without tool calls as the final answer, rewarded by the reward SDK's
``numeric_match`` against the task's answer. Gymnasium's ``check_env`` passes; the rollout runner
and the trainer take it like any other environment id.
"""

from __future__ import annotations

import sys

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401 - registers the environments

EXCHANGE_RATES = {("EUR", "USD"): 1.25, ("USD", "JPY"): 151.5, ("GBP", "EUR"): 1.5}  # invented: only the server knows them
TASKS = [
    {"task_id": "eur-usd", "prompt": "How many USD is 80 EUR? Reply with the number.", "answer": 100},
    {"task_id": "gbp-eur", "prompt": "How many EUR is 12 GBP? Reply with the number.", "answer": 18},
]


def serve() -> None:
    """The MCP server: written with the mcp SDK, nothing of agentgym."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    app = MCPServer("exchange")

    @app.tool()
    def rate(source: str, target: str) -> float:
        """The exchange rate from one currency to another.

        Args:
            source: currency code, e.g. EUR.
            target: currency code, e.g. USD.
        """
        if (source, target) not in EXCHANGE_RATES:
            raise ToolError(f"no rate from {source} to {target}")
        return EXCHANGE_RATES[(source, target)]

    app.run()


def main() -> None:
    # The server is stateless, so one MCP session can serve every episode (the default opens a new one per episode).
    env = gym.make("agentgym/MCP-v0", server=[sys.executable, __file__, "--serve"], verifier="numeric_match", tasks=TASKS, session_per_episode=False)
    print("tools discovered:", [t["function"]["name"] for t in env.unwrapped.tools])
    check_env(env.unwrapped, skip_render_check=True)
    print("gymnasium's check_env passed")
    messages, _ = env.reset(seed=0, options={"task_id": "eur-usd"})
    print("user:", messages[-1]["content"])
    for turn in [
        '<tool_call>{"name": "rate", "arguments": {"source": "EUR", "target": "GBP"}}</tool_call>',
        '<tool_call>{"name": "rate", "arguments": {"source": "EUR", "target": "USD"}}</tool_call>',
        "The answer is 100.",
    ]:
        observation, reward, terminated, _, info = env.step(turn)
        print(f"assistant: {turn}\n  -> {[m['content'] for m in observation]}")
    print(f"reward={reward} terminated={terminated}: {info['reward_reason']}")
    env.close()


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main()
