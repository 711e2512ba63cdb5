"""The training configuration: YAML round trip, overrides, and one clear error per bad option."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.trainers.config import ConfigError, TrainConfig, config_to_dict, dump_config, load_config, parse_override

CONFIGS = Path(__file__).resolve().parents[2] / "trainers" / "configs"


def test_yaml_round_trip_of_a_config_with_every_section(tmp_path) -> None:
    config = load_config(
        overrides={
            "env_id": "agentgym/SQL-v0",
            "model": "some/model",
            "ref_device": "cpu",
            "rollout": {"task_ids": ["sql-0001", "sql-0003"], "group_size": 8, "env_kwargs": {"max_rows": 5}, "top_p": 0.9},
            "grpo": {"loss_agg": "token-mean", "clip_eps_high": 0.28, "mini_batch_size": 4, "epochs": 2},
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
        ({"grpo.steps": "many"}, r"grpo\.steps: Input should be a valid integer"),
        ({"grpo.loss_agg": "mean"}, r"grpo\.loss_agg: Input should be 'seq-mean-token-mean'"),
        ({"rollout.group_size": 1}, r"rollout\.group_size must be >= 2"),
        ({"grpo.clip_eps": 1.5}, r"grpo\.clip_eps must be in \(0, 1\)"),
        ({"optim.lr": 0}, r"optim\.lr must be > 0"),
        ({"sft.optim.lr": -1}, r"sft\.optim\.lr must be > 0"),
        ({"rollout.temperature": 0}, r"rollout\.temperature must be > 0"),
        ({"grpo.old_logprobs": "sampling", "rollout.top_p": 0.9}, r"old_logprobs='sampling' needs rollout\.top_p=1"),
        ({"eval.patience": 2}, r"eval\.patience needs eval\.every >= 1"),
        ({"grpo.steps": 0}, r"nothing to do: .* --steps N"),
        ({"rollout": 3}, r"rollout: Input should be a dictionary"),
        ({"env_id": None}, r"env_id: Input should be a valid string"),
        ({"device": "gpu"}, r"device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
        ({"ref_device": "cuda:x"}, r"ref_device must be cpu, cuda or cuda:N"),
        ({"ref_device": "cpu", "lora.enabled": True}, r"ref_device does not apply with LoRA"),
        ({"rollout.max_total_tokens": 1}, r"rollout\.max_total_tokens must be at least 2; got 1"),
        ({"rollout.top_p": 0}, r"rollout\.top_p must be in \(0, 1\]"),
        ({"lora.dropout": 0.1}, r"lora\.dropout: unknown option"),
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
