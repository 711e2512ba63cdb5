"""Oracle policies of SQL-v0, SearchQA-v0 and ToolMath-v0.

Each oracle follows the task's recorded solution through the real tools and checks what it reads,
so an oracle success shows that the task is solvable with the tools, not only that the reward
accepts the reference answer: the SQL oracle answers from its query's rows; the search oracles
find every document by searching its title, check that each article names the next entity of the
chain and contains the needed value, and the math oracle computes with the calculator.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from agentgym.parsing import format_tool_call
from agentgym.policies import Script, ScriptedPolicy

__all__ = ["ORACLES", "SQLOracle", "SearchQAOracle", "ToolMathOracle"]


class OracleError(RuntimeError):
    """The task's solution does not hold up against the tools (a task-data bug)."""


def _results(observation: list[dict[str, Any]]) -> list[Any]:
    """The JSON results of the previous turn's tool calls, in order."""
    out = []
    for message in observation:
        if message["content"].startswith("Error:"):
            raise OracleError(f"the oracle hit a tool error: {message['content']}")
        out.append(json.loads(message["content"]) if message["name"] != "calculator" else message["content"])
    return out


class SQLOracle(ScriptedPolicy):
    """Runs the reference query and answers from the rows it returns."""

    def script(self, env: Any) -> Script:
        task = env.task
        (result,) = _results((yield format_tool_call("sql", {"query": task["solution"]["sql"]})))
        rows = result["rows"]
        if task["answer"]["type"] == "list":
            text = ", ".join(str(r[0]) for r in rows)
        else:
            text = str(rows[0][0])
        yield format_tool_call("answer", {"text": text})


def _read_chain(docs: list[str], titles: list[str], opened: dict[str, str]) -> Script:
    """Search each title and open its document (one turn each), checking that every article names
    the next entity; texts are stored in ``opened`` and documents already there are not reread."""
    for index, (doc_id, title) in enumerate(zip(docs, titles, strict=False)):
        if doc_id not in opened:
            hits, article = _results((yield format_tool_call("search", {"query": title, "k": 5}) + format_tool_call("open", {"doc_id": doc_id})))
            if doc_id not in [h["doc_id"] for h in hits]:
                raise OracleError(f"searching {title!r} does not find {doc_id!r} in the top 5")
            opened[doc_id] = article["text"]
        if index + 1 < len(titles) and titles[index + 1] not in opened[doc_id]:
            raise OracleError(f"article {doc_id!r} does not name the next entity {titles[index + 1]!r}")


class SearchQAOracle(ScriptedPolicy):
    """Reads the chain of articles and answers with the value as the last article writes it."""

    def script(self, env: Any) -> Script:
        task = env.task
        solution = task["solution"]
        opened: dict[str, str] = {}
        yield from _read_chain(solution["docs"], solution["titles"], opened)
        if solution["answer_text"] not in opened[solution["docs"][-1]]:
            raise OracleError(f"the last article does not contain the answer {solution['answer_text']!r}")
        yield format_tool_call("answer", {"text": solution["answer_text"]})


class ToolMathOracle(ScriptedPolicy):
    """Reads every fact's chain, computes with the calculator and rounds half-up as the question asks."""

    def script(self, env: Any) -> Script:
        task = env.task
        solution = task["solution"]
        opened: dict[str, str] = {}
        for fact in solution["facts"]:
            yield from _read_chain(fact["docs"], fact["titles"], opened)
            if fact["display"] not in opened[fact["docs"][-1]]:
                raise OracleError(f"article {fact['docs'][-1]!r} does not state {fact['display']!r}")
        (result,) = _results((yield format_tool_call("calculator", {"expression": solution["expression"]})))
        text = str(Decimal(result).quantize(Decimal(1).scaleb(-task["answer"]["decimals"]), rounding=ROUND_HALF_UP))
        yield format_tool_call("answer", {"text": text})


ORACLES = {"SQLEnv": SQLOracle, "SearchQAEnv": SearchQAOracle, "ToolMathEnv": ToolMathOracle}
