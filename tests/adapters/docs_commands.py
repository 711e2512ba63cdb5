"""Run the command blocks of docs/adapters.md, so the docs show exactly what the tests run.

A block is a fenced ``bash`` block right after a ``<!-- test: NAME -->`` marker. It runs verbatim
in bash in a scratch directory, with this interpreter first on ``PATH``. Commands that need a GPU
cluster (the trainers' launchers, ``ray``, ``accelerate``) are replaced by shell functions that
record their arguments instead; everything else (exports, the CPU training run) really runs. The
caller then validates the recorded arguments against the real framework (verl's config schema,
OpenRLHF's argument parser, the TRL example's parser).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"

# Launchers recorded instead of run. `ray job submit ... -- CMD` records itself, then runs CMD
# (which is usually a recorded launcher too).
_SHIMS = r"""
_n=0
_record() { _n=$((_n + 1)); printf '%s\0' "$@" > "$AGENTGYM_DOC_CALLS/$(printf %04d "$_n")"; }
_launcher() {
    case "$2 $3" in
        "-m verl.trainer.main_ppo"|"-m openrlhf.cli.train_ppo_ray") _record "$@" ;;
        *) command "$@" ;;
    esac
}
python() { _launcher python "$@"; }
python3() { _launcher python3 "$@"; }
accelerate() { _record accelerate "$@"; }
ray() {
    if [ "${1:-}" = job ] && [ "${2:-}" = submit ]; then
        local args=("$@") i
        for ((i = 0; i < ${#args[@]}; i++)); do
            if [ "${args[$i]}" = "--" ]; then
                _record ray "${args[@]:0:$i}"
                "${args[@]:$((i + 1))}"
                return
            fi
        done
    fi
    _record ray "$@"
}
set -euo pipefail
"""


def doc_block(name: str) -> str:
    """The text of the bash block tagged ``name`` in docs/adapters.md."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- test: {re.escape(name)} -->\s*```bash\n(.*?)```", text, re.DOTALL)
    if match is None:
        raise AssertionError(f"docs/adapters.md has no bash block tagged <!-- test: {name} -->")
    return match.group(1)


def run_doc_block(name: str, workdir: Path, env: dict[str, str] | None = None, timeout: float = 600) -> list[list[str]]:
    """Run block ``name`` in ``workdir``; returns the recorded launcher calls (argv lists), in order."""
    calls_dir = workdir / ".calls"
    calls_dir.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ, **(env or {}))
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["AGENTGYM_DOC_CALLS"] = str(calls_dir)
    result = subprocess.run(
        ["bash", "-c", _SHIMS + doc_block(name)], cwd=workdir, env=environment, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"docs block {name!r} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return [path.read_text(encoding="utf-8").split("\0")[:-1] for path in sorted(calls_dir.iterdir())]
