"""Policies for agentgym: model loading, generation backends, token-exact trajectories and masks.

Typical episode loop (the rollout runner does this for many episodes at once)::

    backend = create_backend()                      # bundled SmolLM2-135M-Instruct on CPU/GPU
    renderer = ChatRenderer(backend.tokenizer, tools=tool_schemas)
    builder = TrajectoryBuilder(renderer, first_observation)
    while not done:
        generation = backend.generate([builder.token_ids], params)[0]
        builder.add_generation(generation)          # sampled ids verbatim, loss_mask 1
        observation, reward, terminated, truncated, info = env.step(generation.text)
        done = terminated or truncated
        if not done:
            builder.add_messages(observation)       # template delta, loss_mask 0
    trajectory = builder.build()

``HFBackend`` imports torch, so it is loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentgym.models.backend import BackendError, FinishReason, Generation, GenerationBackend, SamplingParams
from agentgym.models.batching import TokenBatch, collate
from agentgym.models.chat import ChatRenderer, TemplateError, normalize_tool_schema, tool_system_prompt
from agentgym.models.factory import create_backend
from agentgym.models.inspection import render_html, render_rich
from agentgym.models.loading import DEFAULT_MODEL, ModelLoadError, load_model, load_tokenizer, resolve_model_path
from agentgym.models.openai_compat import OpenAICompatibleBackend
from agentgym.models.trajectory import RenderCheck, Segment, Trajectory, TrajectoryBuilder, check_rendering
from agentgym.models.vllm_engine import VLLMBackend

if TYPE_CHECKING:
    from agentgym.models.hf import HFBackend

__all__ = [
    "DEFAULT_MODEL",
    "BackendError",
    "ChatRenderer",
    "FinishReason",
    "Generation",
    "GenerationBackend",
    "HFBackend",
    "ModelLoadError",
    "OpenAICompatibleBackend",
    "RenderCheck",
    "SamplingParams",
    "Segment",
    "TemplateError",
    "TokenBatch",
    "Trajectory",
    "TrajectoryBuilder",
    "VLLMBackend",
    "check_rendering",
    "collate",
    "create_backend",
    "load_model",
    "load_tokenizer",
    "normalize_tool_schema",
    "render_html",
    "render_rich",
    "resolve_model_path",
    "tool_system_prompt",
]


def __getattr__(name: str) -> Any:
    if name == "HFBackend":
        from agentgym.models.hf import HFBackend

        return HFBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
