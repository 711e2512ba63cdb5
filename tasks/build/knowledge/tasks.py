"""Deterministic generator of the SQL-v0, SearchQA-v0 and ToolMath-v0 task sets.

Every task set comes from the fixed world (``WORLD_SEED``) and its own seeded RNG, is split
70/15/15 into train/val/test by a seeded shuffle, and is written as one JSON object per line.

    python -m agentgym.tasks.build.knowledge.tasks tasks/knowledge   # rewrites {sql,searchqa,toolmath}/{train,val,test}.jsonl
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from agentgym.envs.knowledge.snapshot import open_readonly
from agentgym.envs.knowledge.sql_tool import ReadOnlySQL
from agentgym.envs.knowledge.world import WORLD_SEED, generate_world
from agentgym.tasks.build import run, split_seeded, write_splits
from agentgym.tasks.build.knowledge.searchqa import search_tasks
from agentgym.tasks.build.knowledge.sql import sql_tasks
from agentgym.tasks.build.knowledge.toolmath import math_tasks

__all__ = ["FAMILIES", "generate", "write"]

FAMILIES = {"sql": 6101, "searchqa": 6102, "toolmath": 6103}  # family -> task seed


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
    return split_seeded(tasks, rng)


def write(folder: str | Path) -> list[Path]:
    """Write every family's splits to ``folder/{family}/{train,val,test}.jsonl``; returns their paths."""
    return [path for family in FAMILIES for path in write_splits(Path(folder) / family, generate(family))]


if __name__ == "__main__":
    run(write, __doc__)
