"""Deterministic generator of CodeExec-v0's bundled task set.

Every variant of every family in :mod:`agentgym.tasks.build.code_exec.families` becomes one task with
3 visible examples (shown in the prompt) and 10 hidden tests (for the reward) whose inputs never
repeat a visible one, and of which no more than half share one expected value (so a function
returning a constant, or an example's answer, scores at most 0.5). Expected values come from running the family's reference solution, which
is also the task's oracle; the generator runs only that trusted code, in this process.

Families, not tasks, are split into train/val/test (about 70/15/15 of the tasks), so the
evaluation splits hold kinds of problems never seen in training.

    python -m agentgym.tasks.build.code_exec.tasks tasks/code_exec   # rewrites train/val/test.jsonl
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

from agentgym.sandbox._harness import canonical, decode, encode
from agentgym.tasks.build import folder_parser, write_splits
from agentgym.tasks.build.code_exec.families import FAMILIES, Family

SEED = 20251121
N_VISIBLE = 3
N_HIDDEN = 10
SPLIT_SHARES = (("test", 0.15), ("val", 0.15))  # train takes the rest
MAX_DRAWS = 20_000
MAX_SAME_ANSWER = N_HIDDEN // 2  # see _task: trivial functions score at most one half


def generate(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """All tasks, by split. Same seed, same tasks, byte for byte."""
    by_family = {f.name: [_task(f, index, params, seed) for index, params in enumerate(f.variants)] for f in FAMILIES}
    names = sorted(by_family)
    random.Random(seed).shuffle(names)
    total = sum(len(tasks) for tasks in by_family.values())
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "val": [], "test": []}
    for name in names:
        split = next((s for s, share in SPLIT_SHARES if len(splits[s]) < share * total), "train")
        splits[split].extend(t | {"split": split} for t in by_family[name])
    return {split: sorted(tasks, key=lambda t: t["task_id"]) for split, tasks in splits.items()}


def render(family: Family, params: dict[str, Any]) -> tuple[str, str, str]:
    """The variant's signature line, statement and reference solution."""
    code = {k.removesuffix("_src"): (v if k.endswith("_src") else repr(v)) for k, v in params.items()}
    words = {k.removesuffix("_src"): str(v) for k, v in params.items()}
    signature = family.entry_point + Template(family.signature).substitute(words)
    return signature, Template(family.statement).substitute(words), Template(family.solution).substitute(code)


def prompt_text(signature: str, statement: str, examples: list[tuple[list[Any], Any]], entry_point: str) -> str:
    """The problem as the model reads it: signature, statement, visible examples."""
    shown = "\n".join(f"    {entry_point}({', '.join(map(repr, args))}) == {expected!r}" for args, expected in examples)
    return f"Write a Python function\n\n    def {signature}\n\n{statement}\n\nExamples:\n{shown}\n"


def _task(family: Family, index: int, params: dict[str, Any], seed: int) -> dict[str, Any]:
    signature, statement, solution = render(family, params)
    namespace: dict[str, Any] = {}
    exec(compile(solution, f"<{family.name}-{index}>", "exec"), namespace)
    function = namespace[family.entry_point]
    rng = random.Random(f"{seed}-{family.name}-{index}")

    def case(args: tuple[Any, ...]) -> dict[str, Any]:
        return {"args": encode(list(args)), "expected": _canonical(encode(function(*copy.deepcopy(args))))}

    seen: set[str] = set()
    hidden: list[dict[str, Any]] = []  # the hidden tests
    answers: Counter[str] = Counter()  # hidden tests per expected value

    def add_hidden(args: tuple[Any, ...]) -> None:
        # No answer may settle more than MAX_SAME_ANSWER hidden tests: a constant function
        # (or one repeating an example's answer) must not score above that share.
        test = case(args)
        answer = canonical(test["expected"])
        if answers[answer] < MAX_SAME_ANSWER:
            answers[answer] += 1
            hidden.append(test)

    for args in family.edges:
        if repr(args) not in seen:
            seen.add(repr(args))
            add_hidden(args)
    visible: list[tuple[Any, ...]] = []
    for _ in range(MAX_DRAWS):
        if len(visible) == N_VISIBLE and len(hidden) == N_HIDDEN:
            break
        args = family.inputs(rng, params)
        if repr(args) in seen:
            continue
        seen.add(repr(args))
        if len(visible) < N_VISIBLE:
            visible.append(args)
        else:
            add_hidden(args)
    if len(visible) < N_VISIBLE or len(hidden) < N_HIDDEN:
        raise RuntimeError(f"{family.name}-{index}: could not draw {N_VISIBLE} + {N_HIDDEN} distinct inputs with varied answers")

    examples = [case(args) for args in visible]
    shown = [(decode(c["args"]), decode(c["expected"])) for c in examples]
    return {
        "task_id": f"{family.name}-{index}",
        "family": family.name,
        "difficulty": family.difficulty,
        "format": "function",
        "entry_point": family.entry_point,
        "signature": signature,
        "prompt": prompt_text(signature, statement, shown, family.entry_point),
        "examples": examples,
        "tests": hidden,
        "solution": solution,
    }


def _canonical(tree: Any) -> Any:
    """The encoded value with dict entries and set items in a fixed order: string hashing is
    randomised per process, and the task files must not change from one run to the next."""
    if isinstance(tree, list):
        return [_canonical(v) for v in tree]
    if isinstance(tree, dict) and len(tree) == 1:
        ((tag, body),) = tree.items()
        if tag in ("dict", "set", "frozenset"):
            items = [_canonical(v) for v in body]
            return {tag: sorted(items, key=lambda v: json.dumps(v, sort_keys=True))}
        return {tag: _canonical(body)}
    if isinstance(tree, dict):  # the attributes of an encoded object
        return {key: _canonical(value) for key, value in sorted(tree.items())}
    return tree


def write(folder: str | Path, seed: int = SEED) -> list[Path]:
    """Write ``{train,val,test}.jsonl`` into ``folder``; returns their paths."""
    return write_splits(folder, generate(seed))


def main(argv: Sequence[str] | None = None) -> None:
    parser = folder_parser(__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    write(args.folder, args.seed)


if __name__ == "__main__":
    main()
