"""Local Hugging Face transformers backend: batched sampling on CPU or GPU.

``model.generate`` draws from torch's global random state and merges the checkpoint's own generation
defaults (repetition penalties, top-k, ...) into every call, so neither the tokens nor the reported
logprobs would be under our control. This backend runs its own decoding over the model's forward pass
instead: every prompt gets its own seeded ``torch.Generator`` and the sampling distribution is exactly
temperature + top-p.

By default the work goes through :class:`~agentgym.models.engine.KVEngine`, which keeps keys and
values across calls (an episode's next turn prefills only the new tokens; a group's shared prompt is
computed once) and batches continuously (:meth:`HFBackend.submit` / :meth:`HFBackend.advance`).
``reuse_cache=False`` keeps the plain path: each ``generate`` call left-pads its prompts and prefills
them from scratch (the baseline the rollout benchmark compares against).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentgym.models.backend import Generation, SamplingParams, decode_visible, per_prompt_params, stop_token_set
from agentgym.models.engine import KVEngine, cache_keyword, finish_reason, sample_next

__all__ = ["HFBackend", "default_cache_bytes", "sample_next"]


class HFBackend:
    """Batched sampling with a local transformers causal LM.

    Implements :class:`~agentgym.models.backend.GenerationBackend` (``generate``) and
    :class:`~agentgym.models.backend.StreamingBackend` (``submit`` / ``advance``).

    Args:
        model: a causal LM in eval mode (see :func:`agentgym.models.loading.load_model`).
        tokenizer: its tokenizer.
        name: policy name for episode records.
        max_batch_size: requests decoded together at most; more wait for a free row.
        reuse_cache: keep keys and values across calls and batch continuously (the default); False
            prefills every prompt from scratch in left-padded batches.
        max_cache_gib: soft ceiling for cached keys and values (default: a quarter of the machine's
            memory, or of the GPU's); below it the buffers take what the batch needs (see
            :class:`~agentgym.models.engine.KVEngine`).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str | None = None,
        max_batch_size: int = 64,
        reuse_cache: bool = True,
        max_cache_gib: float | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_cache_gib is not None and not max_cache_gib > 0:
            raise ValueError(f"max_cache_gib must be > 0, got {max_cache_gib}")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or f"hf:{getattr(model, 'name_or_path', '') or type(model).__name__}"
        self.max_batch_size = max_batch_size
        self.reuse_cache = reuse_cache
        eos = model.generation_config.eos_token_id
        self._model_eos: tuple[int, ...] = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        self._pad_id = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id, *self._model_eos) if t is not None), 0)
        self._context: int | None = getattr(model.config, "max_position_embeddings", None)
        budget = int(max_cache_gib * 2**30) if max_cache_gib is not None else default_cache_bytes(self.device)
        self.engine = KVEngine(model, tokenizer, max_rows=max_batch_size, max_cache_bytes=budget, pad_token_id=self._pad_id)
        self._keys = itertools.count()
        # Without reuse, requests wait here for the next advance() (a list, not a LockstepStream over
        # self: that reference cycle would keep the key/value buffers alive until a garbage collection).
        self._queue: list[tuple[Hashable, Sequence[int], SamplingParams]] = []

    @property
    def device(self) -> torch.device:
        """Device the model runs on."""
        return self.model.device

    @property
    def _vocab_rows(self) -> int:
        """Rows of the input embedding table: the token ids the model accepts."""
        # An int attribute of the embedding layer; torch annotates Module attributes as the
        # parameters, buffers and submodules that Module.__getattr__ finds.
        return cast(int, self.model.get_input_embeddings().num_embeddings)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]) -> list[Generation]:
        """Sample one completion per prompt."""
        expanded = per_prompt_params(prompts, params, self._vocab_rows, hot=True)
        if not self.reuse_cache:
            return self._generate_from_scratch(prompts, expanded)
        if self.engine.in_flight:
            raise RuntimeError("generate() cannot run while submitted requests are in flight; use advance()")
        keys = [("generate", next(self._keys)) for _ in prompts]
        for key, prompt, p in zip(keys, prompts, expanded, strict=True):
            self.engine.submit(key, prompt, p)
        done: dict[object, Generation] = {}
        while len(done) < len(keys):
            done.update(self.engine.advance())
        return [done[key] for key in keys]

    def submit(self, key: Hashable, prompt: Sequence[int], params: SamplingParams) -> None:
        """Queue one request; :meth:`advance` returns its generation under ``key``."""
        per_prompt_params([prompt], params, self._vocab_rows, hot=True)
        if self.reuse_cache:
            self.engine.submit(key, prompt, params)
        else:
            self._queue.append((key, prompt, params))

    def advance(self) -> list[tuple[Hashable, Generation]]:
        """Run until at least one submitted request finishes; return every finished ``(key, generation)``.

        Without cache reuse, every request submitted since the last call is generated in one batch.
        """
        if self.reuse_cache:
            return self.engine.advance()
        queue, self._queue = self._queue, []
        generations = self._generate_from_scratch([p for _, p, _ in queue], [q for _, _, q in queue]) if queue else []
        return [(key, generation) for (key, _, _), generation in zip(queue, generations, strict=True)]

    @property
    def in_flight(self) -> int:
        """Submitted requests not yet returned."""
        return self.engine.in_flight if self.reuse_cache else len(self._queue)

    def forget(self, key: Hashable) -> None:
        """Say that the finished request ``key`` was its sequence's last (see :meth:`KVEngine.forget`)."""
        if self.reuse_cache:
            self.engine.forget(key)

    def clear_cache(self) -> None:
        """Forget cached keys and values (automatic after in-place weight updates)."""
        self.engine.clear()

    # -- the path without reuse ------------------------------------------------------------------

    def _generate_from_scratch(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        if self._context is not None:
            for i, prompt in enumerate(prompts):
                if len(prompt) >= self._context:
                    raise ValueError(f"prompt {i} has {len(prompt)} tokens; the model's context is {self._context}")
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            end = start + self.max_batch_size
            out.extend(self._generate_batch(prompts[start:end], params[start:end]))
        return out

    def _new_row(self, prompt_length: int, params: SamplingParams) -> _Row:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(params.seed)
        stop_ids = stop_token_set(self.tokenizer, (*self._model_eos, *params.stop_token_ids))
        limit = params.max_new_tokens
        if self._context is not None:
            limit = min(limit, self._context - prompt_length)
        return _Row(params=params, limit=limit, stop_ids=stop_ids, generator=generator, token_ids=[], logprobs=[])

    @torch.inference_mode()
    def _generate_batch(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        device = self.device
        rows = [self._new_row(len(prompt), p) for prompt, p in zip(prompts, params, strict=True)]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long, device=device)
        attention = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention[i, width - len(prompt) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        top_p = torch.tensor([p.top_p for p in params], device=device)
        active = list(range(len(rows)))
        keyword = cache_keyword(self.model)
        cache = None
        while True:
            output = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1, **{keyword: cache})
            cache = getattr(output, keyword)
            temperature = torch.tensor([rows[i].params.temperature_at(len(rows[i].token_ids)) for i in active], device=device)
            ids, lps = sample_next(output.logits[:, -1, :], temperature, top_p, [rows[i].generator for i in active])
            keep: list[int] = []
            for j, i in enumerate(active):
                row = rows[i]
                row.token_ids.append(ids[j])
                row.logprobs.append(lps[j])
                row.finish_reason = finish_reason(self.tokenizer, row.token_ids, row.stop_ids, row.params.stop, row.limit)
                if row.finish_reason is None:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention, positions = attention[index], positions[index]
                top_p = top_p[index]
                active = [active[j] for j in keep]
            input_ids = torch.tensor([[rows[i].token_ids[-1]] for i in active], device=device)
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=-1)
            positions = positions[:, -1:] + 1
        return [
            Generation(
                token_ids=tuple(row.token_ids),
                logprobs=tuple(row.logprobs),
                text=decode_visible(self.tokenizer, row.token_ids),
                finish_reason="stop" if row.finish_reason == "stop" else "length",
            )
            for row in rows
        ]


@dataclass
class _Row:
    """Decoding state of one prompt on the path without reuse."""

    params: SamplingParams
    limit: int
    stop_ids: frozenset[int]
    generator: torch.Generator
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None


def default_cache_bytes(device: torch.device) -> int:
    """A quarter of the device's memory (the machine's for CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // 4
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30
