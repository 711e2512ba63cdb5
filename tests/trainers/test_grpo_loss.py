"""The masked GRPO loss and group advantages against direct, loop-by-loop computations of the formulas."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from agentgym.trainers.grpo import LOSS_AGGS, filter_degenerate_groups, group_advantages, loss_normalizer, masked_grpo_loss, step_advantages, terminal_returns

DTYPE = torch.float64


def random_batch(seed: int, batch: int = 6, width: int = 9, empty_row: bool = False) -> dict[str, torch.Tensor]:
    """Policy, old, reference logprobs far enough apart that both clip sides are hit; ragged masks with holes."""
    gen = torch.Generator().manual_seed(seed)
    logprobs = -3 * torch.rand(batch, width, generator=gen, dtype=DTYPE)
    old = logprobs + 0.3 * torch.randn(batch, width, generator=gen, dtype=DTYPE)
    ref = logprobs + 0.5 * torch.randn(batch, width, generator=gen, dtype=DTYPE)
    advantages = torch.randn(batch, generator=gen, dtype=DTYPE)
    lengths = torch.randint(1, width + 1, (batch,), generator=gen)
    # Holes stand for tool-output tokens between model turns.
    holes = torch.rand(batch, width, generator=gen) < 0.25
    mask = (torch.arange(width)[None, :] < lengths[:, None]) & ~holes
    mask[:, 0] = True
    if empty_row:
        mask[1] = False
    return {"logprobs": logprobs, "old": old, "ref": ref, "advantages": advantages, "mask": mask}


def reference_loss(b, *, clip_eps, clip_eps_high, kl_coef, loss_agg, max_len, use_ref=True) -> float:
    """The module docstring's formulas, one token at a time in Python floats ([B] or [B, T] advantages)."""
    logp, old, ref, adv, mask = (b[k].tolist() for k in ("logprobs", "old", "ref", "advantages", "mask"))
    per_token = b["advantages"].dim() == 2
    high = clip_eps if clip_eps_high is None else clip_eps_high
    total, sequences, tokens = 0.0, 0, 0
    for i in range(len(logp)):
        seq_sum, seq_tokens = 0.0, 0
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            ratio = math.exp(logp[i][t] - old[i][t])
            clipped = min(max(ratio, 1 - clip_eps), 1 + high)
            a = adv[i][t] if per_token else adv[i]
            term = max(-a * ratio, -a * clipped)
            if use_ref:
                d = ref[i][t] - logp[i][t]
                term += kl_coef * (math.exp(d) - d - 1)
            seq_sum += term
            seq_tokens += 1
        if seq_tokens == 0:
            continue
        sequences += 1
        tokens += seq_tokens
        if loss_agg == "seq-mean-token-mean":
            total += seq_sum / seq_tokens
        elif loss_agg == "seq-mean-token-sum-norm":
            total += seq_sum / max_len
        else:
            total += seq_sum
    return total / (tokens if loss_agg == "token-mean" else sequences)


def call(b, logprobs=None, **kwargs):
    return masked_grpo_loss(b["logprobs"] if logprobs is None else logprobs, b["old"], b["ref"], b["advantages"], b["mask"], **kwargs)


# ---------------------------------------------------------------- the loss equals the formula


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
@pytest.mark.parametrize("clip_eps_high", [None, 0.28])
@pytest.mark.parametrize("kl_coef", [0.0, 0.04, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_matches_direct_computation(loss_agg, clip_eps_high, kl_coef, seed):
    b = random_batch(seed, empty_row=seed == 2)
    loss, metrics = call(b, clip_eps=0.2, clip_eps_high=clip_eps_high, kl_coef=kl_coef, loss_agg=loss_agg)
    expected = reference_loss(b, clip_eps=0.2, clip_eps_high=clip_eps_high, kl_coef=kl_coef, loss_agg=loss_agg, max_len=b["mask"].shape[1])
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-9, abs=1e-9)
    # The batch really exercises both clip sides, so the clip branches above are tested.
    assert metrics["clip_frac_low"] > 0 and metrics["clip_frac_high"] > 0


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
@pytest.mark.parametrize("kl_coef", [0.0, 0.04])
@pytest.mark.parametrize("seed", [0, 2])
def test_per_token_advantages_match_direct_computation(loss_agg, kl_coef, seed):
    """[B, T] advantages (step-level credit): each token's own value; masked ones are ignored, even NaN."""
    b = random_batch(seed, empty_row=seed == 2)
    gen = torch.Generator().manual_seed(101 + seed)
    per_token = torch.randn(b["mask"].shape, generator=gen, dtype=DTYPE)
    b["advantages"] = per_token.masked_fill(~b["mask"], float("nan"))
    loss, metrics = call(b, clip_eps=0.2, kl_coef=kl_coef, loss_agg=loss_agg)
    expected = reference_loss({**b, "advantages": per_token}, clip_eps=0.2, clip_eps_high=None, kl_coef=kl_coef, loss_agg=loss_agg, max_len=b["mask"].shape[1])
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert metrics["clip_frac_low"] > 0 and metrics["clip_frac_high"] > 0


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
def test_trajectory_advantages_equal_their_broadcast_per_token(loss_agg):
    """A [B] advantage is the [B, T] one constant over each row: same loss, metrics and gradient, bit for bit."""
    b = random_batch(5, empty_row=True)
    results = []
    for advantages in (b["advantages"], b["advantages"][:, None].expand(b["mask"].shape)):
        logprobs = b["logprobs"].clone().requires_grad_(True)
        loss, metrics = call({**b, "advantages": advantages}, logprobs=logprobs, kl_coef=0.1, clip_eps_high=0.28, loss_agg=loss_agg)
        loss.backward()
        results.append((loss, metrics, logprobs.grad))
    (loss_b, metrics_b, grad_b), (loss_bt, metrics_bt, grad_bt) = results
    assert torch.equal(loss_b, loss_bt) and torch.equal(grad_b, grad_bt)
    assert metrics_b == pytest.approx(metrics_bt, nan_ok=True)
    assert bool(grad_b.abs().sum() > 0)


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
def test_accumulated_micro_batches_with_per_token_advantages_give_the_one_batch_gradient(loss_agg):
    features, theta0, old, ref, _, mask = accumulation_problem(3)
    advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    extra = {"max_len": 12} if loss_agg == "seq-mean-token-sum-norm" else {}
    _, whole = policy_gradient(features, theta0, old, ref, advantages, mask, loss_agg=loss_agg, **extra)
    normalizer = loss_normalizer(mask, loss_agg)
    total = torch.zeros_like(whole)
    for rows, width in micro_batches(mask, [1, 4, 5]):
        cut = (features[rows, :width], theta0, old[rows, :width], ref[rows, :width], advantages[rows, :width], mask[rows, :width])
        total += policy_gradient(*cut, loss_agg=loss_agg, normalizer=normalizer, **extra)[1]
    torch.testing.assert_close(total, whole, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("max_len", [9, 32])
def test_dr_grpo_divides_by_the_given_constant(max_len):
    b = random_batch(3)
    loss, _ = call(b, loss_agg="seq-mean-token-sum-norm", max_len=max_len)
    expected = reference_loss(b, clip_eps=0.2, clip_eps_high=None, kl_coef=0.04, loss_agg="seq-mean-token-sum-norm", max_len=max_len)
    assert loss.item() == pytest.approx(expected, rel=1e-9)


def test_float32_inputs_agree_to_1e_6():
    b = random_batch(4)
    b32 = {k: (v.float() if v.is_floating_point() else v) for k, v in b.items()}
    for loss_agg in LOSS_AGGS:
        loss, _ = call(b32, loss_agg=loss_agg)
        expected = reference_loss(b, clip_eps=0.2, clip_eps_high=None, kl_coef=0.04, loss_agg=loss_agg, max_len=9)
        assert loss.dtype == torch.float32
        assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_metrics_are_the_token_statistics_they_name():
    b = random_batch(5)
    _, metrics = call(b, clip_eps=0.2, clip_eps_high=0.28)
    ratios, lows, highs, kls = [], [], [], []
    for i, row in enumerate(b["mask"].tolist()):
        adv = b["advantages"][i].item()
        for t, on in enumerate(row):
            if on:
                ratio = math.exp(b["logprobs"][i, t].item() - b["old"][i, t].item())
                d = b["ref"][i, t].item() - b["logprobs"][i, t].item()
                ratios.append(ratio)
                lows.append(adv < 0 and ratio < 0.8)
                highs.append(adv > 0 and ratio > 1.28)
                kls.append(math.exp(d) - d - 1)
    assert metrics["ratio_mean"] == pytest.approx(statistics.fmean(ratios), rel=1e-12)
    assert metrics["clip_frac_low"] == pytest.approx(statistics.fmean(lows))
    assert metrics["clip_frac_high"] == pytest.approx(statistics.fmean(highs))
    assert metrics["kl"] == pytest.approx(statistics.fmean(kls), rel=1e-12)
    assert metrics["num_tokens"] == len(ratios)
    assert metrics["num_sequences"] == b["mask"].shape[0]
    assert "entropy" not in metrics


# ---------------------------------------------------------------- KL


def test_kl_is_zero_when_policy_equals_reference():
    b = random_batch(6)
    b["ref"] = b["logprobs"].clone()
    logprobs = b["logprobs"].clone().requires_grad_(True)
    loss, metrics = call(b, logprobs=logprobs, kl_coef=0.5)
    loss.backward()
    assert metrics["kl"] == 0.0

    logprobs_no_kl = b["logprobs"].clone().requires_grad_(True)
    loss_no_kl, _ = call(b, logprobs=logprobs_no_kl, kl_coef=0.0)
    loss_no_kl.backward()
    # K3 and its gradient both vanish at ref == logp, so the KL term adds exactly nothing.
    assert torch.equal(loss, loss_no_kl)
    assert torch.equal(logprobs.grad, logprobs_no_kl.grad)


def test_kl_is_positive_when_policy_differs():
    _, metrics = call(random_batch(7))
    assert metrics["kl"] > 0


def test_no_reference_and_zero_kl_coef_both_drop_the_term():
    b = random_batch(8)
    without_ref, metrics = masked_grpo_loss(b["logprobs"], b["old"], None, b["advantages"], b["mask"])
    zero_coef, _ = call(b, kl_coef=0.0)
    assert torch.equal(without_ref, zero_coef)
    assert "kl" not in metrics
    expected = reference_loss(b, clip_eps=0.2, clip_eps_high=None, kl_coef=0.0, loss_agg="seq-mean-token-mean", max_len=9, use_ref=False)
    assert without_ref.item() == pytest.approx(expected, rel=1e-9)


# ---------------------------------------------------------------- masking


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
def test_masked_positions_get_exactly_zero_gradient_and_change_nothing(loss_agg):
    b = random_batch(9)
    mask = b["mask"]
    logprobs = b["logprobs"].clone().requires_grad_(True)
    loss, _ = call(b, logprobs=logprobs, loss_agg=loss_agg)
    loss.backward()
    assert torch.all(logprobs.grad[~mask] == 0)
    assert torch.any(logprobs.grad[mask] != 0)

    # Tool-output and padding tokens may hold anything, including NaN and infinities.
    junk = torch.tensor([float("nan"), float("inf"), -float("inf"), 123.0], dtype=DTYPE)
    fill = junk.repeat(mask.numel() // 4 + 1)[: mask.numel()].reshape(mask.shape)
    perturbed = {**b}
    for key in ("logprobs", "old", "ref"):
        perturbed[key] = torch.where(mask, b[key], fill)
    perturbed_logprobs = perturbed["logprobs"].clone().requires_grad_(True)
    perturbed_loss, _ = call(perturbed, logprobs=perturbed_logprobs, loss_agg=loss_agg)
    perturbed_loss.backward()
    assert torch.equal(perturbed_loss, loss)
    assert torch.equal(perturbed_logprobs.grad, logprobs.grad)


def test_integer_mask_equals_bool_mask():
    b = random_batch(10)
    as_bool, _ = call(b)
    as_float, _ = call({**b, "mask": b["mask"].to(DTYPE)})
    assert torch.equal(as_bool, as_float)


def test_batch_without_loss_tokens_gives_a_zero_loss_and_nan_token_metrics():
    b = random_batch(11)
    b["mask"] = torch.zeros_like(b["mask"])
    logprobs = b["logprobs"].clone().requires_grad_(True)
    loss, metrics = call(b, logprobs=logprobs)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(logprobs.grad == 0)
    assert math.isnan(metrics["ratio_mean"]) and math.isnan(metrics["kl"])
    assert metrics["num_tokens"] == 0 and metrics["num_sequences"] == 0


# ---------------------------------------------------------------- gradient accumulation


def accumulation_problem(seed: int):
    """A tiny differentiable 'policy' (logp = -softplus(x . theta)) over ragged trajectories."""
    gen = torch.Generator().manual_seed(seed)
    batch, width, dim = 8, 12, 5
    features = torch.randn(batch, width, dim, generator=gen, dtype=DTYPE)
    theta0 = torch.randn(dim, generator=gen, dtype=DTYPE)
    old = -torch.nn.functional.softplus(features @ theta0) + 0.3 * torch.randn(batch, width, generator=gen, dtype=DTYPE)
    ref = old + 0.2 * torch.randn(batch, width, generator=gen, dtype=DTYPE)
    advantages = torch.randn(batch, generator=gen, dtype=DTYPE)
    lengths = torch.tensor([12, 3, 7, 1, 10, 5, 2, 9])
    mask = (torch.arange(width)[None, :] < lengths[:, None]) & (torch.rand(batch, width, generator=gen) > 0.2)
    mask[:, 0] = True
    return features, theta0, old, ref, advantages, mask


def policy_gradient(features, theta0, old, ref, advantages, mask, **kwargs):
    theta = theta0.clone().requires_grad_(True)
    logprobs = -torch.nn.functional.softplus(features @ theta)
    loss, _ = masked_grpo_loss(logprobs, old, ref, advantages, mask, clip_eps_high=0.28, **kwargs)
    loss.backward()
    return loss, theta.grad


def micro_batches(mask: torch.Tensor, splits: list[int]):
    """Row slices at the given split points, each trimmed to its own longest trajectory (as a collator pads)."""
    bounds = [0, *splits, mask.shape[0]]
    for start, stop in zip(bounds, bounds[1:]):
        width = int(mask[start:stop].nonzero()[:, 1].max()) + 1
        yield slice(start, stop), width


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
@pytest.mark.parametrize("splits", [[3], [1, 4, 5], [2, 4, 6]], ids=["2-uneven", "4-uneven", "4-even"])
def test_accumulated_micro_batches_give_the_one_batch_gradient(loss_agg, splits):
    features, theta0, old, ref, advantages, mask = accumulation_problem(12)
    full_width = mask.shape[1]
    max_len = full_width if loss_agg == "seq-mean-token-sum-norm" else None
    full_loss, full_grad = policy_gradient(features, theta0, old, ref, advantages, mask, loss_agg=loss_agg)

    normalizer = loss_normalizer(mask, loss_agg)
    assert normalizer == sum(loss_normalizer(mask[rows], loss_agg) for rows, _ in micro_batches(mask, splits))
    theta = theta0.clone().requires_grad_(True)
    total_loss = 0.0
    for rows, width in micro_batches(mask, splits):
        logprobs = -torch.nn.functional.softplus(features[rows, :width] @ theta)
        loss, _ = masked_grpo_loss(
            logprobs,
            old[rows, :width],
            ref[rows, :width],
            advantages[rows],
            mask[rows, :width],
            clip_eps_high=0.28,
            loss_agg=loss_agg,
            max_len=max_len,
            normalizer=normalizer,
        )
        loss.backward()  # gradients accumulate in theta.grad
        total_loss += loss.item()
    assert total_loss == pytest.approx(full_loss.item(), rel=1e-12)
    torch.testing.assert_close(theta.grad, full_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("loss_agg", ["seq-mean-token-mean", "token-mean"])
def test_normalizer_equals_weighting_self_normalised_losses_by_their_share(loss_agg):
    features, theta0, old, ref, advantages, mask = accumulation_problem(13)
    total = loss_normalizer(mask, loss_agg)
    for rows, width in micro_batches(mask, [3]):
        args = (features[rows, :width], theta0, old[rows, :width], ref[rows, :width], advantages[rows])
        micro_mask = mask[rows, :width]
        share = loss_normalizer(micro_mask, loss_agg) / total
        own, own_grad = policy_gradient(*args, micro_mask, loss_agg=loss_agg)
        shared, shared_grad = policy_gradient(*args, micro_mask, loss_agg=loss_agg, normalizer=total)
        assert shared.item() == pytest.approx(share * own.item(), rel=1e-12)
        torch.testing.assert_close(shared_grad, share * own_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("loss_agg", ["seq-mean-token-mean", "token-mean"])
def test_averaging_self_normalised_micro_losses_is_biased(loss_agg):
    """The naive recipe differs on uneven splits: this is what the normalizer protects against."""
    features, theta0, old, ref, advantages, mask = accumulation_problem(12)
    _, full_grad = policy_gradient(features, theta0, old, ref, advantages, mask, loss_agg=loss_agg)
    grads = []
    for rows, w in micro_batches(mask, [1, 4, 5]):
        micro = (features[rows, :w], theta0, old[rows, :w], ref[rows, :w], advantages[rows], mask[rows, :w])
        grads.append(policy_gradient(*micro, loss_agg=loss_agg)[1])
    naive = torch.stack(grads).mean(dim=0)
    assert not torch.allclose(naive, full_grad, rtol=1e-6)


# ---------------------------------------------------------------- clipping


def one_token(ratio: float, advantage: float, **kwargs):
    logprobs = torch.tensor([[math.log(ratio)]], dtype=DTYPE, requires_grad=True)
    old = torch.zeros(1, 1, dtype=DTYPE)
    mask = torch.ones(1, 1, dtype=torch.bool)
    loss, metrics = masked_grpo_loss(logprobs, old, None, torch.tensor([advantage], dtype=DTYPE), mask, **kwargs)
    loss.backward()
    return loss.item(), logprobs.grad.item(), metrics


JUST = math.exp(1e-6)  # a hair in log space, well above float64 rounding


@pytest.mark.parametrize(
    ("ratio", "advantage", "kwargs", "clipped_low", "clipped_high"),
    [
        (1.2 / JUST, 1.0, {}, False, False),  # just inside the upper bound
        (1.2 * JUST, 1.0, {}, False, True),  # just outside: gradient removed
        (0.5, 1.0, {}, False, False),  # low ratio, good action: pessimistic bound keeps the gradient
        (0.8 * JUST, -1.0, {}, False, False),  # just inside the lower bound
        (0.8 / JUST, -1.0, {}, True, False),  # just outside
        (1.5, -1.0, {}, False, False),  # high ratio, bad action: kept
        (1.25, 1.0, {}, False, True),  # symmetric clip removes it ...
        (1.25, 1.0, {"clip_eps_high": 0.28}, False, False),  # ... clip-higher keeps it
        (1.28 * JUST, 1.0, {"clip_eps_high": 0.28}, False, True),
        (0.75, -1.0, {"clip_eps_high": 0.28}, True, False),  # clip-higher leaves the lower bound alone
        (1.7, 0.0, {}, False, False),  # zero advantage: nothing to clip
    ],
)
def test_clip_boundaries(ratio, advantage, kwargs, clipped_low, clipped_high):
    loss, grad, metrics = one_token(ratio, advantage, **kwargs)
    assert metrics["clip_frac_low"] == float(clipped_low)
    assert metrics["clip_frac_high"] == float(clipped_high)
    assert metrics["ratio_mean"] == pytest.approx(ratio, rel=1e-12)
    if clipped_low or clipped_high:
        bound = 1 - 0.2 if clipped_low else 1 + kwargs.get("clip_eps_high", 0.2)
        assert grad == 0.0
        assert loss == pytest.approx(-advantage * bound, rel=1e-12)
    else:
        # d(-A * exp(logp - old)) / d logp = -A * ratio
        assert grad == pytest.approx(-advantage * ratio, rel=1e-12)
        assert loss == pytest.approx(-advantage * ratio, rel=1e-12)


def test_loss_is_continuous_across_the_clip_boundary():
    inside, _, _ = one_token(1.2 / JUST, 1.0)
    outside, _, _ = one_token(1.2 * JUST, 1.0)
    assert inside == pytest.approx(outside, abs=1e-5)


# ---------------------------------------------------------------- advantages


def reference_advantages(rewards: list[float], group_size: int, scale_by_std: bool, eps: float) -> list[float]:
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = statistics.fmean(group)
        if len(set(group)) == 1:
            out += [0.0] * group_size
        elif scale_by_std:
            out += [(r - mean) / (statistics.stdev(group) + eps) for r in group]
        else:
            out += [r - mean for r in group]
    return out


@pytest.mark.parametrize("scale_by_std", [True, False])
@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_group_advantages_match_direct_computation(scale_by_std, group_size):
    gen = torch.Generator().manual_seed(group_size)
    rewards = torch.rand(32, generator=gen, dtype=DTYPE).round(decimals=1)
    rewards[:group_size] = 0.7  # one degenerate group
    advantages, stats = group_advantages(rewards, group_size, scale_by_std=scale_by_std)
    expected = reference_advantages(rewards.tolist(), group_size, scale_by_std, 1e-6)
    assert advantages.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert stats["num_groups"] == 32 // group_size
    assert stats["degenerate_groups"] >= 1


def test_known_group_values():
    advantages, stats = group_advantages([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], 4, eps=0.0)
    # mean 0.25, unbiased std 0.5
    assert advantages.tolist() == [1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0]
    assert stats == {
        "reward_mean": 0.625,
        "reward_std": pytest.approx(statistics.stdev([1, 0, 0, 0, 1, 1, 1, 1])),
        "num_groups": 2.0,
        "degenerate_groups": 1.0,
        "degenerate_fraction": 0.5,
    }
    unscaled, _ = group_advantages([1, 0, 0, 0], 4, scale_by_std=False)
    assert unscaled.tolist() == [0.75, -0.25, -0.25, -0.25]


def test_degenerate_group_of_inexact_floats_gets_exactly_zero():
    # mean(0.1, 0.1, 0.1) is not exactly 0.1 in floating point; the group must still give zeros.
    advantages, stats = group_advantages(torch.tensor([0.1, 0.1, 0.1], dtype=torch.float32), 3)
    assert advantages.tolist() == [0.0, 0.0, 0.0]
    assert stats["degenerate_groups"] == 1


def test_filter_degenerate_groups_keeps_informative_groups():
    rewards = [1, 1, 0, 1, 0, 0, 0.5, 0.5, 0.2, 0.2]
    kept = filter_degenerate_groups(rewards, 2)
    assert kept.dtype == torch.int64
    assert kept.tolist() == [2, 3]
    assert filter_degenerate_groups([0, 1, 1, 2, 2, 2], 3).tolist() == [0, 1, 2]
    assert filter_degenerate_groups([3, 3, 3, 3], 2).tolist() == []


# ---------------------------------------------------------------- step-level advantages (GiGPO)


def test_terminal_returns_discount_the_final_reward_back_to_each_turn():
    assert terminal_returns(1.0, 3, 0.5) == [0.25, 0.5, 1.0]
    assert terminal_returns(0.8, 2, 1.0) == [0.8, 0.8]
    assert terminal_returns(1.0, 0, 0.9) == []
    with pytest.raises(ValueError, match="gamma must be in"):
        terminal_returns(1.0, 2, 0.0)
    with pytest.raises(ValueError, match="num_turns must be >= 0"):
        terminal_returns(1.0, -1, 0.9)


def reference_step_advantages(returns: list[float], anchors: list, scale_by_std: bool, eps: float) -> list[float]:
    out = []
    for r, anchor in zip(returns, anchors):
        group = [x for x, a in zip(returns, anchors) if a == anchor]
        if len(group) < 2 or len(set(group)) == 1:
            out.append(0.0)
        elif scale_by_std:
            out.append((r - statistics.fmean(group)) / (statistics.stdev(group) + eps))
        else:
            out.append(r - statistics.fmean(group))
    return out


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_step_advantages_match_direct_computation(scale_by_std):
    gen = torch.Generator().manual_seed(7)
    returns = torch.rand(40, generator=gen, dtype=DTYPE).round(decimals=1).tolist()
    anchors = [int(a) for a in torch.randint(0, 9, (40,), generator=gen)]
    advantages, stats = step_advantages(returns, anchors, scale_by_std=scale_by_std)
    expected = reference_step_advantages(returns, anchors, scale_by_std, 1e-6)
    assert advantages.dtype == torch.float32
    assert advantages.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert stats["step_groups"] == sum(1 for a in set(anchors) if anchors.count(a) > 1)


def test_known_step_values():
    # Two turns from state "s" (returns 1 and 0), three from "u" (all 0.5), one alone at "v".
    advantages, stats = step_advantages([1.0, 0.0, 0.5, 0.5, 0.5, 0.9], ["s", "s", "u", "u", "u", "v"], eps=0.0)
    std = statistics.stdev([1.0, 0.0])
    assert advantages.tolist() == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0, 0.0, 0.0])
    assert stats == {"step_groups": 2.0, "grouped_turn_fraction": 5 / 6}
    unscaled, _ = step_advantages([1.0, 0.0, 0.1, 0.1], ["s", "s", "u", "u"], scale_by_std=False)
    assert unscaled.tolist() == [0.5, -0.5, 0.0, 0.0]  # equal inexact floats: exactly 0
    empty, stats = step_advantages([], [])
    assert empty.tolist() == [] and math.isnan(stats["grouped_turn_fraction"])


@pytest.mark.parametrize(
    ("returns", "anchors", "options", "message"),
    [
        ([1.0, 0.0], ["s"], {}, "2 returns but 1 anchors"),
        ([1.0, float("inf")], ["s", "s"], {}, "returns must be finite"),
        ([1.0, 0.0], ["s", "s"], {"eps": -1.0}, "eps must be >= 0"),
    ],
)
def test_bad_step_inputs_raise_value_error(returns, anchors, options, message):
    with pytest.raises(ValueError, match=message):
        step_advantages(returns, anchors, **options)


# ---------------------------------------------------------------- bad input


def good_inputs(batch: int = 3, width: int = 4) -> dict:
    b = random_batch(14, batch=batch, width=width)
    return {"logprobs": b["logprobs"], "old_logprobs": b["old"], "ref_logprobs": b["ref"], "advantages": b["advantages"], "loss_mask": b["mask"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"logprobs": torch.zeros(4)}, "logprobs must be a \\[B, T\\] tensor"),
        ({"logprobs": torch.zeros(3, 4, dtype=torch.long)}, "floating point"),
        ({"old_logprobs": torch.zeros(3, 5)}, "old_logprobs must have the shape"),
        ({"ref_logprobs": torch.zeros(4, 4)}, "ref_logprobs must have the shape"),
        ({"loss_mask": torch.ones(3, 5, dtype=torch.bool)}, "loss_mask must have the shape"),
        ({"advantages": torch.zeros(3, 1)}, "advantages must have shape \\(3,\\)"),
        ({"advantages": torch.zeros(4)}, "advantages must have shape"),
        ({"advantages": [0.0, 0.0, 0.0]}, "advantages must have shape"),
        ({"advantages": torch.zeros(3, 5)}, "advantages must have shape \\(3,\\), one per trajectory, or \\(3, 4\\), one per token"),
        ({"loss_mask": torch.full((3, 4), 0.5)}, "only 0 and 1"),
    ],
)
def test_bad_shapes_raise_value_error(change, message):
    with pytest.raises(ValueError, match=message):
        masked_grpo_loss(**{**good_inputs(), **change})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"loss_agg": "token-sum"}, "unknown loss_agg"),
        ({"clip_eps": 0.0}, "clip_eps must be in"),
        ({"clip_eps": 1.0}, "clip_eps must be in"),
        ({"clip_eps_high": -0.1}, "clip_eps_high must be > 0"),
        ({"kl_coef": -1.0}, "kl_coef must be >= 0"),
        ({"kl_coef": float("nan")}, "kl_coef must be >= 0"),
        ({"max_len": 8}, "max_len only applies"),
        ({"loss_agg": "seq-mean-token-sum-norm", "max_len": 0}, "max_len must be a positive int"),
        ({"loss_agg": "seq-mean-token-sum-norm", "max_len": 2.5}, "max_len must be a positive int"),
        ({"normalizer": 0}, "normalizer must be > 0"),
        ({"normalizer": 1}, "smaller than this batch's own count of sequences"),
        ({"loss_agg": "token-mean", "normalizer": 2}, "own count of loss tokens"),
    ],
)
def test_bad_options_raise_value_error(options, message):
    with pytest.raises(ValueError, match=message):
        masked_grpo_loss(**good_inputs(), **options)


@pytest.mark.parametrize(
    ("rewards", "group_size", "message"),
    [
        ([1.0, 0.0, 1.0], 2, "multiple of group_size"),
        ([], 2, "multiple of group_size"),
        ([1.0, 0.0], 1, "group_size must be an int >= 2"),
        ([1.0, 0.0], True, "group_size must be an int >= 2"),
        ([[1.0, 0.0]], 2, "rewards must be 1-D"),
        ([1.0, float("nan")], 2, "rewards must be finite"),
        (["a", "b"], 2, "rewards must be a 1-D sequence of numbers"),
    ],
)
def test_bad_rewards_raise_value_error(rewards, group_size, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, group_size)
    with pytest.raises(ValueError, match=message):
        filter_degenerate_groups(rewards, group_size)


def test_negative_eps_raises_value_error():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        group_advantages([1.0, 0.0], 2, eps=-1e-6)


def test_loss_normalizer_counts():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 1]])
    assert loss_normalizer(mask, "token-mean") == 4
    assert loss_normalizer(mask, "seq-mean-token-mean") == 2
    assert loss_normalizer(mask, "seq-mean-token-sum-norm") == 2
    with pytest.raises(ValueError, match="unknown loss_agg"):
        loss_normalizer(mask, "sum")
