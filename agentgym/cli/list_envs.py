"""``agentgym list``: list the registered environments and the clients of remote ones, as a table or as JSON; with ``--scores``, what the bundled model scores on each."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("list", help="list the registered environments and the remote clients")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--scores",
        action="store_true",
        help="add the bundled model's measured success (base, SFT, GRPO; 95%% intervals) where an environment has been measured",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.envs.catalogue import CLIENTS, ENVIRONMENTS
    from agentgym.envs.scores import expected_scores

    rows = [(k, "environment", d) for k, (_, d) in ENVIRONMENTS.items()] + [(k, "client", d) for k, (_, d) in CLIENTS.items()]
    scores = expected_scores() if args.scores else {}
    if args.json:
        listed: list[dict[str, Any]] = [{"id": k, "kind": kind, "description": d} for k, kind, d in rows]
        if args.scores:
            for entry in listed:
                entry["expected_scores"] = dataclasses.asdict(scores[entry["id"]]) if entry["id"] in scores else None
        print(json.dumps(listed, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    if not args.scores:
        table = Table("id", "kind", "description")
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return 0
    arms = ("base", "sft", "grpo")
    # The scores take the description's place: an environment's success per arm is what this view is for.
    table = Table("id", *(f"{arm} success [95% CI], n" for arm in arms))
    for k, kind, _ in rows:
        if kind == "environment":
            measured = scores.get(k)
            table.add_row(k, *(_score(measured.arms.get(arm)) if measured else "not measured" for arm in arms))
    Console().print(table)
    print("The bundled model, on held-out tasks with training seeds no choice was made on (docs/results.md).")
    return 0


def _score(arm: Any) -> str:
    return "–" if arm is None else f"{arm.success:.3f} [{arm.ci[0]:.3f}, {arm.ci[1]:.3f}], {arm.n}"
