"""ToolMath-v0 tasks: arithmetic over facts that must first be found in the articles.

A template names the entities it needs (slots), the facts it reads from them (a column of the
slot's entity, or of an entity one or two hops further), a formula, and a rounding rule. Slots are
named directly or described through a short multi-hop walk, which sets the difficulty together
with the number of facts: easy reads at most two documents, medium needs 2-3 hops in all, hard
4 or more hops or three facts behind hops.

The reference value is computed exactly with fractions and rounded half-up; the tolerance is one
unit of the last requested decimal (so a model's half-even rounding is not punished), or zero for
whole-number answers such as ages.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from agentgym.envs.knowledge.articles import display_value
from agentgym.envs.knowledge.world import World
from agentgym.tasks.build.knowledge.relations import Walk, describe_nested, extend, random_walk

__all__ = ["TEMPLATES", "MathTemplate", "math_tasks", "round_half_up"]

TASKS_PER_DIFFICULTY = 200


@dataclass(frozen=True)
class MathTemplate:
    """One kind of computation.

    Attributes:
        name: short id of the template.
        slots: the table of each entity the question names or describes.
        facts: ``(slot index, extra hops from the slot, column)`` per number read.
        question: text with ``{s0}``, ``{s1}``... for the slots' descriptions.
        formula: the exact computation over the facts.
        expression: the same computation as calculator text over ``{f0}``, ``{f1}``...
        decimals: decimals to round to, or ``None`` for an exact whole number.
    """

    name: str
    slots: tuple[str, ...]
    facts: tuple[tuple[int, tuple[str, ...], str], ...]
    question: str
    formula: Callable[..., Fraction]
    expression: str
    decimals: int | None


TEMPLATES: tuple[MathTemplate, ...] = (
    MathTemplate(
        "population_ratio",
        ("cities", "cities"),
        ((0, (), "population"), (1, (), "population")),
        "What is the population of {s0} divided by the population of {s1}?",
        lambda a, b: a / b,
        "{f0} / {f1}",
        2,
    ),
    MathTemplate(
        "country_ratio",
        ("countries", "countries"),
        ((0, (), "population"), (1, (), "population")),
        "What is the population of {s0} divided by the population of {s1}?",
        lambda a, b: a / b,
        "{f0} / {f1}",
        3,
    ),
    MathTemplate(
        "density",
        ("countries",),
        ((0, (), "population"), (0, (), "area_km2")),
        "What is the population density of {s0}, in people per square kilometre (population divided by land area)?",
        lambda p, a: p / a,
        "{f0} / {f1}",
        1,
    ),
    MathTemplate(
        "age_at_release",
        ("works",),
        ((0, (), "year"), (0, ("creator",), "birth_year")),
        "How old was the creator of {s0} in the year it was released (release year minus birth year)?",
        lambda y, b: y - b,
        "{f0} - {f1}",
        None,
    ),
    MathTemplate(
        "capital_share",
        ("countries",),
        ((0, ("capital",), "population"), (0, (), "population")),
        "What percentage of the population of {s0} lives in its capital?",
        lambda c, p: 100 * c / p,
        "100 * {f0} / {f1}",
        1,
    ),
    MathTemplate(
        "founder_age",
        ("companies",),
        ((0, (), "founded_year"), (0, ("founder",), "birth_year")),
        "How old was the founder of {s0} in the year the company was founded (founding year minus birth year)?",
        lambda f, b: f - b,
        "{f0} - {f1}",
        None,
    ),
    MathTemplate(
        "revenue_per_employee",
        ("companies",),
        ((0, (), "revenue_musd"), (0, (), "employees")),
        "What is the annual revenue per employee of {s0}, in US dollars?",
        lambda r, e: r * 1_000_000 / e,
        "{f0} * 1000000 / {f1}",
        0,
    ),
    MathTemplate(
        "students_per_1000",
        ("universities",),
        ((0, (), "students"), (0, ("campus",), "population")),
        "How many students does {s0} have per 1,000 residents of the city where it is located?",
        lambda s, p: 1000 * s / p,
        "1000 * {f0} / {f1}",
        2,
    ),
    MathTemplate(
        "combined_minus",
        ("cities", "cities", "cities"),
        ((0, (), "population"), (1, (), "population"), (2, (), "population")),
        "What is the combined population of {s0} and {s1}, minus the population of {s2}?",
        lambda a, b, c: a + b - c,
        "{f0} + {f1} - {f2}",
        None,
    ),
    MathTemplate(
        "mean_elevation",
        ("cities", "cities", "cities"),
        ((0, (), "elevation_m"), (1, (), "elevation_m"), (2, (), "elevation_m")),
        "What is the average elevation above sea level of {s0}, {s1} and {s2}, in metres?",
        lambda a, b, c: (a + b + c) / 3,
        "({f0} + {f1} + {f2}) / 3",
        1,
    ),
    MathTemplate(
        "employee_gap",
        ("companies", "companies"),
        ((0, (), "employees"), (1, (), "employees")),
        "How many more people does {s0} employ than {s1}? (Give a negative number if it employs fewer.)",
        lambda a, b: a - b,
        "{f0} - {f1}",
        None,
    ),
    MathTemplate(
        "growth",
        ("cities",),
        ((0, (), "population"),),
        "If the population of {s0} grew by 3% every year for 10 years, what would it be?",
        lambda p: p * Fraction(103, 100) ** 10,
        "{f0} * 1.03 ** 10",
        0,
    ),
)


def round_half_up(value: Fraction, decimals: int) -> str:
    """``value`` rounded half-up to ``decimals`` places, as text (``"58.88"``, ``"1204"``)."""
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return str(exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def math_tasks(world: World, rng: random.Random) -> list[dict[str, Any]]:
    """``TASKS_PER_DIFFICULTY`` distinct tasks per difficulty, in generation order (no ids yet)."""
    quotas = {"easy": TASKS_PER_DIFFICULTY, "medium": TASKS_PER_DIFFICULTY, "hard": TASKS_PER_DIFFICULTY}
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    while any(quotas.values()):
        template = rng.choice(TEMPLATES)
        wanted = rng.choice([d for d, left in quotas.items() if left])
        walks = _slot_walks(rng, world, template, wanted)
        if walks is None:
            continue
        task = _task(world, template, walks)
        if task["difficulty"] != wanted or task["question"] in seen or task.pop("degenerate"):
            continue
        seen.add(task["question"])
        quotas[wanted] -= 1
        tasks.append(task)
    return tasks


def _slot_walks(rng: random.Random, world: World, template: MathTemplate, difficulty: str) -> list[Walk] | None:
    """A walk per slot: plain names for easy tasks, one or more described slots for harder ones."""
    hop_budget = {"easy": [0] * len(template.slots), "medium": [rng.randint(1, 2)], "hard": [rng.randint(2, 3), rng.randint(1, 3)]}[difficulty]
    walks = []
    for index, table in enumerate(template.slots):
        hops = hop_budget[index] if index < len(hop_budget) else 0
        walk = _walk_to(rng, world, table, hops)
        if walk is None:
            return None
        walks.append(walk)
    return walks


def _walk_to(rng: random.Random, world: World, table: str, hops: int) -> Walk | None:
    if hops == 0:
        return Walk(((table, rng.choice(world.tables[table])["id"]),), (), None)
    for _ in range(200):  # rejection sampling: walks are cheap and most tables are reachable
        walk = random_walk(rng, world, hops)
        if walk is not None and walk.end[0] == table and walk.hop_count == hops:
            return walk
    return None


def _task(world: World, template: MathTemplate, walks: list[Walk]) -> dict[str, Any]:
    fact_walks = [extend(world, walks[slot], extra) for slot, extra, _ in template.facts]
    values = [world.get(*walk.end)[column] for walk, (_, _, column) in zip(fact_walks, template.facts, strict=False)]
    exact = template.formula(*(Fraction(str(v)) for v in values))
    hops = sum(w.hop_count for w in walks) + sum(len(extra) for _, extra, _ in template.facts)
    reads = len({doc for w in fact_walks for doc in w.doc_path(world)})
    difficulty = "easy" if reads <= 2 and hops <= 1 else "medium" if hops <= 3 else "hard"
    if template.decimals is None:
        if exact.denominator != 1:
            raise AssertionError(f"template {template.name} must give whole numbers")
        value, tolerance, rule = str(exact.numerator), 0.0, "Give the exact whole number."
    else:
        value = round_half_up(exact, template.decimals)
        tolerance = float(Decimal(1).scaleb(-template.decimals))
        unit = "the nearest whole number" if template.decimals == 0 else f"{template.decimals} decimal place{'s' if template.decimals > 1 else ''}"
        rule = f"Round to {unit}; answers within {tolerance:g} of the rounded value are accepted."
    slots = {f"s{i}": describe_nested(world, w) for i, w in enumerate(walks)}
    question = template.question.format(**slots)
    facts = [
        {"docs": w.doc_path(world), "titles": w.titles(world), "column": column, "value": v, "display": display_value(column, v)}
        for w, (_, _, column), v in zip(fact_walks, template.facts, values, strict=False)
    ]
    return {
        "difficulty": difficulty,
        "template": template.name,
        "hops": hops,
        "question": f"{question[0].upper()}{question[1:]} {rule}",
        "answer": {
            "type": "number",
            "value": float(value) if template.decimals else int(Decimal(value)),
            "tolerance": tolerance,
            "decimals": template.decimals or 0,
        },
        "solution": {"facts": facts, "expression": template.expression.format(**{f"f{i}": v for i, v in enumerate(values)})},
        # the same entity in two slots makes a trivial question ("A divided by A")
        "degenerate": len({w.end for w in walks}) < len(walks) or (template.decimals is not None and exact == 0),
    }
