"""TauRetail-v0 with ``errors="upstream"``: malformed tool calls answered as τ-bench's ``Env.step`` does.

Each expected string is derived from τ-bench's source (``sierra-research/tau-bench`` at ``59a200c``),
cited per case; the default (``errors="agentgym"``) is checked unchanged alongside.
"""

import random
import types
import warnings

import gymnasium as gym
import pytest

from agentgym.envs.tau_retail.env import TauRetailEnv
from agentgym.envs.tau_retail.upstream_errors import MAX_INT_BITS, binding_error, calculate
from agentgym.parsing import format_tool_call
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.tools import tools_of

ENV_ID = "agentgym/TauRetail-v0"
TASK = "retail-test-0"  # Yusuf Rossi, zip 19122, user yusuf_rossi_9620


def _env(errors=None, **kwargs):
    env = gym.make(ENV_ID, split="test", **({} if errors is None else {"errors": errors}), **kwargs)
    env.reset(seed=0, options={"task_id": TASK})
    return env


def _observe(env, name, arguments):
    """The one tool message that calling ``name`` with ``arguments`` observes, and the step's ``terminated``."""
    observation, _, terminated, _, _ = env.step(format_tool_call(name, arguments))
    assert len(observation) == 1 and observation[0]["role"] == "tool"
    return observation[0]["content"], terminated


def _both(name, arguments):
    """The observation in upstream mode and in the default mode, each from a fresh episode."""
    return _observe(_env("upstream"), name, arguments)[0], _observe(_env(), name, arguments)[0]


def _order(status, **where):
    db = _env().unwrapped.db
    return next(o for o in db.orders.values() if o["status"] == status and all(o[k] == v for k, v in where.items()))


# ---------------------------------------------------------------------- unknown tools, binding


def test_unknown_tool_is_upstreams_unknown_action():
    # tau_bench/envs/base.py, Env.step: an action name not in tools_map observes f"Unknown action {action.name}".
    env = _env("upstream")
    content, terminated = _observe(env, "refund_everything", {"order_id": "#W2378156"})
    assert content == "Unknown action refund_everything" and not terminated
    assert env.unwrapped.counts["format_errors"] == 1 and env.unwrapped.counts["tool_calls"] == 0
    default, _ = _observe(_env(), "refund_everything", {})
    assert default.startswith("Error: unknown tool 'refund_everything'; available tools: calculate, find_user_id_by_email,")


@pytest.mark.parametrize(
    ("name", "arguments", "upstream", "default"),
    [
        # Env.step runs self.tools_map[name].invoke(data=self.data, **action.kwargs) inside
        # try/except Exception -> f"Error: {e}"; invoke is the static method Calculate.invoke of
        # tau_bench/envs/retail/tools/calculate.py (and likewise per tool), so Python's TypeError texts:
        (
            "calculate",
            {},
            "Error: Calculate.invoke() missing 1 required positional argument: 'expression'",
            "Error: invalid arguments for calculate: 'expression' is a required property",
        ),
        (
            "cancel_pending_order",
            {},
            "Error: CancelPendingOrder.invoke() missing 2 required positional arguments: 'order_id' and 'reason'",
            "Error: invalid arguments for cancel_pending_order: 'order_id' is a required property",
        ),
        (
            "return_delivered_order_items",
            {},
            "Error: ReturnDeliveredOrderItems.invoke() missing 3 required positional arguments: 'order_id', 'item_ids', and 'payment_method_id'",
            "Error: invalid arguments for return_delivered_order_items: 'order_id' is a required property",
        ),
        (
            "think",
            {"thought": "hm", "mood": "calm"},
            "Error: Think.invoke() got an unexpected keyword argument 'mood'",
            "Error: invalid arguments for think: Additional properties are not allowed ('mood' was unexpected)",
        ),
        (
            "list_all_product_types",
            {"category": "x"},
            "Error: ListAllProductTypes.invoke() got an unexpected keyword argument 'category'",
            "Error: invalid arguments for list_all_product_types: Additional properties are not allowed ('category' was unexpected)",
        ),
        # The unexpected argument is reported before the missing ones (Python binds keywords first).
        (
            "get_user_details",
            {"id": "yusuf_rossi_9620"},
            "Error: GetUserDetails.invoke() got an unexpected keyword argument 'id'",
            "Error: invalid arguments for get_user_details: 'user_id' is a required property",
        ),
        # data=self.data plus a "data" argument: the call site's error, naming the function in full.
        (
            "get_order_details",
            {"order_id": "#W2378156", "data": {}},
            "Error: tau_bench.envs.retail.tools.get_order_details.GetOrderDetails.invoke() got multiple values for keyword argument 'data'",
            "Error: invalid arguments for get_order_details: Additional properties are not allowed ('data' was unexpected)",
        ),
    ],
)
def test_arguments_that_do_not_bind_get_pythons_typeerror_for_upstreams_invoke(name, arguments, upstream, default):
    assert _both(name, arguments) == (upstream, default)


def _python_invoke(tool_name, parameters):
    """A function with the name, module and parameters of τ-bench's ``invoke`` for ``tool_name``,
    so that Python itself says how a call to it fails to bind."""
    qualname = "".join(w.capitalize() for w in tool_name.split("_")) + ".invoke"
    code = (lambda: None).__code__.replace(
        co_argcount=len(parameters), co_varnames=tuple(parameters), co_nlocals=len(parameters), co_name="invoke", co_qualname=qualname
    )
    function = types.FunctionType(code, {})
    function.__qualname__, function.__module__ = qualname, f"tau_bench.envs.retail.tools.{tool_name}"
    return function


def test_binding_errors_are_the_interpreters_own_for_every_tool():
    # The parameter names and order are τ-bench's: test_tau_retail.py holds the required lists to
    # upstream's schemas, whose order is each invoke's signature order.
    rng = random.Random(0)
    for tool in tools_of(TauRetailEnv):
        parameters = list(tool.parameters["required"])
        invoke = _python_invoke(tool.name, ["data", *parameters])
        names = [*parameters, "data", "self", "extra", "zip2"]
        for _ in range(40):
            arguments = {name: 1 for name in rng.sample(names, rng.randint(0, len(names)))}
            try:
                invoke(data=None, **arguments)
                expected = None
            except TypeError as exc:
                expected = str(exc)
            assert binding_error(tool, arguments) == expected, (tool.name, arguments)


# ------------------------------------------------------------------ no schema check of types


def test_an_integer_zip_is_compared_as_upstream_compares_it():
    # find_user_id_by_name_zip.py: profile["address"]["zip"] == zip, a str against an int: never equal.
    upstream, default = _both("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": 19122})
    assert upstream == "Error: user not found"
    assert default == "Error: invalid arguments for find_user_id_by_name_zip: zip: 19122 is not of type 'string'"
    assert _both("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}) == ("yusuf_rossi_9620",) * 2


def test_an_integer_zip_is_stored_as_upstream_stores_it():
    # modify_user_address.py: user["address"] = {..., "zip": zip}, whatever zip is; then json.dumps(user).
    arguments = {"user_id": "yusuf_rossi_9620", "address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": 78701}
    upstream = _env("upstream")
    content, _ = _observe(upstream, "modify_user_address", arguments)
    assert '"zip": 78701}' in content and upstream.unwrapped.db.users["yusuf_rossi_9620"]["address"]["zip"] == 78701
    as_text = _env("upstream")
    _observe(as_text, "modify_user_address", arguments | {"zip": "78701"})
    assert upstream.unwrapped.db.tau_bench_hash() != as_text.unwrapped.db.tau_bench_hash()  # τ-bench's hash tells 78701 from "78701"
    default = _env()
    content, _ = _observe(default, "modify_user_address", arguments)
    assert content == "Error: invalid arguments for modify_user_address: zip: 78701 is not of type 'string'"
    assert default.unwrapped.db.written == set()


def test_name_parts_are_compared_lazily_as_upstream_does():
    # find_user_id_by_name_zip.py: first-name == ... and last_name.lower() ...: the last name is only
    # lowered for a user whose first name matched, so a non-string one raises only then.
    assert _both("find_user_id_by_name_zip", {"first_name": "Nobody", "last_name": 7, "zip": "19122"})[0] == "Error: user not found"
    assert _both("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": 7, "zip": "19122"})[0] == "Error: 'int' object has no attribute 'lower'"
    # find_user_id_by_email.py: email.lower() on the first user already.
    assert _both("find_user_id_by_email", {"email": None})[0] == "Error: 'NoneType' object has no attribute 'lower'"


def test_tool_exceptions_become_error_and_the_exception_text():
    # Env.step: except Exception as e: observation = f"Error: {e}".
    # get_order_details.py: `order_id in orders` with a list raises TypeError.
    upstream, default = _both("get_order_details", {"order_id": ["#W2378156"]})
    assert upstream == "Error: unhashable type: 'list'"
    assert default == "Error: invalid arguments for get_order_details: order_id: ['#W2378156'] is not of type 'string'"
    # An id of another type is simply not found (get_user_details.py: `user_id in users`).
    assert _both("get_user_details", {"user_id": 9620})[0] == "Error: user not found"
    # exchange_delivered_order_items.py: `for item_id in item_ids` over an int.
    delivered = _order("delivered")
    arguments = {"order_id": delivered["order_id"], "item_ids": 5, "new_item_ids": [], "payment_method_id": "x"}
    assert _both("exchange_delivered_order_items", arguments)[0] == "Error: 'int' object is not iterable"
    env = _env("upstream")
    assert env.unwrapped.counts["tool_errors"] == 0
    _observe(env, "exchange_delivered_order_items", arguments)
    assert env.unwrapped.counts["tool_errors"] == 1 and env.unwrapped.counts["tool_calls"] == 1


def test_a_none_item_id_is_missing_as_upstream_says():
    # return_delivered_order_items.py: item_ids.count(None) > all_item_ids.count(None) -> "Error: some item not found";
    # modify_pending_order_items.py: the same test -> f"Error: {item_id} not found", i.e. "Error: None not found".
    delivered = _order("delivered")
    method = delivered["payment_history"][0]["payment_method_id"]
    env = _env("upstream")
    content, _ = _observe(env, "return_delivered_order_items", {"order_id": delivered["order_id"], "item_ids": [None], "payment_method_id": method})
    assert content == "Error: some item not found" and env.unwrapped.db.written == set()
    pending = _order("pending")
    arguments = {"order_id": pending["order_id"], "item_ids": [None], "new_item_ids": ["1"], "payment_method_id": "x"}
    assert _observe(env, "modify_pending_order_items", arguments)[0] == "Error: None not found"
    assert env.unwrapped.db.written == set()


def test_a_transfer_ends_the_episode_even_when_it_fails():
    # Env.step: `if action.name in self.terminate_tools: done = True` after the try, whatever invoke did.
    env = _env("upstream")
    content, terminated = _observe(env, "transfer_to_human_agents", {})
    assert content == "Error: TransferToHumanAgents.invoke() missing 1 required positional argument: 'summary'" and terminated
    content, terminated = _observe(_env(), "transfer_to_human_agents", {})
    assert content == "Error: invalid arguments for transfer_to_human_agents: 'summary' is a required property" and not terminated


# ------------------------------------------------------------------------------- calculate


@pytest.mark.parametrize(
    ("expression", "upstream", "default"),
    [
        # calculate.py: str(round(float(eval(expression, {"__builtins__": None}, {})), 2)), any
        # exception -> f"Error: {e}". 10**400 is an exact int, which float() refuses ...
        ("10**400", "Error: int too large to convert to float", "Error: (34, 'Numerical result out of range')"),
        # ... and a float literal past the range is inf, which round(x, 2) keeps.
        ("1" + "0" * 400 + ".0", "inf", "inf"),
        ("1" + "0" * 400 + ".0 - 1" + "0" * 400 + ".0", "nan", "nan"),
        ("2**-1", "0.5", "0.5"),
        ("7 // 2", "3.0", "3.0"),
        ("1//0", "Error: integer division or modulo by zero", "Error: integer division or modulo by zero"),
        ("()", "Error: float() argument must be a string or a real number, not 'tuple'", "Error: unsupported expression: Tuple(elts=[], ctx=Load())"),
        ("...", "Error: float() argument must be a string or a real number, not 'ellipsis'", "Error: unsupported expression: Constant(value=Ellipsis)"),
        ("(-8)**0.5", "Error: float() argument must be a string or a real number, not 'complex'", None),
        ("2(3)", "Error: 'int' object is not callable", "Error: unsupported expression: Call(func=Constant(value=2), args=[Constant(value=3)], keywords=[])"),
        ("", "Error: invalid syntax (<string>, line 0)", "Error: invalid syntax (<string>, line 0)"),
        ("01", None, None),
        ("  1 +", "Error: invalid syntax (<string>, line 1)", "Error: invalid syntax (<string>, line 1)"),
        ("2 + x", "Error: invalid characters in expression", "Error: invalid characters in expression"),
    ],
)
def test_calculate_is_upstreams(expression, upstream, default):
    got_upstream, got_default = _both("calculate", {"expression": expression})
    want = _reference_calculate(expression)
    assert got_upstream == want
    if upstream is not None:
        assert got_upstream == upstream
    if default is not None:
        assert got_default == default


@pytest.mark.parametrize(
    ("expression", "upstream"),
    [
        # calculate.py checks `char in "0123456789+-*/(). "` for each element, outside its try
        # (so Env.step's except gives the text): an int is not iterable ...
        (12, "Error: 'int' object is not iterable"),
        # ... a list element that is not a string fails the `in <string>` test ...
        ([1, 2], "Error: 'in <string>' requires string as left operand, not int"),
        # ... and a list of allowed strings reaches eval, which takes no list.
        (["1", "+", "2"], "Error: eval() arg 1 must be a string, bytes or code object"),
        (["1", "x"], "Error: invalid characters in expression"),
    ],
)
def test_calculate_takes_any_value_as_upstream(expression, upstream):
    assert _both("calculate", {"expression": expression})[0] == upstream == _reference_calculate(expression)


def test_a_huge_integer_power_answers_at_once():
    # Upstream computes 9**9**9 (hours) and then fails in float() with this text.
    assert _both("calculate", {"expression": "9**9**9"})[0] == "Error: int too large to convert to float"
    assert _both("calculate", {"expression": f"2**{MAX_INT_BITS - 1} - 2**{MAX_INT_BITS - 1} + 1"})[0] == "1.0"  # up to the bound, exact
    # The documented difference: past the bound, an expression that shrinks the number again.
    expression = "1/(10**330)**400"  # 10**132000 has 438,494 bits
    assert _reference_calculate(expression) == "0.0" and _both("calculate", {"expression": expression})[0] == "Error: int too large to convert to float"


def _reference_calculate(expression):
    """τ-bench's Calculate.invoke (tau_bench/envs/retail/tools/calculate.py) under Env.step's
    except. Only ever given this test's own expressions: digits and operators, powers bounded."""
    try:
        if not all(char in "0123456789+-*/(). " for char in expression):
            return "Error: invalid characters in expression"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))  # noqa: S307 - the reference is eval itself
        except Exception as e:  # noqa: BLE001
            return f"Error: {e}"
    except Exception as e:  # noqa: BLE001
        return f"Error: {e}"


def _random_expression(rng, depth):
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(["0", "1", "2", "7", "10", "0.5", "1.25", "3.", ".5", "00", "99999999999999999999", "...", "()", "1" + "0" * 330, "10**400"])
    kind = rng.random()
    if kind < 0.15:
        return rng.choice(["-", "+", "- -"]) + _random_expression(rng, depth - 1)
    if kind < 0.25:
        return "(" + _random_expression(rng, depth - 1) + ")"
    if kind < 0.3:
        return "(" + _random_expression(rng, depth - 1) + ")(" + rng.choice(["", "*", "**"]) + _random_expression(rng, 0) + ")"
    if kind < 0.4:
        # Literal exponents of at most 3: no tower to take hours in eval, and at depth 4 no integer
        # past MAX_INT_BITS (3**4 times the 1,329 bits of 10**400).
        return "(" + _random_expression(rng, depth - 1) + ")**" + rng.choice(["0", "2", "3", "-1", "0.5", "1.5"])
    return _random_expression(rng, depth - 1) + rng.choice([" + ", "-", " * ", "/", " // ", "*"]) + _random_expression(rng, depth - 1)


def test_calculate_agrees_with_eval_on_random_expressions():
    rng = random.Random(7)
    expressions = ["".join(rng.choice("0123456789+-*/(). ") for _ in range(rng.randint(0, 6))) for _ in range(3000)]
    expressions += [_random_expression(rng, 4) for _ in range(3000)]
    expressions += ["-" * n + "1" for n in (5, 999, 1001, 2500, 3500)]  # deeper than Python's recursion limit, and past the compiler's
    for expression in expressions:
        try:
            got = f"{calculate(expression)}"
        except Exception as exc:  # noqa: BLE001 - as the environment shows it
            got = f"Error: {exc}"
        assert got == _reference_calculate(expression), expression


# ---------------------------------------------------------------------- robustness, default


BAD_VALUES = [None, 0, -1.5, True, "", "x", [], {}, [None], [1, "2"], {"a": [1]}, "#W2378156", ["#W2378156"], [[[[]]]], "9" * 5000]


def test_no_bad_argument_raises_out_of_step_in_either_mode():
    rng = random.Random(1)
    tools = tools_of(TauRetailEnv)
    for errors in ("agentgym", "upstream"):
        env = _env(errors)
        for turn in range(600):
            tool = rng.choice(tools)
            names = list(tool.parameters["required"]) + (["data"] if rng.random() < 0.05 else [])
            arguments = {name: rng.choice(BAD_VALUES) for name in names if rng.random() < 0.9}
            observation, _, terminated, truncated, _ = env.step(format_tool_call(tool.name, arguments) if turn % 7 else "Can you help me?")
            assert all(isinstance(m["content"], str) for m in observation)
            if terminated or truncated:
                assert isinstance(env.unwrapped.compute_reward().score, float)
                env.reset(seed=turn, options={"task_id": TASK})


def test_a_deeply_nested_argument_is_stored_and_nothing_raises_afterwards():
    # modify_user_address.py stores address1 as given; τ-bench's own to_hashable then overflows the
    # stack when it hashes the database. Here the customer's replies and the reward go on (failing closed).
    nested: list = []
    for _ in range(600):
        nested = [nested]
    arguments = {"user_id": "yusuf_rossi_9620", "address1": nested, "address2": "", "city": "a", "state": "b", "country": "c", "zip": "1"}
    env = _env("upstream", max_turns=3)
    observation, _, _, _, _ = env.step(format_tool_call("modify_user_address", arguments))
    assert observation[0]["content"].startswith('{"name": {"first_name": "Yusuf"')
    observation, _, _, _, _ = env.step("Anything else?")
    assert observation[0]["role"] == "user"
    _, reward, _, truncated, info = env.step("Goodbye.")
    assert truncated and reward == 0.0 and not info["success"]


def test_well_formed_calls_are_the_same_in_both_modes():
    # The oracle plays the ground truth, with its refusals: every observation and reward is equal.
    records = []
    for errors in ("agentgym", "upstream"):
        env = gym.make(ENV_ID, split="val", errors=errors)
        records.append([run_episode(env, make_policy(env, "oracle", 0), seed=0, task_id=task_id) for task_id in env.unwrapped.task_ids])
    default, upstream = records
    assert len(default) == 20 and all(r["reward"] == 1.0 for r in default)
    assert [r["reward"] for r in upstream] == [r["reward"] for r in default]
    assert [r["messages"] for r in upstream] == [r["messages"] for r in default]
    assert [r["steps"] for r in upstream] == [r["steps"] for r in default]


def test_unknown_errors_mode_is_refused():
    with pytest.raises(ValueError, match="errors must be one of agentgym, upstream; got 'tau'"):
        gym.make(ENV_ID, errors="tau")
