"""Registration and making: :func:`register_envs` registers the catalogue's ids with Gymnasium
(:mod:`agentgym.envs.catalogue`), :func:`make_env` makes one with a clear error, :func:`env_class`
finds the class behind any registered id (an environment of your own included), as Gymnasium keeps
``make``/``register`` in ``gymnasium/envs/registration.py`` beside its catalogue."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from agentgym.envs.catalogue import CLIENTS, ENVIRONMENTS

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["env_class", "make_env", "register_envs"]


def make_env(env_id: str, /, **kwargs: Any) -> MadeEnv:
    """``gym.make`` for an agentgym id, with one clear error for what cannot be made.

    Raises:
        ValueError: ``unknown environment ...; known: ...`` for an id that is not registered, and
            ``cannot make ID: ...`` when the environment refuses its arguments (a wrong keyword,
            an unknown split).
    """
    register_envs()
    if env_id not in gym.registry:
        known = ", ".join(k for k in gym.registry if k.startswith("agentgym/"))
        raise ValueError(f"unknown environment {env_id!r}; known: {known}")
    try:
        # For an agentgym id (this function's contract) the unwrapped environment is a ToolEnv or a SessionEnv.
        return cast("MadeEnv", gym.make(env_id, **kwargs))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot make {env_id}: {exc}") from None


def register_envs() -> None:
    """Register every environment id, and the clients' (idempotent)."""
    for env_id, (entry_point, _) in [*ENVIRONMENTS.items(), *CLIENTS.items()]:
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=False)


def env_class(env_id: str) -> type:
    """The class registered for ``env_id`` (its entry point, imported): a bundled environment's or
    one registered with ``gym.register`` by anyone.

    Raises:
        ValueError: ``unknown environment ...`` for an id that is not registered, or one whose entry
            point is not a class.
    """
    register_envs()
    if env_id not in gym.registry:
        raise ValueError(f"unknown environment {env_id!r}")
    entry_point = gym.registry[env_id].entry_point
    cls = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if not isinstance(cls, type):
        raise ValueError(f"{env_id}'s entry point is not a class: {entry_point!r}")
    return cls
