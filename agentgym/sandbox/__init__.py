"""Sandboxed execution of untrusted Python code, and grading that the code cannot fool.

``Sandbox(backend="auto", limits=Limits(...))`` gives an episode a private workspace;
``run(code, files=..., stdin=...)`` executes code in it, isolated by Linux namespaces (local
backend) or a container (Docker backend), and returns an :class:`ExecResult`.
``Grader().grade(code, tests)`` scores a submission against hidden tests it cannot see or fool.
What is and is not isolated is stated in ``docs/security.md``.
"""

from agentgym.sandbox.backend import Backend, SandboxProcess
from agentgym.sandbox.grading import AssertTests, CheckTests, FunctionTests, Grade, Grader, IOCase
from agentgym.sandbox.limits import Limits
from agentgym.sandbox.result import ExecResult, SandboxError, SandboxLost, SandboxUnavailable
from agentgym.sandbox.sandbox import BACKENDS, Sandbox, get_backend

__all__ = [
    "BACKENDS", "AssertTests", "Backend", "CheckTests", "ExecResult", "FunctionTests", "Grade", "Grader", "IOCase", "Limits",
    "Sandbox", "SandboxError", "SandboxLost", "SandboxProcess", "SandboxUnavailable", "get_backend",
]  # fmt: skip
