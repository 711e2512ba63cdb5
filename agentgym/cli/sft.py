"""``agentgym sft``: the SFT phase alone (``grpo.steps`` is 0) on oracle or recorded successful trajectories, and its report."""

from __future__ import annotations

import argparse
from typing import Any

from agentgym.cli._training import run_training, training_arguments

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("sft", help="supervised fine-tuning on oracle (or recorded) successful trajectories")
    training_arguments(p, steps_help="SFT steps (sft.steps)")
    p.add_argument("--source", help="'oracle' (default) or a JSONL file of episode records (sft.source)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_training(args, {"sft.steps": args.steps, "sft.source": args.source, "grpo.steps": 0})
