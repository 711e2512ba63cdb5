"""The reference trainer: an SFT warm start, then masked GRPO on an agentgym environment.

Read :func:`train` top to bottom, with its two phases :func:`_sft_phase` and :func:`_grpo_phase`;
they are the whole algorithm::

    evaluate the untouched model
    SFT:  for each step: a batch of demonstrations -> masked NLL -> AdamW step
    GRPO: for each step:
            rollouts: num_tasks tasks x group_size episodes, sampled by the policy itself
            rewards -> group-relative advantages (degenerate groups counted, optionally dropped)
            reference logprobs (frozen model) and old logprobs (see below), once per batch
            for each epoch, for each mini-batch: accumulate the masked GRPO loss over
                micro-batches (each divided by the mini-batch's normaliser), clip, AdamW step
            diagnostics, warnings, periodic evaluation with early stopping, checkpoint
    evaluate again, save the model, plot the metrics, write the report

Old logprobs: by default they are *recomputed* with the current policy before the update, with
the same forward pass over the same micro-batches as the first update's loss, so the ratio starts
at exactly 1. The sampler's own logprobs (``grpo.old_logprobs: sampling``) come from a
differently batched, left-padded, KV-cached pass whose float rounding differs; with top-p they
are of a renormalised distribution. When a batch gets a single optimiser step (one epoch, one
mini-batch) the policy has not moved when the loss is computed, so the old logprobs are the
loss's own logprobs, detached: no extra forward pass.

Everything random derives from ``config.seed`` and the step number (tasks, sampling seeds,
mini-batch order), so a run resumed from a checkpoint reproduces the uninterrupted run exactly.
"""

from __future__ import annotations

import copy
import math
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np
import torch

from agentgym.env import check_task_ids
from agentgym.models import DEFAULT_MODEL
from agentgym.models.loading import resolve_device
from agentgym.progress import ProgressReport
from agentgym.records import EpisodeRecord, TurnRecord
from agentgym.rollouts.batching import collate
from agentgym.rollouts.chat import NO_CALL_FORMAT, CallFormat, ChatRenderer, common_prefix_length
from agentgym.rollouts.episode import failed_a_call
from agentgym.rollouts.runner import Episode, RolloutConfig, run_rollouts
from agentgym.rollouts.settings import NO_EXPLORATION, settings_of
from agentgym.rollouts.trajectory import Trajectory
from agentgym.seeding import derive_seed, stream_rng
from agentgym.trainers.checkpoint import folder_bytes, latest_checkpoint, load_checkpoint_state, restore_checkpoint, save_checkpoint
from agentgym.trainers.config import GRPOSection, TrainConfig, config_to_dict, dump_config, load_config
from agentgym.trainers.credit import token_advantages
from agentgym.trainers.diagnostics import MetricsLogger, WarningMonitor, eval_summary, plot_metrics, read_metrics, rollout_metrics
from agentgym.trainers.grpo import filter_degenerate_groups, group_advantages, intact_groups, loss_normalizer, masked_grpo_loss
from agentgym.trainers.memory import bound_primitive_cache, peak_resident_mib, resident_mib, return_freed_memory
from agentgym.trainers.modeling import (
    Reference,
    TensorBatch,
    TrainerError,
    add_lora,
    autocast,
    backward_by_row,
    clip_and_step,
    is_lora,
    load_policy,
    make_optimizer,
    token_logprobs,
)
from agentgym.trainers.report import write_report
from agentgym.trainers.sampling import dynamic_sample, outcome_signal
from agentgym.trainers.sft import backward_nll, demonstration_records, demonstration_trajectories, nll_batch, sft_batch_indices, sft_update

if TYPE_CHECKING:
    from peft import PeftModel
    from rich.console import Console
    from transformers import PreTrainedModel

    from agentgym.env import MadeEnv

__all__ = ["RunState", "TrainResult", "grpo_update", "step_tasks", "train"]

# Independent random streams, all derived from config.seed.
_TASKS, _EVAL, _ROLLOUT, _SHUFFLE, _SFT, _LORA, _RESAMPLE, _SFT_TERM = range(1, 9)


@dataclass
class RunState:
    """Where a run is; saved in every checkpoint.

    Attributes:
        phase: ``sft``, ``grpo`` or ``done``.
        step: steps of ``phase`` completed.
        evaluations: evaluation summaries by label (``base``, ``sft``, ``grpo step N``, ``final``).
        best: ``{"label", "value"}`` of the best periodic evaluation (early stopping).
        evals_without_improvement: periodic evaluations since the best one.
        stopped_early: early stopping ended the GRPO phase.
        warnings: every warning raised so far.
        monitor: the warning monitor's state.
    """

    phase: str = "sft"
    step: int = 0
    evaluations: dict[str, dict[str, float]] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    evals_without_improvement: int = 0
    stopped_early: bool = False
    warnings: list[str] = field(default_factory=list)
    monitor: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` produced.

    Attributes:
        output_dir: the run folder.
        evaluations: evaluation summaries by label.
        report: the markdown report (also in ``report.md``).
        state: the final run state.
        folder_bytes: the size of the run folder at the end.
    """

    output_dir: Path
    evaluations: dict[str, dict[str, float]]
    report: str
    state: RunState
    folder_bytes: int


def train(config: TrainConfig, *, resume: bool | str | Path = False, overwrite: bool = False, console: Console | None = None) -> TrainResult:
    """Run (or resume) SFT then GRPO as ``config`` says; write everything to ``config.output_dir``.

    Args:
        config: the run.
        resume: ``True`` continues from the newest checkpoint in the output folder, a path from
            that checkpoint; the configuration must equal the saved one, except ``grpo.steps`` (to
            extend a run), ``logging``, ``checkpoint`` and ``output_dir``.
        overwrite: delete an earlier run in the output folder instead of refusing to start.
        console: where progress, evaluations and warnings are shown (default: stderr).

    Raises:
        TrainerError: on a folder that holds another run, a missing checkpoint, or a
            configuration the environment cannot satisfy.
    """
    from rich.console import Console

    console = console or Console(stderr=True)
    bound_primitive_cache()  # before the first bfloat16 product of the process
    run_dir = Path(config.output_dir)
    # ---- everything bad input can break happens before the run folder is touched (so a failed
    #      start leaves no half-made run and --overwrite deletes nothing): the tasks, the
    #      checkpoint to resume, the policy, the demonstrations
    train_ids, tools, max_turns = _env_facts(config, config.rollout.split)
    train_pool = _checked_tasks(config, config.rollout.split, train_ids, config.rollout.task_ids)
    eval_tasks = _eval_tasks(config)
    if config.ref_device is not None:
        resolve_device(config.ref_device)  # a device this machine lacks fails now, not after SFT
    checkpoint = _checkpoint_to_resume(run_dir, config, resume=resume, overwrite=overwrite)
    state = RunState(**load_checkpoint_state(checkpoint)) if checkpoint else RunState(phase="sft" if config.sft.steps else "grpo")
    # After SFT, the SFT result is the base (resuming GRPO loads it, then the checkpoint's weights).
    sft_dir = run_dir / "sft_model"
    base_model = str(sft_dir) if checkpoint and state.phase != "sft" and sft_dir.is_dir() else config.model
    records = _demonstrations(config, train_ids, train_pool) if state.phase == "sft" or config.grpo.sft_coef > 0 else []
    policy, tokenizer = _load(config, base_model)
    pad_id = _pad_id(tokenizer)
    renderer = ChatRenderer(tokenizer, tools=tools)
    demos = demonstration_trajectories(records, renderer)
    if checkpoint is None:
        _new_run_dir(run_dir)
    dump_config(config, run_dir / "config.yaml")
    # Dr. GRPO's constant: the most tokens a trajectory can sample.
    budget = config.rollout.max_new_tokens * max_turns
    if config.rollout.max_total_tokens is not None:
        budget = min(budget, config.rollout.max_total_tokens)

    monitor = WarningMonitor()
    if state.monitor:
        monitor.load_state_dict(state.monitor)
    logger = MetricsLogger(run_dir, tensorboard=config.logging.tensorboard, resume_at=_global_step(config, state) if checkpoint else None)
    notes = list(logger.notes)

    device = next(policy.parameters()).device
    with ProgressReport(console, enabled=config.logging.progress) as display, autocast(device, config.autocast):
        run = _Run(config, run_dir, state, policy, tokenizer, pad_id, eval_tasks, logger, monitor, display)
        del policy  # the run holds the model under training (SFT with LoRA replaces it)
        # ---- 1. the untouched model
        if config.eval.enabled and "base" not in state.evaluations:
            run.evaluate("base")
        # ---- 2. SFT warm start on demonstrations
        if state.phase == "sft":
            _sft_phase(run, demos, checkpoint, sft_dir)
        # ---- 3. GRPO
        if state.phase == "grpo" and config.grpo.steps > 0:
            _grpo_phase(run, train_pool, checkpoint, budget, demos, renderer.call_format)
        # ---- 4. final evaluation
        last = f"grpo step {state.step}"
        if state.phase == "grpo" and config.grpo.steps > 0 and config.eval.enabled:
            state.evaluations["final"] = state.evaluations[last] if last in state.evaluations else run.evaluate("final")
        state.phase = "done"
    logger.close()
    # ---- 5. the model, plots, report
    trained_on = [*(train_pool if config.grpo.steps else []), *(_sft_tasks(config, train_ids, train_pool) if config.sft.steps or config.grpo.sft_coef else [])]
    return _write_results(run, trained_on, notes, console)


# ---------------------------------------------------------------------------------- the phases


@dataclass
class _Run:
    """What the phases of a run share: the model under training, the run's state, and where it reports.

    Attributes:
        policy: the model under training (SFT with LoRA replaces it: see :func:`_finish_sft`).
        pad_id: the padding token id of every batch.
        eval_tasks: the fixed evaluation set.
    """

    config: TrainConfig
    run_dir: Path
    state: RunState
    policy: PreTrainedModel | PeftModel
    tokenizer: Any
    pad_id: int
    eval_tasks: list[str]
    logger: MetricsLogger
    monitor: WarningMonitor
    display: ProgressReport

    def evaluate(self, label: str) -> dict[str, float]:
        """Evaluate the policy on the evaluation set; record, log and show the summary under ``label``."""
        summary = _evaluate(self.policy, self.tokenizer, self.config, self.eval_tasks, self.display)
        self.state.evaluations[label] = summary
        self.logger.log("eval", _global_step(self.config, self.state), self.state.step, summary)
        self.display.message(f"eval ({label}): success {summary['episode/success_rate']:.3f}, reward {summary['reward/mean']:.3f}")
        return summary

    def checkpoint(self, optimizer: Any = None, scheduler: Any = None, *, weights: bool = True) -> None:
        """Save a checkpoint of where the run is (the weights unless ``weights`` is false)."""
        self.state.monitor = self.monitor.state_dict()
        model = self.policy if weights else None
        save_checkpoint(
            self.run_dir,
            _global_step(self.config, self.state),
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            state=asdict(self.state),
            keep=self.config.checkpoint.keep,
        )


def _sft_phase(run: _Run, demos: Sequence[Any], checkpoint: Path | None, sft_dir: Path) -> None:
    """The SFT warm start: ``sft.steps`` AdamW steps of masked NLL on batches of demonstrations,
    then the SFT model saved (the GRPO reference, and the base a resumed GRPO phase loads)."""
    config, state, sft = run.config, run.state, run.config.sft
    optimizer, scheduler = make_optimizer(run.policy, sft.optim, sft.steps)
    if checkpoint is not None:
        restore_checkpoint(checkpoint, model=run.policy, optimizer=optimizer, scheduler=scheduler)
    run.display.phase("SFT", sft.steps, state.step)
    while state.step < sft.steps:
        rows = sft_batch_indices(len(demos), sft.batch_size, derive_seed(config.seed, _SFT), state.step)
        batch = [demos[i] for i in rows]
        metrics = sft_update(run.policy, optimizer, scheduler, batch, sft, pad_token_id=run.pad_id, share_prefix=config.grpo.share_prefix)
        state.step += 1
        run.logger.log("sft", _global_step(config, state), state.step, metrics)
        run.display.advance("SFT", f"loss {metrics['sft/loss']:.3f}")
        if _due(state.step, config.checkpoint.every) and state.step < sft.steps:
            run.checkpoint(optimizer, scheduler)
    del optimizer, scheduler
    run.policy = _finish_sft(run.policy, run.tokenizer, config, sft_dir)
    if config.eval.enabled:
        run.evaluate("sft")
    state.phase, state.step = "grpo", 0
    run.checkpoint(weights=False)  # they are sft_model/'s, which a resumed GRPO phase loads


def _grpo_phase(run: _Run, train_pool: Sequence[str], checkpoint: Path | None, budget: int, demos: Sequence[Trajectory], call_format: CallFormat) -> None:
    """The GRPO phase: each step rolls out, computes advantages and updates the policy, then logs,
    warns, evaluates (early stopping) and checkpoints as configured.

    Args:
        budget: the most tokens a trajectory can sample (Dr. GRPO's constant).
        demos: the demonstrations of the SFT term (``grpo.sft_coef``), drawn per step as SFT draws them.
        call_format: the tool-call format's own tokens (``grpo.call_prefix_in_loss`` and ``grpo.call_closing_in_loss``).
    """
    config, state, g = run.config, run.state, run.config.grpo
    reference = Reference(run.policy, device=config.ref_device) if g.kl_coef > 0 else None
    batch_size = config.rollout.num_tasks * config.rollout.group_size
    updates_per_step = g.epochs * math.ceil(batch_size / (g.mini_batch_size or batch_size))
    optimizer, scheduler = make_optimizer(run.policy, config.optim, g.steps * updates_per_step)
    if checkpoint is not None and load_checkpoint_state(checkpoint)["phase"] == "grpo":
        restore_checkpoint(checkpoint, model=run.policy, optimizer=optimizer, scheduler=scheduler)
    run.display.phase("GRPO", g.steps, state.step)
    while state.step < g.steps and not state.stopped_early:
        # The process's peak so far before and after each stage: the stage that raised it is where
        # the memory went (before: loading, the last step's checkpoint, evaluations). What it
        # holds as the step starts, after the last one freed what it could: if that grows step
        # after step, something stays.
        peaks = {"memory/resident_mib_before": resident_mib(), "memory/peak_mib_before": peak_resident_mib()}
        started = time.perf_counter()
        # Rollouts: the policy samples group_size episodes of each of this step's tasks
        # (with resample_rounds, more rounds of fresh tasks while groups lack a signal).
        play = partial(_play_round, _backend(run.policy, run.tokenizer, config), config, train_pool, state.step, run.display)
        if g.resample_rounds:
            episodes, drawn, sampling = dynamic_sample(
                play, extra_rounds=g.resample_rounds, num_groups=config.rollout.num_tasks, group_size=config.rollout.group_size, by=g.degenerate_by
            )
        else:
            episodes = drawn = play(0)
            sampling = {}
        peaks["memory/peak_mib_rollout"] = peak_resident_mib()
        rolled_out = time.perf_counter()
        # Rewards -> advantages -> several epochs of clipped updates.
        update = grpo_update(
            run.policy,
            reference,
            optimizer,
            scheduler,
            episodes,
            g,
            group_size=config.rollout.group_size,
            temperature=config.rollout.temperature,
            pad_token_id=run.pad_id,
            max_len=budget,
            max_grad_norm=config.optim.max_grad_norm,
            shuffle_seed=derive_seed(config.seed, _SHUFFLE, state.step),
            demonstrations=_sft_term_batch(demos, config, state.step),
            sft_max_length=config.sft.max_length,
            call_format=call_format,
        )
        _advance_schedule(scheduler, updates_per_step - int(update["optim/updates"]))
        state.step += 1
        peaks["memory/peak_mib_update"] = peak_resident_mib()
        seconds = {"time/rollout_s": rolled_out - started, "time/update_s": time.perf_counter() - rolled_out}
        metrics = {**rollout_metrics(drawn), **sampling, **update, **peaks, **seconds}
        run.logger.log("grpo", _global_step(config, state), state.step, metrics)
        for warning in run.monitor.update(state.step, metrics):
            state.warnings.append(warning)
            run.display.message(f"[yellow]warning[/]: {warning}")
        kl = f" kl {metrics['policy/kl']:.4f}" if "policy/kl" in metrics else ""
        run.display.advance("GRPO", f"reward {metrics['reward/mean']:.3f} success {metrics['episode/success_rate']:.2f}{kl}")
        if _due(state.step, config.eval.every):
            _early_stopping(state, config, run.evaluate(f"grpo step {state.step}"), f"grpo step {state.step}")
        if _due(state.step, config.checkpoint.every) or state.step == g.steps or state.stopped_early:
            run.checkpoint(optimizer, scheduler)


def _sft_term_batch(demos: Sequence[Trajectory], config: TrainConfig, step: int) -> list[Trajectory]:
    """GRPO step ``step``'s demonstrations for the SFT term; none without one."""
    if config.grpo.sft_coef == 0:
        return []
    if not demos:
        raise TrainerError("grpo.sft_coef needs demonstrations, and none was built (see sft.source and sft.task_ids)")
    return [demos[i] for i in sft_batch_indices(len(demos), config.sft.batch_size, derive_seed(config.seed, _SFT_TERM), step)]


def _due(step: int, every: int) -> bool:
    """Whether a periodic action (every ``every`` steps; 0: never) falls on ``step``."""
    return every > 0 and step % every == 0


def _write_results(run: _Run, trained_on: Sequence[str], notes: list[str], console: Console) -> TrainResult:
    """The finished run's folder: the model, the resume state dropped (unless kept), plots and the report."""
    config, state, run_dir = run.config, run.state, run.run_dir
    _export(run.policy, run.tokenizer, run_dir / "model")
    if not config.checkpoint.keep_when_done:
        # Done: the run is never resumed, so its resume state goes (weights and optimiser moments
        # are ~4x the model; sft_model/ another 1x); model/ is the result.
        for resume_state in ("checkpoints", "sft_model"):
            shutil.rmtree(run_dir / resume_state, ignore_errors=True)
    plots, note = plot_metrics(run_dir / "metrics.jsonl", run_dir / "plots") if config.logging.plots else ([], None)
    if note:
        notes.append(note)
    grpo_steps = [row for row in read_metrics(run_dir / "metrics.jsonl") if row["phase"] == "grpo"]
    report = write_report(
        run_dir / "report.md",
        config,
        state.evaluations,
        warnings=state.warnings,
        notes=notes,
        plots=plots,
        best=state.best,
        stopped_early=state.stopped_early,
        eval_tasks=run.eval_tasks,
        trained_on=trained_on,
        grpo_steps=grpo_steps,
    )
    size, model_size = folder_bytes(run_dir), folder_bytes(run_dir / "model")
    console.print(f"run folder {run_dir}: {size / 2**20:.0f} MiB (model/ {model_size / 2**20:.0f} MiB)")
    return TrainResult(output_dir=run_dir, evaluations=dict(state.evaluations), report=report, state=state, folder_bytes=size)


# --------------------------------------------------------------------------------- the update


class _ForwardOptions(TypedDict):
    """The options every logprob pass of an update shares (:func:`token_logprobs`, :meth:`Reference.logprobs`)."""

    temperature: float
    share_prefix: bool


def grpo_update(
    policy: torch.nn.Module,
    reference: Reference | None,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    episodes: Sequence[Episode],
    g: GRPOSection,
    *,
    group_size: int,
    temperature: float,
    pad_token_id: int,
    max_len: int,
    max_grad_norm: float | None,
    shuffle_seed: int,
    demonstrations: Sequence[Trajectory] = (),
    sft_max_length: int | None = None,
    call_format: CallFormat = NO_CALL_FORMAT,
) -> dict[str, float]:
    """The GRPO update on one rollout batch: advantages, then ``g.epochs`` passes of mini-batch steps.

    With ``g.sft_coef > 0``, every optimiser step also back-propagates ``g.sft_coef`` times the
    masked NLL per loss token of ``demonstrations`` (cut to ``sft_max_length``), accumulated into
    the same gradients before clipping.

    ``call_format`` is the tool-call format's own tokens: the prefix every call begins with and
    each tool's closing, which ``g.call_prefix_in_loss`` and ``g.call_closing_in_loss`` keep out of
    the loss where the advantage is not above 0.

    ``episodes`` are ordered by group (``group_size`` consecutive episodes share a task), as
    :func:`agentgym.rollouts.runner.run_rollouts` returns them. A group with an episode the machinery failed
    under (``stop_reason == "infra_error"``) is left out whole (:func:`intact_groups`).

    Returns:
        Metrics: ``loss/total`` and ``loss/pg`` (per optimiser step), ``policy/kl``,
        ``policy/entropy``, ``policy/clip_frac`` (lower and upper clip together),
        ``policy/ratio_mean`` (token means over every forward pass), ``optim/grad_norm`` (mean
        before clipping), ``optim/lr``, ``optim/updates``, ``batch/trajectories`` (after filtering),
        ``batch/loss_tokens``, ``groups/degenerate``, ``groups/infra_dropped`` (groups left out for an
        infra error) and ``advantage/abs_mean`` (over loss tokens with step-level credit, which
        adds ``advantage/step_groups`` and ``advantage/grouped_turn_fraction``); with the SFT term,
        ``loss/sft`` (the demonstrations' NLL per loss token, before the weight).
    """
    device = next(policy.parameters()).device
    intact = intact_groups([e.infra_error for e in episodes], group_size)
    dropped = {"groups/infra_dropped": float((len(episodes) - len(intact)) // group_size)}
    sft_term = nll_batch(demonstrations, pad_token_id=pad_token_id, max_length=sft_max_length, device=device) if g.sft_coef and demonstrations else None

    def without_groups(metrics: dict[str, float]) -> dict[str, float]:
        """A step with no group to learn from: no update (the schedule does not advance either), or
        with ``g.sft_when_degenerate`` one step on the SFT term alone."""
        if not (g.sft_when_degenerate and sft_term is not None):
            return {**metrics, "optim/updates": 0.0}
        nll = backward_nll(policy, sft_term, g.micro_batch_size, weight=g.sft_coef, share_prefix=g.share_prefix)
        stats = clip_and_step(policy, optimizer, scheduler, max_grad_norm)
        return {
            **metrics,
            "loss/sft": nll,
            "loss/total": g.sft_coef * nll,
            "optim/grad_norm": stats["grad_norm"],
            "optim/lr": stats["lr"],
            "optim/updates": 1.0,
        }

    if len(intact) == 0:  # nothing the model's rewards say
        return without_groups({**dropped, "groups/degenerate": 0.0, "batch/trajectories": 0.0})
    episodes = [episodes[int(i)] for i in intact]
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    advantages, adv_stats = group_advantages(rewards, group_size, scale_by_std=g.scale_by_std)
    keep = filter_degenerate_groups(outcome_signal(episodes, g.degenerate_by), group_size) if g.filter_degenerate else torch.arange(len(episodes))
    metrics: dict[str, float] = {**dropped, "groups/degenerate": adv_stats["degenerate_groups"], "batch/trajectories": float(len(keep))}
    if len(keep) == 0:  # nothing to learn from
        return without_groups(metrics)
    kept = [episodes[int(i)] for i in keep]
    advantages = advantages[keep].to(device)
    batch = TensorBatch.from_tokens(collate([e.trajectory for e in kept], pad_token_id=pad_token_id), device)
    if g.train_on_env_tokens:  # the ablation: every token after the prompt, as an unmasked trainer does
        after_prompt = (
            torch.arange(batch.input_ids.shape[1], device=device)[None, :] >= torch.tensor([e.trajectory.prompt_length for e in kept], device=device)[:, None]
        )
        batch = replace(batch, loss_mask=batch.attention_mask.bool() & after_prompt)
    if g.mask_truncated:
        cut = torch.tensor([e.stop_reason == "token_budget" for e in kept], device=device)
        batch = replace(batch, loss_mask=batch.loss_mask & ~cut[:, None])
    if g.step_advantage_weight > 0:  # GiGPO: each turn's tokens get A_i + w * A^S of their turn
        advantages, step_stats = token_advantages(
            kept, advantages, group_size, batch.input_ids.shape[1], weight=g.step_advantage_weight, gamma=g.step_discount, scale_by_std=g.scale_by_std
        )
        metrics.update({f"advantage/{k}": v for k, v in step_stats.items()})
    # Rows' advantages ([B]) or tokens' ([B, T]) as [B, 1] or [B, T], for the token masks below.
    per_token = advantages[:, None] if advantages.dim() == 1 else advantages
    width = batch.input_ids.shape[1]
    if g.openings_in_loss == "when_better":  # given tokens stay in the loss only where they did better than their group
        batch = replace(batch, loss_mask=batch.loss_mask & ~(opening_mask(kept, width).to(device) & (per_token <= 0)))
    if g.format_errors_in_loss == "when_worse":  # a malformed call is pushed down where its episode did worse, never reinforced
        batch = replace(batch, loss_mask=batch.loss_mask & ~(format_error_mask(kept, width).to(device) & (per_token >= 0)))
    if g.call_prefix_in_loss == "when_better":  # the call format's tokens are never pushed down, only what follows them
        batch = replace(batch, loss_mask=batch.loss_mask & ~(call_prefix_mask(kept, width, call_format.prefix).to(device) & (per_token <= 0)))
    if g.call_closing_in_loss == "when_better":  # nor the tokens after a call's arguments, which its arguments decided
        batch = replace(batch, loss_mask=batch.loss_mask & ~(call_closing_mask(kept, width, call_format.closings).to(device) & (per_token <= 0)))
    if g.after_error_in_loss == "when_better":  # after a failed call, only what did better is trained
        batch = replace(batch, loss_mask=batch.loss_mask & ~(after_error_mask(kept, width).to(device) & (per_token <= 0)))
    metrics["batch/loss_tokens"] = float(batch.loss_mask.sum())
    metrics["advantage/abs_mean"] = float(advantages.abs().mean() if advantages.dim() == 1 else advantages.abs()[batch.loss_mask].mean())

    plan = _minibatches(len(kept), group_size, g, shuffle_seed)
    micro = g.micro_batch_size
    forward: _ForwardOptions = {"temperature": temperature, "share_prefix": g.share_prefix}
    # Reference and old logprobs are computed over the first epoch's micro-batches, the very
    # batches (same rows, same padded width) the first update's loss sees, so its ratio is exactly 1.
    first_micro = [rows[start : start + micro] for rows in plan[0] for start in range(0, len(rows), micro)]
    ref_logprobs = None if reference is None else _stitched(lambda b: reference.logprobs(b, **forward), batch, first_micro)
    if g.old_logprobs == "sampling":
        old_logprobs: torch.Tensor | None = batch.logprobs
    elif sum(len(epoch) for epoch in plan) == 1:
        old_logprobs = None  # a single update: the loss's own logprobs, detached, are the old ones
    else:
        with torch.no_grad():
            old_logprobs = _stitched(lambda b: token_logprobs(policy, b, **forward)[0], batch, first_micro)

    sums: dict[str, float] = {}
    weights: dict[str, float] = {}

    def add(key: str, value: float, weight: float) -> None:
        if weight > 0 and not math.isnan(value):
            sums[key] = sums.get(key, 0.0) + value * weight
            weights[key] = weights.get(key, 0.0) + weight

    for epoch in plan:
        for rows in epoch:
            normalizer = max(loss_normalizer(batch.loss_mask[rows], g.loss_agg), 1)
            step_loss = step_pg = 0.0
            for start in range(0, len(rows), micro):
                index = rows[start : start + micro]
                sub = batch.rows(index)
                width = sub.input_ids.shape[1]
                loss_of = partial(
                    _grpo_loss,
                    old=None if old_logprobs is None else old_logprobs[index, :width],
                    ref=None if ref_logprobs is None else ref_logprobs[index, :width],
                    advantages=advantages[index] if advantages.dim() == 1 else advantages[index, :width],
                    loss_mask=sub.loss_mask,
                    g=g,
                    normalizer=normalizer,
                    max_len=max_len,
                )
                # The loss is a sum over rows: each row's term is back-propagated right after its forward pass.
                logprobs, entropy = backward_by_row(policy, sub, partial(_row_loss, loss_of), **forward, with_entropy=True)
                with torch.no_grad():
                    _, m = loss_of(logprobs, slice(None))
                step_loss += m["loss"]
                step_pg += m["pg_loss"]
                tokens = m["num_tokens"]
                add("policy/kl", m.get("kl", float("nan")), tokens)
                add("policy/clip_frac", m["clip_frac_low"] + m["clip_frac_high"], tokens)
                add("policy/ratio_mean", m["ratio_mean"], tokens)
                add("policy/entropy", float(entropy.sum()) / max(tokens, 1), tokens)
            if sft_term is not None:
                nll = backward_nll(policy, sft_term, micro, weight=g.sft_coef, share_prefix=g.share_prefix)
                step_loss += g.sft_coef * nll
                add("loss/sft", nll, 1)
            stats = clip_and_step(policy, optimizer, scheduler, max_grad_norm)
            add("loss/total", step_loss, 1)
            add("loss/pg", step_pg, 1)
            add("optim/grad_norm", stats["grad_norm"], 1)
            metrics["optim/lr"] = stats["lr"]
    metrics["optim/updates"] = float(sum(len(epoch) for epoch in plan))
    metrics.update({k: sums[k] / weights[k] for k in sums})
    return metrics


def opening_mask(episodes: Sequence[Episode], width: int) -> torch.Tensor:
    """``[episodes, width]`` booleans: the positions of the tokens ``rollout.error_tool_exploration``
    gave each episode (the first ``opening_tokens`` of a turn's sampled segment)."""
    return _sampled_mask(episodes, width, lambda _, turn: [(0, turn.get("opening_tokens", 0))])


def format_error_mask(episodes: Sequence[Episode], width: int) -> torch.Tensor:
    """``[episodes, width]`` booleans: the positions of the sampled tokens of every turn in which
    the environment found a malformed call (its step's ``turn_format_errors`` above 0)."""
    return _sampled_mask(episodes, width, lambda _, turn: [(0, len(turn["sampled_ids"]))] if turn["info"].get("turn_format_errors", 0) else [])


def call_prefix_mask(episodes: Sequence[Episode], width: int, prefix: Sequence[int]) -> torch.Tensor:
    """``[episodes, width]`` booleans: the leading tokens of every turn's sampled segment that
    match ``prefix`` (the tokens every tool call begins with), as far as they match."""
    prefix = tuple(prefix)
    return _sampled_mask(episodes, width, lambda _, turn: [(0, common_prefix_length(turn["sampled_ids"], prefix))])


def call_closing_mask(episodes: Sequence[Episode], width: int, closings: Sequence[Sequence[int]]) -> torch.Tensor:
    """``[episodes, width]`` booleans: wherever a turn's sampled tokens hold one of ``closings``
    (the tokens that close a call to a tool after its arguments), those tokens."""
    return _sampled_mask(episodes, width, lambda _, turn: _occurrences(turn["sampled_ids"], closings))


def after_error_mask(episodes: Sequence[Episode], width: int) -> torch.Tensor:
    """``[episodes, width]`` booleans: the positions of the sampled tokens of every turn whose
    previous step had a failed tool call (:func:`agentgym.rollouts.episode.failed_a_call`)."""

    def spans(episode: Episode, turn: TurnRecord) -> list[tuple[int, int]]:
        index = turn["turn"]
        return [(0, len(turn["sampled_ids"]))] if index > 0 and failed_a_call(episode.turns[index - 1]) else []

    return _sampled_mask(episodes, width, spans)


def _occurrences(ids: Sequence[int], patterns: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """The ``(start, stop)`` spans of ``ids`` that equal one of ``patterns`` (non-empty ones)."""
    ids = tuple(ids)
    return [(start, start + len(p)) for p in map(tuple, patterns) if p for start in range(len(ids) - len(p) + 1) if ids[start : start + len(p)] == p]


def _sampled_mask(episodes: Sequence[Episode], width: int, spans: Callable[[Episode, TurnRecord], Sequence[tuple[int, int]]]) -> torch.Tensor:
    """Marks the ``spans(episode, turn)`` (``(start, stop)`` within the turn's sampled tokens) of every turn's sampled segment."""
    mask = torch.zeros(len(episodes), width, dtype=torch.bool)
    for row, episode in enumerate(episodes):
        for segment in episode.trajectory.segments:
            if segment.kind == "sampled":
                end = min(segment.start + len(segment.token_ids), width)
                for start, stop in spans(episode, episode.turns[segment.turn]):
                    mask[row, segment.start + start : min(segment.start + stop, end)] = True
    return mask


def _grpo_loss(
    logprobs: torch.Tensor,
    rows: slice,
    *,
    old: torch.Tensor | None,
    ref: torch.Tensor | None,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    g: GRPOSection,
    normalizer: int,
    max_len: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of ``rows`` of a micro-batch and its metrics; ``old=None``: the logprobs themselves, detached."""
    return masked_grpo_loss(
        logprobs,
        logprobs.detach() if old is None else old[rows],
        None if ref is None else ref[rows],
        advantages[rows],
        loss_mask[rows],
        clip_eps=g.clip_eps,
        clip_eps_high=g.clip_eps_high,
        kl_coef=g.kl_coef,
        loss_agg=g.loss_agg,
        normalizer=normalizer,
        **({"max_len": max_len} if g.loss_agg == "seq-mean-token-sum-norm" else {}),
    )


def _row_loss(loss_of: Any, r: int, logprobs: torch.Tensor) -> torch.Tensor:
    """Row ``r``'s term of a micro-batch loss, from its ``[1, L]`` logprobs."""
    return loss_of(logprobs, slice(r, r + 1))[0]


def _minibatches(num_rows: int, group_size: int, g: GRPOSection, seed: int) -> list[list[torch.Tensor]]:
    """Per epoch, the row indices of each mini-batch: whole groups in a seeded order, then cut."""
    groups = num_rows // group_size
    size = g.mini_batch_size or num_rows
    rng = np.random.default_rng(seed)
    plan = []
    for _ in range(g.epochs):
        order = rng.permutation(groups)
        rows = torch.tensor([int(k) * group_size + m for k in order for m in range(group_size)])
        plan.append([rows[i : i + size] for i in range(0, num_rows, size)])
    return plan


def _advance_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler, skipped: int) -> None:
    """Updates dropped with degenerate groups keep their place in the learning-rate schedule, so
    the schedule stays aligned with GRPO steps and ends where it was planned to."""
    with warnings.catch_warnings():
        # torch warns when the schedule moves before the first optimiser step; here that is intended.
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(skipped):
            scheduler.step()


def _stitched(fn: Any, batch: TensorBatch, micro_batches: Sequence[torch.Tensor]) -> torch.Tensor:
    """``fn`` over the rows of each micro-batch of ``batch``, stitched back to ``[B, L]``."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
    for index in micro_batches:
        part = fn(batch.rows(index))
        out[index, : part.shape[1]] = part
    return out


# ------------------------------------------------------------------------------ run plumbing


def step_tasks(pool: Sequence[str], num_tasks: int, seed: int, step: int) -> list[str]:
    """The tasks of GRPO step ``step``: passes over ``pool``, each in a fresh seeded order."""
    out = []
    for k in range(step * num_tasks, (step + 1) * num_tasks):
        epoch, position = divmod(k, len(pool))
        order = stream_rng(seed, epoch).permutation(len(pool))
        out.append(pool[int(order[position])])
    return out


def _play_round(backend: Any, config: TrainConfig, pool: Sequence[str], step: int, display: ProgressReport, round_: int) -> list[Episode]:
    """Round ``round_`` of GRPO step ``step``'s rollouts: round 0 is the step's own tasks; the
    extra rounds of dynamic sampling draw theirs from a stream of their own, so later steps' tasks
    and seeds stay what they are without it."""
    num_tasks, seed = config.rollout.num_tasks, config.seed
    if round_ == 0:
        tasks, rollout_seed = step_tasks(pool, num_tasks, derive_seed(seed, _TASKS), step), derive_seed(seed, _ROLLOUT, step)
    else:
        tasks, rollout_seed = step_tasks(pool, num_tasks, derive_seed(seed, _RESAMPLE, step), round_ - 1), derive_seed(seed, _ROLLOUT, step, round_)
    episodes = run_rollouts(backend, rollout_config(config, tasks, seed=rollout_seed), progress=display.episodes("rollouts"))
    # The update needs the memory the rollouts' key/value buffers hold (the next round starts from
    # an empty cache anyway): the whole batch's, as large as the weights, kept until the next step.
    # The trainer's own backend holds them (_backend); a backend given in its place may hold none.
    from agentgym.models.hf import HFBackend

    if isinstance(backend, HFBackend):
        backend.clear_cache()
    return_freed_memory()
    return episodes


def rollout_config(config: TrainConfig, task_ids: Sequence[str], *, seed: int, evaluation: bool = False) -> RolloutConfig:
    """The episodes the trainer plays for ``task_ids``: training rollouts (``rollout`` section) or
    evaluation episodes (``eval`` split, samples, temperature; no error temperature, one
    environment seed per group).

    Every field the ``rollout`` section shares with :class:`RolloutConfig` (all the rollout
    settings, the split, group size and environment options) is taken by name, so a setting added
    to :class:`agentgym.rollouts.settings.RolloutSettings` reaches the rollouts with no edit here.
    """
    r, e = config.rollout, config.eval
    played: dict[str, Any] = {"env_id": config.env_id, "task_ids": tuple(task_ids), "seed": seed, "env_kwargs": dict(r.env_kwargs)}
    if evaluation:
        played.update(split=e.split, group_size=e.samples, temperature=e.temperature, distinct_env_seeds=False, **NO_EXPLORATION)
    temperature = played.get("temperature", r.temperature)
    played["top_p"] = r.top_p if temperature > 0 else 1.0
    return RolloutConfig(**{**settings_of(r, RolloutConfig), **played})


def _backend(policy: PreTrainedModel | PeftModel, tokenizer: Any, config: TrainConfig) -> Any:
    from agentgym.models.hf import HFBackend

    budget = config.rollout.max_cache_mib
    # A PeftModel forwards what the backend uses of a PreTrainedModel to the model it wraps.
    return HFBackend(
        cast("PreTrainedModel", policy), tokenizer, name=f"hf:{config.model or DEFAULT_MODEL}", max_cache_gib=None if budget is None else budget / 1024
    )


def _evaluate(policy: PreTrainedModel | PeftModel, tokenizer: Any, config: TrainConfig, tasks: Sequence[str], display: ProgressReport) -> dict[str, float]:
    """``eval.samples`` episodes per evaluation task, same seeds every time, so only the model changes."""
    rollout = rollout_config(config, tasks, seed=derive_seed(config.seed, _EVAL), evaluation=True)
    return eval_summary(run_rollouts(_backend(policy, tokenizer, config), rollout, progress=display.episodes("eval")))


def _early_stopping(state: RunState, config: TrainConfig, summary: dict[str, float], label: str) -> None:
    """Track the best periodic evaluation; stop after ``patience`` evaluations without improvement."""
    key = "episode/success_rate" if config.eval.metric == "success_rate" else "reward/mean"
    value = summary[key]
    if state.best is None or value > state.best["value"] + config.eval.min_delta:
        state.best = {"label": label, "value": value}
        state.evals_without_improvement = 0
    else:
        state.evals_without_improvement += 1
        if config.eval.patience is not None and state.evals_without_improvement >= config.eval.patience:
            state.stopped_early = True


def _global_step(config: TrainConfig, state: RunState) -> int:
    """SFT steps, then GRPO steps, as one axis (the metrics' ``t``)."""
    return state.step if state.phase == "sft" else config.sft.steps + state.step


def _load(config: TrainConfig, source: str | None) -> tuple[PreTrainedModel | PeftModel, Any]:
    """The policy from ``source`` (LoRA adapters initialised from the run's seed)."""
    with _seeded_torch(config):
        return load_policy(source, device=config.device, dtype=config.dtype, lora=config.lora)


@contextmanager
def _seeded_torch(config: TrainConfig) -> Iterator[None]:
    """peft draws adapter initialisations from torch's global generator: fork it and seed the fork
    from the run's seed, so adapters are reproducible and nobody else's random state moves."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(config.seed, _LORA))
        yield


def _finish_sft(policy: PreTrainedModel | PeftModel, tokenizer: Any, config: TrainConfig, sft_dir: Path) -> PreTrainedModel | PeftModel:
    """Save the SFT result (the GRPO reference, and the base a resumed GRPO phase loads).

    With LoRA the SFT adapters are merged into the weights and fresh adapters are added, so the
    reference (adapters off) is the SFT model, not the original one.
    """
    _export(policy, tokenizer, sft_dir)
    if not is_lora(policy):
        return policy
    merged = policy.merge_and_unload()
    with _seeded_torch(config):
        return add_lora(merged, config.lora).eval()


def _export(policy: PreTrainedModel | PeftModel, tokenizer: Any, path: Path) -> None:
    """Save a loadable model folder (``--model PATH``); LoRA adapters are merged into a copy."""
    model = copy.deepcopy(policy).merge_and_unload() if is_lora(policy) else policy
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path)  # type: ignore[arg-type]  # peft annotates save_directory as str; it takes any path, as transformers does
    tokenizer.save_pretrained(path)


def _pad_id(tokenizer: Any) -> int:
    """Any id works for padding (never attended to, never trained on); prefer the tokenizer's own."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def _make_env(config: TrainConfig, split: str) -> MadeEnv:
    from agentgym.envs import make_env

    extra = {} if config.rollout.max_turns is None else {"max_turns": config.rollout.max_turns}
    try:
        return make_env(config.env_id, split=split, **config.rollout.env_kwargs, **extra)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None


def _env_facts(config: TrainConfig, split: str) -> tuple[list[str], list[dict[str, Any]], int]:
    """Task ids of ``split``, tool schemas and the turn limit of the environment."""
    env = _make_env(config, split)
    try:
        return list(env.unwrapped.task_ids), list(env.unwrapped.tools), int(env.unwrapped.max_turns)
    finally:
        env.close()


def _checked_tasks(config: TrainConfig, split: str, available: Sequence[str], task_ids: Sequence[str] | None) -> list[str]:
    """``task_ids`` checked against the tasks of ``split``, or all of them."""
    if task_ids is None:
        return list(available)
    try:
        return check_task_ids(task_ids, available, source=f"{config.env_id} ({split})")
    except ValueError as exc:
        raise TrainerError(str(exc)) from None


def _demonstrations(config: TrainConfig, available: Sequence[str], train_pool: Sequence[str]) -> list[EpisodeRecord]:
    """The SFT demonstration records (see :func:`agentgym.trainers.sft.demonstration_records`)."""
    r = config.rollout
    env_kwargs = r.env_kwargs if config.sft.env_kwargs is None else config.sft.env_kwargs
    return demonstration_records(
        config.env_id, config.sft, _sft_tasks(config, available, train_pool), split=r.split, seed=config.seed, max_turns=r.max_turns, env_kwargs=env_kwargs
    )


def _eval_tasks(config: TrainConfig) -> list[str]:
    """The fixed evaluation set: ``eval.task_ids``, or ``eval.num_tasks`` of the split in a seeded order."""
    split = config.eval.split
    pool = _checked_tasks(config, split, _env_facts(config, split)[0], config.eval.task_ids)
    if config.eval.task_ids is not None:
        return pool
    order = np.random.default_rng(derive_seed(config.seed, _EVAL)).permutation(len(pool))
    return [pool[int(i)] for i in order[: config.eval.num_tasks]]


def _sft_tasks(config: TrainConfig, available: Sequence[str], train_pool: Sequence[str]) -> list[str]:
    """The demonstrated tasks: ``sft.task_ids`` or the rollout pool, at most ``sft.num_tasks`` of them."""
    pool = _checked_tasks(config, config.rollout.split, available, config.sft.task_ids) if config.sft.task_ids else list(train_pool)
    if config.sft.num_tasks is None or config.sft.num_tasks >= len(pool):
        return pool
    order = np.random.default_rng(derive_seed(config.seed, _SFT, 0)).permutation(len(pool))
    return [pool[int(i)] for i in order[: config.sft.num_tasks]]


# What may change when a run is resumed: its length and where its output goes.
_RESUMABLE_CHANGES = ("grpo.steps", "logging.", "checkpoint.", "output_dir")

_RUN_FILES = ("config.yaml", "metrics.jsonl", "report.md", "checkpoints", "tensorboard", "plots", "model", "sft_model")


def _checkpoint_to_resume(run_dir: Path, config: TrainConfig, *, resume: bool | str | Path, overwrite: bool) -> Path | None:
    """Check the folder against the request (reading only); return the checkpoint to resume from, if any."""
    if resume:
        checkpoint = latest_checkpoint(run_dir) if resume is True else Path(resume)
        if checkpoint is None or not (checkpoint / "state.json").is_file():
            finished = " (a finished run keeps its checkpoints only with checkpoint.keep_when_done)" if (run_dir / "model").is_dir() else ""
            raise TrainerError(f"no checkpoint to resume from in {run_dir if resume is True else resume}{finished}")
        saved_file = run_dir / "config.yaml"
        if saved_file.is_file():
            saved, now = _flat(config_to_dict(load_config(saved_file))), _flat(config_to_dict(config))
            changed = sorted(k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k) and not k.startswith(_RESUMABLE_CHANGES))
            if changed:
                raise TrainerError(f"cannot resume with a different configuration; changed: {', '.join(changed)}")
        return checkpoint
    if run_dir.exists() and any((run_dir / name).exists() for name in _RUN_FILES) and not overwrite:
        raise TrainerError(
            f"{run_dir} already holds a run; resume it, overwrite it, or choose another output folder (agentgym train: --resume, --overwrite, --output)"
        )
    return None


def _new_run_dir(run_dir: Path) -> None:
    """The run folder, emptied of an earlier run's files (the caller checked that overwriting is wanted)."""
    for name in _RUN_FILES:
        target = run_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "env_kwargs":
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
