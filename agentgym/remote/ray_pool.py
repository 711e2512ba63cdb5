"""Environments as Ray actors: a pool spread over a Ray cluster, stepped like local environments.

    ray.init(address="auto")                       # or ray.init() for this machine alone
    pool = RayEnvPool(size=16, num_cpus=1, name="code")
    env = gym.make("agentgym/Ray-v0", env_id="agentgym/CodeExec-v0", pool="code", split="train")

Each actor is a Ray worker process holding up to ``sessions_per_actor`` environments, placed by
Ray's scheduler with the resources the pool declares (``num_cpus``, custom ``resources``). An
environment takes the least loaded live actor when it is made; when every actor is full it
waits (back-pressure) up to ``timeout_s``.

When an actor or its node dies, every request of its sessions fails with
:class:`~agentgym.remote.client.SessionLost`, a ``RemoteEnvError`` and an ``InfraError`` (an
episode in progress ends cleanly with ``stop_reason: "infra_error"``, which trainers and
evaluations leave out, and the rest of the batch goes on), the
pool starts a replacement, and the environment's next ``reset`` opens a fresh session on a live
actor, so later episodes go on.

Which actor holds an environment's session: ``env.unwrapped.actor_id`` (a Ray actor id, as the Ray
dashboard and ``ray list actors`` show it); what each actor holds: :meth:`RayEnvPool.stats`.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from agentgym.records import ChatMessage
from agentgym.remote.client import RemoteEnvError, SessionEnv, SessionLost
from agentgym.remote.session import CLIENT_ENV_IDS, answer, environment_for, error_reply, hello

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["ActorStats", "EnvActor", "RayEnv", "RayEnvPool"]

_POOLS: dict[str, RayEnvPool] = {}


class EnvActor:
    """The body of one Ray actor: environments by session id (wrapped by :func:`ray.remote` in the pool)."""

    def __init__(self, allowed_envs: list[str] | None) -> None:
        import agentgym  # noqa: F401 - registers the environments in the worker process

        self.allowed_envs = allowed_envs or sorted(k for k in gym.registry if k.startswith("agentgym/") and k not in CLIENT_ENV_IDS)
        self.envs: dict[str, MadeEnv] = {}

    def make(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        try:
            env = environment_for(request, self.allowed_envs)
            self.envs[session_id] = env
            return hello(session_id, request["env_id"], env)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error reply
            return error_reply(exc)

    def request(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        try:
            return answer(self.envs[session_id], request)
        except Exception as exc:  # noqa: BLE001
            return error_reply(exc)

    def close(self, session_id: str) -> None:
        env = self.envs.pop(session_id, None)
        if env is not None:
            env.close()

    def ping(self) -> int:
        return len(self.envs)

    def placement(self) -> tuple[str, str, int]:
        """Where this actor runs: its Ray actor id, its node's id and its process id."""
        import ray

        context = ray.get_runtime_context()
        return context.get_actor_id() or "", context.get_node_id(), os.getpid()


@dataclass(frozen=True)
class ActorStats:
    """One actor of a :class:`RayEnvPool`, as :meth:`RayEnvPool.stats` reports it.

    Attributes:
        actor_id: the Ray actor id (what ``env.unwrapped.actor_id`` names, and the Ray dashboard shows).
        node_id: the Ray node it runs on.
        pid: its worker process.
        sessions: environments it holds now.
        sessions_total: environments made on it since it started.
    """

    actor_id: str
    node_id: str
    pid: int
    sessions: int
    sessions_total: int


@dataclass
class _Actor:
    handle: Any
    load: int = 0
    alive: bool = True
    sessions_total: int = 0
    placement: tuple[str, str, int] | None = None  # fetched once, when first asked for


class RayEnvPool:
    """A pool of environment actors on the Ray cluster this process is connected to.

    Args:
        size: actors in the pool.
        num_cpus: CPUs Ray reserves for each actor (CodeExec's sandbox runs use its cores).
        resources: custom Ray resources each actor needs, e.g. ``{"env_node": 1}``.
        sessions_per_actor: environments one actor holds at most.
        allowed_envs: environment ids sessions may make (default: every agentgym environment).
        name: the name ``gym.make("agentgym/Ray-v0", pool=name, ...)`` finds the pool by.
    """

    def __init__(
        self,
        size: int = 2,
        *,
        num_cpus: float = 1.0,
        resources: dict[str, float] | None = None,
        sessions_per_actor: int = 8,
        allowed_envs: list[str] | None = None,
        name: str = "default",
    ) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("connect to Ray first: ray.init() (this machine) or ray.init(address='auto') (a cluster)")
        if size < 1 or sessions_per_actor < 1:
            raise ValueError("size and sessions_per_actor must be at least 1")
        if name in _POOLS:
            raise ValueError(f"a pool named {name!r} exists; close it first or choose another name")
        self.name = name
        self.sessions_per_actor = sessions_per_actor
        self.replaced = 0
        self._remote = ray.remote(EnvActor).options(num_cpus=num_cpus, resources=resources or {}, max_restarts=0)
        self._allowed = allowed_envs
        self._condition = threading.Condition()
        self._timeout_s = 60.0  # for asking an actor where it runs
        self._actors = [self._start() for _ in range(size)]
        ray.get([a.handle.ping.remote() for a in self._actors])  # every actor is up before the pool is used
        _POOLS[name] = self

    @classmethod
    def named(cls, name: str) -> RayEnvPool:
        """The open pool called ``name``."""
        if name not in _POOLS:
            raise ValueError(f"no Ray environment pool named {name!r}; make one with RayEnvPool(name={name!r})")
        return _POOLS[name]

    @property
    def size(self) -> int:
        """Actors in the pool (dead ones are replaced as soon as a session notices)."""
        return len(self._actors)

    def checkout(self, timeout_s: float) -> _Actor:
        """The least loaded live actor with room for a session; waits while every actor is full."""
        deadline = time.monotonic() + timeout_s
        with self._condition:
            while True:
                free = [a for a in self._actors if a.alive and a.load < self.sessions_per_actor]
                if free:
                    actor = min(free, key=lambda a: a.load)
                    actor.load += 1
                    actor.sessions_total += 1
                    return actor
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RemoteEnvError(f"every actor of pool {self.name!r} holds {self.sessions_per_actor} sessions; none freed within {timeout_s:g} s")
                self._condition.wait(left)

    def release(self, actor: _Actor) -> None:
        """A session of ``actor`` ended."""
        with self._condition:
            actor.load = max(0, actor.load - 1)
            self._condition.notify_all()

    def replace(self, actor: _Actor) -> None:
        """``actor`` died (or hangs): kill it and start another in its place (once, however many sessions report it)."""
        import ray

        with self._condition:
            if not actor.alive:
                return
            actor.alive = False
            ray.kill(actor.handle, no_restart=True)
            self._actors[self._actors.index(actor)] = self._start()
            self.replaced += 1
            self._condition.notify_all()

    def stats(self) -> list[ActorStats]:
        """The live actors in pool order: where each runs and how many sessions it holds and has held."""
        with self._condition:
            actors = [a for a in self._actors if a.alive]
        return [ActorStats(*_placement(a, self._timeout_s), sessions=a.load, sessions_total=a.sessions_total) for a in actors]

    def close(self) -> None:
        """Kill every actor (their environments go with them) and forget the name."""
        import ray

        with self._condition:
            for actor in self._actors:
                actor.alive = False
                ray.kill(actor.handle, no_restart=True)
            self._actors = []
            self._condition.notify_all()
        _POOLS.pop(self.name, None)

    def _start(self) -> _Actor:
        return _Actor(self._remote.remote(self._allowed))


def _placement(actor: _Actor, timeout_s: float) -> tuple[str, str, int]:
    """Where ``actor`` runs (asked once)."""
    import ray

    if actor.placement is None:
        actor.placement = ray.get(actor.handle.placement.remote(), timeout=timeout_s)
    return actor.placement


_sessions = itertools.count(1)


class RayEnv(SessionEnv):
    """``agentgym/Ray-v0``: an environment living in an actor of a :class:`RayEnvPool`.

    Args:
        env_id: the environment the actor makes, e.g. ``"agentgym/CodeExec-v0"``.
        env_kwargs: its ``gym.make`` keyword arguments.
        pool: the pool, or its name.
        timeout_s: how long a request (or waiting for room in the pool) may take.
        **make_kwargs: more ``gym.make`` arguments, merged into ``env_kwargs``.
    """

    def __init__(
        self, env_id: str, env_kwargs: dict[str, Any] | None = None, *, pool: RayEnvPool | str = "default", timeout_s: float = 120.0, **make_kwargs: Any
    ) -> None:
        self.pool = pool if isinstance(pool, RayEnvPool) else RayEnvPool.named(pool)
        self.env_id, self.timeout_s = env_id, timeout_s
        self._make = {"op": "make", "env_id": env_id, "kwargs": {**(env_kwargs or {}), **make_kwargs}}
        self._actor: _Actor | None = None
        self._open()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[ChatMessage], dict[str, Any]]:
        if self._actor is None:  # its actor died: start again on a live one
            self._open()
        return super().reset(seed=seed, options=options)

    @property
    def actor_id(self) -> str | None:
        """The Ray actor id of the actor holding this environment's session (None after it died, until the next reset)."""
        return None if self._actor is None else _placement(self._actor, self.timeout_s)[0]

    def close(self) -> None:
        actor, self._actor = self._actor, None
        if actor is None:
            return
        try:
            self._get(actor, actor.handle.close.remote(self.session))
        except RemoteEnvError:
            pass  # the actor is gone, and the environment with it
        finally:
            self.pool.release(actor)

    def _open(self) -> None:
        actor = self.pool.checkout(self.timeout_s)
        session = f"{os.getpid()}-{next(_sessions)}"
        try:
            reply = self._get(actor, actor.handle.make.remote(session, self._make))
        except BaseException:
            self.pool.release(actor)
            raise
        if "error" in reply:
            self.pool.release(actor)
            self.raise_error(reply)
        self._actor = actor
        self.describe(reply)

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        actor = self._actor
        if actor is None:
            raise RemoteEnvError("the session is closed (or its actor died): reset to start a new one")
        return self._get(actor, actor.handle.request.remote(self.session, message))

    def _get(self, actor: _Actor, ref: Any) -> dict[str, Any]:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(ref, timeout=self.timeout_s)
        except (RayActorError, GetTimeoutError) as exc:
            self.pool.replace(actor)
            if self._actor is actor:
                self._actor = None
                self.pool.release(actor)
            what = "did not answer in time" if isinstance(exc, GetTimeoutError) else "died"
            # The machinery failed, not the model: the episode ends as an infra error (SessionLost).
            raise SessionLost(f"the environment's Ray actor {what} ({type(exc).__name__}); the pool replaced it") from None
