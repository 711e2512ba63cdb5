"""The import graph of agentgym.*, read from the source with ``ast``: the kernel names no
environment, and no import cycle runs anywhere in the tree.

Imports under ``if TYPE_CHECKING:`` count (a cycle only the type checker follows still ties two
files together); imports inside functions do not (they run later, on use). The folder mapping of
pyproject.toml (envs/ -> agentgym.envs, ...) is resolved here, which import-graph tools miss.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"agentgym": "agentgym", "envs": "agentgym.envs", "verifiers": "agentgym.verifiers", "trainers": "agentgym.trainers", "tasks": "agentgym.tasks"}
KERNEL = ("agentgym.env", "agentgym.records", "agentgym.tools", "agentgym.parsing", "agentgym.spaces", "agentgym.seeding")


def modules() -> dict[str, Path]:
    """Every module of the tree by its import name."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [*package.split("."), *path.relative_to(ROOT / folder).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the tree that ``name`` imports when it is imported (function bodies left out)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_checker_finds_a_type_level_cycle(tmp_path: Path) -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    x, y = tmp_path / "x.py", tmp_path / "y.py"
    x.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentgym.y import Y\n", encoding="utf-8")
    y.write_text("def f():\n    import agentgym.x\n", encoding="utf-8")
    known = {"agentgym.x": x, "agentgym.y": y}
    assert imported("agentgym.x", x, known) == {"agentgym.y"}  # an import under TYPE_CHECKING counts
    assert imported("agentgym.y", y, known) == set()  # one inside a function does not


def test_the_graph_resolves_the_folder_mapping() -> None:
    edges = graph()
    assert "agentgym.env" in edges["agentgym.envs.refund.env"]
    assert "agentgym.envs.registration" in edges["agentgym.envs"]
    assert "agentgym.verifiers.result" in edges["agentgym.env"]


def test_the_import_graph_has_no_cycle() -> None:
    assert [sorted(c) for c in cycles(graph())] == []


def test_the_kernel_names_no_environment() -> None:
    edges = graph()
    for module in KERNEL:
        assert not {m for m in edges[module] if m.startswith("agentgym.envs")}, f"{module} imports an environment"
