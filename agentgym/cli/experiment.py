"""``agentgym experiment``: run (or resume) base vs SFT vs GRPO (and ablations) over several seeds on held-out tasks, and print its results table;
given several configuration files (one per environment, say), run them in turn and write one combined report."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from agentgym.cli._common import quiet_argument

__all__ = ["add_parser", "run"]

SUITE_REPORT = "runs/learning-suite.md"


def add_parser(commands: Any) -> None:
    p = commands.add_parser("experiment", help="base vs SFT vs GRPO (and ablations) over several seeds on held-out tasks; writes a results folder")
    p.add_argument(
        "configs",
        nargs="+",
        metavar="FILE.yaml",
        help="experiment configuration(s), e.g. trainers/configs/experiments/learning_cpu.yaml (see docs/results.md); several run one after another",
    )
    p.add_argument("--output", metavar="DIR", help="results folder (default: the configuration's output_dir; one configuration only)")
    p.add_argument(
        "--report",
        metavar="FILE.md",
        help=f"with several configurations, the combined report (default {SUITE_REPORT}): a table per environment, linking each results.md",
    )
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
    p.add_argument(
        "--arms",
        type=_names,
        metavar="ARM,ARM,...",
        help="train and evaluate only these arms (grpo or the configuration's ablations; base and SFT always run), "
        "e.g. to develop one new arm beside its control; the others can be added to the folder later",
    )
    quiet_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agentgym.models import ModelLoadError
    from agentgym.trainers.config import ConfigError
    from agentgym.trainers.experiment import load_experiment, run_experiment, summarize_experiment
    from agentgym.trainers.experiment.report import suite_markdown
    from agentgym.trainers.modeling import TrainerError

    # A stopped run (SIGTERM from a scheduler, say) unwinds like Ctrl-C: its workers stop and its
    # wall time so far is recorded, so the resumed run's total is right.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.summarize and args.seeds is not None:
            raise ConfigError("--summarize summarises the seeds the results folder holds; leave --seeds out")
        if args.summarize and args.arms is not None:
            raise ConfigError("--summarize summarises every arm the results folder holds; leave --arms out")
        if len(args.configs) > 1 and args.output is not None:
            raise ConfigError("--output names the results folder of one configuration; with several, each uses its own output_dir")
        if len(args.configs) == 1 and args.report is not None:
            raise ConfigError("--report is the combined report of several configurations; one writes its own results.md")
        # Every file is checked before the first (long) run starts.
        configs = [load_experiment(path, output_dir=args.output, seeds=args.seeds, development=args.development) for path in args.configs]
        summaries = {}
        for config in configs:
            if args.summarize:
                if not (Path(config.output_dir) / "tasks.json").is_file():
                    raise ConfigError(f"{config.output_dir} holds no experiment to summarise")
                summaries[Path(config.output_dir)] = summarize_experiment(config.output_dir)
            else:
                from agentgym.progress import ProgressReport

                with ProgressReport(enabled=not args.quiet) as progress:
                    summaries[Path(config.output_dir)] = run_experiment(
                        config, arms=args.arms, log=lambda line: progress.console.print(line, highlight=False, markup=False), progress=progress
                    )
    except (ConfigError, TrainerError, ModelLoadError) as exc:
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2
    if len(configs) == 1:
        print((Path(configs[0].output_dir) / "results.md").read_text(encoding="utf-8"))
        return 0
    report = Path(args.report or SUITE_REPORT)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(suite_markdown(summaries), encoding="utf-8")
    print(report.read_text(encoding="utf-8"))
    return 0


def _seeds(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 0,1,2; got {text!r}") from None


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated arm names, e.g. grpo,sft_continued; got {text!r}")
    return names


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
