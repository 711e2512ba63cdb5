"""SearchQA-v0 tasks: multi-hop questions over the world, answered from the articles.

A task is a random walk from a named entity (or from "the film that won award A in year Y")
followed by a question about an attribute of the entity the walk ends at. Difficulty is the hop
count: easy 1-2, medium 3-4, hard 5-7. Short walks read as one nested phrase ("In what year was
the founder of the company Kestrel Pictures born?"); long ones as numbered steps.

Each task carries its solution for the oracle: the documents to read in order, their titles, and
the answer as the last article writes it.
"""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.knowledge.articles import display_value
from agentgym.envs.knowledge.world import World
from agentgym.tasks.build.knowledge.relations import Walk, describe_chain, describe_nested, random_walk

__all__ = ["ATTRIBUTES", "DIFFICULTY_HOPS", "question_about", "search_tasks"]

DIFFICULTY_HOPS = {"easy": (1, 2), "medium": (3, 4), "hard": (5, 7)}
TASKS_PER_DIFFICULTY = 200

# table -> [(column, nested question with {x}, question about "that ..." after a chain)]
ATTRIBUTES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "people": (
        ("birth_year", "In what year was {x} born?", "In what year was that person born?"),
        ("name", "Who is {x}? Give the full name.", "What is that person's full name?"),
        ("occupation", "What is the occupation of {x}?", "What is that person's occupation?"),
    ),
    "cities": (
        ("population", "What is the population of {x}?", "What is that city's population?"),
        ("founded_year", "In what year was {x} founded?", "In what year was that city founded?"),
        ("elevation_m", "How many metres above sea level does {x} lie?", "How many metres above sea level does that city lie?"),
        ("name", "What is the name of {x}?", "What is that city's name?"),
    ),
    "countries": (
        ("population", "What is the population of {x}?", "What is that country's population?"),
        ("area_km2", "What is the land area of {x} in square kilometres?", "What is that country's land area in square kilometres?"),
        ("founded_year", "In what year did {x} gain independence?", "In what year did that country gain independence?"),
        ("currency", "What is the currency of {x}?", "What is that country's currency?"),
        ("name", "What is the name of {x}?", "What is that country's name?"),
    ),
    "companies": (
        ("founded_year", "In what year was {x} founded?", "In what year was that company founded?"),
        ("employees", "How many people does {x} employ?", "How many people does that company employ?"),
        ("name", "What is the name of {x}?", "What is that company's name?"),
    ),
    "universities": (
        ("founded_year", "In what year was {x} founded?", "In what year was that university founded?"),
        ("students", "How many students does {x} enroll?", "How many students does that university enroll?"),
        ("name", "What is the name of {x}?", "What is that university's name?"),
    ),
    "works": (
        ("year", "In what year was {x} released?", "In what year was that work released?"),
        ("title", "What is the title of {x}?", "What is that work's title?"),
        ("genre", "What is the genre of {x}?", "What is that work's genre?"),
    ),
}


def question_about(world: World, walk: Walk, attribute: tuple[str, str, str]) -> str:
    """The question text: one nested phrase for short walks, numbered steps for long ones."""
    _, nested, after_chain = attribute
    if walk.hop_count <= 2:
        return nested.format(x=describe_nested(world, walk))
    return f"{describe_chain(world, walk)} {after_chain}"


def search_tasks(world: World, rng: random.Random) -> list[dict[str, Any]]:
    """``TASKS_PER_DIFFICULTY`` distinct tasks per difficulty, in generation order (no ids yet)."""
    tasks: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for difficulty, (low, high) in DIFFICULTY_HOPS.items():
        made = 0
        while made < TASKS_PER_DIFFICULTY:
            walk = random_walk(rng, world, rng.randint(low, high))
            if walk is None or not low <= walk.hop_count <= high:
                continue
            attribute = rng.choice(ATTRIBUTES[walk.end[0]])
            key = (walk.nodes, walk.ceremony, attribute[0])
            if key in seen:
                continue
            seen.add(key)
            tasks.append(_task(world, walk, attribute, difficulty))
            made += 1
    return tasks


def _task(world: World, walk: Walk, attribute: tuple[str, str, str], difficulty: str) -> dict[str, Any]:
    column = attribute[0]
    value = world.get(*walk.end)[column]
    answer: dict[str, Any] = {"type": "number", "value": value, "tolerance": 0} if isinstance(value, int) else {"type": "text", "value": value}
    return {
        "difficulty": difficulty,
        "hops": walk.hop_count,
        "question": question_about(world, walk, attribute),
        "answer": answer,
        "solution": {"docs": walk.doc_path(world), "titles": walk.titles(world), "answer_text": display_value(column, value)},
    }
