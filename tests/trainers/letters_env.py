"""A toy environment for the trainer tests ("Letters"): a graded reward from a short prompt.

It asks for a word; its reward grows with the share of the word's letters among the first
characters the assistant writes and jumps when the word is submitted with the ``answer`` tool.
Random text already scores a spread of rewards, so GRPO gets non-zero advantages even from an
untrained tiny model, and its prompt is short, so the real default model can run on it in a test.
Importing the module registers it as ``TOY_ENV``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym.env import ToolEnv
from agentgym.parsing import ParsedAction, format_tool_call
from agentgym.tools import tool
from agentgym.verifiers.result import RewardResult

TOY_ENV = "agentgym-test/Letters-v0"
WORDS = ("apple", "river", "stone", "cloud", "grape", "lemon", "tiger", "piano")
TOY_TASKS = [{"task_id": f"letters-{i}", "word": w} for i, w in enumerate(WORDS)]


class LettersEnv(ToolEnv):
    """Say a word, then submit it with ``answer``."""

    default_max_turns = 2

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("tasks", TOY_TASKS)
        super().__init__(**kwargs)

    def setup_episode(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        self._answer: str | None = None
        self._said: list[str] = []
        return [
            {"role": "system", "content": "Submit the word the user asks for with the answer tool."},
            {"role": "user", "content": f"The word is {task['word']}."},
        ]

    @tool
    def answer(self, text: str) -> str:
        """Submit the word.

        Args:
            text: the word.
        """
        self._answer = text
        return "Answer recorded."

    def respond(self, parsed: ParsedAction) -> list[dict[str, Any]]:
        self._said.append(parsed.content)
        return [{"role": "user", "content": "Now submit it with the answer tool."}]

    def is_done(self) -> bool:
        return self._answer is not None

    def compute_reward(self) -> RewardResult:
        word = self.task["word"]
        text = " ".join([*self._said, self._answer or ""]).lower()[:12]
        letters = sum(ch in text for ch in word) / len(word)
        correct = float((self._answer or "").strip().lower() == word)
        return RewardResult(0.5 * letters + 0.5 * correct, "toy reward", {"letters": letters, "correct": correct}, bool(correct))

    @classmethod
    def policies(cls) -> dict[str, Any]:
        return {**super().policies(), "oracle": LettersOracle}


def split_verdict(self: LettersEnv) -> RewardResult:
    """A reward for tests that need outcomes to differ within groups: the untrained model never
    submits the word, but the length of what it says passes this verdict in some members of a
    group and not in others; the shaped reward also varies with that length."""
    text = " ".join(self._said)
    passed = len(text) % 4 == 0
    return RewardResult(0.5 * passed + 0.001 * len(text), "toy", {}, passed)


class LettersOracle:
    """Says the word, then submits it."""

    def __init__(self, seed: int = 0) -> None:
        self._word = ""

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self._word = env.task["word"]
        self._turn = 0

    def act(self, observation: list[dict[str, Any]]) -> str:
        self._turn += 1
        return f"The word is {self._word}." if self._turn == 1 else format_tool_call("answer", {"text": self._word})


if TOY_ENV not in gym.registry:
    gym.register(id=TOY_ENV, entry_point=LettersEnv)
