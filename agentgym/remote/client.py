"""Client environments for sessions held elsewhere: ``agentgym/Remote-v0`` over WebSocket to an
``agentgym serve`` server (here), and ``agentgym/Ray-v0`` in a Ray actor (:mod:`.ray_pool`).

    env = gym.make("agentgym/Remote-v0", url="ws://10.0.0.7:8765", env_id="agentgym/CodeExec-v0",
                   env_kwargs={"split": "val"}, token=os.environ["AGENTGYM_TOKEN"])

Both offer what the rollout runner, the trainer and the framework adapters use of a local
environment (``reset``, ``step``, ``tools``, ``task_ids``, ``task``, ``tasks``, ``max_turns``,
``counts``, ``episode_record()``, ``compute_reward()``), and the same seed and actions give the
same episode, byte for byte, as the environment in-process. Scripted policies stay on the
serving side: ``policies()`` is empty here.

A ``RemoteEnv`` whose connection is lost (the server restarted, the network failed, no answer in
time) raises :class:`SessionLost`, an :class:`~agentgym.tools.InfraError`: the episode in flight
is gone and ends as an infrastructure error. The next ``reset`` connects again (retrying for up to
``reconnect_s``) and opens a new session of the same environment; :attr:`RemoteEnv.reconnects`
counts them.
"""

from __future__ import annotations

import abc
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from agentgym.env import EpisodeOver

if TYPE_CHECKING:
    from agentgym.env import AgentEnv, ToolEnv
from agentgym.records import ChatMessage, EpisodeRecord
from agentgym.remote.protocol import MAX_MESSAGE_BYTES, PROTOCOL, ProtocolError, dumps, loads
from agentgym.spaces import AssistantTurn, ChatMessages
from agentgym.tools import InfraError
from agentgym.verifiers.result import RewardResult

__all__ = ["RemoteEnv", "RemoteEnvError", "SessionEnv", "SessionLost"]

_log = logging.getLogger(__name__)


class RemoteEnvError(RuntimeError):
    """The session's other end could not be reached, refused the session, or failed a request."""


class SessionLost(RemoteEnvError, InfraError):
    """The connection to the session was lost: its episode is gone (an infrastructure failure, not
    the model's); the next ``reset`` opens a new session."""


_RAISED: dict[str, type[Exception]] = {
    "EpisodeOver": EpisodeOver,
    "ResetNeeded": gym.error.ResetNeeded,
    "ValueError": ValueError,
    "TypeError": TypeError,
    "KeyError": KeyError,
    "ProtocolError": ProtocolError,
}


class SessionEnv(gym.Env[list[ChatMessage], Any], metaclass=abc.ABCMeta):
    """A ``gymnasium.Env`` whose environment lives in a session elsewhere; subclasses carry the requests."""

    metadata = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def describe(self, hello: dict[str, Any]) -> None:
        """Take the environment's description from the reply to ``make``."""
        if hello.get("protocol") != PROTOCOL:
            raise RemoteEnvError(f"the other end speaks protocol {hello.get('protocol')}, this client {PROTOCOL}")
        self.session: str = hello["session"]
        self.tools: list[dict[str, Any]] = hello["tools"]
        self.task_ids: list[str] = hello["task_ids"]
        self.max_turns: int = hello["max_turns"]
        self.observation_space = ChatMessages()
        self.action_space = AssistantTurn()
        self.task: dict[str, Any] | None = None
        self.counts = {"tool_calls": 0, "format_errors": 0, "tool_errors": 0}
        self._tasks: list[dict[str, Any]] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[ChatMessage], dict[str, Any]]:
        super().reset(seed=seed)
        reply = self.call({"op": "reset", "seed": seed, "options": options})
        self.task = reply["task"]
        self.counts = {"tool_calls": 0, "format_errors": 0, "tool_errors": 0}
        return reply["observation"], reply["info"]

    def step(self, action: Any) -> tuple[list[ChatMessage], float, bool, bool, dict[str, Any]]:
        reply = self.call({"op": "step", "action": action})
        self.counts = reply["counts"]
        return reply["observation"], reply["reward"], reply["terminated"], reply["truncated"], reply["info"]

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """Every task of the environment (fetched once)."""
        if self._tasks is None:
            self._tasks = self.call({"op": "tasks"})["tasks"]
        return self._tasks

    def episode_record(self) -> EpisodeRecord:
        """The environment's record of the current episode."""
        return self.call({"op": "record"})["record"]

    def compute_reward(self) -> RewardResult:
        """The environment's reward for the state the episode reached."""
        reply = self.call({"op": "reward"})
        return RewardResult(score=reply["score"], reason=reply["reason"], components=reply["components"], passed=reply["passed"])

    @classmethod
    def policies(cls) -> dict[str, Any]:
        """None: scripted policies run next to the environment, on the serving side."""
        return {}

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its reply, raising the error it carries."""
        reply = self._request(message)
        if "error" in reply:
            self.raise_error(reply)
        return reply

    @staticmethod
    def raise_error(reply: dict[str, Any]) -> None:
        """Raise the exception an error reply stands for."""
        error = reply["error"]
        raise _RAISED.get(error.get("type"), RemoteEnvError)(error.get("message", "the request failed"))

    @abc.abstractmethod
    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Carry one request to the session and bring its reply back."""


if TYPE_CHECKING:

    def _is_agent_env(env: ToolEnv | SessionEnv) -> AgentEnv:
        return env  # the type checker holds both kinds of environment to what AgentEnv names


class RemoteEnv(SessionEnv):
    """An environment served by ``agentgym serve``, stepped over one WebSocket session.

    Args:
        url: the server, ``ws://host:port`` (``wss://`` behind a TLS proxy).
        env_id: the environment the server should make, e.g. ``"agentgym/SQL-v0"``.
        env_kwargs: its ``gym.make`` keyword arguments (JSON values).
        token: the server's bearer token, if it has one.
        timeout_s: how long one request may take before the session is given up.
        reconnect_s: how long a ``reset`` after a lost connection keeps trying to connect again.
        **make_kwargs: more ``gym.make`` arguments for the served environment, merged into
            ``env_kwargs`` (so the rollout runner's and adapters' ``split=``/``max_turns=`` reach it).
    """

    def __init__(
        self,
        url: str,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 120.0,
        reconnect_s: float = 30.0,
        **make_kwargs: Any,
    ) -> None:
        self.url, self.env_id, self.timeout_s, self.reconnect_s = url, env_id, timeout_s, reconnect_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else None
        self._make = {"op": "make", "env_id": env_id, "kwargs": {**(env_kwargs or {}), **make_kwargs}}
        self._lost = False  # the connection was lost (not closed by the caller): reset opens a new session
        self.reconnects = 0
        self._connection: ClientConnection | None = None
        self._open()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[ChatMessage], dict[str, Any]]:
        if self._lost:
            self._reopen()
        return super().reset(seed=seed, options=options)

    def _open(self) -> None:
        """Connect and make the environment (a new session)."""
        try:
            connection = connect(
                self.url.rstrip("/") + "/v1/session",
                additional_headers=self._headers,
                max_size=MAX_MESSAGE_BYTES,
                compression=None,
                open_timeout=self.timeout_s,
                close_timeout=5,
            )
            # Entered by hand: the session outlives any with-block of the caller; close() ends it.
            self._connection = connection.__enter__()
        except InvalidStatus as exc:
            raise RemoteEnvError(f"the server at {self.url} refused the session (HTTP {exc.response.status_code}): {_reason(exc.response.body)}") from None
        except (OSError, WebSocketException, TimeoutError) as exc:
            raise RemoteEnvError(f"cannot reach an agentgym server at {self.url}: {exc}") from None
        try:
            self.describe(self.call(self._make))
        except BaseException:
            self.close()
            raise

    def _reopen(self) -> None:
        """After a lost connection: connect again, retrying with a doubling pause for up to ``reconnect_s``."""
        deadline, pause = time.monotonic() + self.reconnect_s, 0.1
        while True:
            try:
                self._open()
                break
            except RemoteEnvError as exc:
                if time.monotonic() + pause > deadline:
                    raise SessionLost(f"the connection to {self.url} was lost and could not be opened again within {self.reconnect_s:g} s: {exc}") from None
                time.sleep(pause)
                pause = min(2 * pause, 2.0)
        self._lost = False
        self.reconnects += 1
        _log.warning("agentgym remote: reconnected to %s with a new session of %s (reconnect %d)", self.url, self.env_id, self.reconnects)

    def close(self) -> None:
        """End the session; the server closes its environment."""
        self._lost = False
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            connection.send(dumps({"op": "close"}))
            connection.recv(timeout=5)
        except (ConnectionClosed, OSError, TimeoutError):
            pass
        finally:
            connection.close()

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._connection is None:
            if self._lost:
                raise SessionLost(f"the connection to {self.url} was lost; the next reset opens a new session")
            raise RemoteEnvError("the session is closed")
        try:
            self._connection.send(dumps(message))
            return loads(self._connection.recv(timeout=self.timeout_s))
        except TimeoutError:
            self.close()
            self._lost = True
            raise SessionLost(f"no answer from {self.url} within {self.timeout_s:g} s; the session is closed") from None
        except (ConnectionClosed, OSError) as exc:
            self._connection, self._lost = None, True
            raise SessionLost(f"the connection to {self.url} closed: {exc}") from None


def _reason(body: bytes | bytearray | None) -> str:
    """What an HTTP refusal's body says: its JSON ``error``, else its text."""
    text = bytes(body or b"").decode("utf-8", errors="replace").strip()
    try:
        error = json.loads(text).get("error")
    except (json.JSONDecodeError, AttributeError):
        error = None
    return str(error) if isinstance(error, str) else text or "no reason given"
