"""The public contract of CodeExec-v0 on the bundled HumanEval and MBPP files.

``gym.make("agentgym/CodeExec-v0", tasks=PATH)``, ``reset(seed=0, options={"task_id": ID})`` and a
``submit`` tool call end the episode with the grade: HumanEval 1.0 iff its ``check`` passes,
MBPP the fraction of its ``test_list`` asserts.
"""

import gzip
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym.envs.code_exec.env import bundled_set
from agentgym.envs.code_exec.loaders import load_tasks
from agentgym.parsing import format_tool_call
from agentgym.sandbox import SandboxUnavailable, get_backend

ENV_ID = "agentgym/CodeExec-v0"
HUMANEVAL, MBPP, MBPP_SANITIZED = (Path(str(bundled_set(name))) for name in ("humaneval", "mbpp", "mbpp-sanitized"))


@pytest.fixture(scope="module", autouse=True)
def sandbox_backend():
    try:
        get_backend("auto")
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox backend here: {exc}")
    if ENV_ID not in gym.registry:  # until envs/__init__.py lists the id
        gym.register(id=ENV_ID, entry_point="agentgym.envs.code_exec.env:CodeExecEnv")


def submit_rewards(path: Path, submissions: list[tuple[str, str]], workers: int = 4) -> list[float]:
    """The reward of each (task id, code) submission, one fresh episode each, through gym.make."""

    def episodes(chunk: list[tuple[str, str]]) -> list[float]:
        env = gym.make(ENV_ID, tasks=path)
        rewards = []
        for task_id, code in chunk:
            env.reset(seed=0, options={"task_id": task_id})
            _, reward, terminated, _, _ = env.step(format_tool_call("submit", {"code": code}))
            assert terminated
            rewards.append(reward)
        env.close()
        return rewards

    chunks = [submissions[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(episodes, chunks))
    rewards = [0.0] * len(submissions)
    for i, chunk_rewards in enumerate(results):
        rewards[i::workers] = chunk_rewards
    return rewards


def test_all_humaneval_canonical_solutions_pass_and_empty_bodies_score_zero():
    path = HUMANEVAL
    records = [json.loads(line) for line in gzip.open(path, "rt")]
    assert len(records) == 164
    canonical = submit_rewards(path, [(r["task_id"], r["prompt"] + r["canonical_solution"]) for r in records])
    empty = submit_rewards(path, [(r["task_id"], r["prompt"]) for r in records])
    assert [r["task_id"] for r, s in zip(records, canonical) if s != 1.0] == []
    assert [r["task_id"] for r, s in zip(records, empty) if s != 0.0] == []


def test_humaneval_prompt_shows_the_code_to_complete():
    env = gym.make(ENV_ID, tasks=HUMANEVAL)
    observation, info = env.reset(seed=0, options={"task_id": "HumanEval/0"})
    assert info["task_id"] == "HumanEval/0" and "def has_close_elements(" in observation[1]["content"]
    env.close()


def test_mbpp_reference_solutions_pass_and_rewards_are_assert_fractions():
    path = MBPP
    records = {r["task_id"]: r for r in (json.loads(line) for line in gzip.open(path, "rt"))}
    assert len(records) == 974
    sample = sorted(random.Random(0).sample(sorted(records), 60) + [367, 927])  # 367 and 927 pass tree objects
    rewards = submit_rewards(path, [(f"Mbpp/{i}", records[i]["code"]) for i in sample])
    assert [i for i, r in zip(sample, rewards) if r != 1.0] == []
    task = records[2]  # similar_elements: 3 asserts
    one_right = "def similar_elements(a, b):\n    return (4, 5) if a == (3, 4, 5, 6) else ()\n"
    crash = "raise RuntimeError('no')\n"
    assert submit_rewards(path, [("Mbpp/2", one_right), ("Mbpp/2", crash), ("Mbpp/2", task["code"])], workers=1) == [pytest.approx(1 / 3), -1.0, 1.0]


def test_mbpp_shows_one_assert_and_grades_on_all():
    tasks = {t["task_id"]: t for t in load_tasks(MBPP)}
    task = tasks["Mbpp/2"]
    assert task["prompt"].count("assert ") == 1 and len(task["asserts"]) == 3 and task["names"] == ["similar_elements"]


def test_sanitized_mbpp_json_and_gzipped_or_plain_files_load(tmp_path):
    sanitized = load_tasks(MBPP_SANITIZED)
    assert len(sanitized) == 427 and all(t["format"] == "mbpp" for t in sanitized)
    rewards = submit_rewards(MBPP_SANITIZED, [(t["task_id"], t["solution"]) for t in sanitized[:12]], workers=2)
    assert rewards == [1.0] * 12
    records = [json.loads(line) for line in gzip.open(HUMANEVAL, "rt")][:3]
    plain, packed = tmp_path / "he.jsonl", tmp_path / "he.jsonl.gz"
    plain.write_text("".join(json.dumps(r) + "\n" for r in records))
    with gzip.open(packed, "wt") as handle:
        handle.write(plain.read_text())
    assert load_tasks(plain) == load_tasks(packed) == load_tasks(records)


@pytest.mark.parametrize(("name", "count", "first"), [("humaneval", 164, "HumanEval/0"), ("mbpp", 974, "Mbpp/1"), ("mbpp-sanitized", 427, "Mbpp/2")])
def test_bundled_sets_by_name(name, count, first):
    env = gym.make(ENV_ID, tasks=name)
    assert len(env.unwrapped.task_ids) == count and env.unwrapped.task_ids[0] == first
    env.reset(seed=0, options={"task_id": first})
    record = env.unwrapped.episode_record()
    assert record["env_kwargs"]["tasks"] == name  # replays by name, not by a path on this machine
    env.close()
