"""τ-bench retail with a scripted, ticket or LLM customer: :class:`TauRetailEnv`
(agentgym/TauRetail-v0), the episode around τ-bench's tools, and its reward. The class docstring
documents the environment in Gymnasium's sections; ``docs/envs/tau_retail.md`` is generated from it."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym.env import Message, ToolEnv
from agentgym.envs.tau_retail.audit import solved_by_nothing
from agentgym.envs.tau_retail.data import RetailDB, read_bundled
from agentgym.envs.tau_retail.llm_user import LLMCustomer, LLMUser, ResponseCache
from agentgym.envs.tau_retail.records import TauRetailInfo, TauRetailTask
from agentgym.envs.tau_retail.tools import TERMINATE_TOOLS, WRITE_TOOLS, RetailTools, replay_ground_truth
from agentgym.envs.tau_retail.upstream_errors import ERROR_MODES, binding_error, calculate, unknown_action
from agentgym.envs.tau_retail.users import STOP, USER_MODES, Progress, make_user, target_record
from agentgym.envs.tau_retail.violations import PolicyViolations, record_owner
from agentgym.models import GenerationBackend
from agentgym.parsing import ParsedAction, ToolCall
from agentgym.tools import cap_result
from agentgym.verifiers import RewardResult

# agentgym split -> τ-bench split
UPSTREAM_SPLITS = {"train": "train", "val": "dev", "test": "test"}
WIKI = (resources.files("agentgym.tasks") / "tau_retail" / "wiki.md").read_text(encoding="utf-8")
# With strict=True, a message states required outputs only if it is at most this long and names at
# most this many distinct numbers: one message listing every amount from 0.00 to 999.99 would
# otherwise "state" any amount a task requires.
STRICT_MAX_MESSAGE_CHARS = 2000
STRICT_MAX_NUMBERS = 20
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@functools.cache
def _tool_schemas() -> tuple[dict[str, Any], ...]:
    return tuple(read_bundled("tools_schema"))


def upstream_tasks(split: str) -> list[dict[str, Any]]:
    """τ-bench's tasks of agentgym split ``split``, as this env's task dicts."""
    upstream = UPSTREAM_SPLITS[split]
    return [
        {"task_id": f"retail-{upstream}-{task['task_index']}", "split": split, "upstream_split": upstream} | task for task in read_bundled(f"tasks_{upstream}")
    ]


class TauRetailEnv(ToolEnv[TauRetailTask], RetailTools):
    """agentgym/TauRetail-v0: τ-bench retail with a scripted, ticket or LLM customer.

    ## Description

    The agent is a retail customer-service agent bound by τ-bench's written policy (its ``wiki.md``,
    the system message). A customer wants orders cancelled or modified (address, payment, items),
    delivered items returned or exchanged, their default address changed, or information. The 16
    tools, the database (500 users, 1,000 orders, 50 products) and the 635 tasks are τ-bench
    retail's (``sierra-research/tau-bench``, MIT); the tools return τ-bench's strings and change the
    database exactly as τ-bench's do, so the final database hashes equal τ-bench's for the same
    calls. See ``docs/envs/tau_retail.md`` for what matches upstream and what differs.

    The customer is scripted from the task's data (``user="scripted"``, deterministic), a "ticket"
    whose whole request is the task's instruction (``user="ticket"``, deterministic; see
    :mod:`agentgym.envs.tau_retail.users`), or τ-bench's own kind: a language model playing the
    instruction (``user="llm"``; see :mod:`agentgym.envs.tau_retail.llm_user`), whose replies are cached
    so that the same agent replays identically.

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``; a turn without a tool call is a message to the customer.
    Tools (``env.unwrapped.tools`` gives τ-bench's schemas verbatim): ``calculate``,
    ``cancel_pending_order``, ``exchange_delivered_order_items``, ``find_user_id_by_email``,
    ``find_user_id_by_name_zip``, ``get_order_details``, ``get_product_details``,
    ``get_user_details``, ``list_all_product_types``, ``modify_pending_order_address``,
    ``modify_pending_order_items``, ``modify_pending_order_payment``, ``modify_user_address``,
    ``return_delivered_order_items``, ``think``, ``transfer_to_human_agents``. As in τ-bench, one
    call is executed per turn by default (``max_tool_calls=1``).

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`): ``reset`` returns the
    policy as the system message and the customer's opening message; ``step`` returns one ``tool``
    message per call (τ-bench's result string; refusals start with ``Error:``), or the customer's
    reply as a ``user`` message when the turn called no tool (none in ticket mode).

    ## Rewards

    τ-bench's, given once on the final step: 1.0 iff the final database equals the database left by
    replaying the task's ground-truth actions (``transfer_to_human_agents`` excluded) on fresh data,
    and every required output appears in one of the agent's messages to the customer (lower-cased,
    commas removed, as a substring); 0.0 otherwise, and 0.0 when the episode is truncated.
    Components: ``db`` and ``outputs`` (1.0 or 0.0 each). ``reward_reason`` names the records that
    differ and the outputs not said; ``details`` add both databases' τ-bench hashes.

    ## Starting State

    A task from the chosen split (τ-bench train → ``train``, dev → ``val``, test → ``test``),
    drawn with the env's seeded RNG or named by ``options={"task_id": "retail-test-12"}``, and the
    database as τ-bench ships it.

    ## Episode End

    Terminates when the customer ends the conversation (a reply containing ``###STOP###``: the
    scripted customer's once the task is done, the LLM customer's when it is satisfied), when
    ``transfer_to_human_agents`` runs, or in ticket mode on the agent's first message without a tool
    call. Truncates after ``max_turns`` assistant turns (default 30, τ-bench's
    step limit).

    ## Info

    Besides the shared counts: ``policy_violations``, the violations of the written policy so far, and
    ``policy_violations_by_rule`` (``unconfirmed_write``, ``other_customer``, ``unauthenticated``, ``wrong_status``; the
    rules are defined in :mod:`agentgym.envs.tau_retail.violations`). With ``user="llm"``:
    ``user_errors``, how many customer replies the model failed to give (each replaced by a fixed
    fallback line), and ``user_error``, the latest failure's message (``None`` without one).

    ## Arguments

    ``split``, ``tasks`` (a JSONL path or list of tasks in this env's task format), ``task_ids``,
    ``max_turns`` (default 30), ``max_tool_calls`` per turn (default 1), ``render_mode``
    (``"ansi"``), ``user`` (``"scripted"``, the default, ``"ticket"`` or ``"llm"``).

    ``strict`` (default ``False``, so that scores stay comparable with upstream τ-bench): drop the
    tasks that an agent doing nothing, or transferring to a human at once, solves (their ground truth
    leaves the database unchanged and requires no output: 13 of the 635; see
    :mod:`agentgym.envs.tau_retail.audit`), and count a required output as said only in a message of
    at most 2,000 characters naming at most 20 distinct numbers. Use it for training.

    ``errors`` (default ``"agentgym"``): how malformed tool calls are answered. By default every
    call is checked against the tools' schemas first, and a call that fails (an unknown tool, a
    missing, unexpected or mistyped argument) is answered with agentgym's ``Error: ...`` text and
    runs nothing. ``"upstream"`` answers them exactly as τ-bench's ``Env.step`` does, for harnesses
    ported from τ-bench and comparisons with its published runs: ``Unknown action NAME`` for an
    unknown tool; no type check (an integer ``zip`` is compared, or stored, as an integer);
    Python's own ``TypeError`` text for arguments that do not bind to τ-bench's ``invoke`` (e.g.
    ``Error: Calculate.invoke() missing 1 required positional argument: 'expression'``); any
    exception of a tool as ``Error: <exception>``; ``calculate`` with ``eval``'s results and error
    texts (``10**400`` is ``Error: int too large to convert to float``); and
    ``transfer_to_human_agents`` ends the episode even when its call fails. Well-formed calls give
    the same observations in both modes. See :mod:`agentgym.envs.tau_retail.upstream_errors`.

    For ``user="llm"`` only:

    - ``user_backend``: the generation backend voicing the customer (anything with ``tokenizer``,
      ``name`` and ``generate(prompts, params)``, e.g. :class:`agentgym.models.HFBackend`);
    - ``user_model``: without ``user_backend``, the local model to load instead (a name or path for
      :func:`agentgym.models.create_backend`; default :data:`agentgym.models.DEFAULT_MODEL`). It is
      loaded on the first ``reset``, once per process, and shared by every environment naming it, so
      ``--env-kwargs '{"user": "llm"}'`` works from the command line;
    - ``user_temperature`` (default 0.0) and ``user_seed`` (default 0): the sampling of every reply;
    - ``user_cache``: a :class:`~agentgym.envs.tau_retail.llm_user.ResponseCache` shared with other
      environments, or the path of a JSON-lines file that keeps the replies across runs (shared by
      the environments of a process naming it); default: a cache of this environment's own.

    ## Version History

    - v0: initial release (τ-bench retail at commit 59a200c: 500 train, 20 dev, 115 test tasks).
    - v0: added ``errors="upstream"`` (τ-bench's answers to malformed tool calls); the default is
      unchanged.
    """

    task_family = "tau_retail"
    info_type = TauRetailInfo
    default_max_turns = 30

    def __init__(
        self,
        *,
        user: str = "scripted",
        max_tool_calls: int = 1,
        user_backend: GenerationBackend | None = None,
        user_model: str | None = None,
        user_temperature: float = 0.0,
        user_seed: int = 0,
        user_cache: ResponseCache | str | Path | None = None,
        strict: bool = False,
        errors: str = "agentgym",
        **kwargs: Any,
    ):
        if user not in USER_MODES:
            raise ValueError(f"user must be one of {', '.join(USER_MODES)}; got {user!r}")
        if errors not in ERROR_MODES:
            raise ValueError(f"errors must be one of {', '.join(ERROR_MODES)}; got {errors!r}")
        llm_only = {"user_backend": user_backend, "user_model": user_model, "user_cache": user_cache}
        given = [name for name, value in llm_only.items() if value is not None]
        if user != "llm" and given:
            raise ValueError(f"{', '.join(given)} only apply to user='llm'")
        self.user_mode = user
        self.strict = bool(strict)
        self.errors = errors
        self.customer = (
            LLMCustomer(backend=user_backend, model=user_model, temperature=user_temperature, seed=user_seed, cache=user_cache) if user == "llm" else None
        )
        super().__init__(max_tool_calls=max_tool_calls, **kwargs)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """τ-bench's OpenAI function schemas, verbatim (arguments are validated against the
        equivalent schemas generated from the tools' signatures; a test keeps the two equal)."""
        return copy.deepcopy(list(_tool_schemas()))

    def load_split(self, split: str) -> list[TauRetailTask]:
        return self.load_tasks(upstream_tasks(split))

    def load_tasks(self, source: str | Path | Sequence[dict[str, Any]]) -> list[TauRetailTask]:
        tasks = super().load_tasks(source)
        if not self.strict:
            return tasks
        kept = [task for task in tasks if not solved_by_nothing(task)]
        if not kept:
            raise ValueError("strict=True leaves no task: an agent that does nothing solves every one of these")
        return kept

    # ------------------------------------------------------------------ episode lifecycle

    def setup_episode(self, task: TauRetailTask) -> list[Message]:
        self.db = RetailDB()
        self.transferred = False
        self.stopped = False
        self.replies: list[str] = []
        self._expected: RetailDB | None = None
        self.violations = PolicyViolations(dialogue=self.user_mode != "ticket")
        self.user = self.customer.user(task) if self.customer is not None else make_user(self.user_mode, task)
        return [{"role": "system", "content": WIKI}, {"role": "user", "content": self.user.opening()}]

    def respond(self, parsed: ParsedAction) -> list[Message]:
        self.replies.append(parsed.content)
        reply = self.user.reply(parsed.content, self._progress())
        self.violations.message(parsed.content, reply)
        if reply is None or STOP in reply:
            self.stopped = True
        return [] if reply is None else [{"role": "user", "content": reply}]

    def is_done(self) -> bool:
        return self.stopped or self.transferred

    def extra_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"policy_violations": self.violations.total, "policy_violations_by_rule": dict(self.violations.counts)}
        if isinstance(self.user, LLMUser):
            info |= self.user.info()
        return info

    def _run_tool(self, call: ToolCall, counts: dict[str, int]) -> Message:
        # The violation count needs every call that ran, with its observation: the base class counts a call
        # in tool_calls exactly when it passed validation and ran (refusals included).
        ran_before = counts["tool_calls"]
        message = self._run_tool_as_upstream(call, counts) if self.errors == "upstream" else super()._run_tool(call, counts)
        if counts["tool_calls"] > ran_before:
            self.violations.tool_call(call.name, record_owner(self.db, call.arguments), message["content"])
        return message

    def _run_tool_as_upstream(self, call: ToolCall, counts: dict[str, int]) -> Message:
        """One call as τ-bench's ``Env.step`` runs it (``errors="upstream"``; see
        :mod:`agentgym.envs.tau_retail.upstream_errors`): no schema check, its texts for an unknown
        tool and for arguments that do not bind, any exception shown as ``Error: ...``."""
        tool = self._tools.get(call.name)
        if tool is None:
            counts["format_errors"] += 1
            content = unknown_action(call.name)
        elif (problem := binding_error(tool, call.arguments)) is not None:
            counts["format_errors"] += 1
            content = f"Error: {problem}"
        else:
            counts["tool_calls"] += 1
            try:
                content = calculate(**call.arguments) if call.name == "calculate" else tool.fn(self, **call.arguments)
            except Exception as exc:  # noqa: BLE001 - Env.step shows any exception of a tool as its observation
                counts["tool_errors"] += 1
                content = f"Error: {exc}"
        if call.name in TERMINATE_TOOLS:
            self.transferred = True  # Env.step ends the episode on the call, whatever it returned
        return {"role": "tool", "name": call.name, "tool_call_id": call.id, "content": cap_result(content)}

    # -------------------------------------------------------------------------- reward

    def compute_reward(self) -> RewardResult:
        expected = self.expected_db()
        differing = self.db.differences(expected)
        missing = self.missing_outputs()
        problems = []
        if self._truncated:
            problems.append(f"the episode ran out of its {self.max_turns} turns")
        if differing:
            problems.append("the final database differs from the ground truth's in " + ", ".join(differing))
        if missing:
            problems.append("required outputs not said: " + ", ".join(repr(o) for o in missing))
        passed = not problems
        return RewardResult(
            1.0 if passed else 0.0,
            "; ".join(problems) or "the final database matches the ground truth and every required output was said",
            components={"db": float(not differing), "outputs": float(not missing)},
            passed=passed,
            details={
                "differing_records": differing,
                "missing_outputs": missing,
                "truncated": self._truncated,
                "db_hash": self.db.tau_bench_hash(),
                "expected_db_hash": expected.tau_bench_hash(),
            },
        )

    def expected_db(self) -> RetailDB:
        """The database after the task's ground-truth actions, replayed as τ-bench's reward does:
        on fresh data, terminate tools skipped, refusals ignored."""
        if self._expected is None:
            assert self.task is not None
            self._expected = replay_ground_truth(self.task["actions"])
        return self._expected

    def missing_outputs(self) -> list[str]:
        """The task's required outputs that no message of the agent to the customer contains (with
        ``strict``, no message within :data:`STRICT_MAX_MESSAGE_CHARS` and :data:`STRICT_MAX_NUMBERS`)."""
        assert self.task is not None
        said = [reply.lower().replace(",", "") for reply in self.replies]
        if self.strict:
            said = [text for text in said if len(text) <= STRICT_MAX_MESSAGE_CHARS and len(set(_NUMBER.findall(text))) <= STRICT_MAX_NUMBERS]
        return [output for output in self.task["outputs"] if not any(output.lower() in text for text in said)]

    def _progress(self) -> Progress:
        differing = set(self.db.differences(self.expected_db()))
        missing = bool(self.missing_outputs())
        assert self.task is not None
        unfinished = tuple(a for a in self.task["actions"] if a["name"] in WRITE_TOOLS and "/".join(target_record(a)) in differing)
        return Progress(done=not differing and not missing, unfinished=unfinished, missing_outputs=missing)

    @classmethod
    def policies(cls):
        from agentgym.envs.tau_retail.policies import OraclePolicy

        return super().policies() | {"oracle": OraclePolicy}
