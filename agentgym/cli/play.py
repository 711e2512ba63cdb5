"""``agentgym play``: play an environment yourself in the terminal, typing the assistant's turns."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentgym.cli._common import env_arguments, make

if TYPE_CHECKING:
    from agentgym.records import ChatMessage

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("play", help="play an environment yourself in the terminal")
    env_arguments(p)
    p.add_argument("--task-id", help="play this task (default: drawn with the seed)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, read: Callable[[str], str] = input) -> int:
    """An interactive episode: type the assistant's turns; ``/call NAME {json}`` writes a tool call."""
    from rich.console import Console

    from agentgym.parsing import format_tool_call

    console = Console(highlight=False)
    env = make(args)
    observation, info = env.reset(seed=args.seed, options={"task_id": args.task_id} if args.task_id else None)
    console.print(f"[bold]{args.env}[/] task {info['task_id']}. Type your turn; /call NAME {{json args}} makes a tool call; /tools lists tools; /quit ends.")
    done = False
    while not done:
        _show(console, observation)
        try:
            line = read("assistant> ").strip()
        except EOFError:
            line = "/quit"
        if line == "/quit":
            break
        if line == "/tools":
            for schema in env.unwrapped.tools:
                console.print(json.dumps(schema["function"], indent=1))
            observation = []
            continue
        if line.startswith("/call "):
            name, _, raw = line[6:].strip().partition(" ")
            try:
                line = format_tool_call(name, json.loads(raw) if raw.strip() else {})
            except json.JSONDecodeError as exc:
                console.print(f"[red]arguments are not valid JSON: {exc.msg}[/]")
                observation = []
                continue
        observation, reward, terminated, truncated, info = env.step(line)
        done = terminated or truncated
    if done:
        _show(console, observation)
        console.print(f"[bold]episode over[/]: reward {reward:.3f} — {info.get('reward_reason', '')}")
    env.close()
    return 0


def _show(console: Any, messages: Sequence[ChatMessage]) -> None:
    from rich.markdown import Markdown
    from rich.text import Text

    for message in messages:
        label = message["role"] + (f":{message['name']}" if "name" in message else "")
        if message["role"] == "system":
            # The policy is Markdown, hard-wrapped at 100 columns: reflowed to the terminal's width,
            # not wrapped again line by line.
            console.print(Text(label, "bold cyan"))
            console.print(Markdown(message["content"]))
        else:
            console.print(Text.assemble((label, "bold cyan"), " ", message["content"]))
