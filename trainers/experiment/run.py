"""Running the protocol: the phases (trainings and evaluations) in order or in worker processes
within the machine's memory, and the results folder's records (configuration, tasks, commits)."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.envs import make_env
from agentgym.progress import ProgressReport
from agentgym.rollouts.io import write_jsonl
from agentgym.rollouts.scripted import final_info
from agentgym.trainers.config import ConfigError, TrainConfig, config_from_dict, config_to_dict
from agentgym.trainers.experiment.config import BASE, GRPO, SFT, ExperimentConfig, TaskPick, split_ids, task_id_of, train_config_for
from agentgym.trainers.experiment.summary import summarize_experiment
from agentgym.trainers.experiment.timings import PhaseTimings
from agentgym.trainers.memory import EPISODE_TOKENS, MemoryBudget, available_memory, model_footprint, peak_resident_mib

__all__ = ["run_experiment"]

WALL_TIME_WRITES_SECONDS = 60.0
"""How often a run writes its wall time so far: a session killed outright loses at most this much."""


def run_experiment(
    config: ExperimentConfig, *, arms: Sequence[str] | None = None, log: Callable[[str], None] = print, progress: ProgressReport | None = None
) -> dict[str, Any]:
    """Run (or resume) the experiment and write its results; returns the summary. ``progress`` shows
    the phases done (training runs and evaluations). ``arms``: train and evaluate only these of
    GRPO and the ablations (base and SFT always run); ``None`` runs them all.

    Raises:
        ConfigError: an arm the configuration does not have.
    """
    trained = [GRPO, *config.ablations]
    unknown = [arm for arm in arms or () if arm not in trained]
    if unknown:
        raise ConfigError(f"no arm {', '.join(map(repr, unknown))} in this experiment; its arms: {', '.join(trained)}")
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = _tasks(config, out)
    config = _record_config(config, out)
    _record_commit(out)
    _record_machine(out)

    # The protocol as phases, each after the one it starts from.
    phases = [_Phase(BASE, None, "eval")]
    for seed in config.seeds:
        sft = _Phase(SFT, seed, "train")
        phases += [sft, _Phase(SFT, seed, "eval", after=sft.name)]
        for arm in [arm for arm in trained if arms is None or arm in arms]:
            train = _Phase(arm, seed, "train", after=sft.name)
            phases += [train, _Phase(arm, seed, "eval", after=train.name)]
    _run_phases(config, tasks, phases, PhaseTimings(out / "timings.json"), log, progress or ProgressReport(enabled=False))
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
    config: ExperimentConfig, tasks: dict[str, list[str]], phases: Sequence[_Phase], timings: PhaseTimings, log: Callable[[str], None], progress: ProgressReport
) -> None:
    """Run the unfinished phases in order, or ``config.jobs`` at a time (training phases first: they
    start the longest chains) in worker processes."""
    out = Path(config.output_dir)
    todo = [p for p in phases if not p.finished(out)]
    progress.phase("phases", len(phases), completed=len(phases) - len(todo))
    if not todo:
        return
    timings.start_session()
    try:
        if config.jobs == 1:
            for phase in todo:
                timings.add(phase.name, _run_phase(config, tasks, phase, log))
                progress.advance("phases", phase.name)
            return
        _run_in_workers(config, tasks, todo, timings, log, progress)
    finally:
        timings.tick()


def _run_in_workers(
    config: ExperimentConfig, tasks: dict[str, list[str]], todo: list[_Phase], timings: PhaseTimings, log: Callable[[str], None], progress: ProgressReport
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
        f"memory: {budget.available / 2**30:.1f} GiB available, {budget.room / 2**30:.1f} GiB for the phases at once; estimated peaks: training {budget.training / 2**30:.1f} GiB, "
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
            done, _ = wait(running, timeout=WALL_TIME_WRITES_SECONDS, return_when=FIRST_COMPLETED)
            timings.tick()
            for future in done:
                phase = running.pop(future)
                try:
                    seconds, peak_mib = future.result()
                except BrokenProcessPool:
                    raise TrainerError(f"the worker running {phase.name} died (out of memory?); finished phases are kept: rerun to resume") from None
                timings.add(phase.name, seconds, peak_mib)
                pending.discard(phase.name)
                log(f"finished {phase.name} ({seconds / 60:.1f} min, peak resident memory {peak_mib:.0f} MiB)")
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
    limit = None if config.memory_limit_gb is None else int(config.memory_limit_gb * 1e9)
    footprint = model_footprint(resolve_model_path(config.model))
    if footprint is None:
        return MemoryBudget(available, 0, 0, limit)
    training = config_from_dict({**config.training, "env_id": config.env_id})
    tokens = training.rollout.max_total_tokens or EPISODE_TOKENS
    rows_cap = inspect.signature(HFBackend).parameters["max_batch_size"].default
    train_rows = min(rows_cap, training.rollout.num_tasks * training.rollout.group_size)
    eval_rows = min(config.evaluation.max_batch_size, max(len(ids) for ids in split_ids(tasks["eval"]).values()) * config.evaluation.trials)
    return MemoryBudget(available, footprint.training_peak(train_rows, tokens), footprint.evaluation_peak(eval_rows, tokens), limit)


def _worker_init(spec: Any) -> None:
    import gymnasium as gym

    if spec.id not in gym.registry:
        gym.registry[spec.id] = spec


def _run_phase_in_worker(threads: int, config: ExperimentConfig, tasks: dict[str, list[str]], phase: _Phase) -> tuple[float, float]:
    """Run one phase in a worker process of its own; its wall seconds and the process's peak
    resident memory in MiB (the worker runs this phase only, so its peak is the phase's)."""
    import torch

    torch.set_num_threads(threads)
    seconds = _run_phase(config, tasks, phase, _worker_log)
    return seconds, peak_resident_mib()


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
        train_config = train_config_for(
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
        if {task_id_of(t) for t in roles[a]} & {task_id_of(t) for t in roles[b]}:
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
    skip = {task_id_of(t) for t in exclude}
    chosen = [t for t in chosen if task_id_of(t) not in skip]
    order = np.random.default_rng(seed).permutation(len(chosen))
    chosen = [chosen[int(i)] for i in order]
    return chosen[: pick.count] if pick.count is not None else chosen


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
    from agentgym.rollouts.runner import RolloutConfig, RolloutRunner
    from agentgym.rollouts.settings import NO_EXPLORATION, settings_of

    log(f"evaluating {arm}" + (f" seed {seed}" if seed is not None else ""))
    training = config_from_dict({**config.training, "env_id": config.env_id})
    policy, tokenizer = load_model(str(model) if model is not None else config.model, device=training.device)
    ev, r = config.evaluation, training.rollout
    backend = HFBackend(policy, tokenizer, name=f"{arm}" + (f"/seed-{seed}" if seed is not None else ""), max_batch_size=ev.max_batch_size)
    records = []
    for split, task_ids in split_ids(tasks).items():
        # The trials of a task are the members of its group, each with its own environment seed,
        # so one batch holds every episode of the split.
        # The training rollouts' settings (budgets, chat template), sampled at the evaluation's
        # temperature from the whole distribution: no nucleus, no error temperature.
        settings = {**settings_of(r), "temperature": ev.temperature, **NO_EXPLORATION, "top_p": 1.0}
        rollout = RolloutConfig(
            config.env_id,
            split=split,
            task_ids=task_ids,
            group_size=ev.trials,
            distinct_env_seeds=True,
            seed=ev.seed,
            env_kwargs=dict(ev.env_kwargs),
            **settings,
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
        "faults": _faults(final),
        "tool_errors": int(final.get("tool_errors", 0)),
        "format_errors": int(final.get("format_errors", 0)),
        "messages": record["messages"][1:],  # without the system prompt, which every episode shares
    }


def _faults(info: Mapping[str, Any]) -> int:
    """Faults injected in the episode, from its final ``info``: ``faults`` in SQL-v0 and
    SearchQA-v0, ``faults_injected`` in MockAPI-v0; 0 for an environment without faults."""
    return int(info.get("faults", info.get("faults_injected", 0)))


def _record_config(config: ExperimentConfig, out: Path) -> ExperimentConfig:
    """Write ``experiment.yaml`` and return the configuration the folder now holds. A folder holding
    another experiment is refused, except that more seeds and more ablation arms may be added to it
    (its finished phases are the new configuration's phases for those seeds and arms: an arm added
    later trains from the SFT models already there). Arms the folder has and the configuration does
    not list stay in it, as they were configured; an arm may not be configured otherwise."""
    import yaml

    path = out / "experiment.yaml"
    data = json.loads(json.dumps(dataclasses.asdict(config)))
    if path.is_file():
        recorded = yaml.safe_load(path.read_text(encoding="utf-8"))
        # Where the folder is (it may have been moved), its seeds and its arms aside, the configuration must be the same.
        # The choices' notes and the development section document the configuration; they do not
        # change what a reported run runs (another file's arms may extend a folder: same protocol).
        # Nor do the controls, which only add paired differences to the summary.
        unchanged = {"seeds": None, "output_dir": None, "choices": None, "memory_limit_gb": None, "ablations": None, "controls": None, "development": None}
        # Nor do the rows an evaluation decodes at once (memory, not results), nor a training
        # option spelled out at its default value.
        try:
            held = _comparable(recorded)
        except (ConfigError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{out} holds an experiment configuration this code cannot read ({exc}); choose another output folder") from None
        if {**held, **unchanged} != {**_comparable(data), **unchanged}:
            raise ConfigError(f"{out} holds an experiment with another configuration; choose another output folder")
        dropped = [seed for seed in recorded["seeds"] if seed not in config.seeds]
        if dropped:
            raise ConfigError(f"{out} holds an experiment with seeds {recorded['seeds']}; seeds may be added to it, not left out (missing: {dropped})")
        arms = recorded.get("ablations") or {}
        changed = sorted(arm for arm, overrides in arms.items() if arm in data["ablations"] and data["ablations"][arm] != overrides)
        if changed:
            raise ConfigError(f"{out} holds an experiment whose ablation arms {changed} are configured otherwise; arms may be added to it, not changed")
        data["ablations"] = {**arms, **data["ablations"]}
        config = dataclasses.replace(config, ablations=data["ablations"])
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return config


def _comparable(data: dict[str, Any]) -> dict[str, Any]:
    """A recorded configuration as runs compare: without the evaluation's ``max_batch_size``, and
    with its training section resolved by the trainer (every option, defaults included)."""
    evaluation = {key: value for key, value in (data.get("evaluation") or {}).items() if key != "max_batch_size"}
    training = config_to_dict(config_from_dict({**(data.get("training") or {}), "env_id": data["env_id"]}))
    return {**data, "evaluation": evaluation, "training": training}


# What decides the results; edits elsewhere (docs, tests) do not make a run's commit dirty.
_CODE = ("agentgym", "envs", "verifiers", "trainers", "tasks", "pyproject.toml")


def _record_commit(out: Path) -> None:
    """Add the commit that is about to run to ``commits.json`` (a resumed run may span several)."""
    path = out / "commits.json"
    commits = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    commit = _commit()
    if commit is not None and commit not in commits:
        path.write_text(json.dumps([*commits, commit]) + "\n", encoding="utf-8")


def _record_machine(out: Path) -> None:
    """Add the machine about to run to ``machines.json`` (a resumed run may span several)."""
    path = out / "machines.json"
    machines = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    machine = _machine()
    if machine not in machines:
        path.write_text(json.dumps([*machines, machine], indent=1) + "\n", encoding="utf-8")


def _machine() -> dict[str, Any]:
    """What of the machine can change the numbers: the processor, whether it multiplies bfloat16
    natively (then ``autocast: auto`` trains in bfloat16, elsewhere in float32), and the versions
    of the numeric libraries."""
    import importlib.metadata
    import platform

    from agentgym.trainers.modeling import cpu_has_native_bf16

    processor = platform.processor()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        processor = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), processor)
    versions = {}
    for package in ("torch", "transformers"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return {"processor": processor, "cpu_native_bf16": cpu_has_native_bf16(), **versions}


def _commit() -> str | None:
    """The git commit of the code that ran (with ``-dirty`` when the code had uncommitted changes)."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *_CODE], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")
