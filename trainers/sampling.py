"""Dynamic sampling (DAPO, arXiv 2503.14476): roll out more groups until enough carry a signal.

A group whose members all scored alike teaches GRPO nothing (its advantages are 0). Early in
training a hard behaviour (retrying after a failed tool call, say) may succeed in no member of
most groups, so most of a batch is wasted. With ``grpo.resample_rounds`` the trainer plays further
rounds of fresh tasks, keeps the groups :func:`learnable_groups` finds, and stops once it has a
batch's worth (``rollout.num_tasks`` groups) or the rounds are spent; :func:`dynamic_sample` is
that loop. "Alike" is judged on the signal ``grpo.degenerate_by`` names: the shaped ``reward``, or
the raw outcome ``success`` (the environment's verdict), which a shaped reward can vary around
without any member having solved the task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from agentgym.rollouts.runner import Episode
from agentgym.trainers.grpo import DegenerateBy, filter_degenerate_groups, intact_groups

__all__ = ["dynamic_sample", "learnable_groups", "outcome_signal"]


def outcome_signal(episodes: Sequence[Episode], by: DegenerateBy) -> torch.Tensor:
    """[N] the value that must differ within a group: each episode's reward, or 1.0/0.0 for its success."""
    if by == "success":
        return torch.tensor([float(bool(e.record["success"])) for e in episodes], dtype=torch.float32)
    return torch.tensor([e.reward for e in episodes], dtype=torch.float32)


def learnable_groups(episodes: Sequence[Episode], group_size: int, by: DegenerateBy) -> list[Episode]:
    """The episodes of the groups that teach something: no infra error, and ``by`` not all equal."""
    intact = [episodes[int(i)] for i in intact_groups([e.infra_error for e in episodes], group_size)]
    if not intact:
        return []
    return [intact[int(i)] for i in filter_degenerate_groups(outcome_signal(intact, by), group_size)]


def dynamic_sample(
    play: Callable[[int], Sequence[Episode]], *, extra_rounds: int, num_groups: int, group_size: int, by: DegenerateBy
) -> tuple[list[Episode], list[Episode], dict[str, float]]:
    """Play rounds until ``num_groups`` learnable groups are found or ``extra_rounds`` more are spent.

    Args:
        play: plays round ``k`` (0 is the step's own rollouts) and returns its ``num_groups``
            groups' episodes, ordered by group, groups numbered from 0.
        extra_rounds: rounds after the first, at most.
        num_groups: the learnable groups wanted.
        group_size: episodes per group.
        by: the signal that must vary within a group (:func:`outcome_signal`).

    Returns:
        ``(kept, drawn, metrics)``: the first ``num_groups`` learnable groups found (fewer when the
        rounds ran out), every episode played (groups renumbered across rounds, so per-group
        statistics see each group once), and ``groups/drawn``, ``groups/kept`` and ``rollout/rounds``.
    """
    drawn: list[Episode] = []
    kept: list[Episode] = []
    rounds = 0
    while rounds <= extra_rounds and len(kept) < num_groups * group_size:
        episodes = [replace(e, group=e.group + rounds * num_groups) for e in play(rounds)]
        rounds += 1
        drawn += episodes
        kept += learnable_groups(episodes, group_size, by)
    kept = kept[: num_groups * group_size]
    metrics = {"groups/drawn": float(len(drawn) // group_size), "groups/kept": float(len(kept) // group_size), "rollout/rounds": float(rounds)}
    return kept, drawn, metrics
