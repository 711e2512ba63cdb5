"""The run's short markdown report: what was trained, and the evaluation before and after."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.models import DEFAULT_MODEL
from agentgym.trainers.config import TrainConfig

__all__ = ["render_report", "write_report"]

# Evaluation labels in the order of the before/after table, with their column titles.
_COLUMNS = (("base", "base model"), ("sft", "after SFT"), ("final", "after GRPO"))

_ROWS = (
    ("episode/success_rate", "success rate"),
    ("reward/mean", "mean reward"),
    ("episode/turns", "turns per episode"),
    ("episode/response_tokens", "sampled tokens per episode"),
    ("episode/format_error_rate", "format errors per turn"),
    ("episode/tool_error_rate", "tool errors per turn"),
)


def _cell(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3f}"


def render_report(
    config: TrainConfig,
    evaluations: Mapping[str, Mapping[str, float]],
    *,
    warnings: Sequence[str] = (),
    notes: Sequence[str] = (),
    plots: Sequence[Path] = (),
    best: Mapping[str, Any] | None = None,
    stopped_early: bool = False,
    eval_tasks: Sequence[str] = (),
    trained_on: Sequence[str] = (),
    grpo_steps: Sequence[Mapping[str, float]] = (),
) -> str:
    """The report as markdown.

    Args:
        config: the run's configuration.
        evaluations: summaries by label (``base``, ``sft``, ``final`` and periodic ``grpo step N``),
            as :func:`agentgym.trainers.diagnostics.eval_summary` returns them.
        warnings: the warnings raised during training.
        notes: anything that was skipped (no TensorBoard, no plots).
        plots: PNG files, embedded as images.
        best: the best periodic evaluation, ``{"label", "value"}``.
        stopped_early: whether early stopping ended the GRPO phase.
        eval_tasks: the evaluation task ids.
        trained_on: the task ids SFT or GRPO trained on (to say whether evaluation tasks were seen).
        grpo_steps: the metrics of each GRPO step (``metrics.jsonl`` lines), summarised as the
            training rollouts' success rate and reward at the start and the end of the phase.
    """
    columns = [(label, title) for label, title in _COLUMNS if label in evaluations]
    model = config.model or DEFAULT_MODEL
    lines = [
        f"# Training report: {config.env_id}",
        "",
        f"- model: `{model}` on `{config.device}` ({config.dtype}), seed {config.seed}" + (f", LoRA r={config.lora.r}" if config.lora.enabled else ""),
        f"- SFT: {config.sft.steps} steps on `{config.sft.source}` demonstrations, lr {config.sft.optim.lr:g}" if config.sft.steps else "- SFT: none",
        f"- GRPO: {config.grpo.steps} steps x {config.rollout.num_tasks} tasks x {config.rollout.group_size} samples, "
        f"lr {config.optim.lr:g}, kl_coef {config.grpo.kl_coef:g}, loss `{config.grpo.loss_agg}`" + (" (stopped early)" if stopped_early else "")
        if config.grpo.steps
        else "- GRPO: none",
        f"- evaluation: {len(eval_tasks)} task(s) of the `{config.eval.split}` split, {config.eval.samples} episode(s) each at temperature "
        f"{config.eval.temperature:g}" + (f" ({', '.join(eval_tasks[:8])}{', ...' if len(eval_tasks) > 8 else ''})" if eval_tasks else "")
        if config.eval.enabled
        else "- evaluation: off (`eval.enabled: false`; the run is evaluated elsewhere)",
    ]
    if config.eval.enabled and config.eval.split == config.rollout.split:
        seen = sorted(set(eval_tasks) & set(trained_on))
        lines.append(
            f"- note: {len(seen)} of the evaluation tasks were trained on: this measures fitting, not generalisation"
            if seen
            else f"- the evaluation tasks come from the training split `{config.rollout.split}` but none was trained on"
        )
    if columns:
        lines += ["", "| metric | " + " | ".join(title for _, title in columns) + " | change |", "|---|" + "---|" * (len(columns) + 1)]
    components = sorted({k for s in evaluations.values() for k in s if k.startswith("reward/") and k != "reward/mean"})
    rows = [*_ROWS[:2], *((k, f"reward component `{k.removeprefix('reward/')}`") for k in components), *_ROWS[2:]]
    for key, title in rows if columns else ():
        values = [evaluations[label].get(key) for label, _ in columns]
        first, last = values[0], values[-1]
        change = last - first if len(values) > 1 and first is not None and last is not None else None
        signed = "–" if change is None or math.isnan(change) else f"{change:+.3f}"
        lines.append(f"| {title} | " + " | ".join(_cell(v) for v in values) + f" | {signed} |")
    if grpo_steps:
        lines += ["", _training_rollouts(grpo_steps, config)]
    periodic = [label for label in evaluations if label.startswith("grpo step")]
    if periodic:
        lines += ["", "Periodic evaluations: " + ", ".join(f"{label}: success {evaluations[label]['episode/success_rate']:.3f}" for label in periodic)]
    if best is not None:
        lines.append(f"Best periodic evaluation: {best['label']} ({config.eval.metric} {best['value']:.3f}).")
    if plots:  # the curves, shown where the report is read (relative paths: the run folder moves as a whole)
        lines += ["", "## Curves", "", *(f"![{p.stem.replace('_', ' ')}](plots/{p.name})" for p in plots)]
    if warnings:
        lines += ["", "## Warnings", "", *(f"- {w}" for w in warnings)]
    if notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    tensorboard = "`tensorboard/`, " if config.logging.tensorboard and not any("TensorBoard" in n for n in notes) else ""
    lines += [
        "",
        "## Files",
        "",
        f"- `config.yaml`, `metrics.jsonl` (one line per step), {tensorboard}`checkpoints/`",
        "- `model/`: the trained model (`--model` accepts this folder)" + (", `sft_model/`: the model after SFT" if "sft" in evaluations else ""),
    ]
    if plots:
        lines += ["- `plots/`: the curves above as PNG files"]
    return "\n".join(lines) + "\n"


def _training_rollouts(steps: Sequence[Mapping[str, float]], config: TrainConfig) -> str:
    """One sentence on the GRPO rollouts: the first and last steps (a fifth of the phase each, at
    least one step), since single steps of a few groups are noisy."""
    window = max(1, len(steps) // 5)
    first, last = steps[:window], steps[-window:]

    def mean(rows: Sequence[Mapping[str, float]], key: str) -> float:
        return sum(row[key] for row in rows) / len(rows)

    span = "step 1" if window == 1 else f"steps 1-{window}"
    end = f"step {len(steps)}" if window == 1 else f"steps {len(steps) - window + 1}-{len(steps)}"
    episodes = config.rollout.num_tasks * config.rollout.group_size
    per_step = f"{episodes}-{episodes * (config.grpo.resample_rounds + 1)}" if config.grpo.resample_rounds else str(episodes)  # dynamic sampling
    return (
        f"GRPO training rollouts (temperature {config.rollout.temperature:g}, {per_step} "
        f"episodes a step): success rate {mean(first, 'episode/success_rate'):.3f} ({span}) -> "
        f"{mean(last, 'episode/success_rate'):.3f} ({end}), mean reward {mean(first, 'reward/mean'):.3f} -> "
        f"{mean(last, 'reward/mean'):.3f}."
    )


def write_report(path: str | Path, config: TrainConfig, evaluations: Mapping[str, Mapping[str, float]], **kwargs: Any) -> str:
    """Render the report (see :func:`render_report`), write it to ``path`` and return it."""
    text = render_report(config, evaluations, **kwargs)
    Path(path).write_text(text, encoding="utf-8")
    return text
