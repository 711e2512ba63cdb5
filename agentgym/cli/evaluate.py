"""``agentgym eval``: roll a model out in an environment; print success with a confidence interval, reward, turns, tokens and error rates.

With ``--out``, each episode is written as it finishes: Ctrl-C keeps the finished ones and prints
their summary, and the same command resumes the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentgym.cli._common import CLIError, make, model_backend, non_negative_int, positive_int, quiet_argument, setting_argument, settings_arguments
from agentgym.rollouts.settings import RolloutConfig, RolloutSettings, settings_of

if TYPE_CHECKING:
    from agentgym.rollouts.runner import Episode

__all__ = ["add_parser", "rollout_config", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("eval", help="evaluate a model in an environment and write its trajectories")
    p.add_argument("env", metavar="ENV", help="environment id, e.g. agentgym/Refund-v0")
    p.add_argument("--model", help="model name, local path, .gguf file or hub id (default: the bundled SmolLM2-135M-Instruct)")
    setting_argument(p, RolloutConfig, "split", default="test")
    p.add_argument("--episodes", type=positive_int, default=10, help="tasks to evaluate; each runs --group-size times (default 10)")
    setting_argument(p, RolloutConfig, "group_size", "--group-size", "--num-trials", help="episodes (trials) per task; 2 or more also reports pass^k")
    setting_argument(p, RolloutConfig, "task_ids", help="evaluate these tasks (instead of --episodes drawn ones)")
    settings_arguments(p, RolloutSettings, max_total_tokens={"unset": "the local model's context window"})
    setting_argument(p, RolloutConfig, "seed")
    p.add_argument(
        "--backend", default="hf", choices=["hf", "openai", "vllm"], help="local transformers, an OpenAI-compatible server, or in-process vLLM (default hf)"
    )
    p.add_argument("--base-url", help="server API root for --backend openai, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--device", default="auto", help="device for --backend hf: auto, cpu, cuda, cuda:1 ... (default auto)")
    p.add_argument(
        "--infra-retries",
        type=non_negative_int,
        default=1,
        help="times an episode the machinery failed under (a dead sandbox server, a lost connection) is played again with the same seeds; "
        "one that still fails is left out of the rates and counted as an infra error (default 1)",
    )
    setting_argument(p, RolloutConfig, "env_kwargs")
    p.add_argument("--out", help="write the episodes with their token ids and loss masks: JSON lines, or Parquet for .parquet")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    quiet_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from agentgym.models import DEFAULT_MODEL, BackendError, ModelLoadError
    from agentgym.progress import ProgressReport
    from agentgym.rollouts.episode_file import EpisodeFile
    from agentgym.rollouts.evaluation import evaluate, print_report
    from agentgym.rollouts.runner import Episode

    config = rollout_config(args)  # validates the values before anything is loaded
    env = make(args)  # validates the id and kwargs before the model is loaded
    max_turns = config.max_turns or env.unwrapped.max_turns
    env.close()
    tokenizer = args.model or DEFAULT_MODEL
    out = None
    earlier: list[Episode] = []
    if args.out:
        settings = {"command": "eval", "model": tokenizer, "backend": args.backend, "base_url": args.base_url, **asdict(config)}
        out = EpisodeFile(args.out, settings, key=lambda record: (record["group"], record["member"]))
        earlier = [Episode.from_dict(line) for line in out.open()]  # checks the settings before the model loads
    finished = list(earlier)

    def keep(episode: Episode) -> None:
        finished.append(episode)
        if out is not None:
            out.write({**episode.to_dict(), "tokenizer": tokenizer})

    try:
        backend = model_backend(args)
        if config.max_total_tokens is None and _context_window(backend) is not None:
            config = replace(config, max_total_tokens=_context_window(backend))
        if earlier:
            print(f"agentgym: resuming: {len(earlier)} of {config.num_episodes} episodes are already in {args.out}", file=sys.stderr)
        with ProgressReport(enabled=not args.quiet) as progress:
            try:
                result = evaluate(backend, config, progress=progress.episodes(), on_episode=keep, earlier=earlier, infra_retries=args.infra_retries)
            except (ModelLoadError, BackendError) as exc:
                raise CLIError(str(exc)) from None
    except KeyboardInterrupt:
        if out is not None:
            out.close()
            del finished[out.finished :]  # Ctrl-C may have come before the last one was written
        _report_interrupted(finished, config, args, backend_name=tokenizer)
        return 130
    if out is not None:
        out.complete()
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


def rollout_config(args: argparse.Namespace) -> RolloutConfig:
    """The episodes the options describe: every setting they name (an option's destination is its
    field's name), ``--episodes`` tasks unless ``--task-ids`` names them."""
    clashing = sorted({"split", "max_turns"} & set(args.env_kwargs))
    if clashing:
        key = clashing[0]
        raise CLIError(f"use --{key.replace('_', '-')} instead of setting {key} in --env-kwargs")
    num_tasks = len(args.task_ids) if args.task_ids else args.episodes
    return RolloutConfig(**{**settings_of(args, RolloutConfig), "env_id": args.env, "num_tasks": num_tasks})


def _report_interrupted(finished: list[Episode], config: RolloutConfig, args: argparse.Namespace, *, backend_name: str) -> None:
    """After Ctrl-C: what finished, and where it is kept."""
    from rich.console import Console

    from agentgym.rollouts.evaluation import eval_metrics, print_report

    console = Console(stderr=True)
    kept = f"; they are in {args.out}, and the same command resumes the run" if args.out else "; with --out they would have been kept"
    console.print(f"agentgym: interrupted: {len(finished)} of {config.num_episodes} episodes finished{kept}", highlight=False)
    if finished:
        print_report({"env": args.env, "policy": backend_name, "split": args.split, **eval_metrics(finished)}, console)


def _context_window(backend: Any) -> int | None:
    """The context window of a local transformers model (a longer prompt cannot be continued)."""
    config = getattr(getattr(backend, "model", None), "config", None)
    return getattr(config, "max_position_embeddings", None)
