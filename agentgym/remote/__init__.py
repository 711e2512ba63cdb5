"""Environments beyond the process: an environment server (``agentgym serve``) and its client env.

- :class:`EnvServer` serves registered environments over WebSocket (:mod:`.protocol`).
- :class:`RemoteEnv` (``gym.make("agentgym/Remote-v0", url=..., env_id=...)``) steps one of them.

Both need the ``serve`` extra (``pip install 'agentgym[serve]'``: the ``websockets`` package).
"""

from agentgym.remote.client import RemoteEnv, RemoteEnvError
from agentgym.remote.server import EnvServer, Metrics

__all__ = ["EnvServer", "Metrics", "RemoteEnv", "RemoteEnvError"]
