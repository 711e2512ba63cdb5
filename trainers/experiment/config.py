"""The experiment's configuration: the YAML file's sections, checked when loaded, and the trainer
configuration of each phase derived from it."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from agentgym.trainers.config import ConfigError, TrainConfig, config_dataclass, config_error, config_from_dict

__all__ = [
    "BASE",
    "CONFIG_ADAPTER",
    "GRPO",
    "SFT",
    "Choice",
    "DevelopmentSection",
    "EvaluationSection",
    "ExperimentConfig",
    "TaskPick",
    "load_experiment",
    "split_ids",
    "task_id_of",
    "train_config_for",
]

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
            :meth:`agentgym.rollouts.runner.RolloutRunner.run`); one that still fails is left out of every
            arm's statistics and counted in ``infra_errors``.
        max_batch_size: episodes decoded at once; more wait for a free row. Their key/value cache is
            most of an evaluation process's memory (~46 KB a token for SmolLM2-135M in float32:
            ~2.9 GB for 64 rows of 1,000 tokens), so fewer rows need less memory and, on a CPU,
            little more time. The results do not depend on it (each row decodes on its own), so a
            results folder may be resumed with another value.
    """

    tasks: TaskPick = field(default_factory=lambda: TaskPick(splits=("test",)))
    trials: Annotated[int, Field(ge=1)] = 2
    temperature: Annotated[float, Field(ge=0)] = 0.0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 100_000
    infra_retries: Annotated[int, Field(ge=0)] = 1
    max_batch_size: Annotated[int, Field(ge=1)] = 64


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
        memory_limit_gb: the most memory (GB, 10^9 bytes) the phases running at once may hold
            together by their estimates (:mod:`agentgym.trainers.memory`); ``None``: whatever is
            available when the run starts (the default: on 2 CPU cores the main job's two
            phases peak near 6 GB together, see docs/trainer.md). A phase alone always runs. It
            decides only which phases run side by side, never a result.
        controls: for an arm, the arm that isolates what it adds (its control), by name, e.g.
            ``{"grpo_sft_term": "sft_continued"}``; the summary adds each pair's paired difference
            (arm minus control) to the ones against SFT and GRPO.
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
    memory_limit_gb: Annotated[float, Field(gt=0)] | None = None
    controls: dict[str, str] = field(default_factory=dict)
    development: DevelopmentSection | None = None
    choices: tuple[Choice, ...] = ()
    run: Literal["reported", "development"] = "reported"

    def __post_init__(self) -> None:
        # Each field's bounds are on the field; these relate options to the ones the experiment
        # sets itself (env_id, model, seed, output_dir) and to the names of its own arms.
        problems = [f"training.{key} is set by the experiment; leave it out" for key in _RESERVED if key in self.training]
        problems += [f"ablation name {name!r} is taken by an arm" for name in self.ablations if name in (BASE, SFT, GRPO)]
        arms = (BASE, SFT, GRPO, *self.ablations)
        problems += [f"controls: {name!r} is not an arm of this experiment" for pair in self.controls.items() for name in pair if name not in arms]
        problems += [f"controls: {arm!r} cannot be its own control" for arm, control in self.controls.items() if arm == control]
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


CONFIG_ADAPTER = TypeAdapter(ExperimentConfig)
_RESERVED = ("env_id", "model", "seed", "output_dir")


def load_experiment(path: str | Path, *, output_dir: str | None = None, seeds: Sequence[int] | None = None, development: bool = False) -> ExperimentConfig:
    """Read and check an experiment YAML file; ``output_dir`` and ``seeds`` replace the file's.

    A file may start from another: ``extends: learning_cpu.yaml`` (relative to the file's folder)
    takes that file's options, and the file's own are applied on top (mappings such as
    ``ablations`` merge key by key, ``choices`` adds to the other file's, a choice replacing the
    other file's choice of the same option, other values replace).

    With ``development``, the development run: the ``development`` section's seeds (unless
    ``seeds`` is given) and evaluation tasks, in ``<output_dir>/development`` (unless
    ``output_dir`` is given).

    Raises:
        ConfigError: unknown keys, wrong types, values out of the bounds the fields declare,
            conflicting options, a training section the trainer rejects, ``development``
            without a development section, or files that extend each other in a cycle.
    """
    data = _read_options(Path(path), ())
    try:
        config = CONFIG_ADAPTER.validate_python(data)
        if development:
            config = _development_run(config)
        changes: dict[str, Any] = {"output_dir": output_dir} if output_dir is not None else {}
        if seeds is not None:
            changes["seeds"] = list(seeds)
        if changes:
            config = CONFIG_ADAPTER.validate_python({**dataclasses.asdict(config), **changes})
    except ValidationError as exc:
        raise config_error(exc, ExperimentConfig, "experiment configuration") from None
    # The trainer checks its part now, every phase's (the SFT phase, GRPO's and each arm's), before
    # the hours of the phases that precede a later one.
    phases = [(SFT, None, None), (GRPO, None, None), *((GRPO, arm, change) for arm, change in config.ablations.items())]
    for phase, arm, change in phases:
        try:
            train_config_for(config, phase, config.seeds[0], [], [], Path(config.output_dir), change=change)
        except ConfigError as exc:  # named as the experiment file names them
            named = [_in_training(problem) if arm is None else _in_arm(arm, problem) for problem in exc.problems]
            raise ConfigError.listing("experiment configuration", named) from None
    return config


def _read_options(path: Path, extending: tuple[Path, ...]) -> dict[str, Any]:
    """The options of the file at ``path``, on top of those of the file its ``extends`` names (a
    path relative to it), if any: mappings merge key by key, ``choices`` adds to the extended
    file's (a choice of an option the extended file also chose replaces that one: the file set
    the option again), and any other value replaces the extended file's. ``extending``: the files
    that extend this one (a file met twice is a cycle)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of options")
    extends = data.pop("extends", None)
    if extends is None:
        return data
    if not isinstance(extends, str) or not extends:
        raise ConfigError(f"{path}: extends must name an experiment file (a path relative to {path.name}'s folder)")
    base, reading = (path.parent / extends).resolve(), (*extending, path.resolve())
    if base in reading:
        raise ConfigError(f"{path}: extends {extends}, and the files extend each other in a cycle")
    inherited = _read_options(base, reading)
    own = data.pop("choices", None) or []
    chosen_here = {choice.get("option") for choice in own if isinstance(choice, dict) and isinstance(choice.get("option"), str)}
    kept = [choice for choice in inherited.get("choices") or [] if not (isinstance(choice, dict) and choice.get("option") in chosen_here)]
    choices = [*kept, *own]
    merged = _merged(inherited, data)
    return {**merged, "choices": choices} if choices else merged


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``top``'s values: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in top.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _development_run(config: ExperimentConfig) -> ExperimentConfig:
    """The development run of ``config``: its development seeds and evaluation tasks, in a folder of its own."""
    if config.development is None:
        raise ConfigError("this configuration has no development section (development seeds and evaluation tasks)")
    data = dataclasses.asdict(config)
    data["seeds"] = list(config.development.seeds)
    data["evaluation"]["tasks"] = dataclasses.asdict(config.development.evaluation_tasks)
    data["output_dir"] = str(Path(config.output_dir) / "development")
    data["run"] = "development"
    return CONFIG_ADAPTER.validate_python(data)


def _in_training(problem: str) -> str:
    """A problem the trainer found, with its option's path as the experiment file spells it (``training.grpo.steps``)."""
    path, colon, rest = problem.partition(": ")
    is_path = colon and path.replace("_", "").replace(".", "").replace("[", "").replace("]", "").isalnum()
    return f"training.{path}: {rest}" if is_path else f"training: {problem}"


def _in_arm(arm: str, problem: str) -> str:
    """A problem the trainer found in an arm's GRPO phase, named as the arm's options are (``ablations.ARM.grpo.steps``)."""
    named = _in_training(problem)
    return f"ablations.{arm}{named.removeprefix('training')}"


def task_id_of(entry: str) -> str:
    return entry.split(":", 1)[1]


def split_ids(tasks: Sequence[str]) -> dict[str, list[str]]:
    """``split:task_id`` entries grouped by split, in order."""
    by_split: dict[str, list[str]] = defaultdict(list)
    for entry in tasks:
        split, task_id = entry.split(":", 1)
        by_split[split].append(task_id)
    return dict(by_split)


def train_config_for(
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
        sections["sft"].update(task_ids=split_ids(sft_tasks).get(grpo_split, []) or None)
        sections["grpo"]["steps"] = 0
    else:
        sections["sft"]["steps"] = 0
    sections["rollout"].update(split=grpo_split, task_ids=split_ids(grpo_tasks).get(grpo_split) or None)
    sections["eval"]["enabled"] = False  # the experiment evaluates every arm itself
    data.update(sections, env_id=config.env_id, seed=seed, output_dir=str(run), model=str(model) if model is not None else config.model)
    for key, value in (change or {}).items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, Mapping) else value
    if phase != SFT and ((data.get("grpo") or {}).get("sft_coef") or data["sft"].get("steps")):
        # Demonstrations in an arm (GRPO's SFT term, or SFT steps the arm adds) are the SFT phase's tasks, not GRPO's.
        data["sft"] = {**data["sft"], "task_ids": split_ids(sft_tasks).get(grpo_split, []) or None}
    if phase == SFT and sft_tasks and _single_split(sft_tasks, "sft_tasks") != grpo_split:
        raise ConfigError("sft_tasks and grpo_tasks must come from the same split (the trainer's rollout split)")
    return config_from_dict(data)


def _single_split(tasks: Sequence[str], name: str) -> str:
    splits = sorted(split_ids(tasks)) or ["train"]
    if len(splits) != 1:
        raise ConfigError(f"{name} must come from one split, got {', '.join(splits)}")
    return splits[0]
