"""Write a Python function, test it in a sandbox, submit it against hidden tests: :class:`CodeExecEnv`
(agentgym/CodeExec-v0), its tools, limits and grading. The class docstring documents the
environment in Gymnasium's sections; ``docs/envs/code_exec.md`` is generated from it."""

from __future__ import annotations

import contextlib
import dataclasses
import platform
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from agentgym.env import Message, ToolEnv
from agentgym.envs.code_exec.loaders import grading_spec, load_tasks
from agentgym.envs.code_exec.records import CodeExecInfo, CodeExecTask
from agentgym.parsing import ParsedAction
from agentgym.sandbox import ExecResult, Limits, Sandbox, SandboxError, SandboxLost, SandboxProcess, get_backend
from agentgym.sandbox.grading import GRADING_LIMITS, Grade, Grader
from agentgym.tools import InfraError, ToolError, tool
from agentgym.verifiers import RewardResult, weighted_sum

RUN_LIMITS = Limits(wall_time_s=10.0, cpu_time_s=10, max_output_bytes=16 << 10)
WEIGHTS = {"tests": 1.0, "submitted": 0.0}

SYSTEM_PROMPT = """You are a careful Python programmer solving a programming task.

Tools:
- run_python(code): runs code with Python {version} in a sandbox, like `python -c`, in a private
  working folder whose files persist for the rest of this task. You see the exit status, standard
  output and standard error. Only the standard library is available; there is no network. Each call
  may run for {wall:g} seconds.
- submit(code): submits your solution, a Python module defining the requested function, and ends
  the task. It is graded against hidden tests in a fresh folder: only the code you submit counts,
  not files you wrote with run_python. Submit once, when you are confident.

Test your code with run_python before you submit."""


# Public task sets shipped with their licenses, by the name ``tasks=`` accepts.
BUNDLED_SETS = {"humaneval": "humaneval/HumanEval.jsonl.gz", "mbpp": "mbpp/mbpp.jsonl.gz", "mbpp-sanitized": "mbpp/sanitized-mbpp.json.gz"}


def bundled_set(name: str) -> Traversable:
    """The packaged file of the public task set ``name`` (a key of :data:`BUNDLED_SETS`)."""
    return resources.files("agentgym.tasks") / "code_exec" / BUNDLED_SETS[name]


class CodeExecEnv(ToolEnv[CodeExecTask]):
    """agentgym/CodeExec-v0: write, test and submit Python code.

    ## Description

    The agent gets a programming task: a function to write, its specification and a few visible
    examples. It can run any Python code in the episode's sandbox (``run_python``), where files it
    writes persist for the rest of the episode, and it ends the episode by submitting a module
    (``submit``) that is graded against hidden tests. Everything runs in the sandbox of
    :mod:`agentgym.sandbox` (Linux namespaces, or Docker): no network, none of the host's files, an
    unprivileged user, resource limits; see ``docs/security.md``.

    Task sources: the bundled set (310 generated tasks from 69 problem families, split by family
    into train/val/test); HumanEval (164 tasks) and MBPP (974, or its 427 hand-verified ones), which
    ship under ``tasks/code_exec/`` with their licenses, as ``tasks="humaneval"``, ``"mbpp"`` or
    ``"mbpp-sanitized"``; or any HumanEval- or MBPP-format JSONL file (plain or gzipped) passed as
    ``tasks=PATH``.

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``. Tools: ``run_python(code)`` and ``submit(code)``.

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`). ``reset`` returns the
    system message (how the sandbox and the tools work) and the task as a user message. ``step``
    returns one ``tool`` message per call: for ``run_python`` the exit status, standard output and
    standard error with marks where output was truncated or the time limit struck; for ``submit``
    how many hidden tests passed. A turn without a tool call gets a short nudge from the user.

    ## Rewards

    Given once, on the final step: the fraction of hidden tests the submission passes, in [0, 1]
    (HumanEval tasks: 1.0 iff the dataset's ``check`` passes; MBPP tasks: the fraction of
    ``test_list`` asserts), or -1.0 when the submission crashes, exits or times out before any test
    runs (while loading, or on the first call before any answer). No submission scores 0. The grader compares results outside the submission's interpreter
    (exact builtin types), so printed verdicts, exit codes and objects with a lying ``__eq__`` count
    for nothing. Components: ``tests`` (the score) and ``submitted`` (a zero-weight gate).
    ``info["success"]`` is true when every hidden test passed.

    ## Starting State

    A task from the chosen split (or file), drawn with the env's seeded RNG or named by
    ``options={"task_id": ...}``, and an empty sandbox workspace.

    ## Episode End

    Terminates when ``submit`` runs. Truncates after ``max_turns`` assistant turns (default 10).

    ## Arguments

    ``split`` (``train``/``val``/``test``), ``tasks`` (``"humaneval"``, ``"mbpp"``,
    ``"mbpp-sanitized"``, a JSONL/JSONL.gz path in CodeExec, HumanEval or MBPP format, a JSON array
    file, or a list of task dicts), ``task_ids``, ``max_turns`` (default
    10), ``max_tool_calls`` per turn (default 8), ``render_mode`` (``"ansi"``), ``backend``
    (``"auto"``, ``"local"`` or ``"docker"``), ``limits`` (:class:`agentgym.sandbox.Limits` of each
    ``run_python`` call; default 10 s of wall-clock and CPU time, 1 GiB of address space, 16 KiB of
    output per stream) and ``grading_limits`` (of each grading sandbox; default 10 s, 8 MiB of
    protocol output). Making the environment fails with :class:`agentgym.sandbox.SandboxUnavailable`
    when no backend can run here.

    ## Version History

    - v0: initial release (310 bundled tasks; HumanEval and MBPP loaders).
    """

    task_family = "code_exec"
    info_type = CodeExecInfo
    default_max_turns = 10

    def __init__(
        self,
        *,
        backend: str = "auto",
        limits: Limits | None = None,
        grading_limits: Limits | None = None,
        split: str = "train",
        tasks: str | Path | Sequence[dict[str, Any]] | None = None,
        task_ids: Sequence[str] | None = None,
        max_turns: int | None = None,
        max_tool_calls: int = 8,
        render_mode: str | None = None,
    ):
        super().__init__(split=split, tasks=tasks, task_ids=task_ids, max_turns=max_turns, max_tool_calls=max_tool_calls, render_mode=render_mode)
        self.backend = get_backend(backend)  # fail now, clearly, if nothing can sandbox code here
        self.limits = limits or RUN_LIMITS
        self.grader = Grader(self.backend, grading_limits or GRADING_LIMITS)
        self._sandbox: Sandbox | None = None
        self._opened_ahead = False  # by the reset, and nothing has started in it yet
        self.grade: Grade | None = None
        self.submission: str | None = None
        self.runs = 0

    # ------------------------------------------------------------------ episode lifecycle

    def load_tasks(self, source: str | Path | Sequence[dict[str, Any]]) -> list[CodeExecTask]:
        if isinstance(source, str) and source in BUNDLED_SETS:  # a name, not a path (write ./mbpp for a file)
            with resources.as_file(bundled_set(source)) as path:
                return super().load_tasks(load_tasks(path))
        return super().load_tasks(load_tasks(source))

    def setup_episode(self, task: CodeExecTask) -> list[Message]:
        ran_code = self.runs > 0
        # The last episode's prepared run is stopped without waiting for it (close() waits).
        self._close_sandbox(wait=False)
        self.grade = None
        self.submission = None
        self.runs = 0
        self._opened_ahead = False
        if ran_code:
            # The last episode ran code, so this one likely will: its workspace opens now and its
            # first run sets up during the model's first turn. (An episode that only submits opens
            # none: grading needs a fresh one of its own.)
            with contextlib.suppress(SandboxError):  # the first run_python opens it, or says why not
                self._sandbox = Sandbox(self.backend, self.limits)
                self._opened_ahead = True
                self._sandbox.prepare()
        system = SYSTEM_PROMPT.format(version=platform.python_version(), wall=self.limits.wall_time_s)
        return [{"role": "system", "content": system}, {"role": "user", "content": task["prompt"]}]

    def respond(self, parsed: ParsedAction) -> list[Message]:
        return [{"role": "user", "content": "Please continue: test your code with run_python, then submit it with submit."}]

    def is_done(self) -> bool:
        return self.grade is not None

    def close(self) -> None:
        self._close_sandbox()
        self.grader.close()
        super().close()

    # --------------------------------------------------------------------------- tools

    @tool
    def run_python(self, code: str) -> str:
        """Run Python code in this task's sandbox and return its exit status and output.

        Args:
            code: Python source, run like `python -c` in the task's working folder; files written
                there persist across calls.
        """
        try:
            sandbox, process = self._start(code)
            # The next call's isolation is set up while this code runs and the model reads its output;
            # not in the episode's last turn, where the reset would only throw it away.
            if not self.in_last_turn():
                with contextlib.suppress(SandboxError):  # a backend failing here fails the next run, clearly
                    sandbox.prepare()
            result = process.wait()
        except SandboxLost as exc:  # the episode's workspace went with its server: not the model's doing
            raise InfraError(f"run_python: {exc}") from None
        except SandboxError as exc:
            raise ToolError(f"the sandbox failed to run the code ({exc}); try again") from None
        self.runs += 1
        return format_result(result, self.limits)

    @tool
    def submit(self, code: str) -> str:
        """Submit your final solution; it is graded against hidden tests and the task ends.

        Args:
            code: a Python module defining the requested function (and anything it needs).
        """
        assert self.task is not None
        grade = self.grader.grade(code, grading_spec(self.task))  # never raises: a failed grading is a failed submission
        if grade.infra_error is not None:  # ... unless the machinery failed under it (see agentgym.sandbox.grading)
            raise InfraError(f"submit: the submission could not be graded: {grade.infra_error}")
        self.submission, self.grade = code, grade
        return f"Submitted. {grade.reason}."

    # -------------------------------------------------------------------------- reward

    def compute_reward(self) -> RewardResult:
        grade = self.grade
        if grade is None:
            tests = RewardResult(0.0, "no solution was submitted", passed=False)
            submitted = RewardResult(0.0, "no solution was submitted", passed=False)
        else:
            tests = RewardResult(grade.score, grade.reason, passed=not grade.crashed and grade.passed == grade.total)
            submitted = RewardResult(1.0, "", passed=True)
        total = weighted_sum({"tests": tests, "submitted": submitted}, WEIGHTS, gate="submitted")
        details = {} if grade is None else {"passed": grade.passed, "total": grade.total, "crashed": grade.crashed}
        return dataclasses.replace(total, passed=bool(tests.passed), details=details)

    def extra_info(self) -> dict[str, Any]:
        return {"sandbox_runs": self.runs}

    # ------------------------------------------------------------------------- helpers

    def _start(self, code: str) -> tuple[Sandbox, SandboxProcess]:
        """Start ``code`` in the episode's sandbox (opened now if the reset did not): it and the run."""
        if self._sandbox is not None:
            try:
                process = self._sandbox.start(code)
            except SandboxLost:
                if not self._opened_ahead:
                    raise
                # Its server stopped after the reset opened it, before anything ran in it: nothing
                # of the episode was lost, so the episode goes on in a new one.
                self._close_sandbox()
            else:
                self._opened_ahead = False
                return self._sandbox, process
        sandbox = self._sandbox = Sandbox(self.backend, self.limits)
        self._opened_ahead = False
        return sandbox, sandbox.start(code)

    def _close_sandbox(self, *, wait: bool = True) -> None:
        if self._sandbox is not None:
            self._sandbox.close(wait=wait)
            self._sandbox = None

    @classmethod
    def policies(cls):
        from agentgym.envs.code_exec.policies import OraclePolicy, PromptOnlyPolicy

        return super().policies() | {"oracle": OraclePolicy, "prompt_only": PromptOnlyPolicy}


def format_result(result: ExecResult, limits: Limits) -> str:
    """What ``run_python`` shows the model: status, both streams, and what was cut or killed."""
    if result.timed_out:
        status = f"killed: the wall-clock limit of {limits.wall_time_s:g} s was reached"
    elif result.returncode < 0:
        status = f"killed by signal {-result.returncode}"
    else:
        status = f"exit status {result.returncode}"
    parts = [status]
    for name, text, cut in (("stdout", result.stdout, result.stdout_truncated), ("stderr", result.stderr, result.stderr_truncated)):
        if text or cut:
            mark = f"\n[{name} truncated: only the first {limits.max_output_bytes} bytes are shown]" if cut else ""
            parts.append(f"--- {name} ---\n{text}{mark}")
    return "\n".join(parts)
