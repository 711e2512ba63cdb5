"""The reference trainer's configuration: typed dataclasses, loadable from and saved to YAML.

A run is described by one :class:`TrainConfig`, grouped into sections (``rollout``, ``grpo``,
``optim``, ``sft``, ``eval``, ``lora``, ``checkpoint``, ``logging``). YAML files mirror that
nesting and may leave out anything that keeps its default::

    env_id: agentgym/SQL-v0
    rollout: {num_tasks: 2, group_size: 4, max_new_tokens: 64}
    grpo: {steps: 10, kl_coef: 0.0}
    sft: {steps: 20}

The sections are pydantic dataclasses: every field declares its type and its bounds
(``Annotated[int, Field(ge=1)]``), and they are checked whenever a section is made, from YAML,
from a dict or in Python. Unknown keys, wrong types and values out of bounds are all reported at
once, each with its dotted path (``grpo.epochs: must be >= 1 (got 0)``); the few rules that relate
two options (:func:`_combination_problems`) are checked once every option is valid on its own.
Every problem raises :class:`ConfigError`, a ``ValueError`` with one line per problem.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, cast, dataclass_transform, get_args, get_origin

import pydantic.dataclasses
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from agentgym.rollouts.settings import RolloutSettings
from agentgym.trainers.grpo import DegenerateBy, LossAgg

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
    "config_dataclass",
    "config_error",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "load_config",
    "parse_override",
]

Schedule = Literal["constant", "linear", "cosine"]

# String patterns of the fields, and how an error states each. Device names the trainer accepts;
# whether the device exists is checked when the model loads.
_NOT_BLANK = r"\S"
_DEVICE = r"^(auto|cpu|mps|cuda(:\d+)?)$"
_REF_DEVICE = r"^(cpu|mps|cuda(:\d+)?)$"
_PATTERNS = {
    _NOT_BLANK: "must not be empty",
    _DEVICE: "must be auto, cpu, mps, cuda or cuda:N",
    _REF_DEVICE: "must be cpu, mps, cuda, cuda:N or null (the policy's device)",
}


class ConfigError(ValueError):
    """An invalid configuration; the message lists every problem, one per line.

    Attributes:
        problems: the problems, one line each, without the heading.
    """

    def __init__(self, message: str, problems: Sequence[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems) if problems is not None else [message]

    @classmethod
    def listing(cls, what: str, problems: Sequence[str]) -> ConfigError:
        """``invalid <what>:`` and then the problems, one indented line each."""
        return cls(f"invalid {what}:\n  " + "\n  ".join(problems), problems)


_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, Field))
def config_dataclass(what: str | None = None, *, kw_only: bool = False) -> Callable[[type[_T]], type[_T]]:
    """Make a class a frozen configuration dataclass that checks itself when it is made.

    The class becomes a pydantic dataclass that forbids unknown keys (a typo in a YAML file must
    not fall back to a default silently) and validates every field's type and the bounds its
    annotation declares; ``__post_init__`` may add checks that relate fields, raising
    :class:`ConfigError`. Constructing it with bad values, directly or via ``dataclasses.replace``,
    raises :class:`ConfigError` naming every problem (``what`` names the class in the heading).
    """

    def make(cls: type[_T]) -> type[_T]:
        made = cast("type[_T]", pydantic.dataclasses.dataclass(frozen=True, kw_only=kw_only, config=ConfigDict(extra="forbid"))(cls))
        validating_init = made.__init__
        title = what or made.__name__

        @functools.wraps(validating_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                validating_init(self, *args, **kwargs)
            except ValidationError as exc:
                raise config_error(exc, made, title) from None

        made.__init__ = __init__  # type: ignore[method-assign]
        return made

    return make


def config_error(exc: ValidationError, root: type, what: str) -> ConfigError:
    """The :class:`ConfigError` for pydantic's errors while validating ``root``: one line per
    problem, ``<dotted path>: <what is wrong> (got <value>)``."""
    problems: list[str] = []
    unions: dict[str, tuple[int, list[str], Any]] = {}  # every member of a union reports the value: one line for all
    errors = exc.errors()
    for error in errors:
        loc = error["loc"]
        if error["type"] == "too_short" and any(len(e["loc"]) > len(loc) and e["loc"][: len(loc)] == loc for e in errors):
            continue  # pydantic counts only the valid items, and the invalid ones are reported
        path, section, member = _where(root, loc)
        raised = (error.get("ctx") or {}).get("error")
        if error["type"] == "value_error" and isinstance(raised, ConfigError):  # checks relating fields
            problems += [f"{path}: {p}" if path else p for p in raised.problems]
        elif error["type"] == "value_error" and isinstance(raised, ValueError) and section:  # a section's own check
            problems.append(f"{path}.{raised}" if path else str(raised))
        elif error["type"] == "unexpected_keyword_argument":  # a misspelled key: name the ones there are
            options = _section_at(root, loc[:-1])
            valid = f"; valid options: {', '.join(options.__pydantic_fields__)}" if options is not None else ""
            problems.append(f"{path}: {_phrase(error)}{valid}")
        elif error["type"] == "missing":
            problems.append(f"{path}: {_phrase(error)}")
        elif member:
            if path not in unions:
                unions[path] = (len(problems), [], error.get("input"))
                problems.append("")
            unions[path][1].append(_phrase(error))
        else:
            problems.append(f"{path or '(top level)'}: {_phrase(error)} (got {error.get('input')!r})")
    for path, (index, phrases, value) in unions.items():
        problems[index] = f"{path}: {' or '.join(phrases)} (got {value!r})"
    return ConfigError.listing(what, problems)


_COMPARISONS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _phrase(error: Any) -> str:
    """What is wrong, in the words of the configuration's messages."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _COMPARISONS:
        key, sign = _COMPARISONS[kind]
        bound = ctx[key]
        return f"must be {sign} {int(bound) if isinstance(bound, float) and bound.is_integer() else bound}"
    if kind == "too_short":
        return "must not be empty" if ctx["min_length"] == 1 else f"must have at least {ctx['min_length']} items"
    if kind == "string_pattern_mismatch":
        return _PATTERNS.get(ctx["pattern"], f"must match {ctx['pattern']!r}")
    if kind == "literal_error":
        return f"must be {ctx['expected']}"
    if kind == "unexpected_keyword_argument":
        return "unknown option"
    if kind == "value_error" and isinstance(ctx.get("error"), ValueError):
        return str(ctx["error"])
    message = str(error["msg"])
    return "must be " + message.removeprefix("Input should be ") if message.startswith("Input should be ") else message


def _where(root: type, loc: Sequence[int | str]) -> tuple[str, bool, bool]:
    """Where an error is: its dotted path (option names through the sections, ``[i]`` for a
    position in a tuple, ``.key`` in a mapping), whether that is a section, and whether the error
    is one member's of a union (pydantic names the member in ``loc``; the path leaves it out)."""
    names: list[str] = []
    section: Any = root
    annotation: Any = None
    rest = list(loc)
    while rest and section is not None and isinstance(rest[0], str) and rest[0] in section.__pydantic_fields__:
        name = str(rest.pop(0))
        names.append(name)
        annotation = section.__pydantic_fields__[name].annotation
        section = _section_type(annotation)
    member = bool(rest) and isinstance(rest[0], str) and len(_not_none(annotation)) > 1
    if member:
        rest.pop(0)
    path = ""
    for part in [*names, *rest]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path, section is not None and not rest, member


def _section_at(root: type, loc: Sequence[int | str]) -> Any:
    """The configuration class at the option path ``loc`` from ``root`` (None where ``loc`` leaves the sections)."""
    section: Any = root
    for part in loc:
        if section is None or not isinstance(part, str) or part not in section.__pydantic_fields__:
            return None
        section = _section_type(section.__pydantic_fields__[part].annotation)
    return section


def _not_none(annotation: Any) -> tuple[Any, ...]:
    """The members of a union annotation other than None (the annotation itself if it is no union)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(a for a in get_args(annotation) if a is not type(None))
    return (annotation,)


def _section_type(annotation: Any) -> type | None:
    """The configuration class an option's annotation holds (``X`` or ``X | None``), else None."""
    members = _not_none(annotation)
    if len(members) == 1 and isinstance(members[0], type) and hasattr(members[0], "__pydantic_fields__"):
        return members[0]
    return None


@config_dataclass(kw_only=True)
class RolloutSection(RolloutSettings):
    """How training rollouts are collected: every field of :class:`agentgym.rollouts.settings.RolloutSettings`,
    inherited (``max_turns``, ``max_new_tokens``, ``max_total_tokens``, ``temperature`` — also
    applied to the logits the loss sees — ``error_temperature``, ``error_temperature_tokens``,
    ``error_temperature_offset``, ``error_tool_exploration``, ``top_p``, ``template_kwargs``, ``tool_mode``; a setting added
    there is an option here), plus what to roll out, with the
    trainer's own defaults and bounds. ``RolloutSettings`` checks its own budgets and sampling
    values; :func:`agentgym.trainers.trainer.rollout_config` passes every field this section
    shares with :class:`agentgym.rollouts.runner.RolloutConfig` on by name.

    Attributes:
        temperature: sampling temperature; above 0, since GRPO compares the samples of a group
            (greedy groups have no variance).
        error_temperature: sampling temperature of the turn after a failed tool call (``None``:
            ``temperature``); exploration only, the loss scores every token at ``temperature``.
        error_temperature_tokens: the tokens of that turn sampled at ``error_temperature``, from
            its ``error_temperature_offset``-th on (``None``: all of them); the rest at ``temperature``.
        error_temperature_offset: the tokens of that turn before those (sampled at ``temperature``).
        error_tool_exploration: probability that the turn after a failed tool call opens with a
            call to a random tool (the model writes its arguments); the given tokens are scored
            by the loss as the model's own (see :class:`agentgym.rollouts.settings.RolloutSettings`).
        split: task split the training tasks come from.
        task_ids: the training task pool; ``None`` (not an empty list) means every task of ``split``.
        num_tasks: distinct tasks per GRPO step, drawn from the pool in a seeded order that
            visits every task once before any repeats.
        group_size: episodes per task (the GRPO group, at least 2).
        env_kwargs: extra keyword arguments for ``gym.make``.
        env_workers: threads stepping environments in parallel.
        distinct_env_seeds: every episode of a group gets its own environment seed (see
            :class:`agentgym.rollouts.runner.RolloutConfig`).
        max_cache_mib: budget of the key/value buffers the trainer's decoding (its rollouts and
            evaluations) may hold, in MiB; ``None``: a quarter of the machine's memory. Episodes
            wait for room rather than grow the buffers past it (a lone episode may), so one long
            step cannot raise the process's peak by its whole rectangle of rows. The waiting
            costs time; the episodes were the same tokens wherever measured (docs/trainer.md).
    """

    temperature: Annotated[float, Field(gt=0)] = 1.0
    split: str = "train"
    task_ids: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    num_tasks: Annotated[int, Field(ge=1)] = 8
    group_size: Annotated[int, Field(ge=2)] = 4
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_workers: Annotated[int, Field(ge=1)] = 8
    distinct_env_seeds: bool = False
    max_cache_mib: Annotated[float, Field(gt=0)] | None = None


@config_dataclass()
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

    lr: Annotated[float, Field(gt=0)] = 1e-6
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    eps: Annotated[float, Field(gt=0)] = 1e-8
    schedule: Schedule = "constant"
    warmup_steps: Annotated[int, Field(ge=0)] = 0
    max_grad_norm: Annotated[float, Field(gt=0)] | None = 1.0


@config_dataclass()
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
        degenerate_by: what must differ within a group for ``filter_degenerate`` to keep it:
            ``reward`` (the shaped reward) or ``success`` (the task's raw outcome, the
            environment's verdict; DAPO's dynamic sampling on the outcome).
        resample_rounds: DAPO dynamic sampling: while fewer than ``rollout.num_tasks`` groups
            survive ``filter_degenerate``, roll out another ``rollout.num_tasks`` tasks, at most
            this many extra rounds per step; the update then takes the first ``num_tasks``
            surviving groups, or all there are. 0 rolls out once.
        step_advantage_weight: weight ``w`` of GiGPO's step-level advantage: the tokens of a turn
            get ``A_i + w * A^S`` (see :mod:`agentgym.trainers.credit`); 0 gives every token its
            episode's advantage, as plain GRPO.
        step_discount: discount ``gamma`` of the return from each turn in the step advantage.
        sft_coef: weight ``c`` of an SFT term in every optimiser step of the update: ``c`` times the
            masked NLL per loss token of ``sft.batch_size`` demonstrations (built and drawn as the
            SFT phase's, from ``sft.task_ids``), as InstructGPT mixed its pretraining loss into PPO:
            it holds what the demonstrations taught while the rewards teach the rest. 0 adds none
            and builds no demonstrations.
        sft_when_degenerate: with ``sft_coef``, a step whose groups were all left out (every one
            degenerate, or lost to infra errors) still takes one optimiser step on the SFT term
            alone (off: such a step makes no update). A policy that drifted into failing every
            episode gives its groups no reward variance, and without this nothing pulls it back.
        openings_in_loss: the tokens ``rollout.error_tool_exploration`` gave (a turn's
            ``opening_tokens``): ``always`` trained as the model's own, whatever their advantage;
            ``when_better`` only where their advantage is above 0 (the proposal did better than its
            group), masked like environment tokens elsewhere: a given choice the model did not make
            is reinforced when it helps and not pushed down when it does not.
        format_errors_in_loss: the sampled tokens of a turn in which the environment found a
            malformed call (unparsable, an unknown tool, invalid arguments): ``always`` trained
            with their episode's advantage like any other; ``when_worse`` only where it is below 0,
            so a malformed call is pushed down where its episode did worse than its group and
            never reinforced by one that succeeded despite it.
        call_prefix_in_loss: the leading tokens of a turn that every tool call begins with (the
            call format's own tokens, ``ChatRenderer.call_prefix``, as the turn sampled them):
            ``always`` trained with their episode's advantage; ``when_better`` only where it is
            above 0. Pushing them down for an episode that did worse pushes down every call from
            that state, the better ones included; what made it worse is in the tokens after them.
        call_closing_in_loss: the tokens that close a call after its arguments' last value (each
            tool's ``ChatRenderer.call_closings``: ``}}</tool_call>``; after the name for a tool
            without arguments), wherever a turn sampled them:
            ``always`` trained with their episode's advantage; ``when_better`` only where it is
            above 0. The call's choice is made before them (which argument, what value); pushing
            them down for an episode that did worse moves mass to other names and closings, so the
            next call pairs its arguments with the wrong tool.
        after_error_in_loss: the sampled tokens of every turn right after a failed tool call (the
            previous step's ``info["turn_tool_errors"]`` above 0: a tool error or a seeded fault):
            ``always`` trained with their episode's advantage; ``when_better`` only where it is
            above 0. After a fault the model is in a state no demonstration showed; the turns it
            writes there mostly fail, and pushing every one of them down moves mass to whatever
            is left, malformed calls included. Reinforcing only what did better keeps what those
            turns can learn (a retry that won its group).
        mask_truncated: give no loss to trajectories cut by the token budget.
        train_on_env_tokens: ablation of the loss mask: the loss also covers the environment's tokens
            after the prompt (tool output, user turns, template glue), as a trainer that masks only
            the prompt would. Off (the masked loss) is what agentgym is for.
        old_logprobs: ``recompute`` the old policy's logprobs with a forward pass before the
            update, or reuse the ``sampling`` logprobs the backend reported.
        share_prefix: run the tokens all trajectories of a micro-batch share once (exact).
    """

    steps: Annotated[int, Field(ge=0)] = 100
    epochs: Annotated[int, Field(ge=1)] = 1
    mini_batch_size: Annotated[int, Field(ge=1)] | None = None
    micro_batch_size: Annotated[int, Field(ge=1)] = 4
    clip_eps: Annotated[float, Field(gt=0, lt=1)] = 0.2
    clip_eps_high: Annotated[float, Field(gt=0)] | None = None
    kl_coef: Annotated[float, Field(ge=0)] = 0.04
    loss_agg: LossAgg = "seq-mean-token-mean"
    scale_by_std: bool = True
    filter_degenerate: bool = False
    degenerate_by: DegenerateBy = "reward"
    resample_rounds: Annotated[int, Field(ge=0)] = 0
    step_advantage_weight: Annotated[float, Field(ge=0)] = 0.0
    step_discount: Annotated[float, Field(gt=0, le=1)] = 0.95
    sft_coef: Annotated[float, Field(ge=0)] = 0.0
    sft_when_degenerate: bool = False
    openings_in_loss: Literal["always", "when_better"] = "always"
    format_errors_in_loss: Literal["always", "when_worse"] = "always"
    call_prefix_in_loss: Literal["always", "when_better"] = "always"
    call_closing_in_loss: Literal["always", "when_better"] = "always"
    after_error_in_loss: Literal["always", "when_better"] = "always"
    mask_truncated: bool = False
    train_on_env_tokens: bool = False
    old_logprobs: Literal["recompute", "sampling"] = "recompute"
    share_prefix: bool = True


@config_dataclass()
class SFTSection:
    """The supervised warm start on demonstration trajectories (masked next-token loss).

    Attributes:
        steps: optimiser steps; 0 skips the phase.
        source: ``oracle`` (the environment's oracle policy) or a JSONL file of episode records
            (``agentgym rollout`` format); only successful episodes are kept.
        task_ids: tasks to demonstrate; ``None`` (not an empty list) means the rollout task pool.
        num_tasks: at most this many of them (in a seeded order); ``None`` means all.
        batch_size: trajectories per optimiser step.
        micro_batch_size: trajectories per forward/backward pass.
        max_length: cut demonstrations to this many tokens; ``None`` keeps them whole.
        env_kwargs: ``gym.make`` arguments for the demonstration episodes; ``None`` means
            ``rollout.env_kwargs`` (e.g. ``{fault_rate: 0}`` demonstrates without the faults
            that training and evaluation see).
        optim: the SFT optimiser (its own learning rate and schedule).
    """

    steps: Annotated[int, Field(ge=0)] = 0
    source: Annotated[str, Field(pattern=_NOT_BLANK)] = "oracle"
    task_ids: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    num_tasks: Annotated[int, Field(ge=1)] | None = None
    batch_size: Annotated[int, Field(ge=1)] = 8
    micro_batch_size: Annotated[int, Field(ge=1)] = 4
    max_length: Annotated[int, Field(ge=2)] | None = None
    env_kwargs: dict[str, Any] | None = None
    optim: OptimSection = field(default_factory=lambda: OptimSection(lr=1e-5))


@config_dataclass()
class EvalSection:
    """Evaluation before and after training, every ``every`` GRPO steps, and early stopping.

    Attributes:
        enabled: evaluate at all (off when something else evaluates the run, e.g. ``agentgym experiment``).
        split: the evaluation split.
        task_ids: evaluation tasks; ``None`` (not an empty list) takes ``num_tasks`` of ``split`` in a seeded order.
        num_tasks: tasks evaluated when ``task_ids`` is not given.
        samples: episodes per task (more than 1 only makes sense with ``temperature > 0``).
        temperature: sampling temperature of evaluation episodes (0: greedy).
        every: GRPO steps between evaluations; 0 evaluates only before and after training.
        metric: the early-stopping metric: ``success_rate`` or ``reward_mean``.
        patience: stop after this many evaluations without an improvement of ``min_delta``;
            ``None`` never stops early.
        min_delta: the improvement that resets ``patience``.
    """

    enabled: bool = True
    split: str = "val"
    task_ids: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    num_tasks: Annotated[int, Field(ge=1)] = 16
    samples: Annotated[int, Field(ge=1)] = 1
    temperature: Annotated[float, Field(ge=0)] = 0.0
    every: Annotated[int, Field(ge=0)] = 0
    metric: Literal["success_rate", "reward_mean"] = "success_rate"
    patience: Annotated[int, Field(ge=1)] | None = None
    min_delta: Annotated[float, Field(ge=0)] = 0.0


@config_dataclass()
class LoRASection:
    """Low-rank adapters via ``peft`` (optional dependency).

    Attributes:
        enabled: train adapters instead of all weights; the reference is the model with
            adapters disabled, so no second copy is loaded.
        r: adapter rank.
        alpha: adapter scaling numerator (scale ``alpha / r``).
        target_modules: module names to adapt (at least one), or ``all-linear``.

    There is no adapter dropout: the model stays in eval mode for the whole run, because the
    ratio of new to old logprobs must be exactly 1 before the first update.
    """

    enabled: bool = False
    r: Annotated[int, Field(ge=1)] = 16
    alpha: Annotated[int, Field(ge=1)] = 32
    target_modules: Annotated[tuple[str, ...], Field(min_length=1)] | Literal["all-linear"] = "all-linear"


@config_dataclass()
class CheckpointSection:
    """Checkpoints for exact resume.

    Attributes:
        every: optimiser-phase steps between checkpoints (SFT and GRPO steps alike); 0 saves
            one only at the end of each phase.
        keep: most recent checkpoints kept on disk.
        keep_when_done: a finished run keeps its resume state (``checkpoints/`` and
            ``sft_model/``), to be extended later with more ``grpo.steps``; by default only
            ``model/`` and the records stay.
    """

    every: Annotated[int, Field(ge=0)] = 0
    keep: Annotated[int, Field(ge=1)] = 2
    keep_when_done: bool = False


@config_dataclass()
class LoggingSection:
    """Where metrics go besides ``metrics.jsonl``.

    Attributes:
        tensorboard: also write TensorBoard event files to ``tensorboard/`` (needs ``tensorboard``).
        progress: show a live progress display in the terminal.
        plots: draw PNG plots of the metrics at the end (needs ``matplotlib``).
    """

    tensorboard: bool = True
    progress: bool = True
    plots: bool = True


@config_dataclass("training configuration")
class TrainConfig:
    """A complete training run: SFT warm start (optional), then GRPO.

    Attributes:
        env_id: the environment, e.g. ``agentgym/SQL-v0``.
        model: model reference for :func:`agentgym.models.load_model`; ``None`` is the default model.
        device: ``auto``, ``cpu``, ``mps``, ``cuda``, ``cuda:1``, ...
        dtype: ``auto`` (float32 weights) or a torch dtype name for the weights themselves
            (``bfloat16`` halves memory but loses small updates).
        autocast: ``bf16`` runs matrix products in bfloat16 over float32 master weights (rollouts,
            evaluation and training alike); ``off`` computes in the weights' dtype; ``auto`` is
            ``bf16`` on CUDA and on CPUs with AVX512-BF16 or AMX (where it about halves the time of a
            training step) and ``off`` elsewhere (emulated bf16 is many times slower than float32).
        ref_device: device of the frozen reference model (not ``auto``); ``None`` means ``device``.
        seed: the seed every random choice derives from.
        output_dir: the run folder (config, metrics, plots, checkpoints, report, model).
    """

    env_id: Annotated[str, Field(pattern=_NOT_BLANK)]
    model: str | None = None
    device: Annotated[str, Field(pattern=_DEVICE)] = "auto"
    dtype: str = "auto"
    autocast: Literal["auto", "bf16", "off"] = "auto"
    ref_device: Annotated[str, Field(pattern=_REF_DEVICE)] | None = None
    seed: Annotated[int, Field(ge=0)] = 0
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
        problems = _combination_problems(self)
        if problems:
            raise ConfigError.listing("training configuration", problems)


def _combination_problems(c: TrainConfig) -> list[str]:
    """The options the trainer cannot run with together (each option's own bounds are on its field)."""
    checks = [
        (
            c.ref_device is None or not c.lora.enabled,
            "ref_device does not apply with LoRA: the reference is the policy with its adapters off (leave ref_device out)",
        ),
        (
            c.grpo.old_logprobs != "sampling" or c.rollout.top_p == 1,
            "grpo.old_logprobs='sampling' needs rollout.top_p=1: top-p sampling logprobs are renormalised over "
            "the nucleus, so they are not the policy's logprobs (use 'recompute')",
        ),
        (
            c.grpo.old_logprobs != "sampling" or c.rollout.error_temperature is None,
            "grpo.old_logprobs='sampling' does not go with rollout.error_temperature: turns after a tool error are sampled "
            "at another temperature than the loss uses (use 'recompute')",
        ),
        (
            c.grpo.old_logprobs != "sampling" or not c.rollout.error_tool_exploration,
            "grpo.old_logprobs='sampling' does not go with rollout.error_tool_exploration: the tokens it gives have no "
            "sampling logprobs of the policy (use 'recompute')",
        ),
        (not c.grpo.sft_when_degenerate or c.grpo.sft_coef > 0, "grpo.sft_when_degenerate needs grpo.sft_coef above 0 (it takes the SFT term's step)"),
        (
            not c.grpo.train_on_env_tokens or c.grpo.old_logprobs == "recompute",
            "grpo.train_on_env_tokens needs grpo.old_logprobs='recompute' (there are no sampling logprobs for environment tokens)",
        ),
        (
            c.grpo.filter_degenerate or (c.grpo.resample_rounds == 0 and c.grpo.degenerate_by == "reward"),
            "grpo.resample_rounds and grpo.degenerate_by need grpo.filter_degenerate: true (they choose which groups it drops and how many are drawn)",
        ),
        (
            c.grpo.step_advantage_weight == 0 or not c.rollout.distinct_env_seeds,
            "grpo.step_advantage_weight does not go with rollout.distinct_env_seeds: members of a group with their own "
            "environment seeds never share a state, so there is no step-level group",
        ),
        (c.eval.patience is None or c.eval.every >= 1, "eval.patience needs eval.every >= 1 (early stopping compares periodic evaluations)"),
        (c.eval.enabled or c.eval.every == 0, "eval.every needs eval.enabled"),
        (c.grpo.steps > 0 or c.sft.steps > 0, "nothing to do: grpo.steps and sft.steps are both 0 (set one, e.g. agentgym train/sft --steps N)"),
    ]
    return [message for ok, message in checks if not ok]


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
        raise config_error(exc, TrainConfig, "training configuration") from None


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
