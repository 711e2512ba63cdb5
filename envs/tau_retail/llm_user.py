"""τ-bench's LLM customer for TauRetail-v0 (``user="llm"``), with a response cache.

The customer is a language model playing the task's instruction, as in τ-bench's user simulator:

* its system prompt holds the instruction and the rules: it is the customer, it writes one line at a
  time and gives information only when it is asked for, it makes nothing up, and it writes
  ``###STOP###`` once its goal is satisfied (:func:`customer_system_prompt`);
* its chat starts with the agent's greeting "Hi! How can I help you today?", as τ-bench's does; its
  reply is the customer's opening message. Every later message of the agent to the customer (a turn
  without a tool call) is a ``user`` message of the customer's chat, and each of the customer's
  replies an ``assistant`` message. The customer never sees tool calls or their results;
* each reply is sampled from the conversation so far, rendered with the model's chat template
  (:class:`agentgym.models.ChatRenderer`), with the temperature and seed given explicitly
  (:class:`agentgym.models.SamplingParams`; τ-bench sends neither).

Replies are cached by (task id, the customer's transcript so far, sampling settings, backend name)
in a :class:`ResponseCache`: an agent that says the same things gets the same customer again, at no
cost. That is what makes reruns identical even on hardware where sampling is not bit-stable. A
failure of the model (it raises, or returns no text) is not cached: the customer says
:data:`FALLBACK` instead, the failure is listed in :attr:`LLMUser.errors` (and so in ``info``), and
the episode goes on.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentgym.envs.tau_retail.users import STOP, Progress
from agentgym.models import DEFAULT_MODEL, GenerationBackend, SamplingParams, create_backend
from agentgym.rollouts.chat import ChatRenderer

__all__ = ["FALLBACK", "GREETING", "CustomerModel", "LLMCustomer", "LLMUser", "ResponseCache", "customer_system_prompt", "file_cache", "shared_model"]

GREETING = "Hi! How can I help you today?"
FALLBACK = "Sorry, could you say that again?"
MAX_NEW_TOKENS = 256  # a customer's line; longer replies are the model rambling

Message = dict[str, Any]


def customer_system_prompt(instruction: str) -> str:
    """The customer model's system prompt: who it is, the task's instruction and the rules."""
    return (
        "You are a customer of an online retail store, chatting with one of its customer-service agents. "
        "You play the customer, never the agent.\n\n"
        f"Instruction (your situation and goal; the agent cannot see it):\n{instruction}\n\n"
        "Rules:\n"
        "- Write only your own next message, one line at a time, in your own words; do not copy the instruction.\n"
        "- Do not give away everything at once: reveal a piece of information only when the agent asks for it "
        "or the current step needs it.\n"
        "- Do not make up information the instruction does not give you (ids, emails, addresses, payment "
        "methods, items). If the agent asks for something you do not know, say that you do not know it.\n"
        f"- When your goal is satisfied, write {STOP} as your message to end the conversation."
    )


# ------------------------------------------------------------------------------ cache


class ResponseCache:
    """Customer replies by :meth:`key`, in memory and, given ``path``, in a JSON-lines file.

    The file, if it exists, is read when the cache is made, and every new reply is appended to it as
    one line ``{"key", "task_id", "text"}``: a run that stops midway keeps what it paid for. Pass the
    same object to several environments to share it; :func:`file_cache` shares one per file.

    Args:
        path: the JSONL file (its folder must exist), or ``None`` for memory only.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path).expanduser()
        if self.path is not None and not self.path.parent.is_dir():
            raise FileNotFoundError(f"cannot keep the customer cache in {self.path}: its folder does not exist")
        self.entries: dict[str, str] = _read_entries(self.path) if self.path is not None and self.path.is_file() else {}
        self.hits = self.misses = 0
        self._lock = threading.Lock()  # environments step in a thread pool

    @staticmethod
    def key(task_id: str, messages: Sequence[Message], params: SamplingParams, backend_name: str) -> str:
        """The SHA-256 of everything a reply depends on."""
        payload = {"task_id": task_id, "messages": list(messages), "params": asdict(params), "backend": backend_name}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        """The cached reply under ``key``, if any."""
        with self._lock:
            text = self.entries.get(key)
            if text is None:
                self.misses += 1
            else:
                self.hits += 1
            return text

    def put(self, key: str, text: str, task_id: str) -> None:
        """Keep ``text`` under ``key`` (and append it to the file)."""
        with self._lock:
            self.entries[key] = text
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"key": key, "task_id": task_id, "text": text}) + "\n")

    def __len__(self) -> int:
        return len(self.entries)

    def __deepcopy__(self, memo: dict[int, Any]) -> ResponseCache:
        # A shared store, like an open file: gymnasium deep-copies env specs (make() arguments
        # included), and a copy would neither share replies nor survive its lock.
        return self


def _read_entries(path: Path) -> dict[str, str]:
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            entries[row["key"]] = row["text"]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a run that was killed while writing it
    return entries


_FILE_CACHES: dict[Path, ResponseCache] = {}
_FILE_CACHES_LOCK = threading.Lock()


def file_cache(path: str | Path) -> ResponseCache:
    """The process's one cache kept in ``path``: environments naming the same file share it."""
    resolved = Path(path).expanduser().resolve()
    with _FILE_CACHES_LOCK:
        if resolved not in _FILE_CACHES:
            _FILE_CACHES[resolved] = ResponseCache(resolved)
        return _FILE_CACHES[resolved]


# ------------------------------------------------------------------------------ model

# Backends such as HFBackend are not safe to call from several threads, and the rollout runner
# steps environments (so customers) in a thread pool: customers generate one at a time.
_GENERATE_LOCK = threading.Lock()


class CustomerModel:
    """A generation backend voicing customers, with the chat renderer of its tokenizer."""

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.name = str(backend.name)
        self.renderer = ChatRenderer(backend.tokenizer)

    def complete(self, messages: Sequence[Message], params: SamplingParams) -> str:
        """The model's next ``assistant`` message after ``messages``."""
        prompt = self.renderer.prompt_ids(messages)
        with _GENERATE_LOCK:
            [generation] = self.backend.generate([prompt], params)
        return generation.text


_MODELS: dict[str, CustomerModel] = {}
_MODELS_LOCK = threading.Lock()


def shared_model(name: str | None = None) -> CustomerModel:
    """The local model ``name`` (``None``: :data:`agentgym.models.DEFAULT_MODEL`), loaded once per
    process with :func:`agentgym.models.create_backend` and shared by every environment."""
    name = name or DEFAULT_MODEL
    with _MODELS_LOCK:
        if name not in _MODELS:
            _MODELS[name] = CustomerModel(create_backend(name))
        return _MODELS[name]


# ---------------------------------------------------------------------------- customer


class LLMUser:
    """One episode's LLM customer (the :class:`agentgym.envs.tau_retail.users.User` protocol).

    Args:
        task: the task; its ``instruction`` goes into the system prompt.
        model: the model that voices the customer.
        params: the sampling of every reply.
        cache: where replies are looked up before the model is asked.
    """

    def __init__(self, task: Mapping[str, Any], model: CustomerModel, params: SamplingParams, cache: ResponseCache) -> None:
        self.task_id = str(task["task_id"])
        self.model = model
        self.params = params
        self.cache = cache
        self.messages: list[Message] = [{"role": "system", "content": customer_system_prompt(task["instruction"])}]
        self.errors: list[str] = []

    def opening(self) -> str:
        return self._answer(GREETING)

    def reply(self, text: str, progress: Progress) -> str:
        return self._answer(text)

    def info(self) -> dict[str, Any]:
        """The model's failures for ``info``: how many, and the latest one's message."""
        return {"user_errors": len(self.errors), "user_error": self.errors[-1] if self.errors else None}

    def _answer(self, agent_text: str) -> str:
        self.messages.append({"role": "user", "content": agent_text})
        key = ResponseCache.key(self.task_id, self.messages, self.params, self.model.name)
        text = self.cache.get(key)
        if text is None:
            text = self._generate()
            if text is None:
                text = FALLBACK
            else:
                self.cache.put(key, text, self.task_id)
        self.messages.append({"role": "assistant", "content": text})
        return text

    def _generate(self) -> str | None:
        """The model's reply, or ``None`` (with the failure recorded) when it has none."""
        try:
            text = self.model.complete(self.messages, self.params).strip()
        except Exception as exc:  # noqa: BLE001 - a failing customer must not end the agent's episode
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return None
        if not text:
            self.errors.append("the customer model returned no text")
            return None
        return text


class LLMCustomer:
    """The LLM customers of one environment: which model, how it samples, where replies are cached.

    Args:
        backend: the backend voicing the customers (anything with ``tokenizer``, ``name`` and
            ``generate(prompts, params)``, e.g. :class:`agentgym.models.HFBackend`).
        model: without ``backend``: the local model to load (:func:`shared_model`; default
            :data:`agentgym.models.DEFAULT_MODEL`), on the first episode rather than here.
        temperature: sampling temperature of every reply (0: greedy).
        seed: sampling seed of every reply.
        cache: a :class:`ResponseCache`, the path of a JSONL cache file (:func:`file_cache`), or
            ``None`` for a cache of this environment's own.
    """

    def __init__(
        self,
        *,
        backend: GenerationBackend | None = None,
        model: str | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        cache: ResponseCache | str | Path | None = None,
    ) -> None:
        if backend is not None and model is not None:
            raise ValueError("give user_backend or user_model, not both")
        self.params = SamplingParams(temperature=temperature, seed=seed, max_new_tokens=MAX_NEW_TOKENS)
        if isinstance(cache, ResponseCache):
            self.cache = cache
        else:
            self.cache = ResponseCache() if cache is None else file_cache(cache)
        self._model = None if backend is None else CustomerModel(backend)
        self._model_name = model

    def user(self, task: Mapping[str, Any]) -> LLMUser:
        """The customer of an episode of ``task``."""
        model = self._model if self._model is not None else shared_model(self._model_name)
        return LLMUser(task, model, self.params, self.cache)
