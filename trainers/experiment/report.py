"""The results folder's human side: ``results.md`` (tables, the protocol, example trajectories) and ``plots/``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.trainers.diagnostics import save_plot
from agentgym.trainers.experiment.config import BASE, GRPO, SFT

__all__ = ["results_markdown", "suite_markdown", "write_plots"]


def write_plots(summary: Mapping[str, Any], folder: Path) -> list[Path]:
    """Success per arm with intervals, and the GRPO curves; none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    arms = summary["arms"]
    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
    names = list(arms)
    values = [arms[a]["success"] for a in names]
    errors = [[v - arms[a]["ci"][0] for a, v in zip(names, values, strict=False)], [arms[a]["ci"][1] - v for a, v in zip(names, values, strict=False)]]
    ax.bar(names, values, yerr=errors, capsize=4, color=["#9e9e9e", "#5c8fd6", "#2e9d5b", "#d9822b", "#8e6cc0"][: len(names)])
    for i, a in enumerate(names):
        ax.text(i, values[i] + 0.02, f"{values[i]:.2f}\nn={arms[a]['n']}", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("success rate (95% Wilson)")
    ax.set_title("Held-out evaluation")
    fig.tight_layout()
    path = folder / "success_by_arm.png"
    fig.savefig(path)
    plt.close(fig)
    written.append(path)
    for key, title in (
        ("episode/success_rate", "GRPO training rollouts: success"),
        ("reward/mean", "GRPO training rollouts: mean reward"),
        ("policy/entropy", "policy entropy (nats per token)"),
        ("policy/kl", "KL to the reference"),
        ("episode/turns", "turns per episode"),
    ):
        series = {arm: {seed: c[key] for seed, c in curves.items() if key in c} for arm, curves in summary["grpo_curves"].items()}
        series = {arm: s for arm, s in series.items() if s}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
        for color, (arm, by_seed) in zip(["#2e9d5b", "#d9822b", "#8e6cc0"], series.items(), strict=False):
            runs = [[v if v is not None else math.nan for v in ys] for ys in by_seed.values()]
            for ys in runs:
                ax.plot(range(1, len(ys) + 1), ys, color=color, alpha=0.25, linewidth=1)
            length = min(map(len, runs))
            mean = np.nanmean(np.array([ys[:length] for ys in runs]), axis=0)
            ax.plot(range(1, length + 1), mean, color=color, linewidth=2, label=f"{arm} (mean of {len(runs)} seeds)")
        written.append(save_plot(fig, ax, folder / f"grpo_{key.replace('/', '_')}.png", title=title, xlabel="GRPO step"))
    return written


def results_markdown(summary: Mapping[str, Any], episodes: Mapping[str, Sequence[Mapping[str, Any]]], plots: Sequence[Path], out: Path) -> str:
    arms = summary["arms"]
    ev = summary["evaluation"]
    trials = ev["trials"]
    lines = [
        f"# Learning experiment: {summary['env_id']}",
        "",
        f"Model `{summary['model']}`; seeds {summary['seeds']}; commit {', '.join(f'`{c}`' for c in summary['commits']) or 'unknown'}; "
        f"wall time {summary['wall_seconds'] / 60:.1f} min{_sessions(summary)}.",
        f"Evaluation: {len(summary['eval_task_ids'])} held-out tasks x {trials} trial(s) (environment seeds) = "
        f"{ev['episodes_per_model']} episodes per model, temperature {ev['temperature']:g}, environment options {ev['env_kwargs']}.",
        f"Training tasks: {len(summary['sft_task_ids'])} for SFT demonstrations, {len(summary['train_task_ids'])} for GRPO "
        "(disjoint from each other and from the evaluation tasks).",
        *_protocol_lines(summary),
        "",
        "| arm | success | 95% CI | n | per seed | mean ± sd over seeds | mean reward | "
        + " | ".join(f"pass^{k}" for k in range(1, trials + 1))
        + " | success after a fault | malformed calls per turn | turns | sampled tokens |",
        "|---|---|---|---|---|---|---|" + "---|" * trials + "---|---|---|---|",
    ]
    for arm, a in arms.items():
        per_seed = ", ".join(f"{v:.2f}" for v in a["per_seed"].values())
        after = "–" if a["success_after_a_fault"] is None else f"{a['success_after_a_fault']:.3f}"
        lines.append(
            f"| {arm} | {a['success']:.3f} | [{a['ci'][0]:.3f}, {a['ci'][1]:.3f}] | {a['n']} | {per_seed} | "
            f"{a['seed_mean']:.3f} ± {a['seed_std']:.3f} | {a['mean_reward']:.3f} | "
            + " | ".join(f"{a[f'pass^{k}']:.3f}" for k in range(1, trials + 1))
            + f" | {after} | {a['format_errors_per_turn']:.3f} | {a['mean_turns']:.2f} | {a['mean_sampled_tokens']:.1f} |"
        )
    lines += ["", *_delta_lines(summary)]
    templates = sorted({t for a in arms.values() for t in a["per_template"]})
    if len(templates) > 1:
        lines += ["", "Success per task family:", "", "| family | n per arm | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
        for t in templates:
            n = max(arms[a]["per_template"].get(t, {}).get("n", 0) for a in arms)
            lines.append(
                f"| {t} | {n} | " + " | ".join(f"{arms[a]['per_template'][t]['success']:.3f}" if t in arms[a]["per_template"] else "–" for a in arms) + " |"
            )
    if plots:
        lines += ["", *(f"![{p.stem}](plots/{p.name})" for p in plots)]
    phases = summary.get("phase_seconds") or {}
    if phases:
        totals: Counter[str] = Counter()
        for name, seconds in phases.items():
            totals[_phase_kind(name)] += seconds
        lines += ["", "Wall time per phase (all seeds): " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in totals.items()) + "."]
    machines = summary.get("machines") or []
    if machines:
        described = [
            f"{m.get('processor', '?')} ({'bfloat16 products native' if m.get('cpu_native_bf16') else 'no native bfloat16'}; torch {m.get('torch', '?')}, transformers {m.get('transformers', '?')})"
            for m in machines
        ]
        lines += ["", "Machines (autocast `auto` trains in bfloat16 where the products are native, else in float32): " + "; ".join(described) + "."]
    peaks = summary.get("phase_peak_mib") or {}
    if peaks:
        largest: dict[str, float] = {}
        for name, mib in peaks.items():
            largest[_phase_kind(name)] = max(largest.get(_phase_kind(name), 0.0), mib)
        lines += ["", "Peak resident memory of a phase process (the largest over seeds): " + ", ".join(f"{k} {v:,.0f} MiB" for k, v in largest.items()) + "."]
    # Each arm beside what it is measured against: GRPO beside SFT, an ablation beside its control (GRPO when it has none).
    controls = summary.get("controls") or {}
    comparisons = [(SFT, GRPO), *((controls.get(arm, GRPO), arm) for arm in arms if arm not in (BASE, SFT, GRPO) and controls.get(arm) != arm)]
    lines += ["", *_examples(episodes, comparisons)]
    return "\n".join(lines) + "\n"


def _phase_kind(name: str) -> str:
    """``grpo train`` for the phase ``grpo/seed-3/train``: the arm and the kind, over seeds."""
    parts = name.split("/")
    return f"{parts[0]} {parts[-1]}"


def _delta_lines(summary: Mapping[str, Any]) -> list[str]:
    """The paired differences of a summary, one bullet each."""
    lines = ["Paired differences (same seed, task and environment seed), success:", ""]
    for key, d in summary.items():
        if key.startswith("delta_"):
            name = key.removeprefix("delta_").replace("_minus_", " − ")
            per_seed = ", ".join(f"{seed}: {value * 100:+.1f}" for seed, value in d.get("per_seed", {}).items())
            lines.append(
                f"- **{name}: {d['mean'] * 100:+.1f} pp**, 95% CI [{d['ci'][0] * 100:+.1f}, {d['ci'][1] * 100:+.1f}] pp "
                f"({d['n_pairs']} pairs over {d['tasks']} tasks; better in {d['wins']}, worse in {d['losses']}; {d['interval']})"
                + (f"; per seed {per_seed}" if per_seed else "")
            )
    return lines


def _sessions(summary: Mapping[str, Any]) -> str:
    """How many sessions the wall time adds up, when a resumed run took more than one."""
    sessions = summary.get("sessions")
    return f" over {sessions} sessions (a resumed run)" if sessions and sessions > 1 else ""


def _protocol_lines(summary: Mapping[str, Any]) -> list[str]:
    """Which run this is, which seeds and tasks the configuration was chosen on, and each choice."""
    dev = summary.get("development")
    lines = [""]
    if summary.get("run") == "development":
        lines.append("**A development run**: configuration choices are made on its numbers; they are not a reported result.")
    elif dev is not None:
        lines.append(
            f"**A reported run**: seeds {list(summary['seeds'])} and these evaluation tasks were not used for any choice; "
            f"choices were made on development seeds {list(dev['seeds'])} evaluated on the {', '.join(dev['evaluation_tasks']['splits'])} split."
        )
    else:
        lines.append("The configuration declares no development seeds or tasks: nothing says which runs its choices were made on.")
    choices = summary.get("choices") or []
    if choices:
        lines += ["", "| choice | value | made on |", "|---|---|---|"]
        lines += [f"| `{c['option']}` | `{c['value']}` | {c['made_on']} |" for c in choices]
    return lines


def _examples(episodes: Mapping[str, Sequence[Mapping[str, Any]]], comparisons: Sequence[tuple[str, str]]) -> list[str]:
    """Side-by-side trajectories of two arms of one seed on the same task and environment seed.

    For each ``(before, after)`` pair of arms (SFT and GRPO; an ablation and its control): for
    every training seed the first task (in evaluation order) where ``before`` failed and ``after``
    succeeded, since seeds often learn different things, then the first task where it went the
    other way.
    """
    lines: list[str] = []
    for first, second in comparisons:
        if first not in episodes or second not in episodes or first == second:
            continue
        earlier = {(r["seed"], r["task_id"], r["trial"]): r for r in episodes[first]}
        pairs = [(earlier[key], r) for r in episodes[second] if (key := (r["seed"], r["task_id"], r["trial"])) in earlier]
        improved: dict[int, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        for before, after in pairs:
            if after["success"] and not before["success"]:
                improved.setdefault(after["seed"], (before, after))
        shown = [(f"{first} failed, {second} succeeded", improved[seed]) for seed in sorted(improved)]
        shown += [(f"{first} succeeded, {second} failed", pair) for pair in pairs if pair[0]["success"] and not pair[1]["success"]][:1]
        if not shown:
            continue
        lines += [f"## Example trajectories: {first} and {second} of one seed, same task and environment seed", ""]
        for title, (before, after) in shown:
            lines += [f"### {title}: seed {after['seed']}, {after['task_id']} (trial {after['trial']})", ""]
            for label, row in ((first, before), (second, after)):
                lines += [f"**{label}** (success {row['success']}, {row['turns']} turns, {row['faults']} fault(s)):", "", "```"]
                lines += [f"[{m['role']}] {m['content'][:400]}" for m in row["messages"]]
                lines += ["```", ""]
    return lines


def suite_markdown(summaries: Mapping[Path, Mapping[str, Any]]) -> str:
    """The combined report of several experiments (one per environment, by results folder): per
    environment its arms' success, the paired differences against SFT, and what the behaviour
    did (turns, malformed calls, success after a fault); each links its own ``results.md`` for
    curves and trajectories."""
    lines = ["# Learning suite", ""]
    lines += [
        "| environment | run | seeds | episodes per arm | GRPO − SFT (pp, 95% CI) | seeds where GRPO lost > 2 pp | wall time | results |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for out, summary in summaries.items():
        delta = summary.get(f"delta_{GRPO}_minus_sft")
        lost = [seed for seed, value in (delta or {}).get("per_seed", {}).items() if value < -0.02]
        lines.append(
            f"| {summary['env_id']} | {summary.get('run', 'reported')} | {summary['seeds']} | {summary['evaluation']['episodes_per_model']} | "
            + (f"{delta['mean'] * 100:+.1f} [{delta['ci'][0] * 100:+.1f}, {delta['ci'][1] * 100:+.1f}]" if delta else "–")
            + f" | {', '.join(lost) or 'none'} | {summary['wall_seconds'] / 60:.1f} min | [{out}/results.md]({out / 'results.md'}) |"
        )
    for out, summary in summaries.items():
        arms = summary["arms"]
        lines += [
            "",
            f"## {summary['env_id']}",
            "",
            f"Commit {', '.join(f'`{c}`' for c in summary['commits']) or 'unknown'}; details in `{out / 'results.md'}`.",
            "",
        ]
        lines += [
            "| arm | success | 95% CI | n | per seed | malformed calls per turn | success after a fault | turns | sampled tokens |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for arm, a in arms.items():
            after = "–" if a["success_after_a_fault"] is None else f"{a['success_after_a_fault']:.3f}"
            lines.append(
                f"| {arm} | {a['success']:.3f} | [{a['ci'][0]:.3f}, {a['ci'][1]:.3f}] | {a['n']} | {', '.join(f'{v:.2f}' for v in a['per_seed'].values())} | "
                f"{a['format_errors_per_turn']:.3f} | {after} | {a['mean_turns']:.2f} | {a['mean_sampled_tokens']:.1f} |"
            )
        lines.append("")
        lines += _delta_lines(summary)
    return "\n".join(lines) + "\n"
