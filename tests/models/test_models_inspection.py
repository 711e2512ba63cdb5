"""Trajectory inspection (terminal and HTML) and backend construction."""

from __future__ import annotations

import importlib.util
import re

import pytest

from agentgym.models import BackendError, Generation, create_backend
from agentgym.offline.inspection import render_html, render_rich, token_pieces
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.trajectory import TrajectoryBuilder


@pytest.fixture
def trajectory(tokenizer):
    renderer = ChatRenderer(tokenizer)
    builder = TrajectoryBuilder(renderer, [{"role": "user", "content": "Say <hi> with an emoji"}])
    reply = tokenizer("Hi ꙮ <b>", add_special_tokens=False)["input_ids"]
    builder.add_generation(Generation(tuple(reply), tuple([-0.5] * len(reply)), "Hi ꙮ <b>", "length"))
    builder.add_messages([{"role": "tool", "content": "tool & output", "name": "t", "tool_call_id": "c"}])
    return builder.build()


def test_pieces_cover_every_token_and_keep_characters_whole(trajectory, tokenizer) -> None:
    pieces = token_pieces(trajectory, tokenizer)
    assert [t for p in pieces for t in p.token_ids] == list(trajectory.token_ids)
    assert "".join(p.text for p in pieces) == tokenizer.decode(list(trajectory.token_ids))
    assert not any("\ufffd" in p.text for p in pieces)
    assert any(len(p.token_ids) > 1 and p.text == " ꙮ" for p in pieces)  # one character, three byte tokens


def test_terminal_rendering_styles_trained_tokens(trajectory, tokenizer) -> None:
    text = render_rich(trajectory, tokenizer)
    trained = "".join(text.plain[s.start : s.end] for s in text.spans if s.style == "bold green")
    assert "Hi ꙮ <b>" in trained
    assert "tool & output" not in trained
    assert "⏎" in text.plain
    assert text.plain.startswith(f"{len(trajectory.token_ids)} tokens, {sum(trajectory.loss_mask)} trained")


def test_html_rendering_escapes_and_annotates(trajectory, tokenizer) -> None:
    page = render_html(trajectory, tokenizer, title="episode <1>")
    assert page.startswith("<!DOCTYPE html>") and "<title>episode &lt;1&gt;</title>" in page
    sampled = re.findall(r'<span class="tok k-sampled" title="([^"]*)">(.*?)</span>', page, re.DOTALL)
    assert "".join(text for _, text in sampled) == "Hi ꙮ &lt;b&gt;"
    assert all("logprob -0.500" in tip for tip, _ in sampled)
    env_text = "".join(re.findall(r'<span class="tok k-env" title="[^"]*">(.*?)</span>', page, re.DOTALL))
    assert "tool &amp; output" in env_text and "<b>" not in page
    assert page.count('class="tok k-closing"') == 2  # the legend entry and the closing token


def test_backend_factory_errors() -> None:
    with pytest.raises(ValueError, match="unknown backend kind"):
        create_backend(kind="tgi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs base_url"):
        create_backend(kind="openai")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_backend_without_vllm_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match="pip install vllm"):
        create_backend(kind="vllm")
