"""Per-token logprobs of the trainer: the shared-prefix pass equals the plain pass, values and gradients."""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import replace
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


@pytest.mark.parametrize("tied", [False, True], ids=["own-head", "tied-head"])
@pytest.mark.parametrize("share_prefix", [True, False], ids=["prefix", "no-prefix"])
@pytest.mark.parametrize(("by_row", "recompute"), [(True, True), (True, False), (False, False)], ids=["row-by-row-layers-again", "row-by-row", "whole-batch"])
def test_backward_by_row_gives_the_gradient_of_the_whole_batch(model, monkeypatch, by_row, recompute, share_prefix, tied) -> None:
    """Row by row (each row's layers run again in its backward, or its graph kept), through a shared
    prefix or not, equals one backward pass over the micro-batch's loss; also where the output layer
    is the input embeddings (the bundled model's), whose gradient then adds up from both ends."""
    from agentgym.trainers import modeling
    from agentgym.trainers.grpo import masked_grpo_loss
    from agentgym.trainers.modeling import backward_by_row

    monkeypatch.setattr(modeling, "BACKWARD_BY_ROW", by_row)
    monkeypatch.setattr(modeling, "RECOMPUTE_ROW_LAYERS", recompute)
    if tied:
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.model.embed_tokens.weight

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
    by_row, by_row_entropy = backward_by_row(
        model, batch, lambda r, row: loss(row, slice(r, r + 1)), temperature=0.7, share_prefix=share_prefix, with_entropy=True
    )
    assert not by_row.requires_grad
    torch.testing.assert_close(by_row, whole.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(by_row_entropy, whole_entropy, atol=1e-5, rtol=0)
    for got, want in zip((p.grad for p in model.parameters()), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("share_prefix", [True, False], ids=["prefix", "no-prefix"])
def test_rows_run_to_a_multiple_of_the_row_length_step_with_the_same_logprobs_and_gradient(model, monkeypatch, share_prefix) -> None:
    """Each row's pass past the prefix is a multiple of ROW_LENGTH_MULTIPLE tokens long (its own
    later tokens or padding, past the widest row too), and the logprobs, entropies and gradient
    equal those of passes that stop at each row's last needed position (multiple 1)."""
    from agentgym.trainers import modeling
    from agentgym.trainers.modeling import backward_by_row

    batch = grouped_batch(lengths=(9, 14, 5, 11))
    lengths: list[int] = []
    model.get_decoder().layers[0].register_forward_pre_hook(
        lambda _, args, kwargs: lengths.append((args[0] if args else kwargs["hidden_states"]).shape[1]), with_kwargs=True
    )

    def run(multiple: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[int]]:
        monkeypatch.setattr(modeling, "ROW_LENGTH_MULTIPLE", multiple)
        model.zero_grad()
        lengths.clear()
        logprobs, entropy = backward_by_row(model, batch, lambda r, row: -(row * (r + 1)).sum(), temperature=0.7, share_prefix=share_prefix, with_entropy=True)
        return logprobs, entropy, [p.grad.clone() for p in model.parameters()], list(lengths)

    exact, exact_entropy, exact_grads, exact_lengths = run(1)
    padded, padded_entropy, padded_grads, padded_lengths = run(8)
    prefix = shared_prefix_length(batch) if share_prefix else 0
    row_lengths = [n for n in padded_lengths if n != prefix]
    assert row_lengths and all(n % 8 == 0 for n in row_lengths)
    assert max(row_lengths) > batch.input_ids.shape[1] - prefix  # the widest row is padded past the batch
    assert sorted(set(exact_lengths) - {prefix}) != sorted(set(row_lengths))  # the exact passes had other lengths
    torch.testing.assert_close(padded, exact, atol=1e-5, rtol=0)
    torch.testing.assert_close(padded_entropy, exact_entropy, atol=1e-5, rtol=0)
    for got, want in zip(padded_grads, exact_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_the_rows_run_beside_a_prefix_without_activations_and_backward_runs_it_again_layer_by_layer(model) -> None:
    """The shared prefix's pass keeps no graph while the rows run (its activations would stay for
    the whole micro-batch); backward_prefix runs its decoder layers again, last to first, one
    layer's graph at a time. (Its gradient equals the plain one: the tests above.)"""
    from agentgym.trainers.modeling import _RowPasses

    batch = grouped_batch()
    passes = _RowPasses(model, batch, share_prefix=True, leaf_prefix=True)
    assert passes.prefix >= MIN_SHARED_PREFIX
    assert all(state.grad_fn is None for pair in passes._prefix_states for state in pair)
    for r in passes.rows:
        passes.states(r)[0].sum().backward()
    layers = list(model.get_decoder().layers)
    calls: list[int] = []
    for index, layer in enumerate(layers):
        layer.register_forward_hook(lambda _, args, out, index=index: calls.append(index) if torch.is_grad_enabled() else None)
    model.get_input_embeddings().weight.grad = None
    passes.backward_prefix()
    assert calls == list(reversed(range(len(layers))))
    assert model.get_input_embeddings().weight.grad is not None  # through the part before the first layer


def test_a_row_runs_without_activations_and_its_backward_runs_its_layers_again_layer_by_layer(model) -> None:
    """With recompute_rows, a row's pass runs its decoder layers without a graph (only the final
    norm has one), and backward_row runs them again, last to first, one layer's graph at a time,
    then the part before the first layer. (Its gradient equals the plain one: the test above.)"""
    from agentgym.trainers.modeling import _RowPasses

    layers = list(model.get_decoder().layers)
    calls: list[tuple[int, bool]] = []
    for index, layer in enumerate(layers):
        layer.register_forward_hook(lambda _, args, out, index=index: calls.append((index, torch.is_grad_enabled())))
    passes = _RowPasses(model, grouped_batch(), share_prefix=True, leaf_prefix=True, recompute_rows=True)
    for r in passes.rows:
        calls.clear()
        model.get_input_embeddings().weight.grad = None
        states, head = passes.states(r)
        assert head is model.get_output_embeddings()
        assert calls == [(index, False) for index in range(len(layers))]
        head(states).sum().backward()
        assert model.get_input_embeddings().weight.grad is None
        calls.clear()
        passes.backward_row()
        assert calls == [(index, True) for index in reversed(range(len(layers)))]
        assert model.get_input_embeddings().weight.grad is not None  # through the part before the first layer
    assert all(k.grad is not None and v.grad is not None for k, v in passes._attended)  # the rows' gradient reaches the prefix


needs_disk_mapping = pytest.mark.skipif(
    __import__("agentgym.trainers.memory", fromlist=["disk_folder"]).disk_folder() is None, reason="needs Linux and a temporary folder on disk"
)


@needs_disk_mapping
def test_offloaded_adamw_takes_the_same_steps_and_saves_the_same_state_as_adamw(model) -> None:
    """Bit for bit: updates, the saved state, and the steps after loading it into a new optimiser."""
    import copy
    import io

    from agentgym.trainers.config import OptimSection
    from agentgym.trainers.modeling import OffloadedAdamW, clip_and_step, make_optimizer

    optim = OptimSection(lr=1e-2, weight_decay=0.1, schedule="cosine", warmup_steps=1, max_grad_norm=0.5)
    plain_model, offloaded_model = model, copy.deepcopy(model)
    plain = torch.optim.AdamW(list(plain_model.parameters()), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps, weight_decay=optim.weight_decay)
    from transformers import get_scheduler

    plain_schedule = get_scheduler("cosine", plain, num_warmup_steps=1, num_training_steps=6)
    offloaded, offloaded_schedule = make_optimizer(offloaded_model, optim, 6)
    assert isinstance(offloaded, OffloadedAdamW)

    def step(net: torch.nn.Module, optimizer: torch.optim.Optimizer, schedule: torch.optim.lr_scheduler.LRScheduler, seed: int) -> None:
        batch = grouped_batch(seed=seed)
        (-token_logprobs(net, batch)[0].sum()).backward()
        clip_and_step(net, optimizer, schedule, optim.max_grad_norm)

    def saved(optimizer: torch.optim.Optimizer) -> dict:
        buffer = io.BytesIO()
        torch.save(optimizer.state_dict(), buffer)
        buffer.seek(0)
        return torch.load(buffer, weights_only=False)

    for seed in range(3):
        step(plain_model, plain, plain_schedule, seed)
        step(offloaded_model, offloaded, offloaded_schedule, seed)
    for got, want in zip(offloaded_model.parameters(), plain_model.parameters(), strict=True):
        assert torch.equal(got, want)
    state, plain_state = saved(offloaded), saved(plain)
    sizes = {}
    for name, optimizer in (("offloaded", offloaded), ("plain", plain)):
        buffer = io.BytesIO()
        torch.save(optimizer.state_dict(), buffer)
        sizes[name] = buffer.tell()
    assert sizes["offloaded"] < sizes["plain"] * 1.05  # each moment saved as itself, not as the whole file
    assert state["param_groups"] == plain_state["param_groups"]
    for index, moments in plain_state["state"].items():
        for key, value in moments.items():
            assert torch.equal(state["state"][index][key], value)
    # Resume: a new optimiser loads the saved state and takes the same next step.
    resumed_model = copy.deepcopy(offloaded_model)
    resumed, resumed_schedule = make_optimizer(resumed_model, optim, 6)
    resumed.load_state_dict(state)
    resumed_schedule.load_state_dict(offloaded_schedule.state_dict())
    step(plain_model, plain, plain_schedule, 3)
    step(resumed_model, resumed, resumed_schedule, 3)
    for got, want in zip(resumed_model.parameters(), plain_model.parameters(), strict=True):
        assert torch.equal(got, want)


@needs_disk_mapping
def test_mapped_tensors_leave_resident_memory_when_paged_out_and_keep_their_values() -> None:
    from agentgym.trainers.memory import MappedFile, disk_folder

    def resident() -> int:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * 4096

    size = 64 * 2**20
    folder = disk_folder()
    assert folder is not None
    mapped = MappedFile(size, folder)
    tensor = mapped.slot(torch.Size([size // 4]), torch.float32)
    assert mapped.holds(tensor) and not mapped.holds(tensor.clone())
    tensor.fill_(1.5)
    filled = resident()
    mapped.page_out(tensor)
    assert filled - resident() > size * 0.9
    assert float(mapped.private_view(tensor).sum()) == 1.5 * size / 4  # read without staying resident
    assert float(tensor.sum()) == 1.5 * size / 4


@needs_disk_mapping
def test_a_disk_without_room_for_the_moments_keeps_them_in_memory_with_a_warning(model, monkeypatch, tmp_path) -> None:
    """The moments' file reserves its blocks when it is made: a full disk is an error there (the
    optimiser then keeps its moments in memory and says so), never a SIGBUS at a later write to a
    sparse page; no file or descriptor is left behind."""
    import errno

    from agentgym.trainers import memory, modeling
    from agentgym.trainers.config import OptimSection

    def no_room(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(memory.os, "posix_fallocate", no_room)
    monkeypatch.setattr(memory, "optimizer_state_folder", lambda: tmp_path)
    monkeypatch.setattr(modeling, "optimizer_state_folder", lambda: tmp_path)
    open_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="No space left"):
        memory.MappedFile(2**20, tmp_path)
    with pytest.warns(RuntimeWarning, match="no room for the optimiser's moments on disk"):
        optimizer, _ = modeling.make_optimizer(model, OptimSection(), 2)
    assert type(optimizer) is torch.optim.AdamW
    assert list(tmp_path.iterdir()) == [] and len(os.listdir("/proc/self/fd")) == open_before
    (-token_logprobs(model, grouped_batch())[0].sum()).backward()
    optimizer.step()  # it trains


def test_the_optimiser_step_starts_after_the_freed_memory_went_back(model, monkeypatch) -> None:
    """The step's own memory (a parameter's moments, AdamW's temporaries) must not come on top of
    the backward passes' freed blocks: they go back to the system before the step, and the step's after it."""
    from agentgym.trainers import modeling
    from agentgym.trainers.config import OptimSection

    events: list[str] = []
    monkeypatch.setattr(modeling, "return_freed_memory", lambda: events.append("trim"))
    optimizer, scheduler = modeling.make_optimizer(model, OptimSection(), 2)
    step = optimizer.step
    monkeypatch.setattr(optimizer, "step", lambda: (events.append("step"), step())[1])
    (-token_logprobs(model, grouped_batch())[0].sum()).backward()
    modeling.clip_and_step(model, optimizer, scheduler, 1.0)
    assert events == ["trim", "step", "trim"]


def test_each_rows_backward_is_followed_by_the_freed_memory_going_back(model, monkeypatch) -> None:
    """A row's freed activations go back to the system before the next row's pass (their blocks fit
    its requests badly), once per row that has loss tokens; the gradient is what it was without."""
    from agentgym.trainers import modeling
    from agentgym.trainers.modeling import backward_by_row

    batch = grouped_batch(lengths=(9, 14, 5, 11))
    batch = replace(batch, loss_mask=batch.loss_mask.clone())
    batch.loss_mask[2] = False  # no loss tokens: the row does not run
    events: list[str] = []
    monkeypatch.setattr(modeling, "return_freed_memory", lambda: events.append("trim"))
    model.get_decoder().layers[0].register_forward_pre_hook(lambda *_: events.append("pass"))

    def run(trim: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(modeling, "TRIM_BETWEEN_ROWS", trim)
        model.zero_grad()
        events.clear()
        backward_by_row(model, batch, lambda r, row: -(row * (r + 1)).sum(), share_prefix=True)
        return [p.grad.clone() for p in model.parameters()]

    untrimmed = run(False)
    assert "trim" not in events
    trimmed = run(True)
    # Each of the three rows: its pass, its layers again in backward, then the trim (the prefix's passes come first and last).
    rows = "".join("t" if e == "trim" else "p" for e in events)
    assert rows.count("t") == 3 and "tt" not in rows and not rows.startswith("t"), rows
    for got, want in zip(trimmed, untrimmed, strict=True):
        assert torch.equal(got, want)


def test_a_training_process_bounds_onednns_and_ideeps_caches_unless_told_otherwise(monkeypatch) -> None:
    from agentgym.trainers import memory

    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    memory.bound_primitive_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(memory.ONEDNN_PRIMITIVE_CACHE)
    assert os.environ["LRU_CACHE_CAPACITY"] == str(memory.IDEEP_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8")  # the user's choices stand
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "1024")
    memory.bound_primitive_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "8"
    assert os.environ["LRU_CACHE_CAPACITY"] == "1024"
