"""End to end: a short GRPO run on CodeExec-v0 during which the sandbox's fork server is killed
three times, mid-grading (as the OOM killer would). The run finishes, and every update trains on
correctly graded groups only: the groups with an infra-error episode are left out and counted."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

import pytest
from fakes import OracleScript
from processes import children_of

from agentgym.models import Generation, SamplingParams, load_tokenizer
from agentgym.parsing import format_tool_call
from agentgym.sandbox import SandboxUnavailable, get_backend
from agentgym.sandbox.grading import Grader
from agentgym.trainers import trainer as trainer_module
from agentgym.trainers.config import load_config
from agentgym.trainers.diagnostics import read_metrics

ENV = "agentgym/CodeExec-v0"
WRONG = format_tool_call("submit", {"code": "def nothing():\n    pass\n"})


class OracleOrWrong:
    """Of two identical prompts in one round, the first gets the oracle's turn and the second a
    wrong submission: every group has a reward to learn from, known in advance."""

    name = "oracle-or-wrong"

    def __init__(self, script: OracleScript) -> None:
        self.script, self.tokenizer = script, script.tokenizer

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        seen: set[tuple[int, ...]] = set()
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            if tuple(prompt) in seen:
                ids = [*self.tokenizer(WRONG, add_special_tokens=False)["input_ids"], self.script.eot]
            else:
                ids = self.script.reply(prompt, p.max_new_tokens)
            seen.add(tuple(prompt))
            out.append(Generation(tuple(ids), (0.0,) * len(ids), self.tokenizer.decode(ids), "stop"))
        return out


def test_grpo_trains_on_correctly_graded_groups_only_while_the_fork_server_is_killed(tiny_model_dir, tmp_path, monkeypatch) -> None:
    try:
        backend = get_backend("local")
    except SandboxUnavailable as exc:
        pytest.skip(f"local sandbox backend unavailable here: {exc}")
    config = load_config(
        overrides={
            "env_id": ENV,
            "model": str(tiny_model_dir),
            "device": "cpu",
            "output_dir": str(tmp_path / "run"),
            "rollout.num_tasks": 3,
            "rollout.group_size": 2,
            "rollout.max_new_tokens": 1024,
            "rollout.env_kwargs": {"backend": "local"},
            # One environment steps at a time, so a kill takes the grading it interrupts and the
            # episodes of the same step that were in flight on that server, not the whole step.
            "rollout.env_workers": 1,
            "grpo.steps": 3,
            "optim.lr": 1e-4,
            "eval.enabled": False,
            "logging.progress": False,
            "logging.tensorboard": False,
            "logging.plots": False,
        }
    )
    train_pool = trainer_module._env_facts(config, "train")[0]
    script = OracleScript(ENV, train_pool, load_tokenizer(str(tiny_model_dir)), split="train")
    monkeypatch.setattr(trainer_module, "_backend", lambda policy, tokenizer, config: OracleOrWrong(script))
    # Three kills, each in the middle of a grading (of steps 1, 2 and 3: six gradings a step).
    gradings, kills = [0], []
    real_grade = Grader._grade

    def grade(self, *args, **kwargs):
        gradings[0] += 1
        if gradings[0] in (2, 8, 15):
            kills.append(gradings[0])
            (server,) = children_of(backend._proc.pid)  # the fork server, under its launcher
            os.kill(server, signal.SIGKILL)
        return real_grade(self, *args, **kwargs)

    monkeypatch.setattr(Grader, "_grade", grade)
    batches = []
    real_update = trainer_module.grpo_update

    def update(policy, reference, optimizer, scheduler, episodes, *args, **kwargs):
        batches.append(list(episodes))
        return real_update(policy, reference, optimizer, scheduler, episodes, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "grpo_update", update)
    restarts = backend.restarts
    trainer_module.train(config)

    assert len(kills) == 3 and backend.restarts == restarts + 3
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "grpo"]
    assert len(rows) == len(batches) == 3
    infra_total = 0
    for row, episodes in zip(rows, batches, strict=True):
        broken_groups = {e.group for e in episodes if e.infra_error}
        infra_total += sum(e.infra_error for e in episodes)
        assert row["groups/infra_dropped"] == len(broken_groups)
        assert row["episode/infra_errors"] == sum(e.infra_error for e in episodes)
        # What was trained on: the intact groups, each graded as it deserved (oracle 1, wrong 0).
        intact = [e for e in episodes if e.group not in broken_groups]
        assert row["batch/trajectories"] == len(intact)
        for group in {e.group for e in intact}:
            assert sorted(e.reward for e in intact if e.group == group) == [0.0, 1.0]
        assert all((e.reward == 1.0) == e.record["success"] for e in intact)
    assert infra_total >= 3, [[(e.group, e.stop_reason) for e in b] for b in batches]  # each kill took at least the grading it interrupted
    assert sum(row["batch/trajectories"] for row in rows) > 0, "nothing was trained on: the test would be vacuous"
