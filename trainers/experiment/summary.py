"""Every number of the results, recomputed from the written evaluation episodes: success with
Wilson intervals, paired differences with task-clustered bootstrap intervals, pass^k, breakdowns
and the GRPO curves."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.rollouts.evaluation import paired_bootstrap, pass_hat_k, wilson_interval
from agentgym.rollouts.io import read_jsonl
from agentgym.trainers.diagnostics import read_metrics
from agentgym.trainers.experiment.config import BASE, CONFIG_ADAPTER, GRPO, SFT
from agentgym.trainers.experiment.report import results_markdown, write_plots
from agentgym.trainers.experiment.timings import PhaseTimings

__all__ = ["summarize_experiment"]


def summarize_experiment(out: str | Path) -> dict[str, Any]:
    """Compute every number of the results from the written evaluation episodes; write
    ``summary.json``, ``results.md`` and ``plots/``; return the summary."""
    out = Path(out)
    import yaml

    config = CONFIG_ADAPTER.validate_python(yaml.safe_load((out / "experiment.yaml").read_text(encoding="utf-8")))
    tasks = json.loads((out / "tasks.json").read_text(encoding="utf-8"))
    arms = [BASE, SFT, GRPO, *config.ablations]
    episodes = {arm: _read_arm(out, arm, config.seeds) for arm in arms}
    episodes = {arm: rows for arm, rows in episodes.items() if rows}
    commits, machines = out / "commits.json", out / "machines.json"
    started: list[str] = json.loads(commits.read_text(encoding="utf-8")) if commits.is_file() else []
    summary: dict[str, Any] = {
        "env_id": config.env_id,
        "model": config.model or "smollm2-135m-instruct",
        # The code of the last (re)start; "commits" lists every commit a resumed run ran under.
        "commit": started[-1] if started else None,
        "commits": started,
        # The machines it ran on: where the CPU multiplies bfloat16 natively, autocast "auto" trains in bfloat16.
        "machines": json.loads(machines.read_text(encoding="utf-8")) if machines.is_file() else [],
        "seeds": list(config.seeds),
        "run": config.run,
        "development": dataclasses.asdict(config.development) if config.development is not None else None,
        "choices": [dataclasses.asdict(choice) for choice in config.choices],
        "controls": dict(config.controls),
        "evaluation": {
            "trials": config.evaluation.trials,
            "temperature": config.evaluation.temperature,
            "env_kwargs": config.evaluation.env_kwargs,
            "episodes_per_model": len(tasks["eval"]) * config.evaluation.trials,
        },
        "arms": {arm: _arm_summary(rows, config.evaluation.trials) for arm, rows in episodes.items()},
        "train_task_ids": tasks["grpo"],
        "sft_task_ids": tasks["sft"],
        "eval_task_ids": tasks["eval"],
    }
    pairs = [*((arm, SFT) for arm in [GRPO, *config.ablations]), *((arm, GRPO) for arm in config.ablations), *config.controls.items()]
    for arm, other in pairs:
        # An arm may have run on only some seeds (agentgym experiment --arms): paired where both ran.
        if arm in episodes and other in episodes and f"delta_{arm}_minus_{other}" not in summary and _seeds(episodes[arm]) & _seeds(episodes[other]):
            summary[f"delta_{arm}_minus_{other}"] = _paired_delta(episodes[arm], episodes[other])
    curves = {arm: _curves(out, arm, config.seeds) for arm in [GRPO, *config.ablations]}
    summary["grpo_curves"] = {arm: c for arm, c in curves.items() if c}
    timings = PhaseTimings(out / "timings.json")
    summary["jobs"] = config.jobs
    summary["phase_seconds"] = timings.phases
    summary["phase_peak_mib"] = timings.peaks
    summary["wall_seconds"] = timings.wall
    summary["sessions"] = timings.sessions
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    plots = write_plots(summary, out / "plots")
    (out / "results.md").write_text(results_markdown(summary, episodes, plots, out), encoding="utf-8")
    return summary


def _read_arm(out: Path, arm: str, seeds: Sequence[int]) -> list[dict[str, Any]]:
    paths = [out / BASE / "eval.jsonl"] if arm == BASE else [out / arm / f"seed-{s}" / "eval.jsonl" for s in seeds]
    return [row for path in paths if path.is_file() for row in read_jsonl(path)]


def _arm_summary(rows: Sequence[Mapping[str, Any]], trials: int) -> dict[str, Any]:
    """Success (pooled, with a Wilson interval), its spread over seeds, pass^k, and episode statistics,
    over the episodes the machinery did not fail under (those are counted in ``infra_errors``)."""
    every, rows = rows, [r for r in rows if r["stop_reason"] != "infra_error"]
    successes = sum(r["success"] for r in rows)
    per_seed: dict[Any, list[bool]] = defaultdict(list)
    per_task: dict[tuple[Any, str], list[bool]] = defaultdict(list)
    per_template: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        per_seed[r["seed"]].append(r["success"])
        per_task[(r["seed"], r["task_id"])].append(r["success"])
        per_template[_template(r)].append(r["success"])
    seed_rates = [statistics.fmean(v) for v in per_seed.values()]
    low, high = wilson_interval(successes, len(rows))
    return {
        "success": successes / len(rows),
        "ci": [low, high],
        "n": len(rows),
        "seeds": [s for s in per_seed if s is not None],
        "per_seed": {str(s): statistics.fmean(v) for s, v in per_seed.items()},
        "seed_mean": statistics.fmean(seed_rates),
        "seed_std": statistics.stdev(seed_rates) if len(seed_rates) > 1 else 0.0,
        "mean_reward": statistics.fmean(r["reward"] for r in rows),
        **{f"pass^{k}": _pass_hat_k(per_task, k) for k in range(1, trials + 1)},
        "mean_turns": statistics.fmean(r["turns"] for r in rows),
        "format_errors_per_turn": sum(r["format_errors"] for r in rows) / max(1, sum(r["turns"] for r in rows)),
        "mean_sampled_tokens": statistics.fmean(r["sampled_tokens"] for r in rows),
        "mean_tokens": statistics.fmean(r["tokens"] for r in rows),
        "faulted_episodes": sum(r["faults"] > 0 for r in rows) / len(rows),
        "success_after_a_fault": _rate([r["success"] for r in rows if r["faults"] > 0]),
        "success_without_faults": _rate([r["success"] for r in rows if r["faults"] == 0]),
        "per_template": {t: {"n": len(v), "success": statistics.fmean(v)} for t, v in sorted(per_template.items())},
        "infra_errors": len(every) - len(rows),
    }


def _pass_hat_k(per_task: Mapping[Any, Sequence[bool]], k: int) -> float:
    """pass^k over the tasks with at least ``k`` trials left (an infra error removes one); NaN if none has."""
    complete = {task: trials for task, trials in per_task.items() if len(trials) >= k}
    return pass_hat_k(complete, k) if complete else math.nan


def _rate(values: Sequence[bool]) -> float | None:
    return statistics.fmean(values) if values else None


def _template(row: Mapping[str, Any]) -> str:
    """A task's family for breakdowns: its question template, else its difficulty."""
    return str(row.get("template") or row.get("difficulty") or "all")


def _seeds(rows: Sequence[Mapping[str, Any]]) -> set[Any]:
    return {r["seed"] for r in rows}


def _paired_delta(arm_rows: Sequence[Mapping[str, Any]], base_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Success difference on identical (seed, task, trial) episodes of the seeds both arms ran, with a
    bootstrap interval over tasks; a pair with an episode the machinery failed under is left out."""
    base = {(r["seed"], r["task_id"], r["trial"]): r for r in base_rows}
    shared = _seeds(arm_rows) & _seeds(base_rows)
    arm_rows = [r for r in arm_rows if r["seed"] in shared]
    by_task: dict[str, list[float]] = defaultdict(list)
    by_seed: dict[str, list[float]] = defaultdict(list)
    wins = losses = 0
    for r in arm_rows:
        key = (r["seed"], r["task_id"], r["trial"])
        if key not in base:
            raise ValueError(f"no paired episode for {key}")
        if "infra_error" in (r["stop_reason"], base[key]["stop_reason"]):
            continue
        d = float(r["success"]) - float(base[key]["success"])
        wins += d > 0
        losses += d < 0
        by_task[r["task_id"]].append(d)
        by_seed[str(r["seed"])].append(d)
    mean, (low, high) = paired_bootstrap(by_task)
    return {
        "mean": mean,
        "ci": [low, high],
        "n_pairs": sum(map(len, by_task.values())),
        "tasks": len(by_task),
        "wins": wins,
        "losses": losses,
        "per_seed": {seed: statistics.fmean(values) for seed, values in by_seed.items()},
        "interval": "95% bootstrap over tasks (10,000 resamples)",
    }


def _curves(out: Path, arm: str, seeds: Sequence[int]) -> dict[str, dict[str, list[float | None]]]:
    """Per seed, the GRPO training metrics by step (from the run's ``metrics.jsonl``)."""
    keys = ("reward/mean", "episode/success_rate", "episode/turns", "policy/entropy", "policy/kl")
    curves: dict[str, dict[str, list[float | None]]] = {}
    for seed in seeds:
        path = out / arm / f"seed-{seed}" / "run" / "metrics.jsonl"
        if not path.is_file():
            continue
        rows = [row for row in read_metrics(path) if row["phase"] == "grpo"]
        curves[str(seed)] = {key: [_finite(row.get(key)) for row in rows] for key in keys if any(key in row for row in rows)}
    return curves


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
