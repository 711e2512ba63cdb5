"""A helpdesk back office operated through a real HTTP API with seeded, reproducible faults:
:class:`MockApiEnv` (agentgym/MockAPI-v0), its tools and its reward. The class docstring documents
the environment in Gymnasium's sections; ``docs/envs/mock_api.md`` is generated from it."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any, Literal

from agentgym.env import Message, ToolEnv
from agentgym.envs.mock_api.apidocs import endpoint_docs, find_operation, overview
from agentgym.envs.mock_api.client import ApiClient, ClientTimeout, RequestRefused
from agentgym.envs.mock_api.faults import FAULT_KINDS, FaultConfig, FaultPlan
from agentgym.envs.mock_api.grading import state_problems
from agentgym.envs.mock_api.records import MockAPIInfo, MockAPIResetInfo, MockAPITask
from agentgym.envs.mock_api.server import ServerLease, acquire_server
from agentgym.envs.mock_api.session import Session
from agentgym.envs.mock_api.world import World, generate_world
from agentgym.parsing import ParsedAction
from agentgym.tools import InfraError, ToolError, tool
from agentgym.verifiers import RewardResult, weighted_sum

__all__ = ["SYSTEM_PROMPT", "WEIGHTS", "MockApiEnv"]

WEIGHTS = {"format": 0.1, "execution": 0.4, "completion": 0.5}
MAX_WAIT_S = 600.0
SYSTEM_PROMPT = """\
You operate the back office of Deskly, a helpdesk service, through its HTTP API.

Tools: http_request calls the API (paths are relative to the API base, e.g. /tickets);
read_api_docs shows the API reference; wait pauses before a retry (time is simulated, waiting
costs nothing real); finish ends the task.

Authenticate first: POST /auth/token with the API key you are given, then send
"Authorization: Bearer <token>" on every call. The service is not always reliable: read every
response, recover from errors, and make sure each change happened exactly once. Change only what
the request asks for, then call finish."""


@functools.lru_cache(maxsize=16)
def _pristine_world(seed: int) -> World:
    # Never mutated: episodes get a copy, grading compares against this one.
    return generate_world(seed)


class _Connection:
    """An environment's hold on the shared server: a lease, an HTTP client and its current session."""

    def __init__(self, client_timeout_s: float):
        self.lease: ServerLease = acquire_server()
        self.client = ApiClient(client_timeout_s)
        self.server = self.lease.server  # the one holding the current session
        self.base_url: str | None = None

    def open(self, session: Session) -> str:
        self.end_session()
        self.server = self.lease.server  # a new one if the last stopped on its own
        self.base_url = self.server.open_session(session)
        return self.base_url

    def end_session(self) -> None:
        if self.base_url is not None:
            self.server.close_session(self.base_url)
            self.base_url = None

    def close(self) -> None:
        self.end_session()
        self.client.close()
        self.lease.release()


class MockApiEnv(ToolEnv[MockAPITask]):
    """agentgym/MockAPI-v0: helpdesk operations over a real HTTP API with seeded faults.

    ## Description

    The agent gets an operations request ("reassign Dana's queue to Sam, then deactivate her
    account") and an API key for Deskly, a helpdesk service with agents, customers, tickets and
    comments. The service runs as a real HTTP server on ``127.0.0.1`` (started by the environment,
    shared by every episode of the process, one isolated session per episode). The agent reads the
    docs, authenticates, looks things up through filtered and paginated lists, and makes the changes
    (create, update, bulk update, delete), in 3 to 9 calls when nothing fails.

    Things do fail, on purpose and reproducibly: a per-episode fault plan drawn from the env's RNG
    injects 429s with ``Retry-After``, 500s and 503s, responses that time out (sometimes after the
    write was applied), truncated JSON, and empty or short list pages. Time is logical: each call
    advances a clock, ``wait`` advances it on request, and a ``Retry-After`` window is enforced on
    that clock, so nothing sleeps. Idempotency keys make retried writes safe. Every request is
    validated against the service's OpenAPI description with ``jsonschema``.

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``. Tools: ``http_request(method, path, query, body, headers)``,
    ``read_api_docs(endpoint)``, ``wait(seconds)`` and ``finish(summary)``.

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`). ``reset`` returns the system
    prompt and the request (with the API key). ``http_request`` answers with ``HTTP <status>
    <reason>``, the headers that matter (``Content-Type``, ``Location``, ``Retry-After``, ``Warning``,
    ``Idempotent-Replayed``, ``WWW-Authenticate``), a blank line and the body as the server sent it,
    cut after ``max_body_chars``. A timeout or a request the client refuses to send (absolute URL,
    ``..`` segments, reserved headers, bodies over 1 MiB) is an ``Error: ...`` tool message.

    ## Rewards

    Given once, on the final step: ``0.1·format + 0.4·execution + 0.5·completion``, hard-gated on
    completion (a failed task scores 0 whatever the rest says).

    - completion (pass/fail): the final server state equals the task's initial world with exactly
      the expected changes: nothing missing, nothing extra (a duplicate from a careless retry, a
      stray deletion), timestamps ignored.
    - execution: share of HTTP calls answered 2xx, among the calls no fault was injected into (an
      injected fault is not the agent's doing; a 429 for ignoring ``Retry-After`` is).
    - format: share of well-formed calls: HTTP requests that fit the OpenAPI description, over all
      HTTP requests plus malformed tool calls.

    ``info`` carries ``api_calls``, ``faults_injected`` and this turn's ``turn_faults`` (call number,
    kind, operation); ``reset`` adds ``api_base_url`` (the episode's base URL, for a client of your
    own) and ``fault_rate``.

    ## Starting State

    A task from the chosen split, drawn with the env's seeded RNG or named by
    ``options={"task_id": ...}``; its world (7-9 agents, 50-70 customers, about 200 tickets, spam
    and duplicates) is generated from the task's seed. ``options={"fault_rate": r}`` overrides the
    fault rate for one episode (for curricula driven from outside).

    ## Episode End

    Terminates when the agent calls ``finish``. Truncates after ``max_turns`` assistant turns
    (default 40). Either way the reward is computed from the server state at that moment.

    ## Arguments

    ``split``, ``tasks``, ``task_ids``, ``max_turns``, ``max_tool_calls``, ``render_mode`` as every
    agentgym env; ``fault_rate`` (default 0), ``fault_kinds`` (default all of
    :data:`agentgym.envs.mock_api.faults.FAULT_KINDS`), ``max_consecutive_faults`` (default 2),
    ``fault_warmup_calls`` (calls at the start of each episode never faulted, default 0),
    ``fault_ramp_episodes`` (rate ramps from 0 over this many episodes, default 0: off),
    ``client_timeout_s`` (logical, default 10), ``max_body_chars`` (default 8000),
    ``validate_responses`` (check every response against the OpenAPI description too; default off:
    it costs about 1 ms per 10-ticket page).

    ## Version History

    - v0: initial release (440 generated tasks over 11 templates, 70/15/15 train/val/test).
    """

    task_family = "mock_api"
    info_type = MockAPIInfo
    reset_info_type = MockAPIResetInfo
    default_max_turns = 40

    def __init__(
        self,
        *,
        fault_rate: float = 0.0,
        fault_kinds: Sequence[str] | None = None,
        max_consecutive_faults: int = 2,
        fault_warmup_calls: int = 0,
        fault_ramp_episodes: int = 0,
        client_timeout_s: float = 10.0,
        max_body_chars: int = 8000,
        validate_responses: bool = False,
        **kwargs: Any,
    ):
        kinds = (fault_kinds,) if isinstance(fault_kinds, str) else tuple(fault_kinds) if fault_kinds is not None else FAULT_KINDS
        self.fault_config = FaultConfig(fault_rate, kinds, max_consecutive_faults, fault_warmup_calls, fault_ramp_episodes)
        if not client_timeout_s > 0 or not max_body_chars > 0:
            raise ValueError(f"client_timeout_s and max_body_chars must be positive; got {client_timeout_s!r}, {max_body_chars!r}")
        self.client_timeout_s = float(client_timeout_s)
        self.max_body_chars = int(max_body_chars)
        self.validate_responses = bool(validate_responses)
        super().__init__(**kwargs)
        self._connection: _Connection | None = None
        self._finalizer: weakref.finalize | None = None
        self.session: Session | None = None
        self.api_key = ""
        self._episodes = 0
        self._options: dict[str, Any] = {}
        self._finished = False
        self._reported = self._faults_injected = 0

    # ------------------------------------------------------------------ episode lifecycle

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode (see :meth:`ToolEnv.reset`); ``info`` adds ``api_base_url`` and ``fault_rate``."""
        self._options = dict(options or {})
        observation, info = super().reset(seed=seed, options=options)
        assert self._connection is not None and self.session is not None
        return observation, info | {"api_base_url": self._connection.base_url, "fault_rate": self.session.faults.rate}

    def setup_episode(self, task: MockAPITask) -> list[Message]:
        rate = self._options.get("fault_rate", self.fault_config.rate_for_episode(self._episodes))
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"options['fault_rate'] must be a number in [0, 1]; got {rate!r}")
        self._episodes += 1
        if self._connection is None:
            self._connection = _Connection(self.client_timeout_s)
            self._finalizer = weakref.finalize(self, self._connection.close)
        world = _pristine_world(task["world_seed"]).copy()
        plan = FaultPlan(self.fault_config, seed=int(self.np_random.integers(2**63 - 1)), rate=float(rate))
        self.session = Session(world, plan, client_timeout_s=self.client_timeout_s, validate_responses=self.validate_responses)
        self._connection.open(self.session)
        self.api_key = world.api_key
        self._finished = False
        self._reported = self._faults_injected = 0
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"{task['instruction']}\n\nAPI key: {world.api_key}"}]

    def respond(self, parsed: ParsedAction) -> list[Message]:
        return [{"role": "user", "content": "No tool was called. Use http_request to work on the request, and call finish when it is done."}]

    def is_done(self) -> bool:
        return self._finished

    def close(self) -> None:
        """End the episode's session and give back this env's lease on the shared server."""
        if self._finalizer is not None:
            self._finalizer()
        self._connection = self._finalizer = None
        super().close()

    # --------------------------------------------------------------------------- tools

    @tool
    def http_request(
        self,
        method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"],
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> str:
        """Send one HTTP request to the Deskly API and return the response (status line, key headers, body).

        Args:
            method: the HTTP method.
            path: the path below the API base, starting with '/', e.g. '/tickets/5001' (no host, no '..').
            query: query parameters, e.g. {"status": "open,pending", "page": 2}.
            body: the JSON request body; a string is sent as it is.
            headers: extra headers, e.g. {"Authorization": "Bearer <token>", "Idempotency-Key": "<unique key>"}.
        """
        assert self._connection is not None
        try:
            result = self._connection.client.request(self._connection.base_url or "", method, path, query, body, headers)
        except (RequestRefused, ClientTimeout) as exc:
            if not self._connection.server.alive:  # the episode's session went with its server: not the model's doing
                raise InfraError(f"http_request: the mock API server stopped ({exc})") from None
            raise ToolError(str(exc)) from None
        return result.render(self.max_body_chars)

    @tool
    def read_api_docs(self, endpoint: str | None = None) -> str:
        """Read the API reference: an overview with every endpoint, or one endpoint in detail.

        Args:
            endpoint: an endpoint as "METHOD /path" (e.g. "GET /tickets") or its operationId; omit for the overview.
        """
        if endpoint is None:
            return overview()
        op = find_operation(endpoint)
        if op is None:
            raise ToolError(f"no endpoint {endpoint[:80]!r}: call read_api_docs() for the list")
        return endpoint_docs(op)

    @tool
    def wait(self, seconds: float) -> str:
        """Wait before the next request, e.g. as long as a Retry-After header asks (simulated time).

        Args:
            seconds: how long to wait, more than 0 and at most 600.
        """
        if not 0 < seconds <= MAX_WAIT_S:
            raise ToolError(f"seconds must be more than 0 and at most {MAX_WAIT_S:g}; got {seconds}")
        assert self.session is not None
        self.session.advance(seconds)
        return f"Waited {seconds:g} s."

    @tool
    def finish(self, summary: str = "") -> str:
        """Declare the request done; the helpdesk's final state is then graded. Ends the episode.

        Args:
            summary: a short note on what you did.
        """
        self._finished = True
        return "Finished."

    # -------------------------------------------------------------------------- reward

    def extra_info(self) -> dict[str, Any]:
        """API calls and injected faults so far, and the faults of the calls since the last report."""
        calls = self.session.calls if self.session is not None else []
        new, self._reported = calls[self._reported :], len(calls)
        turn_faults = [{"call": c.index, "kind": c.fault, "operation": c.operation} for c in new if c.fault]
        self._faults_injected += len(turn_faults)  # a running count keeps a step O(1) in the episode's length
        return {"api_calls": len(calls), "faults_injected": self._faults_injected, "turn_faults": turn_faults}

    def compute_reward(self) -> RewardResult:
        assert self.session is not None and self.task is not None
        calls = self.session.calls
        attempts = len(calls) + self.counts["format_errors"]
        invalid = attempts - sum(c.valid for c in calls)
        format_ = RewardResult(
            1.0 - invalid / attempts if attempts else 1.0, f"{invalid} of {attempts} calls were malformed or broke the OpenAPI description" if invalid else ""
        )
        clean = [c for c in calls if c.fault is None]
        failed = sum(not 200 <= c.status < 300 for c in clean)
        execution = RewardResult(
            1.0 - failed / len(clean) if clean else 1.0, f"{failed} of {len(clean)} calls without an injected fault got an error status" if failed else ""
        )
        problems = state_problems(_pristine_world(self.task["world_seed"]), self.session.world, self.task["expected"])
        completion = RewardResult(0.0 if problems else 1.0, "; ".join(problems) or "task solved", passed=not problems)
        return weighted_sum({"format": format_, "execution": execution, "completion": completion}, WEIGHTS, gate="completion")

    @classmethod
    def policies(cls):
        from agentgym.envs.mock_api.policies import IgnoreErrorsPolicy, OraclePolicy

        return super().policies() | {"oracle": OraclePolicy, "ignore_errors": IgnoreErrorsPolicy}
