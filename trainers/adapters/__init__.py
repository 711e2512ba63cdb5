"""Adapters that plug agentgym environments into RL trainers: verl, OpenRLHF and TRL (Unsloth).

Framework-free modules (importable without any trainer installed; every adapter drives its
episodes with :class:`agentgym.rollouts.episode.TokenEpisode`, the driver the rollout runner uses too):

* :mod:`~agentgym.trainers.adapters.spec`: the episode spec a dataset row carries;
* :mod:`~agentgym.trainers.adapters.export`: task splits as each trainer's dataset rows;
* :mod:`~agentgym.trainers.adapters.pool`: environments reused across episodes;
* :mod:`~agentgym.trainers.adapters.trl`: TRL's ``environment_factory`` classes and ``rollout_func``.

Framework modules (each imports its framework): :mod:`~agentgym.trainers.adapters.verl` (agent
loop) and :mod:`~agentgym.trainers.adapters.openrlhf` (agent_func). See docs/adapters.md.
"""
