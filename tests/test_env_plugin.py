"""An environment defined outside agentgym (here, in this file) plugs in without an edit under
agentgym/: it declares its own task and ``info`` types, registers with Gymnasium, and then makes,
plays, records and documents like a bundled one."""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations.
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from record_types import assert_matches, problems

from agentgym import ToolEnv, ToolError, make_env, tool
from agentgym import records as R
from agentgym.envs import docs, env_class
from agentgym.parsing import format_tool_call
from agentgym.policies import Script, ScriptedPolicy
from agentgym.rollouts.scripted import rollout
from agentgym.verifiers import RewardResult

ENV_ID = "agentgym-test/Shop-v0"


class ShopTask(R.TaskRecord):
    """A task of Shop-v0: buy one item."""

    item: str
    price: int
    note: NotRequired[str]


class ShopInfo(TypedDict):
    """What Shop-v0 adds to every ``info``."""

    purchases: int


class ShopResetInfo(TypedDict):
    """What Shop-v0's ``reset`` adds."""

    currency: str


TASKS: list[ShopTask] = [{"task_id": "shop-0", "item": "tea", "price": 3}, {"task_id": "shop-1", "item": "map", "price": 9, "note": "gift"}]
PRICES = {"tea": 3, "map": 9, "pen": 2}


class ShopOracle(ScriptedPolicy):
    def script(self, env: Any) -> Script:
        yield format_tool_call("buy", {"item": env.task["item"]})


class ShopEnv(ToolEnv[ShopTask]):
    """Shop-v0: buy the item the customer asks for.

    ## Description

    One shop, one customer, one item to buy.

    ## Action Space

    An assistant turn calling ``buy``.

    ## Observation Space

    Chat messages.

    ## Rewards

    1.0 for the right item, else 0.

    ## Starting State

    The customer names an item.

    ## Episode End

    Terminated after a purchase; truncated after ``max_turns``.

    ## Arguments

    The :class:`agentgym.env.ToolEnv` arguments.

    ## Version History

    - v0: this test.
    """

    info_type = ShopInfo
    reset_info_type = ShopResetInfo
    default_max_turns = 3

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", TASKS)
        super().__init__(**kwargs)

    def setup_episode(self, task: ShopTask) -> list[R.ChatMessage]:
        self.bought: list[str] = []
        return [{"role": "system", "content": "You run a shop."}, {"role": "user", "content": f"One {task['item']}, please."}]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = super().reset(seed=seed, options=options)
        return observation, info | {"currency": "EUR"}

    @tool
    def buy(self, item: str) -> str:
        """Buy an item.

        Args:
            item: the item's name.
        """
        if item not in PRICES:
            raise ToolError(f"no {item!r} in stock")
        self.bought.append(item)
        return f"sold: {item}"

    def is_done(self) -> bool:
        return bool(self.bought)

    def compute_reward(self) -> RewardResult:
        assert self.task is not None
        right = self.bought == [self.task["item"]]
        return RewardResult(float(right), "the right item" if right else "not the right item", passed=right)

    def extra_info(self) -> dict[str, Any]:
        return {"purchases": len(self.bought)}

    @classmethod
    def policies(cls) -> dict[str, Any]:
        return {**super().policies(), "oracle": ShopOracle}


gym.register(ENV_ID, entry_point=ShopEnv)


def test_it_declares_its_own_record_types() -> None:
    assert env_class(ENV_ID) is ShopEnv
    declared = ShopEnv.record_types()
    assert declared.task is ShopTask
    assert declared.step_info.__required_keys__ == R.StepInfo.__required_keys__ | {"purchases"}
    assert declared.reset_info.__required_keys__ == R.ResetInfo.__required_keys__ | {"purchases", "currency"}


def test_it_makes_plays_and_records_like_a_bundled_environment() -> None:
    env = make_env(ENV_ID)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        observation, info = env.reset(seed=0, options={"task_id": "shop-1"})
        assert_matches(info, R.ResetInfo, env_id=ENV_ID)
        _, reward, terminated, _, step_info = env.step(format_tool_call("buy", {"item": "map"}))
        assert (reward, terminated, step_info["purchases"]) == (1.0, True, 1)
        assert_matches(step_info, R.StepInfo, env_id=ENV_ID)
        assert problems(step_info, R.StepInfo)  # the core's StepInfo alone does not declare "purchases"
        for task in env.unwrapped.tasks:
            assert_matches(task, ShopTask)
    finally:
        env.close()
    records = [*rollout(ENV_ID, "oracle", episodes=2, seed=0), *rollout(ENV_ID, "random", episodes=1, seed=1)]
    assert [r["success"] for r in records[:2]] == [True, True]
    for record in records:
        assert_matches(record, R.EpisodeRecord, env_id=ENV_ID)


def test_an_undeclared_info_entry_fails_its_types() -> None:
    class Leaky(ShopEnv):
        def extra_info(self) -> dict[str, Any]:
            return super().extra_info() | {"secret": 1}

    env = Leaky()
    try:
        _, info = env.reset(seed=0)
    finally:
        env.close()
    assert problems(info, Leaky.record_types().reset_info) == ["record: key 'secret' is not declared in LeakyResetInfo"]


def test_its_page_is_generated_from_its_docstring(tmp_path: Path) -> None:
    pages = {ENV_ID: "shop.md"}
    assert docs.missing_sections(ShopEnv) == []
    assert docs.write_pages(tmp_path, pages) == [tmp_path / "shop.md"]
    page = (tmp_path / "shop.md").read_text(encoding="utf-8")
    assert page.startswith(f"# {ENV_ID} — buy the item the customer asks for\n")
    assert f"{__name__}:ShopEnv" in docs.begin_marker(ENV_ID) and "## Rewards\n\n1.0 for the right item, else 0." in page
    assert docs.check_pages(tmp_path, pages) == []
    (tmp_path / "shop.md").write_text(page.replace("1.0 for the right item", "2.0"), encoding="utf-8")
    assert any("differs" in p for p in docs.check_pages(tmp_path, pages))


def test_an_unregistered_id_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown environment 'agentgym-test/Nope-v0'"):
        env_class("agentgym-test/Nope-v0")
