"""The world's relations as a graph of one-to-one hops, and random walks over it for multi-hop questions.

Every hop is functional (a film has one director, a city lies in one country), so a chain of hops
from a named entity designates exactly one entity. Each hop is stated in the source entity's
article, so one article read per hop is always enough. A walk never revisits an entity, which
rules out trivial loops such as "the country whose capital is the capital of X".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentgym.envs.knowledge.articles import ENTITY_TABLES, doc_id_of
from agentgym.envs.knowledge.world import World

__all__ = ["HOPS", "Hop", "Node", "Walk", "describe_anchor", "describe_ceremony", "describe_chain", "describe_nested", "extend", "random_walk"]

Node = tuple[str, int]  # (table, id)


@dataclass(frozen=True)
class Hop:
    """A relation from rows of ``source`` to rows of ``target`` through ``column``.

    ``phrase`` describes the target given the source's description ``{x}`` (nested form);
    ``step`` is the same hop as an instruction in a chain ("take its founder").
    """

    name: str
    source: str
    column: str
    target: str
    phrase: str
    step: str


HOPS: tuple[Hop, ...] = (
    Hop("publisher", "works", "publisher_id", "companies", "the company that released {x}", "the company that released it"),
    Hop("creator", "works", "creator_id", "people", "the creator of {x}", "the person who made it"),
    Hop("birth_city", "people", "birth_city_id", "cities", "the city where {x} was born", "the city where that person was born"),
    Hop("university", "people", "university_id", "universities", "the university {x} attended", "the university that person attended"),
    Hop("country", "cities", "country_id", "countries", "the country {x} lies in", "the country that city lies in"),
    Hop("capital", "countries", "capital_city_id", "cities", "the capital of {x}", "that country's capital"),
    Hop("headquarters", "companies", "hq_city_id", "cities", "the city where {x} is headquartered", "the city where that company is headquartered"),
    Hop("founder", "companies", "founder_id", "people", "the founder of {x}", "that company's founder"),
    Hop("ceo", "companies", "ceo_id", "people", "the chief executive of {x}", "that company's chief executive"),
    Hop("campus", "universities", "city_id", "cities", "the city where {x} is located", "the city where that university is located"),
    Hop("presenter", "awards", "country_id", "countries", "the country that presents {x}", "the country that presents that award"),
)
_PREFIX = {"countries": "the country ", "cities": "the city of ", "universities": "", "people": "", "companies": "the company ", "awards": "the "}


@dataclass(frozen=True)
class Walk:
    """A chain from a named anchor (or an award ceremony) through ``hops`` to ``end``.

    ``nodes`` lists every entity visited, anchor first; ``ceremony`` is ``(award_id, year)``
    when the walk starts from "the work that won award A in year Y" (itself one hop).
    """

    nodes: tuple[Node, ...]
    hops: tuple[Hop, ...]
    ceremony: tuple[int, int] | None

    @property
    def end(self) -> Node:
        """The entity the chain designates."""
        return self.nodes[-1]

    @property
    def hop_count(self) -> int:
        """Relations followed, counting the award ceremony as one."""
        return len(self.hops) + (1 if self.ceremony else 0)

    def titles(self, world: World) -> list[str]:
        """Titles of the documents of :meth:`doc_path`, in the same order."""
        award = [world.get("awards", self.ceremony[0])["name"]] if self.ceremony else []
        return award + [world.get(*node)[ENTITY_TABLES[node[0]]] for node in self.nodes]

    def doc_path(self, world: World) -> list[str]:
        """Document ids to read in order: the award (if any), then each entity of the chain."""
        docs = [doc_id_of(world, "awards", self.ceremony[0])] if self.ceremony else []
        return docs + [doc_id_of(world, table, row_id) for table, row_id in self.nodes]


def describe_anchor(world: World, node: Node) -> str:
    """A noun phrase naming an entity, with its kind when the name alone would not say it."""
    table, row_id = node
    row = world.get(table, row_id)
    prefix = f"the {row['kind']} " if table == "works" else _PREFIX[table]
    return prefix + row[ENTITY_TABLES[table]]


def describe_ceremony(world: World, award_id: int, year: int) -> str:
    """``the film that won the Golden X Award in 1987``."""
    award = world.get("awards", award_id)
    return f"the {award['kind']} that won the {award['name']} in {year}"


def random_walk(rng: random.Random, world: World, hops: int) -> Walk | None:
    """A walk of exactly ``hops`` hops from a random anchor, or ``None`` when this draw dead-ends.

    With probability 1/3 the walk starts at an award ceremony.
    """
    tables = tuple(t for t in ENTITY_TABLES if any(h.source == t for h in HOPS))
    ceremony = None
    if rng.random() < 1 / 3:
        win = rng.choice(world.tables["award_winners"])
        ceremony = (win["award_id"], win["year"])
        node: Node = ("works", win["work_id"])
        remaining = hops - 1
    else:
        table = rng.choice(tables)
        node = (table, rng.choice(world.tables[table])["id"])
        remaining = hops
    nodes, taken = [node], []
    for _ in range(remaining):
        options = []
        for hop in HOPS:
            if hop.source != nodes[-1][0]:
                continue
            target_id = world.get(hop.source, nodes[-1][1])[hop.column]
            if target_id is not None and (hop.target, target_id) not in nodes:
                options.append((hop, (hop.target, target_id)))
        if not options:
            return None
        hop, nxt = rng.choice(options)
        taken.append(hop)
        nodes.append(nxt)
    if not taken and ceremony is None:
        return None
    return Walk(tuple(nodes), tuple(taken), ceremony)


def describe_nested(world: World, walk: Walk) -> str:
    """The walk's end as one nested noun phrase ("the founder of the company that released ...")."""
    text = describe_ceremony(world, *walk.ceremony) if walk.ceremony else describe_anchor(world, walk.nodes[0])
    for hop in walk.hops:
        text = hop.phrase.format(x=text)
    return text


def describe_chain(world: World, walk: Walk) -> str:
    """The walk as numbered steps ("Start from X. 1. Take ... 2. Take ..."), for long chains."""
    start = describe_ceremony(world, *walk.ceremony) if walk.ceremony else describe_anchor(world, walk.nodes[0])
    steps = [f"Start from {start}."] + [f"Step {i}: take {hop.step}." for i, hop in enumerate(walk.hops, 1)]
    return " ".join(steps)


def extend(world: World, walk: Walk, hop_names: tuple[str, ...]) -> Walk:
    """``walk`` followed by the named hops (which must exist from its end; revisits allowed)."""
    nodes, hops = list(walk.nodes), list(walk.hops)
    for name in hop_names:
        hop = next(h for h in HOPS if h.name == name and h.source == nodes[-1][0])
        target_id = world.get(*nodes[-1])[hop.column]
        if target_id is None:
            raise ValueError(f"{nodes[-1]} has no {name}")
        nodes.append((hop.target, target_id))
        hops.append(hop)
    return Walk(tuple(nodes), tuple(hops), walk.ceremony)
