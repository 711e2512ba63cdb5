"""CodeExec-v0: the bundled task set, the oracle on every task, the tools, the reward and its attacks."""

import json
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

import gymnasium as gym
import pytest

from agentgym.envs.code_exec.loaders import grading_spec, load_tasks
from agentgym.parsing import format_tool_call
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.sandbox import Limits, SandboxUnavailable, get_backend
from agentgym.sandbox._harness import decode
from agentgym.sandbox.grading import Grader
from agentgym.sandbox.local import LocalBackend, leftovers

ENV_ID = "agentgym/CodeExec-v0"
SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module", autouse=True)
def sandbox_backend():
    try:
        backend = get_backend("auto")
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox backend here: {exc}")
    if ENV_ID not in gym.registry:  # until envs/__init__.py lists the id
        gym.register(id=ENV_ID, entry_point="agentgym.envs.code_exec.env:CodeExecEnv")
    return backend


@pytest.fixture(scope="module", autouse=True)
def no_stray_sandbox_files():
    """Everything these tests ran in sandboxes left no file in the host's temporary folders."""
    before = {entry for entry in leftovers() if entry.startswith("file ")}
    yield
    assert {entry for entry in leftovers() if entry.startswith("file ")} <= before


def bundled(split):
    text = (resources.files("agentgym.tasks") / "code_exec" / f"{split}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def call(name, **arguments):
    return format_tool_call(name, arguments)


# --------------------------------------------------------------------------- task set


def test_task_set_size_splits_and_shape():
    tasks = {split: bundled(split) for split in SPLITS}
    counts = {split: len(t) for split, t in tasks.items()}
    assert sum(counts.values()) >= 300 and min(counts.values()) >= 40
    everything = [t for split in tasks.values() for t in split]
    assert len({t["task_id"] for t in everything}) == len(everything)
    families = {split: {t["family"] for t in ts} for split, ts in tasks.items()}
    assert not (families["train"] & families["val"]) and not (families["train"] & families["test"]) and not (families["val"] & families["test"])
    for task in everything:
        assert len(task["examples"]) == 3 and len(task["tests"]) == 10 and task["solution"] and task["format"] == "function"
        shown = {json.dumps(e["args"]) for e in task["examples"]}
        assert not shown & {json.dumps(t["args"]) for t in task["tests"]}, task["task_id"]  # hidden tests are new inputs
        assert all(f"{task['entry_point']}(" in line for line in task["prompt"].split("Examples:\n")[1].splitlines())


@pytest.mark.parametrize("split", SPLITS)
def test_oracle_solution_passes_every_hidden_test(split):
    grader = Grader("auto", Limits(wall_time_s=20, cpu_time_s=20, max_output_bytes=1 << 20))
    tasks = bundled(split)
    with ThreadPoolExecutor(4) as pool:
        grades = list(pool.map(lambda t: grader.grade(t["solution"], grading_spec(t)), tasks))
    failed = [(t["task_id"], g.reason, g.details) for t, g in zip(tasks, grades) if g.score != 1.0]
    assert not failed


def test_the_examples_in_the_prompt_are_right():
    for task in bundled("val"):
        namespace = {}
        exec(task["solution"], namespace)  # our own reference code, not a submission
        for example in task["examples"]:
            assert namespace[task["entry_point"]](*decode(example["args"])) == decode(example["expected"])


# ------------------------------------------------------------------------ episodes


def test_oracle_episodes_on_the_val_split_score_one_and_rerun_identically():
    first, second = [], []
    for records in (first, second):
        env = gym.make(ENV_ID, split="val")
        for seed, task_id in enumerate(env.unwrapped.task_ids):
            records.append(to_json_line(run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)))
        env.close()
    assert first == second
    assert all(json.loads(line)["reward"] == 1.0 and json.loads(line)["success"] for line in first)


def test_random_and_silent_policies_get_nothing():
    env = gym.make(ENV_ID, split="test", max_turns=4)
    for name in ("random", "do_nothing"):
        for seed in range(3):
            record = run_episode(env, make_policy(env, name, seed), seed=seed)
            assert record["reward"] <= 0.0 and not record["success"]
    env.close()


def test_files_persist_within_an_episode_and_not_across(make_env):
    env = make_env(ENV_ID, split="val")
    env.reset(seed=0)
    env.step(call("run_python", code="open('notes.txt', 'w').write('hello')"))
    observation, *_ = env.step(call("run_python", code="print(open('notes.txt').read())"))
    assert observation[0]["content"] == "exit status 0\n--- stdout ---\nhello\n"
    env.reset(seed=1)
    observation, *_ = env.step(call("run_python", code="import os; print(os.listdir('.'))"))
    assert observation[0]["content"] == "exit status 0\n--- stdout ---\n[]\n"


def test_an_episode_after_one_that_ran_code_starts_with_its_first_run_prepared(make_env):
    # Short RL episodes: the reset opens the next workspace and sets its first run up during the
    # model's first turn; after an episode that only submitted, it opens none (grading has its own).
    env = make_env(ENV_ID, split="val")
    code_exec = env.unwrapped
    env.reset(seed=0)
    env.step(call("run_python", code="open('notes.txt', 'w').write('hello')"))
    env.reset(seed=1)
    assert code_exec._sandbox is not None
    if isinstance(code_exec.backend, LocalBackend):
        assert code_exec._sandbox._workspace in code_exec.backend._prepared
    env.step(call("submit", code="def f():\n    return 1\n"))
    env.reset(seed=2)
    assert code_exec._sandbox is None
    observation, *_ = env.step(call("run_python", code="import os; print(os.listdir('.'))"))
    assert observation[0]["content"] == "exit status 0\n--- stdout ---\n[]\n"


def test_run_python_prepares_the_next_run_except_in_the_episodes_last_turn(make_env):
    # A run set up in the last turn would only be thrown away by the reset (about 450 page faults).
    env = make_env(ENV_ID, split="val", max_turns=2)
    code_exec = env.unwrapped
    if not isinstance(code_exec.backend, LocalBackend):
        pytest.skip("prepared runs are the local backend's")
    env.reset(seed=0)
    env.step(call("run_python", code="print(1)"))
    assert code_exec._sandbox._workspace in code_exec.backend._prepared
    observation, _, _, truncated, _ = env.step(call("run_python", code="print(2)"))
    assert truncated and observation[0]["content"] == "exit status 0\n--- stdout ---\n2\n"
    assert code_exec._sandbox._workspace not in code_exec.backend._prepared


def test_run_python_reports_errors_truncation_and_timeouts(make_env):
    env = make_env(ENV_ID, split="val", limits=Limits(wall_time_s=1.5, max_output_bytes=100))
    env.reset(seed=0)
    crash, *_ = env.step(call("run_python", code="1/0"))
    assert crash[0]["content"].startswith("exit status 1\n--- stderr ---\nTraceback") and "ZeroDivisionError" in crash[0]["content"]
    flood, *_ = env.step(call("run_python", code="print('x' * 1000)"))
    assert flood[0]["content"].endswith("\n[stdout truncated: only the first 100 bytes are shown]")
    loop, *_ = env.step(call("run_python", code="while True: pass"))
    assert loop[0]["content"] == "killed: the wall-clock limit of 1.5 s was reached"
    _, _, terminated, truncated, info = env.step("I am thinking.")
    assert not terminated and info["sandbox_runs"] == 3


def test_submit_ends_the_episode_with_the_grade(make_env):
    env = make_env(ENV_ID, split="val")
    task = env.unwrapped.tasks[0]
    env.reset(seed=0, options={"task_id": task["task_id"]})
    wrong = f"def {task['entry_point']}(*args):\n    return None\n"
    observation, reward, terminated, truncated, info = env.step(call("submit", code=wrong) + call("submit", code=task["solution"]))
    assert terminated and reward == 0.0 and not info["success"]
    assert observation[0]["content"] == "Submitted. 0 of 10 hidden tests passed."
    assert observation[1]["content"] == "Error: not executed: the episode already ended"
    assert info["reward_components"] == {"tests": 0.0, "submitted": 1.0}


def test_crash_before_any_test_scores_minus_one_and_silence_zero(make_env):
    env = make_env(ENV_ID, split="val", max_turns=2)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(call("submit", code="import sys\nsys.exit(0)\n"))
    assert terminated and reward == -1.0 and "crashed before any test ran" in info["reward_reason"]
    env.reset(seed=0)
    env.step("hmm")
    _, reward, terminated, truncated, info = env.step("still thinking")
    assert truncated and not terminated and reward == 0.0 and info["reward_reason"].startswith("gate 'submitted' failed")


def test_files_planted_with_run_python_cannot_help_the_submission(make_env):
    env = make_env(ENV_ID, split="val")
    task = env.unwrapped.tasks[0]
    env.reset(seed=0, options={"task_id": task["task_id"]})
    plant = (
        "open('conftest.py', 'w').write('def pytest_runtest_makereport(item, call): pass')\n"
        "open('pytest.ini', 'w').write('[pytest]\\naddopts = --collect-only')\n"
        "open('pytest.py', 'w').write('print(\"10 passed\")')\n"
        "open('json.py', 'w').write('def dumps(*a, **k): return \\'{\"value\": 0}\\'')\n"
        f"open('planted.py', 'w').write({task['solution']!r})\n"
    )
    env.step(call("run_python", code=plant))
    leaning = f"from planted import {task['entry_point']}\n"  # the planted file is not in the grading folder
    _, reward, terminated, _, _ = env.step(call("submit", code=leaning))
    assert terminated and reward == -1.0


def test_prompt_only_policy_scores_at_most_zero():
    env = gym.make(ENV_ID, split="val")
    for seed, task_id in enumerate(env.unwrapped.task_ids[:10]):
        assert run_episode(env, make_policy(env, "prompt_only", seed), seed=seed, task_id=task_id)["reward"] <= 0.0
    env.close()


def test_bad_task_sources_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        gym.make(ENV_ID, tasks=tmp_path / "missing.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(ValueError, match="not valid JSON lines"):
        gym.make(ENV_ID, tasks=broken)
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"task_id": "x", "question": "?"}) + "\n")
    with pytest.raises(ValueError, match=r"unknown.jsonl, record 1: unrecognised task record"):
        gym.make(ENV_ID, tasks=unknown)
    assert load_tasks(bundled("val")[:2])[0]["task_id"] == bundled("val")[0]["task_id"]
    env = gym.make(ENV_ID, tasks=_write_mbpp(tmp_path / "mbpp.jsonl", "def f(x):\n    return x\n", ["assert f(1) == 1"]))
    with pytest.raises(ValueError, match=r"unknown task_id 'Mbpp/7': not among the tasks of .*mbpp.jsonl"):
        env.reset(options={"task_id": "Mbpp/7"})
    env.close()


def _write_mbpp(path, code, asserts, task_id=1):
    path.write_text(json.dumps({"task_id": task_id, "text": "Write f.", "code": code, "test_list": asserts}) + "\n")
    return path


@pytest.mark.parametrize(
    "reference",
    [
        "f = lambda x: x + 1\n",  # the function bound as a lambda
        "def _impl(x):\n    return x + 1\nf = _impl\n",  # ... or as an alias
        "import functools, operator\nf = functools.partial(operator.add, 1)\n",
    ],
)
def test_mbpp_asserts_always_call_the_submission(tmp_path, reference):
    tasks = _write_mbpp(tmp_path / "mbpp.jsonl", reference, ["assert f(1) == 2", "assert f(5) == 6"])
    env = gym.make(ENV_ID, tasks=tasks)
    env.reset(options={"task_id": "Mbpp/1"})
    *_, info = env.step(call("submit", code="def f(x):\n    return 0\n"))  # wrong: must not pass on the reference's answers
    assert info["reward_components"]["tests"] == 0.0
    env.reset(options={"task_id": "Mbpp/1"})
    *_, info = env.step(call("submit", code="def f(x):\n    return x + 1\n"))
    assert info["reward_components"]["tests"] == 1.0
    env.close()


def test_mbpp_asserts_that_test_nothing_of_the_submission_are_refused(tmp_path):
    tasks = _write_mbpp(tmp_path / "mbpp.jsonl", "def f(x):\n    return x\n", ["assert len([1]) == 1"])
    with pytest.raises(ValueError, match=r"mbpp.jsonl, record 1: MBPP task 1: its asserts use no function"):
        gym.make(ENV_ID, tasks=tasks)
