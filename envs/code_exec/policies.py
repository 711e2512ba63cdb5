"""Scripted policies for CodeExec-v0: the oracle, and the "submit the prompt" floor.

The oracle tests the task's reference solution with ``run_python`` (on the visible examples
when the task has them), then submits it. ``prompt_only`` submits what the model was given and
nothing more (for HumanEval, the signature with an empty body), which must score 0.
"""

from __future__ import annotations

from typing import Any

from agentgym.parsing import format_tool_call
from agentgym.policies import Script, ScriptedPolicy
from agentgym.sandbox._harness import decode


class OraclePolicy(ScriptedPolicy):
    """Runs the reference solution on the visible examples, then submits it: reward 1.0."""

    def script(self, env: Any) -> Script:
        task = env.task
        check = task["solution"]
        if task["format"] == "function":
            calls = [f"print({task['entry_point']}(*{decode(e['args'])!r}) == {decode(e['expected'])!r})" for e in task["examples"]]
            check = f"{check}\n" + "\n".join(calls) + "\n"
        yield format_tool_call("run_python", {"code": check})
        yield format_tool_call("submit", {"code": task["solution"]})


class PromptOnlyPolicy(ScriptedPolicy):
    """Submits the task's starting code unchanged (HumanEval: the empty body): a floor of 0."""

    def script(self, env: Any) -> Script:
        task = env.task
        yield format_tool_call("submit", {"code": task.get("code_prompt", f"def {task.get('entry_point', 'solution')}(*args):\n    pass\n")})
