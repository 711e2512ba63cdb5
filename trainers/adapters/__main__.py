"""Files the trainers' launch commands point at, without importing the trainers.

python -m agentgym.trainers.adapters verl-agent-loop
    print the agent-loop registration YAML (verl's rollout.agent.agent_loop_config_path)
python -m agentgym.trainers.adapters openrlhf-agent-func [--write PATH] [--tool-mode M] [--template-kwargs JSON]
    print the adapter module (OpenRLHF's --train.agent_func_path), or write an agent_func
    file with these rendering options and print its path
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

AGENT_FUNC_TEMPLATE = '''"""OpenRLHF agent_func for agentgym environments (written by `python -m agentgym.trainers.adapters openrlhf-agent-func`)."""

from agentgym.trainers.adapters.openrlhf import make_agent_executor

AgentExecutor = make_agent_executor(tool_mode={tool_mode!r}, template_kwargs={template_kwargs!r})
'''


def _module_file(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates the file without running it (and its imports)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"module {name} not found")
    return Path(spec.origin).resolve()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m agentgym.trainers.adapters", description="Paths for the trainers' launch commands.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("verl-agent-loop", help="print verl's agent-loop registration YAML")
    agent_func = commands.add_parser("openrlhf-agent-func", help="print (or write) OpenRLHF's agent_func file")
    agent_func.add_argument("--write", metavar="PATH", help="write an agent_func file with the options below")
    agent_func.add_argument("--tool-mode", choices=("auto", "template", "system_prompt"), default="auto")
    agent_func.add_argument("--template-kwargs", default="{}", help="JSON chat-template variables, e.g. '{\"enable_thinking\": false}'")
    args = parser.parse_args(argv)

    if args.command == "verl-agent-loop":
        print(_PACKAGE / "verl_agent_loop.yaml")
        return 0
    if args.write is None:
        if args.tool_mode != "auto" or args.template_kwargs != "{}":
            parser.error("--tool-mode and --template-kwargs need --write")
        print(_module_file("agentgym.trainers.adapters.openrlhf"))
        return 0
    try:
        template_kwargs = json.loads(args.template_kwargs)
        if not isinstance(template_kwargs, dict):
            raise ValueError("--template-kwargs must be a JSON object")
        path = Path(args.write)
        path.write_text(AGENT_FUNC_TEMPLATE.format(tool_mode=args.tool_mode, template_kwargs=template_kwargs), encoding="utf-8")
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
