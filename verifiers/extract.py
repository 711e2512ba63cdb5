"""Finding the final answer in a model's response: ``\\boxed{}``, answer tags, phrases, regexes.

The primitives return every candidate in order of appearance; :class:`AnswerExtractor` turns
them into one answer under an explicit policy against hedging:

- a response that boxes (or tags) several *different* answers gets no answer at all
  (``on_conflict="reject"``, the default), so listing candidates never earns credit; repeating
  the same answer is fine. ``on_conflict="last"`` takes the last one instead, like math-verify
  and GEM.
- answer phrases ("the answer is ...") may be restated or corrected while reasoning, so the
  last phrase wins; it still has to name one answer to match anything.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentgym.verifiers.normalize import strip_latex

__all__ = ["MAX_ANSWER_CHARS", "AnswerExtractor", "Extraction", "extract_boxed", "extract_final_answer", "extract_regex", "extract_tagged"]

Strategy = Literal["boxed", "tag", "final_answer", "regex"]

_SHOWN_CANDIDATES = 10
MAX_ANSWER_CHARS = 10_000
"""Longer "answers" are refused: no real final answer is that long, and every later step
(normalisation, parsing, SymPy) would pay for it."""

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_FINAL_ANSWER = re.compile(
    r"""(?:final\s+answer|\banswer)\**\s*(?:is\s*:?|:|=)\s*\**[ \t]*   # "Final Answer:", "the answer is"
        (?P<answer>[^\n]*?)                                          # up to the end of the sentence
        [ \t]*(?:\.(?=\s|$)|\n|$)""",
    re.IGNORECASE | re.VERBOSE,
)


def extract_boxed(text: str) -> list[str]:
    """Contents of every outermost ``\\boxed{...}`` and ``\\fbox{...}``, in order; braces may nest.

    ``\\boxed 5`` (no braces) yields ``5``. Escaped braces ``\\{`` ``\\}`` do not count for
    nesting. An unclosed ``\\boxed{`` yields nothing. A box inside a box is part of the outer
    box's content, not a second answer.
    """
    closing = _matching_braces(text)
    found: list[str] = []
    covered = 0  # end of the last box taken; boxes before it are nested in it
    for match in _BOXED.finditer(text):
        if match.start() < covered:
            continue
        start = match.end()
        while start < len(text) and text[start] in " \t":
            start += 1
        if start < len(text) and text[start] == "{":
            if start in closing:
                found.append(text[start + 1 : closing[start]].strip())
                covered = closing[start]
        else:
            token = re.match(r"[^\s$]+", text[start : start + 200])
            if token:
                found.append(token.group())
    return found


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` that is closed -> index of its ``}``, in one pass (linear time, so a
    hostile response of many unclosed boxes cannot make extraction quadratic)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # an escaped character, e.g. \{ in a set, never opens or closes
            continue
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def extract_tagged(text: str, tag: str = "answer") -> list[str]:
    """Contents of every ``<tag>...</tag>`` block (case-insensitive), stripped, in order.

    Each opening tag pairs with the first closing tag after it; an opening tag without one is
    ignored.
    """
    if not re.fullmatch(r"[A-Za-z][\w.-]*", tag):
        raise ValueError(f"not a tag name: {tag!r}")
    opens = [m.end() for m in re.finditer(rf"<{tag}\s*>", text, re.IGNORECASE)]
    closes = [(m.start(), m.end()) for m in re.finditer(rf"</{tag}\s*>", text, re.IGNORECASE)]
    found: list[str] = []
    position = 0
    for start in opens:
        if start < position:
            continue
        # Two sorted lists walked once each: linear, unlike a lazy regex over unclosed tags.
        nxt = bisect.bisect_left(closes, (start, start))
        if nxt == len(closes):
            break
        found.append(text[start : closes[nxt][0]].strip())
        position = closes[nxt][1]
    return found


def extract_final_answer(text: str) -> list[str]:
    """Answers stated in words, in order: "The answer is 42.", "Final Answer: $x=3$", "answer = 7".

    Each runs to the end of its sentence (a period followed by space) or line; markdown bold
    around the phrase is ignored.
    """
    answers = []
    for match in _FINAL_ANSWER.finditer(text):
        answer = match["answer"].strip().strip("*").strip()
        if answer:
            answers.append(answer)
    return answers


def extract_regex(text: str, pattern: str | re.Pattern[str], *, group: int | str = 1) -> list[str]:
    """The given capture group of every match of ``pattern``, stripped, in order."""
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    return [m.group(group).strip() for m in compiled.finditer(text) if m.group(group) is not None]


@dataclass(frozen=True)
class Extraction:
    """The answer found in a response, or why there is none.

    Attributes:
        answer: the extracted answer, or ``None``.
        source: which strategy produced it (``"boxed"``, ``"tag"``, ``"final_answer"``,
            ``"regex"``, ``"whole"``), or ``None``.
        candidates: every candidate the winning strategy saw.
        problem: why ``answer`` is ``None`` (no answer, conflicting answers, too long).
    """

    answer: str | None
    source: str | None = None
    candidates: tuple[str, ...] = ()
    problem: str | None = None

    def details(self) -> dict[str, object]:
        """JSON-ready facts for a :class:`~agentgym.verifiers.result.RewardResult`."""
        out: dict[str, object] = {"answer": self.answer, "answer_source": self.source}
        if len(self.candidates) > 1:
            out["candidates"] = list(self.candidates[:_SHOWN_CANDIDATES])
            out["candidate_count"] = len(self.candidates)
        return out


@dataclass(frozen=True)
class AnswerExtractor:
    """Extract one answer, trying strategies in order; the first that finds anything decides.

    Args:
        order: strategies to try.
        tag: the tag name for ``"tag"`` (``<answer>...</answer>``).
        pattern: the regular expression for ``"regex"``; its ``group`` is the answer.
        group: the capture group of ``pattern``.
        on_conflict: ``"reject"`` (no answer when boxes or tags disagree) or ``"last"``.
        whole_text_max_chars: when no strategy finds anything, a response up to this long
            (stripped) is itself the answer; 0 turns that off.
        max_answer_chars: a longer extracted answer is refused.
    """

    order: Sequence[Strategy] = ("boxed", "tag", "final_answer")
    tag: str = "answer"
    pattern: str | None = None
    group: int | str = 1
    on_conflict: Literal["reject", "last"] = "reject"
    whole_text_max_chars: int = 200
    max_answer_chars: int = MAX_ANSWER_CHARS

    def __post_init__(self) -> None:
        unknown = set(self.order) - {"boxed", "tag", "final_answer", "regex"}
        if unknown:
            raise ValueError(f"unknown extraction strategies {sorted(unknown)}")
        if "regex" in self.order and self.pattern is None:
            raise ValueError("the 'regex' strategy needs a pattern")
        if self.on_conflict not in ("reject", "last"):
            raise ValueError(f"on_conflict must be 'reject' or 'last', got {self.on_conflict!r}")

    def __call__(self, text: str) -> Extraction:
        """Extract the answer from ``text``."""
        if not isinstance(text, str):
            return Extraction(None, problem=f"response is {type(text).__name__}, not text")
        for strategy in self.order:
            candidates = self._candidates(strategy, text)
            if candidates:
                longest = max(len(c) for c in candidates)
                if longest > self.max_answer_chars:
                    return Extraction(None, strategy, (), f"answer is {longest} characters long (at most {self.max_answer_chars})")
                return self._decide(strategy, tuple(candidates))
        stripped = text.strip()
        if not stripped:
            return Extraction(None, problem="empty response")
        if len(stripped) <= self.whole_text_max_chars:
            return Extraction(stripped, "whole", (stripped,))
        wanted = ", ".join(self.order) or "none"
        return Extraction(None, problem=f"no answer found (looked for: {wanted})")

    def _candidates(self, strategy: Strategy, text: str) -> list[str]:
        if strategy == "boxed":
            return extract_boxed(text)
        if strategy == "tag":
            return extract_tagged(text, self.tag)
        if strategy == "final_answer":
            return extract_final_answer(text)
        assert self.pattern is not None
        return extract_regex(text, self.pattern, group=self.group)

    def _decide(self, strategy: Strategy, candidates: tuple[str, ...]) -> Extraction:
        # Phrases are restated and corrected while reasoning; boxes and tags are commitments.
        if strategy == "final_answer" or self.on_conflict == "last":
            return Extraction(candidates[-1], strategy, candidates)
        # Cosmetic differences (spacing, \text{}, a box in a box) do not make answers different.
        distinct = list(dict.fromkeys("".join(strip_latex(c).split()) for c in candidates))
        if len(distinct) > 1:
            shown = ", ".join(f"'{c}'" for c in distinct[:4]) + (", ..." if len(distinct) > 4 else "")
            return Extraction(None, strategy, candidates, f"{len(distinct)} different {strategy} answers: {shown}")
        return Extraction(candidates[-1], strategy, candidates)
