"""The record types of agentgym/MockAPI-v0: its tasks and the entries it adds to ``info``."""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations.
from typing import Any, TypedDict

from agentgym.records import TaskRecord

__all__ = ["APIFault", "MockAPIInfo", "MockAPIResetInfo", "MockAPITask"]


class MockAPITask(TaskRecord):
    """A task of MockAPI-v0."""

    instruction: str  # the user's request
    params: dict[str, Any]  # the template's parameters
    expected: dict[str, Any]  # the changes the helpdesk must show: created, updated, deleted records
    min_calls: int  # API calls the shortest solution makes
    world_seed: int  # seeds the helpdesk's starting data


class APIFault(TypedDict):
    """A fault MockAPI-v0 injected into an API call (``info["turn_faults"]``)."""

    call: int  # the API call's 1-based index in the episode
    kind: str  # one of agentgym.envs.mock_api.faults.FAULT_KINDS, e.g. "rate_limit", "timeout"
    operation: str | None  # the operationId the request matched, None when it matched none


class MockAPIInfo(TypedDict):
    """What MockAPI-v0 adds to every ``info`` (``extra_info()``)."""

    api_calls: int  # HTTP requests made so far
    faults_injected: int  # faults injected so far
    turn_faults: list[APIFault]  # the faults injected since the last info


class MockAPIResetInfo(TypedDict):
    """What MockAPI-v0's ``reset`` adds to its ``info``."""

    api_base_url: str  # the episode's API on loopback
    fault_rate: float  # the episode's fault rate
