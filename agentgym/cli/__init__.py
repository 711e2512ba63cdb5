"""The ``agentgym`` command line: list environments, play one, roll out scripted policies, evaluate and train models.

Each command is one module of this package with the same ``add_parser(commands)`` function, which
adds its sub-command parser and sets ``run``; :data:`COMMANDS` lists them in ``agentgym --help``'s
order. Every command turns bad input into one clear line on stderr and exit status 2, never a
traceback; a full disk is one line too (status 1), saying how to continue. Heavy imports (torch,
transformers, rich) happen only when a command runs.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Sequence

import gymnasium as gym

from agentgym.cli import audit_tasks, evaluate, experiment, inspect_trajectory, list_envs, mcp_serve, play, proxy, rollout, serve, sft, train, validate_reward
from agentgym.cli._common import CLIError
from agentgym.tools import InfraError

__all__ = ["COMMANDS", "CLIError", "main"]

COMMANDS = (list_envs, play, rollout, validate_reward, audit_tasks, serve, mcp_serve, proxy, evaluate, inspect_trajectory, train, sft, experiment)
"""The command modules, in the order ``agentgym --help`` lists them."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("agentgym: interrupted", file=sys.stderr)
        return 130
    except (CLIError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError, gym.error.Error) as exc:
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2
    except InfraError as exc:  # a scripted episode's machinery failed (model episodes record it instead)
        print(f"agentgym: infrastructure error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # Training and experiments write checkpoints atomically, so what was finished is kept.
        where = f" (writing {exc.filename})" if exc.filename else ""
        print(
            f"agentgym: error: the disk is full{where}; free some space, then run the same command again to continue "
            "(agentgym experiment resumes by itself, agentgym train with --resume)",
            file=sys.stderr,
        )
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description="Deterministic multi-turn tool environments for agent RL.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        before = set(commands.choices)
        command.add_parser(commands)
        for name in set(commands.choices) - before:
            sub = commands.choices[name]
            sub.description = sub.description or _description(command.__doc__ or "")
    return parser


def _description(docstring: str) -> str:
    """A command's ``--help`` description: its module docstring's first paragraph, less the ````agentgym NAME``: ```` it opens with."""
    summary = " ".join(docstring.strip().split("\n\n")[0].split()).replace("``", "")
    summary = summary.split(": ", 1)[1] if summary.startswith("agentgym") and ": " in summary else summary
    return summary[:1].upper() + summary[1:]
