"""In-process vLLM backend (optional, GPU only).

vLLM is imported when the backend is created, never at module import, so agentgym works without it.
Prompts go in as token ids (``{"prompt_token_ids": ...}``) and the engine's output token ids and
logprobs are returned unchanged. The engine defaults to ``logprobs_mode="processed_logprobs"`` so the
logprobs are those of the distribution actually sampled from, like :class:`~agentgym.models.hf.HFBackend`.

Not exercised by the test suite (it needs a GPU and the vllm package).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentgym.models.backend import BackendError, Generation, SamplingParams, decode_visible, per_prompt_params
from agentgym.models.loading import resolve_model_path

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class VLLMBackend:
    """Samples with a ``vllm.LLM`` engine in this process.

    Args:
        model: anything :func:`agentgym.models.loading.resolve_model_path` accepts (``None`` = default model).
        name: policy name for episode records.
        engine_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization=0.5``).
    """

    def __init__(self, model: str | None = None, *, name: str | None = None, **engine_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError:
            raise BackendError("the in-process vLLM backend needs vllm and a GPU: pip install vllm") from None
        self._vllm = vllm
        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        source = resolve_model_path(model)
        self.llm = vllm.LLM(model=source, **engine_kwargs)
        self.tokenizer: PreTrainedTokenizerBase = self.llm.get_tokenizer()
        self.name = name or f"vllm:{model or source}"

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]) -> list[Generation]:
        """Sample one completion per prompt in one engine call."""
        expanded = per_prompt_params(prompts, params, len(self.tokenizer))
        sampling = [
            self._vllm.SamplingParams(
                n=1,
                temperature=p.temperature,
                top_p=p.top_p,
                max_tokens=p.max_new_tokens,
                seed=p.seed,
                stop=list(p.stop),
                stop_token_ids=list(p.stop_token_ids),
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                logprobs=0,
            )
            for p in expanded
        ]
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sampling, use_tqdm=False)
        generations = []
        for output in outputs:
            completion = output.outputs[0]
            token_ids = [int(t) for t in completion.token_ids]
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids, strict=True)]
            if completion.finish_reason not in ("stop", "length"):
                raise BackendError(f"vLLM finished a completion with {completion.finish_reason!r}")
            generations.append(
                Generation(
                    token_ids=tuple(token_ids), logprobs=tuple(logprobs), text=decode_visible(self.tokenizer, token_ids), finish_reason=completion.finish_reason
                )
            )
        return generations
