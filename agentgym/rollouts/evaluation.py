"""Evaluate a policy on an environment: success with a confidence interval, rewards, turns, tokens, errors.

:func:`evaluate` rolls the policy out with :class:`~agentgym.rollouts.runner.RolloutRunner` and
:func:`eval_metrics` summarises the episodes. The metrics build on
:func:`agentgym.rollouts.scripted.summarize` (so ``agentgym rollout`` and ``agentgym eval`` name shared
quantities alike) and add:

* ``success_ci95``: the 95% Wilson score interval of the success rate (sound at 0% and 100% and
  for a handful of episodes, where the normal approximation is not);
* ``reward_components``: the mean of each reward component over the episodes that report it;
* ``mean_tokens`` / ``mean_sampled_tokens``: trajectory length and trained tokens per episode;
* ``tool_calls_per_turn`` and ``tool_error_rate`` (executed calls that raised a tool error), next to
  ``format_errors_per_turn`` (unparseable calls, invalid arguments, unknown tools);
* ``stop_reasons`` and ``per_difficulty`` (tasks carry a ``difficulty`` field);
* ``infra_errors``: episodes the machinery failed under (``stop_reason == "infra_error"``), after
  :func:`evaluate` played each again ``infra_retries`` times (``infra_retried`` counts the replays).
  They are no evidence about the policy: every other metric leaves them out (``stop_reasons``
  still lists them);
* ``policy_violations_per_episode``: the mean of the final ``info["policy_violations"]`` over the
  episodes whose environment reports it (e.g. TauRetail-v0); absent when none does;
* with several trials per task (``group_size`` > 1): ``pass_hat_k``, τ-bench's pass^k for k = 1 …
  trials (:func:`pass_hat_k`), and ``per_task`` (each task's successes out of its trials).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from agentgym.models import GenerationBackend
from agentgym.records import EpisodeRecord
from agentgym.rollouts.runner import Episode, EpisodeFn, ProgressFn, RolloutConfig, RolloutRunner, RolloutTiming
from agentgym.rollouts.scripted import final_info, summarize

__all__ = ["EvalResult", "eval_metrics", "evaluate", "paired_bootstrap", "pass_hat_k", "print_report", "wilson_interval"]

_DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1; got {successes} of {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # Clamp rounding noise at the ends (the exact interval is [0, ...] at 0 successes).
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_hat_k(trials: Mapping[Any, Sequence[bool]], k: int) -> float:
    """τ-bench's pass^k: the chance that ``k`` trials of a task, drawn from its ``n`` trials, all succeed,
    averaged over tasks (``C(c, k) / C(n, k)`` with ``c`` successes). pass^1 is the success rate.

    Args:
        trials: per task, the success of each of its trials (every task needs at least ``k``).
        k: trials that must all succeed.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1; got {k}")
    if not trials:
        raise ValueError("no tasks")
    short = [task for task, outcomes in trials.items() if len(outcomes) < k]
    if short:
        raise ValueError(f"pass^{k} needs at least {k} trials per task; {short[0]!r} has fewer")
    return statistics.fmean(math.comb(sum(map(bool, o)), k) / math.comb(len(o), k) for o in trials.values())


def paired_bootstrap(
    differences: Mapping[Any, Sequence[float]], *, resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Mean of paired differences and its percentile bootstrap interval, resampling whole clusters.

    Args:
        differences: per cluster (e.g. a task), the paired differences observed in it (e.g. one per
            training seed and trial). Clusters are resampled with replacement, so differences that
            share a cluster stay together and correlation within it widens the interval, as it should.
        resamples: bootstrap resamples.
        confidence: interval mass.
        seed: the resampling seed (the interval is deterministic given it).

    Returns:
        ``(mean, (low, high))`` where ``mean`` is over all differences.
    """
    import numpy as np

    if not differences or any(len(d) == 0 for d in differences.values()):
        raise ValueError("every cluster needs at least one difference")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    sums = np.array([float(sum(d)) for d in differences.values()])
    counts = np.array([len(d) for d in differences.values()], dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(sums), size=(resamples, len(sums)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(sums.sum() / counts.sum()), (float(low), float(high))


def _final_counts(record: EpisodeRecord) -> dict[str, int]:
    info = final_info(record)
    return {key: int(info.get(key, 0)) for key in ("tool_calls", "tool_errors", "format_errors")}


def _violation_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Mean policy violations per episode, over the episodes whose environment counts them."""
    infos = [final_info(e.record) for e in episodes]
    counts = [info["policy_violations"] for info in infos if "policy_violations" in info]
    return {"policy_violations_per_episode": statistics.fmean(counts)} if counts else {}


def _group_metrics(episodes: Sequence[Episode]) -> dict[str, Any]:
    """``summarize`` of the records with the success interval placed after the success rate."""
    records = [e.record for e in episodes]
    base = summarize(records)
    successes = sum(bool(r["success"]) for r in records)
    metrics: dict[str, Any] = {}
    for key, value in base.items():
        metrics[key] = value
        if key == "success_rate":
            metrics["success_ci95"] = list(wilson_interval(successes, len(records)))
    return metrics


def eval_metrics(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Summary metrics of finished episodes (see the module docstring for their definitions)."""
    if not episodes:
        raise ValueError("no episodes to evaluate")
    every, episodes = episodes, [e for e in episodes if not e.infra_error]
    machinery = {
        "infra_errors": len(every) - len(episodes),
        "infra_retried": sum(int(e.record.get("infra_retries", 0)) for e in every),
        "stop_reasons": dict(sorted(Counter(e.stop_reason for e in every).items())),
    }
    if not episodes:
        return {"episodes": 0, **machinery}
    components: dict[str, list[float]] = {}
    for episode in episodes:
        for name, value in episode.record["reward_components"].items():
            components.setdefault(name, []).append(float(value))
    counts = Counter[str]()
    for episode in episodes:
        counts.update(_final_counts(episode.record))
    turns = sum(e.record["turns"] for e in episodes)
    by_difficulty: dict[str, list[Episode]] = {}
    for episode in episodes:
        if "difficulty" in episode.record:
            by_difficulty.setdefault(str(episode.record["difficulty"]), []).append(episode)
    levels = sorted(by_difficulty, key=lambda d: (_DIFFICULTY_ORDER.get(d, len(_DIFFICULTY_ORDER)), d))
    return {
        **_group_metrics(episodes),
        **_trial_metrics(episodes),
        "reward_components": {name: statistics.fmean(values) for name, values in components.items()},
        "mean_tokens": statistics.fmean(len(e.trajectory.token_ids) for e in episodes),
        "mean_sampled_tokens": statistics.fmean(sum(e.trajectory.loss_mask) for e in episodes),
        "tool_calls_per_turn": counts["tool_calls"] / max(turns, 1),
        "tool_error_rate": counts["tool_errors"] / counts["tool_calls"] if counts["tool_calls"] else None,
        **_violation_metrics(episodes),
        **machinery,
        "per_difficulty": {level: _group_metrics(by_difficulty[level]) for level in levels},
    }


def _trial_metrics(episodes: Sequence[Episode]) -> dict[str, Any]:
    """pass^k for k up to the fewest trials of a task, and each task's successes; nothing with one trial."""
    trials: dict[str, list[bool]] = {}
    for episode in episodes:
        trials.setdefault(str(episode.record["task_id"]), []).append(bool(episode.record["success"]))
    fewest = min(len(t) for t in trials.values())
    if fewest < 2:
        return {}
    return {"pass_hat_k": {str(k): pass_hat_k(trials, k) for k in range(1, fewest + 1)}, "per_task": {task: f"{sum(t)}/{len(t)}" for task, t in trials.items()}}


@dataclass
class EvalResult:
    """What :func:`evaluate` returns.

    Attributes:
        config: the rollout configuration.
        episodes: the episodes, ordered by (group, member).
        metrics: :func:`eval_metrics` of the episodes.
        timing: where the run's wall time went (not deterministic, unlike everything else).
    """

    config: RolloutConfig
    episodes: list[Episode]
    metrics: dict[str, Any]
    timing: RolloutTiming


def evaluate(
    backend: GenerationBackend,
    config: RolloutConfig,
    *,
    progress: ProgressFn | None = None,
    on_episode: EpisodeFn | None = None,
    earlier: Sequence[Episode] = (),
    infra_retries: int = 1,
) -> EvalResult:
    """Roll ``backend`` out as ``config`` says and summarise the episodes.

    ``on_episode`` gets each episode as it finishes. ``earlier`` holds episodes of this
    configuration that an interrupted run finished: they are not played again, and they count in
    the result as if this run had played them (the timing covers this run alone). An episode the
    machinery failed under is played again up to ``infra_retries`` times (see
    :meth:`RolloutRunner.run`).
    """
    runner = RolloutRunner(backend)
    played = runner.run(config, progress=progress, on_episode=on_episode, skip={(e.group, e.member) for e in earlier}, infra_retries=infra_retries)
    episodes = sorted([*earlier, *played], key=lambda e: (e.group, e.member))
    assert runner.last_timing is not None
    return EvalResult(config=config, episodes=episodes, metrics=eval_metrics(episodes), timing=runner.last_timing)


def _format(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, float) for v in value):
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_format(v)}" for k, v in value.items())
    return str(value)


def print_report(summary: Mapping[str, Any], console: Any = None) -> None:
    """Print an evaluation summary (:func:`eval_metrics` plus run details) as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    title = f"{summary['env']} — {summary['policy']} ({summary['split']})"
    table = Table("metric", "value", title=title)
    for key, value in summary.items():
        if key in ("env", "policy", "split", "per_difficulty", "per_task", "timing"):
            continue
        table.add_row(key.replace("_", " "), _format(value))
    console.print(table)
    if summary.get("per_difficulty"):
        levels = Table("difficulty", "episodes", "success", "95% CI", "mean reward", "mean turns", title="per difficulty")
        for level, m in summary["per_difficulty"].items():
            levels.add_row(
                level, str(m["episodes"]), _format(m["success_rate"]), _format(m["success_ci95"]), _format(m["mean_reward"]), _format(m["mean_turns"])
            )
        console.print(levels)
    timing = summary.get("timing")
    if timing:
        console.print(
            f"{timing['sampled_tokens']} tokens sampled in {timing['wall_s']:.1f} s ({timing['tokens_per_s']:.1f} tokens/s); "
            f"generation {timing['generate_share']:.1%}, environments {timing['env_share']:.1%} of wall time"
        )
