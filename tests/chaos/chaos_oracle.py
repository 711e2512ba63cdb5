"""A policy model for the chaos tests: the oracle's turns, with a hook that breaks the machinery on cue."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fakes import OracleScript

from agentgym.models import Generation, SamplingParams


class ChaosOracle:
    """A generation backend that answers with the oracle's turns; ``before[n]`` runs just before
    its ``n``-th generate call (1-based), to break something between two rounds of turns."""

    name = "oracle-script"

    def __init__(self, script: OracleScript, before: dict[int, Callable[[], None]] | None = None) -> None:
        self.script, self.tokenizer, self.before, self.calls = script, script.tokenizer, before or {}, 0

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Generation]:
        self.calls += 1
        if self.calls in self.before:
            self.before[self.calls]()
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            ids = tuple(self.script.reply(prompt, p.max_new_tokens))
            out.append(Generation(ids, (0.0,) * len(ids), self.tokenizer.decode(ids), "stop" if ids[-1] == self.script.eot else "length"))
        return out
