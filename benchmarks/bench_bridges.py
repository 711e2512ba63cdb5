"""Overhead of the bridges against their in-process baselines, measured in the same run.

1. MCP tool-call round trip over stdio: ToolMath-v0's ``calculator`` (a non-code tool) called
   ``--calls`` times through ``agentgym mcp`` by the official mcp client, against the same call
   stepped in-process (``env.step``), and a call the server answers without stepping the
   environment (the transport and the SDK alone). Prints p50/p90. Target: p50 < 2 ms.
2. Proxy overhead: SQL-v0 opening prompts (about 1,300 tokens) answered with ``--max-tokens``
   greedy tokens by the bundled SmolLM2-135M-Instruct, ``--requests`` times directly (render the
   chat, ``backend.generate``) and through ``agentgym proxy`` with the official openai client (HTTP,
   rendering, recording), in alternating order so each path computes a shared prefix first half
   the time. Prints the median per request and the overhead. Target: < 5 %.

Usage: python benchmarks/bench_bridges.py [--calls 500] [--requests 8] [--max-tokens 32] [--only mcp|proxy]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import agentgym  # noqa: F401 - registers the environments
from agentgym.envs import make_env

CALL = ("calculator", {"expression": "(1549900 / 5442300) * 100"})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def in_process_calls(calls: int) -> list[float]:
    env = make_env("agentgym/ToolMath-v0", max_turns=calls + 1)
    env.reset(seed=0)
    name, arguments = CALL
    action = {"role": "assistant", "content": "", "tool_calls": [{"id": "call", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        env.step(action)
        times.append(time.perf_counter() - start)
    env.close()
    return times


def mcp_calls(calls: int) -> tuple[list[float], list[float], str]:
    import json

    import anyio
    from mcp import Client, StdioServerParameters

    async def run() -> tuple[list[float], list[float], str]:
        command = ["-m", "agentgym.cli", "mcp", "agentgym/ToolMath-v0", "--env-kwargs", json.dumps({"max_turns": calls + 1})]
        async with Client(StdioServerParameters(command=sys.executable, args=command)) as client:
            await client.call_tool("agentgym_reset", {"seed": 0})
            times, floor, text = [], [], ""
            for _ in range(calls):
                start = time.perf_counter()
                result = await client.call_tool(*CALL)
                times.append(time.perf_counter() - start)
                text = result.content[0].text
                start = time.perf_counter()
                await client.call_tool("agentgym_reward", {})  # refused before the episode ends: no environment step
                floor.append(time.perf_counter() - start)
            return times, floor, text

    return anyio.run(run)


def bench_mcp(calls: int) -> None:
    local = in_process_calls(calls)
    remote, floor, text = mcp_calls(calls)
    print(f"MCP round trip over stdio: ToolMath-v0 calculator -> {text!r}, {calls} calls")
    print(f"{'path':<28}{'p50 ms':>10}{'p90 ms':>10}")
    rows = (("in-process env.step", local), ("mcp stdio", remote), ("mcp stdio, no env step", floor))
    for label, times in rows:
        print(f"{label:<28}{percentile(times, 0.5):>10.3f}{percentile(times, 0.9):>10.3f}")
    p50 = percentile(remote, 0.5)
    print(f"mcp stdio p50 {p50:.3f} ms ({p50 - percentile(local, 0.5):+.3f} ms over in-process; target < 2 ms: {'met' if p50 < 2 else 'missed'})")


def bench_proxy(requests: int, max_tokens: int) -> None:
    import openai
    import torch

    from agentgym.bridges.asgi import serve_in_thread
    from agentgym.bridges.proxy import ChatProxy
    from agentgym.models import HFBackend, SamplingParams, load_model
    from agentgym.rollouts.chat import ChatRenderer

    torch.set_num_threads(1)
    model, tokenizer = load_model(device="cpu")
    backend = HFBackend(model, tokenizer)
    env = make_env("agentgym/SQL-v0", split="test")
    tools = env.unwrapped.tools
    openings = [env.reset(seed=seed)[0] for seed in range(requests + 1)]
    env.close()
    renderer = ChatRenderer(tokenizer, tools=tools)
    proxy = ChatProxy(backend, model_name="smollm2")
    url, stop = serve_in_thread(proxy.app())
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)

    def direct(messages: list) -> float:
        start = time.perf_counter()
        prompt = renderer.prompt_ids(messages)
        backend.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=max_tokens, stop_token_ids=(renderer.eot_token_id,)))
        return time.perf_counter() - start

    def proxied(messages: list, episode: str) -> float:
        start = time.perf_counter()
        client.chat.completions.create(
            model="smollm2", messages=messages, tools=tools, temperature=0, max_tokens=max_tokens, extra_headers={"X-Episode-Id": episode}
        )
        return time.perf_counter() - start

    direct(openings[-1]), proxied(openings[-1], "warm-up")  # loads, allocates, compiles nothing twice
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    for index, messages in enumerate(openings[:-1]):
        if index % 2 == 0:
            times["direct"].append(direct(messages))
            times["proxy"].append(proxied(messages, f"bench-{index}"))
        else:
            times["proxy"].append(proxied(messages, f"bench-{index}"))
            times["direct"].append(direct(messages))
    stop()
    proxy.close()
    print(
        f"\nproxy overhead: SQL-v0 openings (~{len(renderer.prompt_ids(openings[0]))} tokens), {max_tokens} greedy tokens, {requests} requests, SmolLM2-135M on CPU"
    )
    print(f"{'path':<10}{'median s':>10}{'min s':>10}")
    for label, values in times.items():
        print(f"{label:<10}{statistics.median(values):>10.3f}{min(values):>10.3f}")
    overhead = statistics.median(times["proxy"]) / statistics.median(times["direct"]) - 1
    print(f"proxy / direct: {1 + overhead:.3f}x, overhead {overhead * 100:+.1f} % (target < 5 %: {'met' if overhead < 0.05 else 'missed'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--only", choices=["mcp", "proxy"])
    args = parser.parse_args()
    if args.only != "proxy":
        bench_mcp(args.calls)
    if args.only != "mcp":
        bench_proxy(args.requests, args.max_tokens)


if __name__ == "__main__":
    main()
