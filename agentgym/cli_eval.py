"""The ``agentgym eval`` and ``agentgym inspect`` commands (registered by :mod:`agentgym.cli`).

``eval`` rolls a model out in an environment and prints success with a confidence interval, reward,
turns, tokens and error rates; ``inspect`` shows one written trajectory with trained and masked
tokens coloured. Bad input (an unknown environment, a missing model, an unreachable server, a bad
file) is one line on stderr and exit status 2, like every other command.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentgym.cli import CLIError, _json_object, _make, _positive_int

__all__ = ["add_eval_commands"]


def add_eval_commands(commands: Any) -> None:
    """Add ``eval`` and ``inspect`` to the CLI's sub-command parsers."""
    p = commands.add_parser("eval", help="evaluate a model in an environment and write its trajectories")
    p.add_argument("env", metavar="ENV", help="environment id, e.g. agentgym/Refund-v0")
    p.add_argument("--model", help="model name, local path, .gguf file or hub id (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="task split (default test)")
    p.add_argument("--episodes", type=_positive_int, default=10, help="tasks to evaluate; each runs --group-size times (default 10)")
    p.add_argument(
        "--group-size",
        "--num-trials",
        dest="group_size",
        type=_positive_int,
        default=1,
        help="episodes (trials) per task; 2 or more also reports pass^k (default 1)",
    )
    p.add_argument("--task-ids", nargs="+", metavar="ID", help="evaluate these tasks (instead of --episodes drawn ones)")
    p.add_argument("--max-turns", type=_positive_int, help="assistant turns per episode (default: the environment's)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=256, help="tokens sampled per turn at most (default 256)")
    p.add_argument(
        "--max-total-tokens", type=_positive_int, help="token budget of a whole trajectory, prompt included (default: the local model's context window)"
    )
    p.add_argument("--temperature", type=_non_negative_float, default=1.0, help="sampling temperature, 0 = greedy (default 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass in (0, 1] (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument(
        "--backend", default="hf", choices=["hf", "openai", "vllm"], help="local transformers, an OpenAI-compatible server, or in-process vLLM (default hf)"
    )
    p.add_argument("--base-url", help="server API root for --backend openai, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--device", default="auto", help="device for --backend hf: auto, cpu, cuda, cuda:1 ... (default auto)")
    p.add_argument("--env-kwargs", type=_json_object, default={}, metavar="JSON", help="extra keyword arguments for gym.make, as a JSON object")
    p.add_argument("--out", help="write the episodes with their token ids and loss masks: JSON lines, or Parquet for .parquet")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=_eval)

    p = commands.add_parser("inspect", help="show a trajectory from an eval JSONL file with trained tokens coloured")
    p.add_argument("file", metavar="FILE.jsonl", help="a file written by agentgym eval --out")
    p.add_argument("--index", type=int, default=0, help="which line (default 0; negative counts from the end)")
    p.add_argument("--model", help="tokenizer to decode with (default: the one the file names)")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page instead of printing")
    p.set_defaults(run=_inspect)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def _check_model_path(model: str | None) -> None:
    """Fail fast on a model given as a path that does not exist (a hub id would be looked up online)."""
    if model is None:
        return
    path = Path(model).expanduser()
    looks_like_path = path.is_absolute() or model.startswith((".", "~")) or path.suffix == ".gguf"
    if looks_like_path and not path.exists():
        raise CLIError(f"model not found: {model}")


def _backend(args: argparse.Namespace) -> Any:
    from agentgym.models import BackendError, ModelLoadError, create_backend

    if args.backend == "openai" and not args.base_url:
        raise CLIError("--backend openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
    if args.backend != "openai" and args.base_url:
        raise CLIError("--base-url only applies to --backend openai")
    _check_model_path(args.model)
    try:
        return create_backend(args.model, kind=args.backend, device=args.device, base_url=args.base_url)
    except (ModelLoadError, BackendError) as exc:
        raise CLIError(str(exc)) from None


def _context_window(backend: Any) -> int | None:
    """The context window of a local transformers model (a longer prompt cannot be continued)."""
    config = getattr(getattr(backend, "model", None), "config", None)
    return getattr(config, "max_position_embeddings", None)


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agentgym.evaluation import evaluate, print_report
    from agentgym.models import DEFAULT_MODEL, BackendError, ModelLoadError
    from agentgym.rollout import write_records
    from agentgym.runner import RolloutConfig

    clashing = sorted({"split", "max_turns"} & set(args.env_kwargs))
    if clashing:
        key = clashing[0]
        raise CLIError(f"use --{key.replace('_', '-')} instead of setting {key} in --env-kwargs")
    config = RolloutConfig(  # validates the values before anything is loaded
        env_id=args.env,
        split=args.split,
        num_tasks=len(args.task_ids) if args.task_ids else args.episodes,
        task_ids=args.task_ids,
        group_size=args.group_size,
        seed=args.seed,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        max_total_tokens=args.max_total_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        env_kwargs=args.env_kwargs,
    )
    env = _make(args)  # validates the id and kwargs before the model is loaded
    max_turns = config.max_turns or env.unwrapped.max_turns
    env.close()
    if args.out and not Path(args.out).expanduser().resolve().parent.is_dir():
        raise CLIError(f"cannot write {args.out}: its directory does not exist")
    backend = _backend(args)
    if config.max_total_tokens is None and _context_window(backend) is not None:
        config = replace(config, max_total_tokens=_context_window(backend))
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"{args.env} episodes", total=config.num_episodes)
        try:
            result = evaluate(backend, config, progress=lambda done, total: bar.update(task, completed=done))
        except (ModelLoadError, BackendError) as exc:
            raise CLIError(str(exc)) from None
    if args.out:
        tokenizer = args.model or DEFAULT_MODEL
        write_records(args.out, ({**e.to_dict(), "tokenizer": tokenizer} for e in result.episodes))
    summary = {
        "env": args.env,
        "policy": backend.name,
        "split": args.split,
        **result.metrics,
        "group_size": config.group_size,
        "seed": config.seed,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_turns": max_turns,
        "max_new_tokens": config.max_new_tokens,
        "max_total_tokens": config.max_total_tokens,
        "out": args.out,
        "timing": result.timing.to_dict(),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_report(summary)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym.models import ModelLoadError, Trajectory, load_tokenizer, render_html, render_rich
    from agentgym.rollout import read_jsonl

    lines = read_jsonl(args.file)
    if not lines:
        raise CLIError(f"{args.file} holds no trajectories")
    if not -len(lines) <= args.index < len(lines):
        raise CLIError(f"--index {args.index} is out of range: {args.file} holds {len(lines)} trajectories")
    line = lines[args.index]
    if not isinstance(line, dict) or "trajectory" not in line:
        raise CLIError(f"line {args.index} of {args.file} has no trajectory (write files with agentgym eval --out)")
    try:
        trajectory = Trajectory.from_dict(line["trajectory"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CLIError(f"line {args.index} of {args.file} holds a malformed trajectory: {exc}") from None
    model = args.model or line.get("tokenizer")
    _check_model_path(model)
    try:
        tokenizer = load_tokenizer(model)
    except ModelLoadError as exc:
        raise CLIError(str(exc)) from None
    title = (
        f"{line.get('env_id', '?')} task {line.get('task_id', '?')}: reward {line.get('reward', 0.0):.3f}, "
        f"success {line.get('success')}, stop {line.get('stop_reason', '?')}"
    )
    if args.html:
        Path(args.html).write_text(render_html(trajectory, tokenizer, title=title), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    else:
        console = Console(highlight=False)
        console.print(title, style="bold")
        console.print(render_rich(trajectory, tokenizer))
    return 0
