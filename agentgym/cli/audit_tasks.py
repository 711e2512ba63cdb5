"""``agentgym audit-tasks``: check tasks for ones a trivial agent solves (CodeExec-v0: a constant function or the most common
visible answer passes the hidden tests; TauRetail-v0: an agent that does nothing, or transfers to a human at once, is rewarded)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from agentgym.cli._common import CLIError, json_object

__all__ = ["add_parser", "run"]

AUDITED = ("agentgym/CodeExec-v0", "agentgym/TauRetail-v0")


def add_parser(commands: Any) -> None:
    p = commands.add_parser("audit-tasks", help="check tasks for ones a trivial agent solves (CodeExec-v0, TauRetail-v0)")
    p.add_argument("--env", default=AUDITED[0], choices=AUDITED, help=f"the environment whose tasks to audit (default {AUDITED[0]})")
    p.add_argument("--tasks", metavar="FILE", help="a task file (CodeExec, HumanEval or MBPP format; default: CodeExec-v0's bundled tasks)")
    p.add_argument("--split", action="append", choices=("train", "val", "test"), help="TauRetail-v0: audit this split (repeatable; default: all three)")
    p.add_argument("--env-kwargs", type=json_object, default={}, metavar="JSON", help="TauRetail-v0: keyword arguments for gym.make, e.g. '{\"strict\": true}'")
    p.add_argument("--json", action="store_true", help="print every task's baseline scores as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.env == "agentgym/TauRetail-v0":
        if args.tasks:
            raise CLIError("--tasks audits code tasks; for TauRetail-v0 pass a task file as --env-kwargs '{\"tasks\": FILE}'")
        return _audit_tau_retail(args)
    if args.split or args.env_kwargs:
        raise CLIError("--split and --env-kwargs apply to --env agentgym/TauRetail-v0 only")
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


def _audit_tau_retail(args: argparse.Namespace) -> int:
    from agentgym.envs.registration import make_env
    from agentgym.envs.tau_retail.audit import audit_tasks

    splits = ["all"] if "tasks" in args.env_kwargs else args.split or ["train", "val", "test"]
    audits = []
    for split in splits:
        kwargs = args.env_kwargs if split == "all" else {"split": split, **args.env_kwargs}
        audits += audit_tasks(make_env(args.env, **kwargs))
    failed = [a for a in audits if not a.passed]
    if args.json:
        print(json.dumps([{**dataclasses.asdict(a), "passed": a.passed} for a in audits], indent=1))
    else:
        print(
            f"{len(audits)} tasks; solved by doing nothing: {sum(a.do_nothing > 0 for a in audits)}, by transferring first: {sum(a.transfer_first > 0 for a in audits)}"
        )
        for audit in failed:
            print(f"FAIL {audit.task_id}: do nothing {audit.do_nothing:.1f}, transfer first {audit.transfer_first:.1f}")
        print(f"{len(failed)} task(s) rewarded without any work" if failed else "no task rewards an agent that does no work")
    return 1 if failed else 0
