"""``agentgym proxy``: an OpenAI-compatible chat-completions endpoint that records token-exact episodes."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from agentgym.cli._common import CLIError, positive_int, token_from_env

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("proxy", help="serve /v1/chat/completions in front of a model, recording each episode's token ids")
    p.add_argument("--model", help="model id, checkpoint directory or .gguf file (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument(
        "--backend", default="hf", choices=["hf", "openai", "vllm"], help="local transformers, an OpenAI-compatible server, or in-process vLLM (default hf)"
    )
    p.add_argument("--base-url", help="server API root for --backend openai, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--device", default="auto", help="device for --backend hf: auto, cpu, cuda ... (default auto)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--max-tokens", type=positive_int, default=256, help="a request's default max_tokens (default 256)")
    p.add_argument("--out", help="append every ended episode's trajectory record to this JSONL file")
    p.add_argument("--token-env", metavar="VAR", help="require the bearer token (the OpenAI client's api_key) held by this environment variable")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    try:
        from agentgym.bridges.asgi import serve
        from agentgym.bridges.proxy import ChatProxy
    except ImportError:
        raise CLIError("agentgym proxy needs the bridges extra: pip install 'agentgym[bridges]'") from None
    from agentgym.cli._common import model_backend

    token = token_from_env(args.token_env)
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise CLIError(f"--out {args.out}: its directory does not exist")
    proxy = ChatProxy(model_backend(args), max_tokens=args.max_tokens, out=args.out, keep_ended=False)

    def ready(url: str) -> None:
        print(f"agentgym: proxy for {proxy.model_name} at {url}/v1{' (token required)' if token else ''} (Ctrl-C stops)", flush=True)

    # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again to these handlers.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    try:
        anyio.run(serve, proxy.app(token), args.host, args.port, "", ready)
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    finally:
        proxy.close()
    print("agentgym: proxy stopped", file=sys.stderr, flush=True)
    return 0
