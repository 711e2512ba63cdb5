"""Refund-v0: task data, the oracle on every split, baselines, and attempts to game the reward."""

import json
from collections import Counter
from importlib import resources

import gymnasium as gym
import pytest

from agentgym.parsing import format_tool_call
from agentgym.rollouts.scripted import make_policy, rollout, run_episode, summarize

ENV_ID = "agentgym/Refund-v0"


def _all_tasks():
    folder = resources.files("agentgym.tasks") / "refund"
    return {split: [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()] for split in ("train", "val", "test")}


def test_task_set_size_splits_and_outcome_mix():
    tasks = _all_tasks()
    counts = {split: len(t) for split, t in tasks.items()}
    assert sum(counts.values()) >= 500
    assert counts == {"train": 420, "val": 90, "test": 90}
    outcomes = Counter(t["expected"]["outcome"] for split in tasks.values() for t in split)
    assert (outcomes["denied"] + outcomes["partial_refund"]) / sum(outcomes.values()) >= 0.40
    assert set(Counter(t["difficulty"] for split in tasks.values() for t in split)) == {"easy", "medium", "hard"}
    ids = [t["task_id"] for split in tasks.values() for t in split]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_oracle_solves_every_task(split):
    env = gym.make(ENV_ID, split=split)
    for seed, task_id in enumerate(env.unwrapped.task_ids):
        record = run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)
        assert record["success"] and record["reward"] == 1.0, (task_id, record["reward_reason"])


def test_baselines_score_far_below_the_oracle():
    results = {p: summarize(rollout(ENV_ID, p, episodes=90, split="test")) for p in ("oracle", "always_refund", "do_nothing", "random")}
    assert results["oracle"]["mean_reward"] == 1.0
    assert results["always_refund"]["mean_reward"] <= 0.5
    assert results["do_nothing"]["mean_reward"] == 0.0
    assert results["random"]["mean_reward"] == 0.0


def _oracle_actions(env, task_id):
    """The oracle's turns for a task, so tests can alter one of them."""
    policy = make_policy(env, "oracle", 0)
    observation, info = env.reset(seed=0, options={"task_id": task_id})
    policy.reset(env.unwrapped, observation, info)
    actions, done = [], False
    while not done:
        action = policy.act(observation)
        actions.append(action)
        observation, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    return actions


def _replay(env, task_id, actions):
    env.reset(seed=0, options={"task_id": task_id})
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info
    raise AssertionError("episode did not end")


def _task_with(outcome):
    env = gym.make(ENV_ID, split="train")
    return env, next(t for t in env.unwrapped.tasks if t["expected"]["outcome"] == outcome and t["difficulty"] == "easy")


def test_skipping_the_confirmation_fails_the_task():
    env, task = _task_with("full_refund")
    actions = [a for a in _oracle_actions(env, task["task_id"]) if "confirm_with_customer" not in a]
    reward, info = _replay(env, task["task_id"], actions)
    assert reward == 0.0 and not info["success"] and "confirmation" in info["reward_reason"]


def test_refund_to_another_payment_method_fails():
    env = gym.make(ENV_ID, split="train")
    task = next(t for t in env.unwrapped.tasks if t["expected"]["refund"] and len(t["customer"]["payment_methods"]) > 1)
    original = task["expected"]["refund"]["payment_method_id"]
    other = next(m["payment_method_id"] for m in task["customer"]["payment_methods"] if m["payment_method_id"] != original)
    actions = [a.replace(original, other) if "confirm_with_customer" in a or "process_refund" in a else a for a in _oracle_actions(env, task["task_id"])]
    reward, info = _replay(env, task["task_id"], actions)
    assert reward == 0.0 and "payment method" in info["reward_reason"]


def test_format_points_cannot_rescue_a_failed_task():
    """A do-nothing agent has perfect format and execution components and still scores 0."""
    env, task = _task_with("denied")
    env.reset(seed=0, options={"task_id": task["task_id"]})
    send = format_tool_call("ask_customer", {"question": "email"})
    for _ in range(env.unwrapped.max_turns):
        _, reward, terminated, truncated, info = env.step(send)
        if terminated or truncated:
            break
    assert info["reward_components"]["format"] == 1.0 and info["reward_components"]["execution"] == 1.0
    assert reward == 0.0


def test_refunding_a_denied_item_anyway_fails():
    env, task = _task_with("denied")
    actions = _oracle_actions(env, task["task_id"])
    item = next(iter(task["expected"]["denials"]))
    order = next(o for o in task["orders"] if o["order_id"] == task["expected"]["order_id"])
    price = next(i["price"] for i in order["items"] if i["item_id"] == item)
    refund = {"order_id": order["order_id"], "item_ids": [item], "amount": price, "payment_method_id": order["payment_method_id"]}
    hacked = actions[:-1] + [format_tool_call("confirm_with_customer", refund), format_tool_call("process_refund", refund), actions[-1]]
    reward, info = _replay(env, task["task_id"], hacked)
    assert reward == 0.0 and "refunded items" in info["reward_reason"]


def test_identity_is_required_before_account_access():
    env, task = _task_with("full_refund")
    env.reset(seed=0, options={"task_id": task["task_id"]})
    observation, *_ = env.step(format_tool_call("get_order", {"order_id": task["expected"]["order_id"]}))
    assert observation[0]["content"] == "Error: verify the customer's identity with verify_identity first"
    observation, *_ = env.step(format_tool_call("verify_identity", {"email": task["customer"]["email"], "zip_code": "00000"}))
    assert observation[0]["content"].startswith("Error: identity could not be verified")


def test_wrong_outcome_in_the_confirmation_fails():
    env, task = _task_with("partial_refund")
    actions = _oracle_actions(env, task["task_id"])
    actions[-1] = actions[-1].replace('"partial_refund"', '"full_refund"')
    reward, info = _replay(env, task["task_id"], actions)
    assert reward == 0.0 and "confirmation" in info["reward_reason"]
