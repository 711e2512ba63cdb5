"""``agentgym inspect``: show one trajectory written by ``agentgym eval --out`` with trained and masked tokens coloured."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentgym.cli._common import CLIError, check_model_path

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("inspect", help="show a trajectory from an eval JSONL file with trained tokens coloured")
    p.add_argument("file", metavar="FILE.jsonl", help="a file written by agentgym eval --out")
    p.add_argument("--index", type=int, default=0, help="which line (default 0; negative counts from the end)")
    p.add_argument("--model", help="tokenizer to decode with (default: the one the file names)")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page instead of printing")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym.models import ModelLoadError, load_tokenizer
    from agentgym.offline.inspection import render_html, render_rich
    from agentgym.rollouts.io import read_jsonl
    from agentgym.rollouts.trajectory import Trajectory

    lines = read_jsonl(args.file)
    if not lines:
        raise CLIError(f"{args.file} holds no trajectories")
    if not -len(lines) <= args.index < len(lines):
        raise CLIError(f"--index {args.index} is out of range: {args.file} holds {len(lines)} trajectories")
    line = lines[args.index]
    if not isinstance(line, dict) or "trajectory" not in line:
        raise CLIError(f"line {args.index} of {args.file} has no trajectory (write files with agentgym eval --out)")
    try:
        trajectory = Trajectory.from_dict(line["trajectory"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CLIError(f"line {args.index} of {args.file} holds a malformed trajectory: {exc}") from None
    model = args.model or line.get("tokenizer")
    check_model_path(model)
    try:
        tokenizer = load_tokenizer(model)
    except ModelLoadError as exc:
        raise CLIError(str(exc)) from None
    title = (
        f"{line.get('env_id', '?')} task {line.get('task_id', '?')}: reward {line.get('reward', 0.0):.3f}, "
        f"success {line.get('success')}, stop {line.get('stop_reason', '?')}"
    )
    if args.html:
        Path(args.html).write_text(render_html(trajectory, tokenizer, title=title), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    else:
        console = Console(highlight=False)
        console.print(title, style="bold")
        console.print(render_rich(trajectory, tokenizer))
    return 0
