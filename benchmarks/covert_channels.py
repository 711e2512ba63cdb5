"""Covert channels between concurrent sandbox episodes through host-wide kernel state.

Two episodes (two :class:`agentgym.sandbox.Sandbox` workspaces on the local backend) run at the
same time: a sender encodes a random byte, one bit per time slot, and a receiver decodes it. The
baseline in the same run is the same receiver with a sender that sends nothing (all bits 0), so a
channel counts only where the bits it reads follow the sent ones. Channels:

- ``tasks``: the host's total task count (``/proc/loadavg``'s 4th field; also ``sysinfo(2)``'s
  ``procs``): the sender holds 50 extra threads for a 1 bit;
- ``pipes``: the per-user pipe-buffer quota (every run has the same host uid): the sender holds 64
  pipes of 1 MiB (the soft quota, 16,384 pages by default) for a 1 bit, and the receiver's own
  ``F_SETPIPE_SZ`` to 1 MiB fails while it is held.

Prints, per channel, bits right out of 8 over ``--rounds`` bytes and the raw bit rate.

Usage: sudo python benchmarks/covert_channels.py [--slot 0.25] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import threading
import time

from agentgym.sandbox import Limits, Sandbox, get_backend

LIMITS = Limits(wall_time_s=30, cpu_time_s=30, memory_bytes=1 << 30)

SEND = {
    "tasks": (
        "import threading, time\nthreading.stack_size(1 << 16)\n"
        "def hold(until):\n    time.sleep(max(0.0, until - time.time()))\n"
        "def one(until):\n    ts = [threading.Thread(target=hold, args=(until,)) for _ in range(50)]\n"
        "    [t.start() for t in ts]\n    [t.join() for t in ts]\n"
    ),
    "pipes": (
        "import fcntl, os, time\n"
        "def one(until):\n    held = []\n    for _ in range(64):\n        r, w = os.pipe()\n"
        "        try:\n            fcntl.fcntl(w, 1031, 1 << 20)\n        except OSError:\n            pass\n"
        "        held += [r, w]\n    time.sleep(max(0.0, until - time.time()))\n    [os.close(fd) for fd in held]\n"
    ),
}
RECEIVE = {
    "tasks": "def sample():\n    return int(open('/proc/loadavg').read().split()[3].split('/')[1])\n",
    "pipes": (
        "import fcntl, os\n"
        "def sample():\n    r, w = os.pipe()\n    try:\n        fcntl.fcntl(w, 1031, 1 << 20)\n        return 0\n"
        "    except OSError:\n        return 1\n    finally:\n        os.close(r)\n        os.close(w)\n"
    ),
}


def sender(channel: str, bits: list[int], start: float, slot: float) -> str:
    return (
        SEND[channel]
        + f"import time\nfor i, bit in enumerate({bits}):\n    begin = {start} + i * {slot}\n"
        + "    time.sleep(max(0.0, begin - time.time()))\n"
        + f"    if bit:\n        one(begin + {slot} * 0.9)\n"
    )


def receiver(channel: str, start: float, slot: float, bits: int) -> str:
    # Samples in the middle of each slot; the tasks channel compares with the slot's neighbours' minimum.
    return (
        RECEIVE[channel]
        + f"import time\nfor i in range({bits}):\n    time.sleep(max(0.0, {start} + (i + 0.5) * {slot} - time.time()))\n"
        + "    print(sample())\n"
    )


def decode(channel: str, samples: list[int]) -> list[int]:
    if channel == "pipes":
        return samples
    floor = min(samples)
    return [int(s - floor >= 25) for s in samples]


def one_round(backend, channel: str, bits: list[int], slot: float) -> list[int]:
    start = time.time() + 1.0
    out: dict[str, str] = {}
    with Sandbox(backend, LIMITS) as a, Sandbox(backend, LIMITS) as b:
        send = threading.Thread(target=lambda: out.setdefault("send", a.run(sender(channel, bits, start, slot)).stderr))
        send.start()
        out["receive"] = b.run(receiver(channel, start, slot, len(bits))).stdout
        send.join()
    return decode(channel, [int(line) for line in out["receive"].split()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slot", type=float, default=0.25, help="seconds per bit")
    parser.add_argument("--rounds", type=int, default=3, help="bytes sent per channel")
    args = parser.parse_args()
    backend = get_backend("local")
    rng = random.Random(0)
    for channel in SEND:
        right = silent = 0
        for _ in range(args.rounds):
            bits = [rng.randrange(2) for _ in range(8)]
            right += sum(x == y for x, y in zip(one_round(backend, channel, bits, args.slot), bits, strict=True))
            silent += sum(x == y for x, y in zip(one_round(backend, channel, [0] * 8, args.slot), bits, strict=True))
        print(
            f"{channel:6s} sent: {right}/{8 * args.rounds} bits right; silent baseline: {silent}/{8 * args.rounds} "
            f"(chance); raw rate {1 / args.slot:.1f} bits/s at {args.slot} s per bit"
        )


if __name__ == "__main__":
    main()
