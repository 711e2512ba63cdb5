"""``agentgym serve``: serve environments to remote sessions over WebSocket (the server of agentgym/Remote-v0)."""

from __future__ import annotations

import argparse
import os
from typing import Any

import gymnasium as gym

from agentgym.cli._common import CLIError, positive_int, token_from_env

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("serve", help="serve environments to remote sessions over WebSocket (agentgym/Remote-v0)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0 for a cluster)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 picks a free one)")
    p.add_argument("--env", action="append", dest="envs", metavar="ENV", help="offer only this environment id (repeatable; default: all)")
    p.add_argument("--max-sessions", type=positive_int, default=256, help="open sessions at most (default 256)")
    p.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS", help="close a silent session after this long (default 600)")
    p.add_argument("--workers", type=positive_int, help="threads running environment calls (default 4 per CPU)")
    p.add_argument("--token-env", metavar="VAR", help="require the bearer token held by this environment variable")
    p.add_argument(
        "--allow-root",
        action="append",
        dest="allowed_roots",
        default=[],
        metavar="DIR",
        help="clients may name files inside this folder in make arguments (task files, models, caches; repeatable; default: none)",
    )
    p.add_argument("--insecure-no-token", action="store_true", help="serve on a non-loopback --host without --token-env (refused otherwise; logs a warning)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    try:
        from agentgym.remote import EnvServer
    except ImportError:
        raise CLIError("agentgym serve needs the serve extra: pip install 'agentgym[serve]'") from None
    token = token_from_env(args.token_env)
    import agentgym  # noqa: F401  (registers the environments)

    unknown = [e for e in args.envs or [] if e not in gym.registry]
    if unknown:
        raise CLIError(f"unknown environment(s): {', '.join(unknown)}")
    missing = [root for root in args.allowed_roots if not os.path.isdir(root)]
    if missing:
        raise CLIError(f"--allow-root: not a folder: {', '.join(missing)}")
    try:
        server = EnvServer(
            args.host,
            args.port,
            token=token,
            allowed_envs=args.envs,
            max_sessions=args.max_sessions,
            idle_timeout_s=args.idle_timeout,
            workers=args.workers,
            allowed_roots=args.allowed_roots,
            insecure=args.insecure_no_token,
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from None

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, server.shutdown)
        await server.run(
            on_ready=lambda: print(
                f"agentgym: serving {len(server.allowed_envs)} environment(s) on {server.url}{' (token required)' if token else ''}; Ctrl-C stops", flush=True
            )
        )

    try:
        asyncio.run(serve())
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    finally:
        server.close()
    print("agentgym: stopped; every session closed", flush=True)
    return 0
