"""Bridges to the agent ecosystem: environments over the Model Context Protocol (MCP), MCP servers
as environments, and an OpenAI-compatible endpoint that records token-exact trajectories.

- :mod:`agentgym.bridges.mcp_server`: any registered environment as an MCP server (``agentgym mcp``).
- :mod:`agentgym.bridges.mcp_env`: any MCP server as a ``gymnasium.Env`` (``agentgym/MCP-v0``).
- :mod:`agentgym.bridges.proxy`: ``/v1/chat/completions`` in front of a generation backend,
  recording prompt and sampled token ids per episode (``agentgym proxy``).

Each needs the ``bridges`` extra (``pip install 'agentgym[bridges]'``: the ``mcp`` SDK and
``openai``); importing this package alone needs nothing.
"""
