"""The record types of agentgym/CodeExec-v0: its tasks and the entry it adds to ``info``."""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations.
from typing import Any, Literal, NotRequired, TypedDict

from agentgym.records import TaskRecord

__all__ = ["CodeExecInfo", "CodeExecTask"]


class CodeExecTask(TaskRecord):
    """A task of CodeExec-v0, normalised from one of three formats: the bundled ``function`` tasks,
    HumanEval and MBPP (``tasks=PATH``)."""

    format: Literal["function", "humaneval", "mbpp"]
    prompt: str  # the user's message
    solution: str  # a reference solution (the oracle submits it)
    entry_point: NotRequired[str]  # function and humaneval: the function under test
    # function
    signature: NotRequired[str]
    examples: NotRequired[list[dict[str, Any]]]  # {"args": [...], "expected": ...}, shown in the prompt
    tests: NotRequired[list[dict[str, Any]]]  # the hidden tests, in the same form
    family: NotRequired[str]  # the generator's problem family
    # humaneval
    code_prompt: NotRequired[str]
    test: NotRequired[str]  # the dataset's check() source
    # mbpp
    asserts: NotRequired[list[str]]
    names: NotRequired[list[str]]  # the names the asserts call
    setup: NotRequired[str]
    reference: NotRequired[str]


class CodeExecInfo(TypedDict):
    """What CodeExec-v0 adds to every ``info`` (``extra_info()``)."""

    sandbox_runs: int  # run_python calls so far
