"""The rollout settings, declared once: every option of a model rollout with its type, default,
bounds and help text.

Two dataclasses hold them. :class:`RolloutSettings` is how one episode is played (its budgets and
sampling); :class:`RolloutConfig` extends it with what to roll out (environment, tasks, groups,
seeds). Each field declares itself with :func:`setting`: its default, its help text and its
bounds (``min``, ``above``, ``max``, ``choices``) live in the field's metadata, and everything else
is derived from that declaration:

- validation: :func:`check_settings` (both classes' ``__post_init__``) reads the bounds;
- the command line: ``agentgym eval`` and ``agentgym rollout`` generate their flags from the fields
  (:func:`agentgym.cli._common.settings_arguments`), so a new setting is a new flag;
- the trainer's YAML ``rollout:`` section extends :class:`RolloutSettings`, and the trainer, the
  experiment and ``agentgym eval`` copy settings between classes by name (:func:`settings_of`).

A new setting is one field here; nothing else lists the fields. This module imports nothing heavy,
so the command line reads it when it builds its parsers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from agentgym.env import SPLITS
from agentgym.rollouts.chat import ToolMode

if TYPE_CHECKING:
    from agentgym.rollouts.chat import ChatRenderer

__all__ = ["NO_EXPLORATION", "RolloutConfig", "RolloutSettings", "ToolMode", "bound_problem", "check_settings", "setting", "settings_of"]


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    min: float | None = None,
    above: float | None = None,
    max: float | None = None,
    choices: Sequence[str] | None = None,
    unset: str | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A settings field: ``dataclasses.field`` with its help text and bounds in the metadata.

    Args:
        default: the default value (or ``default_factory``).
        help: what the setting does, as the command line's ``--help`` says it (the default is appended).
        min: the least value allowed.
        above: values must be greater than this.
        max: the greatest value allowed.
        choices: the values allowed.
        unset: what a ``None`` value means, for help texts (``"the environment's"``).
        default_factory: makes the default (mutable defaults).
    """
    metadata = {"help": help, "min": min, "above": above, "max": max, "choices": tuple(choices) if choices else None, "unset": unset}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def bound_problem(bounds: Mapping[str, Any], value: Any) -> str | None:
    """What is wrong with ``value`` by ``bounds`` (a settings field's metadata, or part of it);
    ``None``: nothing, or no value."""
    if value is None:
        return None
    choices, low, above, high = bounds.get("choices"), bounds.get("min"), bounds.get("above"), bounds.get("max")
    if choices and value not in choices:
        return f"must be {', '.join(map(repr, choices[:-1]))} or {choices[-1]!r}; got {value!r}"
    if above is not None and high is not None and not above < value <= high:
        return f"must be in ({above:g}, {high:g}]; got {value}"
    if low is not None and not value >= low:
        return f"must be at least {low}; got {value}"
    if above is not None and not value > above:
        return f"must be above {above}; got {value}"
    if high is not None and not value <= high:
        return f"must be at most {high}; got {value}"
    return None


def check_settings(settings: Any) -> None:
    """Check every field of a settings dataclass against its declared bounds, in field order.

    Raises:
        ValueError: ``"<field> <what is wrong>"`` for the first field out of its bounds.
    """
    for field in dataclasses.fields(settings):
        problem = bound_problem(field.metadata, getattr(settings, field.name))
        if problem:
            raise ValueError(f"{field.name} {problem}")


def settings_of(source: Any, cls: Any = None) -> dict[str, Any]:
    """Every field of the settings class ``cls`` (default :class:`RolloutSettings`) that ``source``
    has, by name: how settings travel between classes (a YAML section, parsed command-line
    arguments, a configuration) without a list of fields to keep up to date."""
    return {field.name: getattr(source, field.name) for field in dataclasses.fields(cls or RolloutSettings) if hasattr(source, field.name)}


NO_EXPLORATION: Mapping[str, Any] = {"error_temperature": None, "error_temperature_tokens": None, "error_temperature_offset": 0, "error_tool_exploration": 0.0}
"""The settings that turn the exploration after errors off (evaluations sample every turn alike)."""


@dataclass(frozen=True, kw_only=True)
class RolloutSettings:
    """How a policy plays an episode: the budgets and the sampling.

    Attributes:
        max_turns: assistant turns before the environment truncates the episode (None: the
            environment's default).
        max_new_tokens: tokens one assistant turn may sample.
        max_total_tokens: token budget of the whole trajectory, prompt included. A turn samples at
            most what still fits, keeping one token free for a closing end-of-turn token; when the
            environment's reply leaves no room for another turn, the episode stops with
            ``"token_budget"`` and its trajectory ends after its last sampled turn, so it never
            exceeds the budget (unless the opening prompt alone does). None: no budget.
        temperature: sampling temperature; 0 decodes greedily.
        error_temperature: sampling temperature of a turn that follows a failed tool call (the
            previous step counted ``info["turn_tool_errors"]``: a tool error or a seeded fault); ``None``
            (the default): ``temperature``. An exploration aid for training: a decision the model
            almost never gets right after an error (retrying a transient fault, say) is sampled
            from a flatter distribution there, and only there. The loss still scores every token
            at ``temperature``.
        error_temperature_tokens: how many tokens of that turn take ``error_temperature``, from
            its ``error_temperature_offset``-th on; the rest take ``temperature`` (``None``, the
            default: the whole turn). The decision after an error (retry, or give up) is made in a
            known place of a call (for SmolLM2 on SQL-v0, its 10th token: the first argument's
            name); a whole turn at a high temperature also garbles the call around it. Needs the
            ``hf`` backend.
        error_temperature_offset: tokens of that turn sampled at ``temperature`` before the
            ``error_temperature_tokens`` (0: from the first).
        error_tool_exploration: probability that a turn following a failed tool call opens with a
            call to a tool drawn uniformly from the environment's tools, written by the runner up
            to the tool's first argument name (in :func:`agentgym.parsing.format_tool_call`'s
            format); the model writes the rest. An exploration aid for training, for a decision
            too rare to sample at any temperature (a converged SFT model that never retries a
            failed call). The given tokens count as the model's in the loss, scored as if the
            model had sampled them: a biased estimate on purpose (an importance weight would
            scale their gradient by the probability the model gives them, about 0). Seeded by
            the turn's seed; 0 (the default) never. Hot tokens of ``error_temperature_tokens``
            count from the first token after the given ones.
        top_p: nucleus mass in (0, 1].
        template_kwargs: extra chat-template variables (e.g. ``{"enable_thinking": False}``).
        tool_mode: how tools are shown to the model (see :class:`agentgym.rollouts.chat.ChatRenderer`).
    """

    max_turns: int | None = setting(None, help="assistant turns per episode", min=1, unset="the environment's")
    max_new_tokens: int = setting(256, help="tokens sampled per turn at most", min=1)
    max_total_tokens: int | None = setting(None, help="token budget of a whole trajectory, prompt included", min=2, unset="no budget")
    temperature: float = setting(1.0, help="sampling temperature, 0 = greedy", min=0)
    error_temperature: float | None = setting(
        None, help="sampling temperature of a turn that follows a failed tool call (exploration for training)", above=0, unset="the temperature"
    )
    error_temperature_tokens: int | None = setting(
        None, help="tokens of that turn sampled at the error temperature (from the offset on), the rest at the temperature", min=1, unset="the whole turn"
    )
    error_temperature_offset: int = setting(0, help="tokens of that turn sampled at the temperature before the error temperature's", min=0)
    error_tool_exploration: float = setting(
        0.0, help="probability that a turn following a failed tool call opens with a call to a random tool (exploration for training)", min=0, max=1
    )
    top_p: float = setting(1.0, help="nucleus sampling mass in (0, 1]", above=0, max=1)
    template_kwargs: Mapping[str, Any] = setting(help='extra chat-template variables, e.g. {"enable_thinking": false}', default_factory=dict)
    tool_mode: ToolMode = setting("auto", help="how tools are shown to the model", choices=get_args(ToolMode))

    def __post_init__(self) -> None:
        check_settings(self)
        if self.error_temperature_tokens is not None and self.error_temperature is None:
            raise ValueError("error_temperature_tokens needs error_temperature (the temperature of those tokens)")
        if self.error_temperature_offset and self.error_temperature_tokens is None:
            raise ValueError("error_temperature_offset needs error_temperature_tokens (how many tokens follow it)")

    def renderer(self, tokenizer: Any, tools: Sequence[Mapping[str, Any]]) -> ChatRenderer:
        """The chat renderer these settings describe, for ``tokenizer`` and an environment's tools."""
        from agentgym.rollouts.chat import ChatRenderer

        return ChatRenderer(tokenizer, tools=tools, tool_mode=self.tool_mode, template_kwargs=self.template_kwargs)


@dataclass(frozen=True)
class RolloutConfig(RolloutSettings):
    """What to roll out; how each episode is played comes from :class:`RolloutSettings`.

    The settings' fields (``max_turns``, ``max_new_tokens``, ``max_total_tokens``, ``temperature``,
    ``error_temperature``, ``top_p``, ``template_kwargs``, ``tool_mode``) are keyword-only here.

    Attributes:
        env_id: a registered environment id, e.g. ``"agentgym/Refund-v0"``.
        split: task split the environments draw from.
        task_ids: the tasks, one group each, in this order; default: ``num_tasks`` tasks in an order
            shuffled by ``seed`` (every task once before any repeats).
        num_tasks: number of groups when ``task_ids`` is not given.
        group_size: episodes per task (GRPO groups); members differ only in their sampling seeds.
        seed: base seed. Group ``g`` resets its environments with ``seed + g``; turn ``t`` of episode
            ``e`` samples with :func:`agentgym.rollouts.episode.turn_seed` ``(seed, e, t)``.
        distinct_env_seeds: give every episode of a group its own environment seed (derived from
            ``seed``, the group and the member) instead of the group's shared one. It matters for
            environments with randomness of their own (seeded faults, simulated users): shared, the
            members of a group meet the same faults and differ only by what the policy does.
        env_kwargs: extra keyword arguments for ``gym.make`` (``split`` and ``max_turns`` have their
            own fields).
        env_workers: threads stepping environments in parallel.
        max_concurrent: episodes in flight at once (None: all of them). ``1`` plays the episodes one
            at a time with the same seeds.
        overlap_env: keep generating while environments step (see :mod:`agentgym.rollouts.runner`).
    """

    env_id: str
    split: str = setting("train", help="task split", choices=SPLITS)
    task_ids: Sequence[str] | None = setting(None, help="these tasks, one group each")
    num_tasks: int = setting(8, help="tasks (groups) drawn when task_ids is not given", min=1)
    group_size: int = setting(1, help="episodes per task", min=1)
    seed: int = setting(0, help="base seed", min=0)
    env_kwargs: Mapping[str, Any] = setting(help="extra keyword arguments for gym.make, as a JSON object", default_factory=dict)
    env_workers: int = setting(8, help="threads stepping environments in parallel", min=1)
    max_concurrent: int | None = setting(None, help="episodes in flight at once", min=1, unset="all of them")
    overlap_env: bool = setting(False, help="keep generating while environments step")
    distinct_env_seeds: bool = setting(False, help="every episode of a group gets its own environment seed")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task_ids is not None:
            if isinstance(self.task_ids, str) or not self.task_ids:
                raise ValueError("task_ids must be a non-empty sequence of task id strings")
            object.__setattr__(self, "task_ids", tuple(self.task_ids))
        clashing = sorted({"split", "max_turns"} & set(self.env_kwargs))
        if clashing:
            raise ValueError(f"pass {', '.join(clashing)} as RolloutConfig fields, not in env_kwargs")

    @property
    def num_groups(self) -> int:
        """Number of task groups."""
        return len(self.task_ids) if self.task_ids is not None else self.num_tasks

    @property
    def num_episodes(self) -> int:
        """Total number of episodes: groups × group size."""
        return self.num_groups * self.group_size
