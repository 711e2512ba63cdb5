"""Generation backends for agentgym: model loading and the engines that sample tokens.

The token-exact trajectories, chat rendering and batching they feed moved to
:mod:`agentgym.rollouts` (``agentgym.models.ChatRenderer`` and the other moved names still resolve,
with a DeprecationWarning, for one version).

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

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from agentgym.models.backend import BackendError, FinishReason, Generation, GenerationBackend, SamplingParams
from agentgym.models.factory import create_backend
from agentgym.models.loading import DEFAULT_MODEL, ModelLoadError, load_model, load_tokenizer, resolve_model_path
from agentgym.models.openai_compat import OpenAICompatibleBackend
from agentgym.models.vllm_engine import VLLMBackend

if TYPE_CHECKING:
    from agentgym.models.hf import HFBackend

__all__ = [
    "DEFAULT_MODEL",
    "BackendError",
    "FinishReason",
    "Generation",
    "GenerationBackend",
    "HFBackend",
    "ModelLoadError",
    "OpenAICompatibleBackend",
    "SamplingParams",
    "VLLMBackend",
    "create_backend",
    "load_model",
    "load_tokenizer",
    "resolve_model_path",
]


MOVED = {
    **dict.fromkeys(
        [
            "ChatRenderer",
            "RenderCheck",
            "Segment",
            "TemplateError",
            "TokenBatch",
            "Trajectory",
            "TrajectoryBuilder",
            "check_rendering",
            "collate",
            "normalize_tool_schema",
            "tool_system_prompt",
        ],
        "agentgym.rollouts",
    ),
    "render_html": "agentgym.offline",
    "render_rich": "agentgym.offline",
}
"""Names this package exported before the trajectory code moved out of it: name -> its package now."""


def __getattr__(name: str) -> Any:
    if name == "HFBackend":
        from agentgym.models.hf import HFBackend

        return HFBackend
    if name in MOVED:
        warnings.warn(
            f"agentgym.models.{name} is deprecated: import it from {MOVED[name]} (the old path goes in the next release)", DeprecationWarning, stacklevel=2
        )
        return getattr(importlib.import_module(MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
