"""Deterministic generator of the SQL-v0, SearchQA-v0 and ToolMath-v0 task sets.

Every task set comes from the fixed world (``WORLD_SEED``) and its own seeded RNG, is split
70/15/15 into train/val/test by a seeded shuffle, and is written as one JSON object per line.

    python -m agentgym.envs.knowledge.generate tasks/knowledge   # rewrites {sql,searchqa,toolmath}/{split}.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from agentgym.envs.knowledge.gen_math import math_tasks
from agentgym.envs.knowledge.gen_search import search_tasks
from agentgym.envs.knowledge.gen_sql import sql_tasks
from agentgym.envs.knowledge.snapshot import open_readonly
from agentgym.envs.knowledge.sql_tool import ReadOnlySQL
from agentgym.envs.knowledge.world import WORLD_SEED, generate_world

__all__ = ["FAMILIES", "generate", "write"]

FAMILIES = {"sql": 6101, "searchqa": 6102, "toolmath": 6103}  # family -> task seed
SPLIT_SHARES = (("train", 0.70), ("val", 0.15), ("test", 0.15))


def generate(family: str) -> dict[str, list[dict[str, Any]]]:
    """The tasks of one family (``sql``, ``searchqa`` or ``toolmath``), by split."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose from {', '.join(FAMILIES)}")
    world = generate_world(WORLD_SEED)
    rng = random.Random(FAMILIES[family])
    if family == "sql":
        runner = ReadOnlySQL(open_readonly())
        try:
            tasks = sql_tasks(world, rng, runner)
        finally:
            runner.close()
    elif family == "searchqa":
        tasks = search_tasks(world, rng)
    else:
        tasks = math_tasks(world, rng)
    tasks = [{"task_id": f"{family}-{i:04d}"} | t for i, t in enumerate(tasks, 1)]
    order = list(range(len(tasks)))
    rng.shuffle(order)
    splits: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for name, share in SPLIT_SHARES:
        count = round(share * len(tasks)) if name != SPLIT_SHARES[-1][0] else len(tasks) - start
        splits[name] = [tasks[i] | {"split": name} for i in sorted(order[start : start + count])]
        start += count
    return splits


def write(root: str | Path) -> None:
    """Write every family's splits under ``root/{family}/{split}.jsonl``."""
    for family in FAMILIES:
        folder = Path(root) / family
        folder.mkdir(parents=True, exist_ok=True)
        for split, tasks in generate(family).items():
            lines = "".join(json.dumps(t, ensure_ascii=False, sort_keys=True) + "\n" for t in tasks)
            (folder / f"{split}.jsonl").write_text(lines, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="output folder, normally tasks/knowledge")
    write(parser.parse_args().root)


if __name__ == "__main__":
    main()
