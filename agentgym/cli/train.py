"""``agentgym train``: run (or resume) an SFT warm start (optional) then GRPO on an environment, and print the run's report."""

from __future__ import annotations

import argparse
from typing import Any

from agentgym.cli._training import run_training, training_arguments

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("train", help="SFT warm start (optional) then GRPO on an environment; writes a run folder")
    training_arguments(p, steps_help="GRPO steps (grpo.steps)")
    p.add_argument("--sft-steps", type=int, help="SFT warm-start steps before GRPO (sft.steps)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_training(args, {"grpo.steps": args.steps, "sft.steps": args.sft_steps})
