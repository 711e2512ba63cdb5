"""The policy model as the trainers use it: loading (with optional LoRA), per-token logprobs and
entropy from one forward pass, the frozen reference, and AdamW with its schedule.

Conventions (those of :func:`agentgym.models.collate`): ``logprobs[b, i]`` and ``loss_mask[b, i]``
belong to token ``input_ids[b, i]``, predicted by the logits at position ``i - 1``.

Shared prefix: the trajectories of a GRPO group start with the same prompt, and in most
environments every task starts with the same system prompt and tool list, which is usually most
of the sequence. :func:`token_logprobs` runs the tokens that every row of a micro-batch shares
once (batch size 1), then runs each row's own tokens alone on top of the resulting key/value
cache. The result and its gradient are those of the plain forward pass, up to float rounding:
the cache tensors stay in the autograd graph, so the gradient flowing into the shared positions
is summed over the rows exactly as the plain pass would sum it.

Memory: the trainers' updates go through :func:`backward_by_row`, which back-propagates each
row's loss right after its forward pass, running the row's decoder layers again one at a time in
its backward (one layer's activations exist at a time, :data:`RECOMPUTE_ROW_LAYERS`), and the
output layer runs :data:`LOGPROB_CHUNK_TOKENS` loss positions at a time.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, cast, overload

import torch
from torch.utils.checkpoint import checkpoint

from agentgym.models import DEFAULT_MODEL, load_model
from agentgym.models.engine import cache_keyword
from agentgym.rollouts.batching import TokenBatch
from agentgym.trainers.memory import MappedFile, optimizer_state_folder, return_freed_memory

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from agentgym.trainers.config import LoRASection, OptimSection

__all__ = [
    "BACKWARD_BY_ROW",
    "LOGPROB_CHUNK_TOKENS",
    "MIN_SHARED_PREFIX",
    "RECOMPUTE_ROW_LAYERS",
    "ROW_LENGTH_MULTIPLE",
    "TRIM_BETWEEN_ROWS",
    "OffloadedAdamW",
    "Reference",
    "TensorBatch",
    "TrainerError",
    "add_lora",
    "autocast",
    "backward_by_row",
    "clip_and_step",
    "cpu_has_native_bf16",
    "is_lora",
    "load_policy",
    "make_optimizer",
    "shared_prefix_length",
    "token_logprobs",
    "trainable_parameters",
]

MIN_SHARED_PREFIX = 16
"""Shorter common prefixes are not worth a separate forward pass."""

BACKWARD_BY_ROW = True
""":func:`backward_by_row` back-propagates each row right after its forward pass; ``False``: the
whole micro-batch's loss at once, after every row's forward pass (the path before, which holds
every row's activations at once; ``benchmarks/bench_memory.py --paths old`` measures it)."""

RECOMPUTE_ROW_LAYERS = True
""":func:`backward_by_row` runs a row's pass without a graph, keeping only each decoder layer's
input, and in the row's backward runs the layers again one at a time, last to first, as it does
the shared prefix's (one layer's activations exist at a time instead of the row's: ~1.8 MB per
token of the row for the bundled model); ``False``: the row's pass keeps its graph (the path
before: one forward pass per row fewer)."""

ROW_LENGTH_MULTIPLE = 64
"""A row's pass runs from the end of the shared prefix to a multiple of this many tokens past it
(the row's own later tokens or padding, which no earlier position attends to), not to its last
needed position; ``1``: exactly to that position (the path before).

Why: a CPU keeps work per tensor shape. oneDNN builds and caches a primitive per shape of a
bfloat16 matrix product, and the allocator's freed blocks are reused only by requests that fit
them; rows of a new length every time made both grow with every step of a GRPO phase. With
lengths in steps of 64 the same few shapes come back, for at most 63 tokens of extra work a row."""

TRIM_BETWEEN_ROWS = True
""":func:`backward_by_row` hands the C allocator's free pages back to the system after each row's
backward (:func:`~agentgym.trainers.memory.return_freed_memory`); ``False``: only after the
optimiser step (the path before).

Why: a row's forward and backward free hundreds of MB of activations, logits and the output
layer's gradient, and glibc keeps those blocks for reuse; the next row's requests fit them badly,
so the process grew by up to ~300 MiB over a GRPO update's rows (the update's peak, docs/trainer.md).
No arithmetic changes."""

LOGPROB_CHUNK_TOKENS: int | None = 512
"""Loss tokens whose ``[tokens, vocab]`` logits exist at once (``None``: all of a pass's).

With gradients, a chunk's logits are recomputed in backward rather than kept. For the bundled
model (a 49,152-token vocabulary) a chunk's float32 logits take 96 MiB; a pass over 2,000 loss
tokens kept ~4 such tensors of 375 MiB each before."""


class TrainerError(RuntimeError):
    """A training run cannot go on (missing optional package, no demonstrations, bad checkpoint, ...)."""


@dataclass(frozen=True)
class TensorBatch:
    """A right-padded batch as torch tensors on the model's device.

    Attributes:
        input_ids: ``[B, L]`` int64.
        attention_mask: ``[B, L]`` int64, 1 on real tokens.
        loss_mask: ``[B, L]`` bool, True on the tokens the model sampled (or is trained on).
        logprobs: ``[B, L]`` float32 sampling logprobs, 0 where ``loss_mask`` is False.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    logprobs: torch.Tensor

    @classmethod
    def from_tokens(cls, batch: TokenBatch, device: torch.device | str) -> TensorBatch:
        """Move a :class:`~agentgym.models.TokenBatch` to ``device``."""
        return cls(
            input_ids=torch.from_numpy(batch.input_ids).to(device),
            attention_mask=torch.from_numpy(batch.attention_mask).to(device),
            loss_mask=torch.from_numpy(batch.loss_mask).to(device).bool(),
            logprobs=torch.from_numpy(batch.logprobs).to(device),
        )

    def rows(self, index: torch.Tensor | slice) -> TensorBatch:
        """The rows ``index``, cut to the longest of them (padding beyond it is dropped)."""
        attention = self.attention_mask[index]
        width = max(int(attention.sum(dim=1).max()), 1)
        return TensorBatch(
            input_ids=self.input_ids[index, :width],
            attention_mask=attention[:, :width],
            loss_mask=self.loss_mask[index, :width],
            logprobs=self.logprobs[index, :width],
        )

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def load_policy(
    model: str | None, *, device: str = "auto", dtype: str = "auto", lora: LoRASection | None = None
) -> tuple[PreTrainedModel | PeftModel, PreTrainedTokenizerBase]:
    """Load the policy for training: eval mode (no dropout, so logprobs are deterministic), LoRA optional.

    Dropout stays off for the whole run: the ratio of new to old logprobs must be 1 before the
    first update, and sampling, old and new logprobs must all come from the same function.
    ``dtype="auto"`` keeps float32 weights (AdamW updates of 1e-6 vanish in bf16 weights); on CUDA
    the trainer computes in bf16 under :func:`autocast`. An explicit dtype is used as given.
    """
    loaded, tokenizer = load_model(model or DEFAULT_MODEL, device=device, dtype="float32" if dtype == "auto" else dtype)
    policy: PreTrainedModel | PeftModel = loaded
    if lora is not None and lora.enabled:
        policy = add_lora(loaded, lora)
    policy.eval()
    return policy, tokenizer


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX). Without either, PyTorch
    emulates bfloat16 products: on an AVX2-only AMD EPYC a training step's forward and backward took
    18x the time of float32 (one thread, 1,024 tokens: 421 s against 23.5 s)."""
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check() for check in checks if check is not None)


def autocast(device: torch.device, mode: str = "auto") -> AbstractContextManager[Any]:
    """bf16 autocast (float32 master weights, bf16 matrix products) for ``mode="bf16"``, and for
    ``"auto"`` on CUDA and on CPUs with native bfloat16 (:func:`cpu_has_native_bf16`); nothing for
    ``"off"`` or ``"auto"`` elsewhere. ``"bf16"`` on a CPU without native bfloat16 runs, with a
    warning that it is many times slower than ``"off"``."""
    if mode == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn(
            "autocast: bf16 on a CPU without native bfloat16 (AVX512-BF16 or AMX): its products are emulated, "
            "many times slower than float32 (18x measured on an AVX2 CPU); autocast: auto picks float32 here",
            RuntimeWarning,
            stacklevel=2,
        )
    native = device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16())
    if mode == "bf16" or (mode == "auto" and native):
        # No cast cache: it keeps the bf16 copies of the weights until the context exits, and the
        # context spans the whole run, so every step after the first would see the first weights.
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=False)
    return nullcontext()


def add_lora(model: PreTrainedModel, lora: LoRASection) -> PeftModel:
    """Wrap ``model`` with fresh LoRA adapters (only they are trainable).

    Raises:
        TrainerError: when ``peft`` is not installed or the target modules do not fit the model.
    """
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise TrainerError("lora.enabled needs the peft package: pip install peft") from None
    targets: str | list[str] = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # e.g. a target module name the model does not have
        raise TrainerError(f"lora.target_modules {lora.target_modules!r}: {str(exc).splitlines()[0]}") from None


def is_lora(model: torch.nn.Module) -> TypeGuard[PeftModel]:
    """True for a ``peft`` model with adapters."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Parameters the optimiser updates, in a fixed order."""
    return [p for p in model.parameters() if p.requires_grad]


def make_optimizer(model: torch.nn.Module, optim: OptimSection, total_steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the trainable parameters and the warm-up + decay schedule over ``total_steps``.

    On a CPU the moments live on disk between steps (:class:`OffloadedAdamW`), unless
    :func:`~agentgym.trainers.memory.optimizer_state_folder` finds no folder on disk for them, or
    that disk has no room for them (then in memory, with a warning)."""
    from transformers import get_scheduler

    betas = cast("tuple[float, float]", tuple(optim.betas))  # a pair: the config's type, checked when it is loaded
    params = trainable_parameters(model)
    options: dict[str, Any] = {"lr": optim.lr, "betas": betas, "eps": optim.eps, "weight_decay": optim.weight_decay}
    folder = optimizer_state_folder() if all(p.device.type == "cpu" for p in params) else None
    optimizer: torch.optim.Optimizer | None = None
    if folder is not None:
        try:
            optimizer = OffloadedAdamW(params, folder=folder, **options)
        except OSError as exc:
            warnings.warn(
                f"no room for the optimiser's moments on disk in {folder} ({exc.strerror or exc}): they stay in memory "
                f"(about twice the model's weights more resident memory); free space there or set TMPDIR to a disk with room",
                RuntimeWarning,
                stacklevel=2,
            )
    if optimizer is None:
        optimizer = torch.optim.AdamW(params, **options)
    name = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}[optim.schedule]
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=optim.warmup_steps, num_training_steps=max(total_steps, 1))
    return optimizer, scheduler


class OffloadedAdamW(torch.optim.AdamW):
    """AdamW whose moments stay on disk between steps: the same updates, bit for bit.

    The moments (two float32 tensors per parameter, twice the model's weights) are needed only
    inside :meth:`step`, yet a plain AdamW keeps them resident through the rollouts and the
    backward passes, the phases that need the memory. Here they are tensors in a
    :class:`~agentgym.trainers.memory.MappedFile`; :meth:`step` updates one parameter at a time
    (torch's single-tensor AdamW on CPU updates each parameter on its own, so the arithmetic is
    the same) and pages its moments out right after, so at most one parameter's moments are
    resident. :meth:`state_dict` gives them through a private mapping that goes away with the
    returned dictionary (saving a checkpoint leaves them paged out); :meth:`load_state_dict`
    copies loaded moments into the file.

    Args:
        params: the parameters (CPU tensors).
        folder: where the file is made (a folder on disk, see :func:`~agentgym.trainers.memory.disk_folder`).
        **options: AdamW's options (``lr``, ``betas``, ``eps``, ``weight_decay``, ``amsgrad``).
    """

    def __init__(self, params: list[torch.nn.Parameter], *, folder: Path, **options: Any) -> None:
        super().__init__(params, **options)
        keys = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if options.get("amsgrad") else ("exp_avg", "exp_avg_sq")
        every = [p for group in self.param_groups for p in group["params"]]
        self._file = MappedFile(len(keys) * sum(MappedFile.room(p.shape, p.dtype) for p in every), folder)
        # Each parameter's moments have their place in the file for the optimiser's lifetime.
        self._moments = {p: {key: self._file.slot(p.shape, p.dtype) for key in keys} for p in every}

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise TypeError("OffloadedAdamW.step takes no closure")
        groups = self.param_groups
        try:
            for group in groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:  # the first step: what AdamW would make, with the moments in the file
                        state["step"] = torch.tensor(0.0)
                        for key, moment in self._moments[p].items():
                            state[key] = moment.zero_()
                    self.param_groups = [{**group, "params": [p]}]
                    super().step()
                    self._page_out(p)
        finally:
            self.param_groups = groups

    def _page_out(self, p: torch.nn.Parameter) -> None:
        for moment in self._moments[p].values():
            self._file.page_out(moment)

    def state_dict(self) -> dict[str, Any]:
        saved = super().state_dict()
        saved["state"] = {
            index: {key: self._file.private_view(value) if self._file.holds(value) else value for key, value in state.items()}
            for index, state in saved["state"].items()
        }
        return saved

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for p, moments in self._moments.items():
            state = self.state.get(p)
            if state:
                for key, moment in moments.items():
                    state[key] = moment.copy_(state[key])
                self._page_out(p)


def clip_and_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler, max_grad_norm: float | None
) -> dict[str, float]:
    """Clip the accumulated gradient, take the optimiser and schedule steps, zero the gradient and
    return the freed memory to the system (before the step as well).

    Returns ``grad_norm`` (before clipping) and ``lr`` (the rate this step used).
    """
    params = trainable_parameters(model)
    limit = math.inf if max_grad_norm is None else max_grad_norm
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
    lr = float(optimizer.param_groups[0]["lr"])
    # The backward passes' freed activations go back to the system before the step's own memory
    # (a parameter's moments and AdamW's temporaries, ~0.45 GB for the bundled model's embeddings)
    # comes on top of them: the step was the update's peak.
    return_freed_memory()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    # The update's activations and gradients are gone: their pages go back to the system, not
    # into the allocator's free lists (gigabytes after an update over long rows).
    return_freed_memory()
    return {"grad_norm": grad_norm, "lr": lr}


def shared_prefix_length(batch: TensorBatch) -> int:
    """Length of the prefix that every row shares and that no loss token's prediction needs.

    The loss token at ``i`` is predicted at ``i - 1``, so the prefix stops at the first position
    whose logits are needed; it also leaves every row at least one token of its own.
    """
    ids = batch.input_ids
    if ids.shape[0] < 2:
        return 0
    lengths = batch.attention_mask.sum(dim=1)
    limit = int(lengths.min()) - 1
    needs_logits = batch.loss_mask[:, 1:].any(dim=0)
    if bool(needs_logits.any()):
        limit = min(limit, int(needs_logits.nonzero()[0]))
    if limit <= 0:
        return 0
    differs = (ids[:, :limit] != ids[:1, :limit]).any(dim=0)
    return int(differs.nonzero()[0]) if bool(differs.any()) else limit


@overload
def token_logprobs(
    model: torch.nn.Module, batch: TensorBatch, *, temperature: float = 1.0, share_prefix: bool = True, with_entropy: Literal[True]
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def token_logprobs(
    model: torch.nn.Module, batch: TensorBatch, *, temperature: float = 1.0, share_prefix: bool = True, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]: ...


def token_logprobs(
    model: torch.nn.Module, batch: TensorBatch, *, temperature: float = 1.0, share_prefix: bool = True, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the loss tokens under ``model`` (gradients flow when grad is enabled).

    Logits are computed only where a loss token is predicted, and divided by ``temperature`` (the
    sampler's), so these are the logprobs of the distribution that was sampled from (with
    ``top_p = 1``). Columns after the last loss token are not run at all.

    Returns:
        ``(logprobs, entropy)``: ``[B, L]`` tensors, zero outside ``loss_mask``. ``entropy`` (of the
        whole next-token distribution, in nats, no gradient) is ``None`` unless ``with_entropy``.
    """
    logprobs = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
    entropy = torch.zeros_like(logprobs) if with_entropy else None
    passes = _RowPasses(model, batch, share_prefix=share_prefix, leaf_prefix=False)
    if not passes.rows:
        return logprobs, entropy
    states, head = zip(*(passes.states(r) for r in passes.rows), strict=True)
    picked, picked_entropy = _logprobs_from_states(torch.cat(states), passes.targets, head[0], temperature, with_entropy)
    logprobs = logprobs.index_put((passes.row, passes.position + 1), picked)
    if entropy is not None:
        entropy[passes.row, passes.position + 1] = picked_entropy
    return logprobs, entropy


@overload
def backward_by_row(
    model: torch.nn.Module,
    batch: TensorBatch,
    row_loss: Callable[[int, torch.Tensor], torch.Tensor],
    *,
    temperature: float = 1.0,
    share_prefix: bool = True,
    with_entropy: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def backward_by_row(
    model: torch.nn.Module,
    batch: TensorBatch,
    row_loss: Callable[[int, torch.Tensor], torch.Tensor],
    *,
    temperature: float = 1.0,
    share_prefix: bool = True,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]: ...


def backward_by_row(
    model: torch.nn.Module,
    batch: TensorBatch,
    row_loss: Callable[[int, torch.Tensor], torch.Tensor],
    *,
    temperature: float = 1.0,
    share_prefix: bool = True,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`token_logprobs`, and the gradient of a loss that is a sum over rows, one row at a time.

    ``row_loss(r, logprobs)`` is row ``r``'s term of the loss, from its ``[1, L]`` logprobs (zero
    outside its loss tokens); the gradient of the sum of the terms is added to the parameters'
    ``.grad``. Each row's forward pass is followed by its backward pass at once, so the
    activations of one row exist at a time, not those of the whole micro-batch (the largest
    memory of an update); with :data:`RECOMPUTE_ROW_LAYERS` not even a row's: its pass keeps only
    each decoder layer's input, and its backward runs the layers again one at a time. The shared
    prefix runs once: the rows attend to a detached copy of its keys and values, whose gradients
    add up over the rows and then flow through the prefix's pass once, layer by layer. The
    gradient equals the whole batch's up to float rounding (the order of the sums).

    Returns:
        ``(logprobs, entropy)`` as :func:`token_logprobs`, without gradient.
    """
    if not BACKWARD_BY_ROW:
        logprobs, entropy = token_logprobs(model, batch, temperature=temperature, share_prefix=share_prefix, with_entropy=with_entropy)
        rows = batch.loss_mask.any(dim=1).nonzero()[:, 0].tolist()
        if rows:
            torch.stack([row_loss(r, logprobs[r : r + 1]) for r in rows]).sum().backward()
        return logprobs.detach(), entropy
    logprobs = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
    entropy = torch.zeros_like(logprobs) if with_entropy else None
    passes = _RowPasses(model, batch, share_prefix=share_prefix, leaf_prefix=True, recompute_rows=RECOMPUTE_ROW_LAYERS)
    for r in passes.rows:
        states, head = passes.states(r)
        here = passes.row == r
        picked, picked_entropy = _logprobs_from_states(states, passes.targets[here], head, temperature, with_entropy)
        columns = passes.position[here] + 1
        row_logprobs = torch.zeros(1, logprobs.shape[1], dtype=torch.float32, device=logprobs.device).index_put((torch.zeros_like(columns), columns), picked)
        row_loss(r, row_logprobs).backward()
        passes.backward_row()
        if TRIM_BETWEEN_ROWS:
            return_freed_memory()
        logprobs[r, columns] = picked.detach()
        if entropy is not None:
            entropy[r, columns] = picked_entropy
    passes.backward_prefix()
    return logprobs, entropy


def _logprobs_from_states(
    states: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module | None, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The logprobs of ``targets`` (and the entropies), :data:`LOGPROB_CHUNK_TOKENS` at a time."""
    chunk = LOGPROB_CHUNK_TOKENS or len(targets)
    recompute = head is not None and torch.is_grad_enabled() and states.requires_grad and chunk < len(targets)
    picked, entropy = [], []
    for start in range(0, len(targets), chunk):
        part = slice(start, start + chunk)
        if recompute:
            # Recomputed in backward instead of kept: a chunk's [chunk, V] logits live only while it is processed.
            values = checkpoint(_chunk_logprobs, states[part], targets[part], head, temperature, with_entropy, use_reentrant=False, preserve_rng_state=False)
        else:
            values = _chunk_logprobs(states[part], targets[part], head, temperature, with_entropy)
        picked.append(values[0])
        entropy.append(values[1])
    return torch.cat(picked), torch.cat(entropy)


def _chunk_logprobs(
    states: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module | None, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs of ``targets`` (and the entropies, no gradient; empty unless ``with_entropy``) from
    the hidden states at their positions (``head`` maps them to logits; ``None``: they are logits)."""
    logits = (states if head is None else head(states)).float()  # [chunk, V]
    if temperature != 1.0:
        logits = logits / temperature
    # logit - logsumexp instead of a full log_softmax: no second [chunk, V] tensor is kept for backward.
    normalizer = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - normalizer
    entropy = logits.new_empty(0)
    if with_entropy:
        with torch.no_grad():
            # H = logsumexp(z) - sum_v p_v z_v
            entropy = normalizer - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    return picked, entropy


# Models whose logits are more than a linear map of the last hidden state (soft-capping, scaling):
# they go through their own forward pass, which applies it.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


class _RowPasses:
    """The forward passes behind the logits at the loss positions: the shared prefix, then each row.

    Position ``p`` of row ``r`` predicts token ``p + 1``; :attr:`row` and :attr:`position` are
    those ``(r, p)`` pairs of every loss token (sorted by row, then position), :attr:`targets` the
    tokens. The first ``prefix`` tokens run once for all rows, at construction; then
    :meth:`states` runs one row alone, from the end of the prefix to its last needed position
    (rounded up to :data:`ROW_LENGTH_MULTIPLE`). At agent sequence lengths (hundreds of tokens per
    row) the matrix products stay full, and little work goes to padding: a padded batch runs every
    row to the longest row's length, and its attention reads the padded positions too (a GRPO
    group's continuations vary by 2-3x in length; on SQL-v0 about a third of the rows' own work was
    padding, and the update got ~10 % faster without it).
    Rows without loss tokens do not run at all. Where the output layer is a plain linear map, the
    caller runs it on the selected hidden states only, a chunk at a time (the vocabulary is wide).

    ``leaf_prefix``: the rows attend to a detached copy of the prefix's keys and values (see
    :func:`backward_by_row`), computed without a graph; :meth:`backward_prefix` then runs the
    prefix again with gradients and carries the rows' gradient through it. That costs one more
    pass over the prefix per micro-batch and keeps the prefix's activations (about as large as a
    row's) out of memory while the rows run.

    ``recompute_rows`` (with gradients): :meth:`states` runs a row's decoder layers without a
    graph too, keeping each layer's input, and returns its hidden states computed from a detached
    copy of the last layer's output; after the row's loss is back-propagated to that copy,
    :meth:`backward_row` runs the layers again one at a time, last to first, as
    :meth:`backward_prefix` does. That costs one more pass over each row and keeps one layer's
    activations at a time instead of the row's.
    """

    def __init__(self, model: torch.nn.Module, batch: TensorBatch, *, share_prefix: bool, leaf_prefix: bool, recompute_rows: bool = False) -> None:
        ids, attention, mask = batch.input_ids, batch.attention_mask, batch.loss_mask
        self.row, self.position = mask[:, 1:].nonzero(as_tuple=True)
        self.rows: list[int] = torch.unique_consecutive(self.row).tolist()
        self.targets = ids[self.row, self.position + 1]
        end = int(self.position.max()) + 1 if self.rows else 0  # later tokens are never an input the loss depends on
        prefix = shared_prefix_length(batch) if share_prefix and self.rows else 0
        self.prefix = prefix if prefix >= MIN_SHARED_PREFIX else 0
        self._ids, self._attention = _padded_columns(ids, attention, self._row_stop(end))
        config = getattr(model, "config", None)
        # transformers' methods (a peft model forwards them), which torch's annotation of Module attributes does not cover.
        get_decoder: Any = getattr(model, "get_decoder", None)
        get_output_embeddings: Any = getattr(model, "get_output_embeddings", None)
        split = get_decoder is not None and get_output_embeddings is not None and not any(getattr(config, name, None) for name in _LOGIT_TRANSFORMS)
        self._network = get_decoder() if split else model
        self._head: torch.nn.Module | None = get_output_embeddings() if split else None
        self._keyword = cache_keyword(model)
        self._prefix_states: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._attended: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._recompute = leaf_prefix and torch.is_grad_enabled()
        decoder = get_decoder() if get_decoder is not None else None
        layers = getattr(decoder, "layers", None)
        self._layers: list[torch.nn.Module] = list(layers) if isinstance(layers, torch.nn.ModuleList) else []
        norm = getattr(decoder, "norm", None)
        self._norm: torch.nn.Module | None = norm if isinstance(norm, torch.nn.Module) else None
        # A row's pass can be run again layer by layer where the states the head reads are the final
        # norm's output of the last layer's (checked on every row's pass, see states).
        self._recompute_rows = recompute_rows and self._recompute and split and bool(self._layers) and self._norm is not None
        self._layer_inputs: list[tuple[tuple[Any, ...], dict[str, Any]] | None] = []
        self._row_inputs: dict[str, Any] = {}
        self._row_layer_inputs: list[tuple[tuple[Any, ...], dict[str, Any]] | None] = []
        self._row_output: torch.Tensor | None = None  # the detached last layer's output a row's states were computed from
        if self.prefix:
            # With leaves, the prefix's pass keeps nothing for backward (its activations would stay
            # for every row of the micro-batch), only each decoder layer's inputs; backward_prefix
            # runs the layers again one at a time, with gradients.
            with torch.no_grad() if self._recompute else nullcontext(), self._recording_layer_inputs(self._layer_inputs):
                self._prefix_states = self._prefix_pass()
            leaves = self._recompute
            self._attended = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in self._prefix_states] if leaves else self._prefix_states

    def _prefix_pass(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The keys and values of the shared prefix, layer by layer."""
        extra = {} if self._head is not None else {"logits_to_keep": 1}
        shared = self._network(input_ids=self._ids[:1, : self.prefix], use_cache=True, **extra)
        return [(layer.keys, layer.values) for layer in getattr(shared, self._keyword).layers]

    @contextmanager
    def _recording_layer_inputs(self, record: list[tuple[tuple[Any, ...], dict[str, Any]] | None]) -> Iterator[None]:
        """While a recomputed pass runs: keep each decoder layer's arguments in ``record`` (its input
        is one ``[1, tokens, H]`` tensor, a few MB; the rest is shared by the layers)."""
        if not self._recompute:
            yield
            return
        hooks = [layer.register_forward_pre_hook(lambda _, args, kwargs: record.append((args, kwargs)), with_kwargs=True) for layer in self._layers]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def _row_stop(self, end: int) -> int:
        """Where a row's pass that needs the positions before ``end`` stops (see :data:`ROW_LENGTH_MULTIPLE`)."""
        return self.prefix + -(-(end - self.prefix) // ROW_LENGTH_MULTIPLE) * ROW_LENGTH_MULTIPLE

    def _row_pass_inputs(self, r: int, end: int) -> dict[str, Any]:
        """The decoder's arguments for row ``r``'s pass from the end of the prefix past ``end`` (to :meth:`_row_stop`)."""
        prefix, ids, end = self.prefix, self._ids, self._row_stop(end)
        inputs: dict[str, Any] = {"input_ids": ids[r : r + 1, prefix:end], "attention_mask": self._attention[r : r + 1, :end]}
        if prefix:
            # A cache object per row over the same prefix tensors: appending the row's keys and
            # values makes new tensors, so the prefix is shared and its gradient sums over rows.
            inputs |= {"position_ids": torch.arange(prefix, end, device=ids.device)[None], "use_cache": True, self._keyword: _cache_from(self._attended)}
        else:
            inputs["use_cache"] = False
        return inputs

    def states(self, r: int) -> tuple[torch.Tensor, torch.nn.Module | None]:
        """Row ``r``'s pass: ``(hidden states [n, H] at its loss positions, the output layer)``, or
        ``(logits [n, V], None)`` for a model whose logits are more than a linear map of its states."""
        needed = self.position[self.row == r] - self.prefix  # the row's positions whose logits are needed, after the prefix
        end = self.prefix + int(needed[-1]) + 1
        if self._recompute_rows:
            states = self._recorded_row_pass(self._row_pass_inputs(r, end))
            if states is not None:
                return states[0, needed], self._head
            self._recompute_rows = False  # this model's pass cannot be split there: the rows keep their graphs
        inputs = self._row_pass_inputs(r, end)
        if self._head is not None:
            return self._network(**inputs).last_hidden_state[0, needed], self._head
        return self._network(**inputs, logits_to_keep=needed).logits[0], None

    def _recorded_row_pass(self, inputs: dict[str, Any]) -> torch.Tensor | None:
        """A row's pass without a graph, keeping each layer's input and the last layer's output; its
        final states computed again, with gradients, from a detached copy of that output. ``None``
        (nothing kept) where the decoder's output is not the final norm of the last layer's."""
        norm = self._norm
        assert norm is not None
        seen: list[tuple[torch.Tensor, torch.Tensor]] = []
        hook = norm.register_forward_hook(lambda _, args, out: seen.append((args[0], out)))
        layer_inputs: list[tuple[tuple[Any, ...], dict[str, Any]] | None] = []
        try:
            with torch.no_grad(), self._recording_layer_inputs(layer_inputs):
                final = self._network(**inputs).last_hidden_state
        finally:
            hook.remove()
        if len(seen) != 1 or seen[0][1] is not final or len(layer_inputs) != len(self._layers):
            return None
        self._row_inputs, self._row_layer_inputs = inputs, layer_inputs
        self._row_output = seen[0][0].detach().requires_grad_()
        return norm(self._row_output)

    def backward_row(self) -> None:
        """Carry the gradient the row's loss left on the last layer's output (see :meth:`states`)
        through the row's decoder layers, run again with gradients one at a time, last to first,
        each from its recorded input and over the prefix's detached keys and values; then through
        the part of the pass before the first layer. Nothing to do where the row's pass kept its graph."""
        output, self._row_output = self._row_output, None
        records, self._row_layer_inputs = self._row_layer_inputs, []
        inputs, self._row_inputs = self._row_inputs, {}
        if output is None or output.grad is None:
            return
        attended = self._attended

        def cache(index: int) -> Any:
            # The prefix's keys and values of this layer alone: the layer appends the row's to them.
            return _cache_from([(None, None)] * index + [attended[index]]) if attended else None

        grad_hidden = self._backward_layers(records, output.grad, cache)
        if grad_hidden is not None:
            # The recorded pass's cache holds the row's keys and values now; the part before the
            # first layer needs only the prefix's length, which the first layer's entry gives.
            self._backward_first_layer_input(grad_hidden, lambda: self._network(**(inputs | ({self._keyword: cache(0)} if attended else {}))))

    def backward_prefix(self) -> None:
        """Carry the gradients the rows left on the detached prefix keys and values through the
        prefix's pass, run again with gradients (the same computation, so the same values): one
        decoder layer at a time, last to first, from its recorded input, so that one layer's
        activations exist at a time; then the part of the pass before the first layer."""
        if not self._recompute or not self.prefix:
            return
        grads = [(k.grad, v.grad) for k, v in self._attended]
        if all(g is None for pair in grads for g in pair):
            return
        if len(self._layer_inputs) != len(self._layers) or len(self._layers) != len(grads):
            # A model whose layers this cannot see: the whole prefix pass again, with gradients.
            pairs = [(state, g) for states, gs in zip(self._prefix_pass(), grads, strict=True) for state, g in zip(states, gs, strict=True) if g is not None]
            torch.autograd.backward([state for state, _ in pairs], [g for _, g in pairs])
            return
        from transformers.cache_utils import DynamicCache

        records, self._layer_inputs = self._layer_inputs, []
        # The layer's keys and values land in an empty cache, in the graph: the gradients the rows left on them go there.
        grad_hidden = self._backward_layers(records, None, lambda index: DynamicCache(), grads)
        if grad_hidden is not None:
            self._backward_first_layer_input(grad_hidden, self._prefix_pass)

    def _backward_layers(
        self,
        records: list[tuple[tuple[Any, ...], dict[str, Any]] | None],
        grad_hidden: torch.Tensor | None,
        cache: Callable[[int], Any],
        kv_grads: list[tuple[torch.Tensor | None, torch.Tensor | None]] | None = None,
    ) -> torch.Tensor | None:
        """Back-propagate ``grad_hidden`` (at the last layer's output) and ``kv_grads`` (at each
        layer's keys and values) through the decoder layers, run again with gradients one at a time,
        last to first, each from its recorded arguments with ``cache(index)`` as its cache; return
        the gradient at the first layer's input."""
        from transformers.cache_utils import Cache

        for index in reversed(range(len(self._layers))):
            recorded = records[index]
            assert recorded is not None
            records[index] = None
            args, kwargs = recorded
            hidden = (args[0] if args else kwargs["hidden_states"]).detach().requires_grad_()
            layer_cache = cache(index)
            kwargs = {key: layer_cache if isinstance(value, Cache) else value for key, value in kwargs.items()}
            if args:
                args = (hidden, *args[1:])
            else:
                kwargs["hidden_states"] = hidden
            out = self._layers[index](*args, **kwargs)
            out = out[0] if isinstance(out, tuple) else out
            targets = [(out, grad_hidden)]
            if kv_grads is not None:
                layer: Any = layer_cache.layers[index]  # its keys and values, as _prefix_pass reads them
                targets += [(layer.keys, kv_grads[index][0]), (layer.values, kv_grads[index][1])]
            pairs = [(t, g) for t, g in targets if g is not None]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
            grad_hidden = hidden.grad
        return grad_hidden

    def _backward_first_layer_input(self, grad: torch.Tensor, run: Callable[[], Any]) -> None:
        """Back-propagate ``grad`` through the part of a pass before the first decoder layer (the
        embeddings, and whatever the model does to them): ``run`` (the pass), stopped there. Not
        with frozen embeddings (LoRA): nothing before the first layer learns."""
        captured: list[torch.Tensor] = []

        def stop(_: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            captured.append(args[0] if args else kwargs["hidden_states"])
            raise _StopPass

        hook = self._layers[0].register_forward_pre_hook(stop, with_kwargs=True)
        try:
            run()
        except _StopPass:
            pass
        finally:
            hook.remove()
        if captured[0].requires_grad:
            torch.autograd.backward(captured[0], grad)


def _padded_columns(ids: torch.Tensor, attention: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` and ``attention`` cut or right-padded to ``width`` columns (padding: token 0, not attended)."""
    missing = width - ids.shape[1]
    if missing <= 0:
        return ids[:, :width], attention[:, :width]
    return torch.nn.functional.pad(ids, (0, missing)), torch.nn.functional.pad(attention, (0, missing))


class _StopPass(Exception):
    """Raised by a hook to end a forward pass early."""


def _cache_from(states: list[tuple[torch.Tensor, torch.Tensor]] | list[tuple[torch.Tensor | None, torch.Tensor | None]]) -> Any:
    """A cache holding ``states`` (per layer, keys and values; ``None``: the layer holds none)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=states)


class Reference:
    """The frozen reference policy of the KL term.

    With LoRA it is the policy with its adapters switched off (no second copy in memory);
    otherwise a frozen copy of the policy as it was when the reference was made, on ``device``
    (e.g. the CPU, to keep accelerator memory for the policy).

    Args:
        policy: the model being trained, at the moment the reference should capture.
        device: where a copied reference lives; ``None`` keeps the policy's device.
    """

    def __init__(self, policy: torch.nn.Module, device: str | None = None) -> None:
        self._policy = policy
        if is_lora(policy):
            self.model = None
        else:
            self.model = copy.deepcopy(policy).requires_grad_(False).eval()
            if device is not None:
                self.model.to(device)

    @contextmanager
    def _active(self) -> Iterator[torch.nn.Module]:
        if self.model is None:
            lora = cast("PeftModel", self._policy)  # only a LoRA policy has no copy (see __init__)
            with lora.disable_adapter():
                yield self._policy
        else:
            yield self.model

    @torch.no_grad()
    def logprobs(self, batch: TensorBatch, *, temperature: float = 1.0, share_prefix: bool = True) -> torch.Tensor:
        """``[B, L]`` reference logprobs of the loss tokens, on the batch's device."""
        with self._active() as model:
            device = next(model.parameters()).device
            moved = batch if device == batch.input_ids.device else _to(batch, device)
            values, _ = token_logprobs(model, moved, temperature=temperature, share_prefix=share_prefix)
        return values.to(batch.input_ids.device)


def _to(batch: TensorBatch, device: torch.device) -> TensorBatch:
    return TensorBatch(*(t.to(device) for t in (batch.input_ids, batch.attention_mask, batch.loss_mask, batch.logprobs)))
