"""Whole runs: the real default model through one SFT step and one GRPO step; LoRA; the commands."""

from __future__ import annotations

import argparse
import json
import math
import sys

import pytest
from letters_env import TOY_ENV
from safetensors.torch import load_file

from agentgym.cli import experiment as experiment_command
from agentgym.cli import sft as sft_command
from agentgym.cli import train as train_command
from agentgym.models import load_model, resolve_model_path
from agentgym.trainers.checkpoint import latest_checkpoint
from agentgym.trainers.config import TrainConfig, load_config
from agentgym.trainers.diagnostics import read_metrics
from agentgym.trainers.modeling import TrainerError, add_lora
from agentgym.trainers.trainer import train

QUIET = {"logging.progress": False, "logging.tensorboard": False, "logging.plots": False}


def _tiny_run(tiny_model_dir, tmp_path, overrides: dict) -> TrainConfig:
    """A quiet run of the toy environment with the tiny model in ``tmp_path/run``, two groups of two."""
    base = {
        "env_id": TOY_ENV,
        "model": str(tiny_model_dir),
        "device": "cpu",
        "output_dir": str(tmp_path / "run"),
        "rollout.num_tasks": 2,
        "rollout.group_size": 2,
    }
    return load_config(overrides={**base, **overrides, **QUIET})


def test_one_sft_step_and_one_grpo_step_with_the_default_model(tmp_path) -> None:
    """Tiny settings, real model: demonstrations, the SFT update, rollouts, the GRPO update, report."""
    pytest.importorskip("transformers")
    try:
        default_dir = resolve_model_path(None)
    except Exception as exc:  # noqa: BLE001 - any reason the default model is unavailable
        pytest.skip(f"the default model is not available: {exc}")
    config = load_config(
        overrides={
            "env_id": TOY_ENV,
            "device": "cpu",
            "output_dir": str(tmp_path / "run"),
            "rollout.num_tasks": 1,
            "rollout.group_size": 2,
            "rollout.max_new_tokens": 16,
            "sft.steps": 1,
            "sft.batch_size": 1,
            "sft.optim.lr": 1e-5,
            "grpo.steps": 1,
            "optim.lr": 1e-6,
            "eval.num_tasks": 1,
            "checkpoint.keep_when_done": True,  # sft_model/ is read below
            **QUIET,
        }
    )
    result = train(config)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    (sft,) = [r for r in rows if r["phase"] == "sft"]
    (grpo,) = [r for r in rows if r["phase"] == "grpo"]
    assert math.isfinite(sft["sft/loss"]) and sft["sft/loss"] > 0 and sft["optim/grad_norm"] > 0
    assert grpo["batch/trajectories"] == 2 and grpo["optim/updates"] == 1
    assert math.isfinite(grpo["policy/entropy"]) and grpo["policy/ratio_mean"] == 1.0
    assert 0 < grpo["memory/peak_mib_before"] <= grpo["memory/peak_mib_rollout"] <= grpo["memory/peak_mib_update"]
    assert 0 <= grpo["memory/resident_mib_before"] <= grpo["memory/peak_mib_before"]
    assert grpo["memory/resident_mib_before"] > 0 or sys.platform != "linux"  # read from /proc
    assert grpo["time/rollout_s"] > 0 and grpo["time/update_s"] > 0
    assert set(result.evaluations) == {"base", "sft", "final"}
    assert "| success rate |" in result.report and "after GRPO" in result.report
    start = load_file(f"{default_dir}/model.safetensors")
    tuned = load_file(str(tmp_path / "run" / "sft_model" / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not (start[name] == tuned[name]).all(), "the SFT step did not change the weights"
    assert (tmp_path / "run" / "report.md").read_text() == result.report


def test_lora_trains_adapters_only_and_exports_a_merged_model(tiny_model_dir, tmp_path) -> None:
    pytest.importorskip("peft")
    config = _tiny_run(
        tiny_model_dir,
        tmp_path,
        {
            "rollout.max_new_tokens": 6,
            "sft.steps": 1,
            "sft.batch_size": 2,
            "sft.optim.lr": 1e-2,
            "grpo.steps": 1,
            "optim.lr": 1e-2,
            "lora.enabled": True,
            "lora.r": 4,
            "lora.alpha": 8,
            "eval.num_tasks": 1,
            "checkpoint.keep_when_done": True,  # the checkpoint and sft_model/ are read below
        },
    )
    train(config)
    saved = load_file(str(latest_checkpoint(tmp_path / "run") / "weights.safetensors"))
    assert saved and all("lora_" in name for name in saved)
    merged = load_file(str(tmp_path / "run" / "sft_model" / "model.safetensors"))
    original = load_file(str(tiny_model_dir / "model.safetensors"))
    assert not any("lora_" in name for name in merged)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not (merged[name] == original[name]).all(), "the SFT adapters were not merged into the weights"
    model, _ = load_model(str(tmp_path / "run" / "model"), device="cpu")
    assert sum(p.numel() for p in model.parameters()) > 0


def test_periodic_evaluation_stops_early_without_improvement(tiny_model_dir, tmp_path) -> None:
    """The untrained tiny model never succeeds: the first evaluation is the best, the next one
    does not improve on it, and patience 1 ends GRPO after step 2 of 6."""
    overrides = {
        "rollout.num_tasks": 1,
        "rollout.max_new_tokens": 4,
        "grpo.steps": 6,
        "eval.num_tasks": 1,
        "eval.every": 1,
        "eval.patience": 1,
        "eval.min_delta": 0.5,
    }
    result = train(_tiny_run(tiny_model_dir, tmp_path, overrides))
    assert result.state.stopped_early and result.state.step == 2
    assert result.state.best == {"label": "grpo step 1", "value": 0.0}
    assert set(result.evaluations) == {"base", "grpo step 1", "grpo step 2", "final"}
    assert "(stopped early)" in result.report and "Best periodic evaluation: grpo step 1" in result.report
    assert "success rate 0.000 (step 1) -> 0.000 (step 2)" in result.report
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "grpo"] == [1, 2]


def test_grpo_with_an_sft_term_and_no_sft_phase_builds_its_demonstrations(tiny_model_dir, tmp_path) -> None:
    overrides = {"rollout.num_tasks": 1, "rollout.max_new_tokens": 4, "grpo.steps": 1, "grpo.sft_coef": 0.5, "sft.batch_size": 2, "eval.enabled": False}
    result = train(_tiny_run(tiny_model_dir, tmp_path, overrides))
    (grpo,) = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "grpo"]
    # Degenerate groups are not filtered here, so the step updates, and the SFT term is in it.
    assert grpo["optim/updates"] == 1 and grpo["loss/sft"] > 0
    assert result.state.step == 1 and not (tmp_path / "run" / "sft_model").exists()


def test_lora_on_modules_the_model_lacks_is_a_clear_error(tiny_model_dir) -> None:
    pytest.importorskip("peft")
    model, _ = load_model(str(tiny_model_dir), device="cpu")
    config = load_config(overrides={"env_id": TOY_ENV, "lora.enabled": True, "lora.target_modules": ["no_such_proj"]})
    with pytest.raises(TrainerError, match="lora.target_modules"):
        add_lora(model, config.lora)


def test_lora_without_peft_is_a_clear_error(tiny_model_dir, monkeypatch) -> None:
    model, _ = load_model(str(tiny_model_dir), device="cpu")
    monkeypatch.setitem(sys.modules, "peft", None)
    config = load_config(overrides={"env_id": TOY_ENV, "lora.enabled": True})
    with pytest.raises(TrainerError, match="pip install peft"):
        add_lora(model, config.lora)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="agentgym")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (train_command, sft_command, experiment_command):
        command.add_parser(commands)
    args = parser.parse_args(argv)
    code = args.run(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_commands_print_the_report_or_json_and_reject_bad_input(tiny_model_dir, tmp_path, capsys) -> None:
    common = [
        "--model",
        str(tiny_model_dir),
        "--device",
        "cpu",
        "--no-progress",
        "--set",
        "rollout.num_tasks=1",
        "--set",
        "rollout.group_size=2",
        "--set",
        "rollout.max_new_tokens=4",
        "--set",
        "eval.num_tasks=1",
        "--set",
        "logging.plots=false",
        "--set",
        "logging.tensorboard=false",
    ]
    code, out, _ = run_cli(["sft", TOY_ENV, "--steps", "1", "--output", str(tmp_path / "sft"), *common], capsys)
    assert code == 0 and "after SFT" in out and "after GRPO" not in out
    code, out, _ = run_cli(["train", TOY_ENV, "--steps", "1", "--output", str(tmp_path / "grpo"), "--json", *common], capsys)
    assert code == 0 and set(json.loads(out)["evaluations"]) == {"base", "final"}

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a record"}\n')
    for argv, message in [
        (["train", TOY_ENV, "--set", "grpo.bogus=1"], "grpo.bogus: unknown option"),
        (["train", "agentgym/Nope-v0", "--output", str(tmp_path / "nope")], "unknown environment"),
        (["train", TOY_ENV, "--output", str(tmp_path / "grpo"), "--model", str(tiny_model_dir)], "already holds a run"),
        (["train", TOY_ENV, "--output", str(tmp_path / "fresh"), "--resume"], "no checkpoint"),
        (["train", TOY_ENV, "--config", str(tmp_path / "absent.yaml")], "cannot read config file"),
        (["train", TOY_ENV, "--output", str(tmp_path / "split"), "--set", "rollout.split=nope"], "cannot make"),
        (["train", TOY_ENV, "--output", str(tmp_path / "dev"), "--set", "ref_device=cuda:7"], "device 'cuda:7'"),
        (["sft", TOY_ENV, "--output", str(tmp_path / "nosteps")], "--steps N"),
        (["train", TOY_ENV, "--output", str(tmp_path / "nomodel"), "--model", str(tmp_path / "absent-model")], "model folder not found"),
        # A bad demonstration file fails before the earlier run is touched, even with --overwrite.
        (["sft", TOY_ENV, "--steps", "1", "--output", str(tmp_path / "grpo"), "--overwrite", "--source", str(bad)], "not an episode record"),
    ]:
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and out == ""
        assert err.startswith("agentgym: error: ") and message in err and "Traceback" not in err
    assert (tmp_path / "grpo" / "report.md").is_file()
    # A start that failed left no half-made run folder behind.
    assert not any((tmp_path / name).exists() for name in ("nope", "fresh", "split", "dev", "nosteps", "nomodel"))


def test_filtered_updates_keep_their_place_in_the_learning_rate_schedule(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """With filter_degenerate, updates of groups whose rewards are all equal are dropped; the
    schedule must still stand at steps x planned updates per step when the phase ends."""
    import torch
    from letters_env import LettersEnv

    from agentgym.verifiers.result import RewardResult

    # Every episode of a task gets the same reward: every group is degenerate, every update dropped.
    monkeypatch.setattr(LettersEnv, "compute_reward", lambda self: RewardResult(len(self.task["word"]) / 10, "constant", {}, False))
    config = _tiny_run(
        tiny_model_dir,
        tmp_path,
        {
            "rollout.max_new_tokens": 2,
            "grpo.steps": 2,
            "grpo.mini_batch_size": 2,
            "grpo.filter_degenerate": True,
            "optim.schedule": "linear",
            "eval.num_tasks": 1,
            "checkpoint.keep_when_done": True,  # the checkpoint is read below
        },
    )
    train(config)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "grpo"]
    assert [r["optim/updates"] for r in rows] == [0.0, 0.0] and all(r["groups/degenerate"] == 2 for r in rows)
    saved = torch.load(latest_checkpoint(tmp_path / "run") / "optimizer.pt", weights_only=False)
    assert saved["scheduler"]["last_epoch"] == 2 * 2  # 2 steps x (4 trajectories / mini-batches of 2)


def test_a_finished_run_keeps_one_model_and_reports_its_folder_size(tiny_model_dir, tmp_path, capsys) -> None:
    """Disk sized to need: a finished SFT + GRPO run keeps model/ and its records, not its resume state."""
    from rich.console import Console

    from agentgym.trainers.checkpoint import folder_bytes

    config = _tiny_run(
        tiny_model_dir,
        tmp_path,
        {"rollout.max_new_tokens": 4, "sft.steps": 1, "sft.batch_size": 2, "grpo.steps": 1, "eval.enabled": False, "checkpoint.every": 1},
    )
    result = train(config, console=Console(file=None, stderr=False))
    run = tmp_path / "run"
    assert not (run / "checkpoints").exists() and not (run / "sft_model").exists()
    assert result.folder_bytes == folder_bytes(run) <= 2 * folder_bytes(tiny_model_dir)
    assert f"run folder {run}: " in capsys.readouterr().out


def test_dynamic_sampling_on_the_outcome_and_step_level_credit_run_from_a_yaml_file(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """Both exploration options through a YAML file: extra rollout rounds while groups' outcomes do
    not vary (bounded, logged), and per-turn advantages in the update."""
    from letters_env import LettersEnv, split_verdict

    monkeypatch.setattr(LettersEnv, "compute_reward", split_verdict)
    path = tmp_path / "explore.yaml"
    path.write_text(
        f"env_id: {TOY_ENV}\nmodel: {tiny_model_dir}\ndevice: cpu\noutput_dir: {tmp_path / 'run'}\n"
        "rollout: {num_tasks: 2, group_size: 3, max_new_tokens: 6}\n"
        "grpo: {steps: 3, kl_coef: 0.0, filter_degenerate: true, degenerate_by: success, resample_rounds: 2, step_advantage_weight: 1.0}\n"
        "eval: {enabled: false}\nlogging: {progress: false, tensorboard: false, plots: false}\n"
    )
    train(load_config(path))
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "grpo"]
    assert len(rows) == 3
    for row in rows:
        assert row["groups/drawn"] == 2 * row["rollout/rounds"] and 1 <= row["rollout/rounds"] <= 3
        assert row["groups/kept"] <= 2 and (row["groups/kept"] == 2 or row["rollout/rounds"] == 3)
        assert row["batch/trajectories"] == 3 * row["groups/kept"]
        if row["groups/kept"]:
            assert row["optim/updates"] == 1 and row["advantage/step_groups"] >= row["groups/kept"]
    # The run needed the extra rounds and found groups in them: the options did something.
    assert any(r["rollout/rounds"] > 1 for r in rows) and any(r["groups/kept"] > 0 for r in rows)


def test_the_update_runs_without_the_rollouts_key_value_buffers(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """The rollouts' key/value buffers (the whole batch's, as large as the weights for the
    experiment) are released before the update, not kept until the next step's rollouts."""
    from agentgym.trainers import trainer

    backends, held = [], []
    make_backend, update = trainer._backend, trainer.grpo_update

    def backend(*args, **kwargs):
        backends.append(make_backend(*args, **kwargs))
        return backends[-1]

    def grpo_update(*args, **kwargs):
        held.append(sum(b.engine.rows.nbytes for b in backends))
        return update(*args, **kwargs)

    monkeypatch.setattr(trainer, "_backend", backend)
    monkeypatch.setattr(trainer, "grpo_update", grpo_update)
    peaks = []
    rollouts = trainer.run_rollouts

    def run_rollouts(backend, *args, **kwargs):
        episodes = rollouts(backend, *args, **kwargs)
        peaks.append(backend.engine.stats.peak_cache_bytes)
        return episodes

    monkeypatch.setattr(trainer, "run_rollouts", run_rollouts)
    config = _tiny_run(tiny_model_dir, tmp_path, {"rollout.max_new_tokens": 4, "grpo.steps": 2, "eval.enabled": False})
    train(config)
    assert len(peaks) == 2 and all(peak > 0 for peak in peaks)  # the rollouts did fill buffers
    assert held == [0, 0]


def test_a_key_value_budget_delays_episodes_without_changing_them(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """``rollout.max_cache_mib`` bounds the rollouts' buffers: episodes wait for room instead, and
    are the same tokens, sampled at the same temperature, as without a budget."""
    from agentgym.trainers import trainer

    rollouts = trainer.run_rollouts

    def rollouts_of(budget, folder):
        played = []

        def run_rollouts(backend, *args, **kwargs):
            episodes = rollouts(backend, *args, **kwargs)
            played.append(([e.trajectory.token_ids for e in episodes], backend.engine.stats.peak_cache_bytes, backend.engine.max_cache_bytes))
            return episodes

        monkeypatch.setattr(trainer, "run_rollouts", run_rollouts)
        overrides = {"rollout.max_new_tokens": 12, "rollout.temperature": 1.0, "grpo.steps": 1, "eval.enabled": False, "rollout.max_cache_mib": budget}
        train(_tiny_run(tiny_model_dir, tmp_path / folder, overrides))
        return played

    free, tight = rollouts_of(None, "free"), rollouts_of(0.001, "tight")
    assert len(free) == len(tight) == 1
    assert [tokens for tokens, _, _ in tight] == [tokens for tokens, _, _ in free]
    assert all(budget == int(0.001 * 2**20) for _, _, budget in tight)
    assert all(tight_peak < free_peak for (_, tight_peak, _), (_, free_peak, _) in zip(tight, free, strict=True))
