"""What the HTTP bridges share: a bearer-token gate in front of an ASGI app, and serving one with uvicorn."""

from __future__ import annotations

import contextlib
import hmac
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ASGIApp", "require_token", "serve", "serve_in_thread"]

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def require_token(app: ASGIApp, token: str | None) -> ASGIApp:
    """``app`` behind ``Authorization: Bearer <token>`` (compared in constant time); ``app`` itself when ``token`` is None."""
    if token is None:
        return app
    expected = f"Bearer {token}".encode()

    async def gated(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k.lower() == b"authorization"), b"")
            if not hmac.compare_digest(given, expected):
                body = b'{"error": {"message": "unauthorized: send Authorization: Bearer <token>", "type": "unauthorized"}}'
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return gated


async def serve(
    app: ASGIApp, host: str, port: int, url_path: str = "", on_ready: Callable[[str], None] | None = None, stop: threading.Event | None = None
) -> None:
    """Serve ``app`` on ``host:port`` (0: a free port) with uvicorn until SIGINT/SIGTERM, or until
    ``stop`` is set (a server run on a thread of a program that goes on).

    ``on_ready`` gets the base URL (plus ``url_path``) once the socket listens.
    """
    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    with contextlib.closing(sock):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # clients that connect before uvicorn starts wait in the backlog
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        if on_ready is not None:
            shown = f"[{host}]" if ":" in host else host
            on_ready(f"http://{shown}:{sock.getsockname()[1]}{url_path}")
        async with anyio.create_task_group() as tasks:
            if stop is not None:

                async def watch() -> None:
                    while not stop.is_set() and not server.should_exit:
                        await anyio.sleep(0.05)
                    server.should_exit = True

                tasks.start_soon(watch)
            await server.serve(sockets=[sock])
            server.should_exit = True  # ends the watcher when uvicorn stopped on a signal


def serve_in_thread(app: ASGIApp, host: str = "127.0.0.1", port: int = 0, url_path: str = "") -> tuple[str, Callable[[], None]]:
    """Serve ``app`` on a background thread; returns its URL and a function that stops it (and waits)."""
    import anyio

    stop, ready = threading.Event(), threading.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    thread = threading.Thread(target=anyio.run, args=(serve, app, host, port, url_path, on_ready, stop), name="agentgym-http", daemon=True)
    thread.start()
    while not ready.wait(0.05):
        if not thread.is_alive():
            raise RuntimeError(f"the server on {host}:{port} did not start")

    def shutdown() -> None:
        stop.set()
        thread.join()

    return urls[0], shutdown
