"""The training configuration: YAML round trip, overrides, and one clear error per bad option."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from agentgym.trainers.config import (
    CheckpointSection,
    ConfigError,
    EvalSection,
    GRPOSection,
    LoRASection,
    OptimSection,
    RolloutSection,
    SFTSection,
    TrainConfig,
    config_to_dict,
    dump_config,
    load_config,
    parse_override,
)

CONFIGS = Path(__file__).resolve().parents[2] / "trainers" / "configs"


def test_yaml_round_trip_of_a_config_with_every_section(tmp_path) -> None:
    config = load_config(
        overrides={
            "env_id": "agentgym/SQL-v0",
            "model": "some/model",
            "ref_device": "cpu",
            "rollout": {"task_ids": ["sql-0001", "sql-0003"], "group_size": 8, "env_kwargs": {"max_rows": 5}, "top_p": 0.9},
            "grpo": {
                "loss_agg": "token-mean",
                "clip_eps_high": 0.28,
                "mini_batch_size": 4,
                "epochs": 2,
                "filter_degenerate": True,
                "degenerate_by": "success",
                "resample_rounds": 3,
                "step_advantage_weight": 0.5,
                "step_discount": 0.9,
            },
            "optim": {"betas": [0.9, 0.95], "schedule": "cosine", "max_grad_norm": None},
            "sft": {"steps": 5, "optim": {"lr": 3e-5}},
            "eval": {"every": 2, "patience": 3, "metric": "reward_mean"},
            "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]},  # (with LoRA there is no ref_device)
        }
    )
    path = tmp_path / "config.yaml"
    dump_config(config, path)
    again = load_config(path)
    assert again == config
    assert again.rollout.task_ids == ("sql-0001", "sql-0003") and again.optim.betas == (0.9, 0.95)
    assert again.lora.target_modules == ("q_proj", "v_proj") and again.optim.max_grad_norm is None
    assert config_to_dict(again) == config_to_dict(config)


def test_defaults_and_dotted_overrides_on_top_of_a_file(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("env_id: agentgym/SQL-v0\noptim:\n  lr: 1e-5\n  warmup_steps: 3\n")
    config = load_config(path, overrides={"optim.warmup_steps": 5, "grpo.steps": 7})
    assert config.optim.lr == 1e-5 and config.optim.warmup_steps == 5 and config.grpo.steps == 7
    assert config.rollout == TrainConfig(env_id="x").rollout  # untouched sections keep their defaults


def test_bundled_configs_load() -> None:
    files = sorted(CONFIGS.glob("*.yaml"))
    assert files
    for path in files:
        assert load_config(path).env_id.startswith("agentgym/")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rollout.group_sise": 4}, r"rollout\.group_sise: unknown option"),
        ({"grpo.steps": "many"}, r"grpo\.steps: must be a valid integer.*\(got 'many'\)"),
        ({"grpo.loss_agg": "mean"}, r"grpo\.loss_agg: must be 'seq-mean-token-mean', 'token-mean' or 'seq-mean-token-sum-norm' \(got 'mean'\)"),
        ({"rollout.group_size": 1}, r"rollout\.group_size: must be >= 2 \(got 1\)"),
        ({"grpo.clip_eps": 1.5}, r"grpo\.clip_eps: must be < 1 \(got 1\.5\)"),
        ({"grpo.clip_eps": 0}, r"grpo\.clip_eps: must be > 0 \(got 0\)"),
        ({"optim.lr": 0}, r"optim\.lr: must be > 0 \(got 0\)"),
        ({"sft.optim.lr": -1}, r"sft\.optim\.lr: must be > 0 \(got -1\)"),
        ({"rollout.temperature": 0}, r"rollout\.temperature: must be > 0 \(got 0\)"),
        ({"grpo.old_logprobs": "sampling", "rollout.top_p": 0.9}, r"old_logprobs='sampling' needs rollout\.top_p=1"),
        ({"grpo.old_logprobs": "sampling", "rollout.error_temperature": 1.2}, r"old_logprobs='sampling' does not go with rollout\.error_temperature"),
        ({"grpo.old_logprobs": "sampling", "rollout.error_tool_exploration": 0.5}, r"old_logprobs='sampling' does not go with rollout\.error_tool_exploration"),
        ({"rollout.error_tool_exploration": -0.1}, r"rollout\.error_tool_exploration"),
        ({"grpo.sft_when_degenerate": True}, r"grpo\.sft_when_degenerate needs grpo\.sft_coef above 0"),
        ({"grpo.openings_in_loss": "never"}, r"grpo\.openings_in_loss"),
        ({"grpo.format_errors_in_loss": "when_better"}, r"grpo\.format_errors_in_loss"),
        ({"grpo.call_prefix_in_loss": "never"}, r"grpo\.call_prefix_in_loss"),
        ({"grpo.call_closing_in_loss": "never"}, r"grpo\.call_closing_in_loss"),
        ({"grpo.after_error_in_loss": "never"}, r"grpo\.after_error_in_loss"),
        ({"rollout.error_temperature": 0}, r"rollout\.error_temperature must be above 0"),
        ({"eval.patience": 2}, r"eval\.patience needs eval\.every >= 1"),
        ({"grpo.steps": 0}, r"nothing to do: .* --steps N"),
        ({"rollout": 3}, r"rollout: must be a dictionary"),
        ({"env_id": None}, r"env_id: must be a valid string \(got None\)"),
        ({"env_id": "  "}, r"env_id: must not be empty \(got '  '\)"),
        ({"device": "gpu"}, r"device: must be auto, cpu, mps, cuda or cuda:N \(got 'gpu'\)"),
        ({"ref_device": "cuda:x"}, r"ref_device: must be cpu, mps, cuda, cuda:N or null .*\(got 'cuda:x'\)"),
        ({"ref_device": "auto"}, r"ref_device: must be cpu, mps, cuda, cuda:N or null .*\(got 'auto'\)"),
        ({"ref_device": "cpu", "lora.enabled": True}, r"ref_device does not apply with LoRA"),
        ({"rollout.max_total_tokens": 1}, r"rollout\.max_total_tokens must be at least 2; got 1"),
        ({"rollout.top_p": 0}, r"rollout\.top_p must be in \(0, 1\]"),
        ({"lora.dropout": 0.1}, r"lora\.dropout: unknown option"),
        ({"grpo.resample_rounds": 2}, r"grpo\.resample_rounds and grpo\.degenerate_by need grpo\.filter_degenerate: true"),
        ({"grpo.degenerate_by": "success"}, r"grpo\.resample_rounds and grpo\.degenerate_by need grpo\.filter_degenerate: true"),
        ({"grpo.degenerate_by": "outcome"}, r"grpo\.degenerate_by: must be 'reward' or 'success' \(got 'outcome'\)"),
        ({"grpo.step_advantage_weight": 1.0, "rollout.distinct_env_seeds": True}, r"grpo\.step_advantage_weight does not go with rollout\.distinct_env_seeds"),
    ],
)
def test_bad_options_raise_one_clear_error(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides={"env_id": "agentgym/SQL-v0", **overrides})


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"env_id": "agentgym/SQL-v0", "rollout.group_size": 0, "optim.lr": -1.0})
    text = str(info.value)
    assert "rollout.group_size" in text and "optim.lr" in text and "Traceback" not in text


@pytest.mark.parametrize(
    ("overrides", "line"),
    [  # a bound declared on a field of each section
        ({"seed": -1}, "seed: must be >= 0 (got -1)"),
        ({"rollout.num_tasks": 0}, "rollout.num_tasks: must be >= 1 (got 0)"),
        ({"rollout.task_ids": []}, "rollout.task_ids: must not be empty (got [])"),
        ({"grpo.epochs": 0}, "grpo.epochs: must be >= 1 (got 0)"),
        ({"grpo.mini_batch_size": 0}, "grpo.mini_batch_size: must be >= 1 (got 0)"),
        ({"grpo.resample_rounds": -1}, "grpo.resample_rounds: must be >= 0 (got -1)"),
        ({"grpo.step_advantage_weight": -0.5}, "grpo.step_advantage_weight: must be >= 0 (got -0.5)"),
        ({"grpo.step_discount": 1.5}, "grpo.step_discount: must be <= 1 (got 1.5)"),
        ({"optim.betas": [0.9, 1.0]}, "optim.betas[1]: must be < 1 (got 1.0)"),
        ({"optim.max_grad_norm": float("nan")}, "optim.max_grad_norm: must be > 0 (got nan)"),
        ({"sft.max_length": 1}, "sft.max_length: must be >= 2 (got 1)"),
        ({"sft.source": ""}, "sft.source: must not be empty (got '')"),
        ({"eval.min_delta": -0.5}, "eval.min_delta: must be >= 0 (got -0.5)"),
        ({"lora.r": 0}, "lora.r: must be >= 1 (got 0)"),
        ({"lora.target_modules": []}, "lora.target_modules: must not be empty or must be 'all-linear' (got [])"),
        ({"checkpoint.keep": 0}, "checkpoint.keep: must be >= 1 (got 0)"),
    ],
)
def test_field_bounds_name_the_option_and_the_bound(overrides, line) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"env_id": "agentgym/SQL-v0", **overrides})
    assert str(info.value) == f"invalid training configuration:\n  {line}"


def test_a_file_with_three_bad_values_lists_each_on_its_own_line(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("env_id: agentgym/SQL-v0\nrollout: {group_size: 1}\ngrpo: {epochs: 0, clip_eps: 1.5}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).splitlines() == [
        "invalid training configuration:",
        "  rollout.group_size: must be >= 2 (got 1)",
        "  grpo.epochs: must be >= 1 (got 0)",
        "  grpo.clip_eps: must be < 1 (got 1.5)",
    ]
    assert info.value.problems == [line.strip() for line in str(info.value).splitlines()[1:]]


def test_combinations_are_checked_once_every_option_is_valid() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"env_id": "agentgym/SQL-v0", "grpo.steps": 0, "eval.enabled": False, "eval.every": 2, "eval.patience": 1})
    assert info.value.problems == [
        "eval.every needs eval.enabled",
        "nothing to do: grpo.steps and sft.steps are both 0 (set one, e.g. agentgym train/sft --steps N)",
    ]
    # A value out of bounds is reported first; the combination follows once it is fixed.
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"env_id": "agentgym/SQL-v0", "grpo.steps": 0, "grpo.epochs": 0})
    assert info.value.problems == ["grpo.epochs: must be >= 1 (got 0)"]


@pytest.mark.parametrize(
    ("make", "line"),
    [
        (lambda: TrainConfig(env_id="x", grpo=GRPOSection(epochs=0)), "epochs: must be >= 1 (got 0)"),
        (lambda: GRPOSection(clip_eps=1.0, kl_coef=-1.0), "clip_eps: must be < 1 (got 1.0)"),
        (lambda: RolloutSection(temperature=0.0), "temperature: must be > 0 (got 0.0)"),
        (lambda: RolloutSection(max_total_tokens=1), "max_total_tokens must be at least 2; got 1"),  # RolloutSettings' own check
        (lambda: OptimSection(lr=0.0), "lr: must be > 0 (got 0.0)"),
        (lambda: SFTSection(batch_size=0), "batch_size: must be >= 1 (got 0)"),
        (lambda: EvalSection(samples=0), "samples: must be >= 1 (got 0)"),
        (lambda: LoRASection(alpha=0), "alpha: must be >= 1 (got 0)"),
        (lambda: CheckpointSection(every=-1), "every: must be >= 0 (got -1)"),
        (lambda: TrainConfig(env_id="x", device="cuda:"), "device: must be auto, cpu, mps, cuda or cuda:N (got 'cuda:')"),
        (lambda: TrainConfig(env_id="x", bogus=1), "bogus: unknown option"),
        (lambda: TrainConfig(env_id="x", grpo=GRPOSection(steps=0)), "nothing to do: grpo.steps and sft.steps are both 0"),
        (lambda: TrainConfig(env_id="x", ref_device="cpu", lora=LoRASection(enabled=True)), "ref_device does not apply with LoRA"),
        (lambda: dataclasses.replace(TrainConfig(env_id="x"), seed=-1), "seed: must be >= 0 (got -1)"),
    ],
)
def test_constructing_in_python_checks_the_same_bounds(make, line) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    assert any(problem.startswith(line) for problem in info.value.problems), info.value.problems


def test_configs_stay_frozen_plain_dataclasses() -> None:
    config = TrainConfig(env_id="x", rollout=RolloutSection(task_ids=["a", "b"], group_size=2), grpo=GRPOSection(epochs=2))
    assert config.rollout.task_ids == ("a", "b")  # validated on construction: lists become tuples
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(config)) == config  # configs go to spawned worker processes
    assert dataclasses.replace(config, seed=3).seed == 3 and dataclasses.replace(config.grpo, epochs=4).epochs == 4
    assert dataclasses.asdict(config)["grpo"]["epochs"] == 2 and config_to_dict(config)["rollout"]["task_ids"] == ["a", "b"]
    error = pickle.loads(pickle.dumps(ConfigError.listing("training configuration", ["a", "b"])))
    assert str(error) == "invalid training configuration:\n  a\n  b" and error.problems == ["a", "b"]


def test_missing_env_id_and_bad_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="env_id: Field required"):
        load_config(overrides={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("env_id: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(listing)
    seeded = tmp_path / "seeded.yaml"
    seeded.write_text("env_id: agentgym/SQL-v0\nseed: 3\n")
    with pytest.raises(ConfigError, match="seed is not a section"):
        load_config(seeded, overrides={"seed.x": 1})


def test_parse_override_reads_yaml_values() -> None:
    assert parse_override("grpo.steps=10") == ("grpo.steps", 10)
    assert parse_override("optim.lr=1e-5") == ("optim.lr", "1e-5")  # pydantic reads it as a float
    assert load_config(overrides={"env_id": "e/x", "optim.lr": "1e-5"}).optim.lr == 1e-5
    assert parse_override("rollout.task_ids=[a, b]") == ("rollout.task_ids", ["a", "b"])
    assert parse_override("model=null") == ("model", None)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("grpo.steps")
