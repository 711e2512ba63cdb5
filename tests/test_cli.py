"""The CLI as a user runs it: byte-identical rollouts, summaries, and one-line errors."""

import json
import subprocess
import sys

import pytest

from agentgym.cli import main


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True, text=True, timeout=300)


def test_rollout_is_byte_identical_and_summarised(tmp_path):
    outs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for out in outs:
        result = _run("rollout", "agentgym/Refund-v0", "--policy", "oracle", "--episodes", "12", "--seed", "7", "--split", "val", "--out", str(out), "--json")
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["episodes"] == 12 and summary["success_rate"] == 1.0 and summary["mean_reward"] == 1.0
    assert outs[0].read_bytes() == outs[1].read_bytes()
    records = [json.loads(line) for line in outs[0].read_text().splitlines()]
    assert len(records) == 12 and {r["split"] for r in records} == {"val"} and all(r["policy"] == "oracle" for r in records)
    assert [r["seed"] for r in records] == list(range(7, 19))


def test_trajectories_load_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "t.jsonl"
    assert main(["rollout", "agentgym/Refund-v0", "--policy", "random", "--episodes", "3", "--out", str(out), "--json"]) == 0
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert ds.num_rows == 3 and "messages" in ds.column_names


def _plain(value):
    """A value as pandas, pyarrow or datasets reads it, as JSON holds it: arrays as lists, and keys a
    record did not have (null in the table) left out."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("environment", ["agentgym/SQL-v0", "agentgym/MockAPI-v0", "agentgym/TauRetail-v0"])
def test_parquet_holds_the_json_lines_as_nested_columns(tmp_path, environment):
    datasets = pytest.importorskip("datasets")
    pd = pytest.importorskip("pandas")
    pq = pytest.importorskip("pyarrow.parquet")
    from agentgym.parquet import read_parquet
    from agentgym.rollout import read_jsonl

    lines, table = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    for out in (lines, table):
        assert main(["rollout", environment, "--policy", "random", "--episodes", "6", "--out", str(out), "--json", "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl", "t.parquet"]  # no working file left
    records = read_jsonl(lines)
    assert read_parquet(table) == records  # agentgym's reader gives the records back exactly
    schema = pq.read_schema(table)
    assert str(schema.field("messages").type).startswith("list<element: struct<role: string, content: string")
    assert "info: struct<task_id: string, turn: int64" in str(schema.field("steps").type)
    expected = [_plain({**r, "env_kwargs": json.dumps(r["env_kwargs"])}) for r in records]  # env_kwargs: JSON text
    assert [_plain(row) for row in pq.read_table(table).to_pylist()] == expected
    assert [_plain(row) for row in pd.read_parquet(table).to_dict("records")] == expected
    assert [_plain(row) for row in datasets.load_dataset("parquet", data_files=str(table), split="train").to_list()] == expected
    # Two runs of an environment, with other episodes, have one schema.
    other = tmp_path / "other.parquet"
    assert main(["rollout", environment, "--policy", "oracle", "--episodes", "3", "--seed", "5", "--out", str(other), "--json", "--quiet"]) == 0
    assert pq.read_schema(other) == schema


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["rollout", "agentgym/Nope-v0", "--out", "x.jsonl"], "unknown environment"),
        (["rollout", "agentgym/Refund-v0", "--policy", "genius", "--out", "x.jsonl"], "unknown policy 'genius'"),
        (["rollout", "agentgym/Refund-v0", "--env-kwargs", '{"colour": 1}', "--out", "x.jsonl"], "cannot make agentgym/Refund-v0"),
        (["rollout", "agentgym/Refund-v0", "--out", "/no/such/dir/x.jsonl"], "its directory does not exist"),
    ],
)
def test_errors_are_one_clear_line(tmp_path, args, fragment):
    result = subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgym: error:") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_argument_errors_are_usage_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", "rollout", "agentgym/Refund-v0", "--episodes", "0", "--out", "x.jsonl"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2 and "must be at least 1" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_list_names_every_environment():
    from agentgym.envs import ENVIRONMENTS

    result = _run("list", "--json")
    assert [e["id"] for e in json.loads(result.stdout)] == list(ENVIRONMENTS)


def test_play_reads_turns_from_the_terminal(capsys):
    from agentgym.cli import _parser, play

    turns = iter(['/call ask_customer {"question": "email"}', "/call ask_customer {bad", "hello", "/quit"])
    args = _parser().parse_args(["play", "agentgym/Refund-v0", "--seed", "3"])
    assert play.run(args, read=lambda prompt: next(turns)) == 0
    out = capsys.readouterr().out
    assert "Customer: My email is" in out and "not valid JSON" in out and "sort out my refund" in out
