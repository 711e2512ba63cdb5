"""Environments beyond the process: an environment server, its client env, and Ray actor pools.

- :class:`EnvServer` (``agentgym serve``) serves registered environments over WebSocket (:mod:`.protocol`).
- :class:`RemoteEnv` (``gym.make("agentgym/Remote-v0", url=..., env_id=...)``) steps one of them.
- :class:`~agentgym.remote.ray_pool.RayEnvPool` keeps environments in Ray actors over a cluster;
  ``gym.make("agentgym/Ray-v0", env_id=..., pool=...)`` steps one (``agentgym.remote.ray_pool``,
  imported on demand: it needs the ``ray`` extra).

The server and the clients need the ``serve`` extra (the ``websockets`` package).
"""

from agentgym.remote.client import RemoteEnv, RemoteEnvError, SessionLost
from agentgym.remote.server import EnvServer, Metrics

__all__ = ["EnvServer", "Metrics", "RemoteEnv", "RemoteEnvError", "SessionLost"]
