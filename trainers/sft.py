"""SFT warm start: masked next-token training on demonstration trajectories.

Demonstrations are successful episodes, from the environment's ``oracle`` policy or from a file
of episode records. Each is rendered into the token sequence the policy would have produced,
with the same :class:`~agentgym.models.TrajectoryBuilder` the rollout runner uses: every
assistant turn is tokenised with the chat renderer and fed to the builder as if it had been
sampled (end-of-turn token included), and every environment reply becomes a masked template
delta. The loss mask is therefore 1 exactly on assistant tokens, as in GRPO, and the loss is the
mean negative log-likelihood of those tokens over the optimiser batch::

    L = -(1/N) sum_i sum_t m_it log p(x_it | x_i<t)        N = sum_i sum_t m_it

With gradient accumulation every micro-batch divides by the whole batch's ``N``, so the
accumulated gradient does not depend on how the batch was split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from agentgym.envs.registration import make_env
from agentgym.models import Generation
from agentgym.parsing import format_tool_call
from agentgym.records import EpisodeRecord
from agentgym.rollouts.batching import collate
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.io import read_records
from agentgym.rollouts.scripted import make_policy, run_episode
from agentgym.rollouts.trajectory import Trajectory, TrajectoryBuilder
from agentgym.seeding import stream_rng
from agentgym.trainers.config import SFTSection
from agentgym.trainers.modeling import TensorBatch, TrainerError, backward_by_row, clip_and_step

__all__ = [
    "assistant_text",
    "backward_nll",
    "demonstration_records",
    "demonstration_trajectories",
    "masked_nll",
    "nll_batch",
    "record_to_trajectory",
    "sft_batch_indices",
    "sft_update",
]


def assistant_text(message: Mapping[str, Any]) -> str:
    """An assistant message as the text the model writes: its content, then one Hermes
    ``<tool_call>`` block per OpenAI-style tool call (the format :mod:`agentgym.parsing` reads)."""
    content = message.get("content") or ""
    calls = [format_tool_call(c["function"]["name"], _arguments(c["function"]["arguments"])) for c in message.get("tool_calls") or []]
    return "\n".join([content, *calls]) if content and calls else content or "\n".join(calls)


def _arguments(raw: Any) -> dict[str, Any]:
    import json

    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def _as_generation(text: str, renderer: ChatRenderer) -> Generation:
    """The assistant turn ``text`` as if the model had sampled it and then ended its turn."""
    ids = (*renderer.encode(text), renderer.eot_token_id)
    return Generation(token_ids=ids, logprobs=(0.0,) * len(ids), text=text, finish_reason="stop")


def record_to_trajectory(record: Mapping[str, Any], renderer: ChatRenderer) -> Trajectory:
    """Render an episode record token-exactly, with the loss mask on its assistant turns.

    The sequence ends after the last assistant turn, like a rollout trajectory: the environment's
    reply to the final turn is never trained on and never prompted from.

    Raises:
        ValueError: when the record has no assistant turn.
    """
    messages = list(record["messages"])
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise ValueError(f"episode of task {record.get('task_id')!r} has no assistant turn to learn from")
    builder = TrajectoryBuilder(renderer, messages[:first])
    i = first
    while i < len(messages):
        builder.add_generation(_as_generation(assistant_text(messages[i]), renderer))
        i += 1
        replies = []
        while i < len(messages) and messages[i]["role"] != "assistant":
            replies.append(messages[i])
            i += 1
        if i < len(messages):
            builder.add_messages(replies)
    return builder.build()


def demonstration_records(
    env_id: str, sft: SFTSection, task_ids: Sequence[str], *, split: str, seed: int, max_turns: int | None = None, env_kwargs: Mapping[str, Any] | None = None
) -> list[EpisodeRecord]:
    """Successful episode records to imitate, for the tasks ``task_ids`` (in that order).

    ``sft.source == "oracle"`` plays the environment's oracle on each task (seed ``seed``); any
    other value is a JSONL file of episode records, of which the successful ones of ``env_id``
    on those tasks are kept (all of them when the file has several per task).

    Raises:
        TrainerError: when no successful demonstration is found.
    """
    wanted = set(task_ids)
    if sft.source == "oracle":
        extra = {} if max_turns is None else {"max_turns": max_turns}
        env = make_env(env_id, split=split, **dict(env_kwargs or {}), **extra)
        try:
            if "oracle" not in env.unwrapped.policies():
                raise TrainerError(f"{env_id} has no oracle policy; set sft.source to a JSONL file of episode records")
            records = [run_episode(env, make_policy(env, "oracle", seed), seed=seed, task_id=task_id, policy_name="oracle") for task_id in task_ids]
        finally:
            env.close()
    else:
        records = [r for r in _file_records(sft.source) if r.get("env_id") == env_id and r.get("task_id") in wanted]
    kept = [r for r in records if r.get("success")]
    if not kept:
        raise TrainerError(f"no successful demonstration of {env_id} among {len(records)} episode(s) from {sft.source!r} on {len(task_ids)} task(s)")
    return kept


def _file_records(source: str) -> list[EpisodeRecord]:
    """The episode records of a JSONL file, each checked to hold a conversation."""
    path = Path(source)
    if not path.is_file():
        raise TrainerError(f"sft.source {source!r} is neither 'oracle' nor an existing JSONL file")
    try:
        rows = read_records(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrainerError(f"cannot read sft.source: {exc}") from None
    for number, row in enumerate(rows, 1):
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise TrainerError(
                f"sft.source {path}, record {number}: not an episode record (it needs a 'messages' list of chat messages, as agentgym rollout writes)"
            )
    return rows


def demonstration_trajectories(records: Sequence[Mapping[str, Any]], renderer: ChatRenderer) -> list[Trajectory]:
    """Every record rendered with :func:`record_to_trajectory`.

    Raises:
        TrainerError: naming the task of a record that cannot be rendered (no assistant turn,
            a tool call without a name or with arguments that are not a JSON object).
    """
    trajectories = []
    for record in records:
        try:
            trajectories.append(record_to_trajectory(record, renderer))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TrainerError(f"cannot use the demonstration of task {record.get('task_id')!r}: {type(exc).__name__}: {exc}") from None
    return trajectories


def sft_batch_indices(num_demos: int, batch_size: int, seed: int, step: int) -> list[int]:
    """The demonstrations of SFT step ``step``: epochs over a fresh seeded shuffle each.

    Derived from ``(seed, step)`` alone, so a resumed run draws what the uninterrupted one drew.
    """
    out = []
    for k in range(step * batch_size, (step + 1) * batch_size):
        epoch, position = divmod(k, num_demos)
        order = stream_rng(seed, epoch).permutation(num_demos)
        out.append(int(order[position]))
    return out


def masked_nll(logprobs: torch.Tensor, loss_mask: torch.Tensor, normalizer: float) -> torch.Tensor:
    """``-(sum of logprobs on loss tokens) / normalizer`` (the batch's loss-token count)."""
    return -(logprobs * loss_mask).sum() / normalizer


def _row_nll(loss_mask: torch.Tensor, normalizer: float, weight: float, r: int, logprobs: torch.Tensor) -> torch.Tensor:
    """Row ``r``'s term of ``weight`` x :func:`masked_nll`, from its ``[1, L]`` logprobs."""
    return weight * masked_nll(logprobs, loss_mask[r : r + 1], normalizer)


def nll_batch(trajectories: Sequence[Trajectory], *, pad_token_id: int, max_length: int | None, device: torch.device) -> TensorBatch:
    """``trajectories`` as one batch for :func:`backward_nll`; a clear error when no token is left to learn."""
    batch = TensorBatch.from_tokens(collate(trajectories, pad_token_id=pad_token_id, max_length=max_length), device)
    if not batch.loss_mask.any():
        raise TrainerError("the SFT batch has no assistant token to learn (are the demonstrations cut by sft.max_length?)")
    return batch


def backward_nll(model: torch.nn.Module, batch: TensorBatch, micro_batch_size: int, *, weight: float = 1.0, share_prefix: bool = True) -> float:
    """Back-propagate ``weight`` x the masked NLL per loss token of ``batch``, accumulated over
    micro-batches (each divides by the whole batch's loss-token count); returns the NLL, unweighted."""
    normalizer = int(batch.loss_mask.sum())
    total = 0.0
    for start in range(0, len(batch), micro_batch_size):
        micro = batch.rows(slice(start, start + micro_batch_size))
        # The loss is a sum over rows: each row's term is back-propagated right after its forward pass.
        logprobs, _ = backward_by_row(model, micro, partial(_row_nll, micro.loss_mask, normalizer, weight), share_prefix=share_prefix)
        total += masked_nll(logprobs, micro.loss_mask, normalizer).item()
    return total


def sft_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    trajectories: Sequence[Trajectory],
    sft: SFTSection,
    *,
    pad_token_id: int,
    share_prefix: bool = True,
) -> dict[str, float]:
    """One SFT optimiser step on ``trajectories`` (accumulated over micro-batches).

    Returns:
        ``sft/loss`` (mean NLL per loss token), ``sft/loss_tokens``, ``optim/grad_norm`` and ``optim/lr``.
    """
    batch = nll_batch(trajectories, pad_token_id=pad_token_id, max_length=sft.max_length, device=next(model.parameters()).device)
    total = backward_nll(model, batch, sft.micro_batch_size, share_prefix=share_prefix)
    stats = clip_and_step(model, optimizer, scheduler, sft.optim.max_grad_norm)
    return {"sft/loss": total, "sft/loss_tokens": float(batch.loss_mask.sum()), "optim/grad_norm": stats["grad_norm"], "optim/lr": stats["lr"]}
