"""The base class of every agentgym environment: a multi-turn tool-use episode as a ``gymnasium.Env``.

One step is one assistant turn. The environment parses the tool calls out of the turn, validates
their arguments against the tools' JSON Schemas, runs them, and observes the new chat messages
(tool results, or the simulated user's reply when the turn called no tool). Malformed output from
the model is ordinary input: it becomes an error message in the observation and a count in
``info``, and the episode goes on.

A subclass provides the task data, the tools (methods marked with :func:`agentgym.tools.tool`),
the episode's opening messages, the user's replies, the end condition and the reward.
"""

from __future__ import annotations

import abc
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, cast

import gymnasium as gym

from agentgym.parsing import ParsedAction, ToolCall, parse_action, scrub_text
from agentgym.records import ChatMessage, EnvInfo, EpisodeRecord, RecordTypes, ResetInfo, StepInfo, StepRecord, TaskRecord, join_keys
from agentgym.spaces import AssistantTurn, ChatMessages
from agentgym.tools import InfraError, Tool, ToolError, cap_result, tools_of
from agentgym.verifiers.result import RewardResult

__all__ = ["SPLITS", "AgentEnv", "EpisodeOver", "Message", "ToolEnv", "agent_env", "check_task_ids"]

Message = ChatMessage
SPLITS = ("train", "val", "test")


class EpisodeOver(gym.error.Error):
    """Raised when ``step`` is called after the episode ended, or before the first ``reset``."""


# The task record type of an environment: a TaskRecord subclass its own package declares (RefundTask, SQLTask, ...).
TaskT = TypeVar("TaskT", bound=TaskRecord)


class ToolEnv(gym.Env[list[Message], Any], Generic[TaskT], metaclass=abc.ABCMeta):
    """A deterministic multi-turn tool environment.

    Subclasses set ``task_family`` (the folder under ``tasks/`` holding ``{split}.jsonl``) and
    implement :meth:`setup_episode`, :meth:`is_done` and :meth:`compute_reward`; they may
    override :meth:`respond` (the reply to a turn without tool calls) and :meth:`policies`.

    Args:
        split: which task split to draw from: ``train``, ``val`` or ``test``.
        tasks: a path to a JSONL task file, or a list of task dicts, used instead of the split.
        task_ids: restrict the episode pool to these task ids.
        max_turns: assistant turns before the episode is truncated.
        max_tool_calls: tool calls executed per turn; further calls in the same turn get an error.
        render_mode: ``"ansi"`` (``render`` returns the last messages as text) or ``None``.
    """

    # render_fps: Gymnasium's checker warns without one; text has no frame rate, so the nominal 1.
    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 - Gymnasium's convention (an attribute it declares)
    task_family: ClassVar[str] = ""
    default_max_turns: ClassVar[int] = 20
    info_type: ClassVar[type | None] = None
    """A TypedDict of the entries :meth:`extra_info` adds to every ``info`` (None: it adds none)."""
    reset_info_type: ClassVar[type | None] = None
    """A TypedDict of the entries the environment's ``reset`` adds to its ``info`` besides those."""

    def __init__(
        self,
        *,
        split: str = "train",
        tasks: str | Path | Sequence[dict[str, Any]] | None = None,
        task_ids: Sequence[str] | None = None,
        max_turns: int | None = None,
        max_tool_calls: int = 8,
        render_mode: str | None = None,
    ):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None; got {render_mode!r}")
        self.split = split
        self.render_mode = render_mode
        self.max_turns = self.default_max_turns if max_turns is None else _whole_number("max_turns", max_turns)
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1; got {max_turns}")
        self.max_tool_calls = _whole_number("max_tool_calls", max_tool_calls)
        all_tasks = self.load_tasks(tasks) if tasks is not None else self.load_split(split)
        # Where the tasks came from, for error messages.
        self.task_source = f"the tasks of {tasks}" if isinstance(tasks, str | Path) else "the given tasks" if tasks is not None else f"the {split!r} tasks"
        self.tasks = _select(all_tasks, task_ids)
        self._task_index = {t["task_id"]: t for t in self.tasks}
        self._tools: dict[str, Tool] = {t.name: t for t in tools_of(type(self))}
        self.observation_space = ChatMessages()
        self.action_space = AssistantTurn()
        self.task: TaskT | None = None
        self._over = True

    # ----------------------------------------------------------------------- public API

    @property
    def tools(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of the tools, in declaration order."""
        return [t.schema for t in self._tools.values()]

    @property
    def task_ids(self) -> list[str]:
        """Ids of the tasks this environment draws from."""
        return [t["task_id"] for t in self.tasks]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode: the task is ``options["task_id"]`` or drawn with the env's seeded RNG.

        Returns:
            The opening messages (system prompt, the user's first message) and ``info``.
        """
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options:
            if options["task_id"] not in self._task_index:
                raise ValueError(f"unknown task_id {options['task_id']!r}: not among {self.task_source}")
            task = self._task_index[options["task_id"]]
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.task = task
        self._seed = seed
        self._turn = 0
        self.counts = {"tool_calls": 0, "format_errors": 0, "tool_errors": 0}
        self.turn_counts: list[dict[str, int]] = []
        self._steps: list[StepRecord] = []
        self._result: RewardResult | None = None
        self._over = False
        self._terminated = self._truncated = False
        opening = self.setup_episode(task)
        self._messages: list[Message] = [m.copy() for m in opening]
        self._last = opening
        return [m.copy() for m in opening], self._info()

    def step(self, action: Any):
        """Play one assistant turn.

        Returns:
            ``(new_messages, reward, terminated, truncated, info)``. ``reward`` is the episode's
            reward on its final step and 0 before; the final ``info`` explains it.
        """
        if self._over:
            raise EpisodeOver("the episode is over (or never started): call reset() first")
        self._turn += 1
        parsed = parse_action(action, id_prefix=f"call_{self._turn}")
        self._messages.append(_assistant_message(action, parsed))
        turn_counts = {"tool_calls": 0, "format_errors": 0, "tool_errors": 0}
        observation = [self._error_message(f"invalid_{i}", e, turn_counts) for i, e in enumerate(parsed.errors)]
        for index, call in enumerate(parsed.tool_calls):
            if self.is_done():
                observation.append(self._error_message(call.id, "not executed: the episode already ended", turn_counts, name=call.name, kind=None))
            elif index >= self.max_tool_calls:
                observation.append(
                    self._error_message(call.id, f"not executed: at most {self.max_tool_calls} tool calls per turn", turn_counts, name=call.name)
                )
            else:
                observation.append(self._run_tool(call, turn_counts))
        if not parsed.tool_calls and not parsed.errors:
            observation.extend(self.respond(parsed))
        for key, n in turn_counts.items():
            self.counts[key] += n
        self.turn_counts.append(turn_counts)

        terminated = self.is_done()
        truncated = not terminated and self._turn >= self.max_turns
        reward = 0.0
        info: StepInfo = {
            **self._info(),
            "turn_tool_calls": turn_counts["tool_calls"],
            "turn_format_errors": turn_counts["format_errors"],
            "turn_tool_errors": turn_counts["tool_errors"],
        }
        if terminated or truncated:
            self._over, self._terminated, self._truncated = True, terminated, truncated
            self._result = self._reward()
            reward = float(self._result.score)
            info["reward_components"] = dict(self._result.components)
            info["reward_reason"] = self._result.reason
            info["success"] = bool(self._result.passed)
        self._messages.extend(m.copy() for m in observation)
        self._steps.append({"reward": reward, "info": info})
        self._last = observation
        return [m.copy() for m in observation], reward, terminated, truncated, info

    def render(self) -> str | None:
        """The last observation as plain text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}{':' + m['name'] if 'name' in m else ''}] {m['content']}" for m in self._last)

    def episode_record(self) -> EpisodeRecord:
        """The episode so far as one JSON-ready dict (the rollout JSONL format; see :class:`~agentgym.records.EpisodeRecord`)."""
        if self.task is None:
            raise EpisodeOver("no episode has started: call reset() first")
        result = self._result
        return {
            "env_id": self.spec.id if self.spec is not None else type(self).__name__,
            "env_version": self.spec.version if self.spec is not None else None,
            "env_kwargs": _replayable(self.spec.kwargs) if self.spec is not None else {},
            "task_id": self.task["task_id"],
            "split": self.task["split"] if "split" in self.task else self.split,  # noqa: SIM401 - .get() on a task type variable reads as object
            "seed": self._seed,
            "messages": [m.copy() for m in self._messages],
            "steps": [s.copy() for s in self._steps],
            "reward": result.score if result else 0.0,
            "reward_components": dict(result.components) if result else {},
            "reward_reason": result.reason if result else "episode not finished",
            "success": bool(result.passed) if result else False,
            "turns": self._turn,
            "terminated": self._terminated,
            "truncated": self._truncated,
        }

    @classmethod
    def policies(cls) -> dict[str, Callable[[int], Any]]:
        """Scripted policies by name, each built from a seed. Subclasses add ``oracle`` and baselines."""
        from agentgym import policies as p

        return {
            "random": p.RandomPolicy,
            "do_nothing": p.DoNothingPolicy,
            "format_only": p.FormatOnlyPolicy,
            "tool_spam": p.ToolSpamPolicy,
            "answer_spam": p.AnswerSpamPolicy,
        }

    @classmethod
    def record_types(cls) -> RecordTypes:
        """The types of this environment's records: its task type (the one the class is
        parametrised with, ``ToolEnv[RefundTask]``; :class:`~agentgym.records.TaskRecord` without
        one) and the ``info`` of ``reset`` and ``step`` with the entries it declares
        (:attr:`info_type`, :attr:`reset_info_type`). The core names no environment: tests and
        tools find an environment's types here."""
        name = cls.__name__
        return RecordTypes(
            task=_task_type(cls),
            reset_info=join_keys(f"{name}ResetInfo", ResetInfo, cls.info_type, cls.reset_info_type),
            step_info=join_keys(f"{name}StepInfo", StepInfo, cls.info_type),
        )

    # ------------------------------------------------------------------ subclass hooks

    def load_split(self, split: str) -> list[TaskT]:
        """The bundled tasks of ``split``, from ``tasks/{task_family}/{split}.jsonl``."""
        path = resources.files("agentgym.tasks") / self.task_family / f"{split}.jsonl"
        with resources.as_file(path) as file:
            return self.load_tasks(file)

    def load_tasks(self, source: str | Path | Sequence[dict[str, Any]]) -> list[TaskT]:
        """Tasks from a JSONL path or a list of dicts; each needs a unique ``task_id``."""
        if isinstance(source, str | Path):
            path = Path(source)
            if not path.is_file():
                raise FileNotFoundError(f"task file not found: {path}")
            tasks = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        else:
            tasks = [dict(t) for t in source]
        if not tasks:
            raise ValueError("the task set is empty")
        ids = [t.get("task_id") for t in tasks]
        if any(not isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
            raise ValueError("every task needs a unique string 'task_id'")
        return cast("list[TaskT]", tasks)  # each environment's records are checked by tests/test_records.py

    @abc.abstractmethod
    def setup_episode(self, task: TaskT) -> list[Message]:
        """Build the episode's state for ``task`` and return its opening messages."""

    def respond(self, parsed: ParsedAction) -> list[Message]:
        """Messages answering a turn that called no tool (by default, a nudge to use the tools)."""
        return [{"role": "user", "content": "Please continue; use the tools to make progress."}]

    @abc.abstractmethod
    def is_done(self) -> bool:
        """Whether the episode has reached its end state (checked after every tool call)."""

    @abc.abstractmethod
    def compute_reward(self) -> RewardResult:
        """The episode's reward, computed from the final state when the episode ends."""

    def in_last_turn(self) -> bool:
        """Whether the turn being played is the episode's last: the turn limit ends the episode after
        it, whatever its tools do. For tools that set up work for a later turn (a prepared run)."""
        return self._turn >= self.max_turns

    def format_and_execution(self) -> dict[str, RewardResult]:
        """The two process components every environment's reward shares, from the reward SDK:
        ``format`` (mean well-formedness of the assistant turns) and ``execution`` (share of
        executed tool calls that did not fail)."""
        from agentgym.verifiers import episode_format_reward, execution_reward

        return {
            "format": episode_format_reward(self._messages, self.tools),
            "execution": execution_reward(self.counts["tool_calls"], self.counts["tool_errors"]),
        }

    def extra_info(self) -> dict[str, Any]:
        """Environment-specific entries added to every step's ``info``."""
        return {}

    # ------------------------------------------------------------------------ internals

    def _reward(self) -> RewardResult:
        """The episode's reward, failing closed: a reward that cannot be computed is 0, not passed,
        with a reason that says nothing about what went wrong (the error goes to ``details``)."""
        try:
            return self.compute_reward()
        except Exception as exc:  # noqa: BLE001 - any failure of a reward fails closed
            return RewardResult(
                0.0, "the reward could not be computed, so the episode counts as failed", passed=False, details={"error": f"{type(exc).__name__}: {exc}"}
            )

    def _run_tool(self, call: ToolCall, counts: dict[str, int]) -> Message:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools)
            return self._error_message(call.id, f"unknown tool {call.name!r}; available tools: {known}", counts, name=call.name)
        problem = tool.validation_error(call.arguments)
        if problem is not None:
            return self._error_message(call.id, f"invalid arguments for {call.name}: {problem}", counts, name=call.name)
        counts["tool_calls"] += 1
        try:
            result = tool.fn(self, **call.arguments)
        except ToolError as exc:
            return self._error_message(call.id, str(exc), counts, name=call.name, kind="tool_errors")
        except InfraError:
            raise  # not the model's doing: the episode ends, labelled (docs/core.md, Failures)
        except Exception as exc:  # noqa: BLE001 - a tool bug must not end the episode; it is reported and counted
            return self._error_message(call.id, f"{call.name} failed: {type(exc).__name__}: {exc}", counts, name=call.name, kind="tool_errors")
        content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return {"role": "tool", "name": call.name, "tool_call_id": call.id, "content": cap_result(content)}

    def _error_message(
        self, call_id: str, text: str, counts: dict[str, int], *, name: str = "invalid_tool_call", kind: str | None = "format_errors"
    ) -> Message:
        if kind is not None:
            counts[kind] += 1
        return {"role": "tool", "name": name, "tool_call_id": call_id, "content": cap_result(f"Error: {text}")}

    def _info(self) -> EnvInfo:
        assert self.task is not None
        info = {"task_id": self.task["task_id"], "turn": self._turn, **self.counts, **self.extra_info()}
        # extra_info() is each environment's own (a dict), declared by its info_type; tests/test_records.py
        # holds every bundled environment's info to its record_types().
        return cast(EnvInfo, info)


class AgentEnv(Protocol):
    """An agentgym environment itself (what ``unwrapped`` reaches): a :class:`ToolEnv` in process, or
    a client whose environment lives elsewhere (``agentgym.remote.client.SessionEnv``). What the
    rollout runner, the trainer and the adapters use of either."""

    @property
    def tools(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of the tools."""
        ...

    @property
    def task_ids(self) -> list[str]:
        """Ids of the tasks the environment draws from."""
        ...

    @property
    def tasks(self) -> Sequence[Any]:
        """The tasks the environment draws from (:class:`~agentgym.records.TaskRecord` and the environment's own fields)."""
        ...

    @property
    def task(self) -> Mapping[str, Any] | None:
        """The current episode's task (None before the first ``reset``)."""
        ...

    @property
    def max_turns(self) -> int:
        """Assistant turns before an episode is truncated."""
        ...

    @property
    def counts(self) -> dict[str, int]:
        """The episode's running counts: ``tool_calls``, ``format_errors``, ``tool_errors``."""
        ...

    def episode_record(self) -> EpisodeRecord:
        """The episode so far."""
        ...

    def compute_reward(self) -> RewardResult:
        """The reward of the state the episode reached."""
        ...

    def policies(self) -> dict[str, Callable[[int], Any]]:
        """Scripted policies by name, each built from a seed."""
        ...


def _whole_number(name: str, value: Any) -> int:
    """An integer argument (an integral float or numeric string passes, as ``int()`` takes them)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer; got {value!r}") from None
    if isinstance(value, float) and value != number:
        raise ValueError(f"{name} must be an integer; got {value!r}")
    return number


def agent_env(env: gym.Env) -> AgentEnv:
    """``env.unwrapped``, typed as the agentgym environment it is."""
    # Every environment agentgym registers (and so every one make_env makes) is a ToolEnv or a
    # session client, and both have what AgentEnv names.
    return cast(AgentEnv, env.unwrapped)


if TYPE_CHECKING:

    class MadeEnv(gym.Env[list[Message], Any]):
        """The type checker's view of what :func:`agentgym.make_env` returns: ``gym.make``'s wrappers
        around a registered agentgym environment, which ``unwrapped`` reaches (see :func:`agent_env`)."""

        @property
        def unwrapped(self) -> UnwrappedEnv: ...

    class UnwrappedEnv(gym.Env[list[Message], Any], AgentEnv):
        """The type checker's view of ``unwrapped``: a Gymnasium environment with what :class:`AgentEnv` names."""


def _assistant_message(action: Any, parsed: ParsedAction) -> Message:
    # Recorded as the parser read it: text that a tokenizer or a file could not encode is scrubbed.
    if isinstance(action, str):
        return {"role": "assistant", "content": scrub_text(action)}
    if isinstance(action, dict):
        content = action.get("content")
        message: Message = {"role": "assistant", "content": scrub_text(content) if isinstance(content, str) else ""}
        if parsed.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
        return message
    return {"role": "assistant", "content": repr(action)}


def _replayable(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The make() kwargs that a record can carry to replay its episode (JSON values only)."""
    out = {}
    for key, value in kwargs.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        if key != "tasks" or isinstance(value, str):  # inline task lists would bloat every line
            out[key] = value
    return out


def check_task_ids(task_ids: Sequence[str], available: Sequence[str], *, source: str = "") -> list[str]:
    """``task_ids`` as a list, each checked to be one of ``available`` (the one task-id check of
    environments, rollouts and trainers).

    Raises:
        ValueError: ``unknown task ids[ for SOURCE]: ...`` naming up to five, or an empty list.
    """
    if not task_ids:
        raise ValueError("task_ids is empty")
    known = set(available)
    unknown = sorted({str(i) for i in task_ids if i not in known})
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise ValueError(f"unknown task ids{f' for {source}' if source else ''}: {', '.join(unknown[:5])}{more}")
    return list(task_ids)


def _task_type(cls: type) -> type:
    """The task type ``cls`` is parametrised with (``ToolEnv[RefundTask]``, ``KnowledgeEnv[SQLTask]``;
    a type variable's bound), or TaskRecord when it names none."""
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            origin, args = typing.get_origin(base), typing.get_args(base)
            if isinstance(origin, type) and issubclass(origin, ToolEnv) and len(args) == 1:
                task: Any = args[0].__bound__ if isinstance(args[0], TypeVar) else args[0]
                return task if typing.is_typeddict(task) else TaskRecord
    return TaskRecord


def _select(tasks: list[TaskT], task_ids: Sequence[str] | None) -> list[TaskT]:
    if task_ids is None:
        return tasks
    by_id = {t["task_id"]: t for t in tasks}
    return [by_id[i] for i in check_task_ids(task_ids, list(by_id))]
