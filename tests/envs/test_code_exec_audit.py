"""The task-data audit: no bundled code task rewards a constant function or a repeated example
answer with more than half its hidden tests, and the audit catches tasks that do."""

import json

import pytest

from agentgym.cli import main
from agentgym.envs.code_exec.audit import MAX_BASELINE_SCORE, audit_task, audit_tasks, bundled_tasks
from agentgym.envs.code_exec.loaders import load_tasks
from agentgym.sandbox import SandboxUnavailable, get_backend


def test_every_bundled_task_rejects_the_trivial_baselines():
    audits = audit_tasks(bundled_tasks())
    assert len(audits) == 310
    assert [a.task_id for a in audits if not a.passed] == []
    assert max(a.constant for a in audits) <= MAX_BASELINE_SCORE and max(a.majority_visible for a in audits) <= MAX_BASELINE_SCORE


def test_the_audit_catches_a_gameable_task():
    task = dict(bundled_tasks()[0])
    task["tests"] = [{"args": t["args"], "expected": True} for t in task["tests"][:7]] + task["tests"][7:]
    task["examples"] = [{"args": e["args"], "expected": True} for e in task["examples"]]
    audit = audit_task(task)
    assert audit.constant >= 0.7 and audit.majority_visible >= 0.7 and not audit.passed


def test_mbpp_tasks_are_audited_by_grading_constant_submissions(tmp_path):
    try:
        get_backend("auto")
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox backend here: {exc}")
    path = tmp_path / "mbpp.jsonl"
    record = {
        "task_id": 1,
        "text": "Is x positive?",
        "code": "def f(x):\n    return x > 0\n",
        "test_list": ["assert f(1) == True", "assert f(2) == True", "assert f(-1) == False"],
    }
    path.write_text(json.dumps(record) + "\n")
    (audit,) = audit_tasks(load_tasks(path))
    assert audit.constant == pytest.approx(2 / 3) and audit.majority_visible is None and not audit.passed
    assert main(["audit-tasks", "--tasks", str(path)]) == 1
    assert main(["audit-tasks"]) == 0
