"""Decode attention that reads a prefix shared by the whole batch once (cascade attention).

When every sequence of a decode batch starts with the same tokens — the environment's system
prompt and tool schemas, a GRPO group's question — their cached keys and values for that prefix
are identical. Plain attention still reads them once per sequence, and at agent prompt lengths
that dominates the memory traffic of a decode step (8 sequences of 1,400 tokens read about as many
bytes of keys and values as the weights of a 135M model). Here the prefix is read once for the
whole batch and combined exactly with each sequence's own suffix:

    softmax([s_prefix, s_suffix]) @ [V_prefix; V_suffix]
        = (exp(s_prefix - m) @ V_prefix + exp(s_suffix - m) @ V_suffix) / (sum exp(s_prefix - m) + sum exp(s_suffix - m))

with ``m`` the row maximum over both parts. The result equals ordinary attention up to float
rounding.

:func:`shared_prefix` switches it on for one forward pass of a transformers model whose attention
is ``sdpa``: the model's attention dispatch is pointed at :func:`prefix_attention` for that call
and back afterwards. Anything it does not handle (prefill, sliding windows, soft-capping) goes to
transformers' own ``sdpa`` function unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["ATTENTION_NAME", "SharedPrefix", "prefix_attention", "shared_prefix", "supports_shared_prefix"]

ATTENTION_NAME = "agentgym_shared_prefix"


@dataclass(frozen=True)
class SharedPrefix:
    """The prefix every row of the batch shares.

    Attributes:
        length: shared tokens at the start of every row.
        row: a batch row whose cached keys and values for them are read (any row holds the same).
    """

    length: int
    row: int


_ACTIVE: contextvars.ContextVar[SharedPrefix | None] = contextvars.ContextVar("agentgym_shared_prefix", default=None)


def _sdpa() -> Any:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: shared-prefix decode attention, else ``sdpa``.

    ``query`` is ``[B, H, 1, D]``, ``key``/``value`` ``[B, H_kv, L, D]`` and ``attention_mask`` an
    additive ``[B, 1, 1, L]`` mask that allows every prefix position of every row.
    """
    plan = _ACTIVE.get()
    usable = (
        plan is not None
        and query.shape[2] == 1
        and attention_mask is not None
        and attention_mask.dim() == 4
        and kwargs.get("softcap") is None
        and getattr(module, "sliding_window", None) is None
        and kwargs.get("sliding_window") is None
        and 0 < plan.length < key.shape[2]
    )
    if not usable:
        return _sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    assert plan is not None and attention_mask is not None
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    p = plan.length
    # Query head h reads key/value head h // group (transformers' repeat_kv order), so the
    # batch's queries of one key/value head form one [batch * group] block against the prefix.
    q = query.reshape(batch, kv_heads, group, dim)
    q_prefix = q.permute(1, 0, 2, 3).reshape(1, kv_heads, batch * group, dim)
    row = slice(plan.row, plan.row + 1)
    fused = query.device.type == "cpu"
    prefix_out, prefix_lse = _attend(q_prefix, key[row, :, :p], value[row, :, :p], None, scale, fused=fused)
    prefix_out = prefix_out.reshape(kv_heads, batch, group, dim).permute(1, 0, 2, 3)
    prefix_lse = prefix_lse.reshape(kv_heads, batch, group).permute(1, 0, 2)
    # Each row's own suffix, with its mask (rows end at different lengths).
    suffix_out, suffix_lse = _attend(q, key[:, :, p:], value[:, :, p:], attention_mask[:, :, :, p:], scale, fused=fused)
    # Merge the two softmax parts by their log-sum-exps.
    total = torch.logaddexp(prefix_lse, suffix_lse)
    out = prefix_out * (prefix_lse - total).exp()[..., None] + suffix_out * (suffix_lse - total).exp()[..., None]
    # transformers' layout: [batch, query length, heads, dim].
    return out.to(query.dtype).reshape(batch, 1, heads, dim), None


def _attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float, *, fused: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output ``[B, H, Q, D]`` (float32) and the log-sum-exp of each query's scores ``[B, H, Q]``.

    ``fused`` uses torch's CPU flash-attention kernel, which returns the log-sum-exp with the output.
    """
    if fused:
        # The fused kernel needs one dtype (under autocast the queries arrive in bf16, the cached
        # keys in the weights' dtype) and unit stride in the last dimension.
        query, key, value = (t.to(key.dtype) if t.stride(-1) == 1 else t.to(key.dtype).contiguous() for t in (query, key, value))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, False, attn_mask=None if mask is None else mask.to(query.dtype), scale=scale
        )
        return out.float(), lse.float()
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask.float()
    lse = scores.logsumexp(-1)
    return torch.matmul((scores - lse[..., None]).exp(), value.float()), lse


_REGISTERED = False


def supports_shared_prefix(model: torch.nn.Module) -> bool:
    """Whether :func:`shared_prefix` can be used with ``model`` (plain ``sdpa`` attention, transformers' dispatch)."""
    global _REGISTERED
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation_internal", None) != "sdpa":
        return False
    try:
        from transformers import AttentionInterface
    except ImportError:
        return False
    if not _REGISTERED:
        AttentionInterface.register(ATTENTION_NAME, prefix_attention)
        _REGISTERED = True
    return True


@contextlib.contextmanager
def shared_prefix(model: PreTrainedModel, plan: SharedPrefix | None) -> Iterator[None]:
    """Run the model's decode attention with ``plan`` inside the block (nothing changes when ``plan`` is None).

    Only for forward passes that hand the model a ready 4D mask (transformers then builds none of
    its own for the switched implementation name).
    """
    if plan is None:
        yield
        return
    config = model.config
    token = _ACTIVE.set(plan)
    config._attn_implementation_internal = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation_internal = "sdpa"
        _ACTIVE.reset(token)
