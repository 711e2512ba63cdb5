"""Step-level credit (GiGPO): exact anchor keys from the replies, and each turn's advantage on its tokens."""

from __future__ import annotations

import statistics

import pytest
import torch

from agentgym.rollouts.runner import Episode
from agentgym.rollouts.trajectory import Trajectory
from agentgym.trainers.credit import anchor_keys, token_advantages


def episode(replies: list[str], reward: float, *, seed: int = 5, task: str = "t-1", sampled: int = 2) -> Episode:
    """An episode of ``len(replies)`` turns: a 3-token prompt, then per turn ``sampled`` sampled
    tokens and a 1-token environment reply (the reply to the last turn is not in the sequence)."""
    segments = [{"kind": "prompt", "start": 0, "token_ids": [1, 2, 3], "logprobs": None, "turn": 0}]
    start = 3
    for turn in range(len(replies)):
        segments.append({"kind": "sampled", "start": start, "token_ids": [7] * sampled, "logprobs": [0.0] * sampled, "turn": turn})
        start += sampled
        if turn + 1 < len(replies):
            segments.append({"kind": "env", "start": start, "token_ids": [9], "logprobs": None, "turn": turn + 1})
            start += 1
    trajectory = Trajectory.from_dict({"segments": segments, "messages": [], "prefix_stable": True})
    turns = [{"env_messages": [{"role": "user", "content": text}]} for text in replies]
    return Episode(record={"task_id": task, "seed": seed}, trajectory=trajectory, group=0, reward=reward, stop_reason="done", turns=turns)


def test_anchor_keys_are_equal_exactly_when_task_seed_and_earlier_replies_are() -> None:
    a = anchor_keys(episode(["error: timeout", "ok", "done"], 1.0))
    b = anchor_keys(episode(["error: timeout", "other", "done"], 0.0))
    assert len(a) == 3 and len(set(a)) == 3
    # Turn 0 is the opening, turn 1 follows the same reply; turn 2 follows different ones.
    assert a[:2] == b[:2] and a[2] != b[2]
    # The key of a turn does not depend on the reply to that turn or later ones.
    assert anchor_keys(episode(["error: timeout", "ok", "something else"], 1.0)) == a
    assert anchor_keys(episode(["error: timeout", "ok", "done"], 1.0, seed=6))[0] != a[0]
    assert anchor_keys(episode(["error: timeout", "ok", "done"], 1.0, task="t-2"))[0] != a[0]


def test_each_turn_gets_its_episode_advantage_plus_the_weighted_step_advantage() -> None:
    # One group of three: two retry after the same error (one succeeds), one never hits it.
    episodes = [episode(["error", "fine"], 1.0), episode(["error", "fine"], 0.0), episode(["ok"], 1.0)]
    base = torch.tensor([0.5, -1.0, 0.5])
    gamma, weight = 0.9, 0.5
    advantages, stats = token_advantages(episodes, base, 3, 12, weight=weight, gamma=gamma, scale_by_std=False)
    assert advantages.shape == (3, 12)
    # Turn 0 of all three is from the opening: returns gamma*1, gamma*0, 1.
    turn0 = [gamma, 0.0, 1.0]
    mean0 = statistics.fmean(turn0)
    # Turn 1 of the first two is from the state after the same error: returns 1 and 0.
    expected_turn = [[turn0[0] - mean0, 0.5], [turn0[1] - mean0, -0.5], [turn0[2] - mean0]]
    for row, steps in enumerate(expected_turn):
        combined = [float(base[row]) + weight * s for s in steps]
        segments = episodes[row].trajectory.segments
        assert advantages[row, :3].tolist() == [float(base[row])] * 3  # the prompt
        for segment in segments[1:]:
            want = combined[min(segment.turn, len(steps) - 1)]
            assert advantages[row, segment.start : segment.end].tolist() == pytest.approx([want] * len(segment.token_ids))
        end = segments[-1].end
        assert advantages[row, end:].tolist() == [float(base[row])] * (12 - end)  # padding
    assert stats == {"step_groups": 2.0, "grouped_turn_fraction": 1.0}


def test_turns_are_compared_only_within_their_group() -> None:
    episodes = [episode(["x"], 1.0), episode(["x"], 0.0), episode(["x"], 1.0), episode(["x"], 1.0)]
    advantages, stats = token_advantages(episodes, torch.zeros(4), 2, 6, weight=1.0, gamma=1.0, scale_by_std=False)
    assert advantages[:, 3].tolist() == [0.5, -0.5, 0.0, 0.0]  # the second group's returns are equal
    assert stats["step_groups"] == 2


def test_an_episode_without_turns_keeps_its_episode_advantage() -> None:
    episodes = [episode([], 0.0), episode(["x"], 1.0)]
    advantages, _ = token_advantages(episodes, torch.tensor([-0.5, 0.5]), 2, 5, weight=1.0, gamma=1.0, scale_by_std=True)
    assert advantages[0].tolist() == [-0.5] * 5
