"""The interface every policy backend implements: token ids in, sampled token ids and logprobs out.

Backends never see chat messages. The caller renders the conversation to token ids (see
:mod:`agentgym.rollouts.chat`) and keeps the sampled ids verbatim, so nothing is re-tokenised between
turns.

Two ways to call a backend:

* :class:`GenerationBackend` — ``generate(prompts, params)``: one batch in, one completion per
  prompt out.
* :class:`StreamingBackend` — ``submit(key, prompt, params)`` then ``advance()``, which returns
  completions as they finish: continuous batching, where a request submitted between two
  ``advance`` calls joins the running batch instead of waiting for it to drain. The rollout runner
  drives every backend this way; :func:`as_streaming` wraps a backend that only has ``generate``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from agentgym.records import FinishReason

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class BackendError(RuntimeError):
    """A backend could not produce a generation (bad request, server error, missing optional package)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    Attributes:
        temperature: 0 means greedy decoding; otherwise logits are divided by it before sampling.
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        max_new_tokens: hard cap on sampled tokens for this completion.
        seed: seed of the completion's own random generator; the same prompt, parameters and seed
            give the same tokens on the same backend and hardware.
        stop: strings that end the completion; the tokens that complete one are kept in the output.
        stop_token_ids: token ids that end the completion (kept in the output), in addition to the
            model's end-of-sequence ids.
        hot_tokens: how many tokens of the completion, from its ``hot_offset``-th on, are sampled at
            ``hot_temperature`` instead of ``temperature`` (0, the default: none). Exploration aimed
            at a decision a turn makes in a known place (which tool to call, say), while the rest
            of the turn is sampled as usual. The in-process backends (``hf``, its key/value
            engine) support it; the others refuse it.
        hot_offset: sampled tokens before the hot ones (0: from the first).
        hot_temperature: the temperature of the hot tokens (set with ``hot_tokens``).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    hot_tokens: int = 0
    hot_offset: int = 0
    hot_temperature: float | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if isinstance(self.stop, str):
            raise ValueError("stop must be a tuple of strings, not a single string")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if self.hot_tokens < 0 or self.hot_offset < 0:
            raise ValueError(f"hot_tokens and hot_offset must be >= 0, got {self.hot_tokens} and {self.hot_offset}")
        if (self.hot_tokens > 0) != (self.hot_temperature is not None):
            raise ValueError("hot_tokens and hot_temperature go together: set both or neither")
        if self.hot_temperature is not None and self.hot_temperature < 0:
            raise ValueError(f"hot_temperature must be >= 0, got {self.hot_temperature}")

    def temperature_at(self, sampled: int) -> float:
        """The temperature of the completion's next token, after ``sampled`` tokens."""
        if self.hot_temperature is not None and self.hot_offset <= sampled < self.hot_offset + self.hot_tokens:
            return self.hot_temperature
        return self.temperature


@dataclass(frozen=True)
class Generation:
    """One sampled completion.

    Attributes:
        token_ids: the exact sampled token ids, including the stop token when one ended the completion.
        logprobs: per sampled token, its log-probability under the distribution it was drawn from
            (logits / temperature, renormalised over the top-p nucleus; the raw distribution for greedy).
            Server backends report whatever the server computes (vLLM: start it with
            ``--logprobs-mode processed_logprobs`` to get the same quantity).
        text: ``token_ids`` decoded with special tokens removed: what the environment should read.
        finish_reason: ``"stop"`` (a stop token or stop string) or ``"length"`` (``max_new_tokens``).
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: FinishReason

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.logprobs)} logprobs")


@runtime_checkable
class GenerationBackend(Protocol):
    """A policy that samples continuations of token-id prompts.

    Attributes:
        tokenizer: the model's tokenizer; callers use it to render chat templates.
        name: a short description of the policy for episode records (e.g. ``"hf:smollm2-135m-instruct"``).
    """

    tokenizer: PreTrainedTokenizerBase
    name: str

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]) -> list[Generation]:
        """Sample one completion per prompt; ``params`` is shared or given per prompt."""
        ...


@runtime_checkable
class StreamingBackend(GenerationBackend, Protocol):
    """A backend that batches continuously: requests go in one at a time and come out as they finish."""

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet returned by :meth:`advance`."""
        ...

    def submit(self, key: Hashable, prompt: Sequence[int], params: SamplingParams) -> None:
        """Queue one request; :meth:`advance` returns its completion under ``key``."""
        ...

    def advance(self) -> list[tuple[Hashable, Generation]]:
        """Work until at least one request finishes (if any is in flight); return the finished ones."""
        ...


class LockstepStream:
    """:class:`StreamingBackend` over a backend that only has ``generate``.

    Requests submitted since the last :meth:`advance` are generated together in one ``generate``
    call, and all of them are returned by it.

    Args:
        backend: the backend to wrap.
    """

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.name = backend.name
        self._queue: list[tuple[Hashable, Sequence[int], SamplingParams]] = []

    @property
    def in_flight(self) -> int:
        """Requests waiting for the next :meth:`advance`."""
        return len(self._queue)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]) -> list[Generation]:
        """The wrapped backend's ``generate``."""
        return self.backend.generate(prompts, params)

    def submit(self, key: Hashable, prompt: Sequence[int], params: SamplingParams) -> None:
        """Queue one request for the next :meth:`advance`."""
        self._queue.append((key, prompt, params))

    def advance(self) -> list[tuple[Hashable, Generation]]:
        """Generate every queued request in one call."""
        queue, self._queue = self._queue, []
        if not queue:
            return []
        generations = self.backend.generate([prompt for _, prompt, _ in queue], [params for _, _, params in queue])
        return [(key, generation) for (key, _, _), generation in zip(queue, generations, strict=True)]


def as_streaming(backend: GenerationBackend) -> StreamingBackend:
    """``backend`` itself when it batches continuously, else a :class:`LockstepStream` over it."""
    if isinstance(backend, StreamingBackend):
        return backend
    return LockstepStream(backend)


def per_prompt_params(
    prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams], vocab_size: int, *, hot: bool = False
) -> list[SamplingParams]:
    """Validate a generate() call and return one :class:`SamplingParams` per prompt. ``hot``:
    whether the backend samples ``hot_tokens`` at their own temperature (else they are refused)."""
    if isinstance(params, SamplingParams):
        expanded = [params] * len(prompts)
    else:
        expanded = list(params)
        if len(expanded) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(expanded)} sampling params")
    if not hot and any(p.hot_tokens for p in expanded):
        raise ValueError("this backend samples a completion at one temperature: hot_tokens (rollout.error_temperature_tokens) needs the hf backend")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty")
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt {i} has token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}")
    return expanded


def stop_token_set(tokenizer: PreTrainedTokenizerBase, extra: Sequence[int] = ()) -> frozenset[int]:
    """The tokenizer's end-of-sequence id plus ``extra``."""
    ids = set(extra)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def decode_visible(tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int]) -> str:
    """Text of ``token_ids`` with special tokens removed and spacing left exactly as sampled."""
    # decode() is annotated str | list[str]: one flat list of ids decodes to one string
    return cast(str, tokenizer.decode(list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False))
