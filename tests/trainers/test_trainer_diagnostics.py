"""Training diagnostics: batch metrics, warnings, the metrics log and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentgym.rollouts.runner import Episode
from agentgym.rollouts.trajectory import Trajectory
from agentgym.trainers.diagnostics import MetricsLogger, WarningMonitor, plot_metrics, read_metrics, rollout_metrics


def episode(
    group: int,
    reward: float,
    sampled: tuple[int, ...],
    *,
    success: bool = False,
    components=None,
    format_errors: int = 0,
    tool_errors: int = 0,
    stop: str = "done",
    capped: bool = False,
) -> Episode:
    prompt = (1, 2, 3)
    trajectory = Trajectory.from_dict(
        {
            "segments": [
                {"kind": "prompt", "start": 0, "token_ids": prompt, "logprobs": None, "turn": 0},
                {"kind": "sampled", "start": 3, "token_ids": sampled, "logprobs": [0.0] * len(sampled), "turn": 0},
            ],
            "messages": [],
            "prefix_stable": True,
        }
    )
    info = {"format_errors": format_errors, "tool_errors": tool_errors}
    record = {"success": success, "turns": 1, "reward_components": components or {}, "steps": [{"reward": reward, "info": info}]}
    turn = {"sampled_ids": sampled, "finish_reason": "length" if capped else "stop"}
    return Episode(record=record, trajectory=trajectory, group=group, reward=reward, stop_reason=stop, turns=[turn])


def test_rollout_metrics_of_a_batch() -> None:
    batch = [
        episode(0, 1.0, (5, 6, 7), success=True, components={"format": 1.0, "completion": 1.0}),
        episode(0, 0.0, (5, 6), components={"format": 0.5, "completion": 0.0}, format_errors=1, capped=True),
        episode(1, 0.2, (9,), components={"format": 1.0, "completion": 0.0}, tool_errors=2, stop="max_turns"),
        episode(1, 0.2, (9,), components={"format": 1.0, "completion": 0.0}, stop="max_turns"),
    ]
    m = rollout_metrics(batch)
    assert m["reward/mean"] == pytest.approx(0.35)
    assert m["reward/std"] == pytest.approx(math.sqrt(((0.65**2) + (0.35**2) + 2 * (0.15**2)) / 4))
    assert m["reward/format"] == pytest.approx(0.875) and m["reward/completion"] == pytest.approx(0.25)
    assert m["episode/success_rate"] == 0.25
    assert m["episode/response_tokens"] == pytest.approx(7 / 4) and m["episode/turn_tokens"] == pytest.approx(7 / 4)
    assert m["episode/sequence_tokens"] == pytest.approx(3 + 7 / 4)
    assert m["episode/format_error_rate"] == 0.25 and m["episode/tool_error_rate"] == 0.5
    assert m["episode/capped_turn_rate"] == 0.25
    assert m["episode/stop_done"] == 0.5 and m["episode/stop_max_turns"] == 0.5 and m["episode/stop_token_budget"] == 0
    assert m["groups/zero_variance"] == 0.5  # group 1: both 0.2
    assert m["groups/identical"] == 0.5  # group 1: both sampled (9,)


def test_mode_collapse_and_no_signal_warnings_are_raised_once_per_window() -> None:
    monitor = WarningMonitor(window=4)
    collapsed = {"groups/identical": 0.75, "groups/zero_variance": 1.0, "episode/success_rate": 0.0, "reward/mean": 0.0}
    first = monitor.update(1, collapsed)
    assert any("mode collapse" in w for w in first) and any("no learning signal" in w for w in first)
    assert monitor.update(2, collapsed) == []
    assert len(monitor.update(5, collapsed)) == 2
    healthy = {"groups/identical": 0.0, "groups/zero_variance": 0.2, "episode/success_rate": 0.0, "reward/mean": 0.0}
    assert WarningMonitor(window=4).update(1, healthy) == []


def test_reward_hacking_warning_needs_a_rising_component_and_flat_success() -> None:
    def run(format_values, success_values):
        monitor = WarningMonitor(window=6)
        out = []
        for step, (f, s) in enumerate(zip(format_values, success_values, strict=True), 1):
            out += monitor.update(step, {"reward/format": f, "reward/completion": s, "episode/success_rate": s})
        return out

    rising = [0.1, 0.1, 0.2, 0.5, 0.6, 0.7]
    warned = run(rising, [0.05] * 6)
    assert len(warned) == 1 and "reward 'format' rose" in warned[0] and "step 6" in warned[0]
    assert run(rising, [0.0, 0.0, 0.1, 0.3, 0.4, 0.5]) == []  # success rose with it: learning, not hacking
    assert run([0.5] * 6, [0.05] * 6) == []  # nothing rose


def test_monitor_state_round_trips_through_json() -> None:
    monitor = WarningMonitor(window=4)
    for step in range(1, 4):
        monitor.update(step, {"reward/format": 0.1 * step, "episode/success_rate": 0.0, "groups/identical": 1.0})
    again = WarningMonitor(window=4)
    again.load_state_dict(json.loads(json.dumps(monitor.state_dict())))
    probe = {"reward/format": 0.9, "episode/success_rate": 0.0, "groups/identical": 1.0}
    assert again.update(4, probe) == monitor.update(4, probe)


def test_metrics_log_is_truncated_on_resume_and_nan_becomes_null(tmp_path) -> None:
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for t in range(1, 5):
        logger.log("grpo", t, t, {"reward/mean": t / 10, "policy/kl": float("nan")})
    logger.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["t"] for r in rows] == [1, 2, 3, 4] and rows[0]["policy/kl"] is None
    MetricsLogger(tmp_path, tensorboard=False, resume_at=2).close()
    assert [r["t"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_tensorboard_events_are_written(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    logger = MetricsLogger(tmp_path, tensorboard=True)
    logger.log("sft", 1, 1, {"sft/loss": 2.0})
    logger.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_plots_are_png_files(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log("eval", 0, 0, {"episode/success_rate": 0.0, "reward/mean": 0.0})
    for step in range(1, 4):
        logger.log("sft", step, step, {"sft/loss": 3.0 / step})
        logger.log(
            "grpo", 3 + step, step, {"reward/mean": 0.1 * step, "episode/success_rate": 0.0, "reward/format": 0.5, "policy/kl": 0.01, "policy/entropy": 1.0}
        )
    logger.close()
    paths, note = plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "plots")
    assert note is None
    assert {p.name for p in paths} >= {"grpo_reward.png", "grpo_components.png", "grpo_policy.png", "sft.png", "eval.png"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_report_summarises_training_rollouts_over_the_first_and_last_fifth() -> None:
    from agentgym.trainers.config import load_config
    from agentgym.trainers.report import render_report

    config = load_config(overrides={"env_id": "agentgym/SQL-v0", "rollout.num_tasks": 2, "rollout.group_size": 4})
    steps = [{"episode/success_rate": s, "reward/mean": s / 2} for s in (0.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 0.5)]
    evaluations = {"base": {"episode/success_rate": 0.0, "reward/mean": 0.0}, "final": {"episode/success_rate": 1.0, "reward/mean": 1.0}}
    report = render_report(config, evaluations, grpo_steps=steps)
    assert (
        "GRPO training rollouts (temperature 1, 8 episodes a step): success rate 0.250 (steps 1-2) -> 0.750 (steps 9-10), mean reward 0.125 -> 0.375."
    ) in report
    assert "GRPO training rollouts" not in render_report(config, evaluations)


def test_report_embeds_the_curves() -> None:
    from agentgym.trainers.config import load_config
    from agentgym.trainers.report import render_report

    config = load_config(overrides={"env_id": "agentgym/SQL-v0"})
    evaluations = {"base": {"episode/success_rate": 0.0, "reward/mean": 0.0}}
    report = render_report(config, evaluations, plots=[Path("run/plots/grpo_reward.png"), Path("run/plots/sft.png")])
    assert "![grpo reward](plots/grpo_reward.png)" in report and "![sft](plots/sft.png)" in report
    assert "## Curves" not in render_report(config, evaluations)


def test_rollout_metrics_leave_infra_errors_out_and_count_them() -> None:
    scored = [episode(0, 1.0, (5,), success=True), episode(0, 0.0, (6,))]
    broken = episode(1, 0.0, (7,), stop="infra_error")
    m = rollout_metrics([*scored, broken])
    clean = rollout_metrics(scored)
    assert m["episode/infra_errors"] == 1 and clean["episode/infra_errors"] == 0
    for key in ("reward/mean", "reward/std", "episode/success_rate", "episode/response_tokens", "groups/zero_variance"):
        assert m[key] == clean[key], key  # the infra error's reward 0 is not the model's
    assert m["episode/stop_infra_error"] == pytest.approx(1 / 3) and m["episode/stop_done"] == pytest.approx(2 / 3)
    only_broken = rollout_metrics([broken])
    assert only_broken["episode/infra_errors"] == 1 and math.isnan(only_broken["reward/mean"])
