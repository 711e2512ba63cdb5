"""The local transformers backend, with the real default model."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from agentgym.models import GenerationBackend, SamplingParams
from agentgym.models.hf import sample_next

QUESTIONS = ["What is 2+2?", "Name a colour.", "Write one short sentence about the sea, please."]


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    """Chat prompts of different lengths, so batching needs padding."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True) for q in QUESTIONS]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert len({len(p) for p in ids}) == len(ids)
    return ids


def test_batched_greedy_equals_one_prompt_at_a_time(backend, prompts) -> None:
    assert isinstance(backend, GenerationBackend)
    params = SamplingParams(temperature=0, max_new_tokens=8)
    batched = backend.generate(prompts, params)
    singles = [backend.generate([p], params)[0] for p in prompts]
    assert [g.token_ids for g in batched] == [g.token_ids for g in singles]
    for g in batched:
        assert g.finish_reason in ("stop", "length")
        assert 1 <= len(g.token_ids) <= 8
        assert g.text.strip()


def test_logprobs_are_those_of_the_sampling_distribution(backend, smollm, prompts) -> None:
    model, _ = smollm
    params = SamplingParams(temperature=0.7, max_new_tokens=6, seed=5)
    generations = backend.generate(prompts, params)
    for prompt, generation in zip(prompts, generations, strict=True):
        sequence = torch.tensor([prompt + list(generation.token_ids)])
        with torch.no_grad():
            logits = model(sequence).logits[0, len(prompt) - 1 : -1].float() / 0.7
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(generation.token_ids)[:, None])[:, 0]
        assert torch.allclose(expected, torch.tensor(generation.logprobs), atol=1e-4)


def test_seeds_are_per_prompt_and_independent_of_batch_order(backend, prompts) -> None:
    params = [SamplingParams(temperature=1.0, max_new_tokens=6, seed=100 + i) for i in range(len(prompts))]
    forward = backend.generate(prompts, params)
    backward = backend.generate(prompts[::-1], params[::-1])[::-1]
    assert [g.token_ids for g in forward] == [g.token_ids for g in backward]
    reseeded = backend.generate(prompts[:1], replace(params[0], seed=7))[0]
    again = backend.generate(prompts[:1], replace(params[0], seed=7))[0]
    assert reseeded.token_ids == again.token_ids


def test_tiny_top_p_keeps_only_the_most_likely_token(backend, prompts) -> None:
    greedy = backend.generate(prompts[:1], SamplingParams(temperature=0, max_new_tokens=5))[0]
    nucleus = backend.generate(prompts[:1], SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=5, seed=3))[0]
    assert nucleus.token_ids == greedy.token_ids
    assert nucleus.logprobs == pytest.approx([0.0] * len(nucleus.logprobs), abs=1e-6)


def test_finish_reasons_and_stop_conditions(backend, tokenizer, prompts) -> None:
    prompt = prompts[2]
    greedy = backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12))[0]
    cut = backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=3))[0]
    assert cut.finish_reason == "length" and cut.token_ids == greedy.token_ids[:3]

    stop_id = greedy.token_ids[2]
    first = greedy.token_ids.index(stop_id)
    by_id = backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop_token_ids=(stop_id,)))[0]
    assert by_id.finish_reason == "stop" and by_id.token_ids == greedy.token_ids[: first + 1]

    words = tokenizer.decode(list(greedy.token_ids)).split()
    stop = words[1]
    by_string = backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop=(stop,)))[0]
    decoded = tokenizer.decode(list(by_string.token_ids))
    assert by_string.finish_reason == "stop"
    assert stop in decoded and stop not in tokenizer.decode(list(by_string.token_ids[:-1]))
    assert by_string.token_ids == greedy.token_ids[: len(by_string.token_ids)]


def test_more_prompts_than_the_batch_size(smollm, prompts) -> None:
    from agentgym.models import HFBackend

    small = HFBackend(*smollm, max_batch_size=2)
    params = SamplingParams(temperature=0, max_new_tokens=3)
    assert [g.token_ids for g in small.generate(prompts, params)] == [g.token_ids for g in HFBackend(*smollm).generate(prompts, params)]


@pytest.mark.parametrize("reuse_cache", [True, False])
def test_generation_stops_at_the_end_of_the_context(smollm, prompts, monkeypatch, reuse_cache) -> None:
    from agentgym.models import HFBackend

    small = HFBackend(*smollm, reuse_cache=reuse_cache)
    # The engine (reuse_cache) and the plain path each read the model's context once.
    monkeypatch.setattr(small.engine if reuse_cache else small, "_context", len(prompts[0]) + 2)
    [gen] = small.generate(prompts[:1], SamplingParams(temperature=0, max_new_tokens=10))
    assert len(gen.token_ids) <= 2
    with pytest.raises(ValueError, match="context is"):
        small.generate(prompts[2:], SamplingParams(max_new_tokens=1))


def test_bad_requests_are_rejected(backend, prompts) -> None:
    params = SamplingParams(max_new_tokens=2)
    with pytest.raises(ValueError, match="empty"):
        backend.generate([[]], params)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        backend.generate([[1, 10**9]], params)
    with pytest.raises(ValueError, match="sampling params"):
        backend.generate(prompts, [params])
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="single string"):
        SamplingParams(stop="</tool_call>")  # type: ignore[arg-type]


def test_sample_next_top_p_renormalises_the_nucleus() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    seen = set()
    for seed in range(40):
        generator = torch.Generator().manual_seed(seed)
        ids, lps = sample_next(logits, torch.tensor([1.0]), torch.tensor([0.7]), [generator])
        seen.add(ids[0])
        assert lps[0] == pytest.approx(math.log(probs[0, ids[0]].item() / 0.8), abs=1e-5)
    assert seen == {0, 1}
    ids, lps = sample_next(logits, torch.tensor([0.0]), torch.tensor([1.0]), [torch.Generator()])
    assert ids == [0] and lps[0] == pytest.approx(math.log(0.5), abs=1e-6)
