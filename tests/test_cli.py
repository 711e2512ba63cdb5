"""The CLI as a user runs it: byte-identical rollouts, summaries, and one-line errors."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from agentgym.cli import main

ROOT = Path(__file__).resolve().parents[1]


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
    from agentgym.rollouts.io import read_jsonl
    from agentgym.rollouts.parquet import read_parquet

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
        (["rollout", "agentgym/Refund-v0", "--out", "."], "cannot write .: it is a directory"),
        (["rollout", "agentgym/Refund-v0", "--env-kwargs", '{"max_turns": "x"}', "--out", "x.jsonl"], "max_turns must be an integer; got 'x'"),
        (["rollout", "agentgym/Refund-v0", "--env-kwargs", '{"max_tool_calls": 2.5}', "--out", "x.jsonl"], "max_tool_calls must be an integer; got 2.5"),
        (["train", "agentgym/Refund-v0", "--config", "{root}/trainers/configs/cpu_demo.yaml"], "differs from env_id agentgym/SQL-v0"),
    ],
)
def test_errors_are_one_clear_line(tmp_path, args, fragment):
    args = [a.replace("{root}", str(ROOT)) for a in args]
    result = subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgym: error:") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "partial" not in result.stderr and "invalid literal" not in result.stderr
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


def test_list_names_every_environment_and_the_clients():
    from agentgym.envs import CLIENTS, ENVIRONMENTS

    listed = json.loads(_run("list", "--json").stdout)
    assert [e["id"] for e in listed] == [*ENVIRONMENTS, "agentgym/Remote-v0", "agentgym/Ray-v0", "agentgym/MCP-v0"] == [*ENVIRONMENTS, *CLIENTS]
    assert [e["kind"] for e in listed[-3:]] == ["client"] * 3 and all(e["description"] for e in listed)


def test_list_scores_are_the_committed_experiment_summaries(capsys):
    from pathlib import Path

    from agentgym.cli import main
    from agentgym.envs import ENVIRONMENTS
    from agentgym.envs.scores import expected_scores

    root = Path(__file__).resolve().parents[1]
    scores = expected_scores()
    assert scores and set(scores) <= set(ENVIRONMENTS)
    for env_id, expected in scores.items():
        summary = json.loads((root / expected.source).read_text())
        assert summary["env_id"] == env_id and tuple(summary["seeds"]) == expected.seeds and summary["run"] == "reported"
        for arm, score in expected.arms.items():
            measured = summary["arms"][arm]
            assert score.n == measured["n"] and abs(score.success - measured["success"]) < 1e-4
            assert all(abs(a - b) < 1e-4 for a, b in zip(score.ci, measured["ci"], strict=True))
    assert main(["list", "--scores", "--json"]) == 0
    listed = {e["id"]: e for e in json.loads(capsys.readouterr().out)}
    assert listed["agentgym/SQL-v0"]["expected_scores"]["arms"]["grpo"]["n"] == scores["agentgym/SQL-v0"].arms["grpo"].n
    assert listed["agentgym/Refund-v0"]["expected_scores"] is None or "agentgym/Refund-v0" in scores


def test_every_command_says_what_it_does_in_its_help(capsys):
    from agentgym.cli import COMMANDS, _parser

    commands = next(a for a in _parser()._actions if a.dest == "command").choices
    assert len(commands) == len(COMMANDS)
    for name, parser in commands.items():
        assert parser.description and len(parser.description) > 20, name
        with pytest.raises(SystemExit):
            main([name, "--help"])
        shown = capsys.readouterr().out
        assert " ".join(parser.description.split()[:4]) in " ".join(shown.split()), name


def test_a_training_config_names_the_environment(tmp_path, capsys):
    from agentgym.cli._training import _env_id

    args = _parser_args("train", "--config", str(ROOT / "trainers/configs/cpu_demo.yaml"))
    assert _env_id(args) == "agentgym/SQL-v0"  # ENV may be left out
    assert _env_id(_parser_args("train", "agentgym/SQL-v0", "--config", str(ROOT / "trainers/configs/cpu_demo.yaml"))) == "agentgym/SQL-v0"
    assert main(["train"]) == 2 and "name the environment" in capsys.readouterr().err


def _parser_args(*argv: str):
    from agentgym.cli import _parser

    return _parser().parse_args(argv)


def test_ansi_rendering_raises_no_warning():
    import gymnasium as gym

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("agentgym/Refund-v0", render_mode="ansi")  # the passive checker runs on reset and render
        env.reset(seed=0)
        assert env.render().startswith("[system]")
        env.close()


def test_play_reflows_the_policy_to_the_terminal(capsys, monkeypatch):
    from agentgym.cli import _parser, play

    monkeypatch.setenv("COLUMNS", "80")
    args = _parser().parse_args(["play", "agentgym/Refund-v0"])
    assert play.run(args, read=lambda prompt: "/quit") == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if "Today's date is" in line)
    paragraph = lines[start : next(i for i in range(start, len(lines)) if not lines[i].strip())]
    # Filled to the width, not a long line and a short remainder per source line.
    assert len(paragraph) >= 3 and all(70 <= len(line) <= 80 for line in paragraph[:-1]), paragraph


def test_play_reads_turns_from_the_terminal(capsys):
    from agentgym.cli import _parser, play

    turns = iter(['/call ask_customer {"question": "email"}', "/call ask_customer {bad", "hello", "/quit"])
    args = _parser().parse_args(["play", "agentgym/Refund-v0", "--seed", "3"])
    assert play.run(args, read=lambda prompt: next(turns)) == 0
    out = capsys.readouterr().out
    assert "Customer: My email is" in out and "not valid JSON" in out and "sort out my refund" in out
