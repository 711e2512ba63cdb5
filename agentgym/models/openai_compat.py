"""Backend for OpenAI-compatible completion servers (vLLM, SGLang) that keeps trajectories token-exact.

Each prompt is sent as a list of token ids to ``POST {base_url}/completions`` (never as text, so the
server cannot re-tokenise it), and the sampled token ids come back as ids: vLLM's ``return_token_ids``
(``choices[i].token_ids``), or failing that ``return_tokens_as_token_ids``, which spells every logprob
token as ``"token_id:<id>"``. ``logprobs`` asks for the sampled tokens' logprobs. When the server echoes
``prompt_token_ids`` they are checked against what was sent. Prompts are sent concurrently, one request
each, so every prompt keeps its own seed. Used as a
:class:`~agentgym.models.backend.StreamingBackend`, each request goes out as soon as it is submitted
and comes back as soon as the server finishes it: the server's own continuous batching (and vLLM's
prefix caching) does the scheduling.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import httpx

from agentgym.models.backend import BackendError, Generation, SamplingParams, decode_visible, per_prompt_params

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_TOKEN_ID_PREFIX = "token_id:"


def _error_message(response: httpx.Response) -> str:
    """The server's error text (vLLM and OpenAI nest it differently), else the raw body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
    return str(body)[:300]


def _token_ids(choice: dict[str, Any]) -> list[int]:
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return [int(t) for t in ids]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith(_TOKEN_ID_PREFIX) for t in tokens):
        return [int(t[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
    raise BackendError(
        "the server returned no token ids (it needs vLLM's return_token_ids or return_tokens_as_token_ids); without them the trajectory cannot be token-exact"
    )


class OpenAICompatibleBackend:
    """Samples from an OpenAI-compatible ``/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        tokenizer: the served model's tokenizer (for chat rendering and decoding).
        model: the served model name; ``None`` asks ``GET /models`` and takes the first.
        api_key: sent as a bearer token when given.
        timeout: seconds per request.
        max_concurrency: requests in flight at once.
        name: policy name for episode records.
    """

    def __init__(
        self,
        base_url: str,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_concurrency: int = 64,
        name: str | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.max_concurrency = max_concurrency
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        self.model = model if model is not None else self._first_model()
        self.name = name or f"openai:{self.model}@{self.base_url}"
        self._pool: ThreadPoolExecutor | None = None
        self._running: dict[Future[Generation], Hashable] = {}

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def __enter__(self) -> OpenAICompatibleBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach {self.base_url}{path}: {exc}") from None
        if response.status_code != 200:
            raise BackendError(f"{self.base_url}{path} returned HTTP {response.status_code}: {_error_message(response)}")
        try:
            data = response.json()
        except ValueError:
            raise BackendError(f"{self.base_url}{path} returned a body that is not JSON") from None
        if not isinstance(data, dict):
            raise BackendError(f"{self.base_url}{path} returned {type(data).__name__}, expected a JSON object")
        return data

    def _first_model(self) -> str:
        models = self._request("GET", "/models").get("data") or []
        if not models or not isinstance(models[0], dict) or "id" not in models[0]:
            raise BackendError(f"{self.base_url}/models lists no model; pass model=...")
        return str(models[0]["id"])

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]) -> list[Generation]:
        """Sample one completion per prompt, ``max_concurrency`` requests at a time."""
        expanded = per_prompt_params(prompts, params, len(self.tokenizer))
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            return list(pool.map(self._complete, prompts, expanded))

    @property
    def in_flight(self) -> int:
        """Submitted requests whose completion has not been returned by :meth:`advance` yet."""
        return len(self._running)

    def submit(self, key: Hashable, prompt: Sequence[int], params: SamplingParams) -> None:
        """Send one request now (up to ``max_concurrency`` at once); :meth:`advance` returns it under ``key``."""
        per_prompt_params([prompt], params, len(self.tokenizer))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="agentgym-openai")
        self._running[self._pool.submit(self._complete, prompt, params)] = key

    def advance(self) -> list[tuple[Hashable, Generation]]:
        """Wait for at least one submitted request; return every one that has finished.

        A request that failed raises its :class:`BackendError` here (the others stay in flight).
        """
        if not self._running:
            return []
        done, _ = wait(list(self._running), return_when=FIRST_COMPLETED)
        finished = [future for future in self._running if future in done]  # in submission order
        for future in finished:
            if future.exception() is not None:
                del self._running[future]
                raise future.exception()  # type: ignore[misc]
        return [(self._running.pop(future), future.result()) for future in finished]

    def _complete(self, prompt: Sequence[int], params: SamplingParams) -> Generation:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
            "n": 1,
            "stream": False,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        data = self._request("POST", "/completions", body)
        choices = data.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise BackendError(f"expected one completion choice, got {choices!r:.200}")
        choice = choices[0]
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != list(prompt):
            raise BackendError("the server changed the prompt token ids (it must not add BOS or re-tokenise)")
        token_ids = _token_ids(choice)
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if not isinstance(logprobs, list) or len(logprobs) != len(token_ids) or None in logprobs:
            raise BackendError(f"the server returned {len(logprobs or [])} logprobs for {len(token_ids)} tokens")
        finish = choice.get("finish_reason")
        if finish not in ("stop", "length"):
            raise BackendError(f"unexpected finish_reason {finish!r}")
        if not token_ids:
            raise BackendError("the server returned an empty completion")
        return Generation(
            token_ids=tuple(token_ids), logprobs=tuple(float(x) for x in logprobs), text=decode_visible(self.tokenizer, token_ids), finish_reason=finish
        )
