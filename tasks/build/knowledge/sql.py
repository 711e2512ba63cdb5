"""SQL-v0 tasks: questions answered by querying the snapshot's tables.

Each template pairs a question with a reference query; the answer is whatever the reference query
returns through the same guarded executor the agent uses (so every reference query is known to run
within the agent's limits). Easy templates read one table, medium ones join or aggregate once, hard
ones join three or more tables or group and rank. "Which ... the most" questions fetch the top two
rows and are kept only when the first strictly beats the second, so the answer is unique. Counting
questions are kept only when the count is positive, so "0" is never a free answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym.envs.knowledge.sql_tool import ReadOnlySQL
from agentgym.envs.knowledge.world import World

__all__ = ["SQL_TEMPLATES", "SqlTemplate", "sql_tasks"]

TASKS_PER_DIFFICULTY = 200
_LENGTH_QUESTION = {
    "film": "How long is the film {title}, in minutes?",
    "novel": "How many pages does the novel {title} have?",
    "album": "How many tracks does the album {title} contain?",
}


@dataclass(frozen=True)
class SqlTemplate:
    """A question/query pair with a parameter sampler.

    Attributes:
        name: short id.
        difficulty: easy, medium or hard.
        kind: answer type: ``number`` (first cell), ``text`` (first cell, ranked: unique top
            checked on the second column) or ``list`` (first column of every row).
        sample: draws the parameters (a dict of strings and numbers) from the world.
        question: text with the parameters' ``{names}``.
        sql: the reference query with the same ``{names}`` (text parameters are quoted for you).
        decimals: rounding of a numeric answer (tolerance one unit of the last decimal), or ``None``.
    """

    name: str
    difficulty: str
    kind: str
    sample: Callable[[random.Random, World], dict[str, Any]]
    question: str
    sql: str
    decimals: int | None = None


def _pick(table: str, column: str = "name") -> Callable[[random.Random, World], Any]:
    return lambda rng, world: rng.choice(world.tables[table])[column]


def _work(rng: random.Random, world: World) -> dict[str, Any]:
    work = rng.choice(world.tables["works"])
    return {"title": work["title"], "kind": work["kind"], "year": work["year"]}


def _winning_work(rng: random.Random, world: World) -> dict[str, Any]:
    work = world.get("works", rng.choice(world.tables["award_winners"])["work_id"])
    return {"title": work["title"], "kind": work["kind"]}


def _industry(rng: random.Random, world: World) -> dict[str, Any]:
    return {"industry": rng.choice(sorted({c["industry"] for c in world.tables["companies"]}))}


def _years(rng: random.Random, world: World) -> dict[str, Any]:
    start = rng.randrange(1890, 1980)
    occupation = rng.choice(sorted({p["occupation"] for p in world.tables["people"]}))
    return {"occupation": occupation, "start": start, "end": start + rng.choice((5, 10, 20))}


def _award_span(rng: random.Random, world: World) -> dict[str, Any]:
    award = rng.choice(world.tables["awards"])
    start = rng.randrange(award["established_year"], 2020)
    return {"award": award["name"], "start": start, "end": start + rng.choice((5, 10, 15))}


SQL_TEMPLATES: tuple[SqlTemplate, ...] = (
    # ---- easy: one table
    SqlTemplate(
        "city_population",
        "easy",
        "number",
        lambda r, w: {"city": _pick("cities")(r, w)},
        "What is the population of the city of {city}?",
        "SELECT population FROM cities WHERE name = {city}",
    ),
    SqlTemplate(
        "company_founded",
        "easy",
        "number",
        lambda r, w: {"company": _pick("companies")(r, w)},
        "In what year was the company {company} founded?",
        "SELECT founded_year FROM companies WHERE name = {company}",
    ),
    SqlTemplate(
        "works_in_year",
        "easy",
        "number",
        _work,
        "How many {kind}s in the database were released in {year}?",
        "SELECT COUNT(*) FROM works WHERE kind = {kind} AND year = {year}",
    ),
    SqlTemplate(
        "people_born_between",
        "easy",
        "number",
        _years,
        "How many people whose occupation is {occupation} were born between {start} and {end}, inclusive?",
        "SELECT COUNT(*) FROM people WHERE occupation = {occupation} AND birth_year BETWEEN {start} AND {end}",
    ),
    SqlTemplate(
        "industry_revenue",
        "easy",
        "number",
        _industry,
        "What is the total annual revenue, in millions of US dollars, of all companies in the {industry} industry? Round to 1 decimal place.",
        "SELECT ROUND(SUM(revenue_musd), 1) FROM companies WHERE industry = {industry}",
        1,
    ),
    SqlTemplate(
        "industry_top_employer",
        "easy",
        "text",
        _industry,
        "Which company in the {industry} industry has the most employees?",
        "SELECT name, employees FROM companies WHERE industry = {industry} ORDER BY employees DESC LIMIT 2",
    ),
    SqlTemplate("work_length", "easy", "number", _work, "{length_question}", "SELECT length FROM works WHERE title = {title}"),
    SqlTemplate(
        "university_students",
        "easy",
        "number",
        lambda r, w: {"university": _pick("universities")(r, w)},
        "How many students does {university} enroll?",
        "SELECT students FROM universities WHERE name = {university}",
    ),
    # ---- medium: one join or one aggregate over a filtered set
    SqlTemplate(
        "capital_of",
        "medium",
        "text",
        lambda r, w: {"country": _pick("countries")(r, w)},
        "What is the capital of {country}?",
        "SELECT ci.name FROM countries AS co JOIN cities AS ci ON ci.id = co.capital_city_id WHERE co.name = {country}",
    ),
    SqlTemplate(
        "creator_of",
        "medium",
        "text",
        _work,
        "Who made the {kind} {title}? Give the full name.",
        "SELECT p.name FROM works AS w JOIN people AS p ON p.id = w.creator_id WHERE w.title = {title}",
    ),
    SqlTemplate(
        "companies_in_country",
        "medium",
        "number",
        lambda r, w: {"country": _pick("countries")(r, w)},
        "How many companies are headquartered in {country}?",
        "SELECT COUNT(*) FROM companies AS c JOIN cities AS ci ON ci.id = c.hq_city_id JOIN countries AS co ON co.id = ci.country_id WHERE co.name = {country}",
    ),
    SqlTemplate(
        "average_city_population",
        "medium",
        "number",
        lambda r, w: {"country": _pick("countries")(r, w)},
        "What is the average population of the cities of {country} in the database? Round to the nearest whole number.",
        "SELECT ROUND(AVG(ci.population)) FROM cities AS ci JOIN countries AS co ON co.id = ci.country_id WHERE co.name = {country}",
        0,
    ),
    SqlTemplate(
        "catalogue",
        "medium",
        "list",
        lambda r, w: {"company": _pick("companies")(r, w)},
        "List the titles of all works released by {company}, separated by commas.",
        "SELECT w.title FROM works AS w JOIN companies AS c ON c.id = w.publisher_id WHERE c.name = {company} ORDER BY w.title",
    ),
    SqlTemplate(
        "award_of_work",
        "medium",
        "text",
        _winning_work,
        "Which award did the {kind} {title} win?",
        "SELECT a.name FROM award_winners AS aw JOIN awards AS a ON a.id = aw.award_id JOIN works AS w ON w.id = aw.work_id WHERE w.title = {title}",
    ),
    SqlTemplate(
        "largest_city",
        "medium",
        "text",
        lambda r, w: {"country": _pick("countries")(r, w)},
        "Which city of {country} has the largest population?",
        "SELECT ci.name, ci.population FROM cities AS ci JOIN countries AS co ON co.id = ci.country_id WHERE co.name = {country} ORDER BY ci.population DESC LIMIT 2",
    ),
    # ---- hard: three or more tables, or grouping and ranking
    SqlTemplate(
        "works_by_birth_country",
        "hard",
        "number",
        lambda r, w: {"country": _pick("countries")(r, w)},
        "How many works in the database were made by people born in {country}?",
        "SELECT COUNT(*) FROM works AS w JOIN people AS p ON p.id = w.creator_id JOIN cities AS ci ON ci.id = p.birth_city_id "
        "JOIN countries AS co ON co.id = ci.country_id WHERE co.name = {country}",
    ),
    SqlTemplate(
        "top_country_for_industry",
        "hard",
        "text",
        _industry,
        "Which country has the most companies of the {industry} industry headquartered in it?",
        "SELECT co.name, COUNT(*) AS n FROM companies AS c JOIN cities AS ci ON ci.id = c.hq_city_id JOIN countries AS co ON co.id = ci.country_id "
        "WHERE c.industry = {industry} GROUP BY co.id ORDER BY n DESC LIMIT 2",
    ),
    SqlTemplate(
        "alumni_employees",
        "hard",
        "number",
        lambda r, w: {"university": _pick("universities")(r, w)},
        "What is the total number of employees of all companies founded by people who studied at {university}?",
        "SELECT SUM(c.employees) FROM companies AS c JOIN people AS p ON p.id = c.founder_id JOIN universities AS u ON u.id = p.university_id "
        "WHERE u.name = {university}",
    ),
    SqlTemplate(
        "company_award_wins",
        "hard",
        "number",
        lambda r, w: {"company": _pick("companies")(r, w)},
        "How many award wins have the works released by {company} received in total?",
        "SELECT COUNT(*) FROM award_winners AS aw JOIN works AS w ON w.id = aw.work_id JOIN companies AS c ON c.id = w.publisher_id WHERE c.name = {company}",
    ),
    SqlTemplate(
        "earliest_born_winner",
        "hard",
        "text",
        lambda r, w: {"award": _pick("awards")(r, w)},
        "Among the creators of the works that won the {award}, who was born earliest? Give the full name.",
        "SELECT p.name, p.birth_year FROM award_winners AS aw JOIN awards AS a ON a.id = aw.award_id JOIN works AS w ON w.id = aw.work_id "
        "JOIN people AS p ON p.id = w.creator_id WHERE a.name = {award} ORDER BY p.birth_year LIMIT 2",
    ),
    SqlTemplate(
        "local_ceos",
        "hard",
        "number",
        lambda r, w: {"country": _pick("countries")(r, w)},
        "How many companies headquartered in {country} have a chief executive who was born in {country}?",
        "SELECT COUNT(*) FROM companies AS c JOIN cities AS hq ON hq.id = c.hq_city_id JOIN people AS p ON p.id = c.ceo_id "
        "JOIN cities AS bc ON bc.id = p.birth_city_id JOIN countries AS co ON co.id = hq.country_id "
        "WHERE co.name = {country} AND bc.country_id = co.id",
    ),
    SqlTemplate(
        "award_winners_between",
        "hard",
        "list",
        _award_span,
        "List the titles of the works that won the {award} from {start} to {end}, inclusive, separated by commas.",
        "SELECT w.title FROM award_winners AS aw JOIN awards AS a ON a.id = aw.award_id JOIN works AS w ON w.id = aw.work_id "
        "WHERE a.name = {award} AND aw.year BETWEEN {start} AND {end} ORDER BY aw.year",
    ),
)


def sql_tasks(world: World, rng: random.Random, runner: ReadOnlySQL) -> list[dict[str, Any]]:
    """``TASKS_PER_DIFFICULTY`` distinct tasks per difficulty, answered with ``runner`` (no ids yet)."""
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for difficulty in ("easy", "medium", "hard"):
        templates = [t for t in SQL_TEMPLATES if t.difficulty == difficulty]
        made = 0
        while made < TASKS_PER_DIFFICULTY:
            template = rng.choice(templates)
            task = _task(template, template.sample(rng, world), runner)
            if task is None or task["question"] in seen:
                continue
            seen.add(task["question"])
            tasks.append(task)
            made += 1
    return tasks


def _task(template: SqlTemplate, params: dict[str, Any], runner: ReadOnlySQL) -> dict[str, Any] | None:
    if template.name == "work_length":
        params = params | {"length_question": _LENGTH_QUESTION[params["kind"]].format(title=params["title"])}
    quoted = {k: "'" + v.replace("'", "''") + "'" if isinstance(v, str) else v for k, v in params.items()}
    sql = template.sql.format(**quoted)
    rows = runner.run(sql)["rows"]
    if template.kind == "list":
        if not 1 <= len(rows) <= 8:  # a long list is a chore, not a harder question
            return None
        answer: dict[str, Any] = {"type": "list", "value": [r[0] for r in rows]}
    elif not rows or rows[0][0] is None:
        return None
    elif template.kind == "text":
        if len(rows) > 1 and len(rows[0]) > 1 and rows[0][1] == rows[1][1]:
            return None  # a tie: the question would have two right answers
        answer = {"type": "text", "value": rows[0][0]}
    else:
        if rows[0][0] == 0 and "COUNT" in sql:
            return None
        tolerance = 10.0**-template.decimals if template.decimals is not None else 0.0
        answer = {"type": "number", "value": rows[0][0], "tolerance": tolerance}
    return {
        "difficulty": template.difficulty,
        "template": template.name,
        "question": template.question.format(**params),
        "answer": answer,
        "solution": {"sql": sql},
    }
