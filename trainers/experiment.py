"""The learning experiment: does GRPO make the agent better than its SFT starting point?

One command runs the whole comparison and writes a results folder::

    agentgym experiment trainers/configs/experiments/learning_cpu.yaml

Read :func:`run_experiment` top to bottom; it is the whole protocol::

    pick the tasks: SFT demonstrations, GRPO training tasks (disjoint from them), evaluation tasks
        (other splits, disjoint from both)
    evaluate the untouched model
    for each seed:
        SFT on the demonstrations                          -> evaluate
        GRPO from that SFT model                           -> evaluate
        each ablation: GRPO with one setting changed       -> evaluate
    summarise the written evaluation episodes: success with Wilson intervals, the paired
        GRPO - SFT difference with a task-clustered bootstrap interval, pass^k over trials,
        per-template breakdowns, curves of the GRPO phases, example trajectories

The phases run one after another, or ``jobs`` at a time in worker processes (each with the
machine's cores divided among them), as soon as the phase they start from has finished: training
phases first, SFT before GRPO (an SFT model starts its seed's GRPO phases), evaluations once no
training is ready. On 2 CPU cores two single-threaded phases do more work than one two-threaded
phase, since much of a rollout is single-threaded Python: two trainings ~1.3x, two evaluations
~1.2x (152 s for two one-thread evaluations side by side against 92 s for one with both threads).

Every evaluation plays each evaluation task ``trials`` times with different environment seeds
(different faults, when the environment has them), greedily, and every arm sees exactly the same
(task, environment seed) pairs, so arms are compared pair by pair. Everything derives from the
seeds: rerunning the command reproduces the numbers. An interrupted run resumes where it stopped
(finished phases are kept; an interrupted training phase resumes from its last checkpoint).

Files (``output_dir``): ``experiment.yaml`` (the configuration), ``tasks.json`` (the task ids of
each role), ``<arm>/seed-<s>/run/`` (the trainer's run folder; its checkpoints are deleted once
the phase has finished), ``<arm>/seed-<s>/eval.jsonl`` and
``base/eval.jsonl`` (one line per evaluation episode), ``timings.json`` (seconds per phase and in all),
``summary.json``, ``results.md`` and ``plots/``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import statistics
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from agentgym.envs import make_env
from agentgym.evaluation import paired_bootstrap, pass_hat_k, wilson_interval
from agentgym.progress import ProgressReport
from agentgym.rollout import final_info, read_jsonl, write_jsonl
from agentgym.trainers.config import ConfigError, TrainConfig, config_dataclass, config_error, config_from_dict
from agentgym.trainers.diagnostics import read_metrics, save_plot
from agentgym.trainers.memory import EPISODE_TOKENS, MemoryBudget, available_memory, model_footprint

__all__ = ["Choice", "DevelopmentSection", "EvaluationSection", "ExperimentConfig", "TaskPick", "load_experiment", "run_experiment", "summarize_experiment"]

BASE, SFT, GRPO = "base", "sft", "grpo"


@config_dataclass("task selection")
class TaskPick:
    """A set of the environment's tasks.

    Attributes:
        splits: the splits they come from.
        difficulties: keep only tasks of these difficulties (``None``: all).
        task_ids: exactly these tasks (then ``difficulties`` must be ``None``).
        count: at most this many, in an order shuffled by the experiment's first seed.
    """

    splits: Annotated[tuple[str, ...], Field(min_length=1)] = ("train",)
    difficulties: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    task_ids: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    count: Annotated[int, Field(ge=1)] | None = None

    def __post_init__(self) -> None:
        if self.task_ids is not None and self.difficulties is not None:
            raise ConfigError.listing("task selection", ["give task_ids or difficulties, not both"])


@config_dataclass("evaluation section")
class EvaluationSection:
    """How every arm is evaluated.

    Attributes:
        tasks: the evaluation tasks (their splits must differ from the training tasks').
        trials: episodes per task, each with another environment seed (pass^k needs k <= trials).
        temperature: sampling temperature (0: greedy).
        env_kwargs: ``gym.make`` arguments of the evaluation episodes.
        seed: the seed the environment seeds of the trials derive from (the same for every arm).
        infra_retries: times an episode the machinery failed under is played again (see
            :meth:`agentgym.runner.RolloutRunner.run`); one that still fails is left out of every
            arm's statistics and counted in ``infra_errors``.
    """

    tasks: TaskPick = field(default_factory=lambda: TaskPick(splits=("test",)))
    trials: Annotated[int, Field(ge=1)] = 2
    temperature: Annotated[float, Field(ge=0)] = 0.0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 100_000
    infra_retries: Annotated[int, Field(ge=0)] = 1


@config_dataclass("development section")
class DevelopmentSection:
    """Where the configuration is chosen, kept apart from the reported run.

    ``agentgym experiment FILE --development`` runs the protocol with these seeds and evaluation
    tasks (in ``<output_dir>/development``); every choice of learning rate, temperature, steps or
    caps is made on such runs, and the reported run (``seeds``, ``evaluation.tasks``) is scored
    once, with seeds and tasks no choice saw.

    Attributes:
        seeds: training seeds of development runs; none of them may be a reported seed.
        evaluation_tasks: the development evaluation tasks; their splits must differ from the
            reported evaluation's.
    """

    seeds: Annotated[tuple[Annotated[int, Field(ge=0)], ...], Field(min_length=1)] = (0, 1, 2)
    evaluation_tasks: TaskPick = field(default_factory=lambda: TaskPick(splits=("val",)))


@config_dataclass("configuration choice")
class Choice:
    """One configuration decision and what it was made on; the report lists them.

    Attributes:
        option: the option, as its key in the configuration (e.g. ``training.rollout.temperature``).
        value: the value chosen.
        made_on: the evidence: development seeds and episodes, a benchmark on training tasks, or
            "not tuned" (a default taken before any run).
    """

    option: Annotated[str, Field(min_length=1)]
    value: Any
    made_on: Annotated[str, Field(min_length=1)]


def _distinct(values: tuple[int, ...]) -> tuple[int, ...]:
    """A field check (``AfterValidator``): no value twice."""
    if len(set(values)) != len(values):
        raise ValueError("must be distinct")
    return values


@config_dataclass("experiment configuration")
class ExperimentConfig:
    """A whole experiment (see the module docstring).

    Attributes:
        env_id: the environment.
        model: the starting model (``None``: the bundled default model).
        output_dir: the results folder.
        seeds: training seeds (distinct); every arm is trained once per seed.
        sft_tasks: the tasks whose oracle demonstrations SFT trains on.
        grpo_tasks: the tasks GRPO trains on (the SFT tasks are removed from them).
        evaluation: how every arm is evaluated.
        training: the trainer's configuration (a ``TrainConfig`` without ``env_id``, ``model``,
            ``seed`` and ``output_dir``); its ``sft`` section drives the SFT phase and its ``grpo``,
            ``rollout`` and ``optim`` sections the GRPO phase.
        ablations: arms that rerun the GRPO phase with some training options changed, by name
            (e.g. ``{"env_tokens_in_loss": {"grpo": {"train_on_env_tokens": true}}}``; not ``base``,
            ``sft`` or ``grpo``, the names of the other arms).
        jobs: phases that run at once, each in its own process with ``cores // jobs`` threads.
            Part of the protocol: the thread count can change float rounding, hence samples.
        development: the seeds and evaluation tasks configuration choices are made on
            (``None``: the configuration declares none).
        choices: each configuration decision and what it was made on (listed in the report).
        run: ``reported`` (the default) or ``development``; set by ``--development``, not by hand.
    """

    env_id: str
    model: str | None = None
    output_dir: str = "runs/experiment"
    seeds: Annotated[tuple[Annotated[int, Field(ge=0)], ...], Field(min_length=1), AfterValidator(_distinct)] = (0, 1, 2)
    sft_tasks: TaskPick = field(default_factory=TaskPick)
    grpo_tasks: TaskPick = field(default_factory=TaskPick)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    training: dict[str, Any] = field(default_factory=dict)
    ablations: dict[str, Annotated[dict[str, Any], Field(min_length=1)]] = field(default_factory=dict)
    jobs: Annotated[int, Field(ge=1)] = 1
    development: DevelopmentSection | None = None
    choices: tuple[Choice, ...] = ()
    run: Literal["reported", "development"] = "reported"

    def __post_init__(self) -> None:
        # Each field's bounds are on the field; these relate options to the ones the experiment
        # sets itself (env_id, model, seed, output_dir) and to the names of its own arms.
        problems = [f"training.{key} is set by the experiment; leave it out" for key in _RESERVED if key in self.training]
        problems += [f"ablation name {name!r} is taken by an arm" for name in self.ablations if name in (BASE, SFT, GRPO)]
        dev = self.development
        if dev is not None and self.run == "reported":
            shared = sorted(set(dev.seeds) & set(self.seeds))
            if shared:
                problems.append(f"development.seeds and seeds share {shared}: a reported seed must be one no choice was made on")
            splits = sorted(set(dev.evaluation_tasks.splits) & set(self.evaluation.tasks.splits))
            if splits:
                problems.append(f"development.evaluation_tasks and evaluation.tasks share the split(s) {splits}")
        if problems:
            raise ConfigError.listing("experiment configuration", problems)


_ADAPTER = TypeAdapter(ExperimentConfig)
_RESERVED = ("env_id", "model", "seed", "output_dir")


def load_experiment(path: str | Path, *, output_dir: str | None = None, seeds: Sequence[int] | None = None, development: bool = False) -> ExperimentConfig:
    """Read and check an experiment YAML file; ``output_dir`` and ``seeds`` replace the file's.

    With ``development``, the development run: the ``development`` section's seeds (unless
    ``seeds`` is given) and evaluation tasks, in ``<output_dir>/development`` (unless
    ``output_dir`` is given).

    Raises:
        ConfigError: unknown keys, wrong types, values out of the bounds the fields declare,
            conflicting options, a training section the trainer rejects, or ``development``
            without a development section.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of options")
    try:
        config = _ADAPTER.validate_python(data)
        if development:
            config = _development_run(config)
        changes: dict[str, Any] = {"output_dir": output_dir} if output_dir is not None else {}
        if seeds is not None:
            changes["seeds"] = list(seeds)
        if changes:
            config = _ADAPTER.validate_python({**dataclasses.asdict(config), **changes})
    except ValidationError as exc:
        raise config_error(exc, ExperimentConfig, "experiment configuration") from None
    try:
        _train_config(config, SFT, config.seeds[0], [], [], Path(config.output_dir))  # the trainer checks its part now
    except ConfigError as exc:  # named as the experiment file names them
        raise ConfigError.listing("experiment configuration", [_in_training(problem) for problem in exc.problems]) from None
    return config


def _development_run(config: ExperimentConfig) -> ExperimentConfig:
    """The development run of ``config``: its development seeds and evaluation tasks, in a folder of its own."""
    if config.development is None:
        raise ConfigError("this configuration has no development section (development seeds and evaluation tasks)")
    data = dataclasses.asdict(config)
    data["seeds"] = list(config.development.seeds)
    data["evaluation"]["tasks"] = dataclasses.asdict(config.development.evaluation_tasks)
    data["output_dir"] = str(Path(config.output_dir) / "development")
    data["run"] = "development"
    return _ADAPTER.validate_python(data)


def _in_training(problem: str) -> str:
    """A problem the trainer found, with its option's path as the experiment file spells it (``training.grpo.steps``)."""
    path, colon, rest = problem.partition(": ")
    is_path = colon and path.replace("_", "").replace(".", "").replace("[", "").replace("]", "").isalnum()
    return f"training.{path}: {rest}" if is_path else f"training: {problem}"


# --------------------------------------------------------------------------------- the protocol


def run_experiment(config: ExperimentConfig, *, log: Callable[[str], None] = print, progress: ProgressReport | None = None) -> dict[str, Any]:
    """Run (or resume) the experiment and write its results; returns the summary. ``progress`` shows
    the phases done (training runs and evaluations)."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = _tasks(config, out)
    _record_config(config, out)
    _record_commit(out)

    # The protocol as phases, each after the one it starts from.
    phases = [_Phase(BASE, None, "eval")]
    for seed in config.seeds:
        sft = _Phase(SFT, seed, "train")
        phases += [sft, _Phase(SFT, seed, "eval", after=sft.name)]
        for arm in [GRPO, *config.ablations]:
            train = _Phase(arm, seed, "train", after=sft.name)
            phases += [train, _Phase(arm, seed, "eval", after=train.name)]
    _run_phases(config, tasks, phases, _Timings(out / "timings.json"), log, progress or ProgressReport(enabled=False))
    summary = summarize_experiment(out)
    log(f"results: {out / 'results.md'}")
    return summary


@dataclass(frozen=True)
class _Phase:
    """One training run or one evaluation of the protocol."""

    arm: str
    seed: int | None
    kind: str  # "train" or "eval"
    after: str | None = None

    @property
    def name(self) -> str:
        return "/".join([self.arm, *([f"seed-{self.seed}"] if self.seed is not None else []), self.kind])

    def folder(self, out: Path) -> Path:
        return out / self.arm / (f"seed-{self.seed}" if self.seed is not None else "")

    def finished(self, out: Path) -> bool:
        if self.kind == "eval":
            return (self.folder(out) / "eval.jsonl").is_file()
        return (self.folder(out) / "run" / "report.md").is_file() and (self.folder(out) / "run" / "model").is_dir()


def _run_phases(
    config: ExperimentConfig, tasks: dict[str, list[str]], phases: Sequence[_Phase], timings: _Timings, log: Callable[[str], None], progress: ProgressReport
) -> None:
    """Run the unfinished phases in order, or ``config.jobs`` at a time (training phases first: they
    start the longest chains) in worker processes."""
    out = Path(config.output_dir)
    todo = [p for p in phases if not p.finished(out)]
    progress.phase("phases", len(phases), completed=len(phases) - len(todo))
    started = time.perf_counter()
    try:
        if config.jobs == 1:
            for phase in todo:
                timings.add(phase.name, _run_phase(config, tasks, phase, log))
                progress.advance("phases", phase.name)
            return
        _run_in_workers(config, tasks, todo, timings, log, progress)
    finally:
        timings.add_wall(time.perf_counter() - started)


def _run_in_workers(
    config: ExperimentConfig, tasks: dict[str, list[str]], todo: list[_Phase], timings: _Timings, log: Callable[[str], None], progress: ProgressReport
) -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    import gymnasium as gym
    import torch

    from agentgym.envs import register_envs
    from agentgym.trainers.modeling import TrainerError

    register_envs()
    # Every phase gets the same thread count whatever runs beside it: thread counts change float
    # rounding, and the samples must not depend on how the phases happened to be scheduled.
    threads = max(1, torch.get_num_threads() // config.jobs)
    budget = _memory_budget(config, tasks)
    log(
        f"memory: {budget.available / 2**30:.1f} GiB available; estimated peaks: training {budget.training / 2**30:.1f} GiB, "
        f"evaluation {budget.evaluation / 2**30:.1f} GiB (a phase starts only beside phases it fits with)"
    )
    pending = {p.name for p in todo}
    running: dict[Any, _Phase] = {}
    # Spawned workers start clean (no inherited thread pools); they get the environment's
    # registration, which may come from a module the worker has not imported. A new worker per
    # phase: the memory a phase held goes back to the system, not to the next phase's process.
    pool = ProcessPoolExecutor(
        config.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init, initargs=(gym.spec(config.env_id),), max_tasks_per_child=1
    )
    try:
        while todo or running:
            ready = [p for p in todo if p.after not in pending]
            for phase in _startable(ready, config.jobs - len(running), running=[p.kind for p in running.values()], budget=budget):
                todo.remove(phase)
                log(f"started {phase.name} ({threads} thread{'s' * (threads > 1)}, estimated peak {budget.estimate(phase.kind) / 2**30:.1f} GiB)")
                running[pool.submit(_run_phase_in_worker, threads, config, tasks, phase)] = phase
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                phase = running.pop(future)
                try:
                    timings.add(phase.name, future.result())
                except BrokenProcessPool:
                    raise TrainerError(f"the worker running {phase.name} died (out of memory?); finished phases are kept: rerun to resume") from None
                pending.discard(phase.name)
                log(f"finished {phase.name}")
                progress.advance("phases", phase.name)
    except BaseException:
        # Interrupted, or a phase failed: stop the phases still running (a rerun resumes them
        # from their checkpoints) instead of waiting for them.
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in multiprocessing.active_children():
            worker.terminate()
        raise
    pool.shutdown(wait=True)


def _startable(ready: Sequence[_Phase], free: int, *, running: Sequence[str] = (), budget: MemoryBudget | None = None) -> list[_Phase]:
    """The ready phases to start in ``free`` worker slots: trainings before evaluations, and SFT
    trainings before GRPO ones (each SFT model starts the GRPO phases of its seed), so the long
    phases start early and the short ones fill the end. With a ``budget``, a phase starts only when
    its estimated peak fits beside those of the ``running`` phases' kinds and the ones chosen before it."""
    chosen: list[_Phase] = []
    for phase in sorted(ready, key=lambda p: (p.kind == "eval", p.arm != SFT)):
        if len(chosen) < free and (budget is None or budget.fits([*running, *(p.kind for p in chosen)], phase.kind)):
            chosen.append(phase)
    return chosen


def _memory_budget(config: ExperimentConfig, tasks: dict[str, list[str]]) -> MemoryBudget:
    """The memory now available and the estimated peaks of the experiment's phases (see
    :mod:`agentgym.trainers.memory`); without a local model folder to measure, no phase waits."""
    from agentgym.models.hf import HFBackend
    from agentgym.models.loading import resolve_model_path

    available = available_memory()
    footprint = model_footprint(resolve_model_path(config.model))
    if footprint is None:
        return MemoryBudget(available, 0, 0)
    training = config_from_dict({**config.training, "env_id": config.env_id})
    tokens = training.rollout.max_total_tokens or EPISODE_TOKENS
    rows_cap = inspect.signature(HFBackend).parameters["max_batch_size"].default
    train_rows = min(rows_cap, training.rollout.num_tasks * training.rollout.group_size)
    eval_rows = min(rows_cap, max(len(ids) for ids in _split_ids(tasks["eval"]).values()) * config.evaluation.trials)
    return MemoryBudget(available, footprint.training_peak(train_rows, tokens), footprint.evaluation_peak(eval_rows, tokens))


def _worker_init(spec: Any) -> None:
    import gymnasium as gym

    if spec.id not in gym.registry:
        gym.registry[spec.id] = spec


def _run_phase_in_worker(threads: int, config: ExperimentConfig, tasks: dict[str, list[str]], phase: _Phase) -> float:
    import torch

    torch.set_num_threads(threads)
    return _run_phase(config, tasks, phase, _worker_log)


def _worker_log(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def _run_phase(config: ExperimentConfig, tasks: dict[str, list[str]], phase: _Phase, log: Callable[[str], None]) -> float:
    """Run one phase; returns its wall seconds."""
    out = Path(config.output_dir)
    started = time.perf_counter()
    folder = phase.folder(out)
    if phase.kind == "eval":
        model = None if phase.arm == BASE else folder / "run" / "model"
        _evaluate(config, model, tasks["eval"], folder / "eval.jsonl", arm=phase.arm, seed=phase.seed, log=log)
    else:
        assert phase.seed is not None
        sft_model = None if phase.arm == SFT else out / SFT / f"seed-{phase.seed}" / "run" / "model"
        change = config.ablations.get(phase.arm)
        train_config = _train_config(
            config, SFT if phase.arm == SFT else GRPO, phase.seed, tasks["sft"], tasks["grpo"], folder / "run", model=sft_model, change=change
        )
        _train(train_config, folder / "run", log)
    return time.perf_counter() - started


def _tasks(config: ExperimentConfig, out: Path) -> dict[str, list[str]]:
    """The task ids of each role, checked disjoint; written to ``tasks.json`` (and read back on resume)."""
    path = out / "tasks.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    rng_seed = config.seeds[0]
    sft = _pick(config.env_id, config.sft_tasks, rng_seed, exclude=())
    grpo = _pick(config.env_id, config.grpo_tasks, rng_seed + 1, exclude=sft)
    evaluation = _pick(config.env_id, config.evaluation.tasks, rng_seed + 2, exclude=[*sft, *grpo])
    if not sft or not grpo or not evaluation:
        raise ConfigError(f"a task set is empty (sft {len(sft)}, grpo {len(grpo)}, evaluation {len(evaluation)})")
    roles = {"sft": sft, "grpo": grpo, "eval": evaluation}
    for a, b in (("sft", "grpo"), ("sft", "eval"), ("grpo", "eval")):
        if {_task_id(t) for t in roles[a]} & {_task_id(t) for t in roles[b]}:
            raise ConfigError(f"the {a} and {b} tasks overlap")
    path.write_text(json.dumps(roles, indent=1) + "\n", encoding="utf-8")
    return roles


def _pick(env_id: str, pick: TaskPick, seed: int, *, exclude: Sequence[str]) -> list[str]:
    """The tasks ``pick`` names, minus ``exclude``, in a seeded order (at most ``count``)."""
    chosen: list[str] = []
    for split in pick.splits:
        env = make_env(env_id, split=split)
        try:
            for task in env.unwrapped.tasks:
                if pick.task_ids is not None and task["task_id"] not in pick.task_ids:
                    continue
                if pick.difficulties is not None and task.get("difficulty") not in pick.difficulties:
                    continue
                chosen.append(f"{split}:{task['task_id']}")
        finally:
            env.close()
    skip = {_task_id(t) for t in exclude}
    chosen = [t for t in chosen if _task_id(t) not in skip]
    order = np.random.default_rng(seed).permutation(len(chosen))
    chosen = [chosen[int(i)] for i in order]
    return chosen[: pick.count] if pick.count is not None else chosen


def _task_id(entry: str) -> str:
    return entry.split(":", 1)[1]


def _split_ids(tasks: Sequence[str]) -> dict[str, list[str]]:
    """``split:task_id`` entries grouped by split, in order."""
    by_split: dict[str, list[str]] = defaultdict(list)
    for entry in tasks:
        split, task_id = entry.split(":", 1)
        by_split[split].append(task_id)
    return dict(by_split)


def _train_config(
    config: ExperimentConfig,
    phase: str,
    seed: int,
    sft_tasks: Sequence[str],
    grpo_tasks: Sequence[str],
    run: Path,
    *,
    model: Path | None = None,
    change: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """The trainer configuration of one phase: SFT alone, or GRPO alone from the SFT model."""
    data = json.loads(json.dumps(config.training))  # a deep copy
    sections = {key: dict(data.get(key) or {}) for key in ("sft", "grpo", "rollout", "eval")}
    grpo_split = _single_split(grpo_tasks, "grpo_tasks")
    if phase == SFT:
        sections["sft"].update(task_ids=_split_ids(sft_tasks).get(grpo_split, []) or None)
        sections["grpo"]["steps"] = 0
    else:
        sections["sft"]["steps"] = 0
    sections["rollout"].update(split=grpo_split, task_ids=_split_ids(grpo_tasks).get(grpo_split) or None)
    sections["eval"]["enabled"] = False  # the experiment evaluates every arm itself
    data.update(sections, env_id=config.env_id, seed=seed, output_dir=str(run), model=str(model) if model is not None else config.model)
    for key, value in (change or {}).items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, Mapping) else value
    if phase == SFT and sft_tasks and _single_split(sft_tasks, "sft_tasks") != grpo_split:
        raise ConfigError("sft_tasks and grpo_tasks must come from the same split (the trainer's rollout split)")
    return config_from_dict(data)


def _single_split(tasks: Sequence[str], name: str) -> str:
    splits = sorted(_split_ids(tasks)) or ["train"]
    if len(splits) != 1:
        raise ConfigError(f"{name} must come from one split, got {', '.join(splits)}")
    return splits[0]


def _train(train_config: TrainConfig, run: Path, log: Callable[[str], None]) -> None:
    """Run one training phase; resume it from its checkpoint if it was interrupted."""
    from agentgym.trainers.checkpoint import latest_checkpoint
    from agentgym.trainers.trainer import train

    resume = latest_checkpoint(run) is not None
    log(f"training {run} ({'resuming' if resume else 'from the start'})")
    # Finished, the trainer deletes the phase's resume state (checkpoint.keep_when_done is off):
    # weights and optimiser moments, ~1.6 GB per phase for 135M; the nine training phases'
    # checkpoints filled 15 GB of disk.
    train(train_config, resume=resume, overwrite=not resume)


def _evaluate(
    config: ExperimentConfig, model: Path | None, tasks: Sequence[str], path: Path, *, arm: str, seed: int | None, log: Callable[[str], None]
) -> None:
    """Play every evaluation task ``trials`` times with ``model``; one JSON line per episode in ``path``."""
    from agentgym.models import load_model
    from agentgym.models.hf import HFBackend
    from agentgym.runner import RolloutConfig, RolloutRunner

    log(f"evaluating {arm}" + (f" seed {seed}" if seed is not None else ""))
    training = config_from_dict({**config.training, "env_id": config.env_id})
    policy, tokenizer = load_model(str(model) if model is not None else config.model, device=training.device)
    backend = HFBackend(policy, tokenizer, name=f"{arm}" + (f"/seed-{seed}" if seed is not None else ""))
    ev, r = config.evaluation, training.rollout
    records = []
    for split, task_ids in _split_ids(tasks).items():
        # The trials of a task are the members of its group, each with its own environment seed,
        # so one batch holds every episode of the split.
        rollout = RolloutConfig(
            config.env_id,
            split=split,
            task_ids=task_ids,
            group_size=ev.trials,
            distinct_env_seeds=True,
            seed=ev.seed,
            temperature=ev.temperature,
            max_turns=r.max_turns,
            max_new_tokens=r.max_new_tokens,
            max_total_tokens=r.max_total_tokens,
            template_kwargs=r.template_kwargs,
            tool_mode=r.tool_mode,
            env_kwargs=dict(ev.env_kwargs),
        )
        for episode in RolloutRunner(backend).run(rollout, infra_retries=ev.infra_retries):
            records.append(_eval_record(episode, arm=arm, seed=seed, trial=episode.member, split=split))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, records)


def _eval_record(episode: Any, *, arm: str, seed: int | None, trial: int, split: str) -> dict[str, Any]:
    record = episode.record
    final = final_info(record)
    return {
        "arm": arm,
        "seed": seed,
        "trial": trial,
        "split": split,
        "task_id": record["task_id"],
        "env_seed": record["seed"],
        "difficulty": record.get("difficulty"),
        "template": record.get("template"),
        "success": bool(record["success"]),
        "reward": float(record["reward"]),
        "turns": int(record["turns"]),
        "stop_reason": episode.stop_reason,
        "sampled_tokens": int(sum(episode.trajectory.loss_mask)),
        "tokens": len(episode.trajectory.token_ids),
        "faults": int(final.get("faults", 0)),
        "tool_errors": int(final.get("tool_errors", 0)),
        "format_errors": int(final.get("format_errors", 0)),
        "messages": record["messages"][1:],  # without the system prompt, which every episode shares
    }


# ------------------------------------------------------------------------------ bookkeeping


class _Timings:
    """Seconds per phase and wall seconds in all, kept in a JSON file so a resumed run adds up all
    its sessions (phases that ran at once overlap: their sum exceeds the wall time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        self.phases: dict[str, float] = data.get("phase_seconds", {})
        self.wall: float = data.get("wall_seconds", 0.0)

    def add(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self._write()

    def add_wall(self, seconds: float) -> None:
        self.wall += seconds
        self._write()

    def _write(self) -> None:
        self.path.write_text(json.dumps({"phase_seconds": self.phases, "wall_seconds": self.wall}, indent=1) + "\n", encoding="utf-8")


def _record_config(config: ExperimentConfig, out: Path) -> None:
    """Write ``experiment.yaml``; a folder holding another experiment is refused, except that more
    seeds may be added to it (its finished phases are the new configuration's phases for those seeds)."""
    import yaml

    path = out / "experiment.yaml"
    data = json.loads(json.dumps(dataclasses.asdict(config)))
    if path.is_file():
        recorded = yaml.safe_load(path.read_text(encoding="utf-8"))
        # Where the folder is (it may have been moved) and its seeds aside, the configuration must be the same.
        # The choices' notes document the configuration; they do not change what runs.
        unchanged = {"seeds": None, "output_dir": None, "choices": None}
        if {**recorded, **unchanged} != {**data, **unchanged}:
            raise ConfigError(f"{out} holds an experiment with another configuration; choose another output folder")
        dropped = [seed for seed in recorded["seeds"] if seed not in config.seeds]
        if dropped:
            raise ConfigError(f"{out} holds an experiment with seeds {recorded['seeds']}; seeds may be added to it, not left out (missing: {dropped})")
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


# What decides the results; edits elsewhere (docs, tests) do not make a run's commit dirty.
_CODE = ("agentgym", "envs", "verifiers", "trainers", "tasks", "pyproject.toml")


def _record_commit(out: Path) -> None:
    """Add the commit that is about to run to ``commits.json`` (a resumed run may span several)."""
    path = out / "commits.json"
    commits = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    commit = _commit()
    if commit is not None and commit not in commits:
        path.write_text(json.dumps([*commits, commit]) + "\n", encoding="utf-8")


def _commit() -> str | None:
    """The git commit of the code that ran (with ``-dirty`` when the code had uncommitted changes)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *_CODE], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


# ------------------------------------------------------------------------------ the summary


def summarize_experiment(out: str | Path) -> dict[str, Any]:
    """Compute every number of the results from the written evaluation episodes; write
    ``summary.json``, ``results.md`` and ``plots/``; return the summary."""
    out = Path(out)
    import yaml

    config = _ADAPTER.validate_python(yaml.safe_load((out / "experiment.yaml").read_text(encoding="utf-8")))
    tasks = json.loads((out / "tasks.json").read_text(encoding="utf-8"))
    arms = [BASE, SFT, GRPO, *config.ablations]
    episodes = {arm: _read_arm(out, arm, config.seeds) for arm in arms}
    episodes = {arm: rows for arm, rows in episodes.items() if rows}
    commits = out / "commits.json"
    started: list[str] = json.loads(commits.read_text(encoding="utf-8")) if commits.is_file() else []
    summary: dict[str, Any] = {
        "env_id": config.env_id,
        "model": config.model or "smollm2-135m-instruct",
        # The code of the last (re)start; "commits" lists every commit a resumed run ran under.
        "commit": started[-1] if started else None,
        "commits": started,
        "seeds": list(config.seeds),
        "run": config.run,
        "development": dataclasses.asdict(config.development) if config.development is not None else None,
        "choices": [dataclasses.asdict(choice) for choice in config.choices],
        "evaluation": {
            "trials": config.evaluation.trials,
            "temperature": config.evaluation.temperature,
            "env_kwargs": config.evaluation.env_kwargs,
            "episodes_per_model": len(tasks["eval"]) * config.evaluation.trials,
        },
        "arms": {arm: _arm_summary(rows, config.evaluation.trials) for arm, rows in episodes.items()},
        "train_task_ids": tasks["grpo"],
        "sft_task_ids": tasks["sft"],
        "eval_task_ids": tasks["eval"],
    }
    for arm in [GRPO, *config.ablations]:
        if arm in episodes and SFT in episodes:
            summary[f"delta_{arm}_minus_sft"] = _paired_delta(episodes[arm], episodes[SFT])
    for arm in config.ablations:
        if arm in episodes and GRPO in episodes:
            summary[f"delta_{arm}_minus_grpo"] = _paired_delta(episodes[arm], episodes[GRPO])
    curves = {arm: _curves(out, arm, config.seeds) for arm in [GRPO, *config.ablations]}
    summary["grpo_curves"] = {arm: c for arm, c in curves.items() if c}
    timings = _Timings(out / "timings.json")
    summary["jobs"] = config.jobs
    summary["phase_seconds"] = timings.phases
    summary["wall_seconds"] = timings.wall
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    plots = _plots(summary, out / "plots")
    (out / "results.md").write_text(_results_markdown(summary, episodes, plots, out), encoding="utf-8")
    return summary


def _read_arm(out: Path, arm: str, seeds: Sequence[int]) -> list[dict[str, Any]]:
    paths = [out / BASE / "eval.jsonl"] if arm == BASE else [out / arm / f"seed-{s}" / "eval.jsonl" for s in seeds]
    return [row for path in paths if path.is_file() for row in read_jsonl(path)]


def _arm_summary(rows: Sequence[Mapping[str, Any]], trials: int) -> dict[str, Any]:
    """Success (pooled, with a Wilson interval), its spread over seeds, pass^k, and episode statistics,
    over the episodes the machinery did not fail under (those are counted in ``infra_errors``)."""
    every, rows = rows, [r for r in rows if r["stop_reason"] != "infra_error"]
    successes = sum(r["success"] for r in rows)
    per_seed: dict[Any, list[bool]] = defaultdict(list)
    per_task: dict[tuple[Any, str], list[bool]] = defaultdict(list)
    per_template: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        per_seed[r["seed"]].append(r["success"])
        per_task[(r["seed"], r["task_id"])].append(r["success"])
        per_template[_template(r)].append(r["success"])
    seed_rates = [statistics.fmean(v) for v in per_seed.values()]
    low, high = wilson_interval(successes, len(rows))
    return {
        "success": successes / len(rows),
        "ci": [low, high],
        "n": len(rows),
        "seeds": [s for s in per_seed if s is not None],
        "per_seed": {str(s): statistics.fmean(v) for s, v in per_seed.items()},
        "seed_mean": statistics.fmean(seed_rates),
        "seed_std": statistics.stdev(seed_rates) if len(seed_rates) > 1 else 0.0,
        "mean_reward": statistics.fmean(r["reward"] for r in rows),
        **{f"pass^{k}": _pass_hat_k(per_task, k) for k in range(1, trials + 1)},
        "mean_turns": statistics.fmean(r["turns"] for r in rows),
        "format_errors_per_turn": sum(r["format_errors"] for r in rows) / max(1, sum(r["turns"] for r in rows)),
        "mean_sampled_tokens": statistics.fmean(r["sampled_tokens"] for r in rows),
        "mean_tokens": statistics.fmean(r["tokens"] for r in rows),
        "faulted_episodes": sum(r["faults"] > 0 for r in rows) / len(rows),
        "success_after_a_fault": _rate([r["success"] for r in rows if r["faults"] > 0]),
        "success_without_faults": _rate([r["success"] for r in rows if r["faults"] == 0]),
        "per_template": {t: {"n": len(v), "success": statistics.fmean(v)} for t, v in sorted(per_template.items())},
        "infra_errors": len(every) - len(rows),
    }


def _pass_hat_k(per_task: Mapping[Any, Sequence[bool]], k: int) -> float:
    """pass^k over the tasks with at least ``k`` trials left (an infra error removes one); NaN if none has."""
    complete = {task: trials for task, trials in per_task.items() if len(trials) >= k}
    return pass_hat_k(complete, k) if complete else math.nan


def _rate(values: Sequence[bool]) -> float | None:
    return statistics.fmean(values) if values else None


def _template(row: Mapping[str, Any]) -> str:
    """A task's family for breakdowns: its question template, else its difficulty."""
    return str(row.get("template") or row.get("difficulty") or "all")


def _paired_delta(arm_rows: Sequence[Mapping[str, Any]], base_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Success difference on identical (seed, task, trial) episodes, with a bootstrap interval over
    tasks; a pair with an episode the machinery failed under is left out."""
    base = {(r["seed"], r["task_id"], r["trial"]): r for r in base_rows}
    by_task: dict[str, list[float]] = defaultdict(list)
    by_seed: dict[str, list[float]] = defaultdict(list)
    wins = losses = 0
    for r in arm_rows:
        key = (r["seed"], r["task_id"], r["trial"])
        if key not in base:
            raise ValueError(f"no paired episode for {key}")
        if "infra_error" in (r["stop_reason"], base[key]["stop_reason"]):
            continue
        d = float(r["success"]) - float(base[key]["success"])
        wins += d > 0
        losses += d < 0
        by_task[r["task_id"]].append(d)
        by_seed[str(r["seed"])].append(d)
    mean, (low, high) = paired_bootstrap(by_task)
    return {
        "mean": mean,
        "ci": [low, high],
        "n_pairs": sum(map(len, by_task.values())),
        "tasks": len(by_task),
        "wins": wins,
        "losses": losses,
        "per_seed": {seed: statistics.fmean(values) for seed, values in by_seed.items()},
        "interval": "95% bootstrap over tasks (10,000 resamples)",
    }


def _curves(out: Path, arm: str, seeds: Sequence[int]) -> dict[str, dict[str, list[float | None]]]:
    """Per seed, the GRPO training metrics by step (from the run's ``metrics.jsonl``)."""
    keys = ("reward/mean", "episode/success_rate", "episode/turns", "policy/entropy", "policy/kl")
    curves: dict[str, dict[str, list[float | None]]] = {}
    for seed in seeds:
        path = out / arm / f"seed-{seed}" / "run" / "metrics.jsonl"
        if not path.is_file():
            continue
        rows = [row for row in read_metrics(path) if row["phase"] == "grpo"]
        curves[str(seed)] = {key: [_finite(row.get(key)) for row in rows] for key in keys if any(key in row for row in rows)}
    return curves


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _plots(summary: Mapping[str, Any], folder: Path) -> list[Path]:
    """Success per arm with intervals, and the GRPO curves; none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    arms = summary["arms"]
    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
    names = list(arms)
    values = [arms[a]["success"] for a in names]
    errors = [[v - arms[a]["ci"][0] for a, v in zip(names, values, strict=False)], [arms[a]["ci"][1] - v for a, v in zip(names, values, strict=False)]]
    ax.bar(names, values, yerr=errors, capsize=4, color=["#9e9e9e", "#5c8fd6", "#2e9d5b", "#d9822b", "#8e6cc0"][: len(names)])
    for i, a in enumerate(names):
        ax.text(i, values[i] + 0.02, f"{values[i]:.2f}\nn={arms[a]['n']}", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("success rate (95% Wilson)")
    ax.set_title("Held-out evaluation")
    fig.tight_layout()
    path = folder / "success_by_arm.png"
    fig.savefig(path)
    plt.close(fig)
    written.append(path)
    for key, title in (
        ("episode/success_rate", "GRPO training rollouts: success"),
        ("reward/mean", "GRPO training rollouts: mean reward"),
        ("policy/entropy", "policy entropy (nats per token)"),
        ("policy/kl", "KL to the reference"),
        ("episode/turns", "turns per episode"),
    ):
        series = {arm: {seed: c[key] for seed, c in curves.items() if key in c} for arm, curves in summary["grpo_curves"].items()}
        series = {arm: s for arm, s in series.items() if s}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
        for color, (arm, by_seed) in zip(["#2e9d5b", "#d9822b", "#8e6cc0"], series.items(), strict=False):
            runs = [[v if v is not None else math.nan for v in ys] for ys in by_seed.values()]
            for ys in runs:
                ax.plot(range(1, len(ys) + 1), ys, color=color, alpha=0.25, linewidth=1)
            length = min(map(len, runs))
            mean = np.nanmean(np.array([ys[:length] for ys in runs]), axis=0)
            ax.plot(range(1, length + 1), mean, color=color, linewidth=2, label=f"{arm} (mean of {len(runs)} seeds)")
        written.append(save_plot(fig, ax, folder / f"grpo_{key.replace('/', '_')}.png", title=title, xlabel="GRPO step"))
    return written


def _results_markdown(summary: Mapping[str, Any], episodes: Mapping[str, Sequence[Mapping[str, Any]]], plots: Sequence[Path], out: Path) -> str:
    arms = summary["arms"]
    ev = summary["evaluation"]
    trials = ev["trials"]
    lines = [
        f"# Learning experiment: {summary['env_id']}",
        "",
        f"Model `{summary['model']}`; seeds {summary['seeds']}; commit {', '.join(f'`{c}`' for c in summary['commits']) or 'unknown'}; "
        f"wall time {summary['wall_seconds'] / 60:.1f} min.",
        f"Evaluation: {len(summary['eval_task_ids'])} held-out tasks x {trials} trial(s) (environment seeds) = "
        f"{ev['episodes_per_model']} episodes per model, temperature {ev['temperature']:g}, environment options {ev['env_kwargs']}.",
        f"Training tasks: {len(summary['sft_task_ids'])} for SFT demonstrations, {len(summary['train_task_ids'])} for GRPO "
        "(disjoint from each other and from the evaluation tasks).",
        *_protocol_lines(summary),
        "",
        "| arm | success | 95% CI | n | per seed | mean ± sd over seeds | mean reward | "
        + " | ".join(f"pass^{k}" for k in range(1, trials + 1))
        + " | success after a fault | turns | sampled tokens |",
        "|---|---|---|---|---|---|---|" + "---|" * trials + "---|---|---|",
    ]
    for arm, a in arms.items():
        per_seed = ", ".join(f"{v:.2f}" for v in a["per_seed"].values())
        after = "–" if a["success_after_a_fault"] is None else f"{a['success_after_a_fault']:.3f}"
        lines.append(
            f"| {arm} | {a['success']:.3f} | [{a['ci'][0]:.3f}, {a['ci'][1]:.3f}] | {a['n']} | {per_seed} | "
            f"{a['seed_mean']:.3f} ± {a['seed_std']:.3f} | {a['mean_reward']:.3f} | "
            + " | ".join(f"{a[f'pass^{k}']:.3f}" for k in range(1, trials + 1))
            + f" | {after} | {a['mean_turns']:.2f} | {a['mean_sampled_tokens']:.1f} |"
        )
    lines += ["", "Paired differences (same seed, task and environment seed), success:", ""]
    for key, d in summary.items():
        if key.startswith("delta_"):
            name = key.removeprefix("delta_").replace("_minus_", " − ")
            per_seed = ", ".join(f"{seed}: {value * 100:+.1f}" for seed, value in d.get("per_seed", {}).items())
            lines.append(
                f"- **{name}: {d['mean'] * 100:+.1f} pp**, 95% CI [{d['ci'][0] * 100:+.1f}, {d['ci'][1] * 100:+.1f}] pp "
                f"({d['n_pairs']} pairs over {d['tasks']} tasks; better in {d['wins']}, worse in {d['losses']}; {d['interval']})"
                + (f"; per seed {per_seed}" if per_seed else "")
            )
    templates = sorted({t for a in arms.values() for t in a["per_template"]})
    if len(templates) > 1:
        lines += ["", "Success per task family:", "", "| family | n per arm | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
        for t in templates:
            n = max(arms[a]["per_template"].get(t, {}).get("n", 0) for a in arms)
            lines.append(
                f"| {t} | {n} | " + " | ".join(f"{arms[a]['per_template'][t]['success']:.3f}" if t in arms[a]["per_template"] else "–" for a in arms) + " |"
            )
    if plots:
        lines += ["", *(f"![{p.stem}](plots/{p.name})" for p in plots)]
    phases = summary.get("phase_seconds") or {}
    if phases:
        totals: Counter[str] = Counter()
        for name, seconds in phases.items():
            totals[name.split("/")[0] + " " + name.split("/")[-1]] += seconds
        lines += ["", "Wall time per phase (all seeds): " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in totals.items()) + "."]
    lines += ["", *_examples(episodes)]
    return "\n".join(lines) + "\n"


def _protocol_lines(summary: Mapping[str, Any]) -> list[str]:
    """Which run this is, which seeds and tasks the configuration was chosen on, and each choice."""
    dev = summary.get("development")
    lines = [""]
    if summary.get("run") == "development":
        lines.append("**A development run**: configuration choices are made on its numbers; they are not a reported result.")
    elif dev is not None:
        lines.append(
            f"**A reported run**: seeds {list(summary['seeds'])} and these evaluation tasks were not used for any choice; "
            f"choices were made on development seeds {list(dev['seeds'])} evaluated on the {', '.join(dev['evaluation_tasks']['splits'])} split."
        )
    else:
        lines.append("The configuration declares no development seeds or tasks: nothing says which runs its choices were made on.")
    choices = summary.get("choices") or []
    if choices:
        lines += ["", "| choice | value | made on |", "|---|---|---|"]
        lines += [f"| `{c['option']}` | `{c['value']}` | {c['made_on']} |" for c in choices]
    return lines


def _examples(episodes: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Side-by-side trajectories, SFT and GRPO of one seed on the same task and environment seed.

    For every training seed the first task (in evaluation order) where SFT failed and GRPO
    succeeded, since seeds often learn different things, then the first task where it went the
    other way.
    """
    if SFT not in episodes or GRPO not in episodes:
        return []
    sft = {(r["seed"], r["task_id"], r["trial"]): r for r in episodes[SFT]}
    pairs = [(sft[(r["seed"], r["task_id"], r["trial"])], r) for r in episodes[GRPO]]
    improved: dict[int, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
    for before, after in pairs:
        if after["success"] and not before["success"]:
            improved.setdefault(after["seed"], (before, after))
    shown = [("SFT failed, GRPO succeeded", improved[seed]) for seed in sorted(improved)]
    shown += [("SFT succeeded, GRPO failed", pair) for pair in pairs if pair[0]["success"] and not pair[1]["success"]][:1]
    lines = ["## Example trajectories (SFT and GRPO of one seed, same task and environment seed)", ""]
    for title, (before, after) in shown:
        lines += [f"### {title}: seed {after['seed']}, {after['task_id']} (trial {after['trial']})", ""]
        for label, row in (("SFT", before), ("GRPO", after)):
            lines += [f"**{label}** (success {row['success']}, {row['turns']} turns, {row['faults']} fault(s)):", "", "```"]
            lines += [f"[{m['role']}] {m['content'][:400]}" for m in row["messages"]]
            lines += ["```", ""]
    return lines if shown else []
