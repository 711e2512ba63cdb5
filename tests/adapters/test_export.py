"""Episode specs, the dataset exporters and the adapters' command line (no trainer framework needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from adapter_support import REFUND

from agentgym.trainers.adapters.__main__ import main as adapters_main
from agentgym.trainers.adapters.export import FORMATS, export_rows, main, write_rows
from agentgym.trainers.adapters.spec import SPEC_KEY, EpisodeSpec, SpecError


def test_spec_round_trips_and_rebuilds_the_episode() -> None:
    spec = EpisodeSpec(env_id=REFUND, task_id="refund-0000", split="train", seed=7, env_kwargs={"max_turns": 5})
    assert EpisodeSpec.from_json(spec.to_json()) == spec
    assert EpisodeSpec.from_json(spec.to_dict()) == spec
    env = spec.make()
    first, _ = spec.reset(env)
    again, _ = spec.reset(spec.make())
    assert first == again and env.unwrapped.max_turns == 5 and env.unwrapped.task["task_id"] == "refund-0000"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"env_id": "agentgym/Refund-v0"}', "lacks \\['task_id'\\]"),
        ('{"env_id": "agentgym/Refund-v0", "task_id": "t", "colour": 1}', "unknown keys"),
        ('{"env_id": "agentgym/Refund-v0", "task_id": "t", "split": "dev"}', "split must be one of"),
        ('{"env_id": "agentgym/Refund-v0", "task_id": "t", "seed": "3"}', "seed must be an integer"),
        ('{"env_id": "agentgym/Refund-v0", "task_id": "t", "env_kwargs": {"split": "val"}}', "must not set"),
        ('{"env_id": "", "task_id": "t"}', "env_id must be"),
    ],
)
def test_bad_specs_fail_with_a_reason(value: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        EpisodeSpec.from_json(value)


def test_spec_is_found_in_a_row_or_its_extra_info() -> None:
    spec = EpisodeSpec(env_id=REFUND, task_id="refund-0000")
    assert EpisodeSpec.from_row({SPEC_KEY: spec.to_json()}) == spec
    assert EpisodeSpec.from_row({"extra_info": {SPEC_KEY: spec.to_json()}}) == spec
    with pytest.raises(SpecError, match="export the dataset"):
        EpisodeSpec.from_row({"prompt": "hi"})
    with pytest.raises(SpecError, match="unknown environment"):
        EpisodeSpec(env_id="agentgym/Nope-v0", task_id="t").make()


def test_rows_of_every_format_carry_the_same_episodes() -> None:
    by_format = {fmt: export_rows(fmt, REFUND, split="val", limit=3, seed=10) for fmt in FORMATS}
    specs = {
        "verl": [EpisodeSpec.from_json(r["extra_info"][SPEC_KEY]) for r in by_format["verl"]],
        "openrlhf": [EpisodeSpec.from_json(r["label"]) for r in by_format["openrlhf"]],
        "trl": [EpisodeSpec.from_json(r[SPEC_KEY]) for r in by_format["trl"]],
        "trl-rollout": [EpisodeSpec.from_json(r["prompt"]) for r in by_format["trl-rollout"]],
    }
    assert all(s == specs["verl"] for s in specs.values())
    assert [s.seed for s in specs["verl"]] == [10, 11, 12]
    env = specs["verl"][0].make()
    for spec, row in zip(specs["verl"], by_format["verl"], strict=True):
        opening, _ = spec.reset(env)
        assert row["prompt"] == [{"role": m["role"], "content": m["content"]} for m in opening]
        assert row["reward_model"]["ground_truth"] == spec.to_json() and row["agent_name"] == "agentgym"
        assert row["data_source"] == REFUND and row["extra_info"]["task_id"] == spec.task_id
    assert [r["extra_info"]["index"] for r in by_format["verl"]] == [0, 1, 2]
    assert by_format["trl"][0]["environment"] == REFUND


def test_exports_are_deterministic_and_index_across_environments() -> None:
    twice = [export_rows("verl", [REFUND, REFUND], split="test", limit=2) for _ in range(2)]
    assert twice[0] == twice[1]
    assert [r["extra_info"]["index"] for r in twice[0]] == [0, 1, 2, 3]


def test_parquet_and_jsonl_round_trip(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = export_rows("verl", REFUND, limit=2)
    assert pq.read_table(write_rows(rows, tmp_path / "d" / "train.parquet")).to_pylist() == rows
    lines = write_rows(rows, tmp_path / "train.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == rows
    with pytest.raises(ValueError, match="unsupported output suffix"):
        write_rows(rows, tmp_path / "train.csv")
    with pytest.raises(ValueError, match="no rows"):
        write_rows([], tmp_path / "x.jsonl")


def test_export_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.jsonl"
    assert main(["openrlhf", REFUND, "--split", "val", "--limit", "2", "--env-kwargs", '{"max_turns": 9}', "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 and EpisodeSpec.from_json(rows[0]["label"]).env_kwargs == {"max_turns": 9}
    for argv, message in [
        (["verl", "agentgym/Nope-v0", "--out", str(tmp_path / "x.parquet")], "unknown environment"),
        (["verl", REFUND, "--env-kwargs", '{"bogus": 1}', "--out", str(tmp_path / "x.parquet")], "bogus"),
        (["verl", REFUND, "--env-kwargs", "[1]", "--out", str(tmp_path / "x.parquet")], "JSON object"),
        (["verl", REFUND, "--limit", "0", "--out", str(tmp_path / "x.parquet")], "limit must be"),
        (["verl", REFUND, "--out", str(tmp_path / "x.txt")], "suffix"),
    ]:
        assert main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_paths_for_launch_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert adapters_main(["verl-agent-loop"]) == 0
    yaml_path = Path(capsys.readouterr().out.strip())
    assert yaml_path.is_file() and "agentgym.trainers.adapters.verl.AgentGymAgentLoop" in yaml_path.read_text(encoding="utf-8")
    assert adapters_main(["openrlhf-agent-func"]) == 0
    assert Path(capsys.readouterr().out.strip()).name == "openrlhf.py"
    target = tmp_path / "agent_func.py"
    assert adapters_main(["openrlhf-agent-func", "--write", str(target), "--template-kwargs", '{"enable_thinking": false}']) == 0
    assert "template_kwargs={'enable_thinking': False}" in target.read_text(encoding="utf-8")
    assert adapters_main(["openrlhf-agent-func", "--write", str(target), "--template-kwargs", "[]"]) == 2
    with pytest.raises(SystemExit):
        adapters_main(["openrlhf-agent-func", "--tool-mode", "system_prompt"])


def test_core_and_framework_free_modules_import_no_trainer() -> None:
    code = (
        "import sys, agentgym, agentgym.trainers.adapters.export, agentgym.rollouts.episode, "
        "agentgym.trainers.adapters.trl, agentgym.trainers.adapters.pool, agentgym.trainers.adapters.__main__\n"
        "print(sorted(m for m in ('verl', 'openrlhf', 'trl', 'ray', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
