"""`agentgym validate-reward`: shipped labelled sets validate; broken rewards are caught."""

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from agentgym.envs import ENVIRONMENTS

HERE = Path(__file__).parent


def _labelled_sets():
    root = resources.files("agentgym.tasks")
    return sorted(str(p) for p in Path(str(root)).glob("**/labelled.jsonl"))


def _family(path):
    return str(Path(path).parent.relative_to(Path(str(resources.files("agentgym.tasks")))))


def _validate(*args, cwd=None):
    env = os.environ | {"PYTHONPATH": str(HERE)}
    return subprocess.run([sys.executable, "-m", "agentgym.cli", "validate-reward", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900)


def test_every_environment_ships_a_labelled_set():
    families = {_family(p) for p in _labelled_sets()}
    for env_id in ENVIRONMENTS:
        import gymnasium as gym

        env = gym.make(env_id)
        assert env.unwrapped.task_family in families, f"{env_id} has no tasks/{env.unwrapped.task_family}/labelled.jsonl"
        env.close()


@pytest.mark.parametrize("path", _labelled_sets(), ids=_family)
def test_shipped_labelled_set_validates(path):
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(records) >= 50
    kinds = {r["label"]["kind"] for r in records}
    assert kinds == {"success", "partial", "failure", "hack"}
    result = _validate(path, "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0, report
    assert report["accuracy"] >= 0.95 and all(c["passed"] for c in report["checks"])


def test_format_only_reward_is_rejected_with_a_readable_report():
    path = next(p for p in _labelled_sets() if "/refund/" in p)
    result = _validate(path, "--reward", "broken_rewards:format_only")
    assert result.returncode == 1
    assert "reward NOT validated" in result.stdout and "disagreements" in result.stdout
    report = json.loads(_validate(path, "--reward", "broken_rewards:format_only", "--json").stdout)
    failed = {c["name"] for c in report["checks"] if not c["passed"]}
    assert {"canary_floor", "gameability_gap"} <= failed and report["accuracy"] < 0.95


def test_trusting_stored_rewards_is_caught_on_a_tampered_file(tmp_path):
    path = next(p for p in _labelled_sets() if "/refund/" in p)
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    for r in records:  # a hack whose stored reward was edited to look like a success
        if r["label"]["kind"] == "hack":
            r["reward"], r["success"] = 1.0, True
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _validate(str(tampered)).returncode == 0  # the env's own reward replays; edits don't matter
    assert _validate(str(tampered), "--reward", "broken_rewards:stored_reward").returncode == 1


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"env_id": "agentgym/Refund-v0"}\n')
    result = _validate(str(bad))
    assert result.returncode == 2 and result.stderr.startswith("agentgym: error:") and "label" in result.stderr
    result = _validate(str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and "No such file" in result.stderr
    result = _validate(str(bad), "--reward", "nope")
    assert result.returncode == 2 and "module:function" in result.stderr
