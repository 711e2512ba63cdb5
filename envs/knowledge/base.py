"""What the three knowledge environments share: the snapshot, the tool-result cache, the
``answer`` tool that ends the episode, the answer-checked reward, and the search tools.

The reward is ``0.1·format + 0.4·execution + 0.5·completion`` hard-gated on completion, as in
the other agentgym environments: a wrong or missing answer scores 0 whatever else happened.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from agentgym.env import Message, ToolEnv
from agentgym.envs.knowledge.answers import check_answer
from agentgym.envs.knowledge.cache import SHARED_CACHE, ToolCache
from agentgym.envs.knowledge.records import KnowledgeInfo, KnowledgeTask
from agentgym.envs.knowledge.search_tool import MAX_RESULTS, ArticleIndex
from agentgym.envs.knowledge.snapshot import open_readonly, snapshot_path
from agentgym.parsing import ParsedAction
from agentgym.tools import ToolError, cap_result, tool
from agentgym.verifiers import RewardResult, weighted_sum

__all__ = ["FAULT_MESSAGE", "WEIGHTS", "ArticleEnv", "KnowledgeEnv"]

FAULT_MESSAGE = "the data service is busy (transient error): nothing was run. Retry the same call."
"""What a data tool returns (as a tool error) when a seeded transient fault hits it."""

WEIGHTS = {"format": 0.1, "execution": 0.4, "completion": 0.5}
CacheSetting = str | ToolCache
_CACHE_SCOPES = ("instance", "process", "off")


# The task record type of a knowledge environment.
KnowledgeTaskT = TypeVar("KnowledgeTaskT", bound=KnowledgeTask)


class KnowledgeEnv(ToolEnv[KnowledgeTaskT]):
    """Base of SQL-v0, SearchQA-v0 and ToolMath-v0: a question, tools over the snapshot, one answer.

    Args:
        tool_cache: where tool results are cached. ``"instance"`` (default): across the episodes
            of this environment object; ``"process"``: across every environment in the process
            (the cache counts in ``info`` then depend on what else ran); ``"off"``; or a
            :class:`~agentgym.envs.knowledge.cache.ToolCache` shared by the environments given it
            (e.g. the G environments of a GRPO group).
        fault_rate: probability that a call to a data tool (``sql``, ``search``, ``open``) fails
            with a transient error (:data:`FAULT_MESSAGE`) instead of running; calling again may
            succeed. Faults are drawn from the episode's seed and task, so the same seed and
            actions give the same faults. Counted in ``info["faults"]`` (and as tool errors).
        max_consecutive_faults: at most this many data-tool calls in a row fail; the next one runs
            (``None``, the default: no cap). With a cap, ``fault_rate`` may be 1: ``fault_rate=1,
            max_consecutive_faults=1`` fails the first call and runs the retry, so every episode
            meets a fault it can recover from (a training curriculum for retrying).
        **kwargs: the :class:`~agentgym.env.ToolEnv` arguments (``split``, ``tasks``, ``task_ids``,
            ``max_turns``, ``max_tool_calls``, ``render_mode``).
    """

    info_type = KnowledgeInfo
    intro: str = ""  # the system message's opening; a subclass may extend it per instance (SQL-v0's schema)

    def __init__(self, *, tool_cache: CacheSetting = "instance", fault_rate: float = 0.0, max_consecutive_faults: int | None = None, **kwargs: Any):
        capped = max_consecutive_faults is not None
        if capped and (type(max_consecutive_faults) is not int or max_consecutive_faults < 1):
            raise ValueError(f"max_consecutive_faults must be None or an integer >= 1; got {max_consecutive_faults!r}")
        # Without a cap a rate of 1 would fail every call, and no episode could succeed.
        if not (0 <= fault_rate <= 1 if capped else 0 <= fault_rate < 1):
            allowed = "[0, 1]" if capped else "[0, 1) (1 only with max_consecutive_faults)"
            raise ValueError(f"fault_rate must be in {allowed}; got {fault_rate}")
        super().__init__(**kwargs)
        self.fault_rate = fault_rate
        self.max_consecutive_faults = max_consecutive_faults
        if isinstance(tool_cache, ToolCache):
            self.cache: ToolCache | None = tool_cache
        elif tool_cache in _CACHE_SCOPES:
            self.cache = {"instance": ToolCache(), "process": SHARED_CACHE, "off": None}[tool_cache]
        else:
            raise ValueError(f"tool_cache must be one of {', '.join(_CACHE_SCOPES)} or a ToolCache; got {tool_cache!r}")
        self.snapshot = snapshot_path()
        self._cache_hits = self._cache_misses = 0
        self._faults = self._fault_streak = 0
        self._fault_draws = np.random.default_rng(0)
        self.submitted: str | None = None

    # ------------------------------------------------------------------ episode lifecycle

    def setup_episode(self, task: KnowledgeTaskT) -> list[Message]:
        self.submitted = None
        self._cache_hits = self._cache_misses = 0
        self._faults = self._fault_streak = 0
        # The fault stream of an episode depends on its seed and task only.
        seed = self._seed if self._seed is not None else int(self.np_random.integers(2**31))
        self._fault_draws = np.random.default_rng([seed, zlib.crc32(task["task_id"].encode())])
        return [{"role": "system", "content": self.system_prompt()}, {"role": "user", "content": task["question"]}]

    def system_prompt(self) -> str:
        """The episode's system message: the environment's introduction and the answer rules."""
        return (
            f"{self.intro}\n\nEverything you need is in the tools' data, which describe an invented world: "
            "do not rely on outside knowledge. When you know the answer, call answer(text) exactly once "
            "with the answer alone (a name, a number, or a comma-separated list when asked for one); "
            "it ends the episode."
        )

    def respond(self, parsed: ParsedAction) -> list[Message]:
        return [{"role": "user", "content": "Please use the tools, then give your final answer with the answer tool."}]

    def is_done(self) -> bool:
        return self.submitted is not None

    def extra_info(self) -> dict[str, Any]:
        return {"cache_hits": self._cache_hits, "cache_misses": self._cache_misses, "faults": self._faults}

    # --------------------------------------------------------------------------- tools

    @tool
    def answer(self, text: str) -> str:
        """Submit the final answer. This ends the episode.

        Args:
            text: the answer alone: a name, a number, or a comma-separated list when the question asks for one.
        """
        self.submitted = text
        return "Answer recorded."

    def cached(self, tool_name: str, arguments: dict[str, Any], compute: Callable[[], Any]) -> str:
        """Run a snapshot tool through the cache; the result is its JSON text (or a ToolError)."""

        if self.fault_rate:
            # One draw per call, capped or not, so a cap changes which calls fail and nothing else.
            at_cap = self.max_consecutive_faults is not None and self._fault_streak >= self.max_consecutive_faults
            if self._fault_draws.random() < self.fault_rate and not at_cap:
                self._faults += 1
                self._fault_streak += 1
                raise ToolError(FAULT_MESSAGE)
            self._fault_streak = 0

        def as_text() -> str:  # capped before it is cached: the cache holds what the model sees
            result = compute()
            return cap_result(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))

        if self.cache is None:
            return as_text()
        ok, text, hit = self.cache.call(self.snapshot.name, tool_name, arguments, as_text)
        if hit:
            self._cache_hits += 1
        else:
            self._cache_misses += 1
        if not ok:
            raise ToolError(text)
        return text

    # -------------------------------------------------------------------------- reward

    def compute_reward(self) -> RewardResult:
        assert self.task is not None
        if self.submitted is None:
            completion = RewardResult(0.0, "no answer was submitted", passed=False)
        else:
            completion = check_answer(self.submitted, self.task["answer"])
        return weighted_sum(self.format_and_execution() | {"completion": completion}, WEIGHTS, gate="completion")

    @classmethod
    def policies(cls) -> dict[str, Callable[[int], Any]]:
        from agentgym.envs.knowledge.oracles import ORACLES

        return super().policies() | {"oracle": ORACLES[cls.__name__]}


class ArticleEnv(KnowledgeEnv[KnowledgeTaskT]):
    """A knowledge environment with the ``search`` and ``open`` tools (SearchQA-v0, ToolMath-v0)."""

    _index: ArticleIndex | None = None

    @property
    def articles(self) -> ArticleIndex:
        """The article index, opened on first use."""
        if self._index is None:
            self._index = ArticleIndex(open_readonly(self.snapshot))
        return self._index

    @tool
    def search(self, query: str, k: int = 5) -> str:
        """Full-text search over the encyclopedia articles (BM25 ranking); returns doc ids, titles and snippets.

        Args:
            query: words to look for, e.g. a name or a title.
            k: number of results, 1 to 10.
        """
        if not 1 <= k <= MAX_RESULTS:  # checked before the cache so that it is not counted as a lookup
            raise ToolError(f"k must be between 1 and {MAX_RESULTS}; got {k}")
        return self.cached("search", {"query": query, "k": k}, lambda: self.articles.search(query, k))

    @tool(name="open")
    def open_article(self, doc_id: str) -> str:
        """Read a whole article.

        Args:
            doc_id: a doc_id returned by search.
        """
        return self.cached("open", {"doc_id": doc_id}, lambda: self.articles.open(doc_id))

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
        super().close()
