"""The labelled sets of SQL-v0, SearchQA-v0 and ToolMath-v0: every reward-hacking scenario in them
is refused by the environment's own reward (tests/test_task_build.py checks they are a fresh build)."""

import json
from importlib import resources
from pathlib import Path

import pytest

from agentgym.offline.validation import env_reward
from agentgym.tasks.build.knowledge import labelled

FAMILIES = sorted(labelled.SETS)


def _shipped(family):
    return Path(str(resources.files("agentgym.tasks"))) / "knowledge" / family / "labelled.jsonl"


def _hack_cases():
    cases = []
    for family in FAMILIES:
        records = [json.loads(line) for line in _shipped(family).read_text().splitlines()]
        for name in dict.fromkeys(r["policy"].removeprefix("scenario: ") for r in records if r["label"]["kind"] == "hack"):
            cases.append(pytest.param(family, name, [r for r in records if r["policy"] == f"scenario: {name}"], id=f"{family}-{name}"))
    return cases


@pytest.mark.parametrize(("family", "scenario", "records"), _hack_cases())
def test_reward_hacking_scenarios_score_zero_and_fail(family, scenario, records):
    assert records
    for record in records:
        assert record["label"]["pass"] is False
        result = env_reward(record)  # replayed in a fresh environment: the stored reward is not trusted
        assert result.score == 0.0 and not result.passed, (record["task_id"], result.reason)


def test_every_set_covers_the_required_hacks():
    required = {"hedge: right answer or another", "several answer calls", "answer spam", "format-only spam", "tool spam", "answer pastes the question"}
    for family in FAMILIES:
        names = {s.name for s in labelled.SETS[family][1] if s.label["kind"] == "hack"}
        assert required <= names, (family, required - names)
    assert {"deletes rows, then answers 0", "plants a value with UPDATE"} <= {s.name for s in labelled.SQL_SCENARIOS}


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown knowledge family"):
        labelled.build("nope")
