"""Checking a reward function against human judgement before training on it.

Input: episode records (the rollout JSONL format), each with a human ``label``:
``{"pass": bool, "score": float (optional), "kind": "success" | "partial" | "failure" | "hack",
"justification": "..."}`` (:class:`~agentgym.records.LabelledRecord`). The reward is scored on
every record and compared with the labels (accuracy and Cohen's kappa on pass/fail; Spearman
correlation and mean absolute error where labels carry scores). Built-in checks, named after OpenEnv's vocabulary:

- ``oracle_max``: the environment's oracle trajectories reach the reward's maximum;
- ``canary_floor``: do-nothing, random, format-only, answer-spam and tool-spam trajectories never
  pass and score no higher than the floor: ``max(0, lowest score of a labelled failure)``;
- ``verifier_determinism``: the same records score the same in other processes;
- ``gameability_gap``: every probe (canaries and labelled hacks) scores below every honest success.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.registration import make_env
from agentgym.records import EpisodeRecord, Label, LabelledRecord
from agentgym.verifiers.result import RewardResult

__all__ = ["RewardFn", "ValidationReport", "env_reward", "load_reward", "validate"]

RewardFn = Callable[[EpisodeRecord], RewardResult | float]
CANARIES = ("do_nothing", "random", "format_only", "answer_spam", "tool_spam")
LABEL_KINDS = ("success", "partial", "failure", "hack")


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class Disagreement:
    task_id: str
    label: Label
    score: float
    passed: bool
    reason: str


@dataclass
class ValidationReport:
    """Agreement statistics, built-in checks and every disagreement."""

    n: int
    accuracy: float
    kappa: float
    confusion: dict[str, int]
    spearman: float | None
    mae: float | None
    checks: list[Check]
    disagreements: list[Disagreement]
    min_agreement: float
    ok: bool = field(init=False)

    def __post_init__(self) -> None:
        self.ok = self.accuracy >= self.min_agreement and all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "n": self.n,
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "min_agreement": self.min_agreement,
            "confusion": self.confusion,
            "spearman": self.spearman,
            "mae": self.mae,
            "checks": [vars(c) for c in self.checks],
            "disagreements": [vars(d) for d in self.disagreements],
        }


def _as_result(value: RewardResult | float) -> RewardResult:
    return value if isinstance(value, RewardResult) else RewardResult(score=float(value))


def env_reward(record: EpisodeRecord) -> RewardResult:
    """The environment's own reward for a recorded episode, recomputed by replaying its assistant
    turns in a fresh environment (the record's stored reward is never trusted)."""
    import agentgym  # noqa: F401  (registers the environments)
    from agentgym.rollouts.scripted import replay

    env = make_env(record["env_id"], **record.get("env_kwargs", {"split": record["split"]}))
    try:
        result = replay(env, record)
    finally:
        env.close()
    return RewardResult(score=result["reward"], reason=result["reward_reason"], components=result["reward_components"], passed=result["success"])


def load_reward(spec: str) -> RewardFn:
    """Import ``module:function``; the function takes an episode record and returns a score or RewardResult."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--reward must look like module:function, got {spec!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load reward {spec!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"reward {spec!r} is not callable")
    return fn


def validate(
    records: Sequence[LabelledRecord],
    reward: RewardFn = env_reward,
    *,
    env_id: str | None = None,
    min_agreement: float = 0.95,
    probe_episodes: int = 10,
    reward_spec: str | None = None,
) -> ValidationReport:
    """Score labelled records with ``reward``, compare with the labels and run the built-in checks.

    Args:
        records: labelled episode records.
        reward: the reward function under test (default: the environment's own reward).
        env_id: environment for the rollout-based checks (default: the records' env).
        min_agreement: the pass/fail accuracy below which validation fails.
        probe_episodes: episodes per oracle/canary policy.
        reward_spec: ``module:function`` of ``reward``, so other processes can import it for the
            determinism check (``None`` means the environment's own reward).
    """
    if not records:
        raise ValueError("no labelled records")
    for i, record in enumerate(records):
        _check_label(i, record)
    results = [_as_result(reward(r)) for r in records]
    labels = [r["label"] for r in records]
    predicted = [_passed(res) for res in results]
    truth = [bool(lbl["pass"]) for lbl in labels]
    confusion = {
        "true_pass": sum(t and p for t, p in zip(truth, predicted, strict=False)),
        "true_fail": sum(not t and not p for t, p in zip(truth, predicted, strict=False)),
        "false_pass": sum(not t and p for t, p in zip(truth, predicted, strict=False)),
        "false_fail": sum(t and not p for t, p in zip(truth, predicted, strict=False)),
    }
    scored = [(want, res.score) for lbl, res in zip(labels, results, strict=False) if (want := lbl.get("score")) is not None]
    disagreements = [
        Disagreement(r["task_id"], r["label"], res.score, p, res.reason)
        for r, res, p, t in zip(records, results, predicted, truth, strict=False)
        if p != t or _score_differs(r["label"], res.score)
    ]
    env_id = env_id or records[0]["env_id"]
    checks = _checks(records, results, reward, env_id, probe_episodes, reward_spec)
    return ValidationReport(
        n=len(records),
        accuracy=sum(t == p for t, p in zip(truth, predicted, strict=False)) / len(records),
        kappa=_cohens_kappa(truth, predicted),
        confusion=confusion,
        spearman=_spearman([a for a, _ in scored], [b for _, b in scored]) if len(scored) > 2 else None,
        mae=sum(abs(a - b) for a, b in scored) / len(scored) if scored else None,
        checks=checks,
        disagreements=disagreements,
        min_agreement=min_agreement,
    )


def _checks(records, results, reward, env_id, episodes, reward_spec) -> list[Check]:
    import agentgym  # noqa: F401
    from agentgym.rollouts.scripted import rollout

    split = records[0].get("split", "train")
    probes: dict[str, list[RewardResult]] = {}
    oracle = [_as_result(reward(r)) for r in rollout(env_id, "oracle", episodes=episodes, split=split)]
    top = max(oracle, key=lambda r: r.score).score
    checks = [
        Check(
            "oracle_max",
            all(_passed(r) for r in oracle) and min(r.score for r in oracle) >= top,
            f"oracle scores {min(r.score for r in oracle):.3f}..{top:.3f} over {len(oracle)} episodes, all passed: {all(_passed(r) for r in oracle)}",
        )
    ]
    for name in CANARIES:
        probes[name] = [_as_result(reward(r)) for r in rollout(env_id, name, episodes=episodes, split=split)]
    honest = [res.score for rec, res in zip(records, results, strict=False) if rec["label"]["pass"] and rec["label"].get("kind", "success") == "success"]
    floor = max(0.0, min((res.score for rec, res in zip(records, results, strict=False) if not rec["label"]["pass"]), default=0.0))
    canary_bad = {n: max(r.score for r in rs) for n, rs in probes.items() if any(_passed(r) or r.score > floor for r in rs)}
    checks.append(
        Check("canary_floor", not canary_bad, "every canary at the floor" if not canary_bad else f"canaries above the floor {floor:.3f}: {canary_bad}")
    )
    rescored = _score_elsewhere(records, reward_spec)
    mismatches = [r["task_id"] for r, a, b in zip(records, results, rescored, strict=False) if a.score != b]
    checks.append(
        Check(
            "verifier_determinism",
            not mismatches,
            f"{len(records)} records rescored in 2 other processes: identical" if not mismatches else f"scores differ for {mismatches[:5]}",
        )
    )
    hacks = [res.score for rec, res in zip(records, results, strict=False) if rec["label"].get("kind") == "hack"]
    probe_scores = hacks + [r.score for rs in probes.values() for r in rs]
    gap = (min(honest) - max(probe_scores)) if honest and probe_scores else math.nan
    checks.append(
        Check(
            "gameability_gap",
            bool(honest) and gap > 0,
            f"lowest honest success {min(honest):.3f} vs highest probe {max(probe_scores):.3f} (gap {gap:.3f})"
            if honest
            else "no labelled honest successes to compare with",
        )
    )
    return checks


def _score_elsewhere(records: Sequence[EpisodeRecord], reward_spec: str | None) -> list[float]:
    with ProcessPoolExecutor(max_workers=2) as pool:
        return list(pool.map(_score_in_worker, [(reward_spec, r) for r in records], chunksize=max(1, len(records) // 2)))


def _score_in_worker(job: tuple[str | None, EpisodeRecord]) -> float:
    spec, record = job
    reward = env_reward if spec is None else load_reward(spec)
    return _as_result(reward(record)).score


def _score_differs(label: Label, score: float) -> bool:
    """Whether the label gives a score and ``score`` is more than 0.05 from it."""
    want = label.get("score")
    return want is not None and abs(score - want) > 0.05


def _passed(result: RewardResult) -> bool:
    return result.passed if result.passed is not None else result.score >= 0.5


def _check_label(index: int, record: Mapping[str, Any]) -> None:
    label = record.get("label")
    where = f"record {index} ({record.get('task_id', '?')})"
    if not isinstance(label, dict) or not isinstance(label.get("pass"), bool):
        raise ValueError(f'{where}: needs a label {{"pass": true|false, "justification": ...}}')
    if not isinstance(label.get("justification"), str) or not label["justification"].strip():
        raise ValueError(f"{where}: the label needs a one-line justification")
    if label.get("kind", "success") not in LABEL_KINDS:
        raise ValueError(f"{where}: label kind must be one of {LABEL_KINDS}")
    if label.get("score") is not None and not isinstance(label["score"], int | float):
        raise ValueError(f"{where}: label score must be a number")
    for key in ("env_id", "task_id", "messages"):
        if key not in record:
            raise ValueError(f"{where}: missing {key!r}; records must be in the rollout JSONL format")


def _cohens_kappa(truth: list[bool], predicted: list[bool]) -> float:
    n = len(truth)
    observed = sum(t == p for t, p in zip(truth, predicted, strict=False)) / n
    p_true, p_pred = sum(truth) / n, sum(predicted) / n
    expected = p_true * p_pred + (1 - p_true) * (1 - p_pred)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def _spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=False))
    sa = math.sqrt(sum((x - ma) ** 2 for x in ra))
    sb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (sa * sb) if sa and sb else (1.0 if ra == rb else 0.0)


def _ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks
