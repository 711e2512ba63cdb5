"""The shapes of agentgym's records: typed dicts for what episodes, turns, tasks and rewards write.

Records are plain JSON: written one per line to JSONL files and read back with ``json.loads``, so
their types are :class:`typing.TypedDict`s, which cost nothing at run time and stay ``dict``s.
``tests/test_records.py`` plays real episodes and reads the bundled task files to hold every
record to its type: a key that is not declared here fails it.

Episodes
    :class:`EpisodeRecord`: one episode, as ``env.unwrapped.episode_record()``,
    :func:`agentgym.rollouts.scripted.run_episode` and :func:`agentgym.rollouts.scripted.rollout` return it and as
    ``agentgym rollout --out`` writes it, one JSON line each. It holds the conversation
    (:class:`ChatMessage`), one :class:`StepRecord` per turn (with its :class:`StepInfo`) and the
    reward's explanation (:class:`RewardInfo`).

    :class:`ModelEpisodeRecord`: an episode a model played through the rollout runner
    (:attr:`agentgym.rollouts.runner.Episode.record`), with its group, member and stop reason;
    :attr:`agentgym.rollouts.runner.Episode.turns` holds one :class:`TurnRecord` per sampled turn.

    :class:`TrajectoryRecord`: a line of ``agentgym eval --out``
    (:meth:`agentgym.rollouts.runner.Episode.to_dict`): the model episode record with its token-exact
    trajectory (:class:`TrajectoryDict`), which ``agentgym inspect`` reads.

    :class:`LabelledRecord`: an episode record with a person's verdict (:class:`Label`), as in
    ``tasks/*/labelled.jsonl``, built by :func:`agentgym.offline.labelling.build_labelled` and read by
    ``agentgym validate-reward``.

Tasks
    :class:`TaskRecord`: what every task has (``task_id``; ``split``, ``difficulty`` and
    ``template`` where the family has them); each environment's tasks add their own fields
    in a subclass declared in the environment's own package (``agentgym.envs.refund.records.RefundTask``,
    ...). They are the lines of ``tasks/<family>/{train,val,test}.jsonl`` (TauRetail-v0 builds its
    own from τ-bench's files) and the items of ``env.unwrapped.tasks``.

Environments
    This module names no environment. An environment declares its task type and the entries it adds
    to ``info`` in its own package; :meth:`agentgym.env.ToolEnv.record_types` gathers them into a
    :class:`RecordTypes` (the task type, ``reset``'s and ``step``'s ``info`` with its entries).

Rewards
    A reward returns a :class:`agentgym.verifiers.RewardResult` (score, reason, components,
    passed, details); an episode's record and its final ``info`` carry its explanation as
    :class:`RewardInfo` (``reward_components``, ``reward_reason``, ``success``).

Loading
    :func:`agentgym.rollouts.io.read_records` reads a JSONL file of episode records (any of the
    kinds above) typed as :class:`EpisodeRecord`; :func:`agentgym.rollouts.io.read_jsonl` reads any
    JSONL file as plain dicts. JSON has no tuples: sequences come back as lists.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations
# (Python 3.11 counts a key written as a string as required in __required_keys__).
import importlib
import typing
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

__all__ = [
    "ChatMessage",
    "EnvInfo",
    "EpisodeRecord",
    "FinishReason",
    "Label",
    "LabelKind",
    "LabelledRecord",
    "ModelEpisodeRecord",
    "OpenAIFunctionCall",
    "OpenAIToolCall",
    "RecordTypes",
    "ResetInfo",
    "RewardInfo",
    "Role",
    "SegmentDict",
    "SegmentKind",
    "StepError",
    "StepInfo",
    "StepRecord",
    "StopReason",
    "TaskRecord",
    "TrajectoryDict",
    "TrajectoryRecord",
    "TurnRecord",
    "TurnToolCall",
    "join_keys",
]

Role = Literal["system", "user", "assistant", "tool"]
StopReason = Literal["done", "max_turns", "token_budget", "error", "infra_error"]
"""Why a model-driven episode ended: the environment terminated it (``done``) or truncated it
(``max_turns``), the token budget ran out, the environment failed (``error``), or the machinery
behind it did (``infra_error``: an :class:`agentgym.InfraError`, not the model's doing; trainers and
evaluations leave such episodes out)."""
FinishReason = Literal["stop", "length"]
"""Why a sampled turn ended: the end-of-turn token (``stop``) or the token limit (``length``)."""
SegmentKind = Literal["prompt", "sampled", "closing", "env"]
"""Where a run of trajectory tokens came from (see :class:`agentgym.rollouts.trajectory.Segment`)."""
LabelKind = Literal["success", "partial", "failure", "hack"]


# ------------------------------------------------------------------------------- messages


class OpenAIFunctionCall(TypedDict):
    """The ``function`` of an :class:`OpenAIToolCall`."""

    name: str
    arguments: str  # the arguments object as JSON text, as OpenAI's format has it


class OpenAIToolCall(TypedDict):
    """One entry of an assistant message's ``tool_calls``, in OpenAI's format (``ToolCall.to_openai()``)."""

    id: str  # "call_{turn}_{index}": the id the answering tool message carries as tool_call_id
    type: Literal["function"]
    function: OpenAIFunctionCall


class ChatMessage(TypedDict):
    """One chat message: what ``reset`` and ``step`` observe and what a record's ``messages`` hold.

    ``system`` and ``user`` messages carry ``role`` and ``content`` only; ``tool`` messages add
    ``name`` and ``tool_call_id``; assistant turns are recorded as the environment read them (text,
    scrubbed of what UTF-8 cannot encode), with ``tool_calls`` when the turn came as an OpenAI-style
    message with calls.
    """

    role: Role
    content: str  # an assistant message sent with content None is recorded with ""
    name: NotRequired[str]  # tool messages: the tool called ("invalid_tool_call" for a call that did not parse)
    tool_call_id: NotRequired[str]  # tool messages: the call answered ("call_{turn}_{index}", or "invalid_{index}")
    tool_calls: NotRequired[list[OpenAIToolCall]]  # assistant messages sent in OpenAI's format: the calls that parsed


# ----------------------------------------------------------------------------------- info


class EnvInfo(TypedDict):
    """What every ``info`` holds, ``reset``'s (:class:`ResetInfo`) and each step's
    (:class:`StepInfo`): the episode so far.

    The counts run over the whole episode. An environment adds its own entries
    (``ToolEnv.extra_info()``) and declares them in its own package, as a TypedDict named by its
    class (``ToolEnv.info_type``; ``reset_info_type`` for entries only ``reset`` adds):
    :meth:`agentgym.env.ToolEnv.record_types` joins them to these (:class:`RecordTypes`).
    """

    task_id: str
    turn: int  # assistant turns played so far
    tool_calls: int  # tool calls that passed validation and ran
    format_errors: int  # unparseable calls, unknown tools, invalid arguments, calls over max_tool_calls
    tool_errors: int  # calls that ran and failed (a ToolError or an exception)


class ResetInfo(EnvInfo):
    """The ``info`` that ``reset`` returns (with the environment's own entries, see :class:`EnvInfo`)."""


class StepInfo(EnvInfo):
    """The ``info`` of one ``step``: the episode's counts, this turn's counts, and on the final step
    (terminated or truncated) the reward's explanation (the keys of :class:`RewardInfo`)."""

    turn_tool_calls: int
    turn_format_errors: int
    turn_tool_errors: int
    reward_components: NotRequired[dict[str, float]]  # final step only
    reward_reason: NotRequired[str]  # final step only
    success: NotRequired[bool]  # final step only


class StepError(TypedDict):
    """The ``info`` a :class:`TurnRecord` holds for a turn on which the environment raised."""

    error: str


class StepRecord(TypedDict):
    """One entry of an episode record's ``steps``: what ``step`` returned for one assistant turn."""

    reward: float  # the episode's reward on the final step, 0.0 before
    info: StepInfo


class RewardInfo(TypedDict):
    """A reward's explanation as records carry it: the episode record's ``reward_components``,
    ``reward_reason`` and ``success`` (also in the final step's ``info``). The reward itself is a
    :class:`agentgym.verifiers.RewardResult`; these are its ``components``, ``reason`` and ``passed``."""

    reward_components: dict[str, float]  # named sub-scores (e.g. "format", "execution", "completion")
    reward_reason: str  # one sentence a person can read
    success: bool  # the environment's verdict: the task was solved


# -------------------------------------------------------------------------------- episodes


class EpisodeRecord(RewardInfo):
    """One episode: ``env.unwrapped.episode_record()``, what ``run_episode`` and ``rollout``
    return and each line of ``agentgym rollout --out``.

    The same environment, policy, seed and arguments give the same record, byte for byte, once
    written (:func:`agentgym.rollouts.io.to_json_line`).
    """

    env_id: str  # e.g. "agentgym/Refund-v0" (the class name for an environment made without the registry)
    env_version: int | None  # the registered version (0 for "-v0"); None without a registry spec
    env_kwargs: dict[str, Any]  # the JSON-valued make() arguments, so the episode can be replayed
    task_id: str
    split: str
    seed: int | None  # the reset seed
    messages: list[ChatMessage]  # the whole conversation: opening, assistant turns, observations
    steps: list[StepRecord]  # one per assistant turn
    reward: float  # the episode's reward (0.0 while it is not over)
    turns: int  # assistant turns played
    terminated: bool  # the environment reached its end state
    truncated: bool  # cut by max_turns (or, for a model episode, by the runner)
    policy: NotRequired[str]  # the scripted policy's or backend's name (absent from episode_record() itself)


class ModelEpisodeRecord(EpisodeRecord):
    """An episode a model played through :class:`agentgym.rollouts.runner.RolloutRunner`
    (:attr:`agentgym.rollouts.runner.Episode.record`): the episode record, ``policy`` always set (the
    backend's name), and the runner's own fields."""

    group: int  # the task group (episodes of a group share a task)
    member: int  # index within the group
    stop_reason: StopReason
    error: NotRequired[str]  # stop_reason "error" or "infra_error": what failed (the reward is then 0)
    infra_retries: NotRequired[int]  # times the episode was played again after an "infra_error" (RolloutRunner.run)
    difficulty: NotRequired[str]  # copied from the task, when it has one
    template: NotRequired[str]  # copied from the task, when it has one


class TurnToolCall(TypedDict):
    """A tool call that parsed out of a sampled turn (:attr:`TurnRecord.tool_calls`)."""

    name: str
    arguments: dict[str, Any]
    id: str  # the id the environment gives the call: "call_{turn}_{index}"


class TurnRecord(TypedDict):
    """One sampled turn of a model episode (:attr:`agentgym.rollouts.runner.Episode.turns`), in memory
    (token ids are tuples; not written by ``agentgym eval``)."""

    turn: int  # 0-based
    seed: int | None  # the sampling seed (None when the caller sampled without sampling_params())
    prompt_ids: tuple[int, ...]  # the sequence the turn was sampled from
    sampled_ids: tuple[int, ...]  # the sampled ids, verbatim (end-of-turn token included when sampled)
    logprobs: tuple[float, ...]  # their sampling logprobs (0.0 each when the engine reported none)
    finish_reason: FinishReason
    text: str  # the sampled ids decoded without special tokens
    tool_calls: list[TurnToolCall]
    parse_errors: list[str]  # one message per malformed call
    env_messages: list[ChatMessage]  # the environment's answer to the turn
    env_message_ids: tuple[int, ...]  # the masked delta that follows the turn in the trajectory; empty when none does
    reward: float
    terminated: bool
    truncated: bool
    info: StepInfo | StepError  # StepError when the environment raised on the turn
    opening_tokens: NotRequired[int]  # leading sampled_ids given, not sampled (rollout.error_tool_exploration); absent when none


class SegmentDict(TypedDict):
    """One :class:`agentgym.rollouts.trajectory.Segment` in a :class:`TrajectoryDict`."""

    kind: SegmentKind
    start: int  # offset of the first token in the trajectory
    token_ids: list[int]
    logprobs: list[float] | None  # "sampled" segments only
    turn: int


class TrajectoryDict(TypedDict):
    """A token-exact trajectory as JSON (``Trajectory.to_dict()``; ``Trajectory.from_dict`` reads it back)."""

    segments: list[SegmentDict]
    messages: list[dict[str, Any]]  # the conversation as rendered for the model (tool description included)
    prefix_stable: bool


class TrajectoryRecord(ModelEpisodeRecord):
    """A line of ``agentgym eval --out`` (:meth:`agentgym.rollouts.runner.Episode.to_dict`): the model episode
    record with its trajectory, which ``agentgym inspect`` shows."""

    trajectory: TrajectoryDict
    token_ids: list[int]  # the whole sequence, flat
    loss_mask: list[int]  # 1 exactly on sampled tokens
    tokenizer: NotRequired[str]  # the model whose tokenizer decodes token_ids (agentgym eval --out adds it)


Label = TypedDict("Label", {"pass": bool, "justification": str, "kind": NotRequired[LabelKind], "score": NotRequired[float | None]})
"""A person's verdict on an episode: ``pass`` (the reward should pass it), a one-line
``justification``, the ``kind`` of behaviour (``success`` when absent) and optionally the ``score``
the reward should give."""


class LabelledRecord(EpisodeRecord):
    """An episode record with a person's verdict: a line of ``tasks/*/labelled.jsonl`` and the input
    of ``agentgym validate-reward``."""

    label: Label


# ----------------------------------------------------------------------------------- tasks


class TaskRecord(TypedDict):
    """What every task has: a line of ``tasks/<family>/{split}.jsonl`` and an item of
    ``env.unwrapped.tasks``. Each environment's tasks add their own fields, in a subclass its own
    package declares (``RefundTask`` in ``agentgym.envs.refund.records``) and its class is
    parametrised with (``ToolEnv[RefundTask]``); records and the rollout runner read only these."""

    task_id: str  # unique within the environment's task set
    split: NotRequired[str]  # "train", "val" or "test" (the env's split when absent)
    difficulty: NotRequired[str]  # "easy", "medium" or "hard"; evaluation breaks results down by it
    template: NotRequired[str]  # the generator's template the task came from


# ---------------------------------------------------------------------- one environment's


@dataclass(frozen=True)
class RecordTypes:
    """The record types of one environment (:meth:`agentgym.env.ToolEnv.record_types`): what a
    type checker, a test or a reader holds its tasks and ``info`` to."""

    task: type  # its TaskRecord subclass (TaskRecord itself for an environment that declares none)
    reset_info: type  # ResetInfo with the environment's own entries
    step_info: type  # StepInfo with the environment's own entries


def join_keys(name: str, base: type, *extras: type | None) -> type:
    """A TypedDict named ``name`` with the keys of ``base`` and of each of ``extras`` (``None`` adds
    nothing), each required or not as its own type has it.

    Raises:
        ValueError: when two of them declare the same key.
    """
    fields: dict[str, Any] = {}
    part: Any  # a TypedDict class, which the type checker sees as a plain type
    for part in (base, *(e for e in extras if e is not None)):
        if not typing.is_typeddict(part):
            raise ValueError(f"{name}: {part!r} is not a TypedDict")
        for key, hint in typing.get_type_hints(part).items():
            if key in fields:
                raise ValueError(f"{name}: {part.__name__} declares {key!r} again")
            fields[key] = hint if key in part.__required_keys__ else NotRequired[hint]
    return TypedDict(name, fields)  # type: ignore[operator]  # a TypedDict built at run time


# ------------------------------------------------------------------------ moved, for one version

MOVED = {
    "APIFault": "agentgym.envs.mock_api.records",
    "CodeExecTask": "agentgym.envs.code_exec.records",
    "KnowledgeTask": "agentgym.envs.knowledge.records",
    "MockAPITask": "agentgym.envs.mock_api.records",
    "RefundTask": "agentgym.envs.refund.records",
    "SQLTask": "agentgym.envs.knowledge.records",
    "SearchQATask": "agentgym.envs.knowledge.records",
    "TauRetailTask": "agentgym.envs.tau_retail.records",
    "ToolMathTask": "agentgym.envs.knowledge.records",
}
"""The environments' types this module declared before they moved to their own packages: name -> its
module now. ``agentgym.records.NAME`` still finds them, with a DeprecationWarning, until the next release."""

if not TYPE_CHECKING:  # the type checker sees only the new paths

    def __getattr__(name: str) -> Any:
        if name not in MOVED:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        warnings.warn(
            f"agentgym.records.{name} is deprecated: import it from {MOVED[name]} (the old path goes in the next release)", DeprecationWarning, stacklevel=2
        )
        return getattr(importlib.import_module(MOVED[name]), name)
