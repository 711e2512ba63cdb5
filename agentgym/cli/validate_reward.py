"""``agentgym validate-reward``: check a reward against hand-labelled trajectories and built-in probes."""

from __future__ import annotations

import argparse
import json
from typing import Any, cast

from agentgym.cli._common import positive_int

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("validate-reward", help="check a reward against hand-labelled trajectories")
    p.add_argument("labels", metavar="LABELS.jsonl", help="labelled episode records (rollout format plus a 'label')")
    p.add_argument("--env", help="environment for the oracle/canary checks (default: the records' env)")
    p.add_argument("--reward", help="module:function scoring a record (default: the environment's own reward)")
    p.add_argument("--min-agreement", type=float, default=0.95, help="minimum pass/fail accuracy (default 0.95)")
    p.add_argument("--probe-episodes", type=positive_int, default=10, help="episodes per oracle/canary policy (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.offline.validation import env_reward, load_reward, validate
    from agentgym.records import LabelledRecord
    from agentgym.rollouts.io import read_jsonl

    reward = load_reward(args.reward) if args.reward else env_reward
    records = cast("list[LabelledRecord]", read_jsonl(args.labels))  # JSON lines; validate() checks every label
    report = validate(records, reward, env_id=args.env, min_agreement=args.min_agreement, probe_episodes=args.probe_episodes, reward_spec=args.reward)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    return 0 if report.ok else 1


def _print_report(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    stats = Table("agreement", "value", title=f"{report.n} labelled trajectories")
    stats.add_row("accuracy", f"{report.accuracy:.3f} (min {report.min_agreement:.2f})")
    stats.add_row("Cohen's kappa", f"{report.kappa:.3f}")
    if report.spearman is not None:
        stats.add_row("Spearman (scored labels)", f"{report.spearman:.3f}")
    if report.mae is not None:
        stats.add_row("mean abs. error (scored labels)", f"{report.mae:.3f}")
    console.print(stats)
    confusion = Table("", "reward: pass", "reward: fail", title="confusion")
    confusion.add_row("label: pass", str(report.confusion["true_pass"]), str(report.confusion["false_fail"]))
    confusion.add_row("label: fail", str(report.confusion["false_pass"]), str(report.confusion["true_fail"]))
    console.print(confusion)
    checks = Table("check", "result", "detail", title="built-in checks")
    for check in report.checks:
        checks.add_row(check.name, "[green]pass[/]" if check.passed else "[red]FAIL[/]", check.detail)
    console.print(checks)
    if report.disagreements:
        table = Table("task", "label", "reward", "reward's reason", "label's justification", title="disagreements")
        for d in report.disagreements:
            label = ("pass" if d.label["pass"] else "fail") + (f" {d.label['score']:.2f}" if d.label.get("score") is not None else "")
            table.add_row(d.task_id, label, f"{d.score:.3f} ({'pass' if d.passed else 'fail'})", d.reason, d.label["justification"])
        console.print(table)
    console.print("[bold green]reward validated[/]" if report.ok else "[bold red]reward NOT validated[/]")
