"""The examples in examples/ run as documented (with small settings) and say what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(name: str, *args: str, timeout: int = 600) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_new_env_is_short_and_works():
    assert len((EXAMPLES / "new_env.py").read_text(encoding="utf-8").splitlines()) < 100
    out = run("new_env.py")
    assert "Error: unknown city 'Atlantis'" in out and "reward=1.0 terminated=True" in out


def test_new_reward_catches_the_naive_version_and_validates_the_fixed_one():
    out = run("new_reward.py")
    naive, fixed = out.split("\nreward: ", 1)
    assert "not valid" in naive and "FAIL gameability_gap" in naive
    assert "-> valid" in fixed and "FAIL" not in fixed


def test_hand_loop_trains_one_step(default_tokenizer):
    pytest.importorskip("torch")
    out = run("hand_loop.py", "--steps", "1", "--tasks", "1", "--group-size", "2", "--max-new-tokens", "24")
    assert "part 1: one episode" in out and "part 2, step 1:" in out


def test_mcp_client_replays_the_oracle_over_stdio():
    pytest.importorskip("mcp")
    out = run("mcp_client.py")
    assert "tools for the model: answer, search, open, calculator, send_message" in out and "reward 1.0 (success True)" in out


def test_mcp_env_wraps_an_sdk_server():
    pytest.importorskip("mcp")
    out = run("mcp_env.py")
    assert "gymnasium's check_env passed" in out and "Error: Error executing tool rate: no rate from EUR to GBP" in out and "reward=1.0 terminated=True" in out


def test_openai_harness_records_and_trains(tiny_model_dir):
    pytest.importorskip("openai")
    # The tiny random model (context 1,024) keeps it fast; SearchQA-v0's opening fits in that context.
    out = run("openai_harness.py", "--model", str(tiny_model_dir), "--env", "agentgym/SearchQA-v0", "--episodes", "2", "--max-turns", "2", "--max-tokens", "8")
    assert out.count("part 1: episode") == 2 and "part 2: one GRPO step on the recorded episodes" in out
