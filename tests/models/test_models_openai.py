"""The OpenAI-compatible backend against a local fake vLLM server."""

from __future__ import annotations

import socket

import pytest

from agentgym.models import BackendError, GenerationBackend, OpenAICompatibleBackend, SamplingParams
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.trajectory import RenderCheck, TrajectoryBuilder, check_rendering


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def echo_last_tokens(server, *, legacy: bool = False):
    """Responder: reply with the prompt's last three ids plus id 2, logprob -0.1 * position."""

    def respond(body):
        ids = [*body["prompt"][-3:], 2]
        logprobs = [-0.1 * (i + 1) for i in range(len(ids))]
        return 200, server.completion(ids, logprobs, "stop", prompt=body["prompt"], legacy=legacy)

    return respond


def test_request_asks_for_token_ids_and_logprobs(fake_server, tokenizer) -> None:
    fake_server.responder = echo_last_tokens(fake_server)
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer, api_key="secret") as backend:
        assert backend.model == "fake-model"
        assert isinstance(backend, GenerationBackend)
        params = SamplingParams(temperature=0.6, top_p=0.9, max_new_tokens=7, seed=11, stop=("</tool_call>",), stop_token_ids=(2,))
        [gen] = backend.generate([[1, 30, 40, 50]], params)
    assert gen.token_ids == (30, 40, 50, 2)
    assert gen.logprobs == pytest.approx((-0.1, -0.2, -0.3, -0.4))
    assert gen.finish_reason == "stop" and gen.text == tokenizer.decode([30, 40, 50], skip_special_tokens=True)
    [body] = fake_server.requests
    assert body["prompt"] == [1, 30, 40, 50] and body["model"] == "fake-model"
    assert body["return_token_ids"] is True and body["return_tokens_as_token_ids"] is True
    assert body["logprobs"] == 1 and body["include_stop_str_in_output"] is True
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.6, 0.9, 7, 11)
    assert body["stop"] == ["</tool_call>"] and body["stop_token_ids"] == [2]


def test_servers_without_token_ids_field_use_the_logprob_tokens(fake_server, tokenizer) -> None:
    fake_server.responder = echo_last_tokens(fake_server, legacy=True)
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer, model="fake-model") as backend:
        gens = backend.generate([[1, 5, 6, 7], [1, 8, 9, 10, 11]], SamplingParams(max_new_tokens=4))
    assert [g.token_ids for g in gens] == [(5, 6, 7, 2), (9, 10, 11, 2)]


def test_concurrent_requests_keep_prompt_order_and_seeds(fake_server, tokenizer) -> None:
    fake_server.responder = echo_last_tokens(fake_server)
    prompts = [[1, 100 + i, 200 + i, 300 + i] for i in range(12)]
    params = [SamplingParams(max_new_tokens=4, seed=i) for i in range(12)]
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer, model="fake-model", max_concurrency=4) as backend:
        gens = backend.generate(prompts, params)
    assert [g.token_ids[:3] for g in gens] == [tuple(p[1:]) for p in prompts]
    assert sorted(r["seed"] for r in fake_server.requests) == list(range(12))


def test_server_sampled_ids_go_into_the_trajectory_verbatim(fake_server, tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    # The server samples the reply one character per token, which re-tokenising the text would undo.
    reply = [t for ch in "On it." for t in encode(tokenizer, ch)] + [renderer.eot_token_id]
    fake_server.responder = lambda body: (200, fake_server.completion(reply, [-0.5] * len(reply), "stop"))
    builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "Refund order 7"}])
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer, model="fake-model") as backend:
        for _ in range(2):
            [gen] = backend.generate([builder.token_ids], SamplingParams(max_new_tokens=16))
            builder.add_generation(gen)
            builder.add_messages([{"role": "tool", "content": "refunded", "name": "refund", "tool_call_id": "c"}])
    trajectory = builder.build()
    assert [r["prompt"] for r in fake_server.requests] == [list(trajectory.token_ids[: s.start]) for s in trajectory.segments if s.kind == "sampled"]
    masked = [t for t, m in zip(trajectory.token_ids, trajectory.loss_mask, strict=True) if m]
    assert masked == reply * 2
    check = check_rendering(trajectory, renderer)
    assert check.text_matches and check != RenderCheck(True, True, None)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (400, {"object": "error", "message": "max_tokens is too large", "code": 400}, "HTTP 400: max_tokens is too large"),
        (500, {"error": {"message": "engine died"}}, "HTTP 500: engine died"),
        (200, {"choices": []}, "one completion choice"),
        (200, {"choices": [{"text": "hi", "finish_reason": "stop", "logprobs": None}]}, "no token ids"),
        (200, {"choices": [{"token_ids": [5, 2], "finish_reason": "stop", "logprobs": {"token_logprobs": [-1.0]}}]}, "1 logprobs for 2 tokens"),
        (
            200,
            {"choices": [{"token_ids": [5], "prompt_token_ids": [1, 1, 9], "finish_reason": "stop", "logprobs": {"token_logprobs": [-1.0]}}]},
            "changed the prompt token ids",
        ),
        (200, {"choices": [{"token_ids": [5], "finish_reason": "abort", "logprobs": {"token_logprobs": [-1.0]}}]}, "unexpected finish_reason 'abort'"),
    ],
)
def test_server_failures_are_backend_errors(fake_server, tokenizer, status, body, message) -> None:
    fake_server.responder = lambda request: (status, body)
    with OpenAICompatibleBackend(fake_server.base_url, tokenizer, model="fake-model") as backend:
        with pytest.raises(BackendError, match=message):
            backend.generate([[1, 9]], SamplingParams(max_new_tokens=2))


def test_unreachable_server(tokenizer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendError, match="cannot reach"):
        OpenAICompatibleBackend(f"http://127.0.0.1:{port}/v1", tokenizer, timeout=5)
