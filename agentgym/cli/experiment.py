"""``agentgym experiment``: run (or resume) base vs SFT vs GRPO (and ablations) over several seeds on held-out tasks, and print its results table."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from agentgym.cli._common import quiet_argument

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser("experiment", help="base vs SFT vs GRPO (and ablations) over several seeds on held-out tasks; writes a results folder")
    p.add_argument("config", metavar="FILE.yaml", help="experiment configuration, e.g. trainers/configs/experiments/learning_cpu.yaml (see docs/results.md)")
    p.add_argument("--output", metavar="DIR", help="results folder (default: the configuration's output_dir)")
    p.add_argument("--summarize", action="store_true", help="only recompute summary.json, results.md and plots from the episodes already written")
    p.add_argument(
        "--development",
        action="store_true",
        help="the development run: the configuration's development seeds and evaluation tasks, in OUTPUT/development (choices are made on it)",
    )
    p.add_argument(
        "--seeds",
        type=_seeds,
        metavar="S,S,...",
        help="training seeds instead of the configuration's; a finished results folder takes more seeds (its phases are kept), e.g. 0,1,2,3,4,5",
    )
    quiet_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.models import ModelLoadError
    from agentgym.trainers.config import ConfigError
    from agentgym.trainers.experiment import load_experiment, run_experiment, summarize_experiment
    from agentgym.trainers.modeling import TrainerError

    # A stopped run (SIGTERM from a scheduler, say) unwinds like Ctrl-C: its workers stop and its
    # wall time so far is recorded, so the resumed run's total is right.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.summarize and args.seeds is not None:
            raise ConfigError("--summarize summarises the seeds the results folder holds; leave --seeds out")
        config = load_experiment(args.config, output_dir=args.output, seeds=args.seeds, development=args.development)
        if args.summarize:
            if not (Path(config.output_dir) / "tasks.json").is_file():
                raise ConfigError(f"{config.output_dir} holds no experiment to summarise")
            summarize_experiment(config.output_dir)
        else:
            from agentgym.progress import ProgressReport

            with ProgressReport(enabled=not args.quiet) as progress:
                run_experiment(config, log=lambda line: progress.console.print(line, highlight=False, markup=False), progress=progress)
    except (ConfigError, TrainerError, ModelLoadError) as exc:
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2
    print((Path(config.output_dir) / "results.md").read_text(encoding="utf-8"))
    return 0


def _seeds(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 0,1,2; got {text!r}") from None


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
