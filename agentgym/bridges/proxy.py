"""``agentgym proxy``: an OpenAI-compatible chat-completions endpoint that records token-exact episodes.

Any harness written against the OpenAI API (``POST /v1/chat/completions``, ``GET /v1/models``)
talks to one of agentgym's generation backends through it: the local transformers backend, or
another OpenAI-compatible server that returns token ids (vLLM, SGLang). Every request names its
episode, in the ``X-Episode-Id`` header or the body's ``metadata.episode_id``; the proxy renders
the conversation with the model's chat template exactly as the rollout runner does and records,
per episode, each request's prompt token ids, sampled token ids and their logprobs
(:mod:`agentgym.bridges.recording`). The recorded episode becomes the runner's
:class:`~agentgym.rollouts.runner.Episode` (the trainer's input) with the runner's loss mask, built from the
recorded ids and never from re-tokenised text.

Supported: ``messages`` (system, user, assistant with ``tool_calls``, tool), ``tools`` (function
schemas, rendered by the chat template or described in the system prompt as the runner does),
``n``, ``temperature``, ``top_p``, ``seed``, ``max_tokens``/``max_completion_tokens``,
``logprobs``. Not supported (a clear 400): ``stream``. ``tool_choice`` is read as ``"auto"``.
A turn's tool calls are parsed from the model's text with the environments' own parser and ids.
Each response also carries ``prompt_token_ids`` and, per choice, ``token_ids``.

``POST /v1/episodes/{id}/end`` (``{"reward": R, "choice": 0}``) ends an episode: the proxy appends
its trajectory record to ``--out`` (the ``agentgym eval --out`` format) and answers with it.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
import zlib
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.bridges.recording import ConversationMismatch, RecordedEpisode
from agentgym.models.backend import Generation, GenerationBackend, SamplingParams, as_streaming
from agentgym.rollouts.chat import ChatRenderer, ToolMode
from agentgym.seeding import derive_seed

__all__ = ["EPISODE_HEADER", "ChatProxy", "GenerationWorker", "ProxyError"]

EPISODE_HEADER = "x-episode-id"
MAX_CHOICES = 16


class ProxyError(Exception):
    """A request the proxy answers with an OpenAI-style error."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class GenerationWorker:
    """Owns a backend on one thread: requests from any thread join its continuously batched stream.

    Args:
        backend: any generation backend (wrapped with :func:`~agentgym.models.as_streaming`).
    """

    def __init__(self, backend: GenerationBackend) -> None:
        self.stream = as_streaming(backend)
        self._inbox: queue.Queue[tuple[Sequence[int], SamplingParams, Future[Generation]] | None] = queue.Queue()
        self._futures: dict[Hashable, Future[Generation]] = {}
        self._keys = iter(range(1 << 62))
        self._thread = threading.Thread(target=self._run, name="agentgym-proxy-generation", daemon=True)
        self._thread.start()

    def generate(self, prompt: Sequence[int], params: Sequence[SamplingParams]) -> list[Generation]:
        """Sample one completion per params (blocking until all are done)."""
        futures: list[Future[Generation]] = []
        for p in params:
            future: Future[Generation] = Future()
            self._inbox.put((prompt, p, future))
            futures.append(future)
        return [f.result() for f in futures]

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            # Block for work only when nothing is in flight; otherwise take what has arrived and decode on.
            items = [self._inbox.get()] if not self._futures else []
            while True:
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            if None in items:
                for future in self._futures.values():
                    future.set_exception(RuntimeError("the proxy is shutting down"))
                return
            for prompt, params, future in (i for i in items if i is not None):
                key = next(self._keys)
                try:
                    self.stream.submit(key, prompt, params)
                except Exception as exc:  # noqa: BLE001 - a bad request fails alone
                    future.set_exception(exc)
                    continue
                self._futures[key] = future
            if not self._futures:
                continue
            try:
                finished = self.stream.advance()
            except Exception as exc:  # noqa: BLE001 - the backend failed: every request in flight fails, the proxy goes on
                for future in self._futures.values():
                    future.set_exception(exc)
                self._futures.clear()
                continue
            for done, generation in finished:
                self._futures.pop(done).set_result(generation)


@dataclass(frozen=True)
class _Request:
    """A validated chat-completions request."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    n: int
    temperature: float
    top_p: float
    seed: int | None
    max_tokens: int
    logprobs: bool


class ChatProxy:
    """The recording endpoint in front of a backend.

    Args:
        backend: the generation backend.
        model_name: the name ``/v1/models`` lists (default: the backend's).
        max_tokens: a request's default ``max_tokens``.
        out: a JSONL file that every ended episode's trajectory record is appended to.
        keep_ended: keep ended episodes in :attr:`episodes` (for Python callers); ``agentgym proxy``
            drops them once written to ``out``, so a long-running proxy holds only open episodes.
        tool_mode, template_kwargs: how tools and the chat template are rendered (as
            :class:`~agentgym.rollouts.episode.RolloutSettings`; keep the runner's to get its token ids).
    """

    def __init__(
        self,
        backend: GenerationBackend,
        *,
        model_name: str | None = None,
        max_tokens: int = 256,
        out: str | Path | None = None,
        tool_mode: ToolMode = "auto",
        template_kwargs: Mapping[str, Any] | None = None,
        keep_ended: bool = True,
    ) -> None:
        self.backend = backend
        self.keep_ended = keep_ended
        self.model_name = model_name or backend.name
        self.max_tokens = max_tokens
        self.out = Path(out) if out is not None else None
        self.tool_mode, self.template_kwargs = tool_mode, dict(template_kwargs or {})
        self.episodes: dict[str, RecordedEpisode] = {}
        self._renderers: dict[str, ChatRenderer] = {}
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self.worker = GenerationWorker(backend)

    def close(self) -> None:
        self.worker.close()

    # -- the API -------------------------------------------------------------------------------

    def complete(self, body: Any, episode_id: str | None = None) -> dict[str, Any]:
        """Answer one chat-completions request body (thread-safe; blocks while the backend samples)."""
        request = self._parse(body)
        if episode_id is None:
            metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
            episode_id = str(metadata.get("episode_id") or f"proxy-{uuid.uuid4().hex}")
        with self._lock:
            if episode_id in self._busy:
                raise ProxyError(409, f"episode {episode_id!r} already has a request in flight; an episode's turns come one after another")
            self._busy.add(episode_id)
        try:
            return self._complete(request, episode_id)
        finally:
            with self._lock:
                self._busy.discard(episode_id)

    def _complete(self, request: _Request, episode_id: str) -> dict[str, Any]:
        renderer = self._renderer(request.tools)
        episode = self.episodes.get(episode_id)
        try:
            if episode is None:
                episode = RecordedEpisode(episode_id, renderer, request.messages)
                with self._lock:
                    self.episodes[episode_id] = episode
            elif episode.tools_key != json.dumps(renderer.tools, sort_keys=True):
                raise ProxyError(409, f"episode {episode_id!r} was recorded with other tools; tools stay the same within an episode")
            prompt = episode.prompt(request.messages)
        except ConversationMismatch as exc:
            raise ProxyError(409, str(exc), "conversation_mismatch") from None
        seed = request.seed if request.seed is not None else derive_seed(zlib.crc32(episode_id.encode()), episode.turn, bits=32)
        seeds = [seed if i == 0 else derive_seed(seed, i, bits=32) for i in range(request.n)]
        params = [
            SamplingParams(
                temperature=request.temperature, top_p=request.top_p, max_new_tokens=request.max_tokens, seed=s, stop_token_ids=(renderer.eot_token_id,)
            )
            for s in seeds
        ]
        try:
            generations = self.worker.generate(prompt, params)
        except ValueError as exc:  # e.g. a prompt past the model's context
            raise ProxyError(400, str(exc)) from None
        choices = episode.add_choices(prompt, seeds, generations, with_tools=bool(request.tools))
        tokenizer = self.backend.tokenizer
        answer_choices = []
        for index, choice in enumerate(choices):
            generation = choice.generation
            finish = "tool_calls" if "tool_calls" in choice.message else generation.finish_reason
            entry: dict[str, Any] = {"index": index, "message": choice.message, "finish_reason": finish, "token_ids": list(generation.token_ids)}
            if request.logprobs:
                entry["logprobs"] = {
                    "content": [
                        {"token": tokenizer.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(generation.token_ids, generation.logprobs, strict=True)
                    ]
                }
            answer_choices.append(entry)
        completion_tokens = sum(len(c.generation.token_ids) for c in choices)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": answer_choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion_tokens, "total_tokens": len(prompt) + completion_tokens},
            "prompt_token_ids": list(prompt),
            "episode_id": episode_id,
        }

    def end_episode(self, episode_id: str, reward: float, choice: int = 0) -> dict[str, Any]:
        """End an episode: its trajectory record (appended to ``out`` when set)."""
        episode = self.episodes.get(episode_id)
        if episode is None:
            raise ProxyError(404, f"no episode {episode_id!r}", "not_found")
        try:
            episode.end(choice)
        except ValueError as exc:
            raise ProxyError(400, str(exc)) from None
        line = episode.to_episode(reward).to_dict()
        line["episode_id"] = episode_id
        line["requests"] = [
            {"turn": r.turn, "prompt_ids": list(r.prompt_ids), "choices": [{"token_ids": list(g.token_ids), "logprobs": list(g.logprobs)} for g in r.choices]}
            for r in episode.requests
        ]
        if self.out is not None:
            with self._lock, self.out.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        if not self.keep_ended:
            with self._lock:
                self.episodes.pop(episode_id, None)
        return line

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentgym"}]}

    # -- requests ------------------------------------------------------------------------------

    def _renderer(self, tools: list[dict[str, Any]]) -> ChatRenderer:
        key = json.dumps(tools, sort_keys=True)
        with self._lock:
            if key not in self._renderers:
                try:
                    self._renderers[key] = ChatRenderer(self.backend.tokenizer, tools=tools, tool_mode=self.tool_mode, template_kwargs=self.template_kwargs)
                except ValueError as exc:
                    raise ProxyError(400, f"tools: {exc}") from None
            return self._renderers[key]

    def _parse(self, body: Any) -> _Request:
        if not isinstance(body, dict):
            raise ProxyError(400, "the request body must be a JSON object")
        if body.get("stream"):
            raise ProxyError(400, "stream is not supported by agentgym proxy; send stream=false")
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool") for m in messages)
        ):
            raise ProxyError(400, "messages must be a non-empty list of {role: system|user|assistant|tool, content} objects")
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise ProxyError(400, "tools must be a list of function tool objects")
        n = _number(body, "n", 1, int)
        max_tokens = _number(body, "max_completion_tokens", None, int) or _number(body, "max_tokens", self.max_tokens, int)
        request = _Request(
            messages=messages,
            tools=tools,
            n=n,
            temperature=_number(body, "temperature", 1.0, float),
            top_p=_number(body, "top_p", 1.0, float),
            seed=_number(body, "seed", None, int),
            max_tokens=max_tokens,
            logprobs=bool(body.get("logprobs")),
        )
        if not 1 <= n <= MAX_CHOICES:
            raise ProxyError(400, f"n must be in [1, {MAX_CHOICES}], got {n}")
        try:
            SamplingParams(temperature=request.temperature, top_p=request.top_p, max_new_tokens=request.max_tokens)
        except ValueError as exc:
            raise ProxyError(400, str(exc)) from None
        return request

    # -- HTTP ----------------------------------------------------------------------------------

    def app(self, token: str | None = None) -> Any:
        """The ASGI app: ``/v1/chat/completions``, ``/v1/models``, ``/v1/episodes/{id}/end`` (behind ``token`` when set)."""
        import anyio
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from agentgym.bridges.asgi import require_token

        async def call(request: Request, handler: Any) -> JSONResponse:
            try:
                try:
                    body = await request.json()
                except ValueError:
                    raise ProxyError(400, "the request body is not valid JSON") from None
                answer = await anyio.to_thread.run_sync(handler, body)
            except ProxyError as exc:
                return JSONResponse({"error": {"message": str(exc), "type": exc.kind}}, status_code=exc.status)
            return JSONResponse(answer)

        async def completions(request: Request) -> JSONResponse:
            return await call(request, lambda body: self.complete(body, request.headers.get(EPISODE_HEADER)))

        async def end(request: Request) -> JSONResponse:
            def handler(body: Any) -> dict[str, Any]:
                body = body if isinstance(body, dict) else {}
                return self.end_episode(request.path_params["episode_id"], _number(body, "reward", 0.0, float), _number(body, "choice", 0, int))

            return await call(request, handler)

        async def models(request: Request) -> JSONResponse:
            return JSONResponse(self.models())

        routes = [
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/episodes/{episode_id}/end", end, methods=["POST"]),
        ]
        return require_token(Starlette(routes=routes), token)


def _number(body: Mapping[str, Any], key: str, default: Any, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not float(value).is_integer()):
        raise ProxyError(400, f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    return kind(value)
