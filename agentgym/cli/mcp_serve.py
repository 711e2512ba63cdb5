"""``agentgym mcp``: serve one environment over the Model Context Protocol, one episode per session."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from agentgym.cli._common import CLIError, json_object, positive_int, token_from_env

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("mcp", help="serve an environment over MCP (stdio, or streamable HTTP): one session, one episode")
    p.add_argument("env", metavar="ENV", help="environment id, e.g. agentgym/SQL-v0")
    p.add_argument("--split", default="train", choices=["train", "val", "test"], help="task split (default train)")
    p.add_argument("--env-kwargs", type=json_object, default={}, metavar="JSON", help="extra keyword arguments for gym.make, as a JSON object")
    p.add_argument("--seed", type=int, default=0, help="seed of an episode whose client does not choose one with agentgym_reset (default 0)")
    p.add_argument("--task-id", help="task of such an episode (default: drawn with the seed)")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (PORT 0 picks a free one)")
    p.add_argument("--token-env", metavar="VAR", help="over HTTP, require the bearer token held by this environment variable")
    p.add_argument("--max-sessions", type=positive_int, default=64, help="over HTTP, open sessions at most (default 64)")
    p.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS", help="over HTTP, close a session silent this long (default 600)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    try:
        from agentgym.bridges.mcp_server import EnvMCPServer
    except ImportError:
        raise CLIError("agentgym mcp needs the bridges extra: pip install 'agentgym[bridges]'") from None
    if args.seed < 0:
        raise CLIError(f"--seed must be at least 0, got {args.seed}")
    if args.token_env and not args.http:
        raise CLIError("--token-env applies to --http only (a stdio server is reachable only by the process that started it)")
    token = token_from_env(args.token_env)
    host, port = _host_port(args.http) if args.http else ("", 0)
    server = EnvMCPServer(
        args.env,
        {"split": args.split, **args.env_kwargs},
        seed=args.seed,
        task_id=args.task_id,
        token=token,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
    )
    try:
        if not args.http:
            anyio.run(server.run_stdio)
            return 0

        def ready(url: str) -> None:
            print(f"agentgym: serving {args.env} over MCP at {url}{' (token required)' if token else ''} (Ctrl-C stops)", flush=True)

        # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again to the handlers
        # it found: these let the process close every session and exit 0, as agentgym serve does.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: None)
        try:
            anyio.run(server.run_http, host, port, ready)
        except OSError as exc:
            raise CLIError(f"cannot listen on {args.http}: {exc.strerror or exc}") from None
    finally:
        server.close()
    print("agentgym: stopped; every session closed", file=sys.stderr, flush=True)
    return 0


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CLIError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8000), got {text!r}")
    return host.strip("[]"), int(port)
