"""Which ``make`` arguments a client of ``agentgym serve`` may send, environment by environment.

A served environment runs with the server's files, processes and settings, and its client is
not trusted with them. So a client may set only its environment's allow-listed arguments: the
episode settings (split, task ids, turn limits, fault rates, the customer mode, ...), never the
server's resources (CodeExec's sandbox backend and limits, a process-wide tool cache). Arguments
that name a location on the server (a task file, a customer model, a reply cache) are refused
unless the operator named folders that may be used (``agentgym serve --allow-root DIR``), and
then only as absolute paths inside them (links resolved). Task lists may always be sent inline,
and CodeExec's bundled sets by name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ClientArguments"]

_EPISODE = frozenset({"split", "task_ids", "max_turns", "max_tool_calls", "render_mode"})
_FAULTS = frozenset({"fault_rate", "max_consecutive_faults"})
# Arguments a client may set to plain values, per environment id (an id not listed here, such as
# an operator's own environment offered with --env, gets the episode settings only).
_SETTINGS: dict[str, frozenset[str]] = {
    "agentgym/Refund-v0": _EPISODE,
    "agentgym/CodeExec-v0": _EPISODE,
    "agentgym/MockAPI-v0": _EPISODE
    | _FAULTS
    | {"fault_kinds", "fault_warmup_calls", "fault_ramp_episodes", "client_timeout_s", "max_body_chars", "validate_responses"},
    "agentgym/SQL-v0": _EPISODE | _FAULTS | {"max_rows", "schema"},
    "agentgym/SearchQA-v0": _EPISODE | _FAULTS,
    "agentgym/ToolMath-v0": _EPISODE | _FAULTS,
    "agentgym/TauRetail-v0": _EPISODE | {"user", "user_temperature", "user_seed", "strict"},
}
# Arguments naming a location on the server, per environment id (default: the task file).
_LOCATIONS: dict[str, frozenset[str]] = {"agentgym/TauRetail-v0": frozenset({"tasks", "user_model", "user_cache"})}
# Task sets a client may name instead of a path (CodeExec's bundled benchmarks).
_TASK_SET_NAMES: dict[str, frozenset[str]] = {"agentgym/CodeExec-v0": frozenset({"humaneval", "mbpp", "mbpp-sanitized"})}


@dataclass(frozen=True)
class ClientArguments:
    """The ``make`` arguments a server accepts from its clients.

    Args:
        roots: folders whose files clients may name (task files, models, caches); none by default.
    """

    roots: tuple[Path, ...] = ()

    @classmethod
    def allowing(cls, roots: Iterable[str | Path]) -> ClientArguments:
        """Allow the locations inside ``roots`` (each resolved once, now)."""
        return cls(tuple(Path(os.path.realpath(root)) for root in roots))

    def check(self, env_id: str, kwargs: dict[str, Any]) -> None:
        """Raise ``ValueError`` naming the first argument a client may not send for ``env_id``."""
        settings = _SETTINGS.get(env_id, _EPISODE)
        locations = _LOCATIONS.get(env_id, frozenset({"tasks"}))
        for name, value in kwargs.items():
            if name in locations:
                self._check_location(env_id, name, value)
            elif name not in settings:
                allowed = ", ".join(sorted(settings | locations))
                raise ValueError(f"cannot make {env_id}: a client may not set {name!r} on this server; it may set {allowed}")

    def _check_location(self, env_id: str, name: str, value: Any) -> None:
        if name == "tasks" and isinstance(value, list):
            if not all(isinstance(task, dict) for task in value):
                raise ValueError(f"cannot make {env_id}: an inline 'tasks' list must hold JSON objects")
            return
        if name == "tasks" and value in _TASK_SET_NAMES.get(env_id, ()):
            return
        if not self.allows(value):
            where = "outside the folders this server allows" if self.roots else "and this server allows none (its operator can name folders with --allow-root)"
            raise ValueError(f"cannot make {env_id}: {name!r} names a location on the server {where}; send tasks inline instead")

    def allows(self, location: Any) -> bool:
        """Whether ``location`` is an absolute path inside one of :attr:`roots`, links resolved."""
        if not isinstance(location, str) or not os.path.isabs(location):
            return False
        resolved = Path(os.path.realpath(location))
        return any(resolved.is_relative_to(root) for root in self.roots)
