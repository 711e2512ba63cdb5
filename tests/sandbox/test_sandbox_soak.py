"""A soak of CodeExec-v0 under hostile code: 256 episodes, 8 at a time, each running an attack with
run_python and then submitting one. Afterwards the host has the same open files, no process or
file of a sandbox beyond the fork server, and a bounded memory footprint.

This one keeps CI's budget (about a minute); ``benchmarks/soak_sandbox.py`` runs it longer
through ``AGENTGYM_SOAK_EPISODES``.
"""

from __future__ import annotations

import os
import resource
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym

from agentgym.parsing import format_tool_call
from agentgym.sandbox import Limits
from agentgym.sandbox.local import leftovers

EPISODES = int(os.environ.get("AGENTGYM_SOAK_EPISODES", "256"))
CONCURRENT = 8
LIMITS = Limits(wall_time_s=1.0, cpu_time_s=1, memory_bytes=128 << 20, max_processes=16, max_output_bytes=4096, workspace_bytes=8 << 20)
ATTACKS = (
    "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\ntime.sleep(0.2)",
    "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)",
    "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))",
    "n = 0\ntry:\n    while True:\n        open(f'/tmp/f{n}', 'w').close()\n        n += 1\nexcept OSError:\n    print(n)",
    "while True:\n    pass",
    "import sys\nfor _ in range(1000):\n    sys.stdout.write('x' * 65536)",
    "import socket\nsocket.socket(40, socket.SOCK_STREAM)",
    "import os\nfd = os.open('/workspace', os.O_RDONLY)\nwhile True:\n    os.dup(fd)",
)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_hostile_episodes_leave_nothing_behind(local_backend):
    envs = [gym.make("agentgym/CodeExec-v0", split="val", limits=LIMITS, grading_limits=LIMITS) for _ in range(CONCURRENT)]
    task_ids = envs[0].unwrapped.task_ids

    def episode(index: int) -> bool:
        env = envs[index % CONCURRENT]
        env.reset(seed=index, options={"task_id": task_ids[index % len(task_ids)]})
        env.step(format_tool_call("run_python", {"code": ATTACKS[index % len(ATTACKS)]}))
        *_, terminated, _, info = env.step(format_tool_call("submit", {"code": ATTACKS[(index + 1) % len(ATTACKS)]}))
        return terminated and not info["success"]

    def play(rounds: range) -> list[bool]:
        with ThreadPoolExecutor(CONCURRENT) as pool:  # env i is used by one thread at a time: rounds of 8
            return [ok for start in rounds for ok in pool.map(episode, range(start, start + CONCURRENT))]

    play(range(0, 2 * CONCURRENT, CONCURRENT))  # warm up: the fork server, its imports, the pools
    fds, rss = _open_fds(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = play(range(2 * CONCURRENT, EPISODES, CONCURRENT))
    for env in envs:
        env.close()

    assert len(results) == EPISODES - 2 * CONCURRENT and all(results)  # every attack ended as a failed submission
    assert _open_fds() <= fds
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert growth_mib < 64, f"peak memory grew by {growth_mib:.0f} MiB over the soak"
    assert [item for item in leftovers() if not item.startswith("process")] == []  # no file of a sandbox on the host
    # Only the shared fork server (its launcher and its pid 1) may remain; the session fixture checks it goes too.
    processes = [item for item in leftovers() if item.startswith("process")]
    assert all("_zygote.py" in item for item in processes) and len(processes) <= 2, processes
