"""``agentgym eval`` and ``agentgym rollout`` keep each episode as it finishes: Ctrl-C leaves a valid
partial file and a summary, and the same command resumes the run into the file an uninterrupted
run writes (agentgym.rollouts.episode_file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fakes import OracleScript

import agentgym  # noqa: F401 - registers the environments
from agentgym.cli import main
from agentgym.rollouts.episode_file import EpisodeFile
from agentgym.rollouts.io import read_jsonl
from agentgym.rollouts.parquet import read_parquet


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, episodes: int) -> None:
    """Ctrl-C right after the ``episodes``-th episode of the run is written."""
    write = EpisodeFile.write
    written = []

    def write_then_interrupt(self: EpisodeFile, record: Any) -> None:
        write(self, record)
        written.append(record)
        if len(written) == episodes:
            raise KeyboardInterrupt

    monkeypatch.setattr(EpisodeFile, "write", write_then_interrupt)


@pytest.fixture
def sql_eval(fake_server, default_tokenizer) -> list[str]:
    """``agentgym eval`` arguments for 3 tasks × 2 trials of SQL-v0 played by the oracle through the fake server."""
    env = gym.make("agentgym/SQL-v0", split="test")
    task_ids = env.unwrapped.task_ids[:3]
    env.close()
    fake_server.responder = OracleScript("agentgym/SQL-v0", task_ids, default_tokenizer).respond
    return ["eval", "agentgym/SQL-v0", "--backend", "openai", "--base-url", fake_server.base_url, "--task-ids", *task_ids, "--num-trials", "2", "--seed", "0"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_interrupted_eval_keeps_its_episodes_and_resumes_to_the_same_file(tmp_path: Path, sql_eval, fake_server, capsys, monkeypatch, suffix) -> None:
    whole = tmp_path / f"whole{suffix}"
    assert main([*sql_eval, "--out", str(whole), "--json"]) == 0
    uninterrupted = json.loads(capsys.readouterr().out)
    requests = len(fake_server.requests)

    out = tmp_path / f"resumed{suffix}"
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 4)
        assert main([*sql_eval, "--out", str(out), "--json"]) == 130
    captured = capsys.readouterr()
    assert "interrupted: 4 of 6 episodes finished" in captured.err and str(out) in captured.err
    assert "success rate" in captured.err  # the summary of what finished
    kept = read_jsonl(out.with_name(out.name + ".jsonl") if suffix == ".parquet" else out)
    assert len(kept) == 4 and all(r["success"] for r in kept)  # a valid file of the finished episodes

    fake_server.requests.clear()
    assert main([*sql_eval, "--out", str(out), "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["episodes"] == 6
    assert 0 < len(fake_server.requests) < requests  # only the two unfinished episodes were played
    assert out.read_bytes() == whole.read_bytes() if suffix == ".jsonl" else read_parquet(out) == read_parquet(whole)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no working files left
    for key in ("success_rate", "mean_reward", "mean_turns", "stop_reasons", "mean_tokens"):
        assert resumed[key] == uninterrupted[key]


def test_a_rerun_with_other_settings_does_not_resume(tmp_path: Path, sql_eval, capsys, monkeypatch) -> None:
    out = tmp_path / "eval.jsonl"
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 1)
        assert main([*sql_eval, "--out", str(out)]) == 130
    capsys.readouterr()
    assert main([*sql_eval, "--out", str(out), "--temperature", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unfinished run with other settings (temperature 1.0 there, 0.5 now)" in err
    assert len(read_jsonl(out)) == 1  # the earlier work is untouched


def test_a_run_that_fails_to_start_leaves_an_earlier_output_alone(tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval.jsonl"
    out.write_text('{"earlier": "results"}\n')
    args = ["eval", "agentgym/SQL-v0", "--model", str(tmp_path / "no-such-model"), "--out", str(out)]
    assert main(args) == 2 and "model not found" in capsys.readouterr().err
    assert out.read_text() == '{"earlier": "results"}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["eval.jsonl"]


def test_a_line_cut_off_by_a_killed_process_is_played_again(tmp_path: Path) -> None:
    settings = {"run": 1}
    out = EpisodeFile(tmp_path / "x.jsonl", settings, key=lambda r: r["i"])
    assert out.open() == []
    out.write({"i": 1})
    out.write({"i": 0})
    out.close()
    with open(tmp_path / "x.jsonl", "a", encoding="utf-8") as file:
        file.write('{"i": 2, "cut')  # killed mid-line
    again = EpisodeFile(tmp_path / "x.jsonl", settings, key=lambda r: r["i"])
    assert again.open() == [{"i": 1}, {"i": 0}] and again.keys() == {0, 1}
    again.write({"i": 2})
    again.complete()
    assert (tmp_path / "x.jsonl").read_text() == '{"i": 0}\n{"i": 1}\n{"i": 2}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.jsonl"]


def test_interrupted_rollout_resumes_to_the_same_file(tmp_path: Path, capsys, monkeypatch) -> None:
    args = ["rollout", "agentgym/Refund-v0", "--episodes", "5", "--seed", "3", "--json"]
    whole = tmp_path / "whole.jsonl"
    assert main([*args, "--out", str(whole)]) == 0
    out = tmp_path / "resumed.jsonl"
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 2)
        assert main([*args, "--out", str(out)]) == 130
    assert "interrupted: 2 of 5 episodes finished" in capsys.readouterr().err and len(read_jsonl(out)) == 2
    assert main([*args, "--out", str(out)]) == 0
    assert "resuming: 2 of 5 episodes" in capsys.readouterr().err
    assert out.read_bytes() == whole.read_bytes()
