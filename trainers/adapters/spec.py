"""The episode spec: what a trainer's dataset row must carry to rebuild one agentgym episode.

Trainers move dataset rows through Ray, Arrow and Parquet, so the spec travels as one JSON string
(the same string in every framework's row format) and is parsed back on the rollout worker. The
spec names the registered environment, the make() arguments, the task and the reset seed: with
those, every agentgym environment replays the same opening messages on any machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym

import agentgym
from agentgym.env import SPLITS
from agentgym.records import ChatMessage

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["SPEC_KEY", "EpisodeSpec", "SpecError"]

SPEC_KEY = "agentgym_spec"
"""Name of the dataset column (or ``extra_info`` entry) holding the spec's JSON."""


class SpecError(ValueError):
    """A dataset row does not carry a usable episode spec (the message says what is wrong)."""


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode: environment id, make() arguments, task and reset seed.

    Attributes:
        env_id: a registered environment id, e.g. ``"agentgym/Refund-v0"``.
        task_id: the task the episode plays (``reset(options={"task_id": ...})``).
        split: the task split the task belongs to.
        seed: the ``reset`` seed (environments that draw anything at reset use it).
        env_kwargs: further JSON-serialisable ``gym.make`` arguments (``max_turns``...).
    """

    env_id: str
    task_id: str
    split: str = "train"
    seed: int | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise SpecError(f"env_id must be a non-empty string, got {self.env_id!r}")
        if not isinstance(self.task_id, str) or not self.task_id:
            raise SpecError(f"task_id must be a non-empty string, got {self.task_id!r}")
        if self.split not in SPLITS:
            raise SpecError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise SpecError(f"seed must be an integer or null, got {self.seed!r}")
        if not isinstance(self.env_kwargs, dict):
            raise SpecError(f"env_kwargs must be an object, got {type(self.env_kwargs).__name__}")
        reserved = {"split", "tasks"} & set(self.env_kwargs)
        if reserved:
            raise SpecError(f"env_kwargs must not set {sorted(reserved)}: the spec names the split and the task")
        try:
            json.dumps(self.env_kwargs)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"env_kwargs must be JSON-serialisable: {exc}") from None

    # -- serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict."""
        return {"env_id": self.env_id, "task_id": self.task_id, "split": self.split, "seed": self.seed, "env_kwargs": dict(self.env_kwargs)}

    def to_json(self) -> str:
        """The spec as one compact, key-sorted JSON string (stable across runs)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, value: str | dict[str, Any]) -> EpisodeSpec:
        """Parse a spec from its JSON string (or the already-decoded dict)."""
        if isinstance(value, str):
            text = value
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpecError(f"the agentgym spec is not valid JSON ({exc.msg}): {text[:120]!r}") from None
        if not isinstance(value, dict):
            raise SpecError(f"the agentgym spec must be a JSON object, got {type(value).__name__}")
        unknown = set(value) - {"env_id", "task_id", "split", "seed", "env_kwargs"}
        if unknown:
            raise SpecError(f"unknown keys in the agentgym spec: {sorted(unknown)}")
        missing = {"env_id", "task_id"} - set(value)
        if missing:
            raise SpecError(f"the agentgym spec lacks {sorted(missing)}")
        return cls(
            env_id=value["env_id"],
            task_id=value["task_id"],
            split=value.get("split", "train"),
            seed=value.get("seed"),
            env_kwargs=dict(value.get("env_kwargs") or {}),
        )

    @classmethod
    def from_row(cls, row: dict[str, Any], key: str = SPEC_KEY) -> EpisodeSpec:
        """The spec stored under ``key`` in a dataset row (or in its ``extra_info``)."""
        if key in row:
            return cls.from_json(row[key])
        extra = row.get("extra_info")
        if isinstance(extra, dict) and key in extra:
            return cls.from_json(extra[key])
        raise SpecError(f"the dataset row has no {key!r} entry (keys: {sorted(row)}); export the dataset with `python -m agentgym.trainers.adapters.export`")

    # -- episodes ---------------------------------------------------------------------------

    def make(self) -> MadeEnv:
        """Build the environment (``gym.make(env_id, split=..., **env_kwargs)``)."""
        try:
            return agentgym.make_env(self.env_id, split=self.split, **self.env_kwargs)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def reset(self, env: gym.Env) -> tuple[list[ChatMessage], dict[str, Any]]:
        """Start this spec's episode in ``env`` and return the opening messages and ``info``."""
        return env.reset(seed=self.seed, options={"task_id": self.task_id})

    @property
    def make_key(self) -> str:
        """Identifies the environment this spec builds: specs with equal keys can share one env (reset per episode)."""
        return json.dumps([self.env_id, self.split, self.env_kwargs], sort_keys=True)
