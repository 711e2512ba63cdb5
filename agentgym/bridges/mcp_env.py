"""Any MCP server as an agentgym environment: ``gym.make("agentgym/MCP-v0", server=..., verifier=..., tasks=...)``.

The tools are discovered from the server (``tools/list``; tools marked ``_meta["agentgym/control"]``
are left out) and called over MCP; everything else is :class:`agentgym.ToolEnv`'s: the action is a
model turn, tool-call parsing, JSON Schema validation of the arguments, error messages and counts,
episode records. A turn without tool calls is the agent's final answer and ends the episode; the
reward is the verifier's verdict on it, from the reward SDK (:mod:`agentgym.verifiers`).

The MCP client runs on its own event loop in a background thread, so the environment is an
ordinary synchronous ``gymnasium.Env`` (the rollout runner steps it from its thread pool).
"""

from __future__ import annotations

import importlib
import json
import shlex
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import anyio.from_thread
import mcp_types as types
from mcp import Client, StdioServerParameters

from agentgym.env import Message, ToolEnv
from agentgym.parsing import ParsedAction
from agentgym.tools import Tool, ToolError
from agentgym.verifiers import RewardResult, exact_match, math_match, normalized_match, numeric_match

__all__ = ["DEFAULT_SYSTEM_PROMPT", "VERIFIERS", "MCPEnv", "MCPEpisode", "Verifier", "resolve_verifier"]

DEFAULT_SYSTEM_PROMPT = "You solve the user's task with the tools provided. When you are done, reply with your final answer and no tool call."


@dataclass(frozen=True)
class MCPEpisode:
    """What a verifier reads once the episode has ended.

    Attributes:
        task: the task record (``task_id``, ``prompt``, and whatever the verifier needs, e.g. ``answer``).
        answer: the final answer (the text of the turn without tool calls); None when the episode was cut.
        messages: the whole conversation.
    """

    task: dict[str, Any]
    answer: str | None
    messages: list[Message]


Verifier = Callable[[MCPEpisode], RewardResult]

VERIFIERS: dict[str, Callable[..., RewardResult]] = {
    "exact_match": exact_match,
    "normalized_match": normalized_match,
    "numeric_match": numeric_match,
    "math_match": math_match,
}
"""Verifiers named by a string: each compares the final answer with the task's ``answer``."""


def resolve_verifier(verifier: str | Verifier) -> Verifier:
    """A verifier from a callable, a name in :data:`VERIFIERS`, or ``"module:function"`` (a :data:`Verifier`)."""
    if callable(verifier):
        return verifier
    if verifier in VERIFIERS:
        check = VERIFIERS[verifier]

        def against_answer(episode: MCPEpisode) -> RewardResult:
            if episode.answer is None:
                return RewardResult(0.0, "no final answer: the episode was cut", passed=False)
            if "answer" not in episode.task:
                raise ValueError(f"task {episode.task['task_id']!r} has no 'answer' for {verifier}")
            return check(episode.answer, episode.task["answer"])

        return against_answer
    module, sep, name = verifier.partition(":")
    if not sep:
        raise ValueError(f"unknown verifier {verifier!r}; use one of {', '.join(VERIFIERS)}, 'module:function' or a callable")
    found = getattr(importlib.import_module(module), name, None)
    if not callable(found):
        raise ValueError(f"{verifier!r} is not a callable")
    return found


def root_cause(exc: BaseException) -> str:
    """The innermost error of ``exc`` (the SDK's task groups wrap failures in exception groups), as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


# Tools are interned for the life of the process: ToolEnv caches each tool's schema validator by
# id(), so a Tool that was freed and whose id came back would validate with another's schema.
_TOOLS: dict[tuple[str, str, str], Tool] = {}


def _interned_tool(name: str, description: str, parameters: dict[str, Any]) -> Tool:
    key = (name, description, json.dumps(parameters, sort_keys=True))
    if key not in _TOOLS:
        _TOOLS[key] = Tool(name=name, description=description, parameters=parameters, fn=lambda env, **arguments: env.call_server(name, arguments))
    return _TOOLS[key]


class MCPEnv(ToolEnv):
    """An MCP server's tools as a multi-turn tool environment, rewarded by a verifier.

    ## Description

    Wraps any Model Context Protocol server: a command speaking MCP over stdio, or a streamable
    HTTP URL. Each task is a prompt for the agent; the agent calls the server's tools and ends
    the episode with a turn without tool calls, its final answer.

    ## Action Space

    One assistant turn (text with ``<tool_call>`` blocks, or an OpenAI-style message).

    ## Observation Space

    The tool results (the text content of each MCP result; an MCP error result becomes an
    ``Error: ...`` message counted in ``tool_errors``).

    ## Rewards

    The verifier's score on the final answer, given when the episode ends.

    ## Starting State

    A system prompt (the task's ``system``, else :data:`DEFAULT_SYSTEM_PROMPT`) and the task's
    ``prompt`` as the user's message. With ``session_per_episode`` (the default) each episode
    opens a new MCP session, so a stateful server starts every episode fresh.

    ## Episode End

    Terminated by a turn without tool calls; truncated after ``max_turns`` turns.

    ## Arguments

    - ``server``: the command (a string, split like a shell does, or a list) or an ``http(s)://`` URL.
    - ``verifier``: a name in ``VERIFIERS`` (compares with the task's ``answer``), ``"module:function"``, or a callable taking an :class:`MCPEpisode`.
    - ``tasks``: a JSONL path or a list of task dicts (``task_id``, ``prompt``, optional ``system``).
    - ``headers``: HTTP headers (e.g. ``{"Authorization": "Bearer ..."}``); ``timeout_s``: per call.
    - ``session_per_episode``: open a new MCP session at every reset (default True).
    - the shared ``task_ids``, ``max_turns``, ``max_tool_calls``, ``render_mode``.

    ## Version History

    - v0: first version.
    """

    task_family: ClassVar[str] = "mcp"
    default_max_turns: ClassVar[int] = 10

    def __init__(
        self,
        *,
        server: str | Sequence[str],
        verifier: str | Verifier,
        tasks: str | Path | Sequence[dict[str, Any]],
        headers: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        session_per_episode: bool = True,
        **kwargs: Any,
    ) -> None:
        self._verifier = resolve_verifier(verifier)
        self._server = server
        self._headers = dict(headers or {})
        self._timeout_s = float(timeout_s)
        self._session_per_episode = session_per_episode
        self._exit = ExitStack()
        self._session: AbstractContextManager[Client] | None = None
        self._client: Client | None = None
        self._answer: str | None = None
        self._fresh = False  # the open session has played no episode yet
        super().__init__(tasks=tasks, **kwargs)
        for task in self.tasks:
            if not isinstance(task.get("prompt"), str):
                raise ValueError(f"task {task['task_id']!r} needs a string 'prompt'")
        try:
            self._portal = self._exit.enter_context(anyio.from_thread.start_blocking_portal())
            self._connect()
            listed = self._portal.call(self._call, lambda client: client.list_tools())
        except Exception as exc:  # noqa: BLE001 - whatever failed (a missing command, a refused connection), one clear error
            self.close()
            raise ValueError(f"cannot connect to the MCP server {server!r}: {root_cause(exc)}") from None
        except BaseException:
            self.close()
            raise
        offered = [t for t in listed.tools if not (t.meta or {}).get("agentgym/control")]
        self._tools = {t.name: _interned_tool(t.name, t.description or "", dict(t.input_schema)) for t in offered}

    # -- the MCP connection ----------------------------------------------------------------------

    def _connect(self) -> None:
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = self._client = None
        session = self._portal.wrap_async_context_manager(Client(self._transport(), read_timeout_seconds=self._timeout_s))
        self._client = session.__enter__()
        self._session, self._fresh = session, True  # only a session that opened is closed

    def _transport(self) -> Any:
        server = self._server
        if isinstance(server, str) and server.startswith(("http://", "https://")):
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=self._headers, timeout=self._timeout_s)
            return streamable_http_client(server, http_client=http)
        command = shlex.split(server) if isinstance(server, str) else [str(part) for part in server]
        if not command:
            raise ValueError("server is empty: give a command or an http(s):// URL")
        return StdioServerParameters(command=command[0], args=command[1:])

    async def _call(self, request: Callable[[Client], Any]) -> Any:
        assert self._client is not None
        return await request(self._client)

    def call_server(self, name: str, arguments: dict[str, Any]) -> str:
        """Call tool ``name`` on the server; its text, or :class:`ToolError` for an MCP error result."""
        try:
            result: types.CallToolResult = self._portal.call(self._call, lambda client: client.call_tool(name, arguments))
        except Exception as exc:  # noqa: BLE001 - the connection or the server failed: the model reads why, the episode goes on
            raise ToolError(f"the MCP server failed: {root_cause(exc)}") from None
        text = "\n".join(block.text if isinstance(block, types.TextContent) else f"[{block.type} content]" for block in result.content)
        if result.is_error:
            raise ToolError(text)
        return text

    def close(self) -> None:
        if self._session is not None:
            session, self._session, self._client = self._session, None, None
            session.__exit__(None, None, None)
        self._exit.close()
        super().close()

    # -- the ToolEnv hooks ------------------------------------------------------------------------

    def setup_episode(self, task: Any) -> list[Message]:
        if self._session_per_episode and not self._fresh:
            self._connect()
        self._fresh = False
        self._answer = None
        return [{"role": "system", "content": task.get("system", DEFAULT_SYSTEM_PROMPT)}, {"role": "user", "content": task["prompt"]}]

    def respond(self, parsed: ParsedAction) -> list[Message]:
        self._answer = parsed.content
        return []

    def is_done(self) -> bool:
        return self._answer is not None

    def compute_reward(self) -> RewardResult:
        assert self.task is not None
        return self._verifier(MCPEpisode(task=dict(self.task), answer=self._answer, messages=[m.copy() for m in self._messages]))
