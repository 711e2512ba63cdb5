"""What several commands share: the user-facing error, argument types, the environment arguments."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["CLIError", "check_model_path", "env_arguments", "json_object", "make", "model_backend", "positive_int", "quiet_argument", "token_from_env"]


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def env_arguments(p: argparse.ArgumentParser) -> None:
    """ENV, --seed, --split and --env-kwargs: the arguments of the commands that run an environment."""
    p.add_argument("env", metavar="ENV", help="environment id, e.g. agentgym/Refund-v0")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--split", default="train", choices=["train", "val", "test"], help="task split (default train)")
    p.add_argument("--env-kwargs", type=json_object, default={}, metavar="JSON", help="extra keyword arguments for gym.make, as a JSON object")


def quiet_argument(p: argparse.ArgumentParser, *aliases: str) -> None:
    """--quiet: the option of the long commands that turns their progress display off."""
    p.add_argument(
        "--quiet", "-q", *aliases, dest="quiet", action="store_true", help="no progress display (live bars on a terminal, a line every 30 s otherwise)"
    )


def make(args: argparse.Namespace, **extra: Any) -> MadeEnv:
    """The environment that ``args.env``, ``args.split`` and ``args.env_kwargs`` name."""
    from agentgym.envs.registration import make_env

    return make_env(args.env, split=args.split, **args.env_kwargs, **extra)


def check_model_path(model: str | None) -> None:
    """Fail fast on a model given as a path that does not exist (a hub id would be looked up online)."""
    if model is None:
        return
    path = Path(model).expanduser()
    looks_like_path = path.is_absolute() or model.startswith((".", "~")) or path.suffix == ".gguf"
    if looks_like_path and not path.exists():
        raise CLIError(f"model not found: {model}")


def model_backend(args: argparse.Namespace) -> Any:
    """The generation backend that ``--model``, ``--backend``, ``--device`` and ``--base-url`` name (eval, proxy)."""
    from agentgym.models import BackendError, ModelLoadError, create_backend

    if args.backend == "openai" and not args.base_url:
        raise CLIError("--backend openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
    if args.backend != "openai" and args.base_url:
        raise CLIError("--base-url only applies to --backend openai")
    check_model_path(args.model)
    try:
        return create_backend(args.model, kind=args.backend, device=args.device, base_url=args.base_url)
    except (ModelLoadError, BackendError) as exc:
        raise CLIError(str(exc)) from None


def token_from_env(variable: str | None) -> str | None:
    """The bearer token held by the environment variable ``--token-env`` names (``None``: no token)."""
    if not variable:
        return None
    token = os.environ.get(variable)
    if not token:
        raise CLIError(f"--token-env {variable}: that environment variable is empty or unset")
    return token
