"""The HTTP transport: one loopback server for every episode of the process, shared by leases.

The server is an asyncio event loop on its own thread, speaking HTTP/1.1 (keep-alive) through
h11, on ``127.0.0.1`` and an ephemeral port. Each episode registers a :class:`Session` and gets
its own base URL, ``http://127.0.0.1:PORT/s/<session id>``; the session id is random and never
appears in an episode's messages, so episodes cannot see each other and records do not depend
on it.

Environments hold a :class:`ServerLease` from :func:`acquire_server`. The first lease starts the
server, the last release stops it: the listening socket closes, every open connection is closed
and its task cancelled, the loop stops and its thread is joined, so nothing is left listening or
running.

The server is supervised: when its loop stops without being asked to (an exception out of the
loop), it closes its listening socket and every connection, so clients fail at once instead of
waiting for a timeout, and the next use of a lease starts a new server (logged, counted in
``server_status()["restarts"]``). The sessions of the server that stopped are gone with it: their
episodes end as infrastructure errors (see ``MockApiEnv.http_request``).

Why an event loop and h11 rather than the standard library's ``ThreadingHTTPServer`` (the first
version) or Starlette on Uvicorn: per call the three cost about the same (a tool call is about
0.6 ms of httpx and loopback plus about 0.4 ms of the environment's own work, measured), but a
thread per connection does not scale to hundreds of episodes in one Python process. Every
accepted connection started a thread, ``Thread.start`` waits for the new thread to get the GIL,
and with 128 busy episodes the accept loop fell to a few connections per second: episodes
waited up to 20 s for their first answer (measured). One loop thread serves every connection
with no thread start at all. h11 is the HTTP/1.1 state machine that httpx itself uses (already
installed with it); Starlette and Uvicorn would add two dependencies for routing and an ASGI
layer this service does not need.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import threading
import urllib.parse
from http import HTTPStatus
from typing import Any

import h11

from agentgym.envs.mock_api.session import MAX_BODY_BYTES, HttpRequest, Session

__all__ = ["DRAIN_LIMIT", "SESSION_PREFIX", "THREAD_PREFIX", "MockApiServer", "ServerLease", "acquire_server", "server_status"]

SESSION_PREFIX = "/s/"
THREAD_PREFIX = "agentgym-mock-api"
# Bodies up to this size are read (and refused with 413 when over MAX_BODY_BYTES) so the client
# gets its answer instead of a broken pipe; beyond it the answer comes at once and the
# connection closes.
DRAIN_LIMIT = 1024 * 1024
MAX_HEADER_BYTES = 16 * 1024
_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_JSON = ("Content-Type", "application/json")
_log = logging.getLogger(__name__)


class _Refusal(Exception):
    """A request refused at the protocol level (status and message), after which the connection closes."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class MockApiServer:
    """A running loopback HTTP server holding the sessions of this process's episodes."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.port: int = self._listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._connections: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}-loop", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            self._loop.close()
            self._listener.close()
            raise RuntimeError(f"the mock API server could not start: {self._failure}") from self._failure
        self.stopped = False

    def open_session(self, session: Session) -> str:
        """Register ``session``; returns its base URL."""
        sid = secrets.token_hex(16)
        self.sessions[sid] = session
        return f"{self.base_url}{SESSION_PREFIX}{sid}"

    def close_session(self, base_url: str) -> None:
        """Forget the session at ``base_url`` (later requests get 404 unknown_session)."""
        self.sessions.pop(base_url.rsplit("/", 1)[-1], None)

    @property
    def session_count(self) -> int:
        return len(self.sessions)

    @property
    def alive(self) -> bool:
        """Whether the server still answers: not stopped, and its loop still runs."""
        return not self.stopped and self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every connection, stop the loop, join its thread."""
        if self.stopped:
            return
        self.stopped = True
        if not self._thread.is_alive():  # its loop stopped on its own and hung up on everyone already
            self._thread.join()
            self._loop.close()
            return
        asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"the mock API server's loop did not stop within {timeout_s} s")
        self._loop.close()

    def forget_in_child(self) -> None:
        """After a fork: the child has this object but not its thread; release the port's descriptor."""
        self._listener.close()

    # ------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, sock=self._listener))
        except Exception as exc:  # noqa: BLE001 - reported by the constructor, in the caller's thread
            self._failure = exc
            return
        finally:
            self._ready.set()
        try:
            self._loop.run_forever()
        except BaseException as exc:  # noqa: BLE001 - the loop failed; the lease's next use starts a new server
            _log.error("agentgym mock API: the HTTP server's loop failed: %r", exc)
        if not self.stopped:  # the loop stopped on its own: hang up on everyone rather than leave them waiting
            self._loop.run_until_complete(self._close_all())
            self._listener.close()

    async def _close_all(self) -> None:
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._converse(reader, writer, h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES))
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client hung up, or the server is stopping
        finally:
            self._connections.discard(task)
            writer.close()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: h11.Connection) -> None:
        """Answer requests on one connection until either side closes it."""
        while True:
            request = None
            try:
                request = await _next(conn, reader)
                if request is None:
                    return
                status, headers, body = await self._answer(conn, reader, request)
            except h11.RemoteProtocolError as exc:
                status, headers, body = _error(exc.error_status_hint, f"malformed request: {exc}")
                headers.append(("Connection", "close"))
            except _Refusal as exc:
                status, headers, body = _error(exc.status, exc.message)
                headers.append(("Connection", "close"))
            if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
                return  # nothing can be sent on this connection any more
            head_only = request is not None and request.method == b"HEAD"
            out = conn.send(h11.Response(status_code=status, headers=[*headers, ("Content-Length", str(len(body)))], reason=_REASONS.get(status, b"")))
            if body and not head_only:
                out += conn.send(h11.Data(data=body))
            out += conn.send(h11.EndOfMessage())
            # One write per response: one segment, one wake-up of the client.
            writer.write(out)
            await writer.drain()
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return  # "Connection: close", or a body we did not read
            conn.start_next_cycle()

    async def _answer(self, conn: h11.Connection, reader: asyncio.StreamReader, request: h11.Request) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in request.headers}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _Refusal(411, "send the body with a Content-Length header, not chunked")
        length = int(headers.get("content-length", "0"))
        body: bytes | None = await _read_body(conn, reader) if length <= DRAIN_LIMIT else None
        if body is not None and len(body) > MAX_BODY_BYTES:
            body = None
        try:
            target = urllib.parse.urlsplit(request.target.decode("latin-1"))
        except ValueError as exc:  # e.g. an unclosed IPv6 host in an absolute-form target
            raise _Refusal(400, f"malformed request target: {exc}") from None
        sid, _, rest = target.path.removeprefix(SESSION_PREFIX).partition("/")
        session = self.sessions.get(sid) if target.path.startswith(SESSION_PREFIX) else None
        if session is None:
            status, out, payload = _error(404, "no such session (it may have ended)", code="unknown_session")
        else:
            response = session.handle(HttpRequest(request.method.decode("latin-1"), "/" + rest, target.query, headers, body))
            status, out, payload = response.status, list(response.headers.items()), response.body
        if length > DRAIN_LIMIT:
            out.append(("Connection", "close"))  # the unread body stays unread
        return status, out, payload


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The next request's head, or ``None`` when the client closed the connection."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
            continue
        if isinstance(event, h11.Request):
            return event
        return None  # ConnectionClosed (or PAUSED after a close)


async def _read_body(conn: h11.Connection, reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("client closed the connection mid-body")
            conn.receive_data(data)
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        else:  # EndOfMessage
            return b"".join(chunks)


def _error(status: int, message: str, *, code: str | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps({"error": {"code": code or f"http_{status}", "message": message}}).encode()
    return status, [_JSON], body


class ServerLease:
    """A claim on the shared server; :meth:`release` (idempotent) gives it back."""

    def __init__(self, server: MockApiServer, generation: int):
        self._server = server
        self._generation = generation
        self.released = False

    @property
    def server(self) -> MockApiServer:
        """The running server: a new one in place of one that stopped on its own."""
        if self.released or self._generation != _POOL.generation:
            return self._server
        self._server = _POOL.running()
        return self._server

    def release(self) -> None:
        if not self.released:
            self.released = True
            _POOL.release(self._generation)


class _Pool:
    """The process-wide reference count behind :func:`acquire_server`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: MockApiServer | None = None
        self.leases = 0
        self.generation = 0
        self.restarts = 0

    def acquire(self) -> ServerLease:
        with self.lock:
            if self.server is None:
                self.server = MockApiServer()
                self.generation += 1
            self.leases += 1
            return ServerLease(self.server, self.generation)

    def running(self) -> MockApiServer:
        """The server of the held leases, restarted if it stopped on its own."""
        with self.lock:
            assert self.server is not None, "no lease is held"
            if not self.server.alive:
                _log.warning("agentgym mock API: the HTTP server stopped on its own; starting a new one")
                self.server = MockApiServer()
                self.restarts += 1
            return self.server

    def release(self, generation: int) -> None:
        with self.lock:
            if generation != self.generation or self.server is None:
                return  # a lease from before a fork, or a server already gone
            self.leases -= 1
            if self.leases == 0:
                server, self.server = self.server, None
                server.stop()

    def forget_after_fork(self) -> None:
        # The child has the parent's server object but none of its threads: start afresh.
        if self.server is not None:
            self.server.forget_in_child()
        self.lock = threading.Lock()
        self.server, self.leases = None, 0
        self.generation += 1


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.forget_after_fork)


def acquire_server() -> ServerLease:
    """A lease on the process's mock API server, starting it if no lease is held."""
    return _POOL.acquire()


def server_status() -> dict[str, Any]:
    """Whether the shared server runs, on which port, with how many leases and sessions, and how
    many times it was restarted after stopping on its own."""
    with _POOL.lock:
        server = _POOL.server
        return {
            "running": server is not None and server.alive,
            "port": server.port if server else None,
            "leases": _POOL.leases,
            "sessions": server.session_count if server else 0,
            "restarts": _POOL.restarts,
        }
