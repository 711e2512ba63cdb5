"""Pad and truncate trajectories into rectangular arrays for a trainer.

Arrays are numpy (``torch.from_numpy`` shares their memory). ``loss_mask[b, i]`` and ``logprobs[b, i]``
belong to token ``input_ids[b, i]``: a causal-LM trainer compares them with the model's prediction of
that token from the tokens before it (logits at ``i - 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.rollouts.trajectory import Trajectory


@dataclass(frozen=True)
class TokenBatch:
    """Right-padded batch.

    Attributes:
        input_ids: ``[B, L]`` int64, padded with the pad id.
        attention_mask: ``[B, L]`` int64, 1 on real tokens.
        loss_mask: ``[B, L]`` int64, 1 on sampled tokens that are kept.
        logprobs: ``[B, L]`` float32 sampling logprobs, 0 where ``loss_mask`` is 0.
        lengths: ``[B]`` int64 number of real tokens per row.
        truncated: ``[B]`` bool, True where the trajectory was cut to ``max_length``.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray


def collate(trajectories: Sequence[Trajectory], *, pad_token_id: int, max_length: int | None = None, mask_truncated: bool = False) -> TokenBatch:
    """Right-pad ``trajectories`` to the longest one, cutting each to at most ``max_length`` tokens.

    Args:
        trajectories: at least one trajectory.
        pad_token_id: id written into padding (it is never attended to nor trained on).
        max_length: keep only the first ``max_length`` tokens of longer trajectories.
        mask_truncated: zero the whole loss mask of a truncated trajectory, so a cut-off episode teaches
            nothing (TRL's ``mask_truncated_completions``).
    """
    if not trajectories:
        raise ValueError("collate() needs at least one trajectory")
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    lengths = [len(t.token_ids) if max_length is None else min(len(t.token_ids), max_length) for t in trajectories]
    width = max(lengths)
    batch = len(trajectories)
    input_ids = np.full((batch, width), pad_token_id, dtype=np.int64)
    attention_mask = np.zeros((batch, width), dtype=np.int64)
    loss_mask = np.zeros((batch, width), dtype=np.int64)
    logprobs = np.zeros((batch, width), dtype=np.float32)
    truncated = np.array([n < len(t.token_ids) for n, t in zip(lengths, trajectories, strict=True)])
    for row, (n, trajectory) in enumerate(zip(lengths, trajectories, strict=True)):
        input_ids[row, :n] = trajectory.token_ids[:n]
        attention_mask[row, :n] = 1
        if not (mask_truncated and truncated[row]):
            loss_mask[row, :n] = trajectory.loss_mask[:n]
            logprobs[row, :n] = trajectory.logprobs[:n]
    return TokenBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        logprobs=logprobs,
        lengths=np.array(lengths, dtype=np.int64),
        truncated=truncated,
    )
