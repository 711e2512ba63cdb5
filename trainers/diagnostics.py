"""What a training run measures, warns about and writes down.

* :func:`rollout_metrics`: per-step statistics of a batch of episodes (rewards and their
  components, success, lengths, error rates, degenerate and identical groups).
* :class:`WarningMonitor`: mode collapse (the members of a group sample the same tokens), no
  learning signal (every group degenerate), possible reward hacking (a reward component rises
  while success stays flat).
* :class:`MetricsLogger`: one JSON line per step in ``metrics.jsonl`` and, when ``tensorboard``
  is installed, TensorBoard scalars.
* :func:`plot_metrics`: PNG plots of ``metrics.jsonl`` (needs ``matplotlib``).

Metric names are ``group/name`` (the TensorBoard grouping). Every value is a plain float; a
mean over nothing is NaN, written as ``null`` in JSON.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from agentgym.rollouts.episode import StopReason

if TYPE_CHECKING:
    from agentgym.rollouts.runner import Episode

__all__ = ["MetricsLogger", "WarningMonitor", "eval_summary", "plot_metrics", "read_metrics", "rollout_metrics", "save_plot"]

NAN = float("nan")


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else NAN


def _counts(episode: Episode) -> Mapping[str, Any]:
    """The environment's cumulative counters (format errors, tool errors, ...) at the episode's end."""
    steps = episode.record.get("steps") or []
    return steps[-1]["info"] if steps else {}


def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Statistics of one batch of episodes, grouped as the runner grouped them.

    Keys: ``reward/mean``, ``reward/std``, ``reward/<component>`` (mean of each reward component),
    ``episode/success_rate``, ``episode/turns``, ``episode/response_tokens`` (sampled tokens per
    episode), ``episode/turn_tokens`` (sampled tokens per turn), ``episode/sequence_tokens``,
    ``episode/format_error_rate`` and ``episode/tool_error_rate`` (per turn),
    ``episode/capped_turn_rate`` (turns that hit ``max_new_tokens``), ``episode/stop_<reason>``
    (share of all episodes per stop reason), ``groups/zero_variance`` (share of groups whose rewards
    are all equal) and ``groups/identical`` (share of groups whose members sampled exactly the
    same tokens), ``episode/infra_errors`` (how many episodes the machinery failed under: they are
    left out of every other statistic, which are the model's).
    """
    if not episodes:
        raise ValueError("no episodes to measure")
    every, episodes = episodes, [e for e in episodes if not e.infra_error]
    stops = {f"episode/stop_{reason}": _mean([float(e.stop_reason == reason) for e in every]) for reason in get_args(StopReason)}
    infra_errors = {"episode/infra_errors": float(len(every) - len(episodes))}
    if not episodes:
        return {"reward/mean": NAN, "episode/success_rate": NAN, **stops, **infra_errors}
    rewards = [e.reward for e in episodes]
    turns = sum(int(e.record.get("turns", len(e.turns))) for e in episodes)
    sampled_turns = [len(t["sampled_ids"]) for e in episodes for t in e.turns]
    metrics: dict[str, float] = {
        "reward/mean": _mean(rewards),
        "reward/std": statistics.pstdev(rewards),
        "episode/success_rate": _mean([float(bool(e.record.get("success"))) for e in episodes]),
        "episode/turns": turns / len(episodes),
        "episode/response_tokens": _mean([float(sum(e.trajectory.loss_mask)) for e in episodes]),
        "episode/turn_tokens": _mean([float(n) for n in sampled_turns]),
        "episode/sequence_tokens": _mean([float(len(e.trajectory.token_ids)) for e in episodes]),
        "episode/format_error_rate": sum(_counts(e).get("format_errors", 0) for e in episodes) / max(turns, 1),
        "episode/tool_error_rate": sum(_counts(e).get("tool_errors", 0) for e in episodes) / max(turns, 1),
        "episode/capped_turn_rate": _mean([float(t["finish_reason"] == "length") for e in episodes for t in e.turns]),
    }
    metrics.update(stops)
    components = sorted({name for e in episodes for name in e.record.get("reward_components", {})})
    for name in components:
        values = [float(e.record["reward_components"][name]) for e in episodes if name in e.record.get("reward_components", {})]
        metrics[f"reward/{name}"] = _mean(values)
    groups: dict[int, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(e.group, []).append(e)
    metrics["groups/zero_variance"] = _mean([float(len({m.reward for m in g}) == 1) for g in groups.values()])
    metrics["groups/identical"] = _mean([float(len(g) > 1 and len({_sampled(m) for m in g}) == 1) for g in groups.values()])
    metrics.update(infra_errors)
    return metrics


def _sampled(episode: Episode) -> tuple[int, ...]:
    """The tokens the model sampled in an episode, all turns concatenated."""
    t = episode.trajectory
    return tuple(tok for tok, m in zip(t.token_ids, t.loss_mask, strict=True) if m)


def eval_summary(episodes: Sequence[Episode]) -> dict[str, float]:
    """The evaluation numbers of the report: success, reward and its components, turns, error rates."""
    m = rollout_metrics(episodes)
    keep = (
        "reward/",
        "episode/success_rate",
        "episode/turns",
        "episode/response_tokens",
        "episode/format_error_rate",
        "episode/tool_error_rate",
        "episode/infra_errors",
    )
    out = {k: v for k, v in m.items() if k.startswith(keep) and k != "reward/std"}
    out["episodes"] = float(len(episodes))
    return out


# ---------------------------------------------------------------------------------- warnings


@dataclass
class WarningMonitor:
    """Turns the per-step metrics into warnings; its state goes into checkpoints.

    Attributes:
        window: steps compared for trends (first half against second half).
        collapse_share: warn about mode collapse when at least this share of groups is identical.
        hacking_rise: a component rise (second half mean minus first half mean) that counts.
        success_flat: a success-rate change below this counts as flat.
        history: the recent steps' relevant metrics.
        last_warned: step of the last warning of each kind (a kind is repeated at most once a window).
    """

    window: int = 10
    collapse_share: float = 0.5
    hacking_rise: float = 0.1
    success_flat: float = 0.02
    history: list[dict[str, float]] = field(default_factory=list)
    last_warned: dict[str, int] = field(default_factory=dict)

    def update(self, step: int, metrics: Mapping[str, float]) -> list[str]:
        """Record step ``step`` and return the warnings it raises."""
        tracked = {k: v for k, v in metrics.items() if k.startswith("reward/") or k in ("episode/success_rate", "groups/identical", "groups/zero_variance")}
        self.history = [*self.history, tracked][-self.window :]
        found: list[tuple[str, str]] = []
        identical = metrics.get("groups/identical", 0.0)
        if identical >= self.collapse_share:
            found.append(("mode_collapse", f"mode collapse: in {identical:.0%} of groups every member sampled the same tokens"))
        if metrics.get("groups/zero_variance", 0.0) == 1.0:
            found.append(("no_signal", "no learning signal: every group has equal rewards (all advantages are 0)"))
        found.extend(self._hacking())
        out = []
        for kind, message in found:
            last = self.last_warned.get(kind)
            if last is None or step - last >= self.window:
                self.last_warned[kind] = step
                out.append(f"step {step}: {message}")
        return out

    def _hacking(self) -> list[tuple[str, str]]:
        if len(self.history) < self.window:
            return []
        half = self.window // 2
        first, second = self.history[:half], self.history[-half:]

        def trend(key: str) -> tuple[float, float]:
            a = [h[key] for h in first if key in h and not math.isnan(h[key])]
            b = [h[key] for h in second if key in h and not math.isnan(h[key])]
            return (_mean(a), _mean(b)) if a and b else (NAN, NAN)

        s0, s1 = trend("episode/success_rate")
        if math.isnan(s0) or abs(s1 - s0) >= self.success_flat:
            return []
        out = []
        for key in sorted({k for h in self.history for k in h if k.startswith("reward/") and k != "reward/std"}):
            c0, c1 = trend(key)
            if c1 - c0 >= self.hacking_rise:
                name = key.removeprefix("reward/")
                out.append(
                    (
                        f"hacking:{name}",
                        f"possible reward hacking: reward {name!r} rose {c0:.2f} -> {c1:.2f} over the last "
                        f"{self.window} steps while success stayed at {s1:.2f}",
                    )
                )
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state for a checkpoint."""
        return {"history": self.history, "last_warned": self.last_warned}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.history = [dict(h) for h in state["history"]]
        self.last_warned = {k: int(v) for k, v in state["last_warned"].items()}


# ----------------------------------------------------------------------------------- logging


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Appends one JSON object per step to ``metrics.jsonl`` and mirrors scalars to TensorBoard.

    Every line has ``phase`` (``sft``, ``grpo`` or ``eval``), ``t`` (the run's global step: SFT
    steps, then GRPO steps) and ``step`` (within the phase). On resume from global step ``t``,
    lines written after it by the interrupted run are dropped first, so the file reads as if the
    run had never stopped.

    Args:
        run_dir: the run folder.
        tensorboard: also write TensorBoard event files to ``run_dir/tensorboard`` when the
            ``tensorboard`` package is installed (otherwise a note is kept in :attr:`notes`).
        resume_at: the global step of the checkpoint being resumed, or ``None`` for a fresh run.
    """

    def __init__(self, run_dir: Path, *, tensorboard: bool = True, resume_at: int | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.notes: list[str] = []
        if resume_at is None:
            self.path.write_text("", encoding="utf-8")
        else:
            kept = [r for r in read_metrics(self.path) if r["t"] <= resume_at] if self.path.exists() else []
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self.notes.append("TensorBoard logging skipped: pip install tensorboard")
            else:
                purge = None if resume_at is None else resume_at + 1
                self._writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge)

    def log(self, phase: str, t: int, step: int, metrics: Mapping[str, float]) -> None:
        """Write one step's metrics."""
        line = {"phase": phase, "t": t, "step": step, **{k: _json_value(float(v)) for k, v in metrics.items()}}
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if math.isfinite(float(value)):
                    self._writer.add_scalar(f"{phase}/{key}", float(value), t)
            self._writer.flush()

    def close(self) -> None:
        """Flush and close TensorBoard files."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a ``metrics.jsonl`` file."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------- plots

_PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("grpo_reward", "GRPO: reward and success (training rollouts)", ("reward/mean", "episode/success_rate")),
    ("grpo_components", "GRPO: reward components", ("reward/*",)),
    ("grpo_policy", "GRPO: KL to reference, entropy", ("policy/kl", "policy/entropy")),
    ("grpo_optim", "GRPO: clip fraction, gradient norm", ("policy/clip_frac", "optim/grad_norm")),
    ("grpo_lengths", "GRPO: response tokens and turns", ("episode/response_tokens", "episode/turns")),
    (
        "grpo_errors",
        "GRPO: error rates, degenerate groups",
        ("episode/format_error_rate", "episode/tool_error_rate", "groups/zero_variance", "groups/identical"),
    ),
    ("sft", "SFT: loss (mean NLL per assistant token)", ("sft/loss",)),
    ("eval", "Evaluation", ("episode/success_rate", "reward/mean")),
)


def plot_metrics(metrics_path: str | Path, out_dir: str | Path) -> tuple[list[Path], str | None]:
    """Draw the run's metrics as PNG files in ``out_dir``.

    Returns:
        ``(paths, note)``: the files written, and a note when nothing could be drawn (no
        ``matplotlib``, no metrics).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return [], "plots skipped: pip install matplotlib"
    rows = read_metrics(metrics_path)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, title, patterns in _PANELS:
        phase = "eval" if name == "eval" else name.split("_")[0]
        series = _series(rows, phase, patterns)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
        for key, (xs, ys) in series.items():
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        xlabel = "step (SFT steps, then GRPO steps)" if phase == "eval" else f"{phase.upper()} step"
        written.append(save_plot(fig, ax, out_dir / f"{name}.png", title=title, xlabel=xlabel))
    return written, None if written else "plots skipped: no metrics to draw"


def save_plot(fig: Any, ax: Any, path: Path, *, title: str, xlabel: str) -> Path:
    """Title, label, grid and legend ``ax``, write ``fig`` to ``path`` (PNG) and close it."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _series(rows: Iterable[Mapping[str, Any]], phase: str, patterns: Sequence[str]) -> dict[str, tuple[list[int], list[float]]]:
    """``{metric: (x, y)}`` for the metrics of ``phase`` matching ``patterns`` (``prefix/*`` allowed)."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for row in rows:
        if row["phase"] != phase:
            continue
        x = row["t"] if phase == "eval" else row["step"]
        for key, value in row.items():
            if value is None or key in ("phase", "t", "step") or not _matches(key, patterns):
                continue
            xs, ys = out.setdefault(key, ([], []))
            xs.append(x)
            ys.append(float(value))
    return out


def _matches(key: str, patterns: Sequence[str]) -> bool:
    return any(key.startswith(p[:-1]) and key not in ("reward/mean", "reward/std") if p.endswith("*") else key == p for p in patterns)
