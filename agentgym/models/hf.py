"""Local Hugging Face transformers backend: batched sampling on CPU or GPU.

``model.generate`` draws from torch's global random state and merges the checkpoint's own generation
defaults (repetition penalties, top-k, ...) into every call, so neither the tokens nor the reported
logprobs would be under our control. This module runs its own decoding loop over the model's forward
pass with a KV cache instead: every prompt gets its own seeded ``torch.Generator``, the sampling
distribution is exactly temperature + top-p, and rows that finish are dropped from the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentgym.models.backend import (
    Generation,
    SamplingParams,
    decode_visible,
    per_prompt_params,
    stop_token_set,
)


@dataclass
class _Row:
    """Decoding state of one prompt."""

    params: SamplingParams
    limit: int  # max_new_tokens, lowered when the model's context would run out first
    stop_ids: frozenset[int]
    generator: torch.Generator
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None


def sample_next(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, generators: Sequence[torch.Generator]
) -> tuple[list[int], list[float]]:
    """Draw one token per row of ``logits`` ``[B, V]`` and return (ids, logprobs under the sampling distribution).

    Rows with temperature 0 are decoded greedily and report the logprob under the untempered distribution.
    """
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits.float() / scale[:, None], dim=-1)
    if bool((top_p < 1).any()):
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        sorted_p = sorted_logp.exp()
        # Keep a token while the mass strictly before it is below top_p, so the top token always stays.
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p[:, None]
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        nucleus = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_logp)
        logp = torch.where(greedy[:, None], logp, nucleus - torch.logsumexp(nucleus, dim=-1, keepdim=True))
    ids: list[int] = []
    lps: list[float] = []
    for row, generator in enumerate(generators):
        if greedy[row]:
            token = int(logp[row].argmax())
        else:
            token = int(torch.multinomial(logp[row].exp(), 1, generator=generator))
        ids.append(token)
        lps.append(float(logp[row, token]))
    return ids, lps


class HFBackend:
    """Batched sampling with a local transformers causal LM.

    Args:
        model: a causal LM in eval mode (see :func:`agentgym.models.loading.load_model`).
        tokenizer: its tokenizer.
        name: policy name for episode records.
        max_batch_size: prompts sampled together in one decoding loop; more are processed in chunks.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str | None = None,
        max_batch_size: int = 64,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or f"hf:{getattr(model, 'name_or_path', '') or type(model).__name__}"
        self.max_batch_size = max_batch_size
        eos = model.generation_config.eos_token_id
        self._model_eos: tuple[int, ...] = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        self._pad_id = next(
            (t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id, *self._model_eos) if t is not None), 0
        )
        self._context: int | None = getattr(model.config, "max_position_embeddings", None)

    @property
    def device(self) -> torch.device:
        """Device the model runs on."""
        return self.model.device

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[Generation]:
        """Sample one completion per prompt (left-padded batches of at most ``max_batch_size``)."""
        expanded = per_prompt_params(prompts, params, self.model.get_input_embeddings().num_embeddings)
        if self._context is not None:
            for i, prompt in enumerate(prompts):
                if len(prompt) >= self._context:
                    raise ValueError(f"prompt {i} has {len(prompt)} tokens; the model's context is {self._context}")
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            end = start + self.max_batch_size
            out.extend(self._generate_batch(prompts[start:end], expanded[start:end]))
        return out

    def _new_row(self, prompt_length: int, params: SamplingParams) -> _Row:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(params.seed)
        stop_ids = stop_token_set(self.tokenizer, (*self._model_eos, *params.stop_token_ids))
        limit = params.max_new_tokens
        if self._context is not None:
            limit = min(limit, self._context - prompt_length)
        return _Row(params=params, limit=limit, stop_ids=stop_ids, generator=generator, token_ids=[], logprobs=[])

    def _finish_reason(self, row: _Row) -> str | None:
        if row.token_ids[-1] in row.stop_ids:
            return "stop"
        if row.params.stop:
            # A character is at most 4 bytes and a token at least 1, so this tail holds any stop string
            # that the newest token completed (an earlier occurrence would already have ended the row).
            window = 4 * max(len(s) for s in row.params.stop) + 1
            tail = self.tokenizer.decode(row.token_ids[-window:], skip_special_tokens=False)
            if any(s in tail for s in row.params.stop):
                return "stop"
        if len(row.token_ids) >= row.limit:
            return "length"
        return None

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
        temperature = torch.tensor([p.temperature for p in params], device=device)
        top_p = torch.tensor([p.top_p for p in params], device=device)
        active = list(range(len(rows)))
        cache = None
        while True:
            output = self.model(
                input_ids=input_ids,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = output.past_key_values
            ids, lps = sample_next(
                output.logits[:, -1, :], temperature, top_p, [rows[i].generator for i in active]
            )
            keep: list[int] = []
            for j, i in enumerate(active):
                row = rows[i]
                row.token_ids.append(ids[j])
                row.logprobs.append(lps[j])
                row.finish_reason = self._finish_reason(row)
                if row.finish_reason is None:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention, positions = attention[index], positions[index]
                temperature, top_p = temperature[index], top_p[index]
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
