"""``agentgym rollout``: run a scripted policy and write its trajectories (JSON lines or Parquet), each as it finishes; an interrupted run keeps them, and the same command resumes it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, cast

from agentgym.cli._common import env_arguments, make, positive_int, quiet_argument

if TYPE_CHECKING:
    from agentgym.records import EpisodeRecord

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("rollout", help="run a scripted policy and write trajectories as JSONL")
    env_arguments(p)
    p.add_argument("--policy", default="oracle", help="scripted policy: oracle, random, do_nothing, or one the env adds")
    p.add_argument("--episodes", type=positive_int, default=10, help="number of episodes (default 10)")
    p.add_argument("--out", required=True, help="output file: JSON lines, or Parquet when it ends in .parquet")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    quiet_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.progress import ProgressReport
    from agentgym.rollouts.episode_file import EpisodeFile
    from agentgym.rollouts.scripted import make_policy, rollout, summarize

    env = make(args)  # validates the id, kwargs and policy before the output file is touched
    make_policy(env, args.policy, args.seed)
    env.close()
    settings = {"command": "rollout", "env": args.env, "policy": args.policy, "episodes": args.episodes, "seed": args.seed, "split": args.split}
    out = EpisodeFile(args.out, {**settings, "env_kwargs": args.env_kwargs}, key=lambda record: record["seed"] - args.seed)
    records = cast("list[EpisodeRecord]", out.open())
    if records:
        print(f"agentgym: resuming: {len(records)} of {args.episodes} episodes are already in {args.out}", file=sys.stderr)
    try:
        with ProgressReport(enabled=not args.quiet) as progress:
            progress.phase("episodes", args.episodes, completed=len(records))
            todo = rollout(args.env, args.policy, episodes=args.episodes, seed=args.seed, split=args.split, env_kwargs=args.env_kwargs, skip=out.keys())
            for record in todo:
                records.append(record)
                out.write(record)
                progress.advance("episodes", f"{sum(r['turns'] for r in records)} turns")
    except KeyboardInterrupt:
        out.close()
        records = records[: out.finished]  # Ctrl-C may have come before the last one was written
        print(
            f"agentgym: interrupted: {len(records)} of {args.episodes} episodes finished; they are in {args.out}, and the same command resumes the run",
            file=sys.stderr,
        )
        if records:
            _print_summary({"env": args.env, "policy": args.policy, "split": args.split, **summarize(records), "out": args.out}, args.json)
        return 130
    out.complete()
    _print_summary({"env": args.env, "policy": args.policy, "split": args.split, **summarize(records), "out": args.out}, args.json)
    return 0


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("metric", "value", title=f"{summary['env']} — {summary['policy']} ({summary['split']})")
    for key, value in summary.items():
        if key not in ("env", "policy", "split"):
            table.add_row(key.replace("_", " "), f"{value:.3f}" if isinstance(value, float) else str(value))
    Console().print(table)
