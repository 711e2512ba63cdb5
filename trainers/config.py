"""The reference trainer's configuration: typed dataclasses, loadable from and saved to YAML.

A run is described by one :class:`TrainConfig`, grouped into sections (``rollout``, ``grpo``,
``optim``, ``sft``, ``eval``, ``lora``, ``checkpoint``, ``logging``). YAML files mirror that
nesting and may leave out anything that keeps its default::

    env_id: agentgym/SQL-v0
    rollout: {num_tasks: 2, group_size: 4, max_new_tokens: 64}
    grpo: {steps: 10, kl_coef: 0.0}
    sft: {steps: 20}

:func:`load_config` validates types with pydantic (unknown keys, wrong types and values outside
the allowed choices are reported with their dotted path) and then checks values and their
combinations; every problem raises :class:`ConfigError`, a ``ValueError`` with one line per
problem.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, TypeAdapter, ValidationError

from agentgym.episode import RolloutSettings
from agentgym.trainers.grpo import LossAgg

__all__ = [
    "CheckpointSection",
    "ConfigError",
    "EvalSection",
    "GRPOSection",
    "LoRASection",
    "LoggingSection",
    "OptimSection",
    "RolloutSection",
    "SFTSection",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "load_config",
    "parse_override",
]

# Unknown keys are errors, so a typo in a YAML file cannot silently fall back to a default.
_STRICT_KEYS = ConfigDict(extra="forbid")

Schedule = Literal["constant", "linear", "cosine"]

# Device names the trainer accepts; whether the device exists is checked when the model loads.
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


class ConfigError(ValueError):
    """An invalid configuration; the message lists every problem, one per line."""


@dataclass(frozen=True, kw_only=True)
class RolloutSection(RolloutSettings):
    """How training rollouts are collected: the :class:`~agentgym.episode.RolloutSettings` every
    rollout path shares (``max_turns``, ``max_new_tokens``, ``max_total_tokens``, ``temperature``
    — also applied to the logits the loss sees — ``top_p``, ``template_kwargs``, ``tool_mode``),
    plus what to roll out.

    Attributes:
        split: task split the training tasks come from.
        task_ids: the training task pool; ``None`` means every task of ``split``.
        num_tasks: distinct tasks per GRPO step, drawn from the pool in a seeded order that
            visits every task once before any repeats.
        group_size: episodes per task (the GRPO group, at least 2).
        env_kwargs: extra keyword arguments for ``gym.make``.
        env_workers: threads stepping environments in parallel.
        distinct_env_seeds: every episode of a group gets its own environment seed (see
            :class:`agentgym.runner.RolloutConfig`).
    """

    __pydantic_config__ = _STRICT_KEYS

    split: str = "train"
    task_ids: tuple[str, ...] | None = None
    num_tasks: int = 8
    group_size: int = 4
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_workers: int = 8
    distinct_env_seeds: bool = False


@dataclass(frozen=True)
class OptimSection:
    """AdamW with a learning-rate schedule and gradient clipping.

    Attributes:
        lr: peak learning rate.
        weight_decay: decoupled weight decay.
        betas: Adam's moment decay rates.
        eps: Adam's epsilon.
        schedule: decay after warm-up: ``constant``, ``linear`` (to 0) or ``cosine`` (to 0).
        warmup_steps: optimiser steps of linear warm-up from 0.
        max_grad_norm: clip the global gradient norm to this; ``None`` disables clipping.
    """

    __pydantic_config__ = _STRICT_KEYS

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    schedule: Schedule = "constant"
    warmup_steps: int = 0
    max_grad_norm: float | None = 1.0


@dataclass(frozen=True)
class GRPOSection:
    """The GRPO phase: steps, optimisation epochs, batching and the loss.

    Attributes:
        steps: GRPO steps (one rollout batch each); 0 skips the phase.
        epochs: optimisation passes over each rollout batch.
        mini_batch_size: trajectories per optimiser step; ``None`` means the whole batch.
        micro_batch_size: trajectories per forward/backward pass (gradient accumulation).
        clip_eps: PPO clip range below 1.
        clip_eps_high: clip range above 1 (DAPO clip-higher); ``None`` means ``clip_eps``.
        kl_coef: weight of the K3 KL to the frozen reference; 0 loads no reference model.
        loss_agg: ``seq-mean-token-mean`` (GRPO), ``token-mean`` (DAPO) or
            ``seq-mean-token-sum-norm`` (Dr. GRPO).
        scale_by_std: divide advantages by the group's reward std (False: Dr. GRPO).
        filter_degenerate: drop groups whose rewards are all equal before the update.
        mask_truncated: give no loss to trajectories cut by the token budget.
        train_on_env_tokens: ablation of the loss mask: the loss also covers the environment's tokens
            after the prompt (tool output, user turns, template glue), as a trainer that masks only
            the prompt would. Off (the masked loss) is what agentgym is for.
        old_logprobs: ``recompute`` the old policy's logprobs with a forward pass before the
            update, or reuse the ``sampling`` logprobs the backend reported.
        share_prefix: run the tokens all trajectories of a micro-batch share once (exact).
    """

    __pydantic_config__ = _STRICT_KEYS

    steps: int = 100
    epochs: int = 1
    mini_batch_size: int | None = None
    micro_batch_size: int = 4
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.04
    loss_agg: LossAgg = "seq-mean-token-mean"
    scale_by_std: bool = True
    filter_degenerate: bool = False
    mask_truncated: bool = False
    train_on_env_tokens: bool = False
    old_logprobs: Literal["recompute", "sampling"] = "recompute"
    share_prefix: bool = True


@dataclass(frozen=True)
class SFTSection:
    """The supervised warm start on demonstration trajectories (masked next-token loss).

    Attributes:
        steps: optimiser steps; 0 skips the phase.
        source: ``oracle`` (the environment's oracle policy) or a JSONL file of episode records
            (``agentgym rollout`` format); only successful episodes are kept.
        task_ids: tasks to demonstrate; ``None`` means the rollout task pool.
        num_tasks: at most this many of them (in a seeded order); ``None`` means all.
        batch_size: trajectories per optimiser step.
        micro_batch_size: trajectories per forward/backward pass.
        max_length: cut demonstrations to this many tokens; ``None`` keeps them whole.
        env_kwargs: ``gym.make`` arguments for the demonstration episodes; ``None`` means
            ``rollout.env_kwargs`` (e.g. ``{fault_rate: 0}`` demonstrates without the faults
            that training and evaluation see).
        optim: the SFT optimiser (its own learning rate and schedule).
    """

    __pydantic_config__ = _STRICT_KEYS

    steps: int = 0
    source: str = "oracle"
    task_ids: tuple[str, ...] | None = None
    num_tasks: int | None = None
    batch_size: int = 8
    micro_batch_size: int = 4
    max_length: int | None = None
    env_kwargs: dict[str, Any] | None = None
    optim: OptimSection = field(default_factory=lambda: OptimSection(lr=1e-5))


@dataclass(frozen=True)
class EvalSection:
    """Evaluation before and after training, every ``every`` GRPO steps, and early stopping.

    Attributes:
        enabled: evaluate at all (off when something else evaluates the run, e.g. ``agentgym experiment``).
        split: the evaluation split.
        task_ids: evaluation tasks; ``None`` takes ``num_tasks`` of ``split`` in a seeded order.
        num_tasks: tasks evaluated when ``task_ids`` is not given.
        samples: episodes per task (more than 1 only makes sense with ``temperature > 0``).
        temperature: sampling temperature of evaluation episodes (0: greedy).
        every: GRPO steps between evaluations; 0 evaluates only before and after training.
        metric: the early-stopping metric: ``success_rate`` or ``reward_mean``.
        patience: stop after this many evaluations without an improvement of ``min_delta``;
            ``None`` never stops early.
        min_delta: the improvement that resets ``patience``.
    """

    __pydantic_config__ = _STRICT_KEYS

    enabled: bool = True
    split: str = "val"
    task_ids: tuple[str, ...] | None = None
    num_tasks: int = 16
    samples: int = 1
    temperature: float = 0.0
    every: int = 0
    metric: Literal["success_rate", "reward_mean"] = "success_rate"
    patience: int | None = None
    min_delta: float = 0.0


@dataclass(frozen=True)
class LoRASection:
    """Low-rank adapters via ``peft`` (optional dependency).

    Attributes:
        enabled: train adapters instead of all weights; the reference is the model with
            adapters disabled, so no second copy is loaded.
        r: adapter rank.
        alpha: adapter scaling numerator (scale ``alpha / r``).
        target_modules: module names to adapt, or ``all-linear``.

    There is no adapter dropout: the model stays in eval mode for the whole run, because the
    ratio of new to old logprobs must be exactly 1 before the first update.
    """

    __pydantic_config__ = _STRICT_KEYS

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    target_modules: tuple[str, ...] | Literal["all-linear"] = "all-linear"


@dataclass(frozen=True)
class CheckpointSection:
    """Checkpoints for exact resume.

    Attributes:
        every: optimiser-phase steps between checkpoints (SFT and GRPO steps alike); 0 saves
            one only at the end of each phase.
        keep: most recent checkpoints kept on disk.
    """

    __pydantic_config__ = _STRICT_KEYS

    every: int = 0
    keep: int = 2


@dataclass(frozen=True)
class LoggingSection:
    """Where metrics go besides ``metrics.jsonl``.

    Attributes:
        tensorboard: also write TensorBoard event files to ``tensorboard/`` (needs ``tensorboard``).
        progress: show a live progress display in the terminal.
        plots: draw PNG plots of the metrics at the end (needs ``matplotlib``).
    """

    __pydantic_config__ = _STRICT_KEYS

    tensorboard: bool = True
    progress: bool = True
    plots: bool = True


@dataclass(frozen=True)
class TrainConfig:
    """A complete training run: SFT warm start (optional), then GRPO.

    Attributes:
        env_id: the environment, e.g. ``agentgym/SQL-v0``.
        model: model reference for :func:`agentgym.models.load_model`; ``None`` is the default model.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:1``, ...
        dtype: ``auto`` (float32 weights) or a torch dtype name for the weights themselves
            (``bfloat16`` halves memory but loses small updates).
        autocast: ``bf16`` runs matrix products in bfloat16 over float32 master weights (rollouts,
            evaluation and training alike); ``off`` computes in the weights' dtype; ``auto`` is
            ``bf16`` on CUDA and ``off`` elsewhere (on CPUs with AVX512-BF16 or AMX, ``bf16`` about
            halves the time of a training step).
        ref_device: device of the frozen reference model; ``None`` means ``device``.
        seed: the seed every random choice derives from.
        output_dir: the run folder (config, metrics, plots, checkpoints, report, model).
    """

    __pydantic_config__ = _STRICT_KEYS

    env_id: str
    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    autocast: Literal["auto", "bf16", "off"] = "auto"
    ref_device: str | None = None
    seed: int = 0
    output_dir: str = "runs/train"
    rollout: RolloutSection = field(default_factory=RolloutSection)
    grpo: GRPOSection = field(default_factory=GRPOSection)
    optim: OptimSection = field(default_factory=OptimSection)
    sft: SFTSection = field(default_factory=SFTSection)
    eval: EvalSection = field(default_factory=EvalSection)
    lora: LoRASection = field(default_factory=LoRASection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    logging: LoggingSection = field(default_factory=LoggingSection)

    def __post_init__(self) -> None:
        problems = _value_problems(self)
        if problems:
            raise ConfigError("invalid training configuration:\n  " + "\n  ".join(problems))


def _value_problems(c: TrainConfig) -> list[str]:
    """Every value or combination of values the trainer cannot run with."""
    problems: list[str] = []

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    need(bool(c.env_id.strip()), "env_id must not be empty")
    need(_DEVICE.fullmatch(c.device) is not None, f"device must be auto, cpu, cuda or cuda:N, got {c.device!r}")
    need(
        c.ref_device is None or (_DEVICE.fullmatch(c.ref_device) is not None and c.ref_device != "auto"),
        f"ref_device must be cpu, cuda or cuda:N (or null for the policy's device), got {c.ref_device!r}",
    )
    need(
        c.ref_device is None or not c.lora.enabled,
        "ref_device does not apply with LoRA: the reference is the policy with its adapters off (leave ref_device out)",
    )
    need(c.seed >= 0, f"seed must be >= 0, got {c.seed}")
    r = c.rollout  # RolloutSettings checked its own budgets and sampling values
    need(r.num_tasks >= 1, f"rollout.num_tasks must be >= 1, got {r.num_tasks}")
    need(r.group_size >= 2, f"rollout.group_size must be >= 2 (GRPO compares samples of a task), got {r.group_size}")
    need(r.temperature > 0, f"rollout.temperature must be > 0 for GRPO (greedy groups have no variance), got {r.temperature}")
    need(r.env_workers >= 1, f"rollout.env_workers must be >= 1, got {r.env_workers}")
    need(r.task_ids is None or len(r.task_ids) > 0, "rollout.task_ids must not be empty (leave it out for the whole split)")
    g = c.grpo
    need(g.steps >= 0, f"grpo.steps must be >= 0, got {g.steps}")
    need(g.epochs >= 1, f"grpo.epochs must be >= 1, got {g.epochs}")
    need(g.micro_batch_size >= 1, f"grpo.micro_batch_size must be >= 1, got {g.micro_batch_size}")
    need(g.mini_batch_size is None or g.mini_batch_size >= 1, f"grpo.mini_batch_size must be >= 1, got {g.mini_batch_size}")
    need(0 < g.clip_eps < 1, f"grpo.clip_eps must be in (0, 1), got {g.clip_eps}")
    need(g.clip_eps_high is None or g.clip_eps_high > 0, f"grpo.clip_eps_high must be > 0, got {g.clip_eps_high}")
    need(g.kl_coef >= 0, f"grpo.kl_coef must be >= 0, got {g.kl_coef}")
    need(
        g.old_logprobs != "sampling" or r.top_p == 1,
        "grpo.old_logprobs='sampling' needs rollout.top_p=1: top-p sampling logprobs are renormalised over "
        "the nucleus, so they are not the policy's logprobs (use 'recompute')",
    )
    need(
        not g.train_on_env_tokens or g.old_logprobs == "recompute",
        "grpo.train_on_env_tokens needs grpo.old_logprobs='recompute' (there are no sampling logprobs for environment tokens)",
    )
    for name, o in (("optim", c.optim), ("sft.optim", c.sft.optim)):
        need(o.lr > 0, f"{name}.lr must be > 0, got {o.lr}")
        need(o.weight_decay >= 0, f"{name}.weight_decay must be >= 0, got {o.weight_decay}")
        need(all(0 <= b < 1 for b in o.betas), f"{name}.betas must be in [0, 1), got {list(o.betas)}")
        need(o.eps > 0, f"{name}.eps must be > 0, got {o.eps}")
        need(o.warmup_steps >= 0, f"{name}.warmup_steps must be >= 0, got {o.warmup_steps}")
        need(o.max_grad_norm is None or o.max_grad_norm > 0, f"{name}.max_grad_norm must be > 0 (or null), got {o.max_grad_norm}")
    s = c.sft
    need(s.steps >= 0, f"sft.steps must be >= 0, got {s.steps}")
    need(bool(s.source.strip()), "sft.source must be 'oracle' or a path to a JSONL file of episode records")
    need(s.num_tasks is None or s.num_tasks >= 1, f"sft.num_tasks must be >= 1, got {s.num_tasks}")
    need(s.batch_size >= 1, f"sft.batch_size must be >= 1, got {s.batch_size}")
    need(s.micro_batch_size >= 1, f"sft.micro_batch_size must be >= 1, got {s.micro_batch_size}")
    need(s.max_length is None or s.max_length >= 2, f"sft.max_length must be >= 2, got {s.max_length}")
    need(s.task_ids is None or len(s.task_ids) > 0, "sft.task_ids must not be empty (leave it out for the rollout pool)")
    e = c.eval
    need(e.num_tasks >= 1, f"eval.num_tasks must be >= 1, got {e.num_tasks}")
    need(e.samples >= 1, f"eval.samples must be >= 1, got {e.samples}")
    need(e.temperature >= 0, f"eval.temperature must be >= 0, got {e.temperature}")
    need(e.every >= 0, f"eval.every must be >= 0, got {e.every}")
    need(e.patience is None or e.patience >= 1, f"eval.patience must be >= 1, got {e.patience}")
    need(e.patience is None or e.every >= 1, "eval.patience needs eval.every >= 1 (early stopping compares periodic evaluations)")
    need(e.enabled or e.every == 0, "eval.every needs eval.enabled")
    need(e.min_delta >= 0, f"eval.min_delta must be >= 0, got {e.min_delta}")
    need(e.task_ids is None or len(e.task_ids) > 0, "eval.task_ids must not be empty (leave it out to draw num_tasks)")
    lo = c.lora
    need(lo.r >= 1, f"lora.r must be >= 1, got {lo.r}")
    need(lo.alpha >= 1, f"lora.alpha must be >= 1, got {lo.alpha}")
    need(lo.target_modules == "all-linear" or len(lo.target_modules) > 0, "lora.target_modules must name at least one module")
    need(c.checkpoint.every >= 0, f"checkpoint.every must be >= 0, got {c.checkpoint.every}")
    need(c.checkpoint.keep >= 1, f"checkpoint.keep must be >= 1, got {c.checkpoint.keep}")
    need(g.steps > 0 or s.steps > 0, "nothing to do: grpo.steps and sft.steps are both 0 (set one, e.g. agentgym train/sft --steps N)")
    return problems


_ADAPTER = TypeAdapter(TrainConfig)


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from nested plain data (as YAML gives it).

    Raises:
        ConfigError: on unknown keys, wrong types, bad values or conflicting options.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"a training configuration must be a mapping of sections, got {type(data).__name__}")
    try:
        return _ADAPTER.validate_python(dict(data))
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            raised = error.get("ctx", {}).get("error")
            if isinstance(raised, ConfigError):  # value checks of TrainConfig.__post_init__
                raise raised from None
            path = ".".join(str(p) for p in error["loc"]) or "(top level)"
            if error["type"] == "value_error" and isinstance(raised, ValueError):  # a section's own check
                lines.append(f"{path}.{raised}")
            elif error["type"] == "unexpected_keyword_argument":
                lines.append(f"{path}: unknown option")
            else:
                lines.append(f"{path}: {error['msg']} (got {error.get('input')!r})")
        raise ConfigError("invalid training configuration:\n  " + "\n  ".join(lines)) from None


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain nested data (lists for tuples) that :func:`config_from_dict` turns back into ``config``."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def load_config(path: str | Path | None = None, *, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """Read a YAML file (optional), apply dotted-key ``overrides`` and validate.

    Args:
        path: a YAML file holding a mapping of the config's sections.
        overrides: ``{"grpo.steps": 3, "env_id": "agentgym/SQL-v0"}``; applied after the file.

    Raises:
        ConfigError: on an unreadable or invalid file or an invalid result.
    """
    import yaml

    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of config sections, got {type(loaded).__name__}")
        data = loaded or {}
    return config_from_dict(apply_overrides(data, overrides or {}))


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``data`` with each dotted key of ``overrides`` set (sections created as needed).

    Raises:
        ConfigError: when a key path runs through a value that is not a section.
    """
    import copy

    out = copy.deepcopy(dict(data))
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if not all(parts):
            raise ConfigError(f"bad option name {dotted!r}")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"cannot set {dotted!r}: {'.'.join(parts[: depth + 1])} is not a section")
            node = child
        node[parts[-1]] = value
    return out


def dump_config(config: TrainConfig, path: str | Path) -> None:
    """Write ``config`` as YAML that :func:`load_config` reads back to an equal config."""
    import yaml

    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False), encoding="utf-8")


def parse_override(text: str) -> tuple[str, Any]:
    """Split a ``--set`` argument ``KEY=VALUE``; the value is parsed as YAML (``3``, ``1e-5``, ``[a, b]``, ``null``).

    Raises:
        ConfigError: when there is no ``=`` or the value is not valid YAML.
    """
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set needs KEY=VALUE (e.g. grpo.steps=10), got {text!r}")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML") from None
    return key.strip(), value
