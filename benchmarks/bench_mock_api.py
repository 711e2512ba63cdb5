"""Tool-call latency and throughput of MockAPI-v0 at 1, 16 and 256 concurrent episodes.

One tool call is one ``env.step`` whose turn holds one ``http_request``: parsing the turn,
validating the arguments, the httpx round trip to the shared loopback server, the service's
routing, validation and handler, and rendering the observation. Each concurrent episode runs in
its own thread, as an async rollout worker would drive it. Faults are off (they never sleep, so
they do not change the cost of a call).

The baseline, measured in the same run with the same thread layout, is a raw httpx GET to a
trivial standard-library endpoint: the floor that any HTTP tool call in Python pays. Baseline
and tool calls alternate in rounds, so a change in machine load affects both alike.

    python benchmarks/bench_mock_api.py                  # 1, 16, 256 episodes
    python benchmarks/bench_mock_api.py --calls 200 --concurrency 1,16 --json out.json
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import threading
import time
from collections.abc import Callable

import httpx

from agentgym.envs.mock_api.env import MockApiEnv
from agentgym.parsing import format_tool_call


class _Trivial(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        body = b'{"ok":true}'
        self.send_response_only(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _TrivialServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # as the MockAPI server: the default of 5 resets connections at 256 clients


def _run_threads(workers: list[Callable[[], list[float]]]) -> tuple[list[float], float]:
    """Run one worker per thread, started together; returns all latencies and the wall time."""
    barrier = threading.Barrier(len(workers) + 1)
    results: list[list[float]] = [[] for _ in workers]

    def run(index: int) -> None:
        barrier.wait()
        results[index] = workers[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return [x for r in results for x in r], time.perf_counter() - start


def _timed(n: int, call: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - t0)
    return out


class Baseline:
    """``concurrency`` httpx clients, each with a connection to a trivial stdlib endpoint."""

    def __init__(self, concurrency: int):
        self._server = _TrivialServer(("127.0.0.1", 0), _Trivial)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._url = f"http://127.0.0.1:{self._server.server_address[1]}/ping"
        self._clients = [httpx.Client(trust_env=False, timeout=30.0) for _ in range(concurrency)]
        for client in self._clients:
            client.get(self._url)  # connect outside the timing

    def run(self, calls: int) -> tuple[list[float], float]:
        def worker(client: httpx.Client) -> Callable[[], list[float]]:
            return lambda: _timed(calls, lambda i: client.get(self._url).content)

        return _run_threads([worker(c) for c in self._clients])

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._server.shutdown()
        self._server.server_close()


class ToolCalls:
    """``concurrency`` MockAPI-v0 episodes, authenticated, each with a mix of three calls."""

    def __init__(self, concurrency: int, max_turns: int):
        self._envs = [MockApiEnv(split="train", max_turns=max_turns) for _ in range(concurrency)]
        self._actions = []
        for index, env in enumerate(self._envs):
            env.reset(seed=index)
            observation, *_ = env.step(format_tool_call("http_request", {"method": "POST", "path": "/auth/token", "body": {"api_key": env.api_key}}))
            token = json.loads(observation[0]["content"].split("\n\n", 1)[1])["access_token"]
            headers = {"Authorization": f"Bearer {token}"}
            ticket = next(iter(env.session.world.tickets))
            # A realistic mix: a single record, a filtered page, an update.
            self._actions.append(
                [
                    format_tool_call("http_request", {"method": "GET", "path": f"/tickets/{ticket}", "headers": headers}),
                    format_tool_call("http_request", {"method": "GET", "path": "/tickets", "query": {"status": "open", "per_page": 5}, "headers": headers}),
                    format_tool_call("http_request", {"method": "PATCH", "path": f"/tickets/{ticket}", "body": {"priority": "high"}, "headers": headers}),
                ]
            )

    def run(self, calls: int) -> tuple[list[float], float]:
        def worker(env: MockApiEnv, mix: list[str]) -> Callable[[], list[float]]:
            return lambda: _timed(calls, lambda i: env.step(mix[i % len(mix)]))

        return _run_threads([worker(env, mix) for env, mix in zip(self._envs, self._actions, strict=False)])

    def close(self) -> None:
        for env in self._envs:
            env.close()


def measure(concurrency: int, calls: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """Tool and baseline summaries; the two alternate in ``rounds`` rounds so load drift hits both."""
    baseline, tools = Baseline(concurrency), ToolCalls(concurrency, max_turns=calls * rounds + 10)
    try:
        per_round = max(1, calls // rounds)
        base_runs = []
        tool_runs = []
        for _ in range(rounds):
            base_runs.append(baseline.run(per_round))
            tool_runs.append(tools.run(per_round))
        return _summary(*_merge(tool_runs)), _summary(*_merge(base_runs))
    finally:
        baseline.close()
        tools.close()


def _merge(runs: list[tuple[list[float], float]]) -> tuple[list[float], float]:
    return [x for latencies, _ in runs for x in latencies], sum(wall for _, wall in runs)


def _summary(latencies: list[float], wall: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
        "calls_per_s": len(ordered) / wall,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16,256", help="comma-separated episode counts")
    parser.add_argument("--calls", type=int, default=0, help="tool calls per episode (default: 3000 total, at least 20 each)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating baseline/tool rounds (default 5)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = []
    print(f"{'episodes':>8} | {'tool p50 ms':>11} {'p99 ms':>8} {'calls/s':>8} | {'raw p50 ms':>10} {'p99 ms':>8} {'calls/s':>8} | {'p50 x':>6} {'rate x':>6}")
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        calls = args.calls or max(20, 3000 // concurrency)
        tool, base = measure(concurrency, calls, max(1, args.rounds))
        row = {
            "episodes": concurrency,
            "calls_per_episode": calls,
            "tool": tool,
            "baseline": base,
            "p50_ratio": tool["p50_ms"] / base["p50_ms"],
            "throughput_ratio": tool["calls_per_s"] / base["calls_per_s"],
        }
        results.append(row)
        print(
            f"{concurrency:>8} | {tool['p50_ms']:>11.3f} {tool['p99_ms']:>8.2f} {tool['calls_per_s']:>8.0f} | "
            f"{base['p50_ms']:>10.3f} {base['p99_ms']:>8.2f} {base['calls_per_s']:>8.0f} | {row['p50_ratio']:>6.2f} {row['throughput_ratio']:>6.2f}"
        )
    print("tool = env.step with one http_request (parse, validate, httpx, server, render); raw = httpx GET to a trivial stdlib endpoint.")
    print("p50 x = tool p50 / raw p50; rate x = tool calls/s / raw calls/s (same run, same threads).")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
