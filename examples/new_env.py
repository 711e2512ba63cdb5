"""A new environment in under 100 lines: look two temperatures up, answer their difference.

    python examples/new_env.py

What a subclass of ``agentgym.ToolEnv`` provides: its tasks, its tools (typed methods marked
``@tool``; the JSON Schemas come from the hints and the docstring), the opening messages, the
end condition and the reward. Parsing the model's text, validating arguments, error messages,
turn limits, seeding and episode records come from the base class.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

from agentgym import ToolEnv, ToolError, tool
from agentgym.parsing import format_tool_call
from agentgym.verifiers import RewardResult, numeric_match

TEMPERATURES = {"Oslo": 4, "Lima": 19, "Cairo": 27, "Hanoi": 31, "Quito": 14, "Perth": 22}
CITIES = sorted(TEMPERATURES)
TASKS = [{"task_id": f"temps-{i}", "a": a, "b": b} for i, (a, b) in enumerate((a, b) for a in CITIES for b in CITIES if a < b)]


class TemperatureGapEnv(ToolEnv):
    """How much warmer is one city than another? Look both up, then answer the difference."""

    default_max_turns = 5

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", TASKS)  # no split files: the same tasks for every split
        super().__init__(**kwargs)

    def setup_episode(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        self._answer: str | None = None
        return [
            {"role": "system", "content": "Use the tools. Temperatures are in degrees Celsius."},
            {"role": "user", "content": f"How many degrees warmer is {task['b']} than {task['a']} right now?"},
        ]

    @tool
    def temperature(self, city: str) -> str:
        """The current temperature of a city.

        Args:
            city: the city's name, e.g. "Oslo".
        """
        if city not in TEMPERATURES:
            raise ToolError(f"unknown city {city!r}; known: {', '.join(CITIES)}")  # the model reads this
        return f"{TEMPERATURES[city]} °C"

    @tool
    def answer(self, degrees: str) -> str:
        """Submit the final answer; the episode ends.

        Args:
            degrees: the difference in degrees Celsius (negative when the second city is colder).
        """
        self._answer = degrees
        return "Answer recorded."

    def is_done(self) -> bool:
        return self._answer is not None

    def compute_reward(self) -> RewardResult:
        assert self.task is not None
        expected = TEMPERATURES[self.task["b"]] - TEMPERATURES[self.task["a"]]
        if self._answer is None:
            return RewardResult(0.0, "no answer", passed=False)
        return numeric_match(self._answer, expected, extract=None)


gym.register("examples/TemperatureGap-v0", entry_point=TemperatureGapEnv)


def main() -> None:
    env = gym.make("examples/TemperatureGap-v0")
    check_env(env.unwrapped, skip_render_check=True)
    messages, _ = env.reset(seed=0, options={"task_id": "temps-0"})
    print(messages[-1]["content"])
    task = env.unwrapped.task
    for action in (
        format_tool_call("temperature", {"city": task["a"]}),
        format_tool_call("temperature", {"city": "Atlantis"}),  # a tool error: observed, counted, the episode goes on
        format_tool_call("temperature", {"city": task["b"]}),
        format_tool_call("answer", {"degrees": str(TEMPERATURES[task["b"]] - TEMPERATURES[task["a"]])}),
    ):
        observation, reward, terminated, _, info = env.step(action)
        print(f"-> {observation[-1]['content']!r}  reward={reward} terminated={terminated} tool_errors={info['tool_errors']}")
    assert terminated and reward == 1.0


if __name__ == "__main__":
    main()
