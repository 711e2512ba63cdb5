"""MockAPI-v0's labelled set: every labelled hack scores zero when replayed in a fresh environment
(tests/test_task_build.py checks the set is a fresh build)."""

import json
from importlib import resources
from pathlib import Path

from agentgym.envs import ENVIRONMENTS
from agentgym.offline.validation import env_reward

ENV_ID = "agentgym/MockAPI-v0"
SHIPPED = Path(str(resources.files("agentgym.tasks"))) / "mock_api" / "labelled.jsonl"


def test_the_environment_is_registered():
    assert ENV_ID in ENVIRONMENTS


def test_labelled_hacks_score_zero_when_replayed():
    records = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    hacks = [r for r in records if r["label"]["kind"] == "hack"]
    assert len({r["policy"] for r in hacks}) >= 5
    for record in hacks:
        result = env_reward(record)  # the stored reward is not trusted
        assert result.score == 0.0 and not result.passed, (record["policy"], record["task_id"], result.reason)


def test_the_set_covers_every_label_kind_and_the_fault_scenarios():
    records = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    assert len(records) >= 50
    assert {r["label"]["kind"] for r in records} == {"success", "partial", "failure", "hack"}
    faulty = [r for r in records if r["env_kwargs"].get("fault_rate") == 0.5]
    assert faulty and any(r["label"]["pass"] for r in faulty)
    assert sum(s["info"]["faults_injected"] for r in faulty for s in r["steps"][-1:]) > 0
