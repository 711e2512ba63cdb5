"""``agentgym serve``: any registered environment, served over WebSocket to many concurrent sessions.

One WebSocket connection is one session and holds one environment instance, made by the
session's first request (``make``; see :mod:`agentgym.remote.protocol`). Requests of a session
are answered in order; sessions run concurrently. Environment calls block (a sandboxed run, a
SQL query), so they run on a thread pool while the event loop keeps serving other sessions.

Limits: at most ``max_sessions`` open sessions (more are refused with ``ServerFull``), a session
that sends nothing for ``idle_timeout_s`` is closed, messages are at most ``max_message_bytes``.
With ``token`` set, every request (the WebSocket handshake and ``/metrics``) must carry
``Authorization: Bearer <token>``; ``/healthz`` stays open for load balancers. Without a token the
server listens only on a loopback address, unless ``insecure=True`` says otherwise (and it logs a
warning). Clients choose only the ``make`` arguments :class:`~agentgym.remote.arguments.ClientArguments`
allows: no server file outside the folders the operator allowed, no server resources.

Closing the server (:meth:`EnvServer.close`, or SIGINT/SIGTERM under ``agentgym serve``) stops
accepting, closes every connection and every session's environment, and joins its threads.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hmac
import ipaddress
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from agentgym.remote.arguments import ClientArguments
from agentgym.remote.exposition import CONTENT_TYPE as EXPOSITION_CONTENT_TYPE
from agentgym.remote.exposition import Metrics, exposition
from agentgym.remote.protocol import MAX_MESSAGE_BYTES, OPS, PROTOCOL, ProtocolError, dumps, loads
from agentgym.remote.session import CLIENT_ENV_IDS, ServerFull, answer, environment_for, error_reply, hello

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["EnvServer", "Metrics"]
_log = logging.getLogger("agentgym.remote")
_LATENCY_WINDOW = 4096  # step latencies kept for the percentiles
_RATE_WINDOW_S = 10.0  # steps/s is measured over this many recent seconds


_servers = itertools.count(1)


class EnvServer:
    """Serves registered agentgym environments to remote sessions.

    Args:
        host: interface to listen on (``127.0.0.1`` by default; ``0.0.0.0`` for a cluster).
        port: TCP port (0: any free port; :attr:`url` tells which).
        token: if set, the bearer token every client must present.
        allowed_envs: environment ids sessions may make (default: every registered ``agentgym/`` id
            but the remote one).
        max_sessions: open sessions at most.
        idle_timeout_s: close a session that sends nothing for this long.
        max_message_bytes: largest message either way.
        workers: threads running environment calls (default: 4 per CPU).
        allowed_roots: folders whose files clients may name in ``make`` arguments (task files, a
            customer model, a reply cache); none by default (see :class:`ClientArguments`).
        insecure: serve without ``token`` on an address other than loopback (refused otherwise).

    Raises:
        ValueError: for a limit out of range, or no ``token`` on a non-loopback ``host`` without
            ``insecure``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        allowed_envs: list[str] | None = None,
        max_sessions: int = 256,
        idle_timeout_s: float = 600.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        workers: int | None = None,
        allowed_roots: list[str | Path] | tuple[str | Path, ...] = (),
        insecure: bool = False,
    ) -> None:
        import agentgym  # noqa: F401 - registers the environments

        if max_sessions < 1 or idle_timeout_s <= 0 or max_message_bytes < 1024:
            raise ValueError("max_sessions must be >= 1, idle_timeout_s > 0 and max_message_bytes >= 1024")
        if token is None and not _is_loopback(host):
            if not insecure:
                raise ValueError(
                    f"refusing to serve on {host!r} without a token: anyone who reaches it could run environments here; "
                    "set a token (agentgym serve --token-env VAR), listen on 127.0.0.1, or pass insecure=True (--insecure-no-token)"
                )
            _log.warning("WARNING: serving on %r WITHOUT A TOKEN: anyone who can reach this port can open sessions and run environments here", host)
        self.host, self.port = host, port
        self.token = token
        self.allowed_envs = (
            sorted(allowed_envs) if allowed_envs is not None else sorted(k for k in gym.registry if k.startswith("agentgym/") and k not in CLIENT_ENV_IDS)
        )
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.max_message_bytes = max_message_bytes
        self.workers = workers or 4 * (os.cpu_count() or 1)
        self.arguments = ClientArguments.allowing(allowed_roots)
        self.name = f"agentgym-env-server-{next(_servers)}"  # its threads' names start with this
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"{self.name}-worker")
        self._ids = itertools.count(1)
        self._sessions: dict[str, MadeEnv] = {}
        self._making = 0  # sessions whose environment is being made: they hold a place under max_sessions
        self._sessions_total = 0
        self._steps_total = 0
        self._step_times: collections.deque[float] = collections.deque(maxlen=_LATENCY_WINDOW)
        self._step_stamps: collections.deque[float] = collections.deque()
        self._queue = 0
        self._started = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    # ------------------------------------------------------------------ running it

    @property
    def url(self) -> str:
        """``ws://host:port`` of the running server."""
        if self._server is None:
            raise RuntimeError("the server is not running")
        host, port = next(iter(self._server.sockets)).getsockname()[:2]
        return f"ws://{host}:{port}"

    def start(self) -> str:
        """Serve on a background thread; returns :attr:`url` once the server listens."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self.run(on_ready=ready.set))
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self.url

    async def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """Serve until :meth:`close` (or :meth:`shutdown` from the loop) is called."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        async with serve(
            self._session,
            self.host,
            self.port,
            process_request=self._http,
            max_size=self.max_message_bytes,
            compression=None,
            ping_interval=None,
            server_header="agentgym",
        ) as server:
            self._server = server
            if on_ready is not None:
                on_ready()
            await self._stopped.wait()
            server.close(close_connections=True)
            await server.wait_closed()
        await self._loop.run_in_executor(None, self._close_sessions)

    def shutdown(self) -> None:
        """Stop serving (call from the server's event loop, e.g. a signal handler)."""
        if self._stopped is not None:
            self._stopped.set()

    def close(self) -> None:
        """Stop serving, end every session and close its environment (idempotent)."""
        if self._loop is not None and self._stopped is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already finished
                self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._close_sessions()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> EnvServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metrics(self) -> Metrics:
        """The server's counters now."""
        now = time.monotonic()
        while self._step_stamps and self._step_stamps[0] < now - _RATE_WINDOW_S:
            self._step_stamps.popleft()
        ordered = sorted(self._step_times)

        def percentile(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 3) if ordered else 0.0

        window = min(_RATE_WINDOW_S, now - self._started) or 1.0
        return Metrics(
            sessions=len(self._sessions),
            sessions_total=self._sessions_total,
            steps_total=self._steps_total,
            steps_per_s=round(len(self._step_stamps) / window, 2),
            step_p50_ms=percentile(0.5),
            step_p99_ms=percentile(0.99),
            queue_depth=self._queue,
            workers=self.workers,
            uptime_s=round(now - self._started, 1),
        )

    # ------------------------------------------------------------------ HTTP

    def _authorized(self, request: Request) -> bool:
        if self.token is None:
            return True
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return _json_response(connection, HTTPStatus.OK, {"ok": True, "sessions": len(self._sessions), "protocol": PROTOCOL})
        if not self._authorized(request):
            return _json_response(connection, HTTPStatus.UNAUTHORIZED, {"error": "a valid bearer token is required"})
        if path == "/metrics":
            metrics = self.metrics()
            if "format=json" in request.path.partition("?")[2].split("&") or "application/json" in request.headers.get("Accept", ""):
                return _json_response(connection, HTTPStatus.OK, asdict(metrics))
            response = connection.respond(HTTPStatus.OK, exposition(metrics))
            del response.headers["Content-Type"]  # respond() set text/plain without the format's version
            response.headers["Content-Type"] = EXPOSITION_CONTENT_TYPE
            return response
        if path in ("/", "/v1/session") and request.headers.get("Upgrade", "").lower() == "websocket":
            return None  # go on with the WebSocket handshake
        return _json_response(connection, HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path!r}; sessions are WebSockets on /v1/session"})

    # ------------------------------------------------------------------ sessions

    async def _session(self, connection: ServerConnection) -> None:
        session_id: str | None = None
        env: MadeEnv | None = None
        try:
            while True:
                try:
                    raw = await asyncio.wait_for(connection.recv(), timeout=self.idle_timeout_s)
                except TimeoutError:
                    await connection.close(1000, "idle timeout")
                    return
                try:
                    request = loads(raw)
                    op = request.get("op")
                    if op not in OPS:
                        raise ProtocolError(f"unknown op {op!r}; one of {', '.join(OPS)}")
                    if op == "make":
                        if env is not None:
                            raise ProtocolError("this session already made its environment")
                        session_id, env = await self._make(request)
                        reply = hello(session_id, request["env_id"], env)
                    elif env is None:
                        raise ProtocolError("the first request of a session must be 'make'")
                    elif op == "close":
                        await connection.send(dumps({"closed": True}))
                        await connection.close(1000, "closed by the client")
                        return
                    else:
                        reply = await self._call(functools.partial(answer, env, request), step=op == "step")
                except ConnectionClosed:
                    raise
                except Exception as exc:  # noqa: BLE001 - every failure becomes an error reply
                    await connection.send(dumps(error_reply(exc)))
                    if env is None:
                        await connection.close(1008 if isinstance(exc, ProtocolError) else 1013, str(exc)[:120])
                        return
                    continue
                await connection.send(dumps(reply))
        except ConnectionClosed:
            return
        finally:
            if session_id is not None:
                self._sessions.pop(session_id, None)
            if env is not None:
                await asyncio.get_running_loop().run_in_executor(self._pool, env.close)

    async def _make(self, request: dict[str, Any]) -> tuple[str, MadeEnv]:
        # The place is taken before the first await and given back only once the session is
        # registered or failed, so concurrent makes cannot all pass the check.
        if len(self._sessions) + self._making >= self.max_sessions:
            raise ServerFull(f"the server holds its maximum of {self.max_sessions} sessions; try again later")
        self._making += 1
        try:
            env = await self._call(lambda: environment_for(request, self.allowed_envs, self.arguments))
        finally:
            self._making -= 1
        session_id = f"s{next(self._ids)}"
        self._sessions[session_id] = env
        self._sessions_total += 1
        return session_id, env

    async def _call(self, fn: Callable[[], Any], *, step: bool = False) -> Any:
        assert self._loop is not None
        self._queue += 1
        try:
            started = time.perf_counter()
            result = await self._loop.run_in_executor(self._pool, fn)
            if step:
                self._steps_total += 1
                self._step_times.append(time.perf_counter() - started)
                self._step_stamps.append(time.monotonic())
            return result
        finally:
            self._queue -= 1

    def _close_sessions(self) -> None:
        for session_id in list(self._sessions):
            env = self._sessions.pop(session_id, None)
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:  # a host name, or "" / None (every interface)
        return False


def _json_response(connection: ServerConnection, status: HTTPStatus, body: dict[str, Any]) -> Response:
    response = connection.respond(status, json.dumps(body) + "\n")
    response.headers["Content-Type"] = "application/json"
    return response
