"""The masked GRPO objective and group-relative advantages, written to read like the formulas.

Notation: a batch holds ``B`` trajectories padded to ``T`` tokens. ``m_it`` is the loss mask (1 on
tokens the model sampled, 0 on prompt, tool output, chat-template glue and padding), ``A_i`` the
advantage of trajectory ``i``, shared by all of its tokens, or ``A_it`` one per token (step-level
credit gives each turn's tokens that turn's advantage; ``A_i`` is ``A_it`` constant over ``t``).

Advantages (per group of ``G`` samples of one task)::

    A_i = (r_i - mean(r)) / (std(r) + eps)        scale_by_std=True   (GRPO)
    A_i =  r_i - mean(r)                          scale_by_std=False  (Dr. GRPO)

Step-level advantages (GiGPO, arXiv 2505.10978), for turn ``t`` of trajectory ``i`` taken from
anchor state ``s``, with terminal reward ``r_i`` after ``n_i`` turns and discount ``gamma``::

    R_it = gamma^(n_i - 1 - t) * r_i                           discounted return from turn t
    A^S_it = (R_it - mean(R_S)) / (std(R_S) + eps)               R_S: the returns of every turn of the
                                                                 group taken from state s (or only
                                                                 minus the mean, scale_by_std=False)
    A_it = A_i + w * A^S_it                                      w = step_advantage_weight

Per-token loss, with ratio ``rho_it = exp(logp_it - old_logp_it)`` (PPO-clip, pessimistic bound)::

    pg_it = max(-A_it * rho_it, -A_it * clip(rho_it, 1 - clip_eps, 1 + clip_eps_high))
    kl_it = exp(ref_it - logp_it) - (ref_it - logp_it) - 1          (K3 estimator, >= 0)
    l_it  = pg_it + kl_coef * kl_it

Aggregation over loss tokens (``loss_agg``), with ``G`` the number of trajectories that have at
least one loss token and ``N`` the number of loss tokens::

    seq-mean-token-mean      (1/G) sum_i (1/sum_t m_it) sum_t m_it l_it    (the design; TRL "grpo")
    token-mean               (1/N) sum_i sum_t m_it l_it                   (DAPO; TRL "dapo")
    seq-mean-token-sum-norm  (1/G) sum_i (1/max_len) sum_t m_it l_it       (Dr. GRPO; TRL "dr_grpo")

Gradient accumulation: every mode above is "a sum over trajectories divided by a count" (``G`` or
``N``), and the count is additive over micro-batches. Compute it once for the whole optimiser
batch with :func:`loss_normalizer` (or sum it over the micro-batches), pass it as ``normalizer``
to every micro-batch call and sum the micro-batch losses (no further division): the accumulated
gradient is then exactly the one-batch gradient, however the batch was split. This equals
scaling each micro-batch's self-normalised loss by (its sequences / all sequences) for the
``seq-*`` modes and by (its tokens / all tokens) for ``token-mean``. For
``seq-mean-token-sum-norm`` also pass the same ``max_len`` everywhere (the generation budget),
since its default, the padded width ``T``, differs between micro-batches.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal, cast, get_args

import torch

LossAgg = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
LOSS_AGGS: tuple[str, ...] = get_args(LossAgg)
# What must differ within a group for it to carry a signal: the shaped reward or the raw outcome.
DegenerateBy = Literal["reward", "success"]


def masked_grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.04,
    loss_agg: LossAgg = "seq-mean-token-mean",
    max_len: int | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped, KL-regularised GRPO loss over the model's own tokens (see the module docstring).

    Only ``logprobs`` receives gradient; old, reference and advantage tensors are treated as
    constants. Values at masked positions of every input are ignored, even if they are NaN or
    infinite, so padding and tool-output tokens get exactly zero gradient.

    Args:
        logprobs: [B, T] log-probabilities of the sampled tokens under the current policy.
        old_logprobs: [B, T] the same under the policy that generated the rollouts.
        ref_logprobs: [B, T] the same under the frozen reference model, or None for no KL term.
        advantages: [B] one advantage per trajectory, or [B, T] one per token (values at masked
            positions are ignored); a [B] tensor is the [B, T] one constant over each row.
        loss_mask: [B, T] 1 (or True) on model-generated tokens, 0 elsewhere.
        clip_eps: lower clip range: ratios below ``1 - clip_eps`` are clipped.
        clip_eps_high: upper clip range (DAPO clip-higher); defaults to ``clip_eps``.
        kl_coef: weight of the K3 KL to the reference; 0 drops the term.
        loss_agg: "seq-mean-token-mean", "token-mean" or "seq-mean-token-sum-norm".
        max_len: the constant length of "seq-mean-token-sum-norm" (Dr. GRPO's generation
            budget); defaults to ``T``. Not accepted by the other modes.
        normalizer: the count the summed loss is divided by: trajectories with a loss token
            (``seq-*`` modes) or loss tokens (``token-mean``) of the whole optimiser batch, for
            gradient accumulation; defaults to this batch's own count (:func:`loss_normalizer`).

    Returns:
        ``(loss, metrics)``: the scalar loss and plain-float metrics of this (micro-)batch:
        ``loss``; ``pg_loss`` (the policy term, aggregated like the loss; with ``normalizer`` both
        are this micro-batch's share and sum to the batch values); ``kl`` (mean K3 per
        loss token, only when ``ref_logprobs`` is given, even if ``kl_coef`` is 0);
        ``clip_frac_low`` and ``clip_frac_high`` (share of loss tokens whose gradient the lower
        or upper clip removed); ``ratio_mean`` (mean ratio per loss token); ``num_tokens``,
        ``num_sequences``. Token means are NaN when the batch has no loss token. Entropy is not
        reported: it needs the full logits, which this function does not see.

    Raises:
        ValueError: on mismatched shapes, a non-binary mask or an invalid option.
    """
    mask = _check_inputs(logprobs, old_logprobs, ref_logprobs, advantages, loss_mask)
    loss_agg = _check_loss_agg(loss_agg)
    clip_eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    if not 0 < clip_eps < 1:
        raise ValueError(f"clip_eps must be in (0, 1), got {clip_eps}")
    if not clip_eps_high > 0:
        raise ValueError(f"clip_eps_high must be > 0, got {clip_eps_high}")
    if not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    max_len = _check_max_len(max_len, loss_agg, logprobs.shape[1])
    normalizer = _check_normalizer(normalizer, loss_normalizer(mask, loss_agg), loss_agg)

    # Neutral values at masked positions keep NaN/inf padding out of both the loss and its
    # gradient (a 0 * NaN product would poison the sum; masked_fill passes back zero gradient).
    logprobs = logprobs.masked_fill(~mask, 0.0)
    old_logprobs = old_logprobs.detach().masked_fill(~mask, 0.0)
    advantages = advantages.detach().to(logprobs.dtype)
    # [B] broadcasts over tokens as [B, 1]; a [B, T] tensor gets neutral values at masked positions.
    advantages = advantages[:, None] if advantages.dim() == 1 else advantages.masked_fill(~mask, 0.0)

    ratio = torch.exp(logprobs - old_logprobs)
    pg_unclipped = -advantages * ratio
    pg_clipped = -advantages * torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps_high)
    pg_per_token = torch.maximum(pg_unclipped, pg_clipped)
    per_token = pg_per_token

    kl_per_token = None
    if ref_logprobs is not None:
        log_ratio_ref = ref_logprobs.detach().masked_fill(~mask, 0.0) - logprobs
        kl_per_token = torch.exp(log_ratio_ref) - log_ratio_ref - 1
        if kl_coef > 0:
            per_token = pg_per_token + kl_coef * kl_per_token

    weights = mask.to(logprobs.dtype)
    loss = _aggregate(per_token, weights, loss_agg, max_len, normalizer)

    with torch.no_grad():
        num_tokens = int(mask.sum())
        clipped_low = (advantages < 0) & (ratio < 1 - clip_eps) & mask
        clipped_high = (advantages > 0) & (ratio > 1 + clip_eps_high) & mask
        metrics = {
            "loss": float(loss),
            "pg_loss": float(_aggregate(pg_per_token, weights, loss_agg, max_len, normalizer)),
            "clip_frac_low": _token_mean(clipped_low.to(weights.dtype), num_tokens),
            "clip_frac_high": _token_mean(clipped_high.to(weights.dtype), num_tokens),
            "ratio_mean": _token_mean(ratio * weights, num_tokens),
            "num_tokens": float(num_tokens),
            "num_sequences": float(int(mask.any(dim=1).sum())),
        }
        if kl_per_token is not None:
            metrics["kl"] = _token_mean(kl_per_token * weights, num_tokens)
    return loss, metrics


def loss_normalizer(loss_mask: torch.Tensor, loss_agg: LossAgg = "seq-mean-token-mean") -> int:
    """The count :func:`masked_grpo_loss` divides by: pass the whole batch's value as ``normalizer``.

    It is the number of trajectories with at least one loss token for the ``seq-*`` modes and
    the number of loss tokens for ``token-mean``; it is additive, so the sum over micro-batches
    equals the value for the whole batch.

    Args:
        loss_mask: [B, T] loss mask of the whole optimiser batch (or of one micro-batch).
        loss_agg: the aggregation mode the loss will use.

    Raises:
        ValueError: on a mask that is not 2-D and binary, or an unknown mode.
    """
    mask = _check_mask(loss_mask)
    if _check_loss_agg(loss_agg) == "token-mean":
        return int(mask.sum())
    return int(mask.any(dim=1).sum())


def group_advantages(
    rewards: torch.Tensor | Sequence[float], group_size: int, *, scale_by_std: bool = True, eps: float = 1e-6
) -> tuple[torch.Tensor, dict[str, float]]:
    """Group-relative advantages: each reward minus its group's mean, optionally over its std.

    Samples ``[k * group_size, (k + 1) * group_size)`` form group ``k`` (the rollouts of one task).
    The std is the unbiased sample std, as in TRL and verl. A degenerate group (all rewards
    equal) carries no learning signal; its advantages are exactly 0 rather than rounding noise
    divided by ``eps``.

    Args:
        rewards: [N] one reward per trajectory, N a multiple of ``group_size``.
        group_size: samples per group, at least 2.
        scale_by_std: divide by ``std + eps`` (GRPO); False keeps the raw difference (Dr. GRPO).
        eps: added to the std before dividing.

    Returns:
        ``(advantages [N], stats)`` where stats holds ``reward_mean``, ``reward_std`` (over the
        whole batch, unbiased), ``num_groups``, ``degenerate_groups`` and ``degenerate_fraction``.

    Raises:
        ValueError: on a bad shape, group size, non-finite reward or negative ``eps``.
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    grouped = _grouped_rewards(rewards, group_size)  # [N / G, G]
    degenerate = _degenerate(grouped)

    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_by_std:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + eps)
    advantages = advantages.masked_fill(degenerate[:, None], 0.0).reshape(-1)

    num_groups = grouped.shape[0]
    flat = grouped.reshape(-1)
    stats = {
        "reward_mean": float(flat.mean()),
        "reward_std": float(flat.std()),
        "num_groups": float(num_groups),
        "degenerate_groups": float(int(degenerate.sum())),
        "degenerate_fraction": float(degenerate.sum()) / num_groups,
    }
    return advantages, stats


def terminal_returns(reward: float, num_turns: int, gamma: float) -> list[float]:
    """Discounted return from each turn of an episode whose only reward is its final one:
    ``R_t = gamma^(num_turns - 1 - t) * reward`` (agentgym rewards the episode at its end).

    Raises:
        ValueError: on a negative turn count or ``gamma`` outside (0, 1].
    """
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    if num_turns < 0:
        raise ValueError(f"num_turns must be >= 0, got {num_turns}")
    return [gamma ** (num_turns - 1 - t) * float(reward) for t in range(num_turns)]


def step_advantages(
    returns: Sequence[float], anchors: Sequence[Hashable], *, scale_by_std: bool = True, eps: float = 1e-6
) -> tuple[torch.Tensor, dict[str, float]]:
    """Step-level advantages (GiGPO): each turn's return relative to the turns taken from the same state.

    Turns with equal ``anchors`` form a step-level group; within it each return minus the group's
    mean, optionally over its unbiased std, as :func:`group_advantages` does for episodes. A turn
    alone at its anchor, or in a group whose returns are all equal, gets exactly 0.

    Args:
        returns: [S] the discounted return from each turn (:func:`terminal_returns`).
        anchors: [S] the state each turn was taken from; equal values are the same state (callers
            include whatever must also match, e.g. the episode group).
        scale_by_std: divide by the step group's ``std + eps``; False keeps the raw difference.
        eps: added to the std before dividing.

    Returns:
        ``(advantages [S], stats)`` where stats holds ``step_groups`` (anchors shared by two or
        more turns) and ``grouped_turn_fraction`` (share of turns in such a group; NaN with no turn).

    Raises:
        ValueError: on lengths that differ, a non-finite return or a negative ``eps``.
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    values = torch.as_tensor([float(r) for r in returns], dtype=torch.float64)
    if len(anchors) != values.numel():
        raise ValueError(f"{values.numel()} returns but {len(anchors)} anchors")
    if not bool(torch.isfinite(values).all()):
        raise ValueError("returns must be finite")
    members: dict[Hashable, list[int]] = {}
    for index, anchor in enumerate(anchors):
        members.setdefault(anchor, []).append(index)
    advantages = torch.zeros_like(values)
    grouped = [rows for rows in members.values() if len(rows) > 1]
    for rows in grouped:
        group = values[rows]
        if bool((group == group[0]).all()):
            continue  # no comparison to learn from: exactly 0, not rounding noise over eps
        centred = group - group.mean()
        advantages[rows] = centred / (group.std() + eps) if scale_by_std else centred
    stats = {
        "step_groups": float(len(grouped)),
        "grouped_turn_fraction": sum(len(rows) for rows in grouped) / values.numel() if values.numel() else float("nan"),
    }
    return advantages.to(torch.float32), stats


def filter_degenerate_groups(rewards: torch.Tensor | Sequence[float], group_size: int) -> torch.Tensor:
    """Indices of the samples in groups whose rewards are not all equal (DAPO dynamic sampling).

    Args:
        rewards: [N] one reward per trajectory, grouped as in :func:`group_advantages`.
        group_size: samples per group, at least 2.

    Returns:
        Sorted int64 indices into ``rewards`` of every sample of every kept group.

    Raises:
        ValueError: as :func:`group_advantages`.
    """
    grouped = _grouped_rewards(rewards, group_size)
    keep = ~_degenerate(grouped)
    return torch.arange(grouped.numel()).reshape(grouped.shape)[keep].reshape(-1)


def intact_groups(infra_errors: Sequence[bool], group_size: int) -> torch.Tensor:
    """Indices of the samples in groups where no episode met a failure of the machinery.

    A group with an ``infra_error`` episode is dropped whole: that episode's reward 0 is not the
    model's, and without it the group has neither its size (the advantages' reshape, the
    mini-batches of whole groups) nor an unbiased baseline for its other members.

    Args:
        infra_errors: [N] whether each trajectory's episode ended with ``stop_reason == "infra_error"``,
            grouped as in :func:`group_advantages`.
        group_size: samples per group, at least 1.

    Returns:
        Sorted int64 indices of every sample of every intact group.
    """
    flags = torch.as_tensor([bool(f) for f in infra_errors], dtype=torch.bool)
    if group_size < 1 or flags.numel() % group_size:
        raise ValueError(f"the number of episodes ({flags.numel()}) must be a multiple of group_size ({group_size})")
    grouped = flags.reshape(-1, group_size)
    return torch.arange(flags.numel()).reshape(grouped.shape)[~grouped.any(dim=1)].reshape(-1)


def _aggregate(per_token: torch.Tensor, weights: torch.Tensor, loss_agg: str, max_len: int, normalizer: float) -> torch.Tensor:
    """Sum per trajectory as ``loss_agg`` prescribes, then divide by the batch-level count."""
    token_sums = (per_token * weights).sum(dim=1)  # [B]
    if loss_agg == "seq-mean-token-mean":
        # An all-masked trajectory has a zero sum; clamping its length avoids 0/0 and it is
        # not counted in the normalizer either.
        summed = (token_sums / weights.sum(dim=1).clamp(min=1)).sum()
    elif loss_agg == "seq-mean-token-sum-norm":
        summed = token_sums.sum() / max_len
    else:  # token-mean
        summed = token_sums.sum()
    return summed / normalizer


def _token_mean(values: torch.Tensor, num_tokens: int) -> float:
    """Mean over loss tokens of an already masked tensor; NaN when there is no loss token."""
    return float(values.sum()) / num_tokens if num_tokens else float("nan")


def _check_inputs(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None, advantages: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """Validate shapes and dtypes; return the mask as a bool tensor."""
    if not isinstance(logprobs, torch.Tensor) or logprobs.dim() != 2:
        raise ValueError(f"logprobs must be a [B, T] tensor, got shape {_shape(logprobs)}")
    if not logprobs.is_floating_point():
        raise ValueError(f"logprobs must be floating point, got {logprobs.dtype}")
    named = {"old_logprobs": old_logprobs, "loss_mask": loss_mask}
    if ref_logprobs is not None:
        named["ref_logprobs"] = ref_logprobs
    for name, tensor in named.items():
        if not isinstance(tensor, torch.Tensor) or tensor.shape != logprobs.shape:
            raise ValueError(f"{name} must have the shape of logprobs {tuple(logprobs.shape)}, got {_shape(tensor)}")
    batch = logprobs.shape[0]
    if not isinstance(advantages, torch.Tensor) or advantages.shape not in ((batch,), logprobs.shape):
        raise ValueError(f"advantages must have shape ({batch},), one per trajectory, or {tuple(logprobs.shape)}, one per token, got {_shape(advantages)}")
    return _check_mask(loss_mask)


def _check_mask(loss_mask: torch.Tensor) -> torch.Tensor:
    if not isinstance(loss_mask, torch.Tensor) or loss_mask.dim() != 2:
        raise ValueError(f"loss_mask must be a [B, T] tensor, got shape {_shape(loss_mask)}")
    if loss_mask.dtype == torch.bool:
        return loss_mask
    if not bool(((loss_mask == 0) | (loss_mask == 1)).all()):
        raise ValueError("loss_mask must contain only 0 and 1 (or be a bool tensor)")
    return loss_mask.bool()


def _check_loss_agg(loss_agg: str) -> LossAgg:
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss_agg {loss_agg!r}; expected one of {LOSS_AGGS}")
    return cast(LossAgg, loss_agg)  # one of LOSS_AGGS, LossAgg's values


def _check_max_len(max_len: int | None, loss_agg: str, width: int) -> int:
    if loss_agg != "seq-mean-token-sum-norm":
        if max_len is not None:
            raise ValueError(f"max_len only applies to loss_agg='seq-mean-token-sum-norm', not {loss_agg!r}")
        return width
    if max_len is None:
        return max(width, 1)
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    return max_len


def _check_normalizer(normalizer: float | None, own_count: int, loss_agg: str) -> float:
    """The divisor: the caller's batch-level count, or this batch's own (at least 1, to avoid 0/0)."""
    if normalizer is None:
        return float(max(own_count, 1))
    if not normalizer > 0:
        raise ValueError(f"normalizer must be > 0, got {normalizer}")
    if normalizer < own_count:
        unit = "loss tokens" if loss_agg == "token-mean" else "sequences with a loss token"
        raise ValueError(
            f"normalizer {normalizer} is smaller than this batch's own count of {unit} ({own_count}); "
            "it must count the whole optimiser batch (see loss_normalizer)"
        )
    return float(normalizer)


def _grouped_rewards(rewards: torch.Tensor | Sequence[float], group_size: int) -> torch.Tensor:
    """Validate rewards and reshape them to [num_groups, group_size] floats."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an int >= 2 (a std needs two samples), got {group_size!r}")
    try:
        values = torch.as_tensor(rewards)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"rewards must be a 1-D sequence of numbers: {exc}") from exc
    if values.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(values.shape)}")
    if not values.is_floating_point():
        values = values.to(torch.float32)
    if values.numel() == 0 or values.numel() % group_size:
        raise ValueError(f"the number of rewards ({values.numel()}) must be a positive multiple of group_size ({group_size})")
    if not bool(torch.isfinite(values).all()):
        raise ValueError("rewards must be finite")
    return values.reshape(-1, group_size)


def _degenerate(grouped: torch.Tensor) -> torch.Tensor:
    """[num_groups] True where every reward of the group is equal."""
    return (grouped == grouped[:, :1]).all(dim=1)


def _shape(value: object) -> object:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
