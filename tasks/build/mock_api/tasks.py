"""Deterministic generator of the MockAPI-v0 task set.

Each task names a world (its seed), a template and its parameters, the instruction the agent
reads, and the changes the final state must show (see :mod:`agentgym.envs.mock_api.grading`).
The expected changes are computed here from the world's data, never by running a policy, so
the oracle solving every task is an independent check of both.

    python -m agentgym.tasks.build.mock_api.tasks tasks/mock_api   # rewrites train/val/test.jsonl
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentgym.envs.mock_api.service import LIVE_STATUSES
from agentgym.envs.mock_api.spec import DEFAULT_PER_PAGE
from agentgym.envs.mock_api.world import COMPANIES, FIRST_NAMES, LAST_NAMES, SPAM_FAMILIES, TIERS, World, draw_subject, generate_world
from agentgym.tasks.build import folder_parser, split_seeded, write_splits

__all__ = ["TEMPLATES", "difficulty_of", "generate", "write"]

SEED = 20250602
N_TASKS = 440
Task = dict[str, Any]
REPLIES = [
    "We reset your session; please log in again and tell us if it works.",
    "Our engineers deployed a fix. Could you confirm the problem is gone?",
    "Which browser and version are you using? That will help us reproduce it.",
    "The refund was issued today and should arrive within 5 business days.",
    "We escalated this to the billing team and will update you shortly.",
]


def _pages(count: int) -> int:
    """List calls needed to read ``count`` matches at the default page size (at least one)."""
    return max(1, math.ceil(count / DEFAULT_PER_PAGE))


def _live(world: World, **match: Any) -> list[dict[str, Any]]:
    return [t for t in world.tickets.values() if t["status"] in LIVE_STATUSES and all(t[k] == v for k, v in match.items())]


def _active_agents(world: World) -> list[dict[str, Any]]:
    return [a for a in world.agents.values() if a["active"]]


def _create_ticket(rng: random.Random, world: World) -> Task | None:
    customer = rng.choice(list(world.customers.values()))
    subject, tags = draw_subject(rng)
    priority = rng.choice(["low", "normal", "high", "urgent"])
    tag_text = " and ".join(f'"{t}"' for t in tags)
    return {
        "params": {"customer_email": customer["email"], "subject": subject, "priority": priority, "tags": tags},
        "instruction": f'Customer {customer["email"]} reports: "{subject}". Open a ticket for them with exactly that subject, '
        f"priority {priority} and the tag{'s' if len(tags) > 1 else ''} {tag_text}.",
        "expected": {
            "created": {
                "tickets": [
                    {"subject": subject, "requester_email": customer["email"], "priority": priority, "status": "new", "assignee_id": None, "tags": sorted(tags)}
                ]
            }
        },
        "min_calls": 3,
    }


def _assign_ticket(rng: random.Random, world: World) -> Task | None:
    ticket = rng.choice(_live(world))
    agent = rng.choice([a for a in _active_agents(world) if a["id"] != ticket["assignee_id"]])
    return {
        "params": {"ticket_id": ticket["id"], "agent_name": agent["name"]},
        "instruction": f"Assign ticket #{ticket['id']} to {agent['name']} and set its status to open.",
        "expected": {"updated": {"tickets": {str(ticket["id"]): {"assignee_id": agent["id"], "status": "open"}}}},
        "min_calls": 3,
    }


def _update_customer(rng: random.Random, world: World) -> Task | None:
    customer = rng.choice([c for c in world.customers.values() if c["tier"] != "enterprise"])
    tier = rng.choice([t for t in TIERS if TIERS.index(t) > TIERS.index(customer["tier"])])
    local, _, _ = customer["email"].partition("@")
    new_email = f"{local}@{rng.choice([c for c in COMPANIES if not customer['email'].endswith(c)])}"
    if any(c["email"] == new_email for c in world.customers.values()):
        return None
    return {
        "params": {"old_email": customer["email"], "new_email": new_email, "tier": tier},
        "instruction": f"Customer {customer['name']} ({customer['email']}) changed jobs: their email is now {new_email}, "
        f"and they upgraded to the {tier} plan. Update their customer record.",
        "expected": {"updated": {"customers": {str(customer["id"]): {"email": new_email, "tier": tier}}}},
        "min_calls": 3,
    }


def _unique_ticket(world: World, customer_id: int, statuses: tuple[str, ...]) -> list[dict[str, Any]]:
    """A customer's tickets in ``statuses`` whose subject matches no other ticket of theirs."""
    own = [t for t in world.tickets.values() if t["requester_id"] == customer_id]
    return [t for t in own if t["status"] in statuses and sum(t["subject"].lower() in o["subject"].lower() for o in own) == 1]


def _reply_and_pend(rng: random.Random, world: World) -> Task | None:
    customer = rng.choice(list(world.customers.values()))
    candidates = [t for t in _unique_ticket(world, customer["id"], ("new", "open")) if t["tags"]]  # no replies to spam
    if not candidates:
        return None
    ticket = rng.choice(candidates)
    reply = rng.choice(REPLIES)
    return {
        "params": {"customer_email": customer["email"], "subject": ticket["subject"], "reply": reply},
        "instruction": f'Reply publicly on the ticket "{ticket["subject"]}" from {customer["email"]} with exactly this text: '
        f'"{reply}" Then set that ticket to pending.',
        "expected": {
            "created": {"comments": [{"ticket_id": ticket["id"], "body": reply, "public": True}]},
            "updated": {"tickets": {str(ticket["id"]): {"status": "pending"}}},
        },
        "min_calls": 5,
    }


def _escalate_customer(rng: random.Random, world: World) -> Task | None:
    customer = rng.choice(list(world.customers.values()))
    live = _live(world, requester_id=customer["id"])
    changing = [t for t in live if t["priority"] != "urgent"]
    if not 2 <= len(live) <= 12 or not changing:
        return None
    return {
        "params": {"customer_email": customer["email"]},
        "instruction": f"Customer {customer['email']} is escalating. Set every one of their new, open or pending tickets to urgent priority; "
        "leave their other tickets as they are.",
        "expected": {"updated": {"tickets": {str(t["id"]): {"priority": "urgent"} for t in changing}}},
        "min_calls": 3 + _pages(len(live)),
    }


def _delete_spam(rng: random.Random, world: World) -> Task | None:
    phrase = rng.choice([p for p in sorted(SPAM_FAMILIES) if any(p in t["subject"].lower() for t in world.tickets.values())])
    spam = sorted(t["id"] for t in world.tickets.values() if phrase in t["subject"].lower())
    return {
        "params": {"phrase": phrase},
        "instruction": f'Spam is flooding the queue: delete every ticket whose subject contains "{phrase}" (any capitalisation). '
        "Leave every other ticket alone.",
        "expected": {"deleted": {"tickets": spam, "comments": sorted(c["id"] for c in world.comments.values() if c["ticket_id"] in spam)}},
        "min_calls": 1 + _pages(len(spam)) + len(spam),
    }


def _close_solved(rng: random.Random, world: World) -> Task | None:
    tag = rng.choice(sorted({tag for t in world.tickets.values() for tag in t["tags"]}))
    solved = [t for t in world.tickets.values() if t["status"] == "solved" and tag in t["tags"]]
    if not 2 <= len(solved) <= 25:
        return None
    return {
        "params": {"tag": tag},
        "instruction": f'Close every solved ticket tagged "{tag}".',
        "expected": {"updated": {"tickets": {str(t["id"]): {"status": "closed"} for t in solved}}},
        "min_calls": 2 + _pages(len(solved)),
    }


def _handover(rng: random.Random, world: World) -> Task | None:
    leaving = rng.choice(_active_agents(world))
    queue = _live(world, assignee_id=leaving["id"])
    if not 3 <= len(queue) <= 40:
        return None
    successor = rng.choice([a for a in _active_agents(world) if a["id"] != leaving["id"]])
    return {
        "params": {"leaving_name": leaving["name"], "successor_name": successor["name"]},
        "instruction": f"{leaving['name']} is leaving the support team. Reassign all of their new, open and pending tickets to "
        f"{successor['name']}, then deactivate {leaving['name']}'s agent account.",
        "expected": {
            "updated": {"tickets": {str(t["id"]): {"assignee_id": successor["id"]} for t in queue}, "agents": {str(leaving["id"]): {"active": False}}}
        },
        "min_calls": 5 + _pages(len(queue)),
    }


def _new_customer_ticket(rng: random.Random, world: World) -> Task | None:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    email = f"{first}.{last}@{rng.choice(COMPANIES)}".lower()
    if any(c["name"] == f"{first} {last}" or c["email"] == email for c in world.customers.values()):
        return None
    tier = rng.choice(TIERS)
    subject, _ = draw_subject(rng)
    priority = rng.choice(["normal", "high", "urgent"])
    agent = rng.choice(_active_agents(world))
    return {
        "params": {"name": f"{first} {last}", "email": email, "tier": tier, "subject": subject, "priority": priority, "agent_name": agent["name"]},
        "instruction": f'A new customer, {first} {last} <{email}> on the {tier} plan, called about "{subject}". Create the customer, '
        f"then open {'an' if priority == 'urgent' else 'a'} {priority}-priority ticket for them with exactly that subject, assigned to {agent['name']}.",
        "expected": {
            "created": {
                "customers": [{"name": f"{first} {last}", "email": email, "tier": tier}],
                "tickets": [{"subject": subject, "requester_email": email, "priority": priority, "status": "open", "assignee_id": agent["id"], "tags": []}],
            }
        },
        "min_calls": 4,
    }


def _merge_duplicate(rng: random.Random, world: World) -> Task | None:
    pairs = []
    for customer in world.customers.values():
        own = [t for t in world.tickets.values() if t["requester_id"] == customer["id"]]
        for t in own:
            same = [o for o in own if t["subject"].lower() in o["subject"].lower()]
            if len(same) == 2 and same[0]["id"] == t["id"] and same[0]["subject"] == same[1]["subject"] and same[0]["status"] != "closed":
                pairs.append((customer, same[0], same[1]))
    if not pairs:
        return None
    customer, older, newer = rng.choice(pairs)
    note = f"Merged duplicate #{newer['id']}."
    return {
        "params": {"customer_email": customer["email"], "subject": older["subject"]},
        "instruction": f'{customer["email"]} filed the ticket "{older["subject"]}" twice. Keep the older ticket: add a private comment '
        '"Merged duplicate #<id of the newer ticket>." to it and add the tag "merged" (keeping its other tags). '
        "Then delete the newer ticket.",
        "expected": {
            "created": {"comments": [{"ticket_id": older["id"], "body": note, "public": False}]},
            "updated": {"tickets": {str(older["id"]): {"tags": sorted({*older["tags"], "merged"})}}},
            "deleted": {"tickets": [newer["id"]], "comments": sorted(c["id"] for c in world.comments.values() if c["ticket_id"] == newer["id"])},
        },
        "min_calls": 6,
    }


def _triage_urgent(rng: random.Random, world: World) -> Task | None:
    waiting = [t for t in world.tickets.values() if t["status"] == "new" and t["priority"] == "urgent" and t["assignee_id"] is None]
    if not 1 <= len(waiting) <= 30:
        return None
    agent = rng.choice(_active_agents(world))
    return {
        "params": {"agent_name": agent["name"]},
        "instruction": f"Triage: assign every new, unassigned ticket with urgent priority to {agent['name']} and set each of them to open.",
        "expected": {"updated": {"tickets": {str(t["id"]): {"assignee_id": agent["id"], "status": "open"} for t in waiting}}},
        "min_calls": 3 + _pages(len(waiting)),
    }


TEMPLATES: dict[str, Callable[[random.Random, World], Task | None]] = {
    "create_ticket": _create_ticket,
    "assign_ticket": _assign_ticket,
    "update_customer": _update_customer,
    "reply_and_pend": _reply_and_pend,
    "escalate_customer": _escalate_customer,
    "delete_spam": _delete_spam,
    "close_solved": _close_solved,
    "handover": _handover,
    "new_customer_ticket": _new_customer_ticket,
    "merge_duplicate": _merge_duplicate,
    "triage_urgent": _triage_urgent,
}


def difficulty_of(min_calls: int) -> str:
    """``easy`` (at most 3 calls), ``medium`` (4-5) or ``hard`` (6 or more), without faults."""
    return "easy" if min_calls <= 3 else "medium" if min_calls <= 5 else "hard"


def _task(rng: random.Random, index: int, template: str) -> Task:
    while True:  # rejection sampling over worlds; seeded, so deterministic
        world_seed = rng.getrandbits(32)
        drawn = TEMPLATES[template](random.Random(world_seed ^ index), generate_world(world_seed))
        if drawn is not None:
            break
    return {"task_id": f"mock_api-{index:04d}", "template": template, "difficulty": difficulty_of(drawn["min_calls"]), "world_seed": world_seed, **drawn}


def generate(seed: int = SEED, n_tasks: int = N_TASKS) -> dict[str, list[Task]]:
    """All tasks by split, templates in equal shares. Same seed, same tasks, byte for byte."""
    rng = random.Random(seed)
    names = sorted(TEMPLATES)
    tasks = [_task(rng, index, names[index % len(names)]) for index in range(n_tasks)]
    return split_seeded(tasks, rng)


def write(folder: str | Path, seed: int = SEED, n_tasks: int = N_TASKS) -> list[Path]:
    """Write ``{train,val,test}.jsonl`` into ``folder``; returns their paths."""
    return write_splits(folder, generate(seed, n_tasks))


def main(argv: Sequence[str] | None = None) -> None:
    parser = folder_parser(__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--n-tasks", type=int, default=N_TASKS)
    args = parser.parse_args(argv)
    write(args.folder, args.seed, args.n_tasks)


if __name__ == "__main__":
    main()
