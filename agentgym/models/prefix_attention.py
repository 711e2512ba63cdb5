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

The prefix is either read from one row of the batch's own buffers (decode passes, where every row
holds a copy), or stored apart, once, with the rows' buffers holding only what follows it
(:meth:`agentgym.models.kv_cache.KVRows.store_prefix`). A stored prefix is read by every pass,
prefill chunks included: each query sees all of it (its own position comes after it), so only the
rows' part needs a mask.

:func:`shared_prefix` switches it on for one forward pass of a transformers model whose attention
is ``sdpa``: the model's attention dispatch is pointed at :func:`prefix_attention` for that call
and back afterwards. Anything it does not handle (prefill, sliding windows, soft-capping) goes to
transformers' own ``sdpa`` function unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["ATTENTION_NAME", "SharedPrefix", "prefix_attention", "shared_prefix", "supports_shared_prefix", "supports_stored_prefix"]

ATTENTION_NAME = "agentgym_shared_prefix"


@dataclass(frozen=True)
class SharedPrefix:
    """The prefix every row of the batch shares.

    Attributes:
        length: shared tokens at the start of every row.
        row: a batch row whose cached keys and values for them are read (any row holds the same);
            None when the prefix is stored apart (``keys``, ``values``) and the keys and values the
            attention gets hold only the positions after it.
        keys: when stored apart, per layer the prefix's keys ``[1, kv_heads, length, head_dim]``.
        values: the same for its values.
    """

    length: int
    row: int | None = None
    keys: Sequence[torch.Tensor] = ()
    values: Sequence[torch.Tensor] = ()


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
    """transformers attention function: shared-prefix attention, else ``sdpa``.

    ``query`` is ``[B, H, Q, D]``, ``key``/``value`` ``[B, H_kv, L, D]`` and ``attention_mask`` an
    additive ``[B, 1, Q, L]`` mask (over the positions after a stored prefix, when there is one).
    A prefix read from the batch's rows is used for decode passes (``Q == 1``) only.
    """
    plan = _ACTIVE.get()
    supported = (
        attention_mask is not None
        and attention_mask.dim() == 4
        and kwargs.get("softcap") is None
        and getattr(module, "sliding_window", None) is None
        and kwargs.get("sliding_window") is None
    )
    stored = plan is not None and plan.row is None  # every pass must read it from the plan
    if stored and not supported:
        raise RuntimeError("a stored prefix needs plain attention with a 4D mask (no sliding window, no soft-capping)")
    usable = plan is not None and supported and (stored or (query.shape[2] == 1 and 0 < plan.length < key.shape[2]))
    if not usable:
        return _sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    assert plan is not None and attention_mask is not None
    batch, heads, width, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    fused = query.device.type == "cpu"
    if plan.row is None:  # stored apart
        layer = int(module.layer_idx)  # type: ignore[arg-type]
        prefix_key, prefix_value = plan.keys[layer], plan.values[layer]
        own_key, own_value, own_mask = key, value, attention_mask
    else:
        p, row = plan.length, slice(plan.row, plan.row + 1)
        prefix_key, prefix_value = key[row, :, :p], value[row, :, :p]
        own_key, own_value, own_mask = key[:, :, p:], value[:, :, p:], attention_mask[:, :, :, p:]
    # Query head h reads key/value head h // group (transformers' repeat_kv order), so the
    # batch's queries of one key/value head form one [batch * group * Q] block against the prefix.
    q = query.reshape(batch, kv_heads, group, width, dim)
    q_prefix = q.permute(1, 0, 2, 3, 4).reshape(1, kv_heads, batch * group * width, dim)
    prefix_out, prefix_lse = _attend(q_prefix, prefix_key, prefix_value, None, scale, fused=fused)
    prefix_out = prefix_out.reshape(kv_heads, batch, group, width, dim).permute(1, 0, 2, 3, 4)
    prefix_lse = prefix_lse.reshape(kv_heads, batch, group, width).permute(1, 0, 2, 3)
    # Each row's own part, with its mask (rows end at different lengths); the mask repeats for
    # every query head of a key/value head.
    mask = own_mask.repeat(1, 1, group, 1) if group > 1 and width > 1 else own_mask
    own_out, own_lse = _attend(q.reshape(batch, kv_heads, group * width, dim), own_key, own_value, mask, scale, fused=fused)
    own_out = own_out.reshape(batch, kv_heads, group, width, dim)
    own_lse = own_lse.reshape(batch, kv_heads, group, width)
    # Merge the two softmax parts by their log-sum-exps.
    total = torch.logaddexp(prefix_lse, own_lse)
    out = prefix_out * (prefix_lse - total).exp()[..., None] + own_out * (own_lse - total).exp()[..., None]
    # transformers' layout: [batch, query length, heads, dim].
    return out.to(query.dtype).reshape(batch, heads, width, dim).transpose(1, 2), None


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


def supports_stored_prefix(model: torch.nn.Module) -> bool:
    """Whether a prefix stored apart can be read by every attention layer of ``model``: plain
    ``sdpa`` attention (:func:`supports_shared_prefix`) in layers that know their index, with no
    sliding window or soft-capping, which a stored prefix cannot fall back from."""
    if not supports_shared_prefix(model):
        return False
    config: Any = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "attn_logit_softcapping", None) is not None or set(getattr(text, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return False
    if getattr(text, "sliding_window", None) is not None and getattr(text, "use_sliding_window", True):
        return False
    attention = [m for name, m in model.named_modules() if name.endswith("self_attn")]
    return bool(attention) and all(isinstance(getattr(m, "layer_idx", None), int) for m in attention)


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
