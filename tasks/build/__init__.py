"""Offline builders of the task data bundled under ``tasks/``.

Environments only read those files; nothing here runs when an environment runs. Each environment
has a subpackage, ``agentgym.tasks.build.<env>``, with the same modules:

* ``tasks.py`` generates the task set: ``train.jsonl``, ``val.jsonl`` and ``test.jsonl`` (for
  ``knowledge``, one set per environment in ``sql/``, ``searchqa/`` and ``toolmath/``).
  ``tau_retail`` has none: its tasks are τ-bench's own.
* ``labelled.py`` builds the hand-labelled trajectories for ``agentgym validate-reward``:
  ``labelled.jsonl`` (for ``knowledge``, one per environment, in the same folders).

Helper modules sit beside them (``code_exec/families.py``, ``knowledge/sql.py``, ...). Every
builder module has ``write(folder)``, which writes its files into ``folder`` (the bundled ones
live in ``tasks/<env>``) and returns their paths, and the same command line:

    python -m agentgym.tasks.build.refund.tasks tasks/refund
    python -m agentgym.tasks.build.refund.labelled tasks/refund
    python -m agentgym.tasks.build [--check] [ENV ...]   # every builder (see __main__.py)

Builds are deterministic: the same code writes the same bytes, which ``tests/test_task_build.py``
checks against the committed files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from agentgym.records import LabelledRecord
from agentgym.rollouts.io import write_jsonl

__all__ = ["BUILDERS", "SPLIT_SHARES", "TASKS", "build", "folder_parser", "labelled_writer", "run", "split_seeded", "stale", "write_labelled", "write_splits"]

T = TypeVar("T", bound=dict[str, Any])
SPLIT_SHARES = (("train", 0.70), ("val", 0.15), ("test", 0.15))

TASKS = Path(__file__).resolve().parent.parent  # agentgym.tasks: the bundled data
# Environment -> its builder modules, in the order they run. Tasks come first: a labelled set
# replays the environment, which reads the bundled tasks.
BUILDERS: dict[str, tuple[str, ...]] = {
    "code_exec": ("tasks", "labelled"),
    "knowledge": ("tasks", "labelled"),
    "mock_api": ("tasks", "labelled"),
    "refund": ("tasks", "labelled"),
    "tau_retail": ("labelled",),
}


def build(env: str, folder: str | Path) -> list[Path]:
    """Run ``env``'s builders, writing into ``folder``; returns the files written."""
    return [path for name in BUILDERS[env] for path in importlib.import_module(f"{__name__}.{env}.{name}").write(folder)]


def stale(env: str, tasks: Path = TASKS) -> list[Path]:
    """The files of ``tasks/<env>`` that a fresh build does not reproduce byte for byte (or that are missing)."""
    bundled = tasks / env
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        pairs = [(bundled / path.relative_to(fresh), path) for path in build(env, fresh)]
        return [old for old, new in pairs if not old.is_file() or old.read_bytes() != new.read_bytes()]


def split_seeded(tasks: list[T], rng: random.Random, shares: Sequence[tuple[str, float]] = SPLIT_SHARES) -> dict[str, list[T]]:
    """Cut ``tasks`` into splits of the given shares by a seeded shuffle (the last split takes the
    rest); each split keeps the tasks' order and marks them with its name."""
    order = list(range(len(tasks)))
    rng.shuffle(order)
    splits: dict[str, list[T]] = {}
    start = 0
    for name, share in shares:
        count = round(share * len(tasks)) if name != shares[-1][0] else len(tasks) - start
        splits[name] = [cast(T, tasks[i] | {"split": name}) for i in sorted(order[start : start + count])]
        start += count
    return splits


def labelled_writer(build: Callable[[], Iterable[LabelledRecord]]) -> Callable[[str | Path], list[Path]]:
    """A labelled-set module's ``write(folder)``: ``folder/labelled.jsonl`` holding ``build()``."""
    return lambda folder: write_labelled(folder, build())


def run(write: Callable[[str | Path], list[Path]], doc: str | None, argv: Sequence[str] | None = None) -> None:
    """The command line of a builder module without options: ``python -m MODULE FOLDER``."""
    write(folder_parser(doc).parse_args(argv).folder)


def folder_parser(doc: str | None) -> argparse.ArgumentParser:
    """A builder module's command line: its docstring's first line, and the folder to write into."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write (the bundled files live in tasks/<env>)")
    return parser


def write_splits(folder: str | Path, splits: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Write each split's tasks to ``folder/<split>.jsonl``, one object a line with sorted keys; returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for split, tasks in splits.items():
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps(t, sort_keys=True, ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8")
        written.append(path)
    return written


def write_labelled(folder: str | Path, records: Iterable[LabelledRecord]) -> list[Path]:
    """Write labelled records to ``folder/labelled.jsonl`` (:func:`agentgym.rollouts.io.write_jsonl`); returns the path."""
    path = Path(folder) / "labelled.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, records)
    return [path]
