"""The synthetic world: invented countries, cities, universities, people, companies, works and awards.

Everything is drawn from one ``random.Random(seed)`` in a fixed order, so the same seed and
``GENERATOR_VERSION`` always give the same rows. Facts are internally consistent (a film is made
after its director turns 20 by a studio that already exists; a country's population includes its
cities') so that multi-hop questions have exactly one right answer.

Rows are plain JSON-ready dicts; :data:`TABLES` describes the columns, which the SQL environment
shows to the agent and the snapshot builder turns into SQLite tables.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.knowledge.names import NameForge

__all__ = ["FOREIGN_KEYS", "GENERATOR_VERSION", "TABLES", "WORLD_SEED", "Column", "World", "generate_world"]

# Bump when generation changes in any way: the snapshot cache is keyed by it.
GENERATOR_VERSION = 1
WORLD_SEED = 20250101
LAST_YEAR = 2023  # the world's "present": no fact is dated after it


@dataclass(frozen=True)
class Column:
    """A table column: name, SQLite type and the description shown to the agent; ``note`` is what the
    compact schema keeps of the description, for columns whose name alone leaves the values unclear."""

    name: str
    type: str
    description: str
    note: str = ""


_OCCUPATION_NOTE = "director, novelist, musician, entrepreneur, scientist, architect or economist"
_WORK_KIND_NOTE = "'film', 'novel' or 'album'"
_INDUSTRY_NOTE = "e.g. 'film studio', 'publishing', 'record label', 'mining'"

TABLES: dict[str, tuple[Column, ...]] = {
    "countries": (
        Column("id", "INTEGER", "primary key"),
        Column("name", "TEXT", "country name"),
        Column("capital_city_id", "INTEGER", "the capital (cities.id)"),
        Column("population", "INTEGER", "total population, cities and countryside"),
        Column("area_km2", "INTEGER", "land area in square kilometres"),
        Column("founded_year", "INTEGER", "year of independence", note="year of independence"),
        Column("currency", "TEXT", "name of the currency"),
    ),
    "cities": (
        Column("id", "INTEGER", "primary key"),
        Column("name", "TEXT", "city name"),
        Column("country_id", "INTEGER", "the country the city lies in (countries.id)"),
        Column("population", "INTEGER", "population of the city"),
        Column("area_km2", "INTEGER", "area in square kilometres"),
        Column("founded_year", "INTEGER", "year the city was founded"),
        Column("elevation_m", "INTEGER", "elevation above sea level in metres"),
    ),
    "universities": (
        Column("id", "INTEGER", "primary key"),
        Column("name", "TEXT", "university name"),
        Column("city_id", "INTEGER", "where it is located (cities.id)"),
        Column("founded_year", "INTEGER", "year founded"),
        Column("students", "INTEGER", "number of enrolled students"),
    ),
    "people": (
        Column("id", "INTEGER", "primary key"),
        Column("name", "TEXT", "full name"),
        Column("birth_year", "INTEGER", "year of birth"),
        Column("birth_city_id", "INTEGER", "city of birth (cities.id)"),
        Column("occupation", "TEXT", _OCCUPATION_NOTE, note=_OCCUPATION_NOTE),
        Column("university_id", "INTEGER", "university attended (universities.id), NULL if none", note="NULL if none"),
    ),
    "companies": (
        Column("id", "INTEGER", "primary key"),
        Column("name", "TEXT", "company name"),
        Column("industry", "TEXT", "industry, " + _INDUSTRY_NOTE, note=_INDUSTRY_NOTE),
        Column("founded_year", "INTEGER", "year founded"),
        Column("hq_city_id", "INTEGER", "city of the headquarters (cities.id)"),
        Column("founder_id", "INTEGER", "founder (people.id)"),
        Column("ceo_id", "INTEGER", "current chief executive (people.id)"),
        Column("revenue_musd", "REAL", "annual revenue in millions of US dollars", note="millions of US dollars"),
        Column("employees", "INTEGER", "number of employees"),
    ),
    "works": (
        Column("id", "INTEGER", "primary key"),
        Column("title", "TEXT", "title of the work"),
        Column("kind", "TEXT", _WORK_KIND_NOTE, note=_WORK_KIND_NOTE),
        Column("genre", "TEXT", "genre"),
        Column("year", "INTEGER", "year of release or publication"),
        Column("creator_id", "INTEGER", "director, author or recording artist (people.id)", note="director, author or recording artist"),
        Column("publisher_id", "INTEGER", "studio, publisher or record label (companies.id)"),
        Column(
            "length", "INTEGER", "runtime in minutes (film), pages (novel) or number of tracks (album)", note="minutes (film), pages (novel) or tracks (album)"
        ),
    ),
    "awards": (
        Column("id", "INTEGER", "primary key"),
        Column("name", "TEXT", "award name"),
        Column("kind", "TEXT", "kind of work it honours: " + _WORK_KIND_NOTE, note=_WORK_KIND_NOTE),
        Column("country_id", "INTEGER", "country that presents it (countries.id)"),
        Column("established_year", "INTEGER", "year of the first ceremony"),
    ),
    "award_winners": (
        Column("award_id", "INTEGER", "the award (awards.id)"),
        Column("year", "INTEGER", "ceremony year"),
        Column("work_id", "INTEGER", "the winning work (works.id)"),
    ),
}

FOREIGN_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "countries": (("capital_city_id", "cities"),),
    "cities": (("country_id", "countries"),),
    "universities": (("city_id", "cities"),),
    "people": (("birth_city_id", "cities"), ("university_id", "universities")),
    "companies": (("hq_city_id", "cities"), ("founder_id", "people"), ("ceo_id", "people")),
    "works": (("creator_id", "people"), ("publisher_id", "companies")),
    "awards": (("country_id", "countries"),),
    "award_winners": (("award_id", "awards"), ("work_id", "works")),
}

# kind -> (creator occupation, publisher industry, company-name suffixes, genres, length range)
_WORK_KINDS: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[int, int]]] = {
    "film": (
        "director",
        "film studio",
        ("Pictures", "Studios", "Films"),
        ("drama", "comedy", "thriller", "documentary", "western", "science fiction"),
        (72, 190),
    ),
    "novel": (
        "novelist",
        "publishing",
        ("Press", "Books", "Publishing"),
        ("literary fiction", "mystery", "historical fiction", "fantasy", "romance", "satire"),
        (140, 920),
    ),
    "album": ("musician", "record label", ("Records", "Music", "Sound"), ("jazz", "folk", "rock", "electronic", "classical", "hip hop"), (6, 22)),
}
OTHER_INDUSTRIES: dict[str, tuple[str, ...]] = {
    "shipping": ("Shipping", "Lines"),
    "mining": ("Mining", "Minerals"),
    "software": ("Systems", "Software"),
    "banking": ("Bank", "Capital"),
    "aerospace": ("Aerospace", "Aviation"),
    "textiles": ("Textiles", "Mills"),
    "energy": ("Energy", "Power"),
}
_OCCUPATIONS = ("director", "novelist", "musician", "entrepreneur", "scientist", "architect", "economist")
AWARD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "film": ("Golden {word} Award", "{word} Film Prize", "{word} Screen Medal"),
    "novel": ("{word} Prize for Fiction", "{word} Literary Award", "{word} Book Medal"),
    "album": ("{word} Music Prize", "{word} Record of the Year", "Silver {word} Award"),
}
CURRENCY_UNITS = ("crown", "mark", "florin", "dinar", "sol", "real", "taler", "lira")

N_COUNTRIES = 24
CITIES_PER_COUNTRY = (6, 11)
N_UNIVERSITIES = 40
N_PEOPLE = 900
N_COMPANIES = 260
N_WORKS = 720
AWARDS_PER_KIND = 6


@dataclass
class World:
    """The generated rows by table name, with id indexes for the relations between them."""

    tables: dict[str, list[dict[str, Any]]]
    by_id: dict[str, dict[int, dict[str, Any]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {name: {row["id"]: row for row in rows} for name, rows in self.tables.items() if name != "award_winners"}

    def get(self, table: str, row_id: int) -> dict[str, Any]:
        """The row of ``table`` with primary key ``row_id``."""
        return self.by_id[table][row_id]


def generate_world(seed: int = WORLD_SEED) -> World:
    """Generate the whole world from ``seed`` (about 2,200 entities, in well under a second)."""
    rng = random.Random(seed)
    forge = NameForge(rng)
    countries, cities = _places(rng, forge)
    universities = _universities(rng, forge, cities)
    people = _people(rng, forge, cities, universities)
    companies = _companies(rng, forge, cities, people)
    works = _works(rng, forge, people, companies)
    awards, winners = _awards(rng, forge, countries, works)
    return World(
        tables={
            "countries": countries,
            "cities": cities,
            "universities": universities,
            "people": people,
            "companies": companies,
            "works": works,
            "awards": awards,
            "award_winners": winners,
        }
    )


def _places(rng: random.Random, forge: NameForge) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    countries: list[dict[str, Any]] = []
    cities: list[dict[str, Any]] = []
    for country_id in range(1, N_COUNTRIES + 1):
        country_name = forge.country()
        founded = rng.randrange(1200, 1990)
        own: list[dict[str, Any]] = []
        for _ in range(rng.randint(*CITIES_PER_COUNTRY)):
            city = {
                "id": len(cities) + 1,
                "name": forge.city(),
                "country_id": country_id,
                # log-uniform sizes give a few large cities and many small towns, as in reality
                "population": int(round(10 ** rng.uniform(4.3, 6.8), -2)),
                "area_km2": rng.randrange(12, 2400),
                "founded_year": rng.randrange(600, 1950),
                "elevation_m": rng.randrange(0, 2900),
            }
            cities.append(city)
            own.append(city)
        urban = sum(c["population"] for c in own)
        countries.append(
            {
                "id": country_id,
                "name": country_name,
                "capital_city_id": rng.choice(own)["id"],
                "population": urban + int(round(urban * rng.uniform(0.2, 1.5), -3)),
                "area_km2": rng.randrange(8_000, 1_500_000),
                "founded_year": founded,
                "currency": f"{country_name.rstrip('aeiou')}ian {rng.choice(CURRENCY_UNITS)}",
            }
        )
    return countries, cities


def _universities(rng: random.Random, forge: NameForge, cities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for city in sorted(rng.sample(cities, N_UNIVERSITIES), key=lambda c: c["id"]):
        name = forge.named(f"University of {city['name']}") if rng.random() < 0.5 else forge.named("{word} Institute of Technology")
        rows.append(
            {
                "id": len(rows) + 1,
                "name": name,
                "city_id": city["id"],
                "founded_year": rng.randrange(max(city["founded_year"], 1100), 1990),
                "students": rng.randrange(1_500, 60_000),
            }
        )
    return rows


def _people(rng: random.Random, forge: NameForge, cities: list[dict[str, Any]], universities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for person_id in range(1, N_PEOPLE + 1):
        rows.append(
            {
                "id": person_id,
                "name": forge.person(),
                "birth_year": rng.randrange(1890, 1996),
                "birth_city_id": rng.choice(cities)["id"],
                "occupation": _OCCUPATIONS[(person_id - 1) % len(_OCCUPATIONS)],
                "university_id": rng.choice(universities)["id"] if rng.random() < 0.85 else None,
            }
        )
    return rows


def _companies(rng: random.Random, forge: NameForge, cities: list[dict[str, Any]], people: list[dict[str, Any]]) -> list[dict[str, Any]]:
    industries = [(spec[1], spec[2]) for spec in _WORK_KINDS.values()] + list(OTHER_INDUSTRIES.items())
    leaders = [p for p in people if p["occupation"] in ("entrepreneur", "economist", "scientist")]
    rows = []
    for company_id in range(1, N_COMPANIES + 1):
        # the creative industries come first and twice as often: works need publishers
        half = (company_id - 1) // 2
        industry, suffixes = industries[half % len(industries)] if company_id % 2 else industries[half % len(_WORK_KINDS)]
        founder = rng.choice(leaders)
        ceo = rng.choice([p for p in leaders if p["id"] != founder["id"]])
        rows.append(
            {
                "id": company_id,
                "name": forge.company(rng.choice(suffixes)),
                "industry": industry,
                "founded_year": min(founder["birth_year"] + rng.randrange(20, 55), LAST_YEAR - 1),
                "hq_city_id": rng.choice(cities)["id"],
                "founder_id": founder["id"],
                "ceo_id": ceo["id"],
                "revenue_musd": round(10 ** rng.uniform(0.5, 4.5), 1),
                "employees": int(10 ** rng.uniform(1.2, 5.2)),
            }
        )
    return rows


def _works(rng: random.Random, forge: NameForge, people: list[dict[str, Any]], companies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = list(_WORK_KINDS)
    creators = {kind: [p for p in people if p["occupation"] == spec[0] and p["birth_year"] + 20 < LAST_YEAR] for kind, spec in _WORK_KINDS.items()}
    rows = []
    for work_id in range(1, N_WORKS + 1):
        kind = kinds[(work_id - 1) % len(kinds)]
        _, industry, _, genres, (low, high) = _WORK_KINDS[kind]
        first_publisher = min(c["founded_year"] for c in companies if c["industry"] == industry)
        while True:  # a creator active before any publisher of the kind existed is redrawn
            creator = rng.choice(creators[kind])
            start = max(creator["birth_year"] + 20, first_publisher)
            end = min(creator["birth_year"] + 80, LAST_YEAR)
            if start <= end:
                break
        year = rng.randrange(start, end + 1)
        publishers = [c for c in companies if c["industry"] == industry and c["founded_year"] <= year]
        rows.append(
            {
                "id": work_id,
                "title": forge.title(),
                "kind": kind,
                "genre": rng.choice(genres),
                "year": year,
                "creator_id": creator["id"],
                "publisher_id": rng.choice(publishers)["id"],
                "length": rng.randrange(low, high + 1),
            }
        )
    return rows


def _awards(
    rng: random.Random, forge: NameForge, countries: list[dict[str, Any]], works: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    awards: list[dict[str, Any]] = []
    for kind, templates in AWARD_TEMPLATES.items():
        for index in range(AWARDS_PER_KIND):
            awards.append(
                {
                    "id": len(awards) + 1,
                    "name": forge.named(templates[index % len(templates)]),
                    "kind": kind,
                    "country_id": rng.choice(countries)["id"],
                    "established_year": rng.randrange(1930, 1990),
                }
            )
    taken: set[tuple[int, int]] = set()
    winners = []
    for work in works:
        if rng.random() >= 0.5:
            continue
        ceremony = work["year"] + 1
        # each work wins at most once and each (award, year) has one winner, so "the film that won
        # X in Y" names exactly one work
        options = [a for a in awards if a["kind"] == work["kind"] and a["established_year"] <= ceremony and (a["id"], ceremony) not in taken]
        if ceremony > LAST_YEAR or not options:
            continue
        award = rng.choice(options)
        taken.add((award["id"], ceremony))
        winners.append({"award_id": award["id"], "year": ceremony, "work_id": work["id"]})
    winners.sort(key=lambda w: (w["award_id"], w["year"]))
    return awards, winners
