"""Token-exact recording of an episode that a harness plays through chat-completions requests.

A harness resends the whole conversation with every request. :class:`RecordedEpisode` never
re-tokenises it: the first request's messages become the prompt, and each later request must
extend the conversation already recorded by the assistant message the proxy returned (one of its
choices) and new messages (tool results, the user's reply). Those new messages alone are rendered,
as a masked delta after the sampled ids kept verbatim, by the same
:class:`~agentgym.models.TrajectoryBuilder` the rollout runner uses, so the loss mask is the
runner's: 1 exactly on sampled tokens. A request that rewrites the recorded conversation is
refused (:class:`ConversationMismatch`) rather than recorded inexactly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agentgym.models.backend import Generation
from agentgym.parsing import parse_action
from agentgym.records import ChatMessage, ModelEpisodeRecord, StepInfo, StopReason, TurnRecord
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.trajectory import Trajectory, TrajectoryBuilder

__all__ = ["Choice", "ConversationMismatch", "RecordedEpisode", "RecordedRequest", "normalize_message"]


class ConversationMismatch(ValueError):
    """A request does not extend the conversation recorded for its episode."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the model saw it.

    Attributes:
        turn: the episode's turn it sampled (0-based).
        prompt_ids: the exact prompt token ids.
        seeds: each choice's sampling seed.
        choices: each choice's sampled ids, logprobs, text and finish reason.
    """

    turn: int
    prompt_ids: tuple[int, ...]
    seeds: tuple[int, ...]
    choices: tuple[Generation, ...]


@dataclass
class Choice:
    """One sampled choice waiting to be taken: the sequence it would continue, and what the harness saw."""

    builder: TrajectoryBuilder
    generation: Generation
    content: str  # the turn's text as the environment would read it (special tokens kept)
    message: dict[str, Any]  # the OpenAI assistant message returned for it


def normalize_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message reduced to what decides its rendering: role, text, tool calls (name and
    parsed arguments), tool-call id. Two messages that normalise equally render equally."""
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text, in order
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    out: dict[str, Any] = {"role": role, "content": content if isinstance(content, str) else ""}
    if role == "tool":
        out["tool_call_id"] = message.get("tool_call_id")
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [_normalize_call(c) for c in calls]
    return out


def _normalize_call(call: Mapping[str, Any]) -> tuple[Any, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return (function.get("name"), arguments)


def chat_message(message: Mapping[str, Any]) -> ChatMessage:
    """A harness's message as the chat template takes it (string content; a tool message keeps its id)."""
    normalized = normalize_message(message)
    out: dict[str, Any] = {"role": normalized["role"], "content": normalized["content"]}
    if normalized["role"] == "tool":
        out["tool_call_id"] = normalized["tool_call_id"] or ""
        if isinstance(message.get("name"), str):
            out["name"] = message["name"]
    return cast(ChatMessage, out)


class RecordedEpisode:
    """One episode id's token sequence, extended request by request.

    Args:
        episode_id: the harness's episode id.
        renderer: the renderer for the model's tokenizer and the request's tools.
        opening: the first request's messages.
    """

    def __init__(self, episode_id: str, renderer: ChatRenderer, opening: Sequence[Mapping[str, Any]]) -> None:
        self.episode_id = episode_id
        self.renderer = renderer
        self.tools_key = json.dumps(renderer.tools, sort_keys=True)
        self._builder = TrajectoryBuilder(renderer, [chat_message(m) for m in opening])
        self._seen = [normalize_message(m) for m in opening]  # the conversation as the harness sends it
        self.requests: list[RecordedRequest] = []
        self.turns: list[TurnRecord] = []
        self._pending: list[Choice] = []
        self._pending_seeds: tuple[int, ...] = ()
        self.ended = False

    @property
    def turn(self) -> int:
        """The turn the next request samples."""
        return len(self.requests)

    def prompt(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The prompt ids of a request: the recorded sequence, extended by the request's new messages.

        Raises:
            ConversationMismatch: the request does not extend the recorded conversation.
        """
        if self.ended:
            raise ConversationMismatch(f"episode {self.episode_id!r} has ended; use a new episode id")
        seen = [normalize_message(m) for m in messages]
        if not self._pending:  # the first request of the episode
            if seen != self._seen:
                raise ConversationMismatch(f"episode {self.episode_id!r} is waiting for its first request again")
            return self._builder.token_ids
        known = len(self._seen)
        for index, (had, got) in enumerate(zip(self._seen, seen, strict=False)):
            if had != got:
                raise ConversationMismatch(
                    f"message {index} differs from what episode {self.episode_id!r} recorded; the proxy records appended conversations only"
                )
        if len(seen) <= known + 1:
            raise ConversationMismatch(f"episode {self.episode_id!r}: the request adds no message after the assistant's turn")
        taken = self._take(seen[known])
        new = [chat_message(m) for m in messages[known + 1 :]]
        if any(m["role"] == "assistant" for m in new):
            raise ConversationMismatch("only one assistant message (the proxy's answer) may follow the recorded conversation")
        self._builder = taken.builder
        self._builder.add_messages(new)
        self.turns[-1]["env_messages"] = new
        self.turns[-1]["env_message_ids"] = self._builder.build().segments[-1].token_ids
        self._seen = seen
        return self._builder.token_ids

    def add_choices(self, prompt_ids: Sequence[int], seeds: Sequence[int], generations: Sequence[Generation], with_tools: bool) -> list[Choice]:
        """Record the request's sampled choices; returns them with the assistant message each answers with."""
        choices = []
        for generation in generations:
            fork = copy.deepcopy(self._builder, {id(self.renderer): self.renderer})  # the renderer (and tokenizer) is shared
            content = fork.add_generation(generation)
            choices.append(Choice(fork, generation, content, self._message(content, generation, with_tools)))
        self.requests.append(RecordedRequest(self.turn, tuple(prompt_ids), tuple(seeds), tuple(generations)))
        self._pending, self._pending_seeds = choices, tuple(seeds)
        return choices

    def _message(self, content: str, generation: Generation, with_tools: bool) -> dict[str, Any]:
        if not with_tools:
            return {"role": "assistant", "content": generation.text}
        parsed = parse_action(content, id_prefix=f"call_{self.turn + 1}")  # the ids an environment gives these calls
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content if not parsed.errors else generation.text}
        if parsed.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
        return message

    def _take(self, echoed: dict[str, Any]) -> Choice:
        """The choice whose answer the harness echoed back; records it as the episode's turn."""
        for index, choice in enumerate(self._pending):
            if normalize_message(choice.message) == echoed:
                self._record_turn(index)
                return choice
        raise ConversationMismatch(f"episode {self.episode_id!r}: the assistant message is none of the choices the proxy returned")

    def _record_turn(self, index: int) -> None:
        choice = self._pending[index]
        parsed = parse_action(choice.content, id_prefix=f"call_{len(self.turns) + 1}")
        self.turns.append(
            {
                "turn": len(self.turns),
                "seed": self._pending_seeds[index],
                "prompt_ids": self.requests[-1].prompt_ids,
                "sampled_ids": choice.generation.token_ids,
                "logprobs": choice.generation.logprobs,
                "finish_reason": choice.generation.finish_reason,
                "text": choice.generation.text,
                "tool_calls": [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in parsed.tool_calls],
                "parse_errors": list(parsed.errors),
                "env_messages": [],
                "env_message_ids": (),
                "reward": 0.0,
                "terminated": False,
                "truncated": False,
                "info": cast(StepInfo, {}),  # the proxy never sees the environment's info
            }
        )
        self._pending = []

    def end(self, choice: int = 0) -> Trajectory:
        """End the episode after its last request, taking that request's ``choice``; returns the trajectory."""
        if not self.ended:
            if self._pending:
                if not 0 <= choice < len(self._pending):
                    raise ValueError(f"choice must be in [0, {len(self._pending)}), got {choice}")
                self._builder = self._pending[choice].builder
                self._record_turn(choice)
            self.ended = True
        return self._builder.build()

    def trajectory(self) -> Trajectory:
        """The sequence so far (the chosen turns; a pending request's choices are not in it)."""
        return self._builder.build()

    def to_episode(self, reward: float, *, record: Mapping[str, Any] | None = None, group: int = 0, member: int = 0, stop_reason: StopReason = "done") -> Any:
        """The ended episode as the rollout runner's :class:`~agentgym.rollouts.runner.Episode`, for the trainer.

        Args:
            reward: the episode's reward (the harness knows it: the environment's, or a verifier's).
            record: the environment's episode record, when the harness has it.
            group, member: its place in a GRPO batch.
            stop_reason: how it ended.
        """
        from agentgym.rollouts.runner import Episode

        if not self.ended:
            raise RuntimeError(f"episode {self.episode_id!r} has not ended: call end() first")
        full = cast(
            ModelEpisodeRecord,
            {**(record or {}), "reward": float(reward), "policy": "agentgym-proxy", "group": group, "member": member, "stop_reason": stop_reason},
        )
        return Episode(
            record=full, trajectory=self.trajectory(), group=group, reward=float(reward), stop_reason=stop_reason, turns=list(self.turns), member=member
        )
