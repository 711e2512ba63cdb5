"""SQL-v0, SearchQA-v0 and ToolMath-v0: task data, oracles on every split, byte-identical reruns,
the tool-result cache, and attempts to game the answer check."""

import json
from collections import Counter
from importlib import resources

import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.envs.knowledge.base import FAULT_MESSAGE
from agentgym.envs.knowledge.cache import ToolCache
from agentgym.envs.knowledge.searchqa_env import SearchQAEnv
from agentgym.envs.knowledge.sql_env import SQLEnv
from agentgym.envs.knowledge.toolmath_env import ToolMathEnv
from agentgym.parsing import format_tool_call
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import run_episode, summarize
from agentgym.tasks.build.knowledge.searchqa import DIFFICULTY_HOPS

ENVS = {"sql": SQLEnv, "searchqa": SearchQAEnv, "toolmath": ToolMathEnv}
SPLITS = ("train", "val", "test")


def _shipped(family):
    folder = resources.files("agentgym.tasks") / "knowledge" / family
    return {split: [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()] for split in SPLITS}


def _episodes(env, policy_name, task_ids, seed=0):
    factory = type(env).policies()[policy_name]
    return [run_episode(env, factory(seed + i), seed=seed + i, task_id=t, policy_name=policy_name) for i, t in enumerate(task_ids)]


@pytest.mark.parametrize("family", sorted(ENVS))
def test_task_sets_have_splits_and_difficulty_labels(family):
    tasks = _shipped(family)
    assert {split: len(t) for split, t in tasks.items()} == {"train": 420, "val": 90, "test": 90}
    every = [t for split in tasks.values() for t in split]
    assert Counter(t["difficulty"] for t in every) == {"easy": 200, "medium": 200, "hard": 200}
    assert len({t["task_id"] for t in every}) == len(every) == len({t["question"] for t in every})
    assert all(t["split"] == split for split, ts in tasks.items() for t in ts)
    if family == "searchqa":
        assert all(DIFFICULTY_HOPS[t["difficulty"]][0] <= t["hops"] <= DIFFICULTY_HOPS[t["difficulty"]][1] for t in every)
    if family == "toolmath":
        assert all("Round to" in t["question"] or "exact whole number" in t["question"] for t in every)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("family", sorted(ENVS))
def test_oracle_solves_every_task(family, split):
    env = ENVS[family](split=split)
    for record in _episodes(env, "oracle", env.task_ids):
        assert record["success"] and record["reward"] == 1.0, (record["task_id"], record["reward_reason"])
    env.close()


@pytest.mark.parametrize("family", sorted(ENVS))
def test_reruns_are_byte_identical(family):
    runs = []
    for _ in range(2):
        env = ENVS[family](split="test")
        task_ids = env.task_ids[:15]
        runs.append([to_json_line(r) for policy in ("oracle", "random") for r in _episodes(env, policy, task_ids, seed=3)])
        env.close()
    assert runs[0] == runs[1]


@pytest.mark.parametrize("family", sorted(ENVS))
def test_gymnasium_env_checker(family):
    env = ENVS[family]()
    check_env(env, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("family", sorted(ENVS))
def test_baselines_and_canaries_score_zero(family):
    env = ENVS[family](split="val", max_turns=6)
    canaries = [name for name in ENVS[family].policies() if name != "oracle"]
    assert {"do_nothing", "random", "format_only", "tool_spam", "answer_spam"} <= set(canaries)
    for policy in canaries:
        summary = summarize(_episodes(env, policy, env.task_ids[:20]))
        assert summary["mean_reward"] == 0.0 and summary["success_rate"] == 0.0, policy
    env.close()


def test_a_group_of_eight_shares_tool_results():
    """The G rollouts of a GRPO group, each in its own env sharing one cache: only the first misses."""
    cache = ToolCache()
    envs = [SearchQAEnv(split="val", tool_cache=cache) for _ in range(8)]
    task_id = envs[0].task_ids[0]
    records = [_episodes(env, "oracle", [task_id])[0] for env in envs]
    first, rest = records[0]["steps"][-1]["info"], [r["steps"][-1]["info"] for r in records[1:]]
    assert first["cache_hits"] == 0 and first["cache_misses"] > 0
    assert all(i["cache_misses"] == 0 and i["cache_hits"] == first["cache_misses"] for i in rest)
    assert cache.stats.hit_rate == pytest.approx(7 / 8)
    assert summarize(records)["cache_hit_rate"] == pytest.approx(7 / 8)
    for env in envs:
        env.close()


def test_cache_scopes():
    instance = SQLEnv(split="val")
    off = SQLEnv(split="val", tool_cache="off")
    task_id = instance.task_ids[0]
    twice = _episodes(instance, "oracle", [task_id, task_id])
    assert [r["steps"][-1]["info"]["cache_hits"] for r in twice] == [0, 1]
    uncached = _episodes(off, "oracle", [task_id])[0]["steps"][-1]["info"]
    assert uncached["cache_hits"] == uncached["cache_misses"] == 0
    with pytest.raises(ValueError, match="tool_cache must be one of"):
        SQLEnv(tool_cache="sometimes")
    with pytest.raises(ValueError, match="max_rows"):
        SQLEnv(max_rows=0)
    instance.close()
    off.close()


def test_cached_errors_replay_exactly_and_still_count_as_tool_errors():
    env = SQLEnv(split="val")
    env.reset(seed=0)
    bad = format_tool_call("sql", {"query": "SELECT nope FROM cities"})
    first = env.step(bad)
    second = env.step(bad)
    assert first[0][0]["content"] == second[0][0]["content"] and "no such column" in first[0][0]["content"]
    assert second[4]["tool_errors"] == 2 and second[4]["cache_hits"] == 1
    env.close()


def _play(env, task_id, actions):
    env.reset(seed=0, options={"task_id": task_id})
    result = None
    for action in actions:
        result = env.step(action)
    return result


def _answer(text):
    return format_tool_call("answer", {"text": text})


@pytest.mark.parametrize(
    ("family", "pick", "attempt"),
    [
        ("searchqa", lambda t: t["answer"]["type"] == "number", lambda v: f"{v} or {v + 1}"),  # hedging between candidates
        ("searchqa", lambda t: t["answer"]["type"] == "number", lambda v: f"{v + 1}"),
        ("searchqa", lambda t: t["answer"]["type"] == "text", lambda v: f"{v} (or maybe not)"),
        ("sql", lambda t: t["answer"]["type"] == "list", lambda v: ", ".join(v + ["The Amber Lantern"])),  # a superset
        ("sql", lambda t: t["answer"]["type"] == "list" and len(t["answer"]["value"]) > 1, lambda v: ", ".join(v[1:])),
        ("toolmath", lambda t: t["answer"]["tolerance"] > 0, lambda v: f"{v + 3 * 10**-2}" if v < 1000 else f"{v + 5}"),
        ("toolmath", lambda t: True, lambda v: "I cannot compute this"),
    ],
)
def test_gaming_attempts_fail(family, pick, attempt):
    env = ENVS[family](split="test")
    task = next(t for t in env.tasks if pick(t))
    _, reward, terminated, _, info = _play(env, task["task_id"], [_answer(attempt(task["answer"]["value"]))])
    assert terminated and reward == 0.0 and info["success"] is False
    env.close()


def test_right_answer_in_other_forms_passes():
    env = SearchQAEnv(split="test")
    number = next(t for t in env.tasks if t["answer"]["type"] == "number" and t["answer"]["value"] >= 1000)
    text = next(t for t in env.tasks if t["answer"]["type"] == "text")
    for task, given in ((number, f"{number['answer']['value']:,}"), (text, f"  THE {text['answer']['value'].upper()}. ")):
        _, reward, _, _, info = _play(env, task["task_id"], [_answer(given)])
        assert info["success"] and reward == 1.0, given
    env.close()


def test_format_points_cannot_rescue_a_wrong_answer():
    env = SQLEnv(split="test")
    task = env.tasks[0]
    actions = [format_tool_call("sql", {"query": "SELECT 1"})] * 3 + [_answer("certainly not the answer")]
    _, reward, _, _, info = _play(env, task["task_id"], actions)
    assert reward == 0.0 and info["reward_components"]["format"] == 1.0 and info["reward_components"]["execution"] == 1.0
    env.close()


def test_errors_and_malformed_turns_lower_a_correct_answer():
    env = SQLEnv(split="test")
    task = next(t for t in env.tasks if t["answer"]["type"] == "text")
    actions = ["<tool_call>{oops</tool_call>", format_tool_call("sql", {"query": "SELEC 1"}), _answer(task["answer"]["value"])]
    _, reward, _, _, info = _play(env, task["task_id"], actions)
    assert info["success"] and reward == pytest.approx(0.1 * 2 / 3 + 0.4 * 1 / 2 + 0.5)
    env.close()


def test_missing_answer_truncates_with_zero():
    env = ToolMathEnv(split="val", max_turns=2)
    _, reward, terminated, truncated, info = _play(env, env.task_ids[0], [format_tool_call("calculator", {"expression": "1+1"})] * 2)
    assert truncated and not terminated and reward == 0.0 and "no answer" in info["reward_reason"]
    env.close()


def test_observations_show_the_tools_and_schema():
    env = SQLEnv(split="val")
    observation, _ = env.reset(seed=1)
    assert "TABLE companies" in observation[0]["content"] and "FOREIGN KEYS" in observation[0]["content"]
    assert observation[1]["content"] == env.task["question"]
    assert [t["function"]["name"] for t in env.tools] == ["answer", "sql"]
    assert [t["function"]["name"] for t in ToolMathEnv(split="val").tools] == ["answer", "search", "open", "calculator"]
    env.close()


def _sql_call(query):
    return format_tool_call("sql", {"query": query})


def test_transient_faults_are_seeded_and_recoverable():
    def outcomes(env, seed, task_id, calls=6):
        env.reset(seed=seed, options={"task_id": task_id})
        query = env.task["solution"]["sql"]
        seen = []
        for _ in range(calls):
            observation, _, _, _, info = env.step(_sql_call(query))
            seen.append(FAULT_MESSAGE in observation[0]["content"])
        return seen, info

    env = SQLEnv(split="test", fault_rate=0.5, tool_cache="off")
    task = env.task_ids[0]
    first, info = outcomes(env, 7, task)
    assert info["faults"] == sum(first) and info["tool_errors"] == sum(first)
    assert 0 < sum(first) < len(first)  # some calls fail, the same call again can succeed
    assert outcomes(SQLEnv(split="test", fault_rate=0.5, tool_cache="off"), 7, task)[0] == first  # same seed, same faults
    patterns = {tuple(outcomes(env, seed, task)[0]) for seed in range(8)}
    assert len(patterns) > 1  # other seeds, other faults
    clean, info = outcomes(SQLEnv(split="test", tool_cache="off"), 7, task)
    assert not any(clean) and info["faults"] == 0
    with pytest.raises(ValueError, match="fault_rate"):
        SQLEnv(fault_rate=1.0)


def test_a_fault_cap_lets_the_call_after_a_streak_run_and_changes_nothing_else():
    def faults(env, seed, task_id, calls=8):
        env.reset(seed=seed, options={"task_id": task_id})
        query = env.task["solution"]["sql"]
        return [FAULT_MESSAGE in env.step(_sql_call(query))[0][0]["content"] for _ in range(calls)]

    task = SQLEnv(split="test").task_ids[0]
    # Rate 1 with a cap of 1: the first call fails, the retry runs, and so on.
    assert faults(SQLEnv(split="test", fault_rate=1.0, max_consecutive_faults=1, tool_cache="off"), 3, task) == [True, False] * 4
    for seed in range(12):
        free = faults(SQLEnv(split="test", fault_rate=0.6, tool_cache="off"), seed, task)
        capped = faults(SQLEnv(split="test", fault_rate=0.6, max_consecutive_faults=2, tool_cache="off"), seed, task)
        streak = 0
        for uncapped_fault, capped_fault in zip(free, capped, strict=True):
            # The same draws: a call fails under the cap exactly when it fails without one and the streak allows it.
            assert capped_fault == (uncapped_fault and streak < 2)
            streak = streak + 1 if capped_fault else 0
    for bad in (
        {"fault_rate": 1.0, "max_consecutive_faults": 0},
        {"fault_rate": 0.5, "max_consecutive_faults": 1.5},
        {"fault_rate": 1.5, "max_consecutive_faults": 1},
    ):
        with pytest.raises(ValueError, match="fault_rate|max_consecutive_faults"):
            SQLEnv(**bad)


def test_an_episode_recovers_from_a_fault_by_calling_again():
    env = SQLEnv(split="test", fault_rate=0.5, tool_cache="off")
    for seed in range(20):  # find a seed whose first call fails
        env.reset(seed=seed, options={"task_id": env.task_ids[0]})
        query = env.task["solution"]["sql"]
        observation, *_ = env.step(_sql_call(query))
        if observation[0]["content"].startswith("Error"):
            break
    else:
        pytest.fail("no fault in 20 seeds at fault_rate 0.5")
    while observation[0]["content"].startswith("Error"):
        observation, *_ = env.step(_sql_call(query))
    assert json.loads(observation[0]["content"])["rows"]
    _, _, terminated, _, _ = env.step(format_tool_call("answer", {"text": str(env.task["answer"]["value"])}))
    assert terminated and env.episode_record()["success"]


def test_a_huge_query_result_is_capped_before_it_is_cached():
    from agentgym.parsing import format_tool_call
    from agentgym.tools import MAX_RESULT_BYTES

    cache = ToolCache()
    env = SQLEnv(split="val", tool_cache=cache)
    env.reset(seed=0)
    columns = ", ".join(f"hex(hex(hex(hex(hex(hex(hex(hex(n)))))))) c{i}" for i in range(60))  # 50 rows x 60 cells of 300 chars
    query = f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n<50) SELECT {columns} FROM r"
    observation, *_ = env.step(format_tool_call("sql", {"query": query}))
    content = observation[0]["content"]
    assert len(content.encode()) <= MAX_RESULT_BYTES and content.endswith(f"fits in {MAX_RESULT_BYTES}]")
    assert "result truncated: 8" in content  # the marker gives the full size (about 900 kB)
    assert cache.size <= MAX_RESULT_BYTES + len(query) + 100
    env.close()


def test_the_cache_is_bounded_in_bytes():
    cache = ToolCache(max_bytes=10_000)
    for i in range(50):
        cache.call("ns", "tool", {"i": i}, lambda: "x" * 1_000)
    assert cache.size <= 10_000 and len(cache) == 9  # the most recent ones
    assert cache.call("ns", "tool", {"i": 49}, lambda: "recomputed")[2] is True
    assert cache.call("ns", "tool", {"i": 0}, lambda: "recomputed") == (True, "recomputed", False)
    assert cache.call("ns", "tool", {"big": 1}, lambda: "y" * 20_000) == (True, "y" * 20_000, False)  # returned, not kept
    assert cache.call("ns", "tool", {"big": 1}, lambda: "again")[1] == "again" and cache.size <= 10_000


def test_the_compact_schema_names_every_column_and_key_in_fewer_words():
    from agentgym.envs.knowledge.sql_env import schema_text
    from agentgym.envs.knowledge.world import FOREIGN_KEYS, TABLES

    compact = schema_text("compact")
    lines = dict(line.split("(", 1) for line in compact.splitlines())
    assert list(lines) == list(TABLES)
    for table, columns in TABLES.items():
        for column in columns:
            assert column.name in lines[table]
    for table, pairs in FOREIGN_KEYS.items():
        for column, other in pairs:
            assert f"{column} -> {other}.id" in lines[table]
    assert "architect" in lines["people"] and "'album'" in lines["works"]  # values a name does not tell
    assert len(compact.split()) < len(schema_text("full").split()) / 2
    with pytest.raises(ValueError, match="schema must be"):
        SQLEnv(schema="short")


def test_the_schema_style_changes_only_the_system_message():
    full, compact = SQLEnv(split="val"), SQLEnv(split="val", schema="compact")
    (full_obs, _), (compact_obs, _) = full.reset(seed=3), compact.reset(seed=3)
    assert "TABLE companies" not in compact_obs[0]["content"] and "companies(id, name" in compact_obs[0]["content"]
    assert full_obs[0]["content"] != compact_obs[0]["content"] and full_obs[1] == compact_obs[1]
    assert compact_obs[0]["content"].endswith(full_obs[0]["content"].split("\n\n")[-1])  # the same answer rules
    query = format_tool_call("sql", {"query": compact.task["solution"]["sql"]})
    assert full.step(query)[0] == compact.step(query)[0]
    full.close()
    compact.close()
