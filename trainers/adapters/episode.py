"""One agentgym episode as a trainer's rollout sees it: token ids in, token ids and a loss mask out.

Every adapter needs the same three things from an episode: the prompt token ids to generate
from, a way to hand back the sampled ids (the environment then steps on the decoded turn and the
next prompt grows by the environment's messages), and at the end the token sequence with a mask
that is 1 exactly on sampled tokens, plus the reward. :class:`TokenEpisode` does that on top of
:mod:`agentgym.models` (the chat template rendering and the trajectory builder live there, once).

Episodes can also end early because the trainer's token budget is spent. They are then scored the
way the environment scores an episode that hits ``max_turns``: the reward of the state reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from agentgym.models.backend import Generation, decode_visible
from agentgym.models.chat import ChatRenderer, ToolMode
from agentgym.models.trajectory import Trajectory, TrajectoryBuilder

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["EpisodeOutcome", "EpisodeTokens", "TokenEpisode", "episode_outcome"]


@dataclass(frozen=True)
class EpisodeOutcome:
    """How an episode ended, in JSON-scalar fields (trainers log them and carry them through Ray).

    Attributes:
        reward: the episode's reward.
        success: the environment's success verdict.
        reason: the reward's explanation.
        turns: assistant turns played.
        terminated: the environment reached its end state.
        truncated: the episode was cut (``max_turns`` or the trainer's token budget).
        format_errors: malformed tool calls over the episode.
        tool_errors: tool calls that returned an error.
    """

    reward: float
    success: bool
    reason: str
    turns: int
    terminated: bool
    truncated: bool
    format_errors: int
    tool_errors: int

    def metrics(self, prefix: str = "agentgym_") -> dict[str, float]:
        """The numeric fields as floats, keys prefixed (for trainers' metric logs)."""
        return {
            f"{prefix}reward": float(self.reward),
            f"{prefix}success": float(self.success),
            f"{prefix}turns": float(self.turns),
            f"{prefix}truncated": float(self.truncated),
            f"{prefix}format_errors": float(self.format_errors),
            f"{prefix}tool_errors": float(self.tool_errors),
        }


@dataclass(frozen=True)
class EpisodeTokens:
    """An episode's tokens as trainers take them: the prompt, then everything after it.

    Attributes:
        prompt_ids: the opening prompt (tools included), ending with the generation prompt.
        response_ids: sampled turns and environment replies, in order.
        response_mask: 1 exactly on the sampled tokens of ``response_ids``.
        response_logprobs: sampling logprobs on sampled tokens, 0.0 elsewhere.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]


def episode_outcome(env: gym.Env) -> EpisodeOutcome:
    """The outcome of ``env``'s current episode.

    An episode that is still running (the trainer stopped it) is scored like one cut by
    ``max_turns``: the environment's reward for the state it reached.
    """
    base = env.unwrapped
    record = base.episode_record()
    over = bool(record["terminated"] or record["truncated"])
    if over:
        reward, success, reason = float(record["reward"]), bool(record["success"]), str(record["reward_reason"])
    else:
        result = base.compute_reward()
        reward, success, reason = float(result.score), bool(result.passed), f"stopped before the episode ended: {result.reason}"
    counts = base.counts
    return EpisodeOutcome(
        reward=reward,
        success=success,
        reason=reason,
        turns=int(record["turns"]),
        terminated=bool(record["terminated"]),
        truncated=not record["terminated"],
        format_errors=int(counts["format_errors"]),
        tool_errors=int(counts["tool_errors"]),
    )


class TokenEpisode:
    """Plays one episode in ``env`` for a token-in/token-out generation engine.

    Per turn: generate from :attr:`token_ids`, then :meth:`play_turn` with the sampled ids; repeat
    while :attr:`wants_generation`; then read :meth:`trajectory` and :meth:`outcome`. Async
    trainers that step the environment off their event loop call the three phases of
    :meth:`play_turn` themselves: :meth:`add_generation` and :meth:`add_observation` use the
    tokenizer, :meth:`step_env` only the environment (safe in a worker thread).

    Args:
        env: the environment, already reset to the episode (its opening messages are ``opening``).
        opening: the opening messages ``reset`` returned.
        tokenizer: the policy's tokenizer (its chat template renders the conversation).
        max_response_tokens: budget for everything after the prompt (sampled and environment
            tokens); the episode stops once it is spent. ``None``: no budget.
        tool_mode: how tools are shown to the model (see :class:`agentgym.models.chat.ChatRenderer`).
        template_kwargs: extra chat-template variables, e.g. ``{"enable_thinking": False}``.
    """

    def __init__(
        self,
        env: gym.Env,
        opening: Sequence[Mapping[str, Any]],
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_response_tokens: int | None = None,
        tool_mode: ToolMode = "auto",
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if max_response_tokens is not None and max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be at least 1, got {max_response_tokens}")
        self.env = env
        self.renderer = ChatRenderer(tokenizer, tools=env.unwrapped.tools, tool_mode=tool_mode, template_kwargs=template_kwargs)
        self._builder = TrajectoryBuilder(self.renderer, opening)
        self.prompt_length = len(self._builder)
        self.max_response_tokens = max_response_tokens
        self._phase = "generate"  # generate -> step -> observe -> generate ...; "over" at the end
        self._stopped = False

    # -- state ------------------------------------------------------------------------------

    @property
    def token_ids(self) -> list[int]:
        """The sequence so far (the prompt of the next generation while one is wanted)."""
        return self._builder.token_ids

    @property
    def response_length(self) -> int:
        """Tokens after the prompt: sampled turns and environment messages."""
        return len(self._builder) - self.prompt_length

    @property
    def budget_left(self) -> int | None:
        """Tokens the budget still allows (``None`` without a budget)."""
        return None if self.max_response_tokens is None else max(self.max_response_tokens - self.response_length, 0)

    @property
    def wants_generation(self) -> bool:
        """True while the episode waits for the model's next turn."""
        return self._phase == "generate"

    @property
    def stopped_by_budget(self) -> bool:
        """True when the token budget ended the episode before the environment did."""
        return self._stopped

    # -- playing ----------------------------------------------------------------------------

    def play_turn(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Take one sampled turn, step the environment on it and extend the sequence.

        Args:
            token_ids: the sampled ids, verbatim (end-of-turn token included when sampled).
            logprobs: their sampling logprobs; ``None`` when the engine did not report them.

        Returns:
            The turn's text as the environment read it.
        """
        content = self.add_generation(token_ids, logprobs)
        observation = self.step_env(content)
        if observation is not None:
            self.add_observation(observation)
        return content

    def add_generation(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Phase 1: append a sampled turn; returns its text for :meth:`step_env`."""
        self._expect("generate")
        ids = tuple(int(t) for t in token_ids)
        if not ids:
            raise ValueError("the generation has no tokens")
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
        generation = Generation(
            token_ids=ids,
            logprobs=tuple(float(x) for x in logprobs) if logprobs is not None else (0.0,) * len(ids),
            text=decode_visible(self.renderer.tokenizer, ids),
            finish_reason="stop" if ids[-1] == self.renderer.eot_token_id else "length",
        )
        # The environment reads the turn with special tokens kept: tool-call markers such as
        # <tool_call> are special tokens in many vocabularies.
        content = self._builder.add_generation(generation)
        self._phase = "step"
        return content

    def step_env(self, content: str) -> list[dict[str, Any]] | None:
        """Phase 2: step the environment on the turn; the new messages, or ``None`` when the episode ended.

        The environment always reads the turn (even one that spent the budget: it may end the
        episode); its reply is dropped when no budget is left to show it.
        """
        self._expect("step")
        observation, _, terminated, truncated, _ = self.env.step(content)
        if terminated or truncated:
            self._phase = "over"
            return None
        if self.budget_left == 0:
            self._phase, self._stopped = "over", True
            return None
        self._phase = "observe"
        return observation

    def add_observation(self, observation: Sequence[Mapping[str, Any]]) -> None:
        """Phase 3: append the environment's messages and the next generation prompt."""
        self._expect("observe")
        self._builder.add_messages(observation)
        if self.budget_left == 0:
            self._phase, self._stopped = "over", True
        else:
            self._phase = "generate"

    def stop(self) -> None:
        """End the episode before the environment does (the trainer's budget is spent)."""
        if self._phase != "over":
            self._phase, self._stopped = "over", True

    def _expect(self, phase: str) -> None:
        if self._phase != phase:
            expected = {"generate": "add_generation()", "step": "step_env()", "observe": "add_observation()", "over": "nothing (the episode is over)"}
            raise RuntimeError(f"the episode expects {expected[self._phase]} next")

    # -- results ----------------------------------------------------------------------------

    def trajectory(self) -> Trajectory:
        """The token sequence and its loss mask (1 exactly on sampled tokens)."""
        return self._builder.build()

    def split(self) -> EpisodeTokens:
        """The sequence as prompt and response, the response cut to the budget.

        The last environment reply can overshoot the budget (and a turn cut by the budget gets a
        closing end-of-turn token); trainers need responses of at most the budget.
        """
        trajectory = self._builder.build()
        cut = trajectory.prompt_length
        end = None if self.max_response_tokens is None else cut + self.max_response_tokens
        return EpisodeTokens(
            prompt_ids=list(trajectory.token_ids[:cut]),
            response_ids=list(trajectory.token_ids[cut:end]),
            response_mask=list(trajectory.loss_mask[cut:end]),
            response_logprobs=list(trajectory.logprobs[cut:end]),
        )

    def last_env_delta(self) -> tuple[int, ...]:
        """Token ids of the last environment delta (messages and next generation prompt)."""
        segment = self._builder.build().segments[-1]
        if segment.kind != "env":
            raise RuntimeError("the sequence does not end with an environment delta")
        return segment.token_ids

    def outcome(self) -> EpisodeOutcome:
        """Reward and counts (an episode cut by the budget is scored on the state it reached)."""
        return episode_outcome(self.env)
