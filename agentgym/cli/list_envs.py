"""``agentgym list``: list the registered environments, as a table or as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("list", help="list the registered environments")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.envs import ENVIRONMENTS

    if args.json:
        print(json.dumps([{"id": k, "description": d} for k, (_, d) in ENVIRONMENTS.items()], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("environment", "description")
    for env_id, (_, description) in ENVIRONMENTS.items():
        table.add_row(env_id, description)
    Console().print(table)
    return 0
