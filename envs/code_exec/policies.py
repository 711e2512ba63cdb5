"""Scripted policies for CodeExec-v0: the oracle, and the "submit the prompt" floor.

The oracle tests the task's reference solution with ``run_python`` (on the visible examples
when the task has them), then submits it. ``prompt_only`` submits what the model was given and
nothing more (for HumanEval, the signature with an empty body), which must score 0.
"""

from __future__ import annotations

from typing import Any

from agentgym.parsing import format_tool_call
from agentgym.sandbox._harness import decode


class _ScriptedPolicy:
    def __init__(self, seed: int = 0):
        del seed  # deterministic by construction
        self._turns: list[str] = []

    def reset(self, env: Any, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self._turns = self.script(env.task)

    def act(self, observation: list[dict[str, Any]]) -> str:
        if not self._turns:
            raise RuntimeError("the scripted policy has no turn left (call reset() first)")
        return self._turns.pop(0)

    def script(self, task: dict[str, Any]) -> list[str]:
        raise NotImplementedError


class OraclePolicy(_ScriptedPolicy):
    """Runs the reference solution on the visible examples, then submits it: reward 1.0."""

    def script(self, task: dict[str, Any]) -> list[str]:
        check = task["solution"]
        if task["format"] == "function":
            calls = [f"print({task['entry_point']}(*{decode(e['args'])!r}) == {decode(e['expected'])!r})" for e in task["examples"]]
            check = f"{check}\n" + "\n".join(calls) + "\n"
        return [format_tool_call("run_python", {"code": check}), format_tool_call("submit", {"code": task["solution"]})]


class PromptOnlyPolicy(_ScriptedPolicy):
    """Submits the task's starting code unchanged (HumanEval: the empty body): a floor of 0."""

    def script(self, task: dict[str, Any]) -> list[str]:
        return [format_tool_call("submit", {"code": task.get("code_prompt", f"def {task.get('entry_point', 'solution')}(*args):\n    pass\n")})]
