"""Reading code tasks: CodeExec-v0's own format, HumanEval and MBPP, from JSONL (plain or .gz).

Every loader returns *normalised* tasks, dicts that the environment and the grader read the same
way whatever the source:

- ``task_id``, ``format`` (``function``, ``humaneval`` or ``mbpp``), ``prompt`` (what the model
  reads), ``solution`` (a reference solution, the oracle's submission);
- ``function``: ``entry_point``, ``examples``, ``tests`` (encoded argument lists and values);
- ``humaneval``: ``entry_point``, ``code_prompt`` (the dataset's prompt), ``test``;
- ``mbpp``: ``asserts``, ``names`` (the functions they call), ``setup``, ``reference``.

:func:`grading_spec` turns a normalised task into the grader's test specification.
"""

from __future__ import annotations

import ast
import gzip
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from agentgym.parsing import parse_python
from agentgym.sandbox.grading import AssertTests, CheckTests, FunctionTests, IOCase, TestSpec

__all__ = ["grading_spec", "load_tasks", "normalise", "read_records"]


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """JSON objects from a ``.jsonl``/``.jsonl.gz`` file (one per line) or a ``.json`` array."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            content = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read task file {path}: {exc}") from None
    stripped = content.lstrip()
    try:
        records = json.loads(content) if stripped.startswith("[") else [json.loads(line) for line in content.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ValueError(f"task file {path} is not valid JSON lines: {exc}") from None
    if not all(isinstance(r, dict) for r in records):
        raise ValueError(f"task file {path} must hold JSON objects")
    return records


def load_tasks(source: str | Path | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised tasks from a file path or from a list of records (any supported format)."""
    records = read_records(source) if isinstance(source, str | Path) else list(source)
    where = f"task file {source}" if isinstance(source, str | Path) else "task list"
    tasks = []
    for number, record in enumerate(records, 1):
        try:
            tasks.append(normalise(record))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}, record {number}: {exc}") from None
    return tasks


def normalise(record: dict[str, Any]) -> dict[str, Any]:
    """One task in the normalised form; the format is recognised from the record's fields."""
    if record.get("format") in ("function", "humaneval", "mbpp") and "solution" in record:
        return dict(record)  # already normalised (the bundled tasks are stored this way)
    if {"prompt", "entry_point", "test", "canonical_solution"} <= set(record):
        return _humaneval(record)
    if "test_list" in record and "code" in record:
        return _mbpp(record)
    raise ValueError(f"unrecognised task record with fields {sorted(record)[:12]}: expected HumanEval, MBPP or CodeExec tasks")


def _humaneval(record: dict[str, Any]) -> dict[str, Any]:
    prompt = record["prompt"]
    return {
        "task_id": str(record["task_id"]),
        "format": "humaneval",
        "prompt": (
            "Complete the following Python code. Submit the whole function, signature and body, "
            f"together with any imports and helpers it needs.\n\n```python\n{prompt}```\n"
        ),
        "entry_point": record["entry_point"],
        "code_prompt": prompt,
        "test": record["test"],
        "solution": prompt + record["canonical_solution"],
    }


def _mbpp(record: dict[str, Any]) -> dict[str, Any]:
    asserts = [str(a) for a in record["test_list"]]
    if not asserts:
        raise ValueError(f"MBPP task {record.get('task_id')} has no tests")
    reference = record["code"].replace("\r\n", "\n")
    imports = "\n".join(record.get("test_imports") or [])
    setup = "\n".join(part for part in (imports, record.get("test_setup_code") or "") if part)
    text = record.get("text") or record.get("prompt") or ""
    return {
        "task_id": f"Mbpp/{record['task_id']}",
        "format": "mbpp",
        "prompt": f"{text.strip()}\n\nYour code should pass tests like this one:\n\n    {asserts[0]}\n",
        "asserts": asserts,
        "names": _names_under_test(str(record.get("task_id")), reference, asserts),
        "setup": setup,
        "reference": reference,
        "solution": f"{imports}\n{reference}" if imports else reference,
    }


# Values that make an assignment data rather than a function (``LIMIT = 10``, ``TABLE = [...]``).
_DATA = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp, ast.JoinedStr, type(None))


def _names_under_test(task_id: str, reference: str, asserts: list[str]) -> list[str]:
    """The names the asserts use that the reference binds at top level, other than classes: each
    becomes a proxy of the submission's function. Functions bound as lambdas, aliases or imports
    count too; classes stay the reference's (the setup builds test data with them). Raises when
    the asserts use none: they would test the reference, and any submission would pass."""
    bound: dict[str, bool] = {}  # name -> is a class
    for node in _parse(reference).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound[node.name] = isinstance(node, ast.ClassDef)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and not isinstance(node.value, _DATA):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound[name.id] = False
        elif isinstance(node, ast.ImportFrom):  # ``from math import gcd``: the submission must define gcd
            for alias in node.names:
                bound[alias.asname or alias.name] = False
    used = {node.id for statement in asserts for node in ast.walk(_parse(statement)) if isinstance(node, ast.Name)}
    names = [name for name, is_class in bound.items() if name in used and not is_class]
    if not names:
        raise ValueError(f"MBPP task {task_id}: its asserts use no function its reference code defines, so they cannot test a submission")
    return names


def _parse(source: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dataset code has old-style escapes; not ours to fix
        try:
            return cast(ast.Module, parse_python(source))
        except SyntaxError as exc:
            raise ValueError(f"MBPP task code does not parse: {exc}") from None


def grading_spec(task: Mapping[str, Any]) -> TestSpec:
    """The grader's specification of a normalised task's hidden tests."""
    kind = task["format"]
    if kind == "function":
        return FunctionTests(task["entry_point"], tuple(IOCase(t["args"], t["expected"]) for t in task["tests"]))
    if kind == "humaneval":
        return CheckTests(task["code_prompt"], task["test"], task["entry_point"])
    return AssertTests(tuple(task["asserts"]), tuple(task["names"]), task.get("setup", ""), task.get("reference", ""))
