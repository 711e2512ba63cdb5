"""The key/value-reusing engine behind HFBackend: same tokens as prefilling from scratch, exact logprobs,
continuous batching, eviction, invalidation, and the pieces it is built from."""

from __future__ import annotations

import math
import os

import pytest
import torch

from agentgym.models import SamplingParams
from agentgym.models.kv_cache import KVRows
from agentgym.models.prefix_attention import _ACTIVE, SharedPrefix, _attend, prefix_attention
from agentgym.rollouts.runner import RolloutConfig, RolloutRunner


@pytest.fixture(scope="module")
def plain(smollm):
    from agentgym.models import HFBackend

    return HFBackend(*smollm, reuse_cache=False)


@pytest.fixture(scope="module")
def cached(smollm):
    from agentgym.models import HFBackend

    return HFBackend(*smollm)


def _chat(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def _config(**overrides) -> RolloutConfig:
    """Two SearchQA-v0 tasks, a group of two each, two turns: a system prompt all episodes share,
    prompts a group shares, and second turns that continue the first (what the engine reuses)."""
    settings = {"split": "test", "num_tasks": 2, "group_size": 2, "max_turns": 2, "max_new_tokens": 8, "seed": 11}
    return RolloutConfig("agentgym/SearchQA-v0", **{**settings, **overrides})


@pytest.fixture(scope="module")
def sampled(plain, cached):
    """The same sampled rollouts with and without reuse, and the reusing run's timing."""
    config = _config(temperature=1.0)
    slow = RolloutRunner(plain).run(config)
    runner = RolloutRunner(cached)
    fast = runner.run(config)
    return slow, fast, runner.last_timing


def test_sampled_rollouts_with_reuse_equal_rollouts_from_scratch(sampled) -> None:
    slow, fast, timing = sampled
    assert [e.trajectory.token_ids for e in fast] == [e.trajectory.token_ids for e in slow]
    assert [e.trajectory.loss_mask for e in fast] == [e.trajectory.loss_mask for e in slow]
    assert all(e.trajectory.num_turns == 2 for e in fast)
    for a, b in zip(fast, slow, strict=True):
        assert max(abs(x - y) for x, y in zip(a.trajectory.logprobs, b.trajectory.logprobs, strict=True)) < 1e-3
    assert timing is not None and timing.reused_tokens > 0.5 * timing.prompt_tokens  # most of each prompt was reused


def test_greedy_rollouts_with_reuse_equal_rollouts_from_scratch(plain, cached) -> None:
    config = _config(temperature=0.0, group_size=1)
    slow = RolloutRunner(plain).run(config)
    fast = RolloutRunner(cached).run(config)
    assert [e.trajectory.token_ids for e in fast] == [e.trajectory.token_ids for e in slow]


def test_recorded_logprobs_match_a_full_recompute(smollm, sampled) -> None:
    model, _ = smollm
    for episode in sampled[1]:
        trajectory = episode.trajectory
        ids = torch.tensor([trajectory.token_ids])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
        assert mask.sum() > 0
        assert torch.allclose(logp[mask], torch.tensor(trajectory.logprobs[1:])[mask], atol=1e-3)


@pytest.mark.parametrize("reuse_cache", [True, False])
def test_hot_tokens_are_drawn_at_their_own_temperature(smollm, tokenizer, reuse_cache) -> None:
    from agentgym.models import HFBackend

    model, _ = smollm
    backend = HFBackend(*smollm, reuse_cache=reuse_cache)
    prompts = [_chat(tokenizer, q) for q in ("Name a fruit.", "Count to five.")]
    hot = backend.generate(prompts, [SamplingParams(temperature=2.0, max_new_tokens=10, seed=7 + i) for i in range(2)])
    mixed = backend.generate(prompts, [SamplingParams(temperature=0.5, max_new_tokens=10, seed=7 + i, hot_tokens=4, hot_temperature=2.0) for i in range(2)])
    for prompt, a, b in zip(prompts, hot, mixed, strict=True):
        # A row's draws come from its own generator in order: the hot tokens are the all-hot completion's.
        assert b.token_ids[:4] == a.token_ids[:4] and b.logprobs[:4] == pytest.approx(a.logprobs[:4], abs=1e-4)
        # Each reported logprob is the token's under the temperature it was drawn at.
        ids = torch.tensor([[*prompt, *b.token_ids]])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        scale = torch.tensor([2.0] * 4 + [0.5] * (len(b.token_ids) - 4))[:, None]
        expected = torch.log_softmax(logits / scale, -1).gather(-1, torch.tensor(b.token_ids)[:, None])[:, 0]
        assert torch.allclose(expected, torch.tensor(b.logprobs), atol=1e-3)
    assert [g.token_ids for g in mixed] != [g.token_ids for g in hot]  # the rest is not drawn hot


def test_backends_that_sample_at_one_temperature_refuse_hot_tokens() -> None:
    from agentgym.models.backend import per_prompt_params

    params = SamplingParams(temperature=0.7, hot_tokens=8, hot_temperature=1.6)
    assert params.temperature_at(7) == 1.6 and params.temperature_at(8) == 0.7
    window = SamplingParams(temperature=0.7, hot_tokens=2, hot_offset=9, hot_temperature=2.0)
    assert [window.temperature_at(n) for n in (0, 8, 9, 10, 11)] == [0.7, 0.7, 2.0, 2.0, 0.7]
    with pytest.raises(ValueError, match="needs the hf backend"):
        per_prompt_params([[1, 2]], params, 10)
    assert per_prompt_params([[1, 2]], params, 10, hot=True) == [params]
    with pytest.raises(ValueError, match="set both or neither"):
        SamplingParams(hot_tokens=8)


def test_continuous_batching_and_eviction_give_the_same_tokens(smollm, tokenizer, plain) -> None:
    from agentgym.models import HFBackend

    prompts = [_chat(tokenizer, q) for q in ("Name a fruit.", "Count to five.", "What is the capital of France?", "Say hi.", "Name a colour.")]
    params = [SamplingParams(temperature=1.0, max_new_tokens=6 + 3 * i, seed=40 + i) for i in range(len(prompts))]
    expected = plain.generate(prompts, params)
    # Two rows for five requests: they queue, join as others finish, and evict finished rows.
    small = HFBackend(*smollm, max_batch_size=2)
    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        small.submit(i, prompt, p)
    got: dict[int, object] = {}
    while small.in_flight:
        finished = small.advance()
        assert finished
        got.update(finished)
    assert [got[i].token_ids for i in range(len(prompts))] == [g.token_ids for g in expected]
    assert small.engine.rows.num_rows <= 2


def test_a_continuation_prefills_only_its_new_tokens(tokenizer, cached) -> None:
    cached.clear_cache()
    cached.engine.reset_stats()
    prompt = _chat(tokenizer, "Tell me a short story about a cat.")
    first = cached.generate([prompt], SamplingParams(temperature=0, max_new_tokens=10))[0]
    delta = tokenizer("<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    following = prompt + list(first.token_ids) + delta
    before = cached.engine.stats.prefilled_tokens
    cached.generate([following], SamplingParams(temperature=0, max_new_tokens=4))
    # The cache held the prompt and all sampled tokens but the last (never fed back).
    assert cached.engine.stats.prefilled_tokens - before == 1 + len(delta)


def test_identical_prompts_are_prefilled_once(tokenizer, cached) -> None:
    cached.clear_cache()
    cached.engine.reset_stats()
    prompt = _chat(tokenizer, "Write a haiku about the sea.")
    params = [SamplingParams(temperature=1.0, max_new_tokens=3, seed=s) for s in range(4)]
    generations = cached.generate([prompt] * 4, params)
    assert cached.engine.stats.prefilled_tokens == len(prompt)
    assert len({g.token_ids for g in generations}) > 1  # the members still sample independently


def test_weight_updates_invalidate_the_cache(smollm, tokenizer) -> None:
    from agentgym.models import HFBackend

    model, _ = smollm
    backend = HFBackend(*smollm)
    prompt = _chat(tokenizer, "Name a planet.")
    params = SamplingParams(temperature=0, max_new_tokens=4)
    backend.generate([prompt], params)
    assert backend.engine.rows.num_rows == 1
    weight = model.get_output_embeddings().weight
    with torch.no_grad():
        weight.add_(0.0)  # an in-place update (values unchanged) bumps the version counter
    backend.generate([prompt], params)
    assert backend.engine.stats.reused_tokens == 0  # nothing survived the update


def test_a_tiny_cache_budget_still_finishes_every_request(smollm, tokenizer, plain) -> None:
    from agentgym.models import HFBackend

    prompts = [_chat(tokenizer, q) for q in ("One.", "Two two.", "Three three three.")]
    params = SamplingParams(temperature=0, max_new_tokens=5)
    tight = HFBackend(*smollm, max_cache_gib=1e-6)  # room for less than one row: one request at a time
    assert [g.token_ids for g in tight.generate(prompts, params)] == [g.token_ids for g in plain.generate(prompts, params)]
    with pytest.raises(RuntimeError, match="in flight"):
        tight.submit("x", prompts[0], params)
        tight.generate(prompts, params)
    tight.advance()


def test_buffers_sized_to_need_decode_the_same_greedy_tokens_as_doubling(smollm, tokenizer, monkeypatch) -> None:
    """Growing the key/value buffers by a quarter (now) instead of doubling (before) leaves the tokens alone."""
    from agentgym.models import HFBackend, engine

    monkeypatch.setattr(engine, "_CAPACITY_GRANULARITY", 16)  # short prompts then outgrow the buffers
    story = _chat(tokenizer, "Tell me a story about a cat who sails around the world.")
    params = SamplingParams(temperature=0, max_new_tokens=24)
    turn = tokenizer("<|im_end|>\n<|im_start|>user\nAnd then what happened to the cat?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
        "input_ids"
    ]
    outputs, capacities = [], []
    for growth in (2.0, 1.25):
        backend = HFBackend(*smollm)
        backend.engine.capacity_growth = growth
        first = backend.generate([story, story[:-3]], params)
        # The next turn outgrows the first buffers, which reallocate and keep the cached rows.
        second = backend.generate([story + list(first[0].token_ids) + turn, story[:-3] + list(first[1].token_ids) + turn], params)
        outputs.append([g.token_ids for g in (*first, *second)])
        capacities.append(backend.engine.rows.capacity)
        assert backend.engine.stats.reused_tokens > 0
    assert capacities[1] < capacities[0]  # the two rules did size the buffers differently
    assert outputs[0] == outputs[1]


def test_rows_of_forgotten_sequences_are_left_behind_when_the_buffers_grow(smollm, tokenizer, monkeypatch) -> None:
    """A growth copies only the rows whose sequences may go on: the tokens stay those of an engine
    that keeps every row, with a smaller rectangle."""
    from agentgym.models import HFBackend, engine

    monkeypatch.setattr(engine, "_CAPACITY_GRANULARITY", 16)  # the second turn outgrows the first buffers
    prompts = [_chat(tokenizer, q) for q in ("Tell me a story about a cat who sails.", "Name a fruit.", "Count to five.", "Say hi.")]
    params = SamplingParams(temperature=0, max_new_tokens=12)
    turn = tokenizer("<|im_end|>\n<|im_start|>user\nAnd then what happened to the cat at sea?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
        "input_ids"
    ]

    def run(forgetting: bool) -> tuple[list[tuple[int, ...]], int, int]:
        backend = HFBackend(*smollm)
        backend.engine.capacity_growth = 1.0
        for key, prompt in enumerate(prompts):
            backend.submit(key, prompt, params)
        first: dict = {}
        while backend.in_flight:
            first.update(backend.advance())
        if forgetting:
            for key in (1, 2, 3):  # their episodes are over; the first goes on
                backend.forget(key)
        capacity = backend.engine.rows.capacity
        backend.submit(0, prompts[0] + list(first[0].token_ids) + turn, SamplingParams(temperature=0, max_new_tokens=40))
        (second,) = backend.advance()
        assert backend.engine.rows.capacity > capacity  # it did grow
        assert backend.engine.stats.reused_tokens > 0  # and the continuation kept its row
        return [first[k].token_ids for k in range(4)] + [second[1].token_ids], backend.engine.rows.num_rows, backend.engine.rows.nbytes

    tokens_all, rows_all, bytes_all = run(forgetting=False)
    tokens_forgot, rows_forgot, bytes_forgot = run(forgetting=True)
    assert tokens_forgot == tokens_all
    assert (rows_all, rows_forgot) == (4, 1) and bytes_forgot < bytes_all / 3


def test_the_runner_forgets_each_episode_as_it_ends(cached) -> None:
    episodes = RolloutRunner(cached).run(_config(temperature=1.0))
    engine = cached.engine
    assert len(episodes) == engine.rows.num_rows == 4  # one row an episode, each holding its last turn
    assert engine._spent == [True] * 4


def test_forgetting_a_key_spares_a_row_another_request_has_taken(smollm, tokenizer) -> None:
    from agentgym.models import HFBackend

    backend = HFBackend(*smollm, max_batch_size=1)
    params = SamplingParams(temperature=0, max_new_tokens=3)
    backend.submit("a", _chat(tokenizer, "Say hi."), params)
    backend.advance()
    backend.submit("b", _chat(tokenizer, "Name a fruit."), params)  # takes the one row over
    backend.advance()
    backend.forget("a")
    assert backend.engine._spent == [False]
    backend.forget("b")
    assert backend.engine._spent == [True]


def test_a_request_moved_into_a_forgotten_row_is_not_forgotten(smollm, tokenizer) -> None:
    """Compaction moves a running request down into an idle row, which may be one whose sequence
    was over: the request's row must not inherit that."""
    from agentgym.models import HFBackend

    questions = ("Write a long story about a dragon.", "Say hi.", "Name a fruit.", "Count to three.", "Write a long poem about the sea.")
    prompts = [_chat(tokenizer, q) for q in questions]
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))  # the engine gives rows in prompt order
    long = {order[0], order[-1]}  # the first and last rows decode on; the three between finish at once
    backend = HFBackend(*smollm)
    for key, prompt in enumerate(prompts):
        limit = 24 if key in long else 1
        backend.submit(key, prompt, SamplingParams(temperature=0, max_new_tokens=limit, stop_token_ids=()))
    forgotten = set()
    while backend.in_flight:
        for key, _ in backend.advance():
            if key not in long:
                backend.forget(key)
                forgotten.add(key)
    engine = backend.engine
    assert engine.stats.decoded_tokens > 3 + 2 * 2  # the long ones ran on past the others
    assert all(engine._last_key[r] in forgotten for r in range(engine.rows.num_rows) if engine._spent[r])
    assert sum(engine._spent) == len(forgotten) - 1  # one forgotten row was taken over by the moved request


def test_a_shared_system_prompt_is_stored_once_with_the_same_tokens(smollm, tokenizer, plain) -> None:
    from agentgym.models import HFBackend

    system = "You are a careful assistant for a hardware store. " * 12  # well over 64 shared tokens

    def chat(system: str, text: str) -> list[int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(rendered, add_special_tokens=False)["input_ids"]

    first = [chat(system, q) for q in ("Name a tool.", "Do you sell nails?", "When do you open?")]
    # Later: one more request with that prompt, and one with another system prompt.
    later = [chat(system, "Do you sell glue?"), chat("Answer in one word.", "Name a colour.")]
    params = [SamplingParams(temperature=1.0, max_new_tokens=12, seed=70 + i) for i in range(len(first) + len(later))]
    expected = plain.generate(first + later, params)
    peaks: dict[str, int] = {}
    for mode in ("stored", "in every row"):
        backend = HFBackend(*smollm)
        backend.engine.store_prefix = mode == "stored"
        got: dict[int, object] = {}
        for i, prompt in enumerate(first):
            backend.submit(i, prompt, params[i])
        got.update(backend.advance())
        if mode == "stored":
            assert backend.engine.rows.base > 64 and backend.engine.rows.base == len(os.path.commonprefix(first)) == len(
                backend.engine.rows.prefix_keys[0][0, 0]
            )
        peaks[mode] = backend.engine.stats.peak_cache_bytes
        while backend.in_flight:
            got.update(backend.advance())
        for i, prompt in enumerate(later, start=len(first)):
            backend.submit(i, prompt, params[i])
        while backend.in_flight:
            got.update(backend.advance())
        if mode == "stored":
            assert backend.engine.rows.base == 0  # the other system prompt shares less than 64 tokens: the rows took it back
        assert [got[i].token_ids for i in range(len(params))] == [g.token_ids for g in expected]
    # While the first three decoded together, the buffers held the system prompt once, not three times.
    assert peaks["stored"] < peaks["in every row"]


def test_weights_cast_once_under_autocast_give_the_same_tokens(smollm, tokenizer) -> None:
    from agentgym.models import HFBackend
    from agentgym.models.engine import _WeightCasts

    prompts = [_chat(tokenizer, q) for q in ("Name a fruit.", "Count to five.")]
    params = [SamplingParams(temperature=1.0, max_new_tokens=8, seed=90 + i) for i in range(2)]
    calls = [0]
    cast = _WeightCasts.__call__

    def counting(self, weight, dtype):
        calls[0] += 1
        return cast(self, weight, dtype)

    outputs, copies = {}, {}
    for cast_weights in (False, True):
        backend = HFBackend(*smollm)
        backend.engine.cast_weights = cast_weights
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.MonkeyPatch.context() as patch:
            patch.setattr(_WeightCasts, "__call__", counting)
            outputs[cast_weights] = [g.token_ids for g in backend.generate(prompts, params)]
        copies[cast_weights] = {w.dtype for _, _, w in backend.engine._casts._copies.values()}, len(backend.engine._casts._copies)
    assert outputs[True] == outputs[False]
    # One bf16 copy per linear layer's weight, made once and read by every pass after.
    linears = sum(isinstance(m, torch.nn.Linear) for m in smollm[0].modules())
    assert copies[False] == (set(), 0) and copies[True] == ({torch.bfloat16}, linears)
    assert calls[0] > 3 * linears
    backend.clear_cache()
    assert not backend.engine._casts._copies


def test_kv_rows_regrow_keeps_the_chosen_rows_in_order() -> None:
    rows = KVRows(2, 1, 4, dtype=torch.float32, device=torch.device("cpu"))
    rows.reserve(3, 8)
    for r in range(3):
        rows.keys[1][r, :, : r + 2] = float(r + 1)
        rows.values[0][r, :, : r + 2] = -float(r + 1)
        rows.lengths[r] = r + 2
    rows.regrow([2, 0], 3, 16)
    assert rows.num_rows == 3 and rows.capacity == 16 and rows.lengths == [4, 2, 0]
    assert torch.all(rows.keys[1][0, :, :4] == 3.0) and torch.all(rows.values[0][0, :, :4] == -3.0)
    assert torch.all(rows.keys[1][1, :, :2] == 1.0) and torch.all(rows.keys[1][1, :, 2:] == 0.0)
    assert torch.all(rows.keys[1][2] == 0.0)


def test_kv_rows_grow_and_copy_prefixes() -> None:
    rows = KVRows(2, 1, 4, dtype=torch.float32, device=torch.device("cpu"))
    rows.reserve(2, 8)
    rows.keys[0][0, :, :5] = 1.5
    rows.lengths[0] = 5
    rows.reserve(3, 20)
    assert rows.num_rows == 3 and rows.capacity == 20
    assert torch.all(rows.keys[0][0, :, :5] == 1.5) and rows.lengths[0] == 5  # kept across growth
    rows.copy_prefix(0, 2, 3)
    assert rows.lengths[2] == 3 and torch.all(rows.keys[0][2, :, :3] == 1.5)
    view = rows.view(slice(0, 3), [2, 0, 1])
    # Row 0 appends at 5..6, row 1 sits out (scratch), row 2 appends its one token at 3 (left padding).
    assert view.columns.tolist() == [[5, 6], [20, 20], [20, 3]]
    assert view.position_ids().tolist() == [[5, 6], [0, 0], [0, 3]]
    mask = view.attention_mask(torch.float32)
    assert mask.shape == (3, 1, 2, 7)
    assert (mask[2, 0, 1] == 0).tolist() == [True] * 4 + [False] * 3


def test_kv_rows_store_a_prefix_once_and_hand_it_back() -> None:
    rows = KVRows(2, 1, 4, dtype=torch.float32, device=torch.device("cpu"))
    rows.reserve(2, 8)
    plain_bytes = rows.bytes_for(3, 20, base=0)
    prefix = [torch.arange(6.0).repeat(4, 1).T[None, None] + 10 * layer for layer in range(2)]  # [1, 1, 6, 4]
    rows.store_prefix(prefix, [-p for p in prefix])
    assert rows.base == 6 and rows.keys[0].shape == (2, 1, 8 - 6 + 1, 4)
    rows.reserve(3, 20)
    assert rows.nbytes == rows.bytes_for(3, 20) < plain_bytes  # 3 x 15 columns + the prefix's 6, not 3 x 21
    with pytest.raises(ValueError, match="stored prefix"):
        rows.copy_prefix(0, 1, 4)  # a row cannot hold less than the prefix
    rows.copy_prefix(0, 1, 6)  # nothing to copy: the row starts with the stored prefix
    rows.keys[1][1, :, :3] = 7.0  # positions 6..8 of row 1
    rows.lengths[1] = 9
    view = rows.view(slice(0, 2), [0, 2])
    assert view.columns.tolist() == [[14, 14], [3, 4]] and view.position_ids().tolist() == [[0, 0], [9, 10]]
    assert view.attention_mask(torch.float32).shape == (2, 1, 2, 5)
    with pytest.raises(ValueError, match="no row holds tokens"):
        rows.store_prefix(prefix, prefix)
    # A lower base moves positions 2..5 of the prefix into the front of every row.
    rows.lower_base(2)
    assert rows.base == 2 and rows.prefix_keys[1].shape == (1, 1, 2, 4) and rows.lengths[1] == 9
    assert torch.equal(rows.keys[1][1, :, :4], prefix[1][0, :, 2:6]) and torch.all(rows.keys[1][1, :, 4:7] == 7.0)
    assert torch.equal(rows.values[0][0, :, :4], -prefix[0][0, :, 2:6])
    rows.lower_base(0)
    assert rows.base == 0 and rows.prefix_keys == [] and torch.equal(rows.keys[1][1, :, :6], prefix[1][0]) and torch.all(rows.keys[1][1, :, 6:9] == 7.0)


@pytest.mark.parametrize("width", [1, 5])
def test_a_stored_prefix_is_attended_as_if_every_row_held_it(width) -> None:
    torch.manual_seed(1)
    batch, kv_heads, group, dim, prefix, own = 3, 2, 3, 16, 20, 12
    prefix_key, prefix_value = torch.randn(1, kv_heads, prefix, dim), torch.randn(1, kv_heads, prefix, dim)
    key, value = torch.randn(batch, kv_heads, own, dim), torch.randn(batch, kv_heads, own, dim)
    query = torch.randn(batch, kv_heads * group, width, dim)
    # Row 1 is shorter; the queries are the rows' last positions, each seeing its row up to itself.
    ends = torch.tensor([own, own - 4, own])
    column = torch.arange(own)
    last = ends[:, None] - width + torch.arange(width)[None, :]
    mask = torch.zeros(batch, 1, width, own).masked_fill(column[None, None, None, :] > last[:, None, :, None], torch.finfo(torch.float32).min)
    full_key, full_value = torch.cat([prefix_key.expand(batch, -1, -1, -1), key], 2), torch.cat([prefix_value.expand(batch, -1, -1, -1), value], 2)
    full_mask = torch.cat([torch.zeros(batch, 1, width, prefix), mask], 3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, full_key.repeat_interleave(group, 1), full_value.repeat_interleave(group, 1), attn_mask=full_mask, scale=0.2
    ).transpose(1, 2)
    module = torch.nn.Module()
    module.layer_idx = 1
    plan = SharedPrefix(length=prefix, keys=[torch.empty(0), prefix_key], values=[torch.empty(0), prefix_value])
    token = _ACTIVE.set(plan)
    try:
        out, _ = prefix_attention(module, query, key, value, mask, scaling=0.2)
    finally:
        _ACTIVE.reset(token)
    assert out.shape == (batch, width, kv_heads * group, dim)
    assert torch.allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_shared_prefix_attention_equals_plain_attention(fused) -> None:
    torch.manual_seed(0)
    batch, kv_heads, group, dim, length, shared = 4, 2, 3, 16, 40, 25
    key = torch.randn(batch, kv_heads, length, dim)
    value = torch.randn(batch, kv_heads, length, dim)
    key[:, :, :shared], value[:, :, :shared] = key[1, :, :shared], value[1, :, :shared]
    query = torch.randn(batch, kv_heads * group, 1, dim)
    mask = torch.zeros(batch, 1, 1, length)
    mask[2, ..., 33:] = torch.finfo(torch.float32).min  # a shorter row
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(group, 1), value.repeat_interleave(group, 1), attn_mask=mask, scale=0.2
    ).transpose(1, 2)
    if fused:
        token = _ACTIVE.set(SharedPrefix(length=shared, row=1))
        try:
            out, _ = prefix_attention(torch.nn.Module(), query, key, value, mask, scaling=0.2)
        finally:
            _ACTIVE.reset(token)
        assert torch.allclose(out, expected, atol=1e-5)
    # The unfused path (GPUs) computes each part with its own log-sum-exp.
    out, lse = _attend(query.reshape(batch, kv_heads, group, dim), key, value, mask, 0.2, fused=fused)
    reference = torch.nn.functional.scaled_dot_product_attention(query.reshape(batch, kv_heads, group, dim), key, value, attn_mask=mask, scale=0.2)
    assert torch.allclose(out, reference, atol=1e-5)
    scores = query.reshape(batch, kv_heads, group, dim) @ key.transpose(-1, -2) * 0.2 + mask
    assert torch.allclose(lse, scores.logsumexp(-1), atol=1e-4)
    assert math.isfinite(float(lse.sum()))


def test_sampling_draws_from_the_distribution() -> None:
    from agentgym.models.engine import sample_next

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]])
    counts = torch.zeros(5)
    draws = 4000
    for seed in range(draws):
        [token], [logprob] = sample_next(probs.log(), torch.tensor([1.0]), torch.tensor([1.0]), [torch.Generator().manual_seed(seed)])
        counts[token] += 1
        assert logprob == pytest.approx(math.log(probs[0, token].item()), abs=1e-6)
    expected = probs[0] * draws
    spread = (expected * (1 - probs[0])).sqrt()
    assert counts[4] == 0 and torch.all((counts - expected).abs() <= 4 * spread + 1e-9)


def test_a_dropped_backend_frees_its_cache_at_once(smollm, tokenizer) -> None:
    """The trainer makes a backend per step: its key/value buffers must go with it, not wait for the
    garbage collector (a reference cycle once kept every step's buffers until the machine ran out)."""
    import gc
    import weakref

    from agentgym.models import HFBackend

    for reuse_cache in (True, False):
        backend = HFBackend(*smollm, reuse_cache=reuse_cache)
        backend.generate([_chat(tokenizer, "Hi.")], SamplingParams(temperature=0, max_new_tokens=2))
        engine = weakref.ref(backend.engine)
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            del backend
            assert engine() is None
        finally:
            if was_enabled:
                gc.enable()
