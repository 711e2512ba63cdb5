"""Evaluation metrics and the ``agentgym eval`` / ``agentgym inspect`` commands.

The end-to-end run uses the real default model with a tiny budget; the other CLI runs use the fake
OpenAI-compatible server serving oracle turns (helpers shared with ``test_runner``).
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fakes import OracleScript

import agentgym  # noqa: F401 - registers the environments
from agentgym.cli import main
from agentgym.rollouts.evaluation import eval_metrics, wilson_interval
from agentgym.rollouts.runner import Episode
from agentgym.rollouts.trajectory import Segment, Trajectory

# ------------------------------------------------------------------------------------------ metrics


@pytest.mark.parametrize("successes, n, expected", [(0, 10, (0.0, 0.27753)), (5, 10, (0.23659, 0.76341)), (10, 10, (0.72247, 1.0)), (1, 1, (0.20654, 1.0))])
def test_wilson_interval_known_values(successes, n, expected) -> None:
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-5)


def test_wilson_interval_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for n in (1, 3, 17, 200):
        for successes in sorted({0, 1, n // 2, n - 1, n}):
            reference = stats.binomtest(successes, n).proportion_ci(confidence_level=0.9, method="wilson")
            assert wilson_interval(successes, n, 0.9) == pytest.approx((reference.low, reference.high), abs=1e-9)


@pytest.mark.parametrize("args", [(1, 0), (-1, 5), (6, 5), (1, 5, 1.0)])
def test_wilson_interval_rejects_bad_input(args) -> None:
    with pytest.raises(ValueError):
        wilson_interval(*args)


def fake_episode(
    *,
    success: bool,
    difficulty: str | None,
    counts: dict[str, int],
    turns: int,
    sampled: int,
    stop: str = "done",
    components: dict[str, float] | None = None,
    task_id: str = "t0",
) -> Episode:
    segments = [Segment("prompt", 0, (1, 2, 3), None, 0), Segment("sampled", 3, tuple(range(sampled)), (-0.5,) * sampled, 0)]
    trajectory = Trajectory.from_dict({"segments": [asdict(s) for s in segments], "messages": [], "prefix_stable": True})
    reward = 1.0 if success else 0.25
    record: dict[str, Any] = {
        "task_id": task_id,
        "success": success,
        "reward": reward,
        "reward_components": components or {},
        "turns": turns,
        "steps": [{"reward": 0.0, "info": {}}] * (turns - 1) + [{"reward": reward, "info": counts}],
    }
    if difficulty is not None:
        record["difficulty"] = difficulty
    return Episode(record=record, trajectory=trajectory, group=0, reward=reward, stop_reason=stop, turns=[])  # type: ignore[arg-type]


def test_eval_metrics() -> None:
    episodes = [
        fake_episode(
            success=True, difficulty="hard", counts={"tool_calls": 3, "tool_errors": 1}, turns=4, sampled=5, components={"correct": 1.0, "format": 1.0}
        ),
        fake_episode(
            success=False, difficulty="easy", counts={"tool_calls": 1, "format_errors": 2}, turns=2, sampled=7, stop="max_turns", components={"correct": 0.0}
        ),
        fake_episode(success=False, difficulty="easy", counts={}, turns=2, sampled=3, stop="token_budget"),
        fake_episode(success=True, difficulty="expert", counts={"cache_hits": 3, "cache_misses": 1}, turns=2, sampled=1),
    ]
    metrics = eval_metrics(episodes)
    assert metrics["episodes"] == 4 and metrics["success_rate"] == 0.5
    assert metrics["success_ci95"] == pytest.approx(list(wilson_interval(2, 4)))
    assert metrics["mean_reward"] == pytest.approx((1 + 0.25 + 0.25 + 1) / 4)
    assert metrics["reward_components"] == {"correct": 0.5, "format": 1.0}  # each over the episodes reporting it
    assert metrics["mean_turns"] == 2.5
    assert metrics["mean_tokens"] == pytest.approx(3 + 4) and metrics["mean_sampled_tokens"] == 4
    assert metrics["tool_calls_per_turn"] == pytest.approx(4 / 10)
    assert metrics["tool_error_rate"] == pytest.approx(1 / 4)  # of the executed calls
    assert metrics["format_errors_per_turn"] == pytest.approx(2 / 10)
    assert metrics["cache_hit_rate"] == pytest.approx(3 / 4)
    assert metrics["stop_reasons"] == {"done": 2, "max_turns": 1, "token_budget": 1}
    assert list(metrics["per_difficulty"]) == ["easy", "hard", "expert"]
    easy = metrics["per_difficulty"]["easy"]
    assert easy["episodes"] == 2 and easy["success_rate"] == 0.0 and easy["success_ci95"] == pytest.approx(list(wilson_interval(0, 2)))
    with pytest.raises(ValueError):
        eval_metrics([])


def test_several_trials_per_task_give_pass_hat_k() -> None:
    def trial(task_id: str, success: bool) -> Episode:
        return fake_episode(success=success, difficulty=None, counts={}, turns=1, sampled=1, task_id=task_id)

    episodes = [trial("a", True), trial("a", True), trial("a", False), trial("b", True), trial("b", False), trial("b", False)]
    metrics = eval_metrics(episodes)
    assert metrics["pass_hat_k"] == pytest.approx({"1": 0.5, "2": (1 / 3 + 0) / 2, "3": 0.0})  # C(c,k)/C(n,k), mean over tasks
    assert metrics["per_task"] == {"a": "2/3", "b": "1/3"}
    assert "pass_hat_k" not in eval_metrics(episodes[:1])  # one trial: nothing to report


def test_policy_violations_are_averaged_over_the_episodes_that_report_them() -> None:
    def episode(counts: dict[str, int]) -> Episode:
        return fake_episode(success=True, difficulty=None, counts=counts, turns=1, sampled=1)

    metrics = eval_metrics([episode({"policy_violations": 3}), episode({"policy_violations": 0}), episode({})])
    assert metrics["policy_violations_per_episode"] == 1.5
    assert "policy_violations_per_episode" not in eval_metrics([episode({}), episode({"tool_calls": 1})])


def test_no_tool_calls_means_no_tool_error_rate() -> None:
    metrics = eval_metrics([fake_episode(success=False, difficulty=None, counts={}, turns=1, sampled=2)])
    assert metrics["tool_error_rate"] is None and metrics["per_difficulty"] == {}


# ---------------------------------------------------------------------------------------- the CLI


@pytest.fixture
def one_thread() -> Any:
    """The test machine's cores are shared: torch's worker threads slow down tenfold when oversubscribed."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_eval_and_inspect_with_the_default_model(tmp_path, capsys, default_tokenizer, one_thread) -> None:
    out = tmp_path / "eval.jsonl"
    args = [
        "eval",
        "agentgym/SearchQA-v0",
        "--episodes",
        "1",
        "--group-size",
        "2",
        "--max-turns",
        "1",
        "--max-new-tokens",
        "4",
        "--seed",
        "3",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--json",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["env"] == "agentgym/SearchQA-v0" and summary["split"] == "test" and summary["episodes"] == 2
    assert summary["policy"] == "hf:smollm2-135m-instruct" and summary["group_size"] == 2 and summary["out"] == str(out)
    assert summary["max_total_tokens"] == 8192  # the model's context window unless told otherwise
    assert 0 <= summary["success_ci95"][0] <= summary["success_rate"] <= summary["success_ci95"][1] <= 1
    assert summary["stop_reasons"] == {"max_turns": 2} and summary["mean_turns"] == 1.0
    assert summary["mean_sampled_tokens"] <= 4 and summary["timing"]["sampled_tokens"] == 2 * summary["mean_sampled_tokens"]
    assert list(summary["per_difficulty"]) and "reward_components" in summary

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(line["group"], line["member"]) for line in lines] == [(0, 0), (0, 1)]
    for line in lines:
        assert line["tokenizer"] == "smollm2-135m-instruct" and line["split"] == "test"
        trajectory = Trajectory.from_dict(line["trajectory"])
        assert line["token_ids"] == list(trajectory.token_ids) and line["loss_mask"] == list(trajectory.loss_mask)
        assert 1 <= sum(line["loss_mask"]) <= 4

    assert main(["inspect", str(out), "--index", "1"]) == 0
    shown = capsys.readouterr().out
    assert "agentgym/SearchQA-v0" in shown and "trained" in shown and "<|im_start|>system" in shown
    page = tmp_path / "t.html"
    assert main(["inspect", str(out), "--html", str(page)]) == 0
    assert page.read_text().count('class="tok k-sampled" title="ids') == sum(lines[0]["loss_mask"])


def test_eval_through_a_server(fake_server, default_tokenizer, capsys) -> None:
    env = gym.make("agentgym/SQL-v0", split="test")
    task_ids = env.unwrapped.task_ids[:2]
    env.close()
    fake_server.responder = OracleScript("agentgym/SQL-v0", task_ids, default_tokenizer).respond
    common = [
        "eval",
        "agentgym/SQL-v0",
        "--backend",
        "openai",
        "--base-url",
        fake_server.base_url,
        "--episodes",
        "2",
        "--env-kwargs",
        json.dumps({"task_ids": task_ids}),
    ]
    assert main([*common, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["success_rate"] == 1.0 and summary["mean_reward"] == 1.0 and summary["stop_reasons"] == {"done": 2}
    assert summary["success_ci95"] == pytest.approx(list(wilson_interval(2, 2)))
    assert summary["tool_calls_per_turn"] > 0 and summary["format_errors_per_turn"] == 0.0
    assert summary["policy"] == f"openai:fake-model@{fake_server.base_url}" and summary["out"] is None
    assert main(common) == 0
    table = capsys.readouterr().out
    assert "success rate" in table and "per difficulty" in table and "tokens/s" in table


def test_tau_bench_style_eval_with_trials(fake_server, default_tokenizer, capsys) -> None:
    task_ids = ["retail-test-0", "retail-test-1"]
    fake_server.responder = OracleScript("agentgym/TauRetail-v0", task_ids, default_tokenizer).respond
    args = [
        "eval",
        "agentgym/TauRetail-v0",
        "--backend",
        "openai",
        "--base-url",
        fake_server.base_url,
        "--split",
        "test",
        "--task-ids",
        *task_ids,
        "--num-trials",
        "2",
        "--temperature",
        "0",
        "--max-new-tokens",
        "512",
        "--json",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 4 and summary["group_size"] == 2
    assert summary["pass_hat_k"] == {"1": 1.0, "2": 1.0} and summary["per_task"] == {t: "2/2" for t in task_ids}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _one_line_error(capsys, args: list[str], fragment: str) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgym: error:") and fragment in lines[0], err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["eval", "agentgym/Nope-v0"], "unknown environment"),
        (["eval", "agentgym/Refund-v0", "--model", "/no/such/model"], "model not found: /no/such/model"),
        (["eval", "agentgym/Refund-v0", "--model", "missing.gguf"], "model not found"),
        (["eval", "agentgym/Refund-v0", "--backend", "openai"], "needs --base-url"),
        (["eval", "agentgym/Refund-v0", "--base-url", "http://127.0.0.1:1/v1"], "only applies to --backend openai"),
        (["eval", "agentgym/Refund-v0", "--env-kwargs", '{"max_turns": 2}'], "use --max-turns"),
        (["eval", "agentgym/Refund-v0", "--top-p", "1.5"], "top_p"),
        (["eval", "agentgym/Refund-v0", "--out", "/no/such/dir/e.jsonl"], "directory does not exist"),
    ],
)
def test_bad_eval_input_is_one_line(capsys, args, fragment) -> None:
    _one_line_error(capsys, args, fragment)


def test_unreachable_server_is_one_line(capsys) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    _one_line_error(capsys, ["eval", "agentgym/SQL-v0", "--backend", "openai", "--base-url", url], "cannot reach")


def test_bad_options_are_usage_errors(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "agentgym/Refund-v0", "--temperature", "-1"])
    assert exit_info.value.code == 2 and "must be at least 0" in capsys.readouterr().err


def test_bad_inspect_input_is_one_line(tmp_path: Path, capsys) -> None:
    _one_line_error(capsys, ["inspect", str(tmp_path / "none.jsonl")], "No such file")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"env_id": "agentgym/Refund-v0", "messages": []}) + "\n")
    _one_line_error(capsys, ["inspect", str(records)], "has no trajectory")
    _one_line_error(capsys, ["inspect", str(records), "--index", "3"], "out of range")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"trajectory": {"segments": [{"kind": "prompt"}]}}) + "\n")
    _one_line_error(capsys, ["inspect", str(broken)], "malformed trajectory")
