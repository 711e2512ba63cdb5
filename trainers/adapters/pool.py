"""Reusable environments for rollout workers.

Building an environment loads its task split (about 0.1 s for Refund-v0), while a rollout worker
plays thousands of short episodes. ``reset`` rebuilds an environment's whole episode state, so
workers lease an idle environment built from the same id, split and arguments instead of making a
new one per episode. A leased environment belongs to one episode at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from agentgym.trainers.adapters.spec import EpisodeSpec

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["EnvPool", "shared_pool"]


class EnvPool:
    """Idle environments by :attr:`EpisodeSpec.make_key`, handed out one episode at a time (thread-safe).

    Args:
        max_idle: idle environments kept per key; more are closed when returned.
    """

    def __init__(self, max_idle: int = 64) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, got {max_idle}")
        self.max_idle = max_idle
        self._idle: dict[str, list[MadeEnv]] = {}
        self._lock = threading.Lock()

    def acquire(self, spec: EpisodeSpec) -> MadeEnv:
        """An environment for ``spec`` that no one else uses until :meth:`release`."""
        with self._lock:
            idle = self._idle.get(spec.make_key)
            if idle:
                return idle.pop()
        return spec.make()

    def release(self, spec: EpisodeSpec, env: MadeEnv) -> None:
        """Give ``env`` (built for ``spec``) back for later episodes."""
        with self._lock:
            idle = self._idle.setdefault(spec.make_key, [])
            if len(idle) < self.max_idle:
                idle.append(env)
                return
        env.close()

    def idle(self, spec: EpisodeSpec) -> int:
        """How many idle environments for ``spec`` the pool holds."""
        with self._lock:
            return len(self._idle.get(spec.make_key, ()))

    @contextmanager
    def lease(self, spec: EpisodeSpec) -> Iterator[MadeEnv]:
        """``with pool.lease(spec) as env:`` acquire and always release."""
        env = self.acquire(spec)
        try:
            yield env
        finally:
            self.release(spec, env)

    def close(self) -> None:
        """Close every idle environment."""
        with self._lock:
            envs = [env for idle in self._idle.values() for env in idle]
            self._idle.clear()
        for env in envs:
            env.close()


_SHARED = EnvPool()


def shared_pool() -> EnvPool:
    """The process-wide pool the adapters use."""
    return _SHARED
