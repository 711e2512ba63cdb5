"""Dynamic sampling: rounds are drawn until enough groups carry a signal, judged on reward or outcome."""

from __future__ import annotations

from agentgym.rollouts.runner import Episode
from agentgym.rollouts.trajectory import Trajectory
from agentgym.trainers.sampling import dynamic_sample, learnable_groups, outcome_signal

TRAJECTORY = Trajectory.from_dict(
    {"segments": [{"kind": "prompt", "start": 0, "token_ids": [1], "logprobs": None, "turn": 0}], "messages": [], "prefix_stable": True}
)


def member(group: int, reward: float, success: bool, stop: str = "done", tag: str = "") -> Episode:
    return Episode(record={"success": success, "tag": tag}, trajectory=TRAJECTORY, group=group, reward=reward, stop_reason=stop, turns=[])


def test_outcome_signal_reads_the_reward_or_the_verdict() -> None:
    episodes = [member(0, 0.3, False), member(0, 0.7, True)]
    assert outcome_signal(episodes, "reward").tolist() == [0.30000001192092896, 0.699999988079071]
    assert outcome_signal(episodes, "success").tolist() == [0.0, 1.0]


def test_learnable_groups_judge_the_chosen_signal_and_drop_infra_errors() -> None:
    shaped = [member(0, 0.2, False), member(0, 0.6, False)]  # the shaped reward varies, the outcome does not
    solved = [member(1, 0.2, False), member(1, 1.0, True)]
    broken = [member(2, 0.0, False, "infra_error"), member(2, 1.0, True)]
    episodes = [*shaped, *solved, *broken]
    assert learnable_groups(episodes, 2, "reward") == [*shaped, *solved]
    assert learnable_groups(episodes, 2, "success") == solved
    assert learnable_groups(broken, 2, "success") == []


def rounds_of(*outcomes: list[list[bool]]):
    """A ``play`` whose round k returns groups with the given successes; records which rounds ran."""
    played: list[int] = []

    def play(k: int) -> list[Episode]:
        played.append(k)
        return [member(g, float(s), s, tag=f"{k}.{g}") for g, group in enumerate(outcomes[k]) for s in group]

    return play, played


def test_rounds_are_drawn_until_enough_groups_vary_and_the_surplus_is_cut() -> None:
    play, played = rounds_of(
        [[True, True], [False, True]],  # one learnable group
        [[False, False], [True, False]],  # one more: enough
        [[True, False], [True, False]],  # never played
    )
    kept, drawn, metrics = dynamic_sample(play, extra_rounds=2, num_groups=2, group_size=2, by="success")
    assert played == [0, 1]
    assert [e.record["tag"] for e in kept] == ["0.1", "0.1", "1.1", "1.1"]
    assert len(drawn) == 8 and [e.group for e in drawn] == [0, 0, 1, 1, 2, 2, 3, 3]  # renumbered across rounds
    assert metrics == {"groups/drawn": 4.0, "groups/kept": 2.0, "rollout/rounds": 2.0}

    play, played = rounds_of([[True, False], [False, True]], [[True, False], [True, False]])
    kept, _, metrics = dynamic_sample(play, extra_rounds=1, num_groups=1, group_size=2, by="success")
    assert played == [0] and [e.record["tag"] for e in kept] == ["0.0", "0.0"]  # a full first round: no extra round
    assert metrics == {"groups/drawn": 2.0, "groups/kept": 1.0, "rollout/rounds": 1.0}


def test_when_the_rounds_run_out_the_batch_is_what_was_found() -> None:
    play, played = rounds_of([[False, False], [False, False]], [[False, False], [True, False]], [[False, False], [False, False]])
    kept, drawn, metrics = dynamic_sample(play, extra_rounds=2, num_groups=2, group_size=2, by="success")
    assert played == [0, 1, 2]
    assert [e.record["tag"] for e in kept] == ["1.1", "1.1"] and len(drawn) == 12
    assert metrics == {"groups/drawn": 6.0, "groups/kept": 1.0, "rollout/rounds": 3.0}
