"""agentgym's environments, registered with Gymnasium under the ``agentgym/`` namespace.

The catalogue (:data:`ENVIRONMENTS`, :data:`CLIENTS`) is in :mod:`agentgym.envs.catalogue`, the
machinery (:func:`make_env`, :func:`register_envs`, :func:`env_class`) in
:mod:`agentgym.envs.registration`; both are importable from here too. Each environment lives in its
own package (``agentgym.envs.refund``, ...), with its task and ``info`` types in its ``records``
module: nothing outside it names them.
"""

from agentgym.envs.catalogue import CLIENTS, ENVIRONMENTS
from agentgym.envs.registration import env_class, make_env, register_envs

__all__ = ["CLIENTS", "ENVIRONMENTS", "env_class", "make_env", "register_envs"]
