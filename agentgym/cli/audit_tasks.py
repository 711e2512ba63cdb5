"""``agentgym audit-tasks``: check code tasks for hidden tests that a constant function (or the most common visible answer) passes."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("audit-tasks", help="check code tasks for hidden tests that a constant function passes")
    p.add_argument("--tasks", metavar="FILE", help="a task file (CodeExec, HumanEval or MBPP format; default: CodeExec-v0's bundled tasks)")
    p.add_argument("--json", action="store_true", help="print every task's baseline scores as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.envs.code_exec.audit import MAX_BASELINE_SCORE, audit_tasks, bundled_tasks
    from agentgym.envs.code_exec.loaders import load_tasks

    audits = audit_tasks(load_tasks(args.tasks) if args.tasks else bundled_tasks())
    failed = [a for a in audits if not a.passed]
    if args.json:
        print(json.dumps([{**dataclasses.asdict(a), "passed": a.passed} for a in audits], indent=1))
    else:
        constant = [a.constant for a in audits]
        print(f"{len(audits)} tasks; constant function: mean {sum(constant) / len(constant):.3f}, max {max(constant):.3f}")
        visible = [a.majority_visible for a in audits if a.majority_visible is not None]
        if visible:
            print(f"most common visible answer: mean {sum(visible) / len(visible):.3f}, max {max(visible):.3f}")
        for audit in failed:
            print(f"FAIL {audit.task_id}: constant {audit.constant:.2f}, most common visible answer {audit.majority_visible}")
        print(f"{len(failed)} task(s) above {MAX_BASELINE_SCORE}" if failed else f"every task keeps both baselines at or below {MAX_BASELINE_SCORE}")
    return 1 if failed else 0
