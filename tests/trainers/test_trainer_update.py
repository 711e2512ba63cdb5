"""The trainer's GRPO update on real rollouts: accumulation does not change it, old logprobs line up."""

from __future__ import annotations

import copy
import dataclasses
import os

import gymnasium as gym
import pytest
import torch
from letters_env import TOY_ENV

from agentgym.models import load_model
from agentgym.models.backend import Generation
from agentgym.models.hf import HFBackend
from agentgym.parsing import format_tool_call
from agentgym.rollouts.chat import CallFormat, ChatRenderer
from agentgym.rollouts.runner import RolloutConfig, run_rollouts
from agentgym.trainers.config import GRPOSection, OptimSection, SFTSection
from agentgym.trainers.grpo import LOSS_AGGS, group_advantages, intact_groups
from agentgym.trainers.modeling import Reference
from agentgym.trainers.sft import sft_update
from agentgym.trainers.trainer import after_error_mask, call_closing_mask, call_prefix_mask, format_error_mask, grpo_update

GROUP = 3


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    model, tokenizer = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    return model, tokenizer


@pytest.fixture(scope="module")
def episodes(policy):
    model, tokenizer = policy
    config = RolloutConfig(env_id=TOY_ENV, num_tasks=2, group_size=GROUP, max_new_tokens=8, seed=0)
    found = run_rollouts(HFBackend(model, tokenizer), config)
    rewards = [e.reward for e in found]
    # The test is only meaningful when both groups carry a learning signal.
    assert len(set(rewards[:GROUP])) > 1 and len(set(rewards[GROUP:])) > 1, rewards
    return found


def run_update(
    policy, episodes, grpo: GRPOSection, *, lr: float = 1.0, reference: bool = True, demonstrations=(), call_format=CallFormat()
) -> tuple[dict, list[torch.Tensor]]:
    """One grpo_update with plain SGD on a copy of the model; returns metrics and parameter changes."""
    model = copy.deepcopy(policy[0])
    before = [p.detach().clone() for p in model.parameters()]
    ref = Reference(model) if reference else None
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = grpo_update(
        model,
        ref,
        optimizer,
        scheduler,
        episodes,
        grpo,
        group_size=GROUP,
        temperature=1.0,
        pad_token_id=0,
        max_len=16,
        max_grad_norm=None,
        shuffle_seed=7,
        demonstrations=demonstrations,
        call_format=call_format,
    )
    return metrics, [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]


def assert_same_update(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert any(bool(d.abs().max() > 1e-4) for d in a), "the update moved nothing; the comparison would be vacuous"
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, atol=2e-6, rtol=1e-4)


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
def test_accumulating_micro_batches_gives_the_one_batch_update(policy, episodes, loss_agg) -> None:
    base = GRPOSection(loss_agg=loss_agg, kl_coef=0.1, micro_batch_size=2 * GROUP)
    _, whole = run_update(policy, episodes, base)
    for micro in (1, 4):
        _, split = run_update(policy, episodes, dataclasses.replace(base, micro_batch_size=micro))
        assert_same_update(split, whole)


def test_accumulation_with_epochs_and_mini_batches(policy, episodes) -> None:
    base = GRPOSection(epochs=2, mini_batch_size=GROUP, micro_batch_size=GROUP, kl_coef=0.05)
    metrics, whole = run_update(policy, episodes, base, lr=0.05)
    assert metrics["optim/updates"] == 4
    _, split = run_update(policy, episodes, dataclasses.replace(base, micro_batch_size=1), lr=0.05)
    assert_same_update(split, whole)


def test_single_update_reuses_its_own_logprobs_as_old(policy, episodes) -> None:
    metrics, _ = run_update(policy, episodes, GRPOSection(micro_batch_size=2))
    assert metrics["optim/updates"] == 1
    assert metrics["policy/ratio_mean"] == 1.0 and metrics["policy/clip_frac"] == 0.0
    assert metrics["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["policy/entropy"] > 0 and metrics["optim/grad_norm"] > 0


def test_recomputed_old_and_reference_logprobs_line_up_with_the_loss_exactly(policy, episodes) -> None:
    """Several updates per batch (old logprobs recomputed) over shuffled mini-batches cut into
    micro-batches: with a policy that does not move (lr 0), every ratio is exactly 1 and the KL
    to an identical reference exactly 0."""
    grpo = GRPOSection(mini_batch_size=GROUP, micro_batch_size=2, kl_coef=0.1)
    metrics, deltas = run_update(policy, episodes, grpo, lr=0.0)
    assert metrics["optim/updates"] == 2 and all(not d.any() for d in deltas)
    assert metrics["policy/ratio_mean"] == 1.0 and metrics["policy/clip_frac"] == 0.0
    assert metrics["policy/kl"] == 0.0


def test_sampling_logprobs_match_recomputed_ones(policy, episodes) -> None:
    """The sampler's logprobs and the trainer's sit on the same tokens: their ratio is 1 up to rounding."""
    metrics, _ = run_update(policy, episodes, GRPOSection(old_logprobs="sampling", micro_batch_size=2))
    assert metrics["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["policy/clip_frac"] == 0.0


def test_degenerate_groups_are_filtered(policy, episodes) -> None:
    flat = [dataclasses.replace(e, reward=0.5) for e in episodes]
    metrics, deltas = run_update(policy, flat, GRPOSection(filter_degenerate=True))
    assert metrics["optim/updates"] == 0 and metrics["batch/trajectories"] == 0
    assert metrics["groups/degenerate"] == 2
    assert all(not d.any() for d in deltas)
    # Kept, the same groups give zero advantages: without a KL term nothing moves either.
    metrics, deltas = run_update(policy, flat, GRPOSection(kl_coef=0.0), reference=False)
    assert metrics["optim/updates"] == 1 and metrics["advantage/abs_mean"] == 0
    assert all(not d.any() for d in deltas)


def test_mask_truncated_drops_budget_stopped_episodes(policy, episodes) -> None:
    cut = [dataclasses.replace(e, stop_reason="token_budget") if e.group == 0 else e for e in episodes]
    metrics, _ = run_update(policy, cut, GRPOSection(mask_truncated=True))
    kept_tokens = sum(sum(e.trajectory.loss_mask) for e in episodes if e.group == 1)
    assert metrics["batch/loss_tokens"] == kept_tokens


def test_intact_groups_drops_every_group_with_an_infra_error() -> None:
    assert intact_groups([False, False, True, False, False, False], 3).tolist() == [3, 4, 5]
    assert intact_groups([False] * 4, 2).tolist() == [0, 1, 2, 3]
    assert intact_groups([True, False], 2).tolist() == []
    with pytest.raises(ValueError, match="multiple of group_size"):
        intact_groups([False] * 5, 2)


def test_a_group_with_an_infra_error_is_left_out_of_the_update(policy, episodes) -> None:
    # Member 1 of group 1 met a failure of the machinery: its group teaches nothing, whatever its
    # rewards; the update is exactly the one on group 0 alone.
    marked = [dataclasses.replace(e, stop_reason="infra_error") if (e.group, e.member) == (1, 1) else e for e in episodes]
    grpo = GRPOSection(kl_coef=0.1, micro_batch_size=GROUP)
    metrics, update = run_update(policy, marked, grpo)
    alone, expected = run_update(policy, episodes[:GROUP], grpo)
    assert_same_update(update, expected)
    assert metrics["groups/infra_dropped"] == 1 and alone["groups/infra_dropped"] == 0
    assert metrics["batch/trajectories"] == GROUP
    every = [dataclasses.replace(e, stop_reason="infra_error") for e in episodes]
    nothing, unchanged = run_update(policy, every, grpo)
    assert nothing["optim/updates"] == 0 and nothing["groups/infra_dropped"] == 2
    assert all(bool((d == 0).all()) for d in unchanged)


def test_each_row_is_back_propagated_before_the_next_one_runs(policy, episodes) -> None:
    """One row's activations at a time: the update's forward and backward passes alternate row by
    row. A row's pass runs without a graph ("pass"), then its final norm again with one from the
    last layer's output ("forward"), whose backward carries on through the layers run again."""
    model = copy.deepcopy(policy[0])
    events: list[str] = []
    norm = model.get_decoder().norm  # every pass of the decoder, forward and backward, goes through it
    norm.register_forward_hook(lambda *_: events.append("forward" if torch.is_grad_enabled() else "pass"))
    norm.register_full_backward_hook(lambda *_: events.append("backward"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    grpo = GRPOSection(micro_batch_size=2 * GROUP, kl_coef=0.0, share_prefix=False)
    grpo_update(
        model, None, optimizer, scheduler, episodes, grpo, group_size=GROUP, temperature=1.0, pad_token_id=0, max_len=16, max_grad_norm=None, shuffle_seed=7
    )
    rows = events.count("forward")
    assert rows > 1 and events == ["pass", "forward", "backward"] * rows


def test_step_level_advantages_accumulate_over_micro_batches_like_the_one_batch_update(policy, episodes) -> None:
    """Per-token advantages are cut with their micro-batch's rows and width, as the logprobs are."""
    base = GRPOSection(kl_coef=0.05, step_advantage_weight=1.0, micro_batch_size=2 * GROUP)
    metrics, whole = run_update(policy, episodes, base)
    assert metrics["advantage/step_groups"] >= 2  # every group's first turns share the opening state
    for micro in (1, 4):
        _, split = run_update(policy, episodes, dataclasses.replace(base, micro_batch_size=micro))
        assert_same_update(split, whole)


def test_step_level_advantages_change_the_update_and_weight_0_is_plain_grpo(policy, episodes) -> None:
    plain_metrics, plain = run_update(policy, episodes, GRPOSection(kl_coef=0.0), reference=False)
    _, zero = run_update(policy, episodes, GRPOSection(kl_coef=0.0, step_discount=0.5), reference=False)
    for x, y in zip(plain, zero, strict=True):
        assert torch.equal(x, y)
    assert not any(k.startswith("advantage/step") for k in plain_metrics)
    stepped_metrics, stepped = run_update(policy, episodes, GRPOSection(kl_coef=0.0, step_advantage_weight=1.0, step_discount=0.5), reference=False)
    assert any(not torch.allclose(x, y) for x, y in zip(plain, stepped, strict=True))
    assert stepped_metrics["advantage/abs_mean"] != plain_metrics["advantage/abs_mean"]


def test_groups_are_filtered_on_the_raw_outcome_when_asked(policy, episodes) -> None:
    # The untrained model solves nothing: every group's shaped rewards vary, its outcomes do not.
    assert not any(e.record["success"] for e in episodes)
    by_reward, _ = run_update(policy, episodes, GRPOSection(filter_degenerate=True))
    by_success, deltas = run_update(policy, episodes, GRPOSection(filter_degenerate=True, degenerate_by="success"))
    assert by_reward["batch/trajectories"] == 2 * GROUP and by_reward["optim/updates"] == 1
    assert by_success["batch/trajectories"] == 0 and by_success["optim/updates"] == 0
    assert all(not d.any() for d in deltas)
    solved = [dataclasses.replace(e, record={**e.record, "success": e.member == 0}) if e.group == 1 else e for e in episodes]
    one_group, _ = run_update(policy, solved, GRPOSection(filter_degenerate=True, degenerate_by="success"))
    assert one_group["batch/trajectories"] == GROUP


def sft_step(policy, demonstrations) -> tuple[float, list[torch.Tensor]]:
    """One SFT step with plain SGD at lr 1 and no clipping on a copy of the model: its NLL and its parameter changes."""
    model = copy.deepcopy(policy[0])
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    sft = sft_update(model, optimizer, scheduler, demonstrations, SFTSection(micro_batch_size=1, optim=OptimSection(max_grad_norm=None)), pad_token_id=0)
    return sft["sft/loss"], [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]


def test_the_sft_term_adds_its_weighted_nll_gradient_to_the_update(policy, episodes) -> None:
    # With SGD at lr 1 and no clipping an update is minus the gradient, so the update with the SFT
    # term must be GRPO's update plus coef times the update of the SFT step on the same demonstrations.
    demos = [e.trajectory for e in episodes[:2]]  # any trajectories: the loss covers their sampled tokens
    coef = 0.5
    base = GRPOSection(kl_coef=0.0, micro_batch_size=2 * GROUP)
    _, plain = run_update(policy, episodes, base, reference=False)
    metrics, mixed = run_update(policy, episodes, dataclasses.replace(base, sft_coef=coef), reference=False, demonstrations=demos)
    nll, nll_step = sft_step(policy, demos)
    assert_same_update(mixed, [a + coef * b for a, b in zip(plain, nll_step, strict=True)])
    assert any(bool((m - p).abs().max() > 1e-4) for m, p in zip(mixed, plain, strict=True)), "the SFT term changed nothing"
    assert metrics["loss/sft"] == pytest.approx(nll, rel=1e-5)
    # Split into micro-batches, the same update.
    _, split = run_update(policy, episodes, dataclasses.replace(base, sft_coef=coef, micro_batch_size=1), reference=False, demonstrations=demos)
    assert_same_update(split, mixed)


def test_without_the_sft_term_demonstrations_change_nothing(policy, episodes) -> None:
    base = GRPOSection(kl_coef=0.0, micro_batch_size=2 * GROUP)
    _, plain = run_update(policy, episodes, base, reference=False)
    metrics, given = run_update(policy, episodes, base, reference=False, demonstrations=[e.trajectory for e in episodes[:2]])
    assert "loss/sft" not in metrics
    for a, b in zip(given, plain, strict=True):
        assert torch.equal(a, b)


def test_a_step_without_groups_takes_the_sft_terms_step_when_asked(policy, episodes) -> None:
    # Every group degenerate: no update, unless sft_when_degenerate, when the update is exactly
    # coef times the SFT step on the demonstrations (SGD at lr 1: minus the gradient).
    demos = [e.trajectory for e in episodes[:2]]
    coef = 0.5
    flat = [dataclasses.replace(e, reward=0.5) for e in episodes]
    grpo = GRPOSection(kl_coef=0.0, filter_degenerate=True, sft_coef=coef, micro_batch_size=2 * GROUP)
    metrics, nothing = run_update(policy, flat, grpo, reference=False, demonstrations=demos)
    assert metrics["optim/updates"] == 0 and "loss/sft" not in metrics
    assert all(not d.any() for d in nothing)
    asked = dataclasses.replace(grpo, sft_when_degenerate=True)
    metrics, update = run_update(policy, flat, asked, reference=False, demonstrations=demos)
    nll, nll_step = sft_step(policy, demos)
    assert_same_update(update, [coef * d for d in nll_step])
    assert metrics["optim/updates"] == 1 and metrics["loss/sft"] == pytest.approx(nll, rel=1e-5)
    assert metrics["groups/degenerate"] == 2 and metrics["batch/trajectories"] == 0
    # Every group lost to infra errors: the same step.
    broken = [dataclasses.replace(e, stop_reason="infra_error") for e in episodes]
    metrics, update = run_update(policy, broken, asked, reference=False, demonstrations=demos)
    assert_same_update(update, [coef * d for d in nll_step])
    assert metrics["groups/infra_dropped"] == 2


def test_given_openings_are_trained_only_where_they_did_better_when_asked(policy, episodes) -> None:
    # The first 2 tokens of every first turn marked as given (as rollout.error_tool_exploration records them).
    given = [dataclasses.replace(e, turns=[{**t, "opening_tokens": 2} if i == 0 else t for i, t in enumerate(e.turns)]) for e in episodes]
    base = GRPOSection(kl_coef=0.0, micro_batch_size=2 * GROUP)
    _, plain = run_update(policy, episodes, base, reference=False)
    _, always = run_update(policy, given, base, reference=False)
    assert all(torch.equal(a, b) for a, b in zip(always, plain, strict=True))  # "always": the model's own tokens
    metrics, update = run_update(policy, given, dataclasses.replace(base, openings_in_loss="when_better"), reference=False)
    # The same update as plain GRPO's on trajectories whose given tokens are masked where the
    # episode's advantage is not above 0.
    advantages, _ = group_advantages(torch.tensor([e.reward for e in episodes]), GROUP)
    worse = [bool(a <= 0) for a in advantages]
    assert any(worse) and not all(worse), "the comparison needs both kinds of rows"

    def masked(episode, cut: bool):
        start = next(s.start for s in episode.trajectory.segments if s.kind == "sampled")
        mask = list(episode.trajectory.loss_mask)
        mask[start : start + 2] = [0, 0] if cut else mask[start : start + 2]
        return dataclasses.replace(episode, trajectory=dataclasses.replace(episode.trajectory, loss_mask=tuple(mask)))

    _, expected = run_update(policy, [masked(e, w) for e, w in zip(episodes, worse, strict=True)], base, reference=False)
    assert_same_update(update, expected)
    assert any(bool((u - p).abs().max() > 1e-6) for u, p in zip(update, plain, strict=True)), "masking changed nothing"
    assert metrics["batch/loss_tokens"] == sum(sum(e.trajectory.loss_mask) for e in episodes) - 2 * sum(worse)


def _first_turns_reporting(episodes, **info):
    """``episodes`` with these step-info counts added to every first turn (as the environment reports them)."""
    return [dataclasses.replace(e, turns=[{**t, "info": {**t["info"], **info}} if i == 0 else t for i, t in enumerate(e.turns)]) for e in episodes]


def _always_trained_like_any_turn(policy, episodes, marked, base: GRPOSection) -> list[torch.Tensor]:
    """Plain GRPO's update of ``episodes``, checked equal to that of ``marked`` (the options at
    ``always`` ignore the marks); returns it."""
    _, plain = run_update(policy, episodes, base, reference=False)
    _, always = run_update(policy, marked, base, reference=False)
    assert all(torch.equal(a, b) for a, b in zip(always, plain, strict=True))  # "always": trained like any turn
    return plain


def test_malformed_turns_are_trained_only_where_they_did_worse_when_asked(policy, episodes) -> None:
    # Every first turn marked as holding a malformed call (as the environment's step info reports it).
    malformed = _first_turns_reporting(episodes, turn_format_errors=1)
    base = GRPOSection(kl_coef=0.0, micro_batch_size=2 * GROUP)
    plain = _always_trained_like_any_turn(policy, episodes, malformed, base)
    metrics, update = run_update(policy, malformed, dataclasses.replace(base, format_errors_in_loss="when_worse"), reference=False)
    # The same update as plain GRPO's on trajectories whose first turn is masked where the
    # episode's advantage is not below 0.
    advantages, _ = group_advantages(torch.tensor([e.reward for e in episodes]), GROUP)
    not_worse = [bool(a >= 0) for a in advantages]
    assert any(not_worse) and not all(not_worse), "the comparison needs both kinds of rows"

    def masked(episode, cut: bool):
        first = next(s for s in episode.trajectory.segments if s.kind == "sampled")
        mask = list(episode.trajectory.loss_mask)
        mask[first.start : first.end] = [0] * len(first.token_ids) if cut else mask[first.start : first.end]
        return dataclasses.replace(episode, trajectory=dataclasses.replace(episode.trajectory, loss_mask=tuple(mask)))

    _, expected = run_update(policy, [masked(e, c) for e, c in zip(episodes, not_worse, strict=True)], base, reference=False)
    assert_same_update(update, expected)
    assert any(bool((u - p).abs().max() > 1e-6) for u, p in zip(update, plain, strict=True)), "masking changed nothing"
    first_lengths = [len(next(s for s in e.trajectory.segments if s.kind == "sampled").token_ids) for e in episodes]
    assert metrics["batch/loss_tokens"] == sum(sum(e.trajectory.loss_mask) for e in episodes) - sum(
        n for n, c in zip(first_lengths, not_worse, strict=True) if c
    )


def test_turns_after_a_failed_call_are_trained_only_where_they_did_better_when_asked(policy, episodes) -> None:
    # Every first turn marked as having had a failed call (as the environment's step info reports
    # a fault): the turns after it are the ones the option concerns.
    failed = _first_turns_reporting(episodes, turn_tool_errors=1)
    base = GRPOSection(kl_coef=0.0, micro_batch_size=2 * GROUP)
    plain = _always_trained_like_any_turn(policy, episodes, failed, base)
    metrics, update = run_update(policy, failed, dataclasses.replace(base, after_error_in_loss="when_better"), reference=False)
    # The same update as plain GRPO's on trajectories whose later turns are masked where the
    # episode's advantage is not above 0; the first turn (no failed call before it) stays.
    advantages, _ = group_advantages(torch.tensor([e.reward for e in episodes]), GROUP)
    worse = [bool(a <= 0) for a in advantages]
    assert any(worse) and not all(worse), "the comparison needs both kinds of rows"

    def later_turns(episode):
        return [s for s in episode.trajectory.segments if s.kind == "sampled" and s.turn > 0]

    # Letters episodes have at most two turns, so every later turn follows the failed first one.
    assert all(later_turns(e) and len(e.turns) == 2 for e in episodes), "the comparison needs a second turn"

    def masked(episode, cut: bool):
        mask = list(episode.trajectory.loss_mask)
        for segment in later_turns(episode) if cut else []:
            mask[segment.start : segment.end] = [0] * len(segment.token_ids)
        return dataclasses.replace(episode, trajectory=dataclasses.replace(episode.trajectory, loss_mask=tuple(mask)))

    _, expected = run_update(policy, [masked(e, w) for e, w in zip(episodes, worse, strict=True)], base, reference=False)
    assert_same_update(update, expected)
    assert any(bool((u - p).abs().max() > 1e-6) for u, p in zip(update, plain, strict=True)), "masking changed nothing"
    cut = sum(sum(e.trajectory.loss_mask[s.start : s.end]) for e, w in zip(episodes, worse, strict=True) if w for s in later_turns(e))
    assert cut > 0 and metrics["batch/loss_tokens"] == sum(sum(e.trajectory.loss_mask) for e in episodes) - cut


def _spans(ids, pattern, where):
    """The positions of ``ids`` that ``where`` ("start": a common prefix, "anywhere": every
    occurrence) matches ``pattern`` at."""
    if where == "start":
        return list(range(len(os.path.commonprefix([list(ids), list(pattern)]))))
    return [i + k for i in range(len(ids) - len(pattern) + 1) if tuple(ids[i : i + len(pattern)]) == tuple(pattern) for k in range(len(pattern))]


@pytest.mark.parametrize("option", ["call_prefix_in_loss", "call_closing_in_loss"])
def test_the_call_formats_tokens_are_trained_only_where_they_did_better_when_asked(policy, episodes, option) -> None:
    base = GRPOSection(kl_coef=0.0, micro_batch_size=2 * GROUP)
    asked = dataclasses.replace(base, **{option: "when_better"})
    _, plain = run_update(policy, episodes, base, reference=False)
    advantages, _ = group_advantages(torch.tensor([e.reward for e in episodes]), GROUP)
    firsts = [next(s for s in e.trajectory.segments if s.kind == "sampled") for e in episodes]
    worse, better = (next(r for r, a in enumerate(advantages) if test(a)) for test in (lambda a: a < 0, lambda a: a > 0))
    for row in (worse, better):
        # The prefix: one this row's first turn follows for two tokens and then leaves. The closing:
        # two tokens from the middle of that turn (and a closing found nowhere). The tiny model's
        # turns share no tokens, so no other turn holds them.
        if option == "call_prefix_in_loss":
            pattern, where = (*firsts[row].token_ids[:2], -1), "start"
            call_format = CallFormat(prefix=pattern)
        else:
            pattern, where = tuple(firsts[row].token_ids[2:4]), "anywhere"
            call_format = CallFormat(closings=((-1, -2), pattern))
        _, always = run_update(policy, episodes, base, reference=False, call_format=call_format)
        assert all(torch.equal(a, b) for a, b in zip(always, plain, strict=True))  # "always": trained like any token
        metrics, update = run_update(policy, episodes, asked, reference=False, call_format=call_format)
        # The same update as plain GRPO's on trajectories whose matching tokens (of every sampled
        # turn) are masked where the episode's advantage is not above 0.
        cut = 0

        def masked(episode, advantage):
            nonlocal cut
            mask = list(episode.trajectory.loss_mask)
            for segment in episode.trajectory.segments:
                if segment.kind == "sampled" and advantage <= 0:
                    for i in _spans(segment.token_ids, pattern, where):
                        mask[segment.start + i] = 0
                        cut += 1
            return dataclasses.replace(episode, trajectory=dataclasses.replace(episode.trajectory, loss_mask=tuple(mask)))

        _, expected = run_update(policy, [masked(e, a) for e, a in zip(episodes, advantages, strict=True)], base, reference=False)
        assert_same_update(update, expected)
        assert metrics["batch/loss_tokens"] == sum(sum(e.trajectory.loss_mask) for e in episodes) - cut
        if row == worse:
            assert cut == 2 and any(bool((u - p).abs().max() > 1e-6) for u, p in zip(update, plain, strict=True)), "masking changed nothing"
        else:
            assert cut == 0  # tokens in an episode that did better stay in the loss


class _BlendsAfterAResult:
    """A backend that calls sql, and once it has a result, sends its answer under sql's name (the
    blend seen in evaluation: the answer's argument, the tool's name)."""

    name = "blends-after-a-result"
    blend = format_tool_call("sql", {"text": "26"})

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts, params):
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            text = self.blend if '"row_count"' in self.tokenizer.decode(prompt) else format_tool_call("sql", {"query": "SELECT 1"})
            ids = (*self.tokenizer.encode(text, add_special_tokens=False), p.stop_token_ids[0])
            out.append(Generation(ids, (-0.5,) * len(ids), text, "stop"))
        return out


def _blended_sql_rollouts(tokenizer) -> tuple[list, ChatRenderer, int]:
    """Real SQL-v0 rollouts of :class:`_BlendsAfterAResult` (two groups of two, three turns each),
    SQL-v0's renderer, and the width of the episodes' longest trajectory."""
    config = RolloutConfig("agentgym/SQL-v0", split="train", num_tasks=2, group_size=2, max_turns=3, max_new_tokens=64, seed=0, env_kwargs={"fault_rate": 0.0})
    episodes = run_rollouts(_BlendsAfterAResult(tokenizer), config)
    renderer = ChatRenderer(tokenizer, tools=gym.make("agentgym/SQL-v0").unwrapped.tools)
    return episodes, renderer, max(len(e.trajectory.token_ids) for e in episodes)


def test_the_trainer_finds_the_turns_whose_call_the_environment_found_malformed(default_tokenizer) -> None:
    episodes, _, width = _blended_sql_rollouts(default_tokenizer)
    mask = format_error_mask(episodes, width)
    for row, episode in enumerate(episodes):
        assert [t["text"] for t in episode.turns][1:] == [_BlendsAfterAResult.blend] * 2
        assert [t["info"]["turn_format_errors"] for t in episode.turns] == [0, 1, 1]
        expected = torch.zeros(width, dtype=torch.bool)
        for segment in episode.trajectory.segments:
            if segment.kind == "sampled" and segment.turn > 0:  # the well-formed first turn is not marked
                expected[segment.start : segment.end] = True
        assert expected.any() and torch.equal(mask[row], expected)


def test_the_call_prefix_mask_marks_the_call_formats_own_tokens(default_tokenizer) -> None:
    # Real SQL-v0 rollouts: well-formed calls and answers sent under sql's name alike begin with
    # the whole call prefix, which is marked in every turn and nothing after it.
    episodes, renderer, width = _blended_sql_rollouts(default_tokenizer)
    prefix = renderer.call_prefix
    mask = call_prefix_mask(episodes, width, prefix)
    for row, episode in enumerate(episodes):
        expected = torch.zeros(width, dtype=torch.bool)
        for segment in episode.trajectory.segments:
            if segment.kind == "sampled":
                expected[segment.start : segment.start + len(prefix)] = True
        assert int(expected.sum()) == 3 * len(prefix) and torch.equal(mask[row], expected)
    # A call that leaves the format after its first tokens is marked only as far as it follows it.
    malformed = default_tokenizer.encode('<tool_call>{"text": "1984"}</tool_call>', add_special_tokens=False)
    shared = len(os.path.commonprefix([malformed, list(prefix)]))
    assert 0 < shared < len(prefix)


def test_the_call_closing_mask_marks_what_follows_a_calls_arguments(default_tokenizer) -> None:
    # Real SQL-v0 rollouts: a query to sql, then answers sent under sql's name; every turn closes
    # with sql's closing, which is marked, and nothing else is.
    episodes, renderer, width = _blended_sql_rollouts(default_tokenizer)
    closings = renderer.call_closings
    mask = call_closing_mask(episodes, width, closings)
    for row, episode in enumerate(episodes):
        sampled = [s for s in episode.trajectory.segments if s.kind == "sampled"]
        assert len(sampled) == 3
        for segment in sampled:
            marked = [t for i, t in enumerate(segment.token_ids) if mask[row, segment.start + i]]
            assert default_tokenizer.decode(marked) == "}}</tool_call>"
            assert default_tokenizer.decode(segment.token_ids).endswith('"}}</tool_call><|im_end|>')
        assert int(mask[row].sum()) == sum(int(mask[row, s.start : s.end].sum()) for s in sampled)  # nothing outside the turns


def test_the_after_error_mask_marks_the_turns_that_follow_a_fault(default_tokenizer) -> None:
    # Real SQL-v0 rollouts in which every first call to sql fails (a seeded fault) and the call
    # right after one never does: the turn after the fault is marked whole, the others not at all.
    config = RolloutConfig(
        "agentgym/SQL-v0",
        split="train",
        num_tasks=2,
        group_size=2,
        max_turns=3,
        max_new_tokens=64,
        seed=0,
        env_kwargs={"fault_rate": 1.0, "max_consecutive_faults": 1},
    )
    episodes = run_rollouts(_BlendsAfterAResult(default_tokenizer), config)
    width = max(len(e.trajectory.token_ids) for e in episodes)
    mask = after_error_mask(episodes, width)
    for row, episode in enumerate(episodes):
        errors = [t["info"].get("turn_tool_errors", 0) for t in episode.turns]
        assert errors[0] == 1 and errors[1] == 0 and len(errors) == 3, errors
        expected = torch.zeros(width, dtype=torch.bool)
        for segment in episode.trajectory.segments:
            if segment.kind == "sampled" and segment.turn == 1:
                expected[segment.start : segment.end] = True
        assert expected.any() and torch.equal(mask[row], expected)
