"""Per-token logprobs of the trainer: the shared-prefix pass equals the plain pass, values and gradients."""

from __future__ import annotations

import math
import warnings
from unittest import mock

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgym.trainers.modeling import MIN_SHARED_PREFIX, Reference, TensorBatch, shared_prefix_length, token_logprobs


@pytest.fixture
def model() -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


def grouped_batch(prefix: int = 30, lengths: tuple[int, ...] = (9, 14, 5, 11), seed: int = 1) -> TensorBatch:
    """Rows sharing a ``prefix``-token prompt, then ragged tails whose odd positions are loss tokens."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randint(0, 97, (prefix,), generator=gen)
    width = prefix + max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for row, n in enumerate(lengths):
        ids[row, :prefix] = shared
        ids[row, prefix : prefix + n] = torch.randint(0, 97, (n,), generator=gen)
        attention[row, : prefix + n] = 1
        mask[row, prefix : prefix + n : 2] = True  # holes stand for tool output between turns
    return TensorBatch(ids, attention, mask, torch.zeros(ids.shape))


def plain_reference(model: LlamaForCausalLM, batch: TensorBatch, temperature: float = 1.0) -> torch.Tensor:
    """The textbook computation: full logits, log-softmax, gather the next token, mask."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float() / temperature
    picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    out = torch.zeros(batch.input_ids.shape)
    out[:, 1:] = picked
    return out * batch.loss_mask


def test_shared_prefix_length_stops_before_the_first_needed_prediction() -> None:
    batch = grouped_batch(prefix=30)
    # The first loss token sits at 30 and is predicted at 29: the prefix is 29 tokens.
    assert shared_prefix_length(batch) == 29
    different = TensorBatch(batch.input_ids.clone(), batch.attention_mask, batch.loss_mask, batch.logprobs)
    different.input_ids[2, 7] = (different.input_ids[0, 7] + 1) % 97
    assert shared_prefix_length(different) == 7
    assert shared_prefix_length(batch.rows(slice(0, 1))) == 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_the_plain_computation_with_and_without_prefix_sharing(model, temperature) -> None:
    batch = grouped_batch()
    assert shared_prefix_length(batch) >= MIN_SHARED_PREFIX
    expected = plain_reference(model, batch, temperature)
    for share in (True, False):
        got, entropy = token_logprobs(model, batch, temperature=temperature, share_prefix=share, with_entropy=True)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=0)
        assert bool((entropy[~batch.loss_mask] == 0).all()) and bool((entropy[batch.loss_mask] > 0).all())
        assert float(entropy.max()) <= math.log(97) + 1e-4


def test_models_with_a_logit_transform_take_their_own_forward_pass(model) -> None:
    # A config that declares a logit scaling makes token_logprobs use the model's forward (which
    # would apply it) instead of the decoder plus the output layer; Llama ignores the field, so
    # both paths must give the plain values.
    batch = grouped_batch()
    expected = plain_reference(model, batch)
    model.config.logits_scaling = 1.0
    for share in (True, False):
        got, _ = token_logprobs(model, batch, share_prefix=share)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=0)


def test_tokens_after_the_last_loss_token_do_not_change_the_result(model) -> None:
    batch = grouped_batch()
    longer = TensorBatch(
        torch.cat([batch.input_ids, torch.randint(0, 97, (4, 7))], dim=1),
        torch.cat([batch.attention_mask, torch.ones(4, 7, dtype=batch.attention_mask.dtype)], dim=1),
        torch.cat([batch.loss_mask, torch.zeros(4, 7, dtype=torch.bool)], dim=1),
        torch.zeros(4, batch.input_ids.shape[1] + 7),
    )
    got, _ = token_logprobs(model, longer)
    torch.testing.assert_close(got[:, : batch.input_ids.shape[1]], token_logprobs(model, batch)[0], atol=2e-5, rtol=0)
    assert not got[:, batch.input_ids.shape[1] :].any()


def test_shared_prefix_gradient_equals_plain_gradient(model) -> None:
    batch = grouped_batch()
    grads = []
    for share in (True, False):
        model.zero_grad()
        logprobs, _ = token_logprobs(model, batch, share_prefix=share)
        (logprobs * torch.linspace(-1, 1, logprobs.shape[1])).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for shared, plain in zip(*grads, strict=True):
        torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-4)


def test_entropy_equals_the_distribution_entropy(model) -> None:
    batch = grouped_batch()
    _, entropy = token_logprobs(model, batch, with_entropy=True)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    p = torch.softmax(logits, dim=-1)
    expected = torch.zeros(batch.input_ids.shape)
    expected[:, 1:] = -(p * p.log()).sum(-1)
    torch.testing.assert_close(entropy, (expected * batch.loss_mask).detach(), atol=2e-5, rtol=0)


def test_batch_without_loss_tokens_gives_zeros(model) -> None:
    batch = grouped_batch()
    empty = TensorBatch(batch.input_ids, batch.attention_mask, torch.zeros_like(batch.loss_mask), batch.logprobs)
    logprobs, entropy = token_logprobs(model, empty, with_entropy=True)
    assert not logprobs.any() and not entropy.any()


def test_a_row_without_loss_tokens_is_skipped_and_the_others_are_unchanged(model) -> None:
    # Rows run one at a time after the shared prefix; a row with nothing to learn from (a
    # truncated trajectory, masked) runs not at all, and the gradient is the plain one.
    batch = grouped_batch()
    mask = batch.loss_mask.clone()
    mask[1] = False
    partial = TensorBatch(batch.input_ids, batch.attention_mask, mask, batch.logprobs)
    expected = plain_reference(model, partial)
    grads = []
    for share in (True, False):
        model.zero_grad()
        got, _ = token_logprobs(model, partial, share_prefix=share)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=0)
        assert not got[1].any()
        got.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad()
    plain_reference(model, partial).sum().backward()
    for shared, unshared, plain in zip(*grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(unshared, plain, atol=1e-5, rtol=1e-4)


def test_reference_is_a_frozen_snapshot(model) -> None:
    batch = grouped_batch()
    reference = Reference(model)
    before = reference.logprobs(batch)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
    torch.testing.assert_close(reference.logprobs(batch), before)
    assert not torch.allclose(token_logprobs(model, batch)[0], before)
    assert all(not p.requires_grad for p in reference.model.parameters())


def test_bf16_autocast_sees_every_weight_update() -> None:
    """The trainer keeps one autocast context for a whole run; casts must not be cached across steps."""
    from agentgym.trainers.modeling import autocast

    layer = torch.nn.Linear(4, 4)
    x = torch.ones(1, 4)
    with autocast(torch.device("cpu"), "bf16"):
        before = layer(x).detach().clone()
        assert before.dtype == torch.bfloat16
        with torch.no_grad():
            layer.weight.add_(1.0)
        after = layer(x)
    assert not torch.equal(before, after)
    with autocast(torch.device("cpu"), "off"):
        assert layer(x).dtype == torch.float32


@pytest.mark.parametrize("native", [True, False])
def test_auto_autocast_uses_bf16_only_where_the_cpu_has_it(monkeypatch, native) -> None:
    from agentgym.trainers import modeling

    monkeypatch.setattr(modeling, "cpu_has_native_bf16", lambda: native)
    layer, x = torch.nn.Linear(4, 4), torch.ones(1, 4)
    with modeling.autocast(torch.device("cpu"), "auto"):
        assert layer(x).dtype == (torch.bfloat16 if native else torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with modeling.autocast(torch.device("cpu"), "bf16"):
            assert layer(x).dtype == torch.bfloat16  # asked for, so given
    assert [str(w.message) for w in caught if "without native bfloat16" in str(w.message)] == ([] if native else [mock.ANY])


def _loss_and_grads(model: LlamaForCausalLM, batch: TensorBatch) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """A GRPO loss over ``batch`` (advantages of both signs, a KL term), its value, entropies and gradient."""
    from agentgym.trainers.grpo import masked_grpo_loss

    model.zero_grad()
    logprobs, entropy = token_logprobs(model, batch, temperature=0.7, with_entropy=True)
    advantages = torch.linspace(-1, 1, len(batch))
    loss, _ = masked_grpo_loss(logprobs, logprobs.detach() - 0.05, logprobs.detach() + 0.1, advantages, batch.loss_mask, kl_coef=0.1)
    loss.backward()
    return loss.detach(), entropy, [p.grad.clone() for p in model.parameters()]


def test_logprobs_in_chunks_give_the_loss_and_gradient_of_one_piece(model, monkeypatch) -> None:
    from agentgym.trainers import modeling

    batch = grouped_batch()
    monkeypatch.setattr(modeling, "LOGPROB_CHUNK_TOKENS", None)
    whole = _loss_and_grads(model, batch)
    monkeypatch.setattr(modeling, "LOGPROB_CHUNK_TOKENS", 3)  # 20 loss tokens: 7 chunks, the last one short
    chunked = _loss_and_grads(model, batch)
    torch.testing.assert_close(chunked[0], whole[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(chunked[1], whole[1], atol=1e-5, rtol=0)
    for a, b in zip(chunked[2], whole[2], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_backward_keeps_no_logits_beyond_one_chunk(model, monkeypatch) -> None:
    """Only one chunk's ``[tokens, vocab]`` logits may exist at once: none is saved for backward."""
    from agentgym.trainers import modeling

    monkeypatch.setattr(modeling, "LOGPROB_CHUNK_TOKENS", 3)
    vocab = model.config.vocab_size
    saved_rows = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 2 and tensor.shape[-1] == vocab:
            saved_rows.append(tensor.shape[0])
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logprobs, _ = token_logprobs(model, grouped_batch())
    logprobs.sum().backward()
    assert max(saved_rows, default=0) <= 3


@pytest.mark.parametrize("by_row", [True, False], ids=["row-by-row", "whole-batch"])
def test_backward_by_row_gives_the_gradient_of_the_whole_batch(model, monkeypatch, by_row) -> None:
    """Row by row, through a shared prefix, equals one backward pass over the micro-batch's loss."""
    from agentgym.trainers import modeling
    from agentgym.trainers.grpo import masked_grpo_loss
    from agentgym.trainers.modeling import backward_by_row

    monkeypatch.setattr(modeling, "BACKWARD_BY_ROW", by_row)

    batch = grouped_batch()
    assert shared_prefix_length(batch) >= MIN_SHARED_PREFIX  # the prefix's gradient path is exercised
    advantages = torch.linspace(-1, 1, len(batch))

    def loss(logprobs: torch.Tensor, rows: slice) -> torch.Tensor:
        ref = logprobs.detach() + 0.1
        return masked_grpo_loss(logprobs, logprobs.detach() - 0.05, ref, advantages[rows], batch.loss_mask[rows], kl_coef=0.1, normalizer=len(batch))[0]

    model.zero_grad()
    whole, whole_entropy = token_logprobs(model, batch, temperature=0.7, with_entropy=True)
    loss(whole, slice(None)).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    by_row, by_row_entropy = backward_by_row(model, batch, lambda r, row: loss(row, slice(r, r + 1)), temperature=0.7, with_entropy=True)
    assert not by_row.requires_grad
    torch.testing.assert_close(by_row, whole.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(by_row_entropy, whole_entropy, atol=1e-5, rtol=0)
    for got, want in zip((p.grad for p in model.parameters()), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
