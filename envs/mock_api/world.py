"""The helpdesk's data: a seeded world of support agents, customers, tickets and comments.

A world is a function of its seed alone, so a task stores only the seed and the changes it
expects. Ids live in separate ranges per table (agents 1.., customers 1001.., tickets 5001..,
comments 90001..) so an id used in the wrong place is an error, not a silent match. Timestamps
are logical: ``EPOCH`` is "now" at the start of every episode and the session clock moves on
from there, so nothing depends on the wall clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agentgym.envs.names import FIRST_NAMES, LAST_NAMES

__all__ = ["EPOCH", "PRIORITIES", "SPAM_FAMILIES", "STATUSES", "TABLES", "TEAMS", "TIERS", "World", "draw_subject", "generate_world", "timestamp"]

Record = dict[str, Any]

TABLES = ("agents", "customers", "tickets", "comments")
FIRST_IDS = {"agents": 1, "customers": 1001, "tickets": 5001, "comments": 90001}
STATUSES = ("new", "open", "pending", "solved", "closed")
PRIORITIES = ("low", "normal", "high", "urgent")
TEAMS = ("billing", "technical", "accounts")
TIERS = ("free", "pro", "enterprise")
EPOCH = datetime(2025, 6, 2, 9, 0, tzinfo=UTC)

AGENT_NAMES = [
    "Dana Ortiz",
    "Samir Haddad",
    "Lena Vogel",
    "Marcus Reed",
    "Priya Natarajan",
    "Tomas Novak",
    "Aiko Tanaka",
    "Grace Mbeki",
    "Olivier Dubois",
    "Hannah Kowalski",
    "Rafael Souza",
    "Ingrid Larsen",
]
COMPANIES = ["acme.io", "globex.com", "initech.net", "umbrella.org", "hooli.dev", "vandelay.biz", "stark.co", "wonka.shop"]

# (subject template, tags); placeholders are filled from FILLERS so most subjects are unique.
TOPICS = [
    ("Cannot log in after password reset", ["login"]),
    ("Invoice INV-{n} charged twice", ["billing"]),
    ("Refund for order #{n} not received", ["billing", "refund"]),
    ("App crashes when uploading {file}", ["bug", "mobile"]),
    ("API returns 500 on /v2/{resource}", ["api", "bug"]),
    ("Feature request: {feature}", ["feature-request"]),
    ("Update billing address for account {n}", ["account", "billing"]),
    ("Two-factor codes not arriving", ["2fa", "login"]),
    ("CSV export is missing the {column} column", ["bug", "export"]),
    ("Webhook deliveries delayed by {m} minutes", ["api", "performance"]),
    ("Please cancel subscription SUB-{n}", ["billing", "cancellation"]),
    ("Dashboard takes {m} seconds to load", ["performance"]),
    ("SSO login fails with {idp}", ["login", "sso"]),
    ("Data import stuck at {pct}%", ["bug", "import"]),
    ("Add {m} seats to our plan", ["account", "sales"]),
    ("Password reset email never arrives", ["email", "login"]),
]
FILLERS = {
    "file": ["PDF invoices", "large photos", "a CSV file", "voice notes", "ZIP archives"],
    "resource": ["orders", "invoices", "contacts", "reports", "webhooks"],
    "feature": ["dark mode", "bulk export", "calendar sync", "custom fields", "audit log", "Slack alerts"],
    "column": ["email", "created date", "owner", "status", "currency"],
    "idp": ["Okta", "Azure AD", "Google Workspace", "OneLogin"],
}
# Spam arrives in families that share a phrase, so "delete every ticket mentioning X" has a clear answer.
SPAM_FAMILIES = {
    "free cruise": ["WIN a FREE CRUISE today!!!", "Last chance: free cruise for two", "Your free cruise voucher is waiting"],
    "gift card": ["You were selected for a $500 gift card", "Claim your gift card before midnight", "Gift card reward inside"],
    "crypto giveaway": ["Crypto giveaway: double your coins", "Official crypto giveaway, act now", "Exclusive crypto giveaway for you"],
    "cheap watches": ["Cheap watches, 90% off", "Designer replicas: cheap watches", "Cheap watches shipped free"],
}
COMMENT_BODIES = [
    "Thanks for reaching out, we are looking into it.",
    "Could you send us a screenshot of the error?",
    "We reproduced the problem and escalated it to engineering.",
    "The fix has been deployed; please confirm it works for you.",
    "I have updated your account settings as requested.",
]


def timestamp(seconds_from_epoch: float) -> str:
    """ISO-8601 UTC time ``seconds_from_epoch`` after (or before) the logical epoch, to the second."""
    return (EPOCH + timedelta(seconds=round(seconds_from_epoch))).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class World:
    """All records of one helpdesk, by table and id, plus the id counters and the API key.

    Attributes:
        tables: ``{"agents": {id: record}, "customers": ..., "tickets": ..., "comments": ...}``.
        next_id: the id the next created record of each table gets.
        api_key: the key that ``POST /auth/token`` accepts.
    """

    tables: dict[str, dict[int, Record]]
    next_id: dict[str, int] = field(default_factory=dict)
    api_key: str = ""

    def copy(self) -> World:
        """An independent deep copy (episodes mutate their world)."""
        # Records are flat except for their tag lists; this is ~10x faster than copy.deepcopy.
        tables = {name: {i: {k: list(v) if isinstance(v, list) else v for k, v in r.items()} for i, r in rows.items()} for name, rows in self.tables.items()}
        return World(tables, dict(self.next_id), self.api_key)

    def add(self, table: str, record: Record) -> Record:
        """Insert ``record`` under the table's next id and return it (with its ``id``)."""
        record = {"id": self.next_id[table], **record}
        self.tables[table][record["id"]] = record
        self.next_id[table] += 1
        return record

    @property
    def agents(self) -> dict[int, Record]:
        return self.tables["agents"]

    @property
    def customers(self) -> dict[int, Record]:
        return self.tables["customers"]

    @property
    def tickets(self) -> dict[int, Record]:
        return self.tables["tickets"]

    @property
    def comments(self) -> dict[int, Record]:
        return self.tables["comments"]


def generate_world(seed: int) -> World:
    """The world of ``seed``: 7-9 agents, 50-70 customers, ~200 tickets with spam and duplicates."""
    rng = random.Random(seed)
    world = World({t: {} for t in TABLES}, dict(FIRST_IDS), f"dk_live_{rng.getrandbits(64):016x}")
    _agents(rng, world)
    _customers(rng, world)
    _tickets(rng, world)
    return world


def _agents(rng: random.Random, world: World) -> None:
    names = rng.sample(AGENT_NAMES, rng.randint(7, 9))
    inactive = rng.randrange(len(names)) if rng.random() < 0.6 else None
    for index, name in enumerate(names):
        first, last = name.lower().split(" ")
        world.add(
            "agents",
            {
                "name": name,
                "email": f"{first}.{last}@support.deskly.example",
                "team": TEAMS[index % len(TEAMS)] if index < len(TEAMS) else rng.choice(TEAMS),
                "active": index != inactive,
            },
        )


def _customers(rng: random.Random, world: World) -> None:
    pairs = rng.sample([(f, la) for f in FIRST_NAMES for la in LAST_NAMES], rng.randint(50, 70))
    for n, (first, last) in enumerate(pairs):
        world.add(
            "customers",
            {
                "name": f"{first} {last}",
                "email": f"{first}.{last}@{rng.choice(COMPANIES)}".lower(),
                "tier": rng.choices(TIERS, weights=[50, 35, 15])[0],
                "created_at": timestamp(-86400 * 400 + n * 5000 + rng.randrange(3000)),
            },
        )


def draw_subject(rng: random.Random) -> tuple[str, list[str]]:
    """A support-ticket subject and its topic tags, drawn like the world's own tickets."""
    template, tags = rng.choice(TOPICS)
    values = {key: rng.choice(options) for key, options in FILLERS.items()}
    return template.format(n=rng.randrange(10000, 100000), m=rng.randrange(5, 95), pct=rng.randrange(5, 100), **values), list(tags)


def _tickets(rng: random.Random, world: World) -> None:
    active = [a["id"] for a in world.agents.values() if a["active"]]
    everyone = list(world.agents)
    customers = list(world.customers)
    drafts: list[Record] = []
    for _ in range(rng.randint(170, 220)):
        subject, tags = draw_subject(rng)
        status = rng.choices(STATUSES, weights=[12, 28, 15, 25, 20])[0]
        # Inactive agents keep only finished work; new tickets are not assigned yet.
        assignee = None if status == "new" else rng.choice(everyone if status in ("solved", "closed") else active)
        extra = ["vip"] if rng.random() < 0.1 else []
        drafts.append(
            {
                "subject": subject,
                "status": status,
                "priority": rng.choices(PRIORITIES, weights=[20, 45, 25, 10])[0],
                "requester_id": rng.choice(customers),
                "assignee_id": assignee,
                "tags": sorted(set(tags + extra)),
            }
        )
    for family in rng.sample(sorted(SPAM_FAMILIES), 2):
        for subject in rng.sample(SPAM_FAMILIES[family], rng.randint(1, 3)):
            spam = {"subject": subject, "status": "new", "priority": "normal", "requester_id": rng.choice(customers), "assignee_id": None, "tags": []}
            drafts.insert(rng.randrange(len(drafts) + 1), spam)
    # Duplicates: the same customer filed the same open issue again later.
    originals = rng.sample([d for d in drafts if d["status"] in ("new", "open") and d["tags"]], rng.randint(3, 5))
    drafts += [dict(d, status="new", assignee_id=None) for d in originals]
    start = -86400 * 60
    for n, draft in enumerate(drafts):
        created = start + n * 20000 + rng.randrange(15000)
        ticket = world.add(
            "tickets",
            {
                **{k: draft[k] for k in ("subject", "status", "priority", "requester_id", "assignee_id")},
                "tags": list(draft["tags"]),
                "description": f"Reported via the web form: {draft['subject'].lower()}.",
                "created_at": timestamp(created),
                "updated_at": timestamp(created + rng.randrange(1, 80000)),
            },
        )
        if ticket["status"] != "new":
            for k in range(rng.randint(0, 2)):
                world.add(
                    "comments",
                    {
                        "ticket_id": ticket["id"],
                        "body": rng.choice(COMMENT_BODIES),
                        "public": rng.random() < 0.8,
                        "author_id": ticket["assignee_id"],
                        "created_at": timestamp(created + 3600 * (k + 1)),
                    },
                )
