"""The generated TRL environment classes (plain Python: tested without TRL installed).

TRL derives each tool's schema from the method with transformers' ``get_json_schema``; those
schemas must say what the agentgym tools accept.
"""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest
from adapter_support import REFUND, oracle_turns

from agentgym.parsing import parse_action
from agentgym.trainers.adapters.export import export_rows
from agentgym.trainers.adapters.spec import EpisodeSpec, SpecError
from agentgym.trainers.adapters.trl import TRLEnvironment, environment_class, environment_factories, reward_from_env


def _trl_tool_methods(cls: type) -> list[str]:
    """The names TRL turns into tools (its rule: public functions other than reset and get_reward)."""
    return [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if n not in ("reset", "get_reward") and not n.startswith("_")]


def test_one_method_per_tool_with_the_tools_schema() -> None:
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    cls = environment_class(REFUND)
    assert cls is environment_class(REFUND) and cls.__name__ == "Refund_v0" and issubclass(cls, TRLEnvironment)
    env = gym.make(REFUND)
    tools = {t["function"]["name"]: t["function"] for t in env.unwrapped.tools}
    assert sorted(_trl_tool_methods(cls)) == sorted(tools)
    instance = cls()
    for name, tool in tools.items():
        schema = get_json_schema(getattr(instance, name))["function"]
        assert schema["name"] == name and schema["description"] == tool["description"]
        assert schema["parameters"].get("required", []) == tool["parameters"]["required"]
        for arg, prop in tool["parameters"]["properties"].items():
            got = schema["parameters"]["properties"][arg]
            assert got["description"] == prop["description"]
            assert got.get("enum") == prop.get("enum")
            assert got.get("type") == prop.get("type", got.get("type"))
    assert environment_factories([REFUND]) == {REFUND: cls}


def test_reset_plays_the_rows_episode_and_the_oracle_solves_it() -> None:
    rows = export_rows("trl", REFUND, split="val", limit=2)
    instance = environment_class(REFUND)()
    for row in rows:  # a pooled instance serves one episode after another
        assert instance.reset(**row) is None
        spec = EpisodeSpec.from_json(row["agentgym_spec"])
        for turn in oracle_turns(spec):
            (call,) = parse_action(turn).tool_calls
            answer = getattr(instance, call.name)(**call.arguments)
            assert isinstance(answer, str) and not answer.startswith("Error")
        assert instance.get_reward() == 1.0 and instance.outcome.success
        with pytest.raises(RuntimeError, match="episode has ended"):
            instance.ask_customer(question="email")
    # reset rebuilds everything: a fresh episode has no reward and no calls yet.
    instance.reset(**rows[0])
    assert instance.get_reward() == 0.0 and instance.outcome.turns == 0


def test_bad_calls_are_the_environments_errors() -> None:
    instance = environment_class(REFUND)()
    with pytest.raises(RuntimeError, match="reset"):
        instance.ask_customer(question="email")
    instance.reset(**export_rows("trl", REFUND, limit=1)[0])
    assert instance.ask_customer(question="shoe size").startswith("Error: invalid arguments")
    assert instance.get_order(order_id="O-1").startswith("Error:")  # identity not verified yet
    assert instance.outcome.format_errors == 1 and instance.outcome.tool_errors == 1


def test_rows_that_do_not_fit_are_rejected() -> None:
    row = export_rows("trl", REFUND, limit=1)[0]
    instance = environment_class(REFUND)()
    with pytest.raises(SpecError, match="exported from another version"):
        instance.reset(**(row | {"prompt": [{"role": "user", "content": "something else"}]}))
    with pytest.raises(SpecError, match="plays 'agentgym/Refund-v0'"):
        instance.reset(**(row | {"agentgym_spec": EpisodeSpec(env_id="agentgym/Other-v0", task_id="t").to_json()}))
    with pytest.raises(SpecError, match="no 'agentgym_spec'"):
        instance.reset(prompt=row["prompt"])
    with pytest.raises(SpecError, match="unknown environment"):
        environment_class("agentgym/Nope-v0")


def test_reward_from_env_passes_the_rewards_through() -> None:
    assert reward_from_env(["a", "b"], ["x", "y"], env_reward=[1, 0.5], trainer_state=None) == [1.0, 0.5]
