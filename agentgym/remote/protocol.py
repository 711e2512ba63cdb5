"""The environment server's wire protocol: one JSON object per WebSocket message.

A connection is one session, which holds one environment. The client sends requests
``{"op": OP, ...}`` one at a time and gets one reply each:

===========  ==========================================  ===============================================
op           request fields                              reply
===========  ==========================================  ===============================================
``make``     ``env_id``, ``kwargs`` (JSON object)         ``session``, ``env_id``, ``tools``, ``task_ids``,
                                                         ``max_turns``, ``protocol``
``reset``    ``seed`` (int or null), ``options``          ``observation``, ``info``, ``task``
``step``     ``action`` (text or message object)          ``observation``, ``reward``, ``terminated``,
                                                         ``truncated``, ``info``, ``counts``
``record``                                               ``record`` (the episode record)
``reward``                                               ``score``, ``passed``, ``reason``, ``components``
``tasks``                                                ``tasks`` (every task dict of the environment)
``close``                                                ``closed``: true; the server closes the connection
===========  ==========================================  ===============================================

``make``'s ``kwargs`` are checked against the environment's allow-list
(:class:`agentgym.remote.arguments.ClientArguments`) before the environment is made.

A request that fails gets ``{"error": {"type": NAME, "message": TEXT}}`` and the session goes on
(``make`` excepted: a session without an environment is closed). ``type`` is one of
:data:`ERROR_TYPES`; the client raises the matching exception.

Plain HTTP ``GET`` on the same port: ``/healthz`` (``{"ok": true, ...}``) and ``/metrics``
(:class:`agentgym.remote.exposition.Metrics` as JSON).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ERROR_TYPES", "MAX_MESSAGE_BYTES", "OPS", "PROTOCOL", "ProtocolError", "dumps", "loads"]

PROTOCOL = 1
MAX_MESSAGE_BYTES = 16 << 20
OPS = ("make", "reset", "step", "record", "reward", "tasks", "close")
# Exceptions that cross the wire by name; anything else arrives as "RemoteError".
ERROR_TYPES = ("EpisodeOver", "ResetNeeded", "ValueError", "TypeError", "KeyError", "ProtocolError", "ServerFull", "RemoteError")


class ProtocolError(ValueError):
    """A request or reply that does not follow the protocol."""


def dumps(message: dict[str, Any]) -> str:
    """Encode a message; values JSON cannot carry (a set in a Python caller's action) become
    marker strings, so the environment sees a malformed argument, as a model's text would give."""
    return json.dumps(message, default=_unencodable)


def loads(text: str | bytes) -> dict[str, Any]:
    """Decode one message; anything but a JSON object is a :class:`ProtocolError`."""
    try:
        message = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"a message must be a JSON object, not {type(message).__name__}")
    return message


def _unencodable(value: Any) -> str:
    return f"<{type(value).__name__} value JSON cannot carry>"
