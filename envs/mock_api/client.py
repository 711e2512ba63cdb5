"""The agent's side of the wire: checks a tool call's request, sends it with httpx, renders the answer.

The rendering is what the model reads: a status line, the headers that matter for recovering
from errors (``Retry-After``, ``Warning``, ``Idempotent-Replayed``, ...), a blank line and the
body as sent, cut after ``max_body_chars``. A simulated timeout (see
:mod:`agentgym.envs.mock_api.session`) and a real one both become :class:`ClientTimeout`.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx

from agentgym.envs.mock_api.server import DRAIN_LIMIT
from agentgym.envs.mock_api.session import SIMULATED_HEADER

__all__ = ["SHOWN_HEADERS", "ApiClient", "ClientTimeout", "HttpResult", "RequestRefused"]

SHOWN_HEADERS = ("Content-Type", "Location", "Retry-After", "Warning", "Idempotent-Replayed", "WWW-Authenticate")
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "expect"}
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
_BAD_PATH_CHARS = re.compile(r"[\x00-\x20\x7f\\#]")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
REAL_TIMEOUT_S = 30.0
# The client only speaks plain HTTP to loopback. httpx builds a TLS context per client anyway, and
# loading the CA bundle for it costs 25-60 ms per environment (measured); a context without CAs is
# free to share and refuses any TLS peer, should one ever be reached.
_UNUSED_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class RequestRefused(Exception):
    """The tool call does not describe a request this client will send (message says why)."""


class ClientTimeout(Exception):
    """No response arrived within the client timeout."""


@dataclass(frozen=True)
class HttpResult:
    """A response as the tool shows it: status, the shown headers, and the body text."""

    status: int
    headers: dict[str, str]
    body: str

    def render(self, max_body_chars: int) -> str:
        """``HTTP <status> <reason>``, the shown headers, a blank line, then the (cut) body."""
        try:
            reason = HTTPStatus(self.status).phrase
        except ValueError:
            reason = ""
        lines = [f"HTTP {self.status} {reason}".rstrip(), *(f"{k}: {v}" for k, v in self.headers.items()), ""]
        body = self.body
        if len(body) > max_body_chars:
            body = f"{body[:max_body_chars]}\n... [body truncated: {len(body) - max_body_chars} more characters]"
        return "\n".join(lines) + "\n" + body


class ApiClient:
    """One environment's keep-alive HTTP client.

    Args:
        timeout_s: the client timeout on the logical clock (reported in timeout errors).
    """

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        # trust_env=False: no proxy or netrc lookups (loopback only, and ~0.1 ms faster per call).
        # keepalive_expiry=None: the connection lives as long as the environment. With httpx's
        # default of 5 s, every step slower than that (an LLM turn, or a thread starved among
        # hundreds of episodes) opened a new connection, and under load the server's accept loop
        # fell behind by seconds (measured at 128 and 256 concurrent episodes).
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=1, keepalive_expiry=None)
        self._http = httpx.Client(timeout=httpx.Timeout(REAL_TIMEOUT_S), limits=limits, trust_env=False, follow_redirects=False, verify=_UNUSED_TLS)
        # Only the headers the agent asked for (plus Host): httpx's defaults (Accept, User-Agent...)
        # would be parsed by the server on every call for nothing.
        self._http.headers.clear()

    def close(self) -> None:
        self._http.close()

    def request(
        self, base_url: str, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None, headers: dict[str, str] | None = None
    ) -> HttpResult:
        """Send one request below ``base_url``.

        Raises:
            RequestRefused: the path, query, headers or body cannot be sent as given.
            ClientTimeout: no response within the timeout.
        """
        url = base_url + _check_path(path)
        if query:
            # Encoded here: httpx's params= merging costs ~0.1 ms per call (measured).
            url += ("&" if "?" in path else "?") + urllib.parse.urlencode(_query_params(query))
        send_headers = _check_headers(headers or {})
        content = None
        if body is not None:
            content = body.encode() if isinstance(body, str) else json.dumps(body, ensure_ascii=False).encode()
            if len(content) > DRAIN_LIMIT:
                raise RequestRefused(f"body is {len(content)} bytes; this client sends at most {DRAIN_LIMIT}")
            if not any(k.lower() == "content-type" for k in send_headers):
                send_headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(method, url, content=content, headers=send_headers)
        except httpx.TimeoutException:
            raise ClientTimeout(f"timeout: no response within {REAL_TIMEOUT_S:g} s (the request may or may not have been applied)") from None
        except httpx.HTTPError as exc:
            raise RequestRefused(f"the request could not be sent: {type(exc).__name__}: {exc}") from None
        if response.headers.get(SIMULATED_HEADER) == "timeout":
            raise ClientTimeout(f"timeout: no response within {self.timeout_s:g} s (the request may or may not have been applied)")
        received = {name.lower(): value for name, value in response.headers.items()}
        shown = {name: received[name.lower()] for name in SHOWN_HEADERS if name.lower() in received}
        return HttpResult(response.status_code, shown, response.content.decode("utf-8", errors="replace"))


def _check_path(path: str) -> str:
    if not path.startswith("/") or path.startswith("//"):
        raise RequestRefused(f"path must be relative to the API base and start with '/', e.g. '/tickets'; got {path[:80]!r}")
    if len(path) > 2000 or _BAD_PATH_CHARS.search(path):
        raise RequestRefused("path must be at most 2000 characters without spaces, control characters, '\\' or '#'")
    segments = urllib.parse.unquote(path.split("?", 1)[0]).split("/")
    if any(s in (".", "..") for s in segments):
        raise RequestRefused(f"path must not contain '.' or '..' segments; got {path[:80]!r}")
    return path


def _query_params(query: dict[str, Any]) -> dict[str, str]:
    params = {}
    for name, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            params[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            params[name] = str(value)
        else:
            raise RequestRefused(f"query parameter {name!r} must be a string, number or boolean; got {type(value).__name__}")
    return params


def _check_headers(headers: dict[str, str]) -> dict[str, str]:
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise RequestRefused(f"invalid header name {name[:40]!r}")
        if name.lower() in RESERVED_HEADERS:
            raise RequestRefused(f"header {name!r} is set by the client itself")
        if len(value) > 1000 or not value.isascii() or _CONTROL_CHARS.search(value):
            raise RequestRefused(f"header {name!r}: value must be at most 1000 ASCII characters without control characters")
    return dict(headers)
