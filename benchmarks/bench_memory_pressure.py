"""CodeExec oracle episodes under memory pressure: graded correctly, infra errors, silently wrong.

The episodes run in a child process inside a memory control group of their own (a child of this
process's group, with a hard limit and no swap), so the pressure never reaches the rest of the
machine: when the group runs out, the kernel's OOM killer picks a victim inside it. Another
process in the same group holds memory up to a margin below the limit (at most three quarters of
it) and, every ``--spike-s`` seconds, reaches past it for a moment. The sandbox's fork server and its runs are the first
victims by design (``oom_score_adj`` 1000), as on a machine that runs out of memory.

Every oracle episode must succeed, so each is one of: graded correctly (success), an infra error
(the episode raised :class:`agentgym.InfraError`: labelled, never scored), or silently wrong (it
failed without a label: the machinery's failure passed for the model's). The target is zero
silently wrong. A baseline of the same episodes without pressure runs first, in the same run.

    nice -n 10 python benchmarks/bench_memory_pressure.py --episodes 40
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

MiB = 1 << 20


@dataclass
class Outcome:
    """What a batch of oracle episodes came to."""

    correct: int = 0
    infra_errors: int = 0
    silently_wrong: int = 0
    restarts: int = 0
    seconds: float = 0.0

    @property
    def episodes(self) -> int:
        return self.correct + self.infra_errors + self.silently_wrong


def memory_group_base() -> tuple[str, str]:
    """This process's memory control group folder and its version (``v1`` or ``v2``)."""
    from agentgym.sandbox._cgroups import _cgroup_mounts, _own_groups

    mounts, own = _cgroup_mounts(), _own_groups()
    if "memory" in mounts and "memory" in own:
        return mounts["memory"] + own["memory"], "v1"
    if "cgroup2" in mounts and "" in own:
        return mounts["cgroup2"] + own[""], "v2"
    raise RuntimeError("no memory control group to create pressure in (needs root and cgroup v1 or v2 with the memory controller)")


@contextlib.contextmanager
def pressure_group(limit_bytes: int) -> Iterator[tuple[str, str]]:
    """A new memory group with a hard limit and no swap; removed (its processes killed) at the end."""
    base, version = memory_group_base()
    folder = os.path.join(base, f"agentgym-pressure-{os.getpid()}")
    os.mkdir(folder)
    settings = (
        [("memory.limit_in_bytes", limit_bytes), ("memory.memsw.limit_in_bytes", limit_bytes)]
        if version == "v1"
        else [("memory.max", limit_bytes), ("memory.swap.max", 0)]
    )
    try:
        for name, value in settings:
            # Without swap accounting there is no swap to use either.
            with contextlib.suppress(FileNotFoundError), open(os.path.join(folder, name), "w") as handle:
                handle.write(str(value))
        yield folder, version
    finally:
        for _ in range(50):
            with open(os.path.join(folder, "cgroup.procs")) as handle:
                pids = [int(p) for p in handle.read().split()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        with contextlib.suppress(OSError):  # the sandbox's own groups inside it go with their backend
            for entry in os.scandir(folder):
                if entry.is_dir():
                    os.rmdir(entry.path)
            os.rmdir(folder)


def usage(folder: str, version: str) -> int:
    with open(os.path.join(folder, "memory.usage_in_bytes" if version == "v1" else "memory.current")) as handle:
        return int(handle.read())


def join(folder: str) -> None:
    with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
        handle.write(str(os.getpid()))


def hog(folder: str, version: str, limit: int, margin: int, spike_s: float) -> None:
    """Hold memory up to ``margin`` below the limit; every ``spike_s`` reach past it for a moment."""
    join(folder)
    held: list[bytearray] = []
    # At most three quarters of the limit: the OOM killer scores the sandbox's processes as their
    # size plus the whole limit (oom_score_adj 1000), so they stay its first victims, not the hog.
    most = 3 * limit // 4 // MiB
    while True:
        while usage(folder, version) < limit - margin and len(held) < most:
            held.append(bytearray(b"\1" * MiB))  # touched: resident
        print("ready", flush=True)
        time.sleep(spike_s)
        if not sandbox_in(folder):  # the player is still starting: a spike now would only kill the hog
            continue
        spike = [bytearray(b"\1" * MiB) for _ in range((limit - usage(folder, version)) // MiB + 8)]
        del spike
        while held and usage(folder, version) > limit - margin:
            held.pop()


def sandbox_in(folder: str) -> bool:
    """Whether a sandbox's fork server is in the group (``oom_score_adj`` 1000: the OOM killer's
    first pick, as its runs are)."""
    with open(os.path.join(folder, "cgroup.procs")) as handle:
        pids = handle.read().split()
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/oom_score_adj") as handle:
            if handle.read().strip() == "1000":
                return True
    return False


def play(folder: str | None, episodes: int) -> None:
    """Play the oracle on the test tasks in turn and print an :class:`Outcome` as JSON."""
    if folder is not None:
        join(folder)
    from agentgym import InfraError
    from agentgym.envs import make_env
    from agentgym.rollouts.scripted import make_policy, run_episode

    env = make_env("agentgym/CodeExec-v0", split="test", backend="local")
    tasks = env.unwrapped.task_ids
    policy = make_policy(env, "oracle", 0)
    outcome = Outcome()
    started = time.perf_counter()
    for index in range(episodes):
        try:
            record = run_episode(env, policy, seed=index, task_id=tasks[index % len(tasks)])
        except InfraError as exc:
            outcome.infra_errors += 1
            print(f"  infra error: {str(exc)[:150]}", file=sys.stderr, flush=True)
            continue
        if record["success"]:
            outcome.correct += 1
        else:
            outcome.silently_wrong += 1
            print(f"  silently wrong: {record['task_id']}: {record['reward_reason']}", file=sys.stderr, flush=True)
    outcome.seconds = time.perf_counter() - started
    outcome.restarts = env.unwrapped.backend.restarts
    env.close()
    print(json.dumps(dataclasses.asdict(outcome)), flush=True)


def run(episodes: int, *, pressure: bool, limit: int, margin: int, spike_s: float) -> Outcome:
    """One batch of episodes, under pressure or not. The player and the hog are new interpreters:
    forked from a large process they would carry its pages, and the OOM killer would pick them."""
    script = [sys.executable, os.path.abspath(__file__)]
    with contextlib.ExitStack() as stack:
        folder = "-"
        if pressure:
            folder, version = stack.enter_context(pressure_group(limit))
            hog_command = [
                *script,
                "--role",
                "hog",
                "--group",
                folder,
                "--version",
                version,
                "--limit",
                str(limit),
                "--margin",
                str(margin),
                "--spike-s",
                str(spike_s),
            ]

            def start_hog() -> subprocess.Popen[str]:
                process = subprocess.Popen(hog_command, stdout=subprocess.PIPE, text=True)
                stack.callback(process.wait)
                stack.callback(process.kill)
                if process.stdout is None or process.stdout.readline() != "ready\n":  # the episodes start under pressure
                    raise RuntimeError("the memory hog did not reach its level")
                return process

            pressing = start_hog()
        player = subprocess.Popen([*script, "--role", "play", "--group", folder, "--episodes", str(episodes)], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 600
        while player.poll() is None:
            if time.monotonic() > deadline:
                player.kill()
                raise RuntimeError("the episode player hung")
            if pressure and pressing.poll() is not None:  # the OOM killer picked the hog itself: a new one
                pressing = start_hog()
            time.sleep(0.2)
        out = player.stdout.read() if player.stdout is not None else ""
    if player.returncode != 0:
        raise RuntimeError(f"the episode player failed (exit status {player.returncode}; the OOM killer picked it?)")
    return Outcome(**json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--limit-mib", type=int, default=768, help="the pressure group's memory limit")
    parser.add_argument("--margin-mib", type=int, default=48, help="how far below the limit the hog holds")
    parser.add_argument("--spike-s", type=float, default=0.5, help="seconds between the hog's reaches past the limit")
    parser.add_argument("--role", choices=("hog", "play"), help=argparse.SUPPRESS)  # the child processes
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--version", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--margin", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "hog":
        hog(args.group, args.version, args.limit, args.margin, args.spike_s)
    elif args.role == "play":
        play(None if args.group == "-" else args.group, args.episodes)
    else:
        compare(args)


def compare(args: argparse.Namespace) -> None:
    """The baseline and the pressured run, side by side."""
    settings = {"limit": args.limit_mib * MiB, "margin": args.margin_mib * MiB, "spike_s": args.spike_s}
    rows = [("no pressure", run(args.episodes, pressure=False, **settings)), ("memory pressure", run(args.episodes, pressure=True, **settings))]
    print(
        f"{args.episodes} CodeExec oracle episodes; pressure: a {args.limit_mib} MiB group held {args.margin_mib} MiB below its limit, past it every {args.spike_s:g} s"
    )
    print(f"{'':16} {'correct':>8} {'infra':>6} {'silently wrong':>15} {'restarts':>9} {'episodes/s':>11}")
    for name, o in rows:
        print(f"{name:16} {o.correct:>8} {o.infra_errors:>6} {o.silently_wrong:>15} {o.restarts:>9} {o.episodes / o.seconds:>11.2f}")
    base, pressed = rows[0][1], rows[1][1]
    print(f"under pressure: {pressed.correct / pressed.episodes:.0%} graded correctly, {pressed.silently_wrong} silently wrong (target 0); "
          f"speed {pressed.episodes / pressed.seconds / (base.episodes / base.seconds):.2f}x the baseline")  # fmt: skip


if __name__ == "__main__":
    main()
