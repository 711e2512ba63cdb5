"""The shapes of agentgym's records: typed dicts for what episodes, turns, tasks and rewards write.

Records are plain JSON: written one per line to JSONL files and read back with ``json.loads``, so
their types are :class:`typing.TypedDict`s, which cost nothing at run time and stay ``dict``s.
``tests/test_records.py`` plays real episodes and reads the bundled task files to hold every
record to its type: a key that is not declared here fails it.

Episodes
    :class:`EpisodeRecord`: one episode, as ``env.unwrapped.episode_record()``,
    :func:`agentgym.rollout.run_episode` and :func:`agentgym.rollout.rollout` return it and as
    ``agentgym rollout --out`` writes it, one JSON line each. It holds the conversation
    (:class:`ChatMessage`), one :class:`StepRecord` per turn (with its :class:`StepInfo`) and the
    reward's explanation (:class:`RewardInfo`).

    :class:`ModelEpisodeRecord`: an episode a model played through the rollout runner
    (:attr:`agentgym.runner.Episode.record`), with its group, member and stop reason;
    :attr:`agentgym.runner.Episode.turns` holds one :class:`TurnRecord` per sampled turn.

    :class:`TrajectoryRecord`: a line of ``agentgym eval --out``
    (:meth:`agentgym.runner.Episode.to_dict`): the model episode record with its token-exact
    trajectory (:class:`TrajectoryDict`), which ``agentgym inspect`` reads.

    :class:`LabelledRecord`: an episode record with a person's verdict (:class:`Label`), as in
    ``tasks/*/labelled.jsonl``, built by :func:`agentgym.labelling.build_labelled` and read by
    ``agentgym validate-reward``.

Tasks
    :class:`TaskRecord`: what every task has (``task_id``; ``split``, ``difficulty`` and
    ``template`` where the family has them); each environment's tasks add their own fields
    (:class:`RefundTask`, :class:`CodeExecTask`, :class:`MockAPITask`, :class:`SQLTask`,
    :class:`SearchQATask`, :class:`ToolMathTask`, :class:`TauRetailTask`). They are the lines of
    ``tasks/<family>/{train,val,test}.jsonl`` (TauRetail-v0 builds its own from τ-bench's files)
    and the items of ``env.unwrapped.tasks``.

Rewards
    A reward returns a :class:`agentgym.verifiers.RewardResult` (score, reason, components,
    passed, details); an episode's record and its final ``info`` carry its explanation as
    :class:`RewardInfo` (``reward_components``, ``reward_reason``, ``success``).

Loading
    :func:`agentgym.rollout.read_records` reads a JSONL file of episode records (any of the
    kinds above) typed as :class:`EpisodeRecord`; :func:`agentgym.rollout.read_jsonl` reads any
    JSONL file as plain dicts. JSON has no tuples: sequences come back as lists.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] off evaluated annotations
# (Python 3.11 counts a key written as a string as required in __required_keys__).
from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "APIFault",
    "ChatMessage",
    "CodeExecTask",
    "EnvInfo",
    "EpisodeRecord",
    "FinishReason",
    "KnowledgeTask",
    "Label",
    "LabelKind",
    "LabelledRecord",
    "MockAPITask",
    "ModelEpisodeRecord",
    "OpenAIFunctionCall",
    "OpenAIToolCall",
    "RefundTask",
    "ResetInfo",
    "RewardInfo",
    "Role",
    "SQLTask",
    "SearchQATask",
    "SegmentDict",
    "SegmentKind",
    "StepError",
    "StepInfo",
    "StepRecord",
    "StopReason",
    "TaskRecord",
    "TauRetailTask",
    "ToolMathTask",
    "TrajectoryDict",
    "TrajectoryRecord",
    "TurnRecord",
    "TurnToolCall",
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
"""Where a run of trajectory tokens came from (see :class:`agentgym.models.trajectory.Segment`)."""
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


class APIFault(TypedDict):
    """A fault MockAPI-v0 injected into an API call (``info["turn_faults"]``)."""

    call: int  # the API call's 1-based index in the episode
    kind: str  # one of agentgym.envs.mock_api.faults.FAULT_KINDS, e.g. "rate_limit", "timeout"
    operation: str | None  # the operationId the request matched, None when it matched none


class EnvInfo(TypedDict):
    """What every ``info`` holds, ``reset``'s (:class:`ResetInfo`) and each step's
    (:class:`StepInfo`): the episode so far.

    The counts run over the whole episode. Environments add their own entries
    (``ToolEnv.extra_info()``); those of the bundled environments are declared here.
    """

    task_id: str
    turn: int  # assistant turns played so far
    tool_calls: int  # tool calls that passed validation and ran
    format_errors: int  # unparseable calls, unknown tools, invalid arguments, calls over max_tool_calls
    tool_errors: int  # calls that ran and failed (a ToolError or an exception)
    # CodeExec-v0
    sandbox_runs: NotRequired[int]  # run_python calls so far
    # MockAPI-v0
    api_calls: NotRequired[int]  # HTTP requests made so far
    faults_injected: NotRequired[int]  # faults injected so far
    turn_faults: NotRequired[list[APIFault]]  # the faults injected since the last info
    # SQL-v0, SearchQA-v0, ToolMath-v0
    cache_hits: NotRequired[int]
    cache_misses: NotRequired[int]
    faults: NotRequired[int]  # seeded tool faults injected so far
    # TauRetail-v0
    policy_violations: NotRequired[int]
    policy_violations_by_rule: NotRequired[dict[str, int]]
    user_errors: NotRequired[int]  # user="llm": how many times the customer model failed
    user_error: NotRequired[str | None]  # user="llm": the latest failure's message


class ResetInfo(EnvInfo):
    """The ``info`` that ``reset`` returns."""

    # MockAPI-v0
    api_base_url: NotRequired[str]  # the episode's API on loopback
    fault_rate: NotRequired[float]  # the episode's fault rate


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
    written (:func:`agentgym.rollout.to_json_line`).
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
    """An episode a model played through :class:`agentgym.runner.RolloutRunner`
    (:attr:`agentgym.runner.Episode.record`): the episode record, ``policy`` always set (the
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
    """One sampled turn of a model episode (:attr:`agentgym.runner.Episode.turns`), in memory
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


class SegmentDict(TypedDict):
    """One :class:`agentgym.models.trajectory.Segment` in a :class:`TrajectoryDict`."""

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
    """A line of ``agentgym eval --out`` (:meth:`agentgym.runner.Episode.to_dict`): the model episode
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
    ``env.unwrapped.tasks``. Each environment's tasks add their own fields (the subclasses below);
    records and the rollout runner read only these."""

    task_id: str  # unique within the environment's task set
    split: NotRequired[str]  # "train", "val" or "test" (the env's split when absent)
    difficulty: NotRequired[str]  # "easy", "medium" or "hard"; evaluation breaks results down by it
    template: NotRequired[str]  # the generator's template the task came from


class RefundTask(TaskRecord):
    """A task of Refund-v0."""

    customer: dict[str, Any]  # the account: customer_id, name, email, zip, order_ids, payment_methods
    orders: list[dict[str, Any]]  # the customer's orders, with items, dates, status and past refunds
    opening: str  # the customer's first message
    facts: dict[str, Any]  # what the scripted customer answers when asked (email, zip, order, items, conditions)
    expected: dict[str, Any]  # the correct final state: outcome, refund, denials, confirmation
    outcomes: list[str]  # the policy cases the task exercises


class CodeExecTask(TaskRecord):
    """A task of CodeExec-v0, normalised from one of three formats: the bundled ``function`` tasks,
    HumanEval and MBPP (``tasks=PATH``)."""

    format: Literal["function", "humaneval", "mbpp"]
    prompt: str  # the user's message
    solution: str  # a reference solution (the oracle submits it)
    entry_point: NotRequired[str]  # function and humaneval: the function under test
    # function
    signature: NotRequired[str]
    examples: NotRequired[list[dict[str, Any]]]  # {"args": [...], "expected": ...}, shown in the prompt
    tests: NotRequired[list[dict[str, Any]]]  # the hidden tests, in the same form
    family: NotRequired[str]  # the generator's problem family
    # humaneval
    code_prompt: NotRequired[str]
    test: NotRequired[str]  # the dataset's check() source
    # mbpp
    asserts: NotRequired[list[str]]
    names: NotRequired[list[str]]  # the names the asserts call
    setup: NotRequired[str]
    reference: NotRequired[str]


class MockAPITask(TaskRecord):
    """A task of MockAPI-v0."""

    instruction: str  # the user's request
    params: dict[str, Any]  # the template's parameters
    expected: dict[str, Any]  # the changes the helpdesk must show: created, updated, deleted records
    min_calls: int  # API calls the shortest solution makes
    world_seed: int  # seeds the helpdesk's starting data


class KnowledgeTask(TaskRecord):
    """A question over the synthetic world (SQL-v0, SearchQA-v0, ToolMath-v0)."""

    question: str
    answer: dict[str, Any]  # the expected answer and how it is compared: type, value, tolerance, ...
    solution: dict[str, Any]  # how the oracle finds it (a query, documents, facts and an expression)


class SQLTask(KnowledgeTask):
    """A task of SQL-v0."""


class SearchQATask(KnowledgeTask):
    """A task of SearchQA-v0."""

    hops: int  # documents the answer chains through


class ToolMathTask(KnowledgeTask):
    """A task of ToolMath-v0."""

    hops: int  # facts the computation needs


class TauRetailTask(TaskRecord):
    """A task of TauRetail-v0: τ-bench's retail task, under agentgym's id and split."""

    upstream_split: str  # τ-bench's split: "train", "dev" or "test"
    task_index: int  # the task's index in τ-bench's split
    annotator: str
    user_id: str
    instruction: str  # the customer's situation and goal
    actions: list[dict[str, Any]]  # the ground-truth tool calls: {"name", "kwargs"}
    outputs: list[str]  # facts the agent must tell the customer
