"""TauRetail-v0: conformance with τ-bench retail (all 635 tasks), the reward, the customers.

The expected hashes are the ones τ-bench's own tools produced (``expected_gt_hashes.json``, copied
into ``tasks/tau_retail/`` with the data); nothing here reads the shared anchors folder.
"""

import gzip
import hashlib
import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.envs.tau_retail.audit import audit_tasks
from agentgym.envs.tau_retail.data import DATA, RetailDB, read_bundled
from agentgym.envs.tau_retail.env import STRICT_MAX_MESSAGE_CHARS, TauRetailEnv, upstream_tasks
from agentgym.envs.tau_retail.tools import TERMINATE_TOOLS, RetailTools, calculate_expression
from agentgym.envs.tau_retail.users import STOP
from agentgym.parsing import format_tool_call
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.tools import tools_of

ENV_ID = "agentgym/TauRetail-v0"
SPLITS = {"train": "train", "val": "dev", "test": "test"}
EXPECTED = read_bundled("expected_gt_hashes")

# SHA-256 of the upstream files, from the anchors' SOURCE.md: the bundled copies must be them.
SOURCE_SHA256 = {
    "orders": "2598a12586d28f2d6bd16bc86f4c800029b6af18e0abb5c475ef5c869c11ced1",
    "products": "a9eabcc1a9742c5f5288c2779acce52b9308423383ed24706bbaf0889f762a0f",
    "users": "6f4fd104cc5e80b92166c4035315c31532c6cea52a90dcdf18425ee7f87c2b82",
    "tasks_test": "c6cde746d4b31442fca1fe1a02b7992d777ddf838eeea9cfbf862f1634043e4e",
    "tasks_train": "11fd9b5afe85d0db55059a71a784feda0ce0e674973131e2203477064fff0095",
    "tasks_dev": "58da2923c7b3de65c3a353b20d63d19f060a7685adde7b6d24a0371d62bacbf5",
    "tools_schema": "da43b49f4783a9aa82f97f125b2f4c9b56d053cc27e09903ad0ae075026d72ac",
    "expected_gt_hashes": "21d36c1310006bf76d859cfc24a4a125b999286d2599fbe86bb20e640412329f",
}


def _expected_rows(split):
    return {row["task_index"]: row for row in EXPECTED["splits"][SPLITS[split]]}


def _play(env, task_id, actions, seed=0):
    """Reset on ``task_id`` and play ``actions`` until the episode ends; returns the last step."""
    env.reset(seed=seed, options={"task_id": task_id})
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return observation, reward, info
    raise AssertionError("the episode did not end")


def _calls(task):
    return [format_tool_call(a["name"], a["kwargs"]) for a in task["actions"]]


# ----------------------------------------------------------------------------- data


def test_bundled_data_is_upstreams_with_its_license():
    for name, digest in SOURCE_SHA256.items():
        with (DATA / f"{name}.json.gz").open("rb") as raw:
            assert hashlib.sha256(gzip.decompress(raw.read())).hexdigest() == digest, name
    assert hashlib.sha256((DATA / "wiki.md").read_bytes()).hexdigest() == "d539fd2a46a8b8dd2e934ff9ed92f43e9f6b56bc7a718db8d2803ba8ad8f6bf7"
    license_text = (DATA / "LICENSE").read_text()
    assert "MIT License" in license_text and "Copyright (c) 2024 Sierra" in license_text


def test_initial_database_hashes():
    db = RetailDB()
    assert db.tau_bench_hash() == EXPECTED["initial_db"]["tau_bench_hash"]
    assert db.json_sha256() == EXPECTED["initial_db"]["json_sha256"]


def test_splits_and_task_ids_map_back_to_upstream():
    sizes = {"train": 500, "val": 20, "test": 115}
    for split, upstream in SPLITS.items():
        tasks = gym.make(ENV_ID, split=split).unwrapped.tasks
        assert len(tasks) == sizes[split]
        assert [t["task_index"] for t in tasks] == list(range(sizes[split]))
        assert all(t["task_id"] == f"retail-{upstream}-{t['task_index']}" and t["split"] == split for t in tasks)
    env = gym.make(ENV_ID, split="test", task_ids=["retail-test-12"])
    assert env.unwrapped.tasks[0]["task_index"] == 12


# ------------------------------------------------------------------------------ tools


def _constraint(prop):
    # An enum already fixes the type; descriptions are documentation, not constraints.
    out = {k: v for k, v in prop.items() if k != "description"}
    if "enum" in out:
        out.pop("type", None)
    return out


def test_tool_schemas_are_upstreams_and_validation_matches_them():
    upstream = read_bundled("tools_schema")
    env = gym.make(ENV_ID)
    assert env.unwrapped.tools == upstream
    validating = {t.name: t.parameters for t in tools_of(TauRetailEnv)}
    assert sorted(validating) == sorted(s["function"]["name"] for s in upstream)
    for spec in upstream:
        want, got = spec["function"]["parameters"], validating[spec["function"]["name"]]
        assert got["required"] == want["required"], spec["function"]["name"]
        assert {k: _constraint(p) for k, p in got["properties"].items()} == {k: _constraint(p) for k, p in want["properties"].items()}
        assert got["additionalProperties"] is False  # upstream fails a call with an unexpected argument too


def test_ground_truth_replay_gives_upstreams_hashes_and_errors_on_all_635_tasks():
    for split in SPLITS:
        rows = _expected_rows(split)
        for task in upstream_tasks(split):
            row = rows[task["task_index"]]
            tools = RetailTools(RetailDB())
            errors = []
            for index, action in enumerate(task["actions"]):
                if action["name"] in TERMINATE_TOOLS:
                    continue
                observation = tools.call(action["name"], action["kwargs"])
                if observation.startswith("Error:"):
                    errors.append({"action_index": index, "name": action["name"], "observation": observation})
            where = task["task_id"]
            assert tools.db.tau_bench_hash() == row["gt_tau_bench_hash"], where
            assert tools.db.json_sha256() == row["gt_json_sha256"], where
            assert errors == row["gt_action_errors"], where
            # The anchors list records unequal by ==, where a balance of 60 and one of 60.0 are
            # equal (the hashes above tell them apart).
            for table, changed in (("orders", row["changed_order_ids"]), ("users", row["changed_user_ids"])):
                records, fresh = getattr(tools.db, table), getattr(RetailDB(), table)
                assert sorted(k for t, k in tools.db.written if t == table and records[k] != fresh[k]) == sorted(changed), where
    # Copy-on-write never let an episode write into the shared data.
    assert RetailDB().tau_bench_hash() == EXPECTED["initial_db"]["tau_bench_hash"]


def test_refused_calls_leave_the_database_unchanged():
    tools = RetailTools(RetailDB())
    delivered = next(o for o in tools.db.orders.values() if o["status"] == "delivered")
    pending = next(o for o in tools.db.orders.values() if o["status"] == "pending" and len(o["payment_history"]) == 1)
    item = pending["items"][0]
    unavailable = next((i for i, v in tools.db.products[item["product_id"]]["variants"].items() if not v["available"]), "0000000000")
    refusals = {
        ("cancel_pending_order", "non-pending order cannot be cancelled"): {"order_id": delivered["order_id"], "reason": "no longer needed"},
        ("cancel_pending_order", "invalid reason"): {"order_id": pending["order_id"], "reason": "changed my mind"},
        ("modify_pending_order_payment", "the new payment method should be different from the current one"): {
            "order_id": pending["order_id"],
            "payment_method_id": pending["payment_history"][0]["payment_method_id"],
        },
        ("modify_pending_order_items", f"new item {unavailable} not found or available"): {
            "order_id": pending["order_id"],
            "item_ids": [item["item_id"]],
            "new_item_ids": [unavailable],
            "payment_method_id": "x",
        },
        ("return_delivered_order_items", "payment method not found"): {"order_id": delivered["order_id"], "item_ids": [], "payment_method_id": "x"},
        ("exchange_delivered_order_items", "the number of items to be exchanged should match"): {
            "order_id": delivered["order_id"],
            "item_ids": [delivered["items"][0]["item_id"]],
            "new_item_ids": [],
            "payment_method_id": "x",
        },
        ("modify_user_address", "user not found"): dict.fromkeys(["user_id", "address1", "address2", "city", "state", "country", "zip"], "x"),
        ("get_order_details", "order not found"): {"order_id": "W0000000"},
    }
    for (name, message), arguments in refusals.items():
        assert tools.call(name, arguments) == f"Error: {message}"
    assert tools.db.written == set()


def test_gift_card_refund_is_credited_at_cancellation():
    db = RetailDB()
    order = next(o for o in db.orders.values() if o["status"] == "pending" and "gift_card" in o["payment_history"][0]["payment_method_id"])
    card = order["payment_history"][0]["payment_method_id"]
    before = db.users[order["user_id"]]["payment_methods"][card]["balance"]
    RetailTools(db).call("cancel_pending_order", {"order_id": order["order_id"], "reason": "no longer needed"})
    amount = order["payment_history"][0]["amount"]
    assert db.users[order["user_id"]]["payment_methods"][card]["balance"] == round(before + amount, 2)
    assert db.orders[order["order_id"]]["payment_history"][-1] == {"transaction_type": "refund", "amount": amount, "payment_method_id": card}


def test_item_modification_keeps_the_unrounded_price_difference():
    rows = _expected_rows("train")
    task = next(t for t in upstream_tasks("train") if rows[t["task_index"]]["gt_json_sha256"] != rows[t["task_index"]]["gt_json_r2_sha256"])
    tools = RetailTools(RetailDB())
    for action in task["actions"]:
        tools.call(action["name"], action["kwargs"])
    amounts = [p["amount"] for o in tools.db.orders.values() for p in o["payment_history"]]
    assert any(a != round(a, 2) for a in amounts)


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("2 + 2", "4.0"),
        ("(1 + 2) * 3 / 7", "1.29"),
        ("-1.5 * 2", "-3.0"),
        ("2 ** 10", "1024.0"),
        ("x + 1", "Error: invalid characters in expression"),
        ("1 / 0", "Error: division by zero"),
        # Upstream would compute 9**9**9 for hours; the error texts of these two are the platform's.
        ("9 ** 9 ** 9", "Error: "),
        ("()", "Error: "),
    ],
)
def test_calculate(expression, result):
    assert RetailTools(RetailDB()).call("calculate", {"expression": expression}).startswith(result)
    if not result.startswith("Error"):
        assert calculate_expression(expression) == result


# ----------------------------------------------------------------------------- reward


@pytest.mark.parametrize("user", ["scripted", "ticket"])
def test_the_oracle_scores_one_on_all_635_tasks(user):
    for split in SPLITS:
        env = gym.make(ENV_ID, split=split, user=user)
        for seed, task_id in enumerate(env.unwrapped.task_ids):
            record = run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)
            assert record["reward"] == 1.0 and record["success"], (task_id, record["reward_reason"])
            assert record["reward_components"] == {"db": 1.0, "outputs": 1.0}


def test_a_do_nothing_agent_passes_only_the_tasks_upstream_lets_it_pass():
    env = gym.make(ENV_ID, split="test", user="ticket")
    rows = _expected_rows("test")
    for task in env.unwrapped.tasks:
        _, reward, info = _play(env, task["task_id"], ["I cannot help with that."])
        row = rows[task["task_index"]]
        assert reward == float(row["db_unchanged"] and row["n_outputs"] == 0), task["task_id"]


def test_missing_outputs_and_wrong_writes_are_named_in_the_reason():
    env = gym.make(ENV_ID, split="test", user="ticket")
    task = next(t for t in env.unwrapped.tasks if t["outputs"] and not any(a["name"] == "transfer_to_human_agents" for a in t["actions"]))
    _, reward, info = _play(env, task["task_id"], _calls(task) + ["All done."])
    assert reward == 0.0 and info["reward_components"] == {"db": 1.0, "outputs": 0.0}
    assert "required outputs not said" in info["reward_reason"] and repr(task["outputs"][0]) in info["reward_reason"]

    task = next(t for t in env.unwrapped.tasks if t["task_id"] == "retail-test-5")
    (write,) = [a for a in task["actions"] if a["name"] == "return_delivered_order_items"]
    other = dict(write, kwargs=dict(write["kwargs"], item_ids=write["kwargs"]["item_ids"][:-1] or ["0"]))
    actions = [format_tool_call(a["name"], a["kwargs"]) for a in (other if a is write else a for a in task["actions"])]
    _, reward, info = _play(env, task["task_id"], actions + ["Done."])
    assert reward == 0.0 and info["reward_components"]["db"] == 0.0
    assert f"orders/{write['kwargs']['order_id']}" in info["reward_reason"]


def test_running_out_of_turns_scores_zero():
    env = gym.make(ENV_ID, split="train", max_turns=2)
    task = env.unwrapped.tasks[0]
    _, reward, info = _play(env, task["task_id"], _calls(task) * 2 + ["hello"] * 2)
    assert reward == 0.0 and "ran out of its 2 turns" in info["reward_reason"]


def test_transfer_ends_the_episode():
    env = gym.make(ENV_ID, split="test")
    env.reset(seed=0, options={"task_id": "retail-test-50"})  # its ground truth is the transfer alone
    observation, reward, terminated, truncated, _ = env.step(format_tool_call("transfer_to_human_agents", {"summary": "The user wants a human."}))
    assert terminated and not truncated and observation[0]["content"] == "Transfer successful" and reward == 1.0


# -------------------------------------------------------------------------- customers


def test_the_scripted_customer_confirms_only_ground_truth_writes():
    env = gym.make(ENV_ID, split="train")
    task = env.unwrapped.tasks[0]
    (write,) = task["actions"]
    observation, _ = env.reset(seed=0, options={"task_id": task["task_id"]})
    assert write["kwargs"]["order_id"] in observation[1]["content"] and STOP not in observation[1]["content"]
    say = lambda text: env.step(text)[0][0]["content"]  # noqa: E731
    profile = env.unwrapped.db.users[task["user_id"]]
    assert say("What is your email address?") == f"My email is {profile['email']}."
    assert profile["address"]["zip"] in say("Please give me your name and zip code.")
    details = json.dumps(write["kwargs"])
    assert say(f"Shall I proceed with {details}? (yes/no)") == "Yes, please go ahead."
    wrong = details.replace(write["kwargs"]["payment_method_id"], "gift_card_0000000")
    assert say(f"Shall I proceed with {wrong}? (yes/no)").startswith("No")
    # The customer leaves only once the ground-truth write is done.
    env.step(format_tool_call(write["name"], write["kwargs"]))
    observation, reward, terminated, _, _ = env.step("Your return is requested.")
    assert terminated and STOP in observation[0]["content"] and reward == 1.0


def test_a_ticket_is_the_instruction_and_the_first_reply_closes_it():
    env = gym.make(ENV_ID, split="train", user="ticket")
    task = env.unwrapped.tasks[1]
    observation, _ = env.reset(seed=0, options={"task_id": task["task_id"]})
    assert observation[0]["role"] == "system" and observation[1] == {"role": "user", "content": task["instruction"]}
    observation, reward, terminated, truncated, _ = env.step("Could you tell me more?")
    assert observation == [] and terminated and reward == 0.0


def test_unknown_user_mode_is_refused():
    with pytest.raises(ValueError, match="user must be one of"):
        gym.make(ENV_ID, user="human")


# ------------------------------------------------------------------- policy violations

# retail-dev-0: olivia_ito_3591 wants a pending order cancelled; she also has a delivered order.
VIOLATIONS_TASK = "retail-dev-0"
OTHER_USER, OTHER_ORDER = "omar_lopez_3107", "#W7273336"  # the customer of retail-dev-1


def _violations(actions, user="scripted"):
    """The violation counts after playing ``actions`` on :data:`VIOLATIONS_TASK` (the episode may go on)."""
    env = gym.make(ENV_ID, split="val", user=user)
    _, info = env.reset(seed=0, options={"task_id": VIOLATIONS_TASK})
    assert info["policy_violations"] == 0
    for action in actions:
        observation, _, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated), observation
    assert info["policy_violations"] == sum(info["policy_violations_by_rule"].values())
    return info["policy_violations_by_rule"]


def _olivia():
    """Her authentication call, the ground-truth cancellation's arguments, and an order of hers per status."""
    task = next(t for t in upstream_tasks("val") if t["task_id"] == VIOLATIONS_TASK)
    (cancel,) = task["actions"]
    db = RetailDB()
    user = db.users[task["user_id"]]
    orders = {db.orders[o]["status"]: o for o in user["orders"]}
    return format_tool_call("find_user_id_by_email", {"email": user["email"]}), cancel["kwargs"], orders


def _cancel(kwargs):
    return format_tool_call("cancel_pending_order", kwargs)


def _ask(kwargs):
    return f"Shall I cancel order {kwargs['order_id']} (reason: {kwargs['reason']})? Please confirm (yes/no)."


def _address_change(user_id):
    address = {"address1": "1 Main Street", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "73301"}
    return format_tool_call("modify_user_address", {"user_id": user_id, **address})


def test_a_write_needs_a_yes_to_a_confirmation_request_in_the_previous_message():
    find, kwargs, _ = _olivia()
    ask, cancel = _ask(kwargs), _cancel(kwargs)
    rule = "unconfirmed_write"
    assert _violations([find, ask, cancel])[rule] == 0  # asked, "Yes, please go ahead.", written
    assert _violations([find, cancel])[rule] == 1  # never asked
    assert _violations([find, ask, cancel, _address_change("olivia_ito_3591")])[rule] == 1  # one yes, one write
    assert _violations([find, ask, "One moment, please.", cancel])[rule] == 1  # the yes was not to the previous message
    other_reason = "ordered by mistake" if kwargs["reason"] == "no longer needed" else "no longer needed"
    assert _violations([find, _ask(kwargs | {"reason": other_reason}), cancel])[rule] == 1  # the customer said no
    # A ticket has nobody to ask: its writes are never unconfirmed.
    assert _violations([find, cancel], user="ticket")[rule] == 0


def test_actions_on_another_customers_records_count_once_someone_is_authenticated():
    find, _, orders = _olivia()
    other_order = format_tool_call("get_order_details", {"order_id": OTHER_ORDER})
    other_user = format_tool_call("get_user_details", {"user_id": OTHER_USER})
    own = format_tool_call("get_order_details", {"order_id": orders["pending"]})
    missing = format_tool_call("get_order_details", {"order_id": "#W0000000"})
    assert RetailDB().orders[OTHER_ORDER]["user_id"] == OTHER_USER
    assert _violations([find, own, missing])["other_customer"] == 0
    assert _violations([find, other_order, other_user])["other_customer"] == 2
    # Before authentication a call on a record counts as unauthenticated instead.
    assert _violations([other_order, find, other_user]) | {"unconfirmed_write": 0} == {
        "unconfirmed_write": 0,
        "other_customer": 1,
        "unauthenticated": 1,
        "wrong_status": 0,
    }
    # A write on another customer's record counts too.
    assert _violations([find, _address_change(OTHER_USER)]) == {"unconfirmed_write": 1, "other_customer": 1, "unauthenticated": 0, "wrong_status": 0}


def test_skipping_authentication_never_lowers_the_violation_count():
    # The review's reproduction: calls on another customer's records counted 4 violations after
    # authenticating but 1 without authenticating anyone.
    find, _, orders = _olivia()
    other = [
        format_tool_call("get_order_details", {"order_id": OTHER_ORDER}),
        format_tool_call("get_user_details", {"user_id": OTHER_USER}),
        _address_change(OTHER_USER),
    ]
    assert _violations([find, *other]) == {"unconfirmed_write": 1, "other_customer": 3, "unauthenticated": 0, "wrong_status": 0}
    assert _violations(other) == {"unconfirmed_write": 1, "other_customer": 0, "unauthenticated": 3, "wrong_status": 0}
    # Her own records before authenticating count too; calls on no record (a product) do not.
    own = format_tool_call("get_order_details", {"order_id": orders["pending"]})
    product = format_tool_call("list_all_product_types", {})
    assert _violations([product, own, find, own])["unauthenticated"] == 1


def test_writes_refused_for_the_orders_status_count():
    find, _, orders = _olivia()
    cancel_delivered = _cancel({"order_id": orders["delivered"], "reason": "no longer needed"})
    return_pending = format_tool_call(
        "return_delivered_order_items", {"order_id": orders["pending"], "item_ids": [], "payment_method_id": "credit_card_0000000"}
    )
    # Refused writes are not unconfirmed ones; a write refused for another reason is not counted.
    unknown_method = format_tool_call(
        "return_delivered_order_items", {"order_id": orders["delivered"], "item_ids": [], "payment_method_id": "credit_card_0000000"}
    )
    assert _violations([find, cancel_delivered, return_pending, unknown_method]) == {
        "unconfirmed_write": 0,
        "other_customer": 0,
        "unauthenticated": 0,
        "wrong_status": 2,
    }


@pytest.mark.parametrize("user", ["scripted", "ticket"])
def test_the_oracle_breaks_no_rule_on_the_dev_tasks(user):
    env = gym.make(ENV_ID, split="val", user=user)
    for seed, task_id in enumerate(env.unwrapped.task_ids):
        record = run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id)
        info = record["steps"][-1]["info"]
        assert info["policy_violations"] == 0, (task_id, info["policy_violations_by_rule"])


# ---------------------------------------------------------------------- gym contract


@pytest.mark.parametrize("user", ["scripted", "ticket"])
def test_check_env(user):
    check_env(gym.make(ENV_ID, user=user).unwrapped, skip_render_check=True)


def test_same_seed_same_actions_same_episode_record():
    lines = []
    for _ in range(2):
        env = gym.make(ENV_ID, split="val")
        for seed, policy in enumerate(["oracle", "random", "oracle"]):
            lines.append(to_json_line(run_episode(env, make_policy(env, policy, seed), seed=seed)))
    assert lines[:3] == lines[3:]


# ------------------------------------------------------------------- strict tasks and outputs


def _finish_with(task_id: str, message: str, **kwargs) -> float:
    """Play ``task_id``'s ground-truth calls as a ticket, then close it with ``message``; the reward."""
    env = gym.make(ENV_ID, split="test", user="ticket", **kwargs)
    env.reset(seed=0, options={"task_id": task_id})
    for action in env.unwrapped.task["actions"]:
        env.step(format_tool_call(action["name"], action["kwargs"]))
    _, reward, terminated, _, _ = env.step(message)
    assert terminated
    return reward


def test_strict_bounds_what_states_a_required_output():
    # The review's reproduction: one message listing every amount from 0.00 to 999.99 "said" the
    # amount a task requires. Upstream's substring rule stays the default.
    task_id, amount = "retail-test-109", "346.93"
    every_amount = " ".join(f"{cents / 100:.2f}" for cents in range(100_000))
    assert _finish_with(task_id, every_amount) == 1.0
    assert _finish_with(task_id, every_amount, strict=True) == 0.0
    twenty_one = "Your refund is one of: " + ", ".join(f"{amount[:-1]}{d}" for d in range(10)) + ", " + ", ".join(f"{n}.00" for n in range(11))
    assert amount in twenty_one and _finish_with(task_id, twenty_one, strict=True) == 0.0
    assert _finish_with(task_id, "x" * STRICT_MAX_MESSAGE_CHARS + f" refund: {amount}", strict=True) == 0.0
    assert _finish_with(task_id, f"Your refund of ${amount} is on its way to your original payment method.", strict=True) == 1.0


def test_strict_drops_the_tasks_a_do_nothing_or_transfer_first_agent_solves():
    # The review's reproduction: transfer_to_human_agents as the first action earned 1.0 on 7 test
    # tasks (and 5 train, 1 dev); so does an agent that never calls a tool.
    default = gym.make(ENV_ID, split="test")
    flagged = [a.task_id for a in audit_tasks(default) if not a.passed]
    assert flagged == ["retail-test-10", "retail-test-12", "retail-test-25", "retail-test-50", "retail-test-57", "retail-test-65", "retail-test-106"]
    assert all(a.do_nothing == a.transfer_first == 1.0 for a in audit_tasks(default, flagged))
    strict = gym.make(ENV_ID, split="test", strict=True)
    assert sorted(strict.unwrapped.task_ids) == sorted(set(default.unwrapped.task_ids) - set(flagged))
    assert all(a.passed for a in audit_tasks(strict))
    for split, dropped in (("train", 5), ("val", 1)):
        kept = gym.make(ENV_ID, split=split, strict=True).unwrapped.task_ids
        assert len(kept) == len(gym.make(ENV_ID, split=split).unwrapped.task_ids) - dropped
    with pytest.raises(ValueError, match="leaves no task"):
        gym.make(ENV_ID, tasks=[t for t in upstream_tasks("test") if t["task_id"] in flagged], strict=True)


def test_audit_tasks_flags_what_a_do_nothing_or_transfer_first_agent_solves(capsys):
    from agentgym.cli import main

    assert main(["audit-tasks", "--env", ENV_ID, "--split", "val"]) == 1
    assert "FAIL retail-dev-17: do nothing 1.0, transfer first 1.0" in capsys.readouterr().out
    assert main(["audit-tasks", "--env", ENV_ID, "--split", "val", "--env-kwargs", '{"strict": true}']) == 0
    assert "no task rewards an agent that does no work" in capsys.readouterr().out
