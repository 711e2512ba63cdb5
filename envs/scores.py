"""What the bundled model is expected to score: base, SFT and GRPO success per environment.

The figures come from the learning experiment's reported runs (seeds and tasks no configuration
choice was made on) and are kept in ``expected_scores.json`` beside this module;
``agentgym list --scores`` shows them. An environment without an entry has not been measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

__all__ = ["ArmScore", "ExpectedScores", "expected_scores"]


@dataclass(frozen=True)
class ArmScore:
    """One arm's success rate on the held-out episodes.

    Attributes:
        success: the share of successful episodes.
        ci: its 95 % Wilson interval.
        n: episodes (all seeds together).
    """

    success: float
    ci: tuple[float, float]
    n: int


@dataclass(frozen=True)
class ExpectedScores:
    """The bundled model's measured scores on one environment.

    Attributes:
        model: the model the arms start from.
        setting: the tasks, environment options and training budget the numbers hold for.
        seeds: the training seeds of the SFT and GRPO arms.
        source: the committed summary the numbers are copied from.
        arms: ``base``, ``sft`` and ``grpo``.
    """

    model: str
    setting: str
    seeds: tuple[int, ...]
    source: str
    arms: dict[str, ArmScore]


def expected_scores() -> dict[str, ExpectedScores]:
    """Every measured environment's expected scores, by environment id."""
    data = json.loads(resources.files("agentgym.envs").joinpath("expected_scores.json").read_text(encoding="utf-8"))
    return {
        env_id: ExpectedScores(
            model=entry["model"],
            setting=entry["setting"],
            seeds=tuple(entry["seeds"]),
            source=entry["source"],
            arms={arm: ArmScore(success=a["success"], ci=(a["ci"][0], a["ci"][1]), n=a["n"]) for arm, a in entry["arms"].items()},
        )
        for env_id, entry in data.items()
    }
