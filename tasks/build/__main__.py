"""Rebuild the task data bundled under ``tasks/``, or check that it is up to date.

    python -m agentgym.tasks.build                    # rewrite every environment's files in tasks/
    python -m agentgym.tasks.build refund knowledge   # only these environments
    python -m agentgym.tasks.build --check            # build into a temporary folder, list the bundled
                                                      # files that differ, exit 1 if any do

Labelled sets replay the environments on the bundled tasks, so ``--check`` judges them against the
committed tasks; after changing a task generator, rebuild (without ``--check``) to rewrite both.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agentgym.tasks.build import BUILDERS, TASKS, build, stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentgym.tasks.build", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("envs", nargs="*", metavar="ENV", help=f"environments to build (default: all): {', '.join(BUILDERS)}")
    parser.add_argument("--check", action="store_true", help="write nothing under tasks/; exit 1 if a fresh build differs from a bundled file")
    args = parser.parse_args(argv)
    unknown = [env for env in args.envs if env not in BUILDERS]
    if unknown:
        parser.error(f"unknown environment {', '.join(unknown)}; choose from {', '.join(BUILDERS)}")
    envs = args.envs or list(BUILDERS)
    if not args.check:
        for env in envs:
            for path in build(env, TASKS / env):
                print(f"wrote {path}")
        return 0
    differing = [path for env in envs for path in stale(env, TASKS)]
    for path in differing:
        print(f"differs from a fresh build: {path}")
    if not differing:
        print(f"up to date: {', '.join(envs)}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
