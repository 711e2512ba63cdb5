"""Build a policy backend from command-line style options."""

from __future__ import annotations

from typing import Any, Literal

from agentgym.models.backend import GenerationBackend
from agentgym.models.loading import DEFAULT_MODEL, load_model, load_tokenizer

BackendKind = Literal["hf", "openai", "vllm"]


def create_backend(
    model: str | None = None,
    *,
    kind: BackendKind = "hf",
    device: str = "auto",
    dtype: str | None = "auto",
    base_url: str | None = None,
    api_key: str | None = None,
    served_model: str | None = None,
    **kwargs: Any,
) -> GenerationBackend:
    """Create a backend for ``model`` (``None`` = the bundled default model).

    Args:
        model: model reference for :func:`~agentgym.models.loading.load_model`; for ``kind="openai"`` it
            only supplies the tokenizer.
        kind: ``"hf"`` (local transformers), ``"openai"`` (a vLLM/SGLang server) or ``"vllm"`` (in-process).
        device: device for ``"hf"``.
        dtype: dtype for ``"hf"``.
        base_url: server API root for ``"openai"``, e.g. ``"http://127.0.0.1:8000/v1"``.
        api_key: bearer token for ``"openai"``.
        served_model: model name on the server (default: the first one it lists).
        kwargs: passed to the backend class (``max_batch_size``, ``max_concurrency``, vLLM engine options).
    """
    label = model or DEFAULT_MODEL
    if kind == "hf":
        from agentgym.models.hf import HFBackend

        hf_model, tokenizer = load_model(model, device=device, dtype=dtype)
        return HFBackend(hf_model, tokenizer, name=f"hf:{label}", **kwargs)
    if kind == "openai":
        from agentgym.models.openai_compat import OpenAICompatibleBackend

        if not base_url:
            raise ValueError("kind='openai' needs base_url, e.g. http://127.0.0.1:8000/v1")
        return OpenAICompatibleBackend(base_url, load_tokenizer(model), model=served_model, api_key=api_key, **kwargs)
    if kind == "vllm":
        from agentgym.models.vllm_engine import VLLMBackend

        return VLLMBackend(model, name=f"vllm:{label}", **kwargs)
    raise ValueError(f"unknown backend kind {kind!r}; expected 'hf', 'openai' or 'vllm'")
