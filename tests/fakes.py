"""Test doubles shared by several test files: a fake OpenAI-compatible completion server, a
script that serves oracle turns through it, and a generation backend that always says hello."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gymnasium as gym

from agentgym.models import Generation, SamplingParams
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.scripted import assistant_turns, make_policy, run_episode

Responder = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


class FakeCompletionServer:
    """A local HTTP server speaking the part of vLLM's OpenAI-compatible API the client uses.

    ``responder`` maps each ``/v1/completions`` request body to ``(status, json body)``; every body is
    kept in ``requests``.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.responder: Responder = lambda body: (500, {"error": {"message": "no responder set"}})
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server._lock:
                    server.requests.append(body)
                self._send(*server.responder(body))

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @staticmethod
    def completion(
        token_ids: Sequence[int], logprobs: Sequence[float], finish_reason: str, *, prompt: Sequence[int] | None = None, legacy: bool = False
    ) -> dict[str, Any]:
        """A vLLM-shaped ``/v1/completions`` body; ``legacy`` omits ``token_ids`` (older servers)."""
        choice: dict[str, Any] = {
            "index": 0,
            "text": "(text is ignored by the client)",
            "finish_reason": finish_reason,
            "stop_reason": None,
            "logprobs": {
                "text_offset": list(range(len(token_ids))),
                "token_logprobs": list(logprobs),
                "tokens": [f"token_id:{t}" for t in token_ids],
                "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(token_ids, logprobs, strict=True)],
            },
        }
        if not legacy:
            choice["token_ids"] = list(token_ids)
            choice["prompt_token_ids"] = None if prompt is None else list(prompt)
        return {"id": "cmpl-fake", "object": "text_completion", "model": "fake-model", "choices": [choice]}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class OracleScript:
    """The oracle's turns for some tasks, served as token ids: a scripted policy for any backend."""

    def __init__(self, env_id: str, task_ids: Sequence[str], tok: Any, *, split: str = "test") -> None:
        self.tokenizer = tok
        self.eot = ChatRenderer(tok).eot_token_id
        env = gym.make(env_id, split=split)
        self.records: dict[str, dict[str, Any]] = {}
        self.turns: dict[str, list[str]] = {}  # the task's opening user message -> oracle turns
        for task_id in task_ids:
            record = run_episode(env, make_policy(env, "oracle", 0), seed=0, task_id=task_id)
            self.records[task_id] = record
            opening = next(m["content"] for m in record["messages"] if m["role"] == "user")
            self.turns[opening] = assistant_turns(record)
        env.close()

    def turn_of(self, prompt: Sequence[int]) -> int:
        """Index of the assistant turn that ``prompt`` asks for."""
        return self.tokenizer.decode(list(prompt)).count("<|im_start|>assistant") - 1

    def reply(self, prompt: Sequence[int], max_tokens: int) -> list[int]:
        text = self.tokenizer.decode(list(prompt))
        [actions] = [turns for opening, turns in self.turns.items() if opening in text]
        action = actions[self.turn_of(prompt)]
        return [*self.tokenizer(action, add_special_tokens=False)["input_ids"], self.eot][:max_tokens]

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Fake-server responder: the oracle's next turn, cut to ``max_tokens``."""
        ids = self.reply(body["prompt"], body["max_tokens"])
        finish = "stop" if ids[-1] == self.eot else "length"
        return 200, FakeCompletionServer.completion(ids, [-0.5] * len(ids), finish, prompt=body["prompt"])


class SaysHello:
    """A backend that answers every turn with "hello" and the end-of-turn token."""

    name = "says-hello"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        ids = (*self.tokenizer.encode("hello", add_special_tokens=False), params[0].stop_token_ids[0])
        return [Generation(ids, (-0.1,) * len(ids), "hello", "stop") for _ in prompts]
