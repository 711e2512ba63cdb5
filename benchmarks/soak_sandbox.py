"""A longer soak of the code sandbox: the CI soak (tests/sandbox/test_sandbox_soak.py) with more episodes.

Hostile CodeExec episodes (fork bombs, daemons, memory hogs, output floods, socket families the
seccomp filter refuses, descriptor exhaustion), 8 at a time; afterwards the host must have the
same open files, no sandbox process or file beyond the fork server, and bounded memory growth.

    python benchmarks/soak_sandbox.py                 # 4,096 episodes (about 10 minutes on 2 cores)
    python benchmarks/soak_sandbox.py --episodes 1024

Exit code 0 when the soak passes, 1 when it fails (pytest's report says why).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4096, help="episodes in all (a multiple of 8)")
    args = parser.parse_args()
    if args.episodes < 32 or args.episodes % 8:
        parser.error("--episodes must be a multiple of 8, at least 32")
    os.environ["AGENTGYM_SOAK_EPISODES"] = str(args.episodes)
    test = Path(__file__).resolve().parent.parent / "tests" / "sandbox" / "test_sandbox_soak.py"
    return int(pytest.main(["-q", "-p", "no:cacheprovider", str(test)]) != 0)


if __name__ == "__main__":
    sys.exit(main())
