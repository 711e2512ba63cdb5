"""Continuous batching with key/value reuse for a local transformers causal LM.

Agent rollouts send the same tokens to the model again and again: every turn of an episode
resends the whole conversation, the ``G`` episodes of a GRPO group share their opening prompt,
and every task of an environment shares its system prompt and tool schemas. :class:`KVEngine`
computes each of those tokens once:

* **Across turns.** A finished request leaves its row of keys and values resident
  (:class:`~agentgym.models.kv_cache.KVRows`). When the next prompt starts with that row's tokens
  (the episode's next turn: the conversation so far plus the environment's reply), the request
  takes the row over and only the new tokens are prefilled.
* **Across a group and across tasks.** Otherwise the request copies the longest prefix it shares
  with any cached row (a sibling's prompt, another task's system prompt) into a row of its own.
  Requests admitted together are prefilled in token order, so the first of a group computes the
  shared prompt and the others copy it; identical prompts also share the first token's logits.
* **A prefix stored once.** When requests start together in an empty cache and all start with the
  same tokens (the environment's system prompt and tool schemas), those tokens' keys and values
  are computed and kept once, not once per row (:meth:`KVRows.store_prefix`), and every pass reads
  them once for the whole batch. A later request that does not start with them hands the part it
  does not share back to the rows (:meth:`KVRows.lower_base`).
* **Weights cast once.** Under autocast (the trainer's bf16 products), every linear layer would
  cast its weight in every forward pass; the engine multiplies with copies cast once per weights
  version instead (:class:`_WeightCasts`), with the same products.
* **Continuous batching.** :meth:`KVEngine.advance` decodes every running request one token per
  forward pass and returns as soon as any of them finishes; new requests join at the next call,
  so the batch is never held back by its slowest member.

Results depend only on the requests and the order of calls: rows, copies and batch composition
are chosen deterministically, and every request samples from its own seeded generator.

The buffers are one rectangle, as many rows as sequences cached and as long as the longest. A
caller that knows a sequence is over says so (:meth:`KVEngine.forget`); its row still serves as a
prefix, but when the rectangle next grows it is not carried over.

Cached rows are only valid for the weights that computed them. The engine notices in-place
weight updates (an optimiser step) through the parameters' version counters and drops its cache;
:meth:`KVEngine.clear` does it explicitly.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import time
from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentgym.models.backend import Generation, SamplingParams, decode_visible, stop_token_set
from agentgym.models.kv_cache import KVRows
from agentgym.models.prefix_attention import SharedPrefix, shared_prefix, supports_shared_prefix, supports_stored_prefix

__all__ = ["DEFAULT_CAPACITY_GROWTH", "EngineStats", "KVEngine", "cache_keyword", "finish_reason", "sample_next"]

# Buffer capacities are rounded up to a multiple of this many tokens.
_CAPACITY_GRANULARITY = 256
DEFAULT_CAPACITY_GROWTH = 1.25
"""When the key/value buffers must grow, they grow at least by this factor: a quarter more than
before, not double (bench_memory.py: doubling left a GRPO step's buffers ~40 % unused)."""
# Prompt tokens (padding included) one batched prefill pass may carry.
_PREFILL_BATCH_TOKENS = 4096
# Decode passes with at most this many rows compute their linear layers as weight @ x.T.
_SKINNY_ROWS = 64
# Shared-prefix decode attention pays off from this many shared tokens on.
_MIN_SHARED_PREFIX = 64


def sample_next(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, generators: Sequence[torch.Generator]) -> tuple[list[int], list[float]]:
    """Draw one token per row of ``logits`` ``[B, V]`` and return (ids, logprobs under the sampling distribution).

    Rows with temperature 0 are decoded greedily and report the logprob under the untempered distribution.
    Row ``i`` draws with ``generators[i]`` only, so its token does not depend on the other rows.
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
    # The Gumbel-max trick: argmax(log p + G) with G = -log(-log U) is a draw from p. Unlike
    # inverse-CDF sampling, whose boundaries all move when any probability moves, the draw only
    # changes when two candidates' scores tie, so float rounding differences between two ways of
    # computing the same logits (with or without the cache) almost never change a sampled token.
    # Each row uses only its own generator.
    uniforms = torch.stack([torch.rand(logp.shape[-1], generator=g, device=logp.device) for g in generators])
    drawn = (logp - (-uniforms.log()).log()).argmax(dim=-1)
    tokens = torch.where(greedy, logp.argmax(dim=-1), drawn)
    chosen = logp.gather(-1, tokens[:, None])[:, 0]
    return [int(t) for t in tokens.tolist()], [float(x) for x in chosen.tolist()]


def finish_reason(tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int], stop_ids: frozenset[int], stop: Sequence[str], limit: int) -> str | None:
    """Why a completion ending in ``token_ids`` is over (``"stop"`` or ``"length"``), or None if it goes on."""
    if token_ids[-1] in stop_ids:
        return "stop"
    if stop:
        # A character is at most 4 bytes and a token at least 1, so this tail holds any stop string
        # that the newest token completed (an earlier occurrence would already have ended the completion).
        window = 4 * max(len(s) for s in stop) + 1
        tail = tokenizer.decode(list(token_ids[-window:]), skip_special_tokens=False)
        if any(s in tail for s in stop):
            return "stop"
    if len(token_ids) >= limit:
        return "length"
    return None


@dataclass
class EngineStats:
    """Counters of the work an engine did (cumulative; see :meth:`KVEngine.reset_stats`).

    Attributes:
        prompt_tokens: prompt tokens requested.
        reused_tokens: prompt tokens whose keys/values came from the cache instead of a forward pass.
        prefilled_tokens: prompt tokens run through the model.
        decoded_tokens: tokens sampled.
        prefill_s: seconds in prefill forward passes.
        decode_s: seconds in decode forward passes and sampling.
        decode_steps: decode forward passes.
        decode_read_bytes: the bytes those passes had to read at the least: the weights once per
            pass and every running row's cached keys and values (the decode roofline's numerator).
        peak_cache_bytes: largest size the key/value buffers reached.
        stored_prefix_tokens: the longest prefix stored once for all rows (0: none was).
    """

    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefilled_tokens: int = 0
    decoded_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    decode_steps: int = 0
    decode_read_bytes: int = 0
    peak_cache_bytes: int = 0
    stored_prefix_tokens: int = 0


@dataclass(eq=False)
class _Request:
    key: Hashable
    prompt: tuple[int, ...]
    params: SamplingParams
    limit: int  # max_new_tokens, lowered when the model's context would run out first
    stop_ids: frozenset[int]
    generator: torch.Generator
    row: int = -1
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


class _WeightCasts:
    """Copies of the weights in the dtype autocast multiplies in, each made once per weights version.

    Under autocast a linear layer casts its float32 weight to bfloat16 in every forward pass: for a
    decode pass of the bundled model that is 540 MB read and 270 MB written before the product
    reads the copy. The product is the same whichever makes the cast, so the tokens do not change;
    the copies live as long as the engine's cache (:meth:`KVEngine.clear` drops them).
    """

    def __init__(self) -> None:
        self._copies: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}  # id -> (weight, version, copy)

    def __call__(self, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        entry = self._copies.get(id(weight))
        if entry is None or entry[0] is not weight or entry[1] != weight._version or entry[2].dtype != dtype:
            entry = (weight, weight._version, weight.detach().to(dtype))
            self._copies[id(weight)] = entry
        return entry[2]

    def clear(self) -> None:
        self._copies.clear()


@contextlib.contextmanager
def _engine_linears(device: torch.device, *, skinny: bool, casts: _WeightCasts | None) -> Iterator[None]:
    """Route ``torch.nn.functional.linear`` inside the block through :func:`_decode_linear` when
    ``skinny`` (a decode pass of a few rows), and, under autocast to a narrower dtype, over the
    weights' copies in ``casts`` instead of a cast in every call.

    The switch is process-wide for the duration of one forward pass; the computations agree to
    float rounding (the skinny product) or exactly (the cast), so anything else that calls it
    meanwhile gets the same values.
    """
    dtype = torch.get_autocast_dtype(device.type) if casts is not None and torch.is_autocast_enabled(device.type) else None
    if not skinny and dtype is None:
        yield
        return
    product = _decode_linear if skinny else _linear

    def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if dtype is not None and casts is not None and weight.dtype != dtype and weight.dtype.is_floating_point:
            weight = casts(weight, dtype)
        return product(input, weight, bias)

    functional = torch.nn.functional
    functional.linear = linear
    try:
        yield
    finally:
        functional.linear = _linear


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def cache_keyword(model: torch.nn.Module) -> str:
    """The forward keyword that takes the cache: ``cache`` in newer transformers, ``past_key_values`` before."""
    # A peft model's get_base_model() is the transformers model it wraps (a method that torch's
    # Module.__getattr__ annotation, for parameters and submodules, does not describe).
    get_base_model = getattr(model, "get_base_model", None)
    base = get_base_model() if get_base_model is not None else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class KVEngine:
    """Schedules generation requests over one model with key/value reuse (see the module docstring).

    Args:
        model: a causal LM in eval mode.
        tokenizer: its tokenizer (stop strings and visible text).
        max_rows: requests decoded together at most (more wait for a row).
        max_cache_bytes: soft budget for the key/value buffers; requests wait rather than grow past
            it, unless nothing else is running.
        prefill_chunk: prompt tokens per prefill forward pass at most (bounds activation memory).
        pad_token_id: token fed to rows that sit out a decode pass.
        capacity_growth: when the buffers must grow, their capacity becomes at least this many
            times the current one (2.0 was the rule before; see :data:`DEFAULT_CAPACITY_GROWTH`).
        store_prefix: store a prefix all requests share once (the default) instead of in every
            row; only for models whose attention allows it (:func:`supports_stored_prefix`).
        cast_weights: under autocast, multiply with copies of the weights cast once (the default)
            rather than cast in every pass; the same tokens either way.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_rows: int,
        max_cache_bytes: int,
        prefill_chunk: int = 2048,
        pad_token_id: int = 0,
        capacity_growth: float = DEFAULT_CAPACITY_GROWTH,
        store_prefix: bool = True,
        cast_weights: bool = True,
    ) -> None:
        config = model.config
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
        kv_heads = getattr(text_config, "num_key_value_heads", None) or text_config.num_attention_heads
        parameter = next(model.parameters())
        self.model = model
        self.tokenizer = tokenizer
        self.max_rows = max_rows
        self.max_cache_bytes = max_cache_bytes
        self.prefill_chunk = prefill_chunk
        self.pad_token_id = pad_token_id
        if not capacity_growth >= 1:
            raise ValueError(f"capacity_growth must be >= 1, got {capacity_growth}")
        self.capacity_growth = capacity_growth
        self.rows = KVRows(text_config.num_hidden_layers, kv_heads, head_dim, dtype=parameter.dtype, device=parameter.device)
        self.stats = EngineStats()
        self._weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self._cache_keyword = cache_keyword(model)
        self._context: int | None = getattr(text_config, "max_position_embeddings", None)
        eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
        self._model_eos: tuple[int, ...] = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        self._waiting: deque[_Request] = deque()
        self._tokens: list[list[int]] = []  # per row: the tokens whose keys/values it holds
        self._owner: list[_Request | None] = []  # per row: the request decoding in it
        self._used: list[int] = []  # per row: tick of last use (least recently used rows are evicted first)
        self._last_key: list[Hashable] = []  # per row: the key of the last request placed in it
        self._spent: list[bool] = []  # per row: its sequence is over (see forget); not kept when the buffers grow
        self._tick = 0
        self._weights = self._weights_version()
        self._prefix_attention = supports_shared_prefix(model)
        self.store_prefix = store_prefix and supports_stored_prefix(model)
        self._prefix_tokens: tuple[int, ...] = ()
        self.cast_weights = cast_weights
        self._casts = _WeightCasts()
        self._batch_prefix: tuple[tuple[tuple[int, int], ...], SharedPrefix | None] = ((), None)  # ((row, id(owner)), ...), plan

    # -- public interface ------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet returned by :meth:`advance`."""
        return len(self._waiting) + sum(owner is not None for owner in self._owner)

    def submit(self, key: Hashable, prompt: Sequence[int], params: SamplingParams) -> None:
        """Queue a request; :meth:`advance` returns its :class:`Generation` under ``key``."""
        prompt = tuple(int(t) for t in prompt)
        limit = params.max_new_tokens
        if self._context is not None:
            if len(prompt) >= self._context:
                raise ValueError(f"a prompt has {len(prompt)} tokens; the model's context is {self._context}")
            limit = min(limit, self._context - len(prompt))
        generator = torch.Generator(device=self.rows.device)
        generator.manual_seed(params.seed)
        stop_ids = stop_token_set(self.tokenizer, (*self._model_eos, *params.stop_token_ids))
        self._waiting.append(_Request(key, prompt, params, limit, stop_ids, generator))

    @torch.inference_mode()
    def advance(self) -> list[tuple[Hashable, Generation]]:
        """Admit waiting requests, then decode until at least one request finishes; return the finished ones."""
        if not self.in_flight:
            return []
        self._drop_stale_cache()
        finished = self._admit()
        while not finished:
            finished = self._decode_step()
        self.stats.peak_cache_bytes = max(self.stats.peak_cache_bytes, self.rows.nbytes)
        return [(request.key, self._generation(request)) for request in finished]

    def forget(self, key: Hashable) -> None:
        """Say that the finished request ``key`` was its sequence's last: no request will continue
        its row. The row still serves as a prefix, and is taken like any idle row; but when the
        buffers next grow, it is not carried over (a rectangle as long as the longest live sequence
        need not hold the sequences that are over). Nothing happens if another request has taken
        the row since."""
        for r, last in enumerate(self._last_key):
            if last == key and self._owner[r] is None:
                self._spent[r] = True

    def clear(self) -> None:
        """Forget every cached row (call after changing the weights in a way version counters miss)."""
        if any(owner is not None for owner in self._owner):
            raise RuntimeError("cannot clear the cache while requests are running")
        self.rows.clear()
        self._casts.clear()
        self._prefix_tokens, self._batch_prefix = (), ((), None)
        self._tokens, self._owner, self._used, self._last_key, self._spent = [], [], [], [], []

    def reset_stats(self) -> None:
        """Zero the counters in :attr:`stats`."""
        self.stats = EngineStats()

    # -- rows ------------------------------------------------------------------------------------

    def _weights_version(self) -> int:
        return sum(p._version for p in self.model.parameters())

    def _drop_stale_cache(self) -> None:
        version = self._weights_version()
        if version != self._weights and not any(owner is not None for owner in self._owner):
            self.clear()
        self._weights = version

    def _free_rows(self, reserved: set[int]) -> list[int]:
        """Rows a new request may take: empty ones first, then cached ones, least recently used first."""
        idle = [r for r in range(self.rows.num_rows) if self._owner[r] is None and r not in reserved]
        return sorted(idle, key=lambda r: (bool(self._tokens[r]), self._used[r], r))

    def _grow(self, rows: int, capacity: int, kept: Sequence[int] | None = None) -> dict[int, int] | None:
        """Make room for ``rows`` rows of ``capacity`` tokens, keeping only the rows ``kept`` (in
        that order, as the first rows) when given; returns old row -> new row then, else None (no
        row moved).

        Capacity grows to what the batch needs, or to ``capacity_growth`` times the current
        capacity when that is more and the budget allows (so a conversation growing by a turn at a
        time does not reallocate every turn).
        """
        if capacity > self.rows.capacity:
            step = _CAPACITY_GRANULARITY
            grown = -(-max(capacity, math.ceil(self.capacity_growth * self.rows.capacity)) // step) * step
            if self._context is not None:
                grown = min(grown, self._context + 1)
            capacity = grown if self._fits(rows, grown) else -(-capacity // step) * step
        moved: dict[int, int] | None = None
        if kept is None:
            self.rows.reserve(rows, capacity)
        else:
            moved = {old: new for new, old in enumerate(kept)}
            self.rows.regrow(kept, rows, capacity)
            self._tokens = [self._tokens[r] for r in kept]
            self._owner = [self._owner[r] for r in kept]
            self._used = [self._used[r] for r in kept]
            self._last_key = [self._last_key[r] for r in kept]
            self._spent = [self._spent[r] for r in kept]
            for request in self._owner:
                if request is not None:
                    request.row = moved[request.row]
        grown = self.rows.num_rows - len(self._tokens)
        self._tokens.extend([] for _ in range(grown))
        self._owner.extend([None] * grown)
        self._used.extend([0] * grown)
        self._last_key.extend([None] * grown)
        self._spent.extend([False] * grown)
        return moved

    def _rows_to_keep(self, admitted: Sequence[_Request], continuations: dict[int, int]) -> list[int] | None:
        """The rows to carry over when the buffers are reallocated for ``admitted``: all but the spent
        idle ones, except that a row a request continues, or the one a new request will copy its
        prefix from, stays. None when every row stays."""
        needed = set(continuations.values())
        for request in admitted:
            source = None if id(request) in continuations else self._source(np.asarray(request.prompt, dtype=np.int64))[0]
            if source is not None:
                needed.add(source)
        kept = [r for r in range(self.rows.num_rows) if not self._spent[r] or self._owner[r] is not None or r in needed]
        return kept if len(kept) < self.rows.num_rows else None

    def _fits(self, rows: int, capacity: int) -> bool:
        return self.rows.bytes_for(rows, max(capacity, self.rows.capacity)) <= self.max_cache_bytes

    # -- the stored prefix -----------------------------------------------------------------------

    def _settle_prefix(self) -> None:
        """Before admitting: store the prefix the next requests share when the cache is empty, or
        keep only the part of the stored one that every next request starts with."""
        candidates = [q.prompt for q in itertools.islice(self._waiting, self.max_rows)]
        if not self.store_prefix or not candidates:
            return
        # Every request keeps at least one token of its own (its first token's logits).
        longest = min(len(prompt) for prompt in candidates) - 1
        if self.rows.base:
            stored = np.asarray(self._prefix_tokens, dtype=np.int64)
            shared = min(longest, *(_common_prefix(np.asarray(p[: self.rows.base], dtype=np.int64), stored) for p in candidates))
            if shared < self.rows.base:
                self._lower_prefix(shared if shared >= _MIN_SHARED_PREFIX else 0)
        elif len(candidates) > 1 and not any(self._tokens):
            first = np.asarray(candidates[0][:longest], dtype=np.int64)
            shared = min(_common_prefix(first, np.asarray(p[:longest], dtype=np.int64)) for p in candidates[1:])
            if shared >= _MIN_SHARED_PREFIX:
                self._compute_prefix(candidates[0][:shared])

    def _compute_prefix(self, tokens: Sequence[int]) -> None:
        """Prefill ``tokens`` once, in a row of their own, and store their keys and values as the
        prefix every row starts with."""
        started = time.perf_counter()
        scratch = KVRows(self.rows.num_layers, self.rows.kv_heads, self.rows.head_dim, dtype=self.rows.dtype, device=self.rows.device)
        scratch.reserve(1, len(tokens) + 1)
        for start in range(0, len(tokens), self.prefill_chunk):
            self._forward(slice(0, 1), [tokens[start : start + self.prefill_chunk]], store=scratch)
        self.rows.store_prefix([k[:, :, : len(tokens)] for k in scratch.keys], [v[:, :, : len(tokens)] for v in scratch.values])
        self._prefix_tokens = tuple(tokens)
        self.stats.prefilled_tokens += len(tokens)
        self.stats.stored_prefix_tokens = max(self.stats.stored_prefix_tokens, len(tokens))
        self.stats.prefill_s += time.perf_counter() - started

    def _lower_prefix(self, base: int) -> None:
        """Keep the first ``base`` tokens of the stored prefix; the rows take the rest."""
        self.rows.lower_base(base)
        self._prefix_tokens = self._prefix_tokens[:base]
        self._batch_prefix = ((), None)

    def _stored_prefix(self) -> SharedPrefix | None:
        """The plan every pass over the rows reads the stored prefix with (None: none is stored)."""
        return SharedPrefix(length=self.rows.base, keys=self.rows.prefix_keys, values=self.rows.prefix_values) if self.rows.base else None

    def _continuation_row(self, request: _Request, taken: set[int]) -> int | None:
        """A cached row whose tokens start the request's prompt (its own previous turn), if any."""
        best, best_length = None, 0
        for r, tokens in enumerate(self._tokens):
            if self._owner[r] is None and r not in taken and best_length < len(tokens) < len(request.prompt) and request.prompt[: len(tokens)] == tuple(tokens):
                best, best_length = r, len(tokens)
        return best

    # -- admission and prefill -------------------------------------------------------------------

    def _admit(self) -> list[_Request]:
        """Give waiting requests rows (first come, first served) and prefill them; return any already finished."""
        if not self._waiting:
            return []
        self._settle_prefix()
        admitted: list[_Request] = []
        continuations: dict[int, int] = {}  # id(request) -> its own cached row, taken over in place
        busy = sum(owner is not None for owner in self._owner)
        idle = self.rows.num_rows - busy
        capacity = self.rows.capacity
        for request in self._waiting:
            if busy + len(admitted) >= self.max_rows:
                break
            row = self._continuation_row(request, set(continuations.values()))
            reserved = len(continuations) + (row is not None)
            fresh = len(admitted) + 1 - reserved
            rows_after = self.rows.num_rows + max(0, fresh - (idle - reserved))
            needed = max(capacity, len(request.prompt) + request.limit + 1)
            if (admitted or busy) and not self._fits(rows_after, needed):
                break
            if row is not None:
                continuations[id(request)] = row
            admitted.append(request)
            capacity = needed
        for _ in admitted:
            self._waiting.popleft()
        fresh = len(admitted) - len(continuations)
        kept = self._rows_to_keep(admitted, continuations) if capacity > self.rows.capacity else None
        if kept is not None:
            idle = len(kept) - busy
        moved = self._grow((self.rows.num_rows if kept is None else len(kept)) + max(0, fresh - (idle - len(continuations))), capacity, kept)
        if moved is not None:
            continuations = {request: moved[row] for request, row in continuations.items()}
        self.stats.peak_cache_bytes = max(self.stats.peak_cache_bytes, self.rows.nbytes)

        shared_logits: dict[int, torch.Tensor] = {}
        ordered = sorted(admitted, key=lambda q: q.prompt)
        # Continuations only extend their own rows, so one batched pass prefills all of them.
        extending = [(q, continuations[id(q)]) for q in ordered if id(q) in continuations]
        for request, row in extending:
            self._place(request, row, len(self._tokens[row]))
        logits = self._forward_prompts({row: list(q.prompt[len(self._tokens[row]) :]) for q, row in extending})
        for request, row in extending:
            self._first_token(request, logits[row])
        # New sequences in token order: a request's longest shared prefix is usually with the one just
        # before it, which is already cached when its turn comes.
        continuing_rows = set(continuations.values())
        for request in ordered:
            if id(request) not in continuations:
                self._start_fresh(request, continuing_rows, shared_logits)
        finished = [q for q in ordered if q.finish_reason is not None]
        for request in finished:
            self._release(request)
        return finished

    def _source(self, prompt: np.ndarray) -> tuple[int | None, int]:
        """The row sharing the longest cached prefix with ``prompt``, and that length."""
        best, best_length = None, 0
        for r, tokens in enumerate(self._tokens):
            if len(tokens) <= best_length:
                continue
            length = _common_prefix(prompt, np.asarray(tokens, dtype=np.int64))
            if length > best_length:
                best, best_length = r, length
        return best, best_length

    def _take_row(self, source: int | None, reserved: set[int]) -> int:
        """A row for a new sequence: an empty or evictable row, never one still needed."""
        candidates = self._free_rows(reserved)
        if source is not None and self._owner[source] is None and len(candidates) == 1 and candidates[0] == source:
            return source  # the only row left is the source itself: keep its prefix in place
        rest = [r for r in candidates if r != source]
        if not rest:
            raise RuntimeError("no key/value row is free")  # _admit sized the rows; this is a bug
        return rest[0]

    def _place(self, request: _Request, row: int, keep: int) -> None:
        """Give ``row`` to ``request``, keeping the first ``keep`` cached tokens (a prefix of its prompt)."""
        self.rows.lengths[row] = keep
        del self._tokens[row][keep:]
        self._owner[row] = request
        self._last_key[row], self._spent[row] = request.key, False
        request.row = row
        self.stats.prompt_tokens += len(request.prompt)
        self.stats.reused_tokens += keep

    def _start_fresh(self, request: _Request, reserved: set[int], shared_logits: dict[int, torch.Tensor]) -> None:
        """Start a request in a row of its own, from the longest prefix any row has cached."""
        prompt = request.prompt
        source, shared = self._source(np.asarray(prompt, dtype=np.int64))
        row = self._take_row(source, reserved)
        # Identical prompts prefilled in this admission share the logits after their last token.
        known = source is not None and shared == len(prompt) == len(self._tokens[source])
        logits = shared_logits.get(source) if source is not None and known else None
        keep = shared if logits is not None else min(shared, len(prompt) - 1)
        if source is not None and keep > self.rows.base:
            self.rows.copy_prefix(source, row, keep)
            self._tokens[row] = list(prompt[:keep])
        elif self.rows.base:  # the stored prefix: every row starts with it
            keep = self.rows.base
            self._tokens[row] = list(self._prefix_tokens)
        shared_logits.pop(row, None)
        self._place(request, row, keep)
        if logits is None:
            logits = self._forward_prompts({row: list(prompt[keep:])})[row]
        shared_logits[row] = logits
        self._first_token(request, logits)

    def _first_token(self, request: _Request, logits: torch.Tensor) -> None:
        ids, lps = sample_next(
            logits[None],
            torch.tensor([request.params.temperature_at(0)], device=logits.device),
            torch.tensor([request.params.top_p], device=logits.device),
            [request.generator],
        )
        self._append(request, ids[0], lps[0])

    def _forward_prompts(self, suffixes: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Run each row's prompt tokens through the model after its cached ones; the logits after the last.

        Rows that lie close together go through one left-padded pass; long prompts go alone, in chunks.
        """
        started = time.perf_counter()
        logits: dict[int, torch.Tensor] = {}
        batchable = sorted(r for r, t in suffixes.items() if len(t) <= _PREFILL_BATCH_TOKENS // 4)
        groups: list[list[int]] = []
        for row in batchable:
            group = groups[-1] if groups else None
            if group is not None:
                span = row + 1 - group[0]
                width = max(len(suffixes[r]) for r in [*group, row])
                if span - len(group) - 1 <= len(group) // 4 and span * width <= _PREFILL_BATCH_TOKENS:
                    group.append(row)
                    continue
            groups.append([row])
        for group in groups:
            rows = slice(group[0], group[-1] + 1)
            tokens = [suffixes.get(r, []) if r in group else [] for r in range(rows.start, rows.stop)]
            out = self._forward(rows, tokens)
            for r in group:
                logits[r] = out[r - rows.start]
                self._tokens[r].extend(suffixes[r])
        for row in sorted(set(suffixes) - set(batchable)):
            row_tokens = suffixes[row]
            for start in range(0, len(row_tokens), self.prefill_chunk):
                chunk = row_tokens[start : start + self.prefill_chunk]
                logits[row] = self._forward(slice(row, row + 1), [chunk])[0]
                self._tokens[row].extend(chunk)
        self.stats.prefilled_tokens += sum(map(len, suffixes.values()))
        self.stats.prefill_s += time.perf_counter() - started
        return logits

    def _forward(self, rows: slice, tokens: Sequence[Sequence[int]], prefix: SharedPrefix | None = None, store: KVRows | None = None) -> torch.Tensor:
        """One forward pass over ``rows`` of ``store`` (the engine's rows when None), each appending
        its ``tokens`` (none: it sits out). Logits ``[rows, V]`` after each row's last token.

        ``prefix``: the tokens every row shares (decode passes only), read once by the attention;
        the stored prefix, when there is one, is read by every pass.
        """
        store = self.rows if store is None else store
        if store is self.rows and self.rows.base:
            prefix = self._stored_prefix()
        counts = [len(t) for t in tokens]
        width = max(counts)
        view = store.view(rows, counts)
        input_ids = torch.full((len(tokens), width), self.pad_token_id, dtype=torch.long, device=store.device)
        for i, ids in enumerate(tokens):
            if ids:
                input_ids[i, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        skinny = width == 1 and len(tokens) <= _SKINNY_ROWS
        with shared_prefix(self.model, prefix), _engine_linears(store.device, skinny=skinny, casts=self._casts if self.cast_weights else None):
            output = self.model(
                input_ids=input_ids,
                attention_mask=view.attention_mask(store.dtype),
                position_ids=view.position_ids(),
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_keyword: view},
            )
        for i, r in enumerate(range(rows.start, rows.stop)):
            store.lengths[r] += counts[i]
        return output.logits[:, -1, :]

    # -- decoding --------------------------------------------------------------------------------

    def _decode_step(self) -> list[_Request]:
        """Feed every running request its last sampled token and sample the next one."""
        started = time.perf_counter()
        self._compact()
        running = [r for r, owner in enumerate(self._owner) if owner is not None]
        lo, hi = running[0], running[-1] + 1
        requests = [self._owner[r] for r in range(lo, hi)]
        active = [q is not None for q in requests]
        tokens = [[q.token_ids[-1]] if q is not None else [] for q in requests]
        logits = self._forward(slice(lo, hi), tokens, self._shared_prefix(lo, hi))
        live = [q for q in requests if q is not None]
        for q in live:
            self._tokens[q.row].append(q.token_ids[-1])
        index = torch.tensor([i for i, a in enumerate(active) if a], device=logits.device)
        ids, lps = sample_next(
            logits[index],
            torch.tensor([q.params.temperature_at(len(q.token_ids)) for q in live], device=logits.device),
            torch.tensor([q.params.top_p for q in live], device=logits.device),
            [q.generator for q in live],
        )
        finished = []
        for q, token, lp in zip(live, ids, lps, strict=True):
            self._append(q, token, lp)
            if q.finish_reason is not None:
                finished.append(q)
                self._release(q)
        self.stats.decode_steps += 1
        cached = self.rows.base + sum(self.rows.lengths[q.row] - self.rows.base for q in live)
        self.stats.decode_read_bytes += self._weight_bytes + cached * self.rows.bytes_per_token
        self.stats.decode_s += time.perf_counter() - started
        return finished

    def _shared_prefix(self, lo: int, hi: int) -> SharedPrefix | None:
        """The prefix all running rows in ``[lo, hi)`` share, when long enough to be worth reading once.

        Recomputed only when the running rows change: rows only ever append, so a shared prefix
        stays shared while they run.
        """
        running = tuple(r for r in range(lo, hi) if self._owner[r] is not None)
        if not self._prefix_attention or len(running) < 2 or self.rows.base:
            return None
        signature = tuple((r, id(self._owner[r])) for r in running)
        if self._batch_prefix[0] != signature:
            first = np.asarray(self._tokens[running[0]], dtype=np.int64)
            length = len(first)
            for r in running[1:]:
                length = _common_prefix(first[:length], np.asarray(self._tokens[r][:length], dtype=np.int64))
            plan = SharedPrefix(length=length, row=running[0] - lo) if length >= _MIN_SHARED_PREFIX else None
            self._batch_prefix = (signature, plan)
        return self._batch_prefix[1]

    def _compact(self) -> None:
        """Move running requests down into idle rows when idle rows inside the batch waste too much."""
        running = [r for r, owner in enumerate(self._owner) if owner is not None]
        span = running[-1] + 1 - running[0]
        if span - len(running) <= max(2, len(running) // 4):
            return
        targets = iter(r for r in range(running[0], running[-1] + 1) if self._owner[r] is None)
        for source in reversed(running):
            target = next(targets, None)
            if target is None or target > source:
                break
            request = self._owner[source]
            assert request is not None
            self.rows.copy_prefix(source, target, self.rows.lengths[source])
            self._tokens[target], self._tokens[source] = self._tokens[source], []
            self._owner[target], self._owner[source] = request, None
            self._last_key[target], self._last_key[source] = self._last_key[source], None
            self._spent[target] = self._spent[source] = False  # the target may have held a sequence that was over
            self.rows.lengths[source] = 0
            request.row = target

    def _append(self, request: _Request, token: int, logprob: float) -> None:
        request.token_ids.append(token)
        request.logprobs.append(logprob)
        self.stats.decoded_tokens += 1
        request.finish_reason = finish_reason(self.tokenizer, request.token_ids, request.stop_ids, request.params.stop, request.limit)

    def _release(self, request: _Request) -> None:
        """The request's row stays cached (its tokens minus the last sampled one, never fed back)."""
        self._owner[request.row] = None
        self._tick += 1
        self._used[request.row] = self._tick

    def _generation(self, request: _Request) -> Generation:
        return Generation(
            token_ids=tuple(request.token_ids),
            logprobs=tuple(request.logprobs),
            text=decode_visible(self.tokenizer, request.token_ids),
            finish_reason="stop" if request.finish_reason == "stop" else "length",
        )


_linear = torch.nn.functional.linear


def _decode_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` for a handful of rows, as ``weight @ input.T``: MKL's kernel for that shape is about
    twice as fast on CPU as the one ``input @ weight.T`` gets at 8 rows. Its parameters are named as
    ``F.linear``'s, so that calls passing them by keyword work while it stands in."""
    x = input
    rows = x.numel() // x.shape[-1] if x.dim() else 0
    if x.device.type != "cpu" or rows == 0 or rows > _SKINNY_ROWS:
        return _linear(x, weight, bias)
    # Contiguous again: fused attention kernels read the last dimension with unit stride.
    out = torch.mm(weight, x.reshape(rows, x.shape[-1]).t()).t().contiguous()
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])
