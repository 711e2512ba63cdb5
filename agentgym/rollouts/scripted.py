"""Running scripted policies through environments and recording the episodes.

An episode record (:class:`agentgym.records.EpisodeRecord`, from
:meth:`agentgym.env.ToolEnv.episode_record`) is one JSON line of a file (:mod:`agentgym.rollouts.io`);
the same environment, policy, seed and arguments always give byte-identical lines.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.env import agent_env
from agentgym.envs.registration import make_env
from agentgym.policies import Policy, ReplayPolicy
from agentgym.records import ChatMessage, EpisodeRecord

__all__ = ["assistant_turns", "final_info", "make_policy", "replay", "rollout", "run_episode", "summarize"]


def run_episode(env: gym.Env, policy: Policy | str, *, seed: int | None = None, task_id: str | None = None, policy_name: str = "") -> EpisodeRecord:
    """Play one episode of ``policy`` in ``env`` and return its record.

    ``policy`` is a policy object or the name of a scripted policy the environment offers
    (:func:`make_policy` builds it with ``seed``, and the record names it).
    """
    if isinstance(policy, str):
        policy_name = policy_name or policy
        policy = make_policy(env, policy, 0 if seed is None else seed)
    options = {"task_id": task_id} if task_id is not None else None
    observation, info = env.reset(seed=seed, options=options)
    policy.reset(env.unwrapped, observation, info)
    done = False
    while not done:
        observation, _, terminated, truncated, _ = env.step(policy.act(observation))
        done = terminated or truncated
    record = agent_env(env).episode_record()
    return {**record, "policy": policy_name} if policy_name else record


def assistant_turns(record: EpisodeRecord) -> list[str | ChatMessage]:
    """The assistant turns of an episode record, as actions that replay it."""
    return [m if "tool_calls" in m else m["content"] for m in record["messages"] if m["role"] == "assistant"]


def replay(env: gym.Env, record: EpisodeRecord, actions: list[Any] | None = None) -> EpisodeRecord:
    """Replay ``actions`` (default: the record's own turns) on the record's task and seed."""
    turns = assistant_turns(record) if actions is None else actions
    return run_episode(env, ReplayPolicy(turns), seed=record["seed"], task_id=record["task_id"], policy_name=record.get("policy", ""))


def make_policy(env: gym.Env, name: str, seed: int) -> Policy:
    """Build the scripted policy ``name`` that ``env`` offers (``oracle``, ``random``, ...)."""
    base = agent_env(env)
    factories: dict[str, Callable[[int], Policy]] = base.policies()
    env_id = env.spec.id if env.spec else type(base).__name__
    if not factories:
        served = getattr(base, "env_id", None)  # a remote or Ray environment's served one
        where = f": play them in-process (agentgym.make_env({served!r})) and replay their records here (agentgym.rollouts.scripted.replay)" if served else ""
        raise ValueError(f"{env_id} runs no scripted policies, which read the task's solution where the environment lives{where}")
    if name not in factories:
        raise ValueError(f"unknown policy {name!r} for {env_id}; choose from: {', '.join(factories)}")
    return factories[name](seed)


def rollout(
    env_id: str, policy: str, *, episodes: int, seed: int = 0, split: str = "train", env_kwargs: dict[str, Any] | None = None, skip: Collection[int] = ()
) -> Iterator[EpisodeRecord]:
    """Yield ``episodes`` episode records of a named scripted policy.

    Tasks are visited in an order shuffled by ``seed`` (every task once before any repeats);
    episode ``i`` is reset with seed ``seed + i`` and its policy is built with that seed too.
    The episodes whose ``i`` is in ``skip`` are not played (an interrupted run finished them).
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1; got {episodes}")
    env = make_env(env_id, split=split, **(env_kwargs or {}))
    try:
        task_ids = env.unwrapped.task_ids
        order = np.random.default_rng(seed).permutation(len(task_ids))
        for i in range(episodes):
            if i in skip:
                continue
            episode_seed = seed + i
            agent = make_policy(env, policy, episode_seed)
            task_id = task_ids[int(order[i % len(task_ids)])]
            yield run_episode(env, agent, seed=episode_seed, task_id=task_id, policy_name=policy)
    finally:
        env.close()


def summarize(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """Success rate, mean reward and turns, and error rates per turn over episode records."""
    records = list(records)
    if not records:
        raise ValueError("no episodes to summarise")
    turns = sum(r["turns"] for r in records)
    last_info = [final_info(r) for r in records]
    summary = {
        "episodes": len(records),
        "success_rate": sum(bool(r["success"]) for r in records) / len(records),
        "mean_reward": statistics.fmean(r["reward"] for r in records),
        "mean_turns": turns / len(records),
        "format_errors_per_turn": sum(i.get("format_errors", 0) for i in last_info) / max(turns, 1),
        "tool_errors_per_turn": sum(i.get("tool_errors", 0) for i in last_info) / max(turns, 1),
    }
    lookups = sum(i.get("cache_hits", 0) + i.get("cache_misses", 0) for i in last_info)
    if lookups:
        summary["cache_hit_rate"] = sum(i.get("cache_hits", 0) for i in last_info) / lookups
    return summary


def final_info(record: EpisodeRecord) -> Mapping[str, Any]:
    """The ``info`` of an episode record's last step (its :class:`~agentgym.records.StepInfo`: the
    episode's final counts); empty before any step."""
    return record["steps"][-1]["info"] if record["steps"] else {}
