"""Any registered environment as a Model Context Protocol (MCP) server (``agentgym mcp``).

One MCP session plays one seeded episode. Its tools are the environment's tools (their JSON
Schemas as the MCP input schemas), plus:

- ``send_message`` (``content``): a turn without tool calls, i.e. a message to the simulated user;
  its result is the user's reply (TauRetail-v0's customer, the other environments' nudge);
- ``agentgym_reset`` (``seed``, ``task_id``, both optional): starts the episode and returns its
  opening messages as JSON. Allowed once per session and only before the first environment call;
  a session that calls an environment tool first starts with the server's defaults;
- ``agentgym_reward``: the episode's reward and its breakdown as JSON, once the episode has ended
  (refused before, so a model cannot probe its own reward).

The two ``agentgym_`` tools carry ``_meta: {"agentgym/control": true}``: a harness hides them from
its model. Every call is one environment step (one assistant turn holding that one call), and its
result is exactly the text of the message ``env.step`` observed; ``isError`` is set when the step
counted a format or tool error, and the result's ``_meta["agentgym/step"]`` tells the harness
whether the episode ended (``terminated``, ``truncated``, ``turn``).

Over stdio the process is the session. Over streamable HTTP each MCP session (``Mcp-Session-Id``)
holds its own environment, closed when the client ends the session or after ``idle_timeout_s``
without a call; with a token, every request needs ``Authorization: Bearer <token>``. Over HTTP the
server answers ``server/discover`` with the handshake-era protocol versions only, so clients open
a stateful session (the stateless 2026 era has no session to hold an episode); over stdio either
era works.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import jsonschema
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from agentgym.bridges.asgi import ASGIApp, require_token, serve
from agentgym.bridges.stdio import pipe_stdio, stdin_is_pipe
from agentgym.env import agent_env
from agentgym.envs.registration import make_env

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from agentgym.env import MadeEnv

__all__ = ["CONTROL_META", "MESSAGE_TOOL", "RESET_TOOL", "REWARD_TOOL", "STEP_META", "EnvMCPServer", "EpisodeResult", "EpisodeSession"]

RESET_TOOL = "agentgym_reset"
REWARD_TOOL = "agentgym_reward"
MESSAGE_TOOL = "send_message"
CONTROL_META = "agentgym/control"
"""``_meta`` key marking the tools a harness calls itself and hides from its model."""
STEP_META = "agentgym/step"
"""``_meta`` key of a tool result: ``{"terminated", "truncated", "turn"}`` of the step it made."""

_RESET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seed": {"type": "integer", "minimum": 0, "description": "the episode's seed (default: the server's)"},
        "task_id": {"type": "string", "description": "play this task (default: drawn with the seed)"},
    },
    "additionalProperties": False,
}
_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"content": {"type": "string", "description": "what to say to the user"}},
    "required": ["content"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class EpisodeResult:
    """What ``agentgym_reward`` answers once the episode has ended.

    Attributes:
        task_id, seed: the episode played.
        reward: the environment's reward.
        success: its pass verdict.
        reward_components: the reward's breakdown.
        reward_reason: its explanation.
        turns: environment steps (tool calls and messages) played.
        terminated, truncated: how it ended.
    """

    task_id: str
    seed: int | None
    reward: float
    success: bool
    reward_components: dict[str, float]
    reward_reason: str
    turns: int
    terminated: bool
    truncated: bool


@dataclass(frozen=True)
class ToolAnswer:
    """One tool call's answer: the text, whether it is an error, and the step's ``_meta``."""

    text: str
    is_error: bool = False
    step: dict[str, Any] | None = None

    def to_mcp(self) -> types.CallToolResult:
        meta = {STEP_META: self.step} if self.step is not None else None
        return types.CallToolResult(content=[types.TextContent(type="text", text=self.text)], is_error=self.is_error, _meta=meta)


_STATELESS_REFUSAL = (
    "Error: this server holds one episode per MCP session; connect with the initialize handshake (the mcp SDK's Client(..., mode='legacy'), or mode='auto')"
)


class EpisodeSession:
    """The episode of one MCP session: an environment, reset once, stepped one call at a time.

    Args:
        env: the environment (closed by :meth:`close`).
        seed: the seed used when the client does not choose one.
        task_id: the task used when the client does not choose one (None: drawn with the seed).
    """

    def __init__(self, env: MadeEnv, *, seed: int, task_id: str | None) -> None:
        self.env = env
        self.seed, self.task_id = seed, task_id
        self.started = False
        self.over = False
        self.last_used = time.monotonic()
        self._lock = threading.Lock()  # one call at a time, whatever the transport does

    def call(self, name: str, arguments: dict[str, Any]) -> ToolAnswer:
        """Answer one ``tools/call`` (blocking: run it off the event loop)."""
        with self._lock:
            self.last_used = time.monotonic()
            if name == RESET_TOOL:
                return self._reset(arguments)
            if name == REWARD_TOOL:
                return self._result()
            if not self.started:
                self._start(self.seed, self.task_id)
            if self.over:
                return ToolAnswer(f"Error: the episode is over; {REWARD_TOOL} reads its reward", is_error=True)
            if name == MESSAGE_TOOL:
                problem = _schema_problem(_MESSAGE_SCHEMA, arguments)
                if problem is not None:
                    return ToolAnswer(f"Error: invalid arguments for {MESSAGE_TOOL}: {problem}", is_error=True)
                action: dict[str, Any] = {"role": "assistant", "content": arguments["content"]}
            else:
                action = {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "call", "type": "function", "function": {"name": name, "arguments": arguments}}],
                }
            observation, _, terminated, truncated, info = self.env.step(action)
            self.over = bool(terminated or truncated)
            step = {"terminated": bool(terminated), "truncated": bool(truncated), "turn": int(info["turn"])}
            is_error = bool(info["turn_format_errors"] or info["turn_tool_errors"])
            return ToolAnswer("\n".join(str(m["content"]) for m in observation), is_error=is_error, step=step)

    def close(self) -> None:
        with self._lock:
            self.env.close()

    def _reset(self, arguments: dict[str, Any]) -> ToolAnswer:
        if self.started:
            return ToolAnswer("Error: the episode has already begun; one MCP session plays one episode, so open a new session for another", is_error=True)
        problem = _schema_problem(_RESET_SCHEMA, arguments)
        if problem is not None:
            return ToolAnswer(f"Error: invalid arguments for {RESET_TOOL}: {problem}", is_error=True)
        base = agent_env(self.env)
        task_id = arguments.get("task_id", self.task_id)
        if task_id is not None and task_id not in base.task_ids:  # checked first: a reset that raises leaves gymnasium's checker broken
            return ToolAnswer(f"Error: unknown task_id {task_id!r} for {self.env.spec.id if self.env.spec else 'this environment'}", is_error=True)
        opening = self._start(arguments.get("seed", self.seed), task_id)
        assert base.task is not None
        return ToolAnswer(json.dumps({"task_id": base.task["task_id"], "seed": self._episode_seed, "messages": opening}, ensure_ascii=False))

    def _start(self, seed: int, task_id: str | None) -> list[Any]:
        opening, _ = self.env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
        self.started, self._episode_seed = True, seed
        return opening

    def _result(self) -> ToolAnswer:
        if not self.over:
            return ToolAnswer("Error: the episode has not ended yet; its reward is readable once it ends", is_error=True)
        record = agent_env(self.env).episode_record()
        result = EpisodeResult(
            task_id=record["task_id"],
            seed=record["seed"],
            reward=float(record["reward"]),
            success=bool(record["success"]),
            reward_components={k: float(v) for k, v in record["reward_components"].items()},
            reward_reason=str(record["reward_reason"]),
            turns=int(record["turns"]),
            terminated=bool(record["terminated"]),
            truncated=bool(record["truncated"]),
        )
        return ToolAnswer(json.dumps(asdict(result), ensure_ascii=False))


class EnvMCPServer:
    """Serves one environment id over MCP, one episode per session.

    Args:
        env_id: a registered environment id.
        env_kwargs: its ``gym.make`` arguments.
        seed: the seed of an episode whose client does not choose one.
        task_id: the task of such an episode (None: drawn with the seed).
        token: over HTTP, the bearer token every request must carry.
        max_sessions: over HTTP, open sessions at most.
        idle_timeout_s: over HTTP, a session without a call for this long is closed.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        seed: int = 0,
        task_id: str | None = None,
        token: str | None = None,
        max_sessions: int = 64,
        idle_timeout_s: float = 600.0,
    ) -> None:
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.seed, self.task_id = seed, task_id
        self.token = token
        self.max_sessions, self.idle_timeout_s = max_sessions, idle_timeout_s
        first = make_env(env_id, **self.env_kwargs)
        base = agent_env(first)
        if task_id is not None and task_id not in base.task_ids:
            first.close()
            raise ValueError(f"unknown task id {task_id!r} for {env_id}")
        names = [t["function"]["name"] for t in base.tools]
        clash = {MESSAGE_TOOL, RESET_TOOL, REWARD_TOOL} & set(names)
        if clash:
            first.close()
            raise ValueError(f"{env_id} has a tool named {', '.join(sorted(clash))}, which the MCP bridge reserves")
        self.tools = [
            types.Tool(name=t["function"]["name"], description=t["function"]["description"], input_schema=t["function"]["parameters"]) for t in base.tools
        ]
        self.tools.append(
            types.Tool(
                name=MESSAGE_TOOL, description="Send a message to the user (a turn without tool calls); returns the user's reply.", input_schema=_MESSAGE_SCHEMA
            )
        )
        control = {CONTROL_META: True}
        self.tools.append(
            types.Tool(
                name=RESET_TOOL,
                description="Start the episode (once, before any other call); returns its opening messages.",
                input_schema=_RESET_SCHEMA,
                _meta=control,
            )
        )
        self.tools.append(
            types.Tool(
                name=REWARD_TOOL, description="The ended episode's reward and its breakdown.", input_schema={"type": "object", "properties": {}}, _meta=control
            )
        )
        self._spare: MadeEnv | None = first  # the environment of the first session
        self._sessions: dict[str | None, EpisodeSession] = {}
        self._http = False  # over HTTP, an episode needs a stateful session (see http_app)
        self.server: Server[Any] = Server(
            "agentgym",
            version=_version(),
            instructions=f"{env_id}: one MCP session plays one episode",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # The SDK's default OpenTelemetry middleware opens a span per message even with no exporter
        # installed, a sizeable share of a call's round trip; append it back to trace a server.
        self.server.middleware = []

    # -- MCP handlers --------------------------------------------------------------------------

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        key = _session_key(ctx)
        if self._http and key is None:
            return ToolAnswer(_STATELESS_REFUSAL, is_error=True).to_mcp()
        session = await self._session(key)
        if not self._http:  # stdio: one client answered in order, and a thread hop costs more than most steps
            return session.call(params.name, dict(params.arguments or {})).to_mcp()
        answer = await anyio.to_thread.run_sync(session.call, params.name, dict(params.arguments or {}))
        return answer.to_mcp()

    async def _discover(self, ctx: ServerRequestContext[Any], params: types.RequestParams | None) -> types.DiscoverResult:
        # Handshake-era versions only: clients fall back to initialize and a stateful session.
        return types.DiscoverResult(supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS), capabilities=self.server.get_capabilities())

    async def _session(self, key: str | None) -> EpisodeSession:
        session = self._sessions.get(key)
        if session is None:
            await self._close_idle()
            env, self._spare = self._spare, None
            if env is None:
                env = await anyio.to_thread.run_sync(functools.partial(make_env, self.env_id, **self.env_kwargs))
            if key in self._sessions:  # a concurrent first call of the same session made its environment meanwhile
                await anyio.to_thread.run_sync(env.close)
                return self._sessions[key]
            session = self._sessions[key] = EpisodeSession(env, seed=self.seed, task_id=self.task_id)
        return session

    async def _close_idle(self) -> None:
        cutoff = time.monotonic() - self.idle_timeout_s
        for key in [k for k, s in self._sessions.items() if s.last_used < cutoff]:
            await self.end_session(key)

    async def end_session(self, key: str | None) -> None:
        """Close the environment of session ``key`` (its client ended it, or it went idle)."""
        session = self._sessions.pop(key, None)
        if session is not None:
            await anyio.to_thread.run_sync(session.close)

    def close(self) -> None:
        """Close every session's environment."""
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        if self._spare is not None:
            self._spare.close()
            self._spare = None

    # -- transports ----------------------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve one session over this process's stdin and stdout until the client closes them."""
        if not stdin_is_pipe():  # a file or a terminal: the SDK's own transport reads it
            async with stdio_server() as (read_stream, write_stream):
                await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
            return
        async with pipe_stdio() as (lines, writer), stdio_server(cast(Any, lines), cast(Any, writer)) as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    def http_app(self, host: str = "127.0.0.1") -> ASGIApp:
        """The streamable-HTTP ASGI app (path ``/mcp``), behind the token check when one is set."""
        # Over HTTP the 2026 protocol era is stateless (no session to hold an episode): discover
        # answers with the handshake-era versions, so clients fall back to a stateful session.
        self._http = True
        self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
        inner = self.server.streamable_http_app(host=host, max_sessions=self.max_sessions, session_idle_timeout=self.idle_timeout_s)

        async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
            await inner(scope, receive, send)
            if scope["type"] == "http" and scope["method"] == "DELETE":  # the client ended its session
                ended = next((v for k, v in scope["headers"] if k.lower() == b"mcp-session-id"), None)
                if ended is not None:
                    await self.end_session(ended.decode("latin-1"))

        return require_token(app, self.token)

    async def run_http(self, host: str, port: int, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve streamable HTTP on ``host:port`` (0: a free port) until SIGINT/SIGTERM; ``on_ready`` gets the URL."""
        await serve(self.http_app(host), host, port, "/mcp", on_ready)


def _session_key(ctx: ServerRequestContext[Any]) -> str | None:
    """The HTTP session id of a request; None over stdio (the process is the session)."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def _schema_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    return None if error is None else error.message


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentgym")
    except PackageNotFoundError:
        return "0"
