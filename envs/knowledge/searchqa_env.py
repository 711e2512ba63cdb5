"""Multi-hop question answering with full-text search over an invented encyclopedia:
:class:`SearchQAEnv` (agentgym/SearchQA-v0). The class docstring documents the environment in
Gymnasium's sections; ``docs/envs/searchqa.md`` is generated from it."""

from __future__ import annotations

from agentgym.envs.knowledge.base import ArticleEnv
from agentgym.envs.knowledge.records import SearchQATask

__all__ = ["SearchQAEnv"]


class SearchQAEnv(ArticleEnv[SearchQATask]):
    """agentgym/SearchQA-v0: multi-hop questions answered with search and open.

    ## Description

    The agent answers a multi-hop question ("In what year was the founder of the company that released
    the film that won the Golden X Award in 1987 born?") by searching and reading the articles of a
    fixed, invented encyclopedia: one article per country, city, university, person, company, work and
    award, generated from a fixed seed so that nothing can be recalled from pretraining. Difficulty is
    the number of relations to follow from the entity the question names: easy 1-2, medium 3-4, hard
    5-7 (long chains are written as numbered steps).

    ## Action Space

    One assistant turn (:class:`agentgym.spaces.AssistantTurn`): text with Hermes-style
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI-style assistant
    message dict with ``tool_calls``. Tools: ``search(query, k=5)`` (SQLite FTS5, BM25 ranking with
    title matches weighted up, ties broken by document id; the query is treated as plain words),
    ``open(doc_id)`` (the whole article), ``answer(text)`` (submits the answer and ends the episode).

    ## Observation Space

    A list of new chat messages (:class:`agentgym.spaces.ChatMessages`): ``reset`` returns the system
    message and the question; ``step`` returns one ``tool`` message per call (JSON results or
    ``Error: ...``), or a nudge to use the tools when the turn called none.

    ## Rewards

    Given once, on the final step: ``0.1·format + 0.4·execution + 0.5·completion``, hard-gated on
    completion (a wrong or missing answer scores 0).

    - completion: normalised exact match (case, accents, punctuation and articles ignored) for names;
      numeric equality for numbers (years, populations; thousands separators allowed, but the answer
      must hold exactly one number).
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
    :class:`~agentgym.envs.knowledge.cache.ToolCache`; the episode's hits and misses are in
    ``info["cache_hits"]`` / ``info["cache_misses"]``); ``fault_rate``
    (default 0: each ``search`` or ``open`` call fails with a transient error with this probability,
    drawn from the episode's seed and task; counted in ``info["faults"]``); ``max_consecutive_faults``
    (default ``None``: no cap; with a cap, that many failed calls in a row are followed by one that
    runs, and ``fault_rate`` may be 1).

    ## Version History

    - v0: initial release (600 generated tasks, 200 per difficulty, 70/15/15 train/val/test);
      ``fault_rate`` added (default off, so episodes without it are unchanged); ``max_consecutive_faults``
      added (default no cap, so episodes without it are unchanged).
    """

    task_family = "knowledge/searchqa"
    default_max_turns = 20
    intro = (
        "You answer questions by searching an encyclopedia. search(query, k) returns the best-matching "
        "articles' doc_id, title and a snippet; open(doc_id) returns a whole article. Questions may need "
        "several articles read one after another, each naming the entity to look up next."
    )
