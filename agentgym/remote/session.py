"""What a session does with its environment, whatever carries the requests (WebSocket or Ray).

:func:`environment_for` makes the environment a ``make`` request asks for and :func:`hello`
answers it; :func:`answer` answers every other request of :mod:`agentgym.remote.protocol`
(``close`` excepted, which the transport handles); :func:`error_reply` turns an exception into
the protocol's error reply.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentgym.envs.registration import make_env
from agentgym.remote.protocol import ERROR_TYPES, PROTOCOL, ProtocolError

if TYPE_CHECKING:
    from agentgym.env import MadeEnv
    from agentgym.remote.arguments import ClientArguments

_log = logging.getLogger("agentgym.remote")

__all__ = ["CLIENT_ENV_IDS", "ServerFull", "answer", "environment_for", "error_reply", "hello"]

# Client environments of sessions held elsewhere: never served themselves.
CLIENT_ENV_IDS = ("agentgym/Remote-v0", "agentgym/Ray-v0", "agentgym/MCP-v0")  # MCP-v0 runs its server= command: never on a client's say


class ServerFull(Exception):
    """No room for another session."""


def environment_for(request: dict[str, Any], allowed_envs: list[str], arguments: ClientArguments | None = None) -> MadeEnv:
    """The environment a ``make`` request asks for, if it is allowed.

    With ``arguments`` (an untrusted client's request), only the arguments it allows are passed
    on, and a failure to make the environment reaches the client as one generic line with a
    reference: its details (which can tell which server files exist and what they hold) go to
    the ``agentgym.remote`` log only. Without it (a Ray pool's actors, whose requests come from
    the job that started them), every argument is passed on and errors keep their details.
    """
    env_id, kwargs = request.get("env_id"), request.get("kwargs", {})
    if env_id not in allowed_envs:
        raise ValueError(f"unknown or disallowed environment {env_id!r}; offered: {', '.join(allowed_envs)}")
    if not isinstance(kwargs, dict):
        raise ProtocolError("'kwargs' must be a JSON object")
    if arguments is None:
        return make_env(env_id, **kwargs)
    arguments.check(env_id, kwargs)
    try:
        return make_env(env_id, **kwargs)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the client learns nothing of the server's files
        reference = secrets.token_hex(4)
        _log.warning("make %s for a client failed (reference %s): %s", env_id, reference, exc, exc_info=exc)
        raise ValueError(f"cannot make {env_id} with these arguments; the server's log has the details (reference {reference})") from None


def hello(session_id: str, env_id: str, env: MadeEnv) -> dict[str, Any]:
    """The reply to ``make``: what the client needs to know about the environment."""
    base = env.unwrapped
    return {"session": session_id, "env_id": env_id, "protocol": PROTOCOL, "tools": base.tools, "task_ids": base.task_ids, "max_turns": base.max_turns}


def answer(env: MadeEnv, request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request of a session whose environment is ``env``."""
    op = request.get("op")
    if op not in _HANDLERS:
        raise ProtocolError(f"unknown op {op!r}")
    return _HANDLERS[op](env, request)


def error_reply(exc: BaseException) -> dict[str, Any]:
    """``{"error": {"type", "message"}}`` for ``exc``; types outside the protocol's list are "RemoteError"."""
    name = "ServerFull" if isinstance(exc, ServerFull) else type(exc).__name__
    if name not in ERROR_TYPES:
        name = "RemoteError"
    return {"error": {"type": name, "message": str(exc)[:2000] or type(exc).__name__}}


def _reset(env: MadeEnv, request: dict[str, Any]) -> dict[str, Any]:
    seed, options = request.get("seed"), request.get("options")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ProtocolError("'seed' must be an integer or null")
    if options is not None and not isinstance(options, dict):
        raise ProtocolError("'options' must be a JSON object or null")
    observation, info = env.reset(seed=seed, options=options)
    return {"observation": observation, "info": info, "task": env.unwrapped.task}


def _step(env: MadeEnv, request: dict[str, Any]) -> dict[str, Any]:
    if "action" not in request:
        raise ProtocolError("'step' needs an 'action'")
    observation, reward, terminated, truncated, info = env.step(request["action"])
    return {
        "observation": observation,
        "reward": float(reward),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "info": info,
        "counts": dict(env.unwrapped.counts),
    }


def _reward(env: MadeEnv, request: dict[str, Any]) -> dict[str, Any]:
    result = env.unwrapped.compute_reward()
    return {"score": float(result.score), "passed": result.passed, "reason": result.reason, "components": dict(result.components)}


_HANDLERS: dict[str, Callable[[MadeEnv, dict[str, Any]], dict[str, Any]]] = {
    "reset": _reset,
    "step": _step,
    "record": lambda env, request: {"record": env.unwrapped.episode_record()},
    "reward": _reward,
    "tasks": lambda env, request: {"tasks": env.unwrapped.tasks},
}
