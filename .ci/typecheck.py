"""Type-check the source tree in place: mypy over every module of the package, each under its import name.

pyproject.toml maps envs/, verifiers/, trainers/ and tasks/ into the agentgym namespace (package-dir). mypy
names a file's module after its folders (envs/refund/env.py would be envs.refund.env) and cannot follow the
editable install, an import hook. So the files are handed to mypy as build sources with their module names,
read from that same mapping: imports of agentgym.envs.* resolve to them, and mypy reports the files where
they are. mypy.build is mypy's own entry point below its command line; the pin in pyproject.toml's dev extra
keeps it the one this was written for.

    python .ci/typecheck.py [MYPY_ARGS...]      (bash .ci/typecheck runs it)
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def sources(root: Path = ROOT) -> list[BuildSource]:
    """Every module of the package-dir mapping in ``root``'s pyproject.toml, by file and module name."""
    mapping: dict[str, str] = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    found = []
    for package, folder in sorted(mapping.items()):
        for path in sorted((root / folder).rglob("*.py")):
            parts = [*package.split("."), *path.relative_to(root / folder).with_suffix("").parts]
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found.append(BuildSource(str(path.relative_to(root)), module))
    return found


def main(argv: list[str]) -> int:
    os.chdir(ROOT)  # paths in messages and the cache (.mypy_cache) are relative to the checkout
    _, options = process_options(["--config-file", str(ROOT / "pyproject.toml"), *argv], require_targets=False)
    checked = sources()
    try:
        result = build.build(checked, options)
    except CompileError as exc:  # a file mypy cannot parse: its messages, as mypy's command line prints them
        print("\n".join(exc.messages))
        return 2
    print("\n".join(result.errors))
    files = len({e.split(":", 1)[0] for e in result.errors if ": error:" in e})
    errors = sum(": error:" in e for e in result.errors)
    print(
        f"Found {errors} errors in {files} files (checked {len(checked)} source files)"
        if errors
        else f"Success: no issues found in {len(checked)} source files"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
