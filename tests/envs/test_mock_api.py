"""MockAPI-v0: task data, the oracle on every split with and without faults, replay determinism,
the error-ignoring baseline, fault settings and reports, tools, and attempts to game the reward."""

import json
from collections import Counter
from importlib import resources

import pytest

from agentgym.envs.mock_api.env import MockApiEnv
from agentgym.envs.mock_api.faults import FAULT_KINDS
from agentgym.parsing import format_tool_call
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, run_episode, summarize
from agentgym.tasks.build.mock_api.tasks import TEMPLATES

SPLITS = ("train", "val", "test")


@pytest.fixture
def make_env():
    made = []

    def make(**kwargs):
        env = MockApiEnv(**kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def _tasks():
    folder = resources.files("agentgym.tasks") / "mock_api"
    return {split: [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()] for split in SPLITS}


def _call(name, **arguments):
    return format_tool_call(name, arguments)


def _token(env):
    observation, *_ = env.step(_call("http_request", method="POST", path="/auth/token", body={"api_key": env.api_key}))
    return json.loads(observation[0]["content"].split("\n\n", 1)[1])["access_token"]


# ------------------------------------------------------------------------------ tasks


def test_task_set_size_splits_difficulties_and_templates():
    tasks = _tasks()
    assert {s: len(t) for s, t in tasks.items()} == {"train": 308, "val": 66, "test": 66}
    everything = [t for split in tasks.values() for t in split]
    assert len({t["task_id"] for t in everything}) == len(everything) >= 300
    assert set(Counter(t["difficulty"] for t in everything)) == {"easy", "medium", "hard"}
    for split, items in tasks.items():
        assert {t["template"] for t in items} == set(TEMPLATES), split
    assert all(3 <= t["min_calls"] <= 10 for t in everything)
    assert not {t["world_seed"] for t in tasks["train"]} & {t["world_seed"] for t in tasks["test"]}


# --------------------------------------------------------------------------- policies


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("fault_rate", [0.0, 0.5])
def test_oracle_solves_every_task(make_env, split, fault_rate):
    env = make_env(split=split, fault_rate=fault_rate, validate_responses=True)
    injected = 0
    for seed, task_id in enumerate(env.task_ids):
        record = run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)
        assert record["success"] and record["reward"] == 1.0, (task_id, record["reward_reason"])
        assert env.session.internal_errors == [], task_id
        injected += record["steps"][-1]["info"]["faults_injected"]
    assert (injected > 0) == (fault_rate > 0)


def test_same_seed_gives_byte_identical_episodes_faults_included(make_env):
    runs = []
    for _ in range(2):
        env = make_env(split="val", fault_rate=0.5)
        lines = []
        for seed, task_id in enumerate(env.task_ids[:12]):
            for policy in ("oracle", "ignore_errors", "random"):
                lines.append(to_json_line(run_episode(env, make_policy(env, policy, seed), seed=seed, task_id=task_id, policy_name=policy)))
        runs.append(lines)
    assert runs[0] == runs[1]
    assert sum(json.loads(line)["steps"][-1]["info"]["faults_injected"] for line in runs[0]) > 20
    assert not any("127.0.0.1" in line for line in runs[0])  # nothing about the server leaks into records


def test_ignoring_errors_does_measurably_worse_under_faults(make_env):
    def score(policy, fault_rate):
        env = make_env(split="test", fault_rate=fault_rate)
        return summarize(run_episode(env, make_policy(env, policy, s), seed=s, task_id=t) for s, t in enumerate(env.task_ids))

    assert score("ignore_errors", 0.0)["success_rate"] == 1.0  # the plan itself is right
    oracle, ignoring = score("oracle", 0.5), score("ignore_errors", 0.5)
    assert oracle["success_rate"] == 1.0
    assert ignoring["success_rate"] <= 0.5 and ignoring["mean_reward"] <= oracle["mean_reward"] - 0.4


# ---------------------------------------------------------------- faults: settings, reports


def test_faults_are_reported_in_info(make_env):
    env = make_env(split="val", fault_rate=0.5)
    total = 0
    for seed, task_id in enumerate(env.task_ids[:5]):
        observation, info = env.reset(seed=seed, options={"task_id": task_id})
        assert info["api_base_url"].startswith("http://127.0.0.1:") and info["fault_rate"] == 0.5 and info["api_calls"] == 0
        policy = make_policy(env, "oracle", seed)
        policy.reset(env, observation, info)
        reported = []
        done = False
        while not done:
            observation, _, terminated, truncated, info = env.step(policy.act(observation))
            reported += info["turn_faults"]
            done = terminated or truncated
        logged = [{"call": c.index, "kind": c.fault, "operation": c.operation} for c in env.session.calls if c.fault]
        assert reported == logged and info["faults_injected"] == len(logged) and info["api_calls"] == len(env.session.calls)
        assert "api_base_url" not in info
        total += len(logged)
    assert total > 0


def test_fault_kinds_rate_override_and_ramp(make_env):
    env = make_env(split="val", fault_rate=1.0, fault_kinds=["rate_limit"], max_consecutive_faults=1, fault_warmup_calls=1)
    run_episode(env, make_policy(env, "oracle", 0), seed=0, task_id=env.task_ids[0])
    kinds = [c.fault for c in env.session.calls]
    assert kinds[0] is None and set(kinds) == {None, "rate_limit"}
    observation, info = env.reset(seed=0, options={"fault_rate": 0.0})
    assert info["fault_rate"] == 0.0
    with pytest.raises(ValueError, match="fault_rate"):
        env.reset(seed=0, options={"fault_rate": 2})
    ramp = make_env(split="val", fault_rate=0.8, fault_ramp_episodes=4)
    assert [ramp.reset(seed=i)[1]["fault_rate"] for i in range(5)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8])


@pytest.mark.parametrize("kwargs", [{"fault_rate": -0.1}, {"fault_kinds": ["gremlins"]}, {"max_consecutive_faults": 0}, {"client_timeout_s": 0}])
def test_bad_settings_are_clear_errors(make_env, kwargs):
    with pytest.raises(ValueError):
        make_env(**kwargs)


def test_every_fault_kind_can_be_chosen_alone(make_env):
    for kind in FAULT_KINDS:
        env = make_env(split="val", fault_rate=1.0, fault_kinds=[kind])
        injected = set()
        for seed, task_id in enumerate(env.task_ids[:8]):
            record = run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)
            assert record["success"], (kind, task_id, record["reward_reason"])
            injected |= {c.fault for c in env.session.calls if c.fault}
        assert injected == {kind}


# ------------------------------------------------------------------------------ tools


def test_docs_wait_and_nudge(make_env):
    env = make_env(split="val")
    env.reset(seed=0)
    overview = env.step(_call("read_api_docs"))[0][0]["content"]
    assert "GET /tickets (listTickets)" in overview and "Idempotency-Key" in overview
    detail = env.step(_call("read_api_docs", endpoint="listTickets"))[0][0]["content"]
    assert "Query parameter unassigned" in detail and "TicketPage" in detail
    assert env.step(_call("read_api_docs", endpoint="GET /nope"))[0][0]["content"].startswith("Error: no endpoint")
    before = env.session.clock
    assert env.step(_call("wait", seconds=2.5))[0][0]["content"] == "Waited 2.5 s."
    assert env.session.clock == before + 2.5
    assert env.step(_call("wait", seconds=9999))[0][0]["content"].startswith("Error:")
    reply = env.step("I think I am done.")[0]
    assert reply[0]["role"] == "user" and "finish" in reply[0]["content"]


@pytest.mark.parametrize(
    "arguments,message",
    [
        ({"path": "/../../etc/passwd"}, "'..' segments"),
        ({"path": "/%2e%2e/s/other/tickets"}, "'..' segments"),
        ({"path": "http://example.com/tickets"}, "relative to the API base"),
        ({"path": "//example.com/tickets"}, "relative to the API base"),
        ({"path": "/tickets", "headers": {"X-A": "1\r\nInjected: yes"}}, "control characters"),
        ({"path": "/tickets", "headers": {"Host": "elsewhere"}}, "set by the client itself"),
        ({"path": "/tickets", "query": {"status": ["open"]}}, "must be a string, number or boolean"),
        ({"path": "/auth/token", "method": "POST", "body": "x" * 2_000_000}, "sends at most"),
    ],
)
def test_hostile_tool_calls_are_refused_clearly(make_env, arguments, message):
    env = make_env(split="val")
    env.reset(seed=0)
    observation, _, _, _, info = env.step(_call("http_request", **({"method": "GET"} | arguments)))
    assert observation[0]["content"].startswith("Error:") and message in observation[0]["content"]
    assert info["turn_tool_errors"] == 1 and info["api_calls"] == 0


@pytest.mark.parametrize(
    "body,status,code", [('{"api_key": ', 400, "invalid_json"), ("[" * 30000 + "]" * 30000, 400, "invalid_json"), ("y" * 70000, 413, "payload_too_large")]
)
def test_bad_bodies_get_clear_http_errors(make_env, body, status, code):
    env = make_env(split="val")
    env.reset(seed=0)
    content = env.step(_call("http_request", method="POST", path="/auth/token", body=body))[0][0]["content"]
    assert content.startswith(f"HTTP {status} ") and json.loads(content.split("\n\n", 1)[1])["error"]["code"] == code


# ------------------------------------------------------------------ gaming the reward


def _oracle_turns(env, task_id, seed=0):
    """The oracle's turns for a task (without faults), so tests can alter them."""
    policy = make_policy(env, "oracle", seed)
    observation, info = env.reset(seed=seed, options={"task_id": task_id})
    policy.reset(env, observation, info)
    turns = []
    while True:
        action = policy.act(observation)
        turns.append(action)
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return turns


def _replay(env, task_id, turns, seed=0):
    env.reset(seed=seed, options={"task_id": task_id})
    for action in turns:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info
    raise AssertionError("the episode did not end")


def _task_of(env, template):
    return next(t["task_id"] for t in env.tasks if t["template"] == template)


def test_finishing_at_once_or_only_reading_scores_zero(make_env):
    env = make_env(split="val")
    task_id = _task_of(env, "close_solved")
    reward, info = _replay(env, task_id, [_call("finish", summary="all done")])
    assert reward == 0.0 and not info["success"]
    env.reset(seed=0, options={"task_id": task_id})
    token = _token(env)
    for page in (1, 2, 3):
        env.step(_call("http_request", method="GET", path="/tickets", query={"page": page}, headers={"Authorization": f"Bearer {token}"}))
    _, reward, terminated, _, info = env.step(_call("finish"))
    assert terminated and reward == 0.0 and info["reward_components"]["execution"] == 1.0 and info["reward_components"]["format"] == 1.0


def test_collateral_damage_fails_the_task(make_env):
    env = make_env(split="val")
    task_id = _task_of(env, "assign_ticket")
    turns = _oracle_turns(env, task_id)
    token = json.loads(turns[-2].split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["headers"]["Authorization"]
    victim = next(t for t in env.session.world.tickets if t != env.task["params"]["ticket_id"])
    extra = _call("http_request", method="DELETE", path=f"/tickets/{victim}", headers={"Authorization": token})
    reward, info = _replay(env, task_id, [*turns[:-1], extra, turns[-1]])
    assert reward == 0.0 and f"ticket {victim} was deleted but should not have been" in info["reward_reason"]


def test_a_duplicated_write_fails_the_task(make_env):
    env = make_env(split="val")
    task_id = _task_of(env, "create_ticket")
    turns = _oracle_turns(env, task_id)
    without_key = turns[-2].replace('"Idempotency-Key": ', '"X-Ignored": ')
    reward, info = _replay(env, task_id, [*turns[:-2], without_key, without_key, turns[-1]])
    assert reward == 0.0 and "unexpected new ticket" in info["reward_reason"]
    reward, info = _replay(env, task_id, [*turns[:-1], turns[-2], turns[-1]])  # same key twice: replayed, not duplicated
    assert reward == 1.0


def test_bad_calls_cost_partial_credit_without_failing_the_task(make_env):
    env = make_env(split="val")
    task_id = _task_of(env, "update_customer")
    turns = _oracle_turns(env, task_id)
    bad = [_call("http_request", method="GET", path="/tickets", query={"state": "open"}), "<tool_call>{oops</tool_call>"]
    reward, info = _replay(env, task_id, [*turns[:-1], *bad, turns[-1]])
    assert info["success"] and 0.5 < reward < 1.0
    assert info["reward_components"]["format"] < 1.0 and info["reward_components"]["execution"] < 1.0


def test_a_truncated_episode_is_graded_from_the_state_it_left(make_env):
    env = make_env(split="val", max_turns=3)
    task_id = _task_of(env, "assign_ticket")
    turns = _oracle_turns(make_env(split="val"), task_id)
    reward, info = _replay(env, task_id, turns[:3])
    assert info["success"] and reward == 1.0
