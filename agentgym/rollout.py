"""Running scripted policies through environments and recording the episodes.

An episode record is one JSON line (:class:`agentgym.records.EpisodeRecord`, from
:meth:`agentgym.env.ToolEnv.episode_record`); the same environment, policy, seed and arguments
always give byte-identical lines.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import gymnasium as gym
import numpy as np

from agentgym.env import agent_env
from agentgym.envs.registration import make_env
from agentgym.parsing import UNPAIRED_SURROGATE
from agentgym.policies import Policy, ReplayPolicy
from agentgym.records import ChatMessage, EpisodeRecord

__all__ = [
    "assistant_turns",
    "final_info",
    "make_policy",
    "read_jsonl",
    "read_records",
    "replay",
    "rollout",
    "run_episode",
    "summarize",
    "to_json_line",
    "write_jsonl",
    "write_records",
]

Row = TypeVar("Row", bound=Mapping[str, Any])


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
        where = f": play them in-process (agentgym.make_env({served!r})) and replay their records here (agentgym.rollout.replay)" if served else ""
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


def to_json_line(record: Mapping[str, Any]) -> str:
    """Serialise a record as one line of JSON (deterministic; UTF-8 kept as is).

    Strings that UTF-8 cannot encode (unpaired surrogates, e.g. from a Python caller's action)
    are written as JSON escapes, so the line reads back to the same record instead of failing.
    """
    line = json.dumps(record, ensure_ascii=False, allow_nan=False)
    return UNPAIRED_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


def write_jsonl(path: str | Path, records: Iterable[Row]) -> list[Row]:
    """Write records to ``path`` (one per line) and return them.

    The file appears only once complete (written beside it, then renamed), so a failure midway
    never leaves a truncated file or destroys an existing one. What was written before the
    failure is kept, flushed line by line, in ``.{name}.partial`` beside it, and the error says so.
    """
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    written: list[Row] = []
    try:
        with open(partial, "w", encoding="utf-8") as out:
            for record in records:
                try:
                    line = to_json_line(record)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"record {len(written) + 1} for {path} is not JSON data ({exc})") from None
                out.write(line + "\n")
                out.flush()
                written.append(record)
    except BaseException as exc:
        if not written:
            partial.unlink(missing_ok=True)
        elif isinstance(exc, Exception):
            exc.add_note(f"the {len(written)} records written before the failure are in {partial}")
        raise
    os.replace(partial, path)
    return written


def write_records(path: str | Path, records: Iterable[Row]) -> list[Row]:
    """Write episode records as JSON lines (:func:`write_jsonl`), or as Parquet when ``path`` ends in
    ``.parquet`` (the ``data`` extra; nested types, see :mod:`agentgym.parquet`). Returns the records."""
    path = Path(path)
    if path.suffix != ".parquet":
        return write_jsonl(path, records)
    from agentgym.parquet import write_parquet

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ValueError(f"writing {path.name} needs the data extra: pip install 'agentgym[data]'") from None
    lines = path.with_name(f".{path.name}.jsonl")  # kept if the conversion fails, like a partial file
    written = write_jsonl(lines, records)
    partial = path.with_name(f".{path.name}.partial")
    write_parquet(partial, read_jsonl(lines))  # the records as the JSON lines hold them
    os.replace(partial, path)
    lines.unlink()
    return written


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file, with a clear error naming the first bad line."""
    records = []
    with open(path, encoding="utf-8") as src:
        for number, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    return records


def read_records(path: str | Path) -> list[EpisodeRecord]:
    """Read a JSONL file of episode records (``agentgym rollout --out``, ``agentgym eval --out``, a
    labelled set), typed as :class:`~agentgym.records.EpisodeRecord`. The lines are JSON, not
    checked against the type: a record of the richer kinds keeps its other fields."""
    return cast("list[EpisodeRecord]", read_jsonl(path))
