"""One model-driven episode as token ids: the single episode driver of agentgym.

Every caller that lets a model play an environment goes through :class:`TokenEpisode`: the
rollout runner (and so ``agentgym eval`` and the trainer) and the verl, OpenRLHF and TRL adapters.
It alternates three phases,

1. **generate** — the caller samples a turn from :attr:`TokenEpisode.token_ids` with at most
   :meth:`TokenEpisode.room` new tokens, then hands the ids back with :meth:`add_generation`
   (kept verbatim, loss mask 1);
2. **step** — :meth:`step_env` lets the environment read the turn (it needs no tokenizer, so
   async trainers run it in a worker thread);
3. **observe** — :meth:`add_observation` appends the environment's messages and the next
   generation prompt as a masked token delta,

until the environment ends the episode or the token budget does. Then :meth:`trajectory`
(token-exact, with its loss mask) and :meth:`outcome` (reward and counts) describe it.

An exception while the environment steps or while its reply is tokenized ends that episode alone
(``stop_reason == "error"``, reward 0, the message in :attr:`TokenEpisode.error`): in a batch of
thousands of model outputs, one that breaks an environment must not take the batch down. An
:class:`~agentgym.tools.InfraError` (the machinery behind the environment failed) ends it the same
way with ``stop_reason == "infra_error"``: a reward 0 that is not the model's, which consumers drop.

How an episode is played — its budgets and sampling — is one :class:`RolloutSettings`
(declared in :mod:`agentgym.rollouts.settings`), which the runner's configuration, the trainer's YAML
``rollout`` section, ``agentgym eval``'s flags and the adapters all derive from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import gymnasium as gym
import numpy as np

from agentgym.env import agent_env
from agentgym.models.backend import Generation, SamplingParams, decode_visible
from agentgym.parsing import parse_action
from agentgym.records import ChatMessage, StepError, StepInfo, StopReason, TurnRecord
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.settings import RolloutSettings
from agentgym.rollouts.trajectory import Trajectory, TrajectoryBuilder
from agentgym.seeding import derive_seed
from agentgym.tools import InfraError

__all__ = ["EpisodeOutcome", "EpisodeTokens", "RolloutSettings", "StopReason", "TokenEpisode", "episode_outcome", "failed_a_call", "turn_seed"]

_TOOL_EXPLORATION_STREAM = 1  # derive_seed's name for the draws of error_tool_exploration, beside a turn's seed


def turn_seed(seed: int, episode: int, turn: int) -> int:
    """Sampling seed of ``turn`` of ``episode``: independent streams per episode and turn, stable across runs."""
    return derive_seed(seed, episode, turn, bits=32)


def failed_a_call(turn: TurnRecord) -> bool:
    """Whether the turn's step had a failed tool call (its ``info["turn_tool_errors"]`` above 0: a
    tool error or a seeded fault)."""
    info = cast(Mapping[str, Any], turn["info"])  # a StepInfo, or a StepError without the count
    return int(info.get("turn_tool_errors", 0)) > 0


@dataclass(frozen=True)
class EpisodeOutcome:
    """How an episode ended, in JSON-scalar fields (trainers log them and carry them through Ray).

    Attributes:
        reward: the episode's reward.
        success: the environment's success verdict.
        reason: the reward's explanation.
        turns: assistant turns played.
        terminated: the environment reached its end state.
        truncated: the episode was cut (``max_turns`` or the token budget).
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

    An episode that is still running (its driver stopped it) is scored like one cut by
    ``max_turns``: the environment's reward for the state it reached.
    """
    base = agent_env(env)
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
    """Plays one episode of ``env`` for a token-in/token-out generation engine.

    Per turn: sample from :attr:`token_ids` (at most :meth:`room` tokens; :meth:`sampling_params`
    builds the request), then :meth:`play_turn` with the sampled ids, or its three phases
    :meth:`add_generation`, :meth:`step_env` and :meth:`add_observation`; repeat while
    :attr:`wants_generation`. Every turn is recorded in :attr:`turns`.

    Args:
        env: the environment, already reset to the episode (its opening messages are ``opening``).
        opening: the opening messages ``reset`` returned.
        renderer: the chat renderer for the policy's tokenizer and the environment's tools
            (:meth:`RolloutSettings.renderer`; build it once and share it between episodes).
        settings: budgets and sampling.
    """

    def __init__(self, env: gym.Env, opening: Sequence[ChatMessage], renderer: ChatRenderer, settings: RolloutSettings) -> None:
        self.env = env
        self.opening = [m.copy() for m in opening]
        self.renderer = renderer
        self.settings = settings
        self.max_total_tokens = settings.max_total_tokens
        self._builder = TrajectoryBuilder(renderer, opening)
        self.prompt_length = len(self._builder)
        self.turns: list[TurnRecord] = []
        self.stop_reason: StopReason | None = None
        self.error: str | None = None
        self._final: Trajectory | None = None
        self._seed: int | None = None  # the next turn's sampling seed (sampling_params())
        self._sampled: tuple[tuple[int, ...], Generation] | None = None  # the turn added, waiting for step_env(): its prompt and generation
        self.opening_ids: tuple[int, ...] = ()  # the next turn's given opening (sampling_params())
        self._phase = "generate"  # generate -> step -> observe -> generate ...; "over" at the end
        if self.room() < 1:
            self._end("token_budget")

    def cap_response(self, tokens: int) -> None:
        """Budget ``tokens`` after the prompt: ``max_total_tokens`` becomes prompt length + ``tokens``.

        For frameworks that think in response lengths (verl's ``response_length``, TRL's
        ``max_completion_length``). Call it before the first turn.
        """
        if tokens < 1:
            raise ValueError(f"the response budget must be at least 1 token, got {tokens}")
        if self.turns:
            raise RuntimeError("cap_response() must come before the first turn")
        self.max_total_tokens = self.prompt_length + tokens
        if self.room() < 1:
            self._end("token_budget")

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
    def wants_generation(self) -> bool:
        """True while the episode waits for the model's next turn."""
        return self._phase == "generate"

    @property
    def over(self) -> bool:
        """True once the episode has ended (see :attr:`stop_reason`)."""
        return self._phase == "over"

    def room(self) -> int:
        """Tokens the next turn may sample: ``max_new_tokens``, less when the budget is nearly spent."""
        if self.max_total_tokens is None:
            return self.settings.max_new_tokens
        return min(self.settings.max_new_tokens, self.max_total_tokens - len(self._builder) - 1)

    def sampling_params(self, seed: int) -> SamplingParams:
        """The request for the next turn: the settings' sampling, :meth:`room` tokens, ending at end of turn.

        Right after a step with a failed tool call, ``error_temperature`` replaces ``temperature``:
        for the whole turn, or for ``error_temperature_tokens`` of its tokens from the
        ``error_temperature_offset``-th on. There too, with probability ``error_tool_exploration``,
        the turn opens with a call to a random tool: :attr:`opening_ids` are then the tokens the
        turn begins with, given rather than sampled. The caller samples the rest from
        ``token_ids`` + ``opening_ids`` and passes :meth:`add_generation` both, the opening first.
        """
        self._expect("generate")
        self._seed = seed
        settings = self.settings
        after_error = self.after_error()
        self.opening_ids = self._explored_opening(seed) if after_error else ()
        params = SamplingParams(
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=self.room() - len(self.opening_ids),
            seed=seed,
            stop_token_ids=(self.renderer.eot_token_id,),
        )
        if settings.error_temperature is None or not after_error:
            return params
        if settings.error_temperature_tokens is None:
            return replace(params, temperature=settings.error_temperature)
        return replace(
            params, hot_tokens=settings.error_temperature_tokens, hot_offset=settings.error_temperature_offset, hot_temperature=settings.error_temperature
        )

    def _explored_opening(self, seed: int) -> tuple[int, ...]:
        """The opening of a call to a tool drawn uniformly, with probability ``error_tool_exploration``
        (seeded by the turn's ``seed``); none when it leaves the turn no token to sample."""
        if not self.settings.error_tool_exploration:
            return ()
        draw = np.random.default_rng(derive_seed(seed, _TOOL_EXPLORATION_STREAM))
        if draw.random() >= self.settings.error_tool_exploration:
            return ()
        openings = self.renderer.call_openings
        opening = openings[int(draw.integers(len(openings)))] if openings else ()
        return opening if len(opening) < self.room() else ()

    def after_error(self) -> bool:
        """Whether the last step had a failed tool call (:func:`failed_a_call`)."""
        return bool(self.turns) and failed_a_call(self.turns[-1])

    # -- playing ----------------------------------------------------------------------------

    def play_turn(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Take one sampled turn, step the environment on it and extend the sequence; returns the turn's text."""
        content = self.add_generation(token_ids, logprobs)
        observation = self.step_env(content)
        if observation is not None:
            self.add_observation(observation)
        return content

    def add_generation(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Phase 1: append a sampled turn; returns its text (special tokens kept) for :meth:`step_env`.

        Args:
            token_ids: the sampled ids, verbatim (end-of-turn token included when sampled).
            logprobs: their sampling logprobs; ``None`` when the engine did not report them.
        """
        self._expect("generate")
        ids = tuple(int(t) for t in token_ids)
        if not ids:
            raise ValueError("the generation has no tokens")
        if ids[: len(self.opening_ids)] != self.opening_ids:
            raise ValueError(f"the turn must begin with its opening_ids {list(self.opening_ids)} (see sampling_params())")
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
        generation = Generation(
            token_ids=ids,
            logprobs=tuple(float(x) for x in logprobs) if logprobs is not None else (0.0,) * len(ids),
            text=decode_visible(self.renderer.tokenizer, ids),
            finish_reason="stop" if ids[-1] == self.renderer.eot_token_id else "length",
        )
        prompt = tuple(self._builder.token_ids)
        # The environment reads the turn with special tokens kept: tool-call markers such as
        # <tool_call> are special tokens in many vocabularies.
        content = self._builder.add_generation(generation)
        self._sampled = (prompt, generation)
        self._phase = "step"
        return content

    def step_env(self, content: str) -> list[ChatMessage] | None:
        """Phase 2: step the environment on the turn; the new messages, or ``None`` when the episode ended.

        The environment always reads the turn, even one that spent the budget (it may end the episode).
        """
        self._expect("step")
        parsed = parse_action(content, id_prefix=f"call_{len(self.turns) + 1}")  # the ids the environment gives
        info: StepInfo | StepError
        try:
            observation, reward, terminated, truncated, step_info = self.env.step(content)
            info = cast(StepInfo, step_info)  # gymnasium types info as a plain dict; an agentgym env's is a StepInfo
        except Exception as exc:  # noqa: BLE001 - isolated to this episode and recorded (see the module docstring)
            message = f"the environment failed on turn {len(self.turns) + 1}: {type(exc).__name__}: {exc}"
            self._fail(message, "infra_error" if isinstance(exc, InfraError) else "error")
            observation, reward, terminated, truncated, info = [], 0.0, False, True, {"error": message}
        assert self._sampled is not None
        prompt, generation = self._sampled
        record: TurnRecord = {
            "turn": len(self.turns),
            "seed": self._seed,
            "prompt_ids": prompt,
            "sampled_ids": generation.token_ids,
            "logprobs": generation.logprobs,
            "finish_reason": generation.finish_reason,
            "text": generation.text,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in parsed.tool_calls],
            "parse_errors": list(parsed.errors),
            "env_messages": observation,
            "env_message_ids": (),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": info,
        }
        if self.opening_ids:
            record["opening_tokens"] = len(self.opening_ids)
        self.turns.append(record)
        self._seed, self._sampled, self.opening_ids = None, None, ()
        if self.error is not None:
            return None
        if terminated or truncated:
            self._end("done" if terminated else "max_turns")
            return None
        self._phase = "observe"
        return observation

    def add_observation(self, observation: Sequence[ChatMessage]) -> None:
        """Phase 3: append the environment's messages and the next generation prompt.

        When that leaves no room for another turn, the reply is dropped and the episode stops with
        ``"token_budget"``: the trajectory ends after the last sampled turn.
        """
        self._expect("observe")
        before = self._builder.build() if self.max_total_tokens is not None else None
        try:
            self._builder.add_messages(observation)
        except Exception as exc:  # noqa: BLE001 - e.g. a reply the tokenizer cannot encode; the builder is left unchanged
            self._fail(f"the environment's reply could not be tokenized: {type(exc).__name__}: {exc}")
            return
        if self.room() < 1:
            self._end("token_budget", before)
            return
        self.turns[-1]["env_message_ids"] = self._builder.build().segments[-1].token_ids
        self._phase = "generate"

    def stop(self) -> None:
        """End the episode before the environment does (the caller's budget is spent)."""
        if self._phase == "observe":
            self._end("token_budget", self._builder.build())
        elif self._phase != "over":
            self._end("token_budget")

    def _fail(self, message: str, reason: StopReason = "error") -> None:
        """End the episode on an error; the trajectory stops after the last sampled turn."""
        self.error = message
        self._end(reason)

    def _end(self, reason: StopReason, trajectory: Trajectory | None = None) -> None:
        self._phase, self.stop_reason = "over", reason
        self._final = trajectory if trajectory is not None else self._builder.build()

    def _expect(self, phase: str) -> None:
        if self._phase != phase:
            expected = {"generate": "add_generation()", "step": "step_env()", "observe": "add_observation()", "over": "nothing (the episode is over)"}
            raise RuntimeError(f"the episode expects {expected[self._phase]} next")

    # -- results ----------------------------------------------------------------------------

    @property
    def stopped_by_budget(self) -> bool:
        """True when the token budget ended the episode before the environment did."""
        return self.stop_reason == "token_budget"

    def trajectory(self) -> Trajectory:
        """The token sequence and its loss mask (1 exactly on sampled tokens)."""
        return self._final if self._final is not None else self._builder.build()

    def split(self) -> EpisodeTokens:
        """The sequence as prompt and response (trainers that take the two apart)."""
        trajectory = self.trajectory()
        cut = trajectory.prompt_length
        return EpisodeTokens(
            prompt_ids=list(trajectory.token_ids[:cut]),
            response_ids=list(trajectory.token_ids[cut:]),
            response_mask=list(trajectory.loss_mask[cut:]),
            response_logprobs=list(trajectory.logprobs[cut:]),
        )

    def last_env_delta(self) -> tuple[int, ...]:
        """Token ids of the last environment delta (messages and next generation prompt)."""
        segment = self._builder.build().segments[-1]
        if segment.kind != "env":
            raise RuntimeError("the sequence does not end with an environment delta")
        return segment.token_ids

    def messages(self) -> list[ChatMessage]:
        """The conversation as this driver saw it: the opening, then each turn's text and the
        environment's answer (what the record holds, for when the environment is out of reach)."""
        messages = [m.copy() for m in self.opening]
        for turn in self.turns:
            messages.append({"role": "assistant", "content": turn["text"]})
            messages.extend(m.copy() for m in turn["env_messages"])
        return messages

    def outcome(self) -> EpisodeOutcome:
        """Reward and counts (an episode cut by the budget is scored on the state it reached; one
        that failed scores 0)."""
        if self.error is not None:
            counts = agent_env(self.env).counts
            return EpisodeOutcome(
                reward=0.0,
                success=False,
                reason=self.error,
                turns=len(self.turns),
                terminated=False,
                truncated=True,
                format_errors=int(counts["format_errors"]),
                tool_errors=int(counts["tool_errors"]),
            )
        return episode_outcome(self.env)
