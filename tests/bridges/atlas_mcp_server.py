"""A tiny MCP server written with the mcp SDK's MCPServer (FastMCP), not with agentgym: invented
city facts, so an agent must call it. Its ``lookups`` counter lives in the process, so a new stdio
session (a new process) starts from zero.

Run: ``python atlas_mcp_server.py`` (stdio) or ``python atlas_mcp_server.py --http PORT``.
"""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

POPULATION = {"Atlantis": 41200, "Lemuria": 980, "Hyperborea": 5077}
app = MCPServer("atlas")
made = 0


@app.tool()
def population(city: str) -> str:
    """The population of a city.

    Args:
        city: the city's name.
    """
    global made
    made += 1
    if city not in POPULATION:
        raise ToolError(f"unknown city {city!r}")
    return str(POPULATION[city])


@app.tool()
def lookups() -> int:
    """How many population lookups this server process made."""
    return made


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
