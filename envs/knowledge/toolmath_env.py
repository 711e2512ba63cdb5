"""Tool-use arithmetic: look facts up in an invented encyclopedia, then compute with a calculator:
:class:`ToolMathEnv` (agentgym/ToolMath-v0) and its calculator tool. The class docstring documents
the environment in Gymnasium's sections; ``docs/envs/toolmath.md`` is generated from it."""

from __future__ import annotations

from agentgym.envs.knowledge.base import ArticleEnv
from agentgym.envs.knowledge.calculator import CalculatorError, calculate
from agentgym.envs.knowledge.records import ToolMathTask
from agentgym.tools import ToolError, tool

__all__ = ["ToolMathEnv"]


class ToolMathEnv(ArticleEnv[ToolMathTask]):
    """agentgym/ToolMath-v0: find numbers with search and open, compute with calculator.

    ## Description

    The agent answers a numeric question ("What is the population of the city of A divided by the
    population of the city of B? Round to 2 decimal places") whose inputs are facts of an invented
    world, found with ``search`` and ``open``, and combined with ``calculator``. The rounding rule and
    the accepted tolerance are stated in every question. Difficulty: easy tasks read at most two
    articles and follow at most one relation, medium ones 2-3 relations, hard ones 4 or more (entities
    described through chains such as "the capital of the country the city of X lies in").

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``. Tools: ``search(query, k=5)``, ``open(doc_id)``,
    ``calculator(expression)`` (numbers, ``+ - * / // % **``, parentheses, ``pi``, ``e``, ``sqrt abs
    round floor ceil exp log log10 log2 min max``; parsed with ``ast`` and evaluated by a whitelist
    interpreter with bounded sizes, never ``eval``), ``answer(text)`` (ends the episode).

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`): ``reset`` returns the system
    message and the question; ``step`` returns one ``tool`` message per call (results, or
    ``Error: ...``), or a nudge to use the tools when the turn called none.

    ## Rewards

    Given once, on the final step: ``0.1·format + 0.4·execution + 0.5·completion``, hard-gated on
    completion (a wrong or missing answer scores 0).

    - completion: the answer holds exactly one number, within the stated tolerance of the reference
      (computed exactly with fractions and rounded half-up; the tolerance is one unit of the last
      requested decimal, or 0 for exact whole numbers).
    - execution: share of executed tool calls that did not return an error.
    - format: share of turns without a malformed tool call.

    ## Starting State

    A task from the chosen split, drawn with the env's seeded RNG or named by
    ``options={"task_id": ...}``. The snapshot is built once per machine into ``$AGENTGYM_CACHE``
    (default ``~/.cache/agentgym``) and never rebuilt by ``reset``.

    ## Episode End

    Terminates when ``answer`` runs. Truncates after ``max_turns`` assistant turns (default 20).

    ## Arguments

    ``split``, ``tasks``, ``task_ids``, ``max_turns``, ``max_tool_calls``, ``render_mode`` (see
    :class:`agentgym.env.ToolEnv`); ``tool_cache`` (``"instance"``, ``"process"``, ``"off"`` or a shared
    :class:`~agentgym.envs.knowledge.cache.ToolCache`; calculator calls are cheap and not cached); ``fault_rate``
    (default 0: each ``search`` or ``open`` call fails with a transient error with this probability,
    drawn from the episode's seed and task; counted in ``info["faults"]``); ``max_consecutive_faults``
    (default ``None``: no cap; with a cap, that many failed calls in a row are followed by one that
    runs, and ``fault_rate`` may be 1).

    ## Version History

    - v0: initial release (600 generated tasks, 200 per difficulty, 70/15/15 train/val/test);
      ``fault_rate`` added (default off, so episodes without it are unchanged); ``max_consecutive_faults``
      added (default no cap, so episodes without it are unchanged).
    """

    task_family = "knowledge/toolmath"
    default_max_turns = 20
    intro = (
        "You answer numeric questions. Find the facts with search(query, k) and open(doc_id) in an "
        "encyclopedia, compute with calculator(expression), and round as the question says. Articles "
        "write large numbers with thousands separators; give the calculator plain numbers (1234567)."
    )

    @tool
    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression, e.g. "36950300 / 627600" or "round(1.2345, 2)".

        Args:
            expression: numbers, + - * / // % ** and parentheses, pi, e, and sqrt abs round floor ceil exp log log10 log2 min max.
        """
        try:
            return calculate(expression)
        except CalculatorError as exc:
            raise ToolError(f"calculator: {exc}") from None
