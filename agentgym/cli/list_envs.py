"""``agentgym list``: list the registered environments and the clients of remote ones, as a table or as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("list", help="list the registered environments and the remote clients")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.envs import CLIENTS, ENVIRONMENTS

    rows = [(k, "environment", d) for k, (_, d) in ENVIRONMENTS.items()] + [(k, "client", d) for k, (_, d) in CLIENTS.items()]
    if args.json:
        print(json.dumps([{"id": k, "kind": kind, "description": d} for k, kind, d in rows], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "kind", "description")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    return 0
