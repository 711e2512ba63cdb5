"""Fixtures of the adapter tests: the tiny local model (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapter_support import CHATML_TEMPLATE, build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with a ChatML + tools chat template, saved locally."""
    pytest.importorskip("tokenizers", reason="the tiny test model needs transformers and tokenizers")
    return build_tiny_model(tmp_path_factory.mktemp("tiny-chatml"), CHATML_TEMPLATE.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path):
    """The tiny model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
