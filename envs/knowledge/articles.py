"""Encyclopedia-style articles, one per entity of the world, for full-text search.

Every fact of an entity's row is written out in its own article, and every relation is named
from the side that owns it (a film's article names its director and studio), so a chain of
relations can always be followed by reading one article per hop. Articles also list some
reverse relations (a city's notable people), which gives search realistic distractors.
Sentence variants are chosen by an RNG seeded with the document id: stable, and independent of
the order in which articles are rendered.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from agentgym.envs.knowledge.names import slugify
from agentgym.envs.knowledge.world import World

__all__ = ["ENTITY_TABLES", "display_value", "doc_id_of", "render_articles"]

# table -> the column holding the entity's display name
ENTITY_TABLES: dict[str, str] = {
    "countries": "name",
    "cities": "name",
    "universities": "name",
    "people": "name",
    "companies": "name",
    "works": "title",
    "awards": "name",
}
_YEAR_COLUMNS = frozenset({"founded_year", "birth_year", "year", "established_year"})
_LIST_LIMIT = 6
_VERB = {"film": ("directed by", "produced by"), "novel": ("written by", "published by"), "album": ("recorded by", "released by")}
_PLURAL = {"film": "films", "novel": "novels", "album": "albums"}


def doc_id_of(world: World, table: str, row_id: int) -> str:
    """The document id of an entity: the slug of its name (names are unique in the world)."""
    return slugify(world.get(table, row_id)[ENTITY_TABLES[table]])


def display_value(column: str, value: Any) -> str:
    """How an article writes a column's value: years plain, other numbers with thousands separators."""
    if isinstance(value, int | float) and column not in _YEAR_COLUMNS:
        return f"{value:,}"
    return str(value)


def render_articles(world: World) -> list[dict[str, Any]]:
    """One article per entity: ``{"doc_id", "entity_type", "entity_id", "title", "body"}``."""
    links = _Links(world)
    renderers: dict[str, Callable[[dict[str, Any], random.Random], str]] = {
        "countries": links.country,
        "cities": links.city,
        "universities": links.university,
        "people": links.person,
        "companies": links.company,
        "works": links.work,
        "awards": links.award,
    }
    articles = []
    for table, name_column in ENTITY_TABLES.items():
        for row in world.tables[table]:
            doc_id = slugify(row[name_column])
            body = renderers[table](row, random.Random(f"article:{doc_id}"))
            articles.append({"doc_id": doc_id, "entity_type": table, "entity_id": row["id"], "title": row[name_column], "body": body})
    return articles


def _names(rows: list[dict[str, Any]], column: str = "name") -> str:
    names = [r[column] for r in rows[:_LIST_LIMIT]]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class _Links:
    """Reverse indexes of the world's relations, and one renderer per entity type."""

    def __init__(self, world: World):
        self.w = world
        t = world.tables
        self.cities_of = _group(t["cities"], "country_id")
        self.born_in = _group(t["people"], "birth_city_id")
        self.hq_in = _group(t["companies"], "hq_city_id")
        self.universities_in = _group(t["universities"], "city_id")
        self.alumni = _group(t["people"], "university_id")
        self.founded_by = _group(t["companies"], "founder_id")
        self.led_by = _group(t["companies"], "ceo_id")
        self.created_by = _group(t["works"], "creator_id")
        self.published_by = _group(t["works"], "publisher_id")
        self.awards_of = _group(t["awards"], "country_id")
        self.wins_of_award = _group(t["award_winners"], "award_id")
        self.win_of_work = {w["work_id"]: w for w in t["award_winners"]}
        self.capital_of = {c["capital_city_id"]: c for c in t["countries"]}

    def _place(self, city_id: int) -> str:
        city = self.w.get("cities", city_id)
        return f"{city['name']}, {self.w.get('countries', city['country_id'])['name']}"

    def country(self, row: dict[str, Any], rng: random.Random) -> str:
        capital = self.w.get("cities", row["capital_city_id"])["name"]
        biggest = sorted(self.cities_of[row["id"]], key=lambda c: (-c["population"], c["id"]))
        parts = [
            f"{row['name']} is a country with a population of {row['population']:,} and a land area of {row['area_km2']:,} square kilometres.",
            rng.choice((f"It gained independence in {row['founded_year']}.", f"{row['name']} became independent in {row['founded_year']}.")),
            f"Its capital is {capital}, and its currency is the {row['currency']}.",
            f"Its largest cities are {_names(biggest)}.",
        ]
        if self.awards_of[row["id"]]:
            parts.append(f"Awards presented in {row['name']} include the {_names(self.awards_of[row['id']])}.")
        return " ".join(parts)

    def city(self, row: dict[str, Any], rng: random.Random) -> str:
        country = self.w.get("countries", row["country_id"])["name"]
        capital = " and its capital" if row["id"] in self.capital_of else ""
        parts = [
            f"{row['name']} is a city in {country}{capital}.",
            rng.choice(
                (
                    f"It has a population of {row['population']:,} and covers {row['area_km2']:,} square kilometres.",
                    f"The city covers {row['area_km2']:,} square kilometres and is home to {row['population']:,} people.",
                )
            ),
            f"It was founded in {row['founded_year']} and lies {row['elevation_m']:,} metres above sea level.",
        ]
        if self.universities_in[row["id"]]:
            parts.append(f"It is home to {_names(self.universities_in[row['id']])}.")
        if self.hq_in[row["id"]]:
            parts.append(f"Companies headquartered in {row['name']} include {_names(self.hq_in[row['id']])}.")
        if self.born_in[row["id"]]:
            parts.append(f"People born in {row['name']} include {_names(self.born_in[row['id']])}.")
        return " ".join(parts)

    def university(self, row: dict[str, Any], rng: random.Random) -> str:
        parts = [
            f"{row['name']} is a university in {self._place(row['city_id'])}.",
            rng.choice(
                (
                    f"Founded in {row['founded_year']}, it enrolls {row['students']:,} students.",
                    f"It was founded in {row['founded_year']} and has {row['students']:,} students.",
                )
            ),
        ]
        if self.alumni[row["id"]]:
            parts.append(f"Its alumni include {_names(self.alumni[row['id']])}.")
        return " ".join(parts)

    def person(self, row: dict[str, Any], rng: random.Random) -> str:
        surname = row["name"].split()[-1]
        parts = [f"{row['name']} (born {row['birth_year']}) is a {row['occupation']} born in {self._place(row['birth_city_id'])}."]
        if row["university_id"] is not None:
            university = self.w.get("universities", row["university_id"])["name"]
            parts.append(rng.choice((f"{surname} studied at {university}.", f"{surname} is a graduate of {university}.")))
        works = self.created_by[row["id"]]
        if works:
            listed = "; ".join(f"{w['title']} ({w['year']})" for w in works)
            parts.append(f"{surname}'s {_PLURAL[works[0]['kind']]} are {listed}.")
        for company in self.founded_by[row["id"]]:
            parts.append(f"{surname} founded {company['name']} in {company['founded_year']}.")
        for company in self.led_by[row["id"]]:
            parts.append(f"{surname} is the chief executive of {company['name']}.")
        return " ".join(parts)

    def company(self, row: dict[str, Any], rng: random.Random) -> str:
        founder = self.w.get("people", row["founder_id"])["name"]
        ceo = self.w.get("people", row["ceo_id"])["name"]
        parts = [
            f"{row['name']} is a {row['industry']} company founded in {row['founded_year']} by {founder}.",
            f"It is headquartered in {self._place(row['hq_city_id'])}, and its chief executive is {ceo}.",
            rng.choice(
                (
                    f"It reported annual revenue of {row['revenue_musd']:,} million US dollars and employs {row['employees']:,} people.",
                    f"The company employs {row['employees']:,} people; its annual revenue is {row['revenue_musd']:,} million US dollars.",
                )
            ),
        ]
        if self.published_by[row["id"]]:
            parts.append(f"Its catalogue includes {_names(self.published_by[row['id']], 'title')}.")
        return " ".join(parts)

    def work(self, row: dict[str, Any], rng: random.Random) -> str:
        creator = self.w.get("people", row["creator_id"])["name"]
        publisher = self.w.get("companies", row["publisher_id"])["name"]
        by, through = _VERB[row["kind"]]
        length = {
            "film": f"The film runs for {row['length']} minutes.",
            "novel": f"The novel has {row['length']} pages.",
            "album": f"The album contains {row['length']} tracks.",
        }[row["kind"]]
        parts = [
            f"{row['title']} is a {row['year']} {row['genre']} {row['kind']} {by} {creator}.",
            rng.choice((f"It was {through} {publisher}.", f"{publisher} handled its release.")),
            length,
        ]
        win = self.win_of_work.get(row["id"])
        if win is not None:
            parts.append(f"It won the {self.w.get('awards', win['award_id'])['name']} in {win['year']}.")
        return " ".join(parts)

    def award(self, row: dict[str, Any], rng: random.Random) -> str:
        country = self.w.get("countries", row["country_id"])["name"]
        parts = [f"The {row['name']} is an award for {_PLURAL[row['kind']]}, presented in {country} since {row['established_year']}."]
        wins = self.wins_of_award[row["id"]]
        if wins:
            listed = "; ".join(f"{w['year']}: {self.w.get('works', w['work_id'])['title']}" for w in wins)
            parts.append(f"Winners by year: {listed}.")
        return " ".join(parts)


def _group(rows: list[dict[str, Any]], key: str) -> defaultdict[Any, list[dict[str, Any]]]:
    groups: defaultdict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row[key] is not None:
            groups[row[key]].append(row)
    return groups
