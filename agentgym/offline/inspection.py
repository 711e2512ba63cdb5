"""Show a trajectory with trained and masked tokens told apart: rich text for terminals, HTML for sharing.

Tokens are shown one by one (a token that decodes to part of a UTF-8 character is merged with the
following ones), newlines are drawn as ``⏎`` so template glue is visible, and every HTML token carries
its id and, when trained, its sampling logprob as a tooltip.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from rich.text import Text

from agentgym.rollouts.trajectory import Segment, SegmentKind, Trajectory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_RICH_STYLES: dict[SegmentKind, str] = {"prompt": "dim", "sampled": "bold green", "closing": "yellow", "env": "cyan"}
_LEGEND: dict[SegmentKind, str] = {
    "prompt": "prompt (masked)",
    "sampled": "sampled (trained)",
    "closing": "end-of-turn added after a cut-off turn (masked)",
    "env": "environment + template glue (masked)",
}
_HTML_COLOURS: dict[SegmentKind, str] = {"prompt": "#e8e8e8", "sampled": "#b7f0c0", "closing": "#ffe08a", "env": "#cfe3ff"}


@dataclass(frozen=True)
class TokenPiece:
    """Display unit: one token, or several when a character spans tokens."""

    text: str
    kind: SegmentKind
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None


def token_pieces(trajectory: Trajectory, tokenizer: PreTrainedTokenizerBase) -> list[TokenPiece]:
    """Split the trajectory into displayable pieces, in order."""
    pieces: list[TokenPiece] = []
    for segment in trajectory.segments:
        pieces.extend(_segment_pieces(segment, tokenizer))
    return pieces


def _segment_pieces(segment: Segment, tokenizer: PreTrainedTokenizerBase) -> list[TokenPiece]:
    pieces: list[TokenPiece] = []
    start = 0
    ids = segment.token_ids
    for end in range(1, len(ids) + 1):
        # decode() is annotated str | list[str]: one flat list of ids decodes to one string
        text = cast(str, tokenizer.decode(list(ids[start:end]), skip_special_tokens=False, clean_up_tokenization_spaces=False))
        # An incomplete UTF-8 sequence decodes to U+FFFD; wait for the token that completes it.
        if text.endswith("\ufffd") and end < len(ids):
            continue
        logprobs = None if segment.logprobs is None else segment.logprobs[start:end]
        pieces.append(TokenPiece(text, segment.kind, ids[start:end], logprobs))
        start = end
    return pieces


def _summary(trajectory: Trajectory) -> str:
    trained = sum(trajectory.loss_mask)
    return (
        f"{len(trajectory.token_ids)} tokens, {trained} trained, {trajectory.num_turns} turns"
        f" ({trajectory.num_closed_turns} cut off), prefix-stable: {trajectory.prefix_stable}"
    )


def render_rich(trajectory: Trajectory, tokenizer: PreTrainedTokenizerBase) -> Text:
    """A rich ``Text`` of the trajectory: green = trained, dim/cyan/yellow = masked (legend first)."""
    out = Text()
    out.append(_summary(trajectory) + "\n", style="bold")
    for kind, label in _LEGEND.items():
        out.append(f" {label} ", style=_RICH_STYLES[kind])
    out.append("\n\n")
    for piece in token_pieces(trajectory, tokenizer):
        out.append(piece.text.replace("\n", "⏎\n"), style=_RICH_STYLES[piece.kind])
    return out


def render_html(trajectory: Trajectory, tokenizer: PreTrainedTokenizerBase, *, title: str = "agentgym trajectory") -> str:
    """A self-contained HTML page of the trajectory with coloured, hoverable tokens."""
    styles = "\n".join(f".k-{kind} {{ background: {colour}; }}" for kind, colour in _HTML_COLOURS.items())
    legend = " ".join(f'<span class="tok k-{kind}">{html.escape(label)}</span>' for kind, label in _LEGEND.items())
    spans = []
    for piece in token_pieces(trajectory, tokenizer):
        tip = "ids " + " ".join(str(t) for t in piece.token_ids)
        if piece.logprobs is not None:
            tip += " | logprob " + " ".join(f"{x:.3f}" for x in piece.logprobs)
        text = html.escape(piece.text).replace("\n", "⏎\n")
        spans.append(f'<span class="tok k-{piece.kind}" title="{html.escape(tip)}">{text}</span>')
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>\n"
        "body { font-family: ui-monospace, monospace; font-size: 13px; }\n"
        ".seq { white-space: pre-wrap; line-height: 1.6; }\n"
        ".tok { border-right: 1px solid rgba(0,0,0,0.12); }\n"
        f"{styles}\n</style></head><body>\n"
        f"<h3>{html.escape(title)}</h3><p>{html.escape(_summary(trajectory))}</p><p>{legend}</p>\n"
        f'<div class="seq">{"".join(spans)}</div>\n</body></html>\n'
    )
