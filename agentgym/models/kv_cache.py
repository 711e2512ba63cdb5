"""Key/value storage for the local engine: one row per cached sequence, reused across turns.

:class:`KVRows` keeps, for every layer, a key and a value buffer of shape
``[rows, kv_heads, capacity + 1, head_dim]``. Row ``r`` holds the keys and values of the tokens
``tokens(r)`` at positions ``0 .. length(r) - 1``, contiguously, so a sequence that grows by a turn
only appends. Column ``capacity`` is scratch: rows that take part in a batched forward pass without
a token of their own write there and never read it back.

A forward pass sees the buffers through a :class:`RowsView`, which the transformers model calls
as its cache (``cache.update(keys, values, layer_idx)``): it writes each row's new keys and values
at that row's own offsets and returns the buffers up to the longest row, as a view when the rows
are contiguous. The attention mask that goes with it (:meth:`RowsView.attention_mask`) lets each
query see exactly the positions of its own row up to itself, so rows of different lengths share a
batch without padding in the middle of any sequence.

A prefix that every row starts with (an environment's system prompt and tool schemas, most of an
agent prompt's tokens) can be stored once instead of once per row (:meth:`KVRows.store_prefix`):
the rows' buffers then hold only the positions from ``base`` on, column ``c`` holding position
``base + c``, and the attention reads the stored prefix once for the whole batch
(:mod:`agentgym.models.prefix_attention`). Positions, lengths and capacity stay counted from the
start of the sequence; only the columns move.

Everything written past a row's length is finite (buffers start at zero), so masked positions can
never turn a softmax into NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["KVRows", "RowsView"]


class KVRows:
    """Per-layer key/value buffers with one row per cached sequence, after a prefix stored once.

    Args:
        num_layers: attention layers of the model.
        kv_heads: key/value heads per layer.
        head_dim: size of one head.
        dtype: buffer dtype (the model's).
        device: buffer device (the model's).
    """

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, *, dtype: torch.dtype, device: torch.device) -> None:
        self.num_layers = num_layers
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []
        self.capacity = 0
        self.base = 0
        self.prefix_keys: list[torch.Tensor] = []
        self.prefix_values: list[torch.Tensor] = []
        self._allocate(0, 0)

    @property
    def num_rows(self) -> int:
        """Rows allocated."""
        return len(self.lengths)

    @property
    def bytes_per_token(self) -> int:
        """Bytes one cached token takes over all layers (keys and values)."""
        return 2 * self.num_layers * self.kv_heads * self.head_dim * torch.empty((), dtype=self.dtype).element_size()

    @property
    def nbytes(self) -> int:
        """Bytes the buffers take now (the stored prefix included)."""
        return self.bytes_for(self.num_rows, self.capacity)

    def bytes_for(self, rows: int, capacity: int, base: int | None = None) -> int:
        """Bytes ``rows`` rows of ``capacity`` positions take after a stored prefix of ``base``
        tokens (the current one when None), the prefix included."""
        base = self.base if base is None else base
        return (rows * (capacity - base + 1) + base) * self.bytes_per_token

    def _allocate(self, rows: int, capacity: int, kept: Sequence[int] | None = None, base: int | None = None) -> None:
        """New buffers of ``rows`` rows of ``capacity`` positions after a stored prefix of ``base``
        tokens (unchanged when None; never above the current one while a row holds tokens), holding
        the old rows ``kept`` (all of them, in place, when None) as their first rows. A lower base
        moves the stored prefix's positions from ``base`` on into the front of every kept row."""
        old_base = self.base
        base = old_base if base is None else base
        shape = (rows, self.kv_heads, capacity - base + 1, self.head_dim)
        keep_len = max(0, min(capacity, self.capacity) - old_base)  # old columns carried over
        shift = old_base - base  # columns the stored prefix hands over to the rows
        in_place = kept is None
        kept = range(min(rows, self.num_rows)) if kept is None else kept
        if shift < 0 and any(self.lengths[r] for r in kept):
            raise ValueError("the stored prefix can only grow while no row holds tokens")
        if not self.keys:
            self.keys, self.values = [torch.empty(0)] * self.num_layers, [torch.empty(0)] * self.num_layers
        # One layer at a time, each old buffer dropped as soon as it is copied: growing holds the
        # new buffers and one old layer's, not two whole sets.
        for buffers, prefixes in ((self.keys, self.prefix_keys), (self.values, self.prefix_values)):
            for layer, old in enumerate(buffers):
                new = torch.zeros(shape, dtype=self.dtype, device=self.device)
                if shift > 0 and kept:
                    new[: len(kept), :, :shift] = prefixes[layer][:, :, base:old_base]
                if shift >= 0 and keep_len:  # (a growing prefix: the rows hold nothing to carry over)
                    if in_place:
                        new[: len(kept), :, shift : shift + keep_len] = old[: len(kept), :, :keep_len]
                    else:
                        for target, source in enumerate(kept):  # row by row: no gathered copy of the old rows
                            new[target, :, shift : shift + keep_len] = old[source, :, :keep_len]
                buffers[layer] = new
                del old
        if base < old_base:  # the rows took the rest
            self.prefix_keys = [k[:, :, :base].clone() for k in self.prefix_keys] if base else []
            self.prefix_values = [v[:, :, :base].clone() for v in self.prefix_values] if base else []
        self.base = base
        self.lengths = ([self.lengths[r] for r in kept] + [0] * rows)[:rows]
        self.capacity = capacity

    def reserve(self, rows: int, capacity: int) -> None:
        """Grow to at least ``rows`` rows of at least ``capacity`` tokens (never shrinks)."""
        if rows > self.num_rows or capacity > self.capacity:
            self._allocate(max(rows, self.num_rows), max(capacity, self.capacity))

    def regrow(self, kept: Sequence[int], rows: int, capacity: int) -> None:
        """Reallocate to ``rows`` rows (at least ``len(kept)``) of at least ``capacity`` tokens,
        keeping only the rows ``kept``, which become rows ``0 .. len(kept) - 1`` in that order."""
        self._allocate(max(rows, len(kept)), max(capacity, self.capacity), kept)

    def store_prefix(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
        """Store a prefix every row will start with: per layer its keys and values ``[1, kv_heads,
        length, head_dim]``. Only while no row holds tokens; the rows are reallocated to hold the
        positions after it."""
        if any(self.lengths):
            raise ValueError("a prefix can only be stored while no row holds tokens")
        base = keys[0].shape[2]
        self.prefix_keys = [k.to(self.dtype).contiguous() for k in keys]
        self.prefix_values = [v.to(self.dtype).contiguous() for v in values]
        self.base = 0  # the rows hold nothing: no column moves, and the new prefix is not trimmed
        self._allocate(self.num_rows, max(self.capacity, base), base=base)

    def lower_base(self, base: int) -> None:
        """Keep only the first ``base`` tokens of the stored prefix (0: none); every row takes the
        rest into its own buffers (for a sequence that does not start with the whole prefix)."""
        if base < self.base:
            self._allocate(self.num_rows, self.capacity, base=base)

    def clear(self) -> None:
        """Release every buffer and the stored prefix."""
        self.keys, self.values, self.lengths, self.capacity = [], [], [], 0
        self.prefix_keys, self.prefix_values, self.base = [], [], 0
        self._allocate(0, 0)

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Make ``target`` hold the first ``length`` cached tokens of ``source`` (at least the stored prefix's)."""
        if 0 < length < self.base:
            raise ValueError(f"a row holds at least the stored prefix's {self.base} tokens, not {length}")
        columns = length - self.base
        if source != target and columns > 0:
            for k, v in zip(self.keys, self.values, strict=True):
                k[target, :, :columns] = k[source, :, :columns]
                v[target, :, :columns] = v[source, :, :columns]
        self.lengths[target] = length

    def view(self, rows: slice, counts: Sequence[int]) -> RowsView:
        """A cache view for one forward pass over ``rows`` (a contiguous range).

        Args:
            rows: the rows in the batch, in order.
            counts: per row, how many new tokens it appends in this pass; the pass is as wide as the
                largest count and each row's tokens sit at the right end of it (left padding). Rows
                with 0 take part without tokens: they write to scratch and are not read back.
        """
        return RowsView(self, rows, counts)


class RowsView:
    """The cache object one forward pass hands to the model (see :class:`KVRows`)."""

    is_compileable = False

    def __init__(self, store: KVRows, rows: slice, counts: Sequence[int]) -> None:
        device = store.device
        self.store = store
        self.rows = rows
        starts = store.lengths[rows]
        if any(c and s < store.base for s, c in zip(starts, counts, strict=True)):
            raise ValueError(f"a row appends before the end of the stored prefix ({store.base} tokens)")
        width = max(counts)
        offsets = torch.arange(width, device=device)[None, :]
        pad = torch.tensor([width - c for c in counts], device=device)[:, None]
        first = torch.tensor(starts, device=device)[:, None]
        self._padding = offsets < pad
        # Sequence positions of the new tokens; left padding and rows without tokens write to the
        # scratch column.
        self.positions = first + offsets - pad
        # The buffer columns they are written to.
        self.columns = torch.where(self._padding, store.capacity - store.base, self.positions - store.base)
        kv_end = max((s + c for s, c in zip(starts, counts, strict=True) if c), default=store.base + 1)
        if kv_end > store.capacity:
            raise ValueError(f"a row needs {kv_end} positions; the buffers hold {store.capacity}")
        self.kv_length = kv_end - store.base  # columns the attention reads
        self._row_index = torch.arange(rows.start, rows.stop, device=device)[:, None]

    def attention_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[rows, 1, query, kv]`` over the rows' columns: each query sees its row's
        positions up to its own (and the whole stored prefix, which the mask does not cover).

        Padding queries see every position (their output is discarded; a fully masked row would be NaN).
        """
        kv = torch.arange(self.kv_length, device=self.positions.device)
        allowed = (kv[None, None, :] <= self.columns[:, :, None]) | self._padding[:, :, None]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def position_ids(self) -> torch.Tensor:
        """Rotary positions ``[rows, query]`` of the new tokens (0 for padding)."""
        return torch.where(self._padding, 0, self.positions)

    # -- the cache interface transformers' attention layers call ---------------------------------

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new keys/values ``[rows, heads, query, dim]`` and return the rows' cached ones up to the longest row."""
        keys, values = self.store.keys[layer_idx], self.store.values[layer_idx]
        keys[self._row_index, :, self.columns] = key_states.transpose(1, 2).to(keys.dtype)
        values[self._row_index, :, self.columns] = value_states.transpose(1, 2).to(values.dtype)
        return keys[self.rows, :, : self.kv_length], values[self.rows, :, : self.kv_length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions the attention sees before this pass's tokens (for code that asks)."""
        return self.store.base + self.kv_length - self.positions.shape[1]
