"""What several commands share: the user-facing error, argument types, the environment arguments."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym.rollouts.settings import RolloutConfig, bound_problem

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = [
    "CLIError",
    "check_model_path",
    "env_arguments",
    "json_object",
    "make",
    "model_backend",
    "positive_int",
    "quiet_argument",
    "setting_argument",
    "settings_arguments",
    "token_from_env",
]


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
    for name in ("seed", "split", "env_kwargs"):
        setting_argument(p, RolloutConfig, name)


def settings_arguments(p: argparse.ArgumentParser, cls: Any, **changes: Mapping[str, Any]) -> None:
    """One option per field of the settings dataclass ``cls`` (:mod:`agentgym.rollouts.settings`), in field
    order, as :func:`setting_argument` makes it; ``changes`` maps a field name to its keyword arguments."""
    for field in dataclasses.fields(cls):
        setting_argument(p, cls, field.name, **changes.get(field.name, {}))


def setting_argument(
    p: argparse.ArgumentParser, cls: Any, name: str, *flags: str, default: Any = dataclasses.MISSING, help: str | None = None, unset: str | None = None
) -> None:
    """The option of the settings field ``name`` of ``cls``, derived from its declaration.

    The flag is ``--name-with-dashes`` (or ``flags``) and the destination the field's name; the
    type, choices, default and help text are the field's (``default``, ``help`` and ``unset`` —
    what no value means — replace them for one command): integers and numbers are checked against
    the field's lower bound as they are parsed (a usage error, as for every count), its other
    bounds when the settings are made (one line: ``top_p must be in (0, 1]``), mappings are JSON
    objects, sequences take one or more values, booleans are switches.
    """
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    kind = _value_type(typing.get_type_hints(cls)[name])
    if default is dataclasses.MISSING:
        factory = field.default_factory
        default = factory() if callable(factory) else field.default
    text = help or field.metadata["help"]
    unset = unset or field.metadata.get("unset")
    options: dict[str, Any] = {"dest": name, "default": default}
    if kind is bool:
        options["action"] = "store_true"
    elif typing.get_origin(kind) in (dict, Mapping) or kind is dict:
        options.update(type=json_object, metavar="JSON")
    elif typing.get_origin(kind) in (tuple, list, Sequence):
        options.update(nargs="+", metavar="ID")
    elif field.metadata.get("choices"):
        options["choices"] = field.metadata["choices"]
    elif kind in (int, float):
        options["type"] = _bounded(kind, field)
    if default is not None and not isinstance(default, (bool, Mapping)):
        text += f" (default {default})"
    elif default is None and unset:
        text += f" (default: {unset})"
    p.add_argument(*(flags or ["--" + name.replace("_", "-")]), help=text, **options)


def _value_type(hint: Any) -> Any:
    """The type of a field's values: a union's one member besides None (``int`` for ``int | None``), else the hint itself."""
    members = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
    return members[0] if len(members) == 1 else hint


def _bounded(kind: Callable[[str], Any], field: dataclasses.Field[Any]) -> Callable[[str], Any]:
    """An argparse type: the text as ``kind``, at least the least value ``field`` declares."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None
        problem = bound_problem({"min": field.metadata.get("min")}, value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    return parse


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
