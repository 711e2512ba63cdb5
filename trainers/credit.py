"""Step-level credit from environment determinism (GiGPO, arXiv 2505.10978).

agentgym environments are deterministic: the same task, environment seed and actions give
byte-identical observations. So the state an assistant turn is taken from has an exact key, its
*anchor*: the task, the environment seed and every environment reply the agent has seen before
the turn (:func:`anchor_keys`). The turns of a GRPO group that share an anchor were taken from
the same observable situation (the first turn of every member, always; later turns when earlier
ones drew the same replies, e.g. the same tool error), so their returns can be compared: the
turn that did better from there gets a positive step advantage, whatever the rest of its episode
did. :func:`token_advantages` combines that with the episode's own advantage, per turn, and
spreads each turn's value over its tokens (the formulas are in :mod:`agentgym.trainers.grpo`).

The key is of the *observable* state: two different actions that draw the same replies (two
queries with the same result) lead to one anchor, even where the environment's hidden state
differs. It needs one environment seed per group (``rollout.distinct_env_seeds`` off): with a
seed per member no two members share an anchor, and the configuration refuses the combination.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import torch

from agentgym.rollouts.runner import Episode
from agentgym.trainers.grpo import step_advantages, terminal_returns

__all__ = ["anchor_keys", "token_advantages"]


def anchor_keys(episode: Episode) -> list[str]:
    """The anchor state of each of ``episode``'s turns: a SHA-256 hex digest of the task id, the
    environment seed and the environment's replies to every earlier turn, in order."""
    digest = hashlib.sha256(json.dumps([episode.record["task_id"], episode.record["seed"]]).encode())
    keys = []
    for turn in episode.turns:
        keys.append(digest.hexdigest())
        # One JSON line per reply; a JSON array is self-delimiting, so no two histories collide.
        digest.update(json.dumps(turn["env_messages"], sort_keys=True).encode() + b"\n")
    return keys


def token_advantages(
    episodes: Sequence[Episode], episode_advantages: torch.Tensor, group_size: int, width: int, *, weight: float, gamma: float, scale_by_std: bool
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token advantages ``A_i + weight * A^S_it``: each token gets the value of its turn.

    Args:
        episodes: whole groups, ``group_size`` consecutive episodes each (as the update keeps them).
        episode_advantages: [B] the episode-level advantages ``A_i``.
        group_size: episodes per group; turns are compared only within their group.
        width: the padded width ``T`` of the batch.
        weight: the step advantage's weight ``w``.
        gamma: the discount of the returns from each turn.
        scale_by_std: divide step advantages by their step group's std (as for episodes).

    Returns:
        ``([B, T] advantages, stats)``: a turn's sampled tokens, and the environment tokens that
        prompt it, carry that turn's advantage (tokens after the last turn carry the last turn's);
        the prompt, padding and an episode without turns carry ``A_i``. ``stats`` are
        :func:`~agentgym.trainers.grpo.step_advantages`'.
    """
    returns: list[float] = []
    anchors: list[tuple[int, str]] = []
    for row, episode in enumerate(episodes):
        returns += terminal_returns(episode.reward, len(episode.turns), gamma)
        anchors += [(row // group_size, key) for key in anchor_keys(episode)]
    steps, stats = step_advantages(returns, anchors, scale_by_std=scale_by_std)
    per_turn = torch.split(steps, [len(e.turns) for e in episodes])

    base = episode_advantages.detach().cpu().to(torch.float32)
    out = base[:, None].repeat(1, width)
    for row, (episode, turn_steps) in enumerate(zip(episodes, per_turn, strict=True)):
        if turn_steps.numel() == 0:
            continue
        combined = base[row] + weight * turn_steps
        for segment in episode.trajectory.segments:
            if segment.kind != "prompt":
                out[row, segment.start : segment.end] = combined[min(segment.turn, turn_steps.numel() - 1)]
    return out.to(episode_advantages.device), stats
