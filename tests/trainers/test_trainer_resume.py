"""Checkpoint and exact resume: a run interrupted anywhere and resumed ends with the same weights,
the same metrics file and the same evaluations as the run that was never interrupted."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
from letters_env import TOY_ENV
from safetensors.torch import load_file

from agentgym.cli import main
from agentgym.trainers import checkpoint as checkpoint_module
from agentgym.trainers.checkpoint import checkpoints
from agentgym.trainers.config import load_config
from agentgym.trainers.diagnostics import read_metrics
from agentgym.trainers.modeling import TrainerError
from agentgym.trainers.trainer import train


def config_for(model_dir: Path, out: Path, **extra):
    overrides = {
        "env_id": TOY_ENV,
        "model": str(model_dir),
        "device": "cpu",
        "output_dir": str(out),
        "rollout.num_tasks": 2,
        "rollout.group_size": 2,
        "rollout.max_new_tokens": 6,
        "sft.steps": 2,
        "sft.batch_size": 2,
        "sft.optim": {"lr": 1e-3, "schedule": "linear", "warmup_steps": 1},
        "grpo.steps": 3,
        "grpo.epochs": 2,
        "grpo.mini_batch_size": 2,
        "grpo.kl_coef": 0.05,
        "optim": {"lr": 1e-3, "schedule": "cosine", "warmup_steps": 2},
        "eval.num_tasks": 1,
        "eval.every": 2,
        "checkpoint.every": 1,
        "checkpoint.keep": 10,
        "checkpoint.keep_when_done": True,  # the tests cut the finished run back to each checkpoint
        "logging.progress": False,
        "logging.plots": False,
        "logging.tensorboard": False,
        **extra,
    }
    return load_config(overrides=overrides)


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    result = train(config_for(tiny_model_dir, out))
    return out, result


def learning_record(run: Path) -> list[dict]:
    """``metrics.jsonl`` with the machine's measurements (``memory/``, ``time/``), which no rerun repeats, reduced to their names."""
    return [{k: "measured" if k.startswith(("memory/", "time/")) else v for k, v in row.items()} for row in read_metrics(run / "metrics.jsonl")]


def weights(run: Path) -> dict:
    return load_file(str(run / "model" / "model.safetensors"))


def crash_after(full: Path, t: int, into: Path) -> None:
    """A folder as a crash right after checkpoint ``t`` would leave it: that checkpoint, the model
    after SFT when SFT had finished, the config, and a metrics file that already ran further."""
    into.mkdir(parents=True)
    shutil.copy(full / "config.yaml", into / "config.yaml")
    shutil.copy(full / "metrics.jsonl", into / "metrics.jsonl")
    shutil.copytree(full / "checkpoints" / f"step-{t:06d}", into / "checkpoints" / f"step-{t:06d}")
    if t >= 2:
        shutil.copytree(full / "sft_model", into / "sft_model")


@pytest.mark.parametrize("t", [1, 2, 3], ids=["during-sft", "between-phases", "during-grpo"])
def test_resume_reproduces_the_uninterrupted_run(uninterrupted, tiny_model_dir, tmp_path, t) -> None:
    full, full_result = uninterrupted
    assert [c.name for c in checkpoints(full)] == [f"step-{i:06d}" for i in range(1, 6)]
    run = tmp_path / "run"
    crash_after(full, t, run)
    result = train(config_for(tiny_model_dir, run), resume=True)
    expected, got = weights(full), weights(run)
    assert expected.keys() == got.keys()
    for name in expected:
        assert (expected[name] == got[name]).all(), name
    assert learning_record(run) == learning_record(full)
    assert result.evaluations == full_result.evaluations


def test_resume_with_dynamic_sampling_and_step_level_credit_reproduces_the_uninterrupted_run(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """The extra rounds' tasks and seeds derive from the seed, the step and the round: a run resumed
    during GRPO plays the same rounds and ends with the same weights and metrics."""
    from letters_env import LettersEnv, split_verdict

    monkeypatch.setattr(LettersEnv, "compute_reward", split_verdict)
    # No SFT: the oracle's demonstrations do not pass this verdict.
    explore = {"sft.steps": 0, "grpo.filter_degenerate": True, "grpo.degenerate_by": "success", "grpo.resample_rounds": 2, "grpo.step_advantage_weight": 1.0}
    full = tmp_path / "full"
    train(config_for(tiny_model_dir, full, **explore))
    rows = [line for line in (full / "metrics.jsonl").read_text().splitlines() if '"grpo"' in line and '"rollout/rounds": 1.0' not in line]
    assert rows, "no step needed an extra round; the comparison would not cover them"
    run = tmp_path / "run"
    crash_after(full, 1, run)  # after GRPO step 1
    train(config_for(tiny_model_dir, run, **explore), resume=True)
    expected, got = weights(full), weights(run)
    assert all((expected[name] == got[name]).all() for name in expected)
    assert learning_record(run) == learning_record(full)


def test_the_run_really_learned(uninterrupted, tiny_model_dir) -> None:
    """The comparison above is meaningful: the weights moved in both phases."""
    full, _ = uninterrupted
    start = load_file(str(tiny_model_dir / "model.safetensors"))
    after_sft = load_file(str(full / "sft_model" / "model.safetensors"))
    final = weights(full)
    name = "model.layers.0.mlp.up_proj.weight"
    assert not (start[name] == after_sft[name]).all()
    assert not (after_sft[name] == final[name]).all()


def test_resume_refuses_a_changed_configuration(uninterrupted, tiny_model_dir, tmp_path) -> None:
    full, _ = uninterrupted
    run = tmp_path / "run"
    crash_after(full, 3, run)
    with pytest.raises(TrainerError, match="optim.lr"):
        train(config_for(tiny_model_dir, run, optim={"lr": 5e-4, "schedule": "cosine", "warmup_steps": 2}), resume=True)


def test_fresh_run_refuses_an_occupied_folder_and_resume_needs_a_checkpoint(uninterrupted, tiny_model_dir, tmp_path) -> None:
    full, _ = uninterrupted
    with pytest.raises(TrainerError, match="already holds a run"):
        train(config_for(tiny_model_dir, full))
    with pytest.raises(TrainerError, match="no checkpoint"):
        train(config_for(tiny_model_dir, tmp_path / "empty"), resume=True)


def test_a_full_disk_ends_the_command_with_one_line_and_the_rerun_resumes(uninterrupted, tmp_path, monkeypatch, capsys) -> None:
    """The disk fills while the third checkpoint is written: ``agentgym train`` says so in one line
    (no traceback), leaves no half-written checkpoint, and ``--resume`` then ends where the
    uninterrupted run ended."""
    full, _ = uninterrupted
    run = tmp_path / "run"
    real_save = checkpoint_module.torch.save

    def save_until_full(obj, path, *args, **kwargs):
        if Path(path).parent.name == ".partial-000003":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(obj, path, *args, **kwargs)

    command = ["train", "--config", str(full / "config.yaml"), "--output", str(run), "--no-progress"]
    monkeypatch.setattr(checkpoint_module.torch, "save", save_until_full)
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("agentgym: error: the disk is full (writing "), err
    assert "--resume" in err.splitlines()[-1]
    assert [c.name for c in checkpoints(run)] == ["step-000001", "step-000002"]
    assert not list((run / "checkpoints").glob(".partial-*"))
    monkeypatch.setattr(checkpoint_module.torch, "save", real_save)
    assert main([*command, "--resume"]) == 0
    expected, got = weights(full), weights(run)
    assert all((expected[name] == got[name]).all() for name in expected)
    assert learning_record(run) == learning_record(full)
