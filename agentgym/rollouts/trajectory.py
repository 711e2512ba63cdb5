"""Token-exact multi-turn trajectories with loss masks.

The training sequence of an episode is built incrementally, exactly as the model saw it:

1. the opening prompt, rendered by the chat template with the generation prompt (mask 0);
2. per assistant turn, the sampled token ids verbatim, end-of-turn token included (mask 1, with their
   sampling logprobs). A turn that ended without the end-of-turn token (``max_new_tokens`` or a stop
   string) is closed with that token, masked 0 because the model did not sample it;
3. per environment step, the new messages rendered through the template as a token delta: everything
   after the end-of-turn token up to and including the next generation prompt (mask 0: tool output,
   user turns and template glue alike).

The delta is the text by which the template's rendering of the whole conversation extends the text
built so far. Templates that rewrite earlier turns (e.g. dropping old reasoning) are not prefix-stable:
the builder then raises :class:`~agentgym.rollouts.chat.TemplateError` (``on_unstable="raise"``) or renders
the new messages against a neutral conversation (``"isolate"``, the default) and marks the trajectory
``prefix_stable=False``. Either way the sequence is what the model was prompted with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from agentgym.models.backend import Generation
from agentgym.records import SegmentDict, SegmentKind, TrajectoryDict
from agentgym.rollouts.chat import ChatRenderer, Message, TemplateError, validate_messages

UnstablePolicy = Literal["isolate", "raise"]


@dataclass(frozen=True)
class Segment:
    """A run of tokens with one origin.

    Attributes:
        kind: ``"prompt"`` (opening prompt), ``"sampled"`` (model output, trained), ``"closing"``
            (end-of-turn token added after a turn the model did not end) or ``"env"`` (environment delta).
        start: offset of the first token in the trajectory.
        token_ids: the tokens.
        logprobs: sampling logprobs for ``"sampled"`` segments, else ``None``.
        turn: index of the assistant turn the segment belongs to (env and prompt segments carry the
            index of the turn they prompt).
    """

    kind: SegmentKind
    start: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    turn: int

    @property
    def end(self) -> int:
        """Offset one past the last token."""
        return self.start + len(self.token_ids)

    def to_dict(self) -> SegmentDict:
        """JSON-serialisable form (lists for the tuples)."""
        logprobs = None if self.logprobs is None else list(self.logprobs)
        return {"kind": self.kind, "start": self.start, "token_ids": list(self.token_ids), "logprobs": logprobs, "turn": self.turn}


@dataclass(frozen=True)
class Trajectory:
    """A finished token sequence with its loss mask.

    Attributes:
        token_ids: the full sequence.
        loss_mask: 1 exactly on sampled tokens, 0 elsewhere.
        logprobs: sampling logprob on sampled tokens, 0.0 elsewhere.
        segments: the sequence split by origin, in order.
        messages: the conversation as rendered (tool description included, assistant content decoded
            from the sampled ids), for re-rendering with the same :class:`ChatRenderer`.
        prefix_stable: False when some delta had to be rendered in isolation.
    """

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    segments: tuple[Segment, ...]
    messages: tuple[Message, ...]
    prefix_stable: bool

    @property
    def prompt_length(self) -> int:
        """Length of the opening prompt; the rest is the response (for trainers that split the two)."""
        return len(self.segments[0].token_ids)

    @property
    def num_turns(self) -> int:
        """Number of assistant turns."""
        return sum(1 for s in self.segments if s.kind == "sampled")

    @property
    def num_closed_turns(self) -> int:
        """Number of assistant turns that ended without the end-of-turn token and were closed for the model."""
        return sum(1 for s in self.segments if s.kind == "closing")

    @property
    def ends_with_generation_prompt(self) -> bool:
        """True when the last segment is an environment delta (the sequence asks for another turn)."""
        return self.segments[-1].kind in ("prompt", "env")

    def to_dict(self) -> TrajectoryDict:
        """JSON-serialisable form (``segments`` hold the tokens; the flat arrays are derived)."""
        return {"segments": [s.to_dict() for s in self.segments], "messages": [dict(m) for m in self.messages], "prefix_stable": self.prefix_stable}

    @classmethod
    def from_dict(cls, data: TrajectoryDict) -> Trajectory:
        """Inverse of :meth:`to_dict`."""
        segments = [
            Segment(
                kind=s["kind"],
                start=int(s["start"]),
                token_ids=tuple(int(t) for t in s["token_ids"]),
                logprobs=None if s["logprobs"] is None else tuple(float(x) for x in s["logprobs"]),
                turn=int(s["turn"]),
            )
            for s in data["segments"]
        ]
        return _assemble(segments, list(data["messages"]), bool(data["prefix_stable"]))


def _assemble(segments: Sequence[Segment], messages: Sequence[Message], prefix_stable: bool) -> Trajectory:
    token_ids: list[int] = []
    loss_mask: list[int] = []
    logprobs: list[float] = []
    for segment in segments:
        if segment.start != len(token_ids):
            raise ValueError(f"segment starts at {segment.start}, expected {len(token_ids)}")
        token_ids.extend(segment.token_ids)
        trained = segment.kind == "sampled"
        loss_mask.extend([int(trained)] * len(segment.token_ids))
        if trained:
            if segment.logprobs is None or len(segment.logprobs) != len(segment.token_ids):
                raise ValueError("a sampled segment needs one logprob per token")
            logprobs.extend(segment.logprobs)
        else:
            logprobs.extend([0.0] * len(segment.token_ids))
    return Trajectory(
        token_ids=tuple(token_ids),
        loss_mask=tuple(loss_mask),
        logprobs=tuple(logprobs),
        segments=tuple(segments),
        messages=tuple(dict(m) for m in messages),
        prefix_stable=prefix_stable,
    )


class TrajectoryBuilder:
    """Accumulates one episode's token sequence turn by turn.

    Alternate :meth:`add_generation` (after sampling from :attr:`token_ids`) and :meth:`add_messages`
    (after the environment step), then call :meth:`build`.

    Args:
        renderer: the renderer for the policy's tokenizer and the environment's tools.
        messages: the opening conversation (the environment's first observation).
        on_unstable: what to do when the template is not prefix-stable for the conversation.
    """

    def __init__(self, renderer: ChatRenderer, messages: Sequence[Mapping[str, Any]], *, on_unstable: UnstablePolicy = "isolate") -> None:
        if on_unstable not in ("isolate", "raise"):
            raise ValueError(f"on_unstable must be 'isolate' or 'raise', got {on_unstable!r}")
        self.renderer = renderer
        self.on_unstable = on_unstable
        self._messages = renderer.prepare(messages)
        if not self._messages:
            raise ValueError("the opening conversation is empty")
        # The rendered text of the sequence so far; deltas are computed against it.
        self._text = renderer.render_text(self._messages, add_generation_prompt=True)
        self._ids = renderer.encode(self._text)
        self._segments = [Segment("prompt", 0, tuple(self._ids), None, 0)]
        self._turn = 0
        self._prefix_stable = True

    @property
    def token_ids(self) -> list[int]:
        """The sequence so far: the prompt for the next generation while one is expected."""
        return list(self._ids)

    @property
    def expects_generation(self) -> bool:
        """True when the sequence ends with a generation prompt."""
        return self._segments[-1].kind in ("prompt", "env")

    @property
    def messages(self) -> list[Message]:
        """The conversation so far, as rendered."""
        return [dict(m) for m in self._messages]

    def __len__(self) -> int:
        return len(self._ids)

    def _append(self, kind: SegmentKind, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        self._segments.append(Segment(kind, len(self._ids), tuple(ids), None if logprobs is None else tuple(logprobs), self._turn))
        self._ids.extend(ids)

    def add_generation(self, generation: Generation) -> str:
        """Append a sampled assistant turn and return its content as the template will render it.

        The sampled ids are kept verbatim. The returned content is the ids decoded without the trailing
        end-of-turn token (special tokens kept), so re-rendering the conversation reproduces this text.
        """
        if not self.expects_generation:
            raise RuntimeError("add_generation() called twice without add_messages() in between")
        ids = list(generation.token_ids)
        if not ids:
            raise ValueError("the generation has no tokens")
        tokenizer = self.renderer.tokenizer
        closed_by_model = ids[-1] == self.renderer.eot_token_id
        content_ids = ids[:-1] if closed_by_model else ids
        # decode() is annotated str | list[str]: one flat list of ids decodes to one string
        content = cast(str, tokenizer.decode(content_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        self._append("sampled", ids, generation.logprobs)
        self._text += content + self.renderer.eot_text
        if not closed_by_model:
            self._append("closing", [self.renderer.eot_token_id], None)
        self._messages.append({"role": "assistant", "content": content})
        return content

    def add_messages(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append the environment's new messages and the next generation prompt as a masked delta."""
        if self.expects_generation:
            raise RuntimeError("add_messages() must follow add_generation()")
        new = validate_messages(messages)
        full = self.renderer.render_text([*self._messages, *new], add_generation_prompt=True)
        if full.startswith(self._text):
            delta = full[len(self._text) :]
        elif self.on_unstable == "raise":
            raise TemplateError(
                "the chat template is not prefix-stable for this conversation: rendering it with the new "
                "messages changes earlier text (use on_unstable='isolate' to render deltas in isolation)"
            )
        else:
            delta = self.renderer.isolated_delta(new)
            self._prefix_stable = False
        self._turn += 1
        self._append("env", self.renderer.encode_after_eot(delta), None)
        self._text += delta
        self._messages.extend(new)

    def build(self) -> Trajectory:
        """The trajectory so far (the builder can keep going afterwards)."""
        return _assemble(self._segments, self._messages, self._prefix_stable)


@dataclass(frozen=True)
class RenderCheck:
    """Result of re-rendering a trajectory's conversation in one go.

    Attributes:
        text_matches: the decoded sequence equals the template's rendering of the whole conversation.
        tokens_match: the sequence equals the tokenisation of that rendering (can be False with a matching
            text when the model sampled a non-canonical tokenisation: re-tokenising would change it).
        first_mismatch: first differing token offset, or None when the tokens match.
    """

    text_matches: bool
    tokens_match: bool
    first_mismatch: int | None


def check_rendering(trajectory: Trajectory, renderer: ChatRenderer) -> RenderCheck:
    """Compare a trajectory with the template's rendering of its whole conversation."""
    ends_with_prompt = trajectory.ends_with_generation_prompt
    rendered = renderer.render_text(list(trajectory.messages), add_generation_prompt=ends_with_prompt)
    if not ends_with_prompt and rendered.endswith(renderer.after_eot_text):
        # The sequence stops at the end-of-turn token the model emitted; the template adds glue after it.
        rendered = rendered[: len(rendered) - len(renderer.after_eot_text)]
    decoded = renderer.tokenizer.decode(list(trajectory.token_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    expected = renderer.encode(rendered)
    mismatch = next(
        (i for i, (a, b) in enumerate(zip(expected, trajectory.token_ids, strict=False)) if a != b),
        None if len(expected) == len(trajectory.token_ids) else min(len(expected), len(trajectory.token_ids)),
    )
    return RenderCheck(text_matches=decoded == rendered, tokens_match=mismatch is None, first_mismatch=mismatch)
