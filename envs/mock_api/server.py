"""The HTTP transport: one loopback server for every episode of the process, shared by leases.

The server is the standard library's threading HTTP server (HTTP/1.1 keep-alive, one thread per
connection) on ``127.0.0.1`` and an ephemeral port. Each episode registers a :class:`Session`
and gets its own base URL, ``http://127.0.0.1:PORT/s/<session id>``; the session id is random
and never appears in an episode's messages, so episodes cannot see each other and records do
not depend on it.

Environments hold a :class:`ServerLease` from :func:`acquire_server`. The first lease starts the
server, the last release stops it: the accept loop ends, every open connection is shut down so
its thread exits, and all threads are joined, so nothing is left listening or running.

Why the standard library: the target is under 1 ms per tool call. The client (httpx) already
costs about 0.6 ms of that on loopback; ``ThreadingHTTPServer`` with Nagle's algorithm disabled
adds about 0.1 ms and no dependency. An ASGI stack (Starlette on Uvicorn) would add a
dependency and an event-loop thread hop without making the Python work per request smaller.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import sys
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentgym.envs.mock_api.session import MAX_BODY_BYTES, HttpRequest, Session

__all__ = ["MockApiServer", "ServerLease", "acquire_server", "server_status", "SESSION_PREFIX"]

SESSION_PREFIX = "/s/"
THREAD_PREFIX = "agentgym-mock-api"
# Bodies up to this size are read (and refused with 413 when over MAX_BODY_BYTES) so the client
# gets its answer instead of a broken pipe; beyond it the connection is dropped after the answer.
DRAIN_LIMIT = 1024 * 1024
_REASONS = {status.value: status.phrase for status in HTTPStatus}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # With Nagle's algorithm on, a small write that follows an unacknowledged one waits for the
    # client's delayed ACK: about 40 ms per call with the stdlib's separate header/body writes
    # (measured).
    disable_nagle_algorithm = True
    # No idle timeout: a server-side close of an idle keep-alive connection can cross a request
    # the client is sending on it (an LLM turn can take minutes) and fail that call. stop()
    # closes every connection, so none outlives the server.
    timeout = None
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, add=False)

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a training run makes millions of calls."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level errors (bad request line, unknown method...) as JSON, then hang up."""
        self.close_connection = True
        # An unparsable request line leaves the HTTP/0.9 default, which would suppress the status
        # line; nobody speaks 0.9, so always answer with a full HTTP/1.1 response.
        self.request_version = "HTTP/1.1"
        body = json.dumps({"error": {"code": f"http_{code}", "message": message or HTTPStatus(code).phrase}}).encode()
        self._send(code, {"Content-Type": "application/json"}, body)

    def _serve(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.send_error(411, "send the body with a Content-Length header, not chunked")
            return
        target = urllib.parse.urlsplit(self.path)
        sid, _, rest = target.path.removeprefix(SESSION_PREFIX).partition("/")
        session = self.server.sessions.get(sid) if target.path.startswith(SESSION_PREFIX) else None
        if session is None:
            self._drain()
            self._send(404, {"Content-Type": "application/json"}, b'{"error":{"code":"unknown_session","message":"no such session (it may have ended)"}}')
            return
        body = self._drain()
        headers = {name.lower(): value for name, value in self.headers.items()}
        response = session.handle(HttpRequest(self.command, "/" + rest, target.query, headers, body))
        self._send(response.status, response.headers, response.body)

    def _drain(self) -> bytes | None:
        """The request body, or ``None`` when it is over the limit (then the connection closes)."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > DRAIN_LIMIT:
            self.close_connection = True
            return None
        data = self.rfile.read(length) if length else b""
        return data if length <= MAX_BODY_BYTES else None

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        # Status line, headers and body leave in one write: one TCP segment, one wake-up of the
        # client (separate writes cost the client an extra receive per call).
        lines = [f"{self.protocol_version} {status} {_REASONS.get(status, '')}", *(f"{k}: {v}" for k, v in headers.items()), f"Content-Length: {len(body)}"]
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    # socketserver's default backlog of 5 overflows when hundreds of episodes connect at once,
    # and the overflow shows up as "connection reset by peer" on their first request (measured
    # with 256 episodes); the kernel caps this at net.core.somaxconn.
    request_queue_size = 1024

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._conn_threads: set[threading.Thread] = set()
        self._numbers = itertools.count(1)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-answer is routine; anything else is a bug worth a traceback.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Our own thread bookkeeping: daemon threads (never block interpreter exit) that stop()
        # still joins, which ThreadingMixIn only does for non-daemon threads.
        thread = threading.Thread(target=self._run, args=(request, client_address), name=f"{THREAD_PREFIX}-conn-{next(self._numbers)}", daemon=True)
        with self._lock:
            self._conn_threads.add(thread)
        thread.start()

    def _run(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._conn_threads.discard(threading.current_thread())

    def track(self, connection: socket.socket, *, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(connection)

    def close_all(self, timeout_s: float) -> list[str]:
        """Shut down open connections and join their threads; returns threads still alive."""
        with self._lock:
            connections, threads = list(self._connections), list(self._conn_threads)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer
        for thread in threads:
            thread.join(timeout_s)
        return [t.name for t in threads if t.is_alive()]


class MockApiServer:
    """A running loopback HTTP server holding the sessions of this process's episodes."""

    def __init__(self) -> None:
        self._httpd = _HTTPServer()
        self.port: int = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"{THREAD_PREFIX}-accept", daemon=True)
        self._thread.start()
        self.stopped = False

    def open_session(self, session: Session) -> str:
        """Register ``session``; returns its base URL."""
        sid = secrets.token_hex(16)
        self._httpd.sessions[sid] = session
        return f"{self.base_url}{SESSION_PREFIX}{sid}"

    def close_session(self, base_url: str) -> None:
        """Forget the session at ``base_url`` (later requests get 404 unknown_session)."""
        self._httpd.sessions.pop(base_url.rsplit("/", 1)[-1], None)

    @property
    def session_count(self) -> int:
        return len(self._httpd.sessions)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every connection, join every thread, release the port."""
        if self.stopped:
            return
        self.stopped = True
        self._httpd.shutdown()
        self._thread.join(timeout_s)
        stuck = self._httpd.close_all(timeout_s)
        self._httpd.server_close()
        if stuck:
            raise RuntimeError(f"mock API server threads did not stop within {timeout_s} s: {stuck}")


class ServerLease:
    """A claim on the shared server; :meth:`release` (idempotent) gives it back."""

    def __init__(self, server: MockApiServer, generation: int):
        self.server = server
        self._generation = generation
        self.released = False

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

    def acquire(self) -> ServerLease:
        with self.lock:
            if self.server is None:
                self.server = MockApiServer()
                self.generation += 1
            self.leases += 1
            return ServerLease(self.server, self.generation)

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
            self.server._httpd.socket.close()
        self.lock = threading.Lock()
        self.server, self.leases = None, 0
        self.generation += 1


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.forget_after_fork)


def acquire_server() -> ServerLease:
    """A lease on the process's mock API server, starting it if no lease is held."""
    return _POOL.acquire()


def server_status() -> dict[str, Any]:
    """Whether the shared server runs, on which port, with how many leases and sessions."""
    with _POOL.lock:
        server = _POOL.server
        return {
            "running": server is not None,
            "port": server.port if server else None,
            "leases": _POOL.leases,
            "sessions": server.session_count if server else 0,
        }
